// npz.cpp - .npz = zip archive of .npy members (PKWARE APPNOTE 6.3: local headers, central
// directory, end-of-central-directory record).
//
// Reading: find the end record (scanning back over a possible comment), walk the central
// directory, checking each name against the arrays the caller wants and against the names
// before it, and take each member's sizes there (np.savez writes 0xFFFFFFFF in the local
// header and the real sizes in a zip64 extra field; the central directory has them plainly, or
// in its own zip64 extra field for members over 4 GiB). Then each local header must agree with
// its entry (name, method, CRC, sizes), each member's data must end before the central
// directory, and no two members may overlap: so many entries naming one member (a zip bomb by
// repetition) fail before any byte is copied, and the bytes CRC-checked and parsed are at most
// the file's size. Last, the CRCs, and the .npy payloads parsed. Writing: local header + payload per member, then the central
// directory and end record; no zip64 (the tool writes masks, far below 4 GiB).
// Checked by tests/cli/test_cli_inputs.py (np.savez archives read, our archives read by np.load,
// compressed archive rejected, bad mask arrays).
#include "npz.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "cli_error.h"
#include "regular_file.h"

namespace dilattn_cli {

uint32_t crc32(const unsigned char* data, size_t size) {
  // The table is built once; a function-local static is initialised thread-safely and never
  // written again.
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

namespace {

constexpr uint32_t kLocalSig = 0x04034b50u, kCentralSig = 0x02014b50u, kEndSig = 0x06054b50u;

// Bounds-checked little-endian reads over the archive bytes.
class Reader {
 public:
  Reader(const std::vector<unsigned char>& b, const std::string& name) : b_(b), name_(name) {}
  uint64_t u(size_t at, int bytes) const {
    if (at > b_.size() || b_.size() - at < static_cast<size_t>(bytes)) bad("truncated archive");
    uint64_t x = 0;
    for (int i = bytes - 1; i >= 0; --i) x = (x << 8) | b_[at + static_cast<size_t>(i)];
    return x;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail_input(name_ + ": bad .npz archive: " + what);
  }

 private:
  const std::vector<unsigned char>& b_;
  const std::string& name_;
};

void put(std::vector<unsigned char>* out, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<unsigned char>((x >> (8 * i)) & 0xff));
}

}  // namespace

namespace {

// One member as the central directory describes it.
struct Member {
  std::string name;  // as stored ("row_ptr.npy")
  std::string key;   // without ".npy" ("row_ptr")
  uint64_t flags = 0, method = 0, local = 0, size = 0, data_at = 0;
  uint32_t crc = 0;
};

std::string allowed_list(const std::vector<std::string>& allowed) {
  std::string out;
  for (const std::string& a : allowed) out += (out.empty() ? "" : ", ") + a;
  return out;
}

// The central directory's entries, each name checked against `allowed` and against the names
// before it as it is read: at most allowed.size() entries are accepted, whatever the count says.
std::vector<Member> read_central_directory(const std::vector<unsigned char>& b, const Reader& r,
                                           const std::string& path,
                                           const std::vector<std::string>& allowed,
                                           size_t* central_at) {
  // The end record is 22 bytes plus a comment of at most 65535 bytes.
  if (b.size() < 22) fail_input(path + ": not a .npz file (too short for a zip archive)");
  size_t end = b.size() - 22;
  const size_t lowest = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;
  while (r.u(end, 4) != kEndSig) {
    if (end == lowest) fail_input(path + ": not a .npz file (no zip end-of-directory record)");
    --end;
  }
  const uint64_t count = r.u(end + 10, 2);
  size_t at = r.u(end + 16, 4);
  if (count == 0xFFFF || at == 0xFFFFFFFFu) r.bad("zip64 archives with that many members are not read");
  if (at > end) r.bad("the central directory starts after its end record");
  *central_at = at;

  std::vector<Member> members;
  for (uint64_t m = 0; m < count; ++m) {
    if (at >= end || r.u(at, 4) != kCentralSig)
      r.bad("central directory entry " + std::to_string(m) + " is corrupt");
    Member e;
    e.flags = r.u(at + 8, 2);
    e.method = r.u(at + 10, 2);
    e.crc = static_cast<uint32_t>(r.u(at + 16, 4));
    uint64_t csize = r.u(at + 20, 4), usize = r.u(at + 24, 4);
    const size_t name_len = r.u(at + 28, 2), extra_len = r.u(at + 30, 2), comment_len = r.u(at + 32, 2);
    e.local = r.u(at + 42, 4);
    if (b.size() - (at + 46) < name_len + extra_len) r.bad("truncated central directory");
    e.name.assign(reinterpret_cast<const char*>(b.data() + at + 46), name_len);
    e.key = e.name;
    if (e.key.size() > 4 && e.key.compare(e.key.size() - 4, 4, ".npy") == 0) e.key.resize(e.key.size() - 4);
    // Names first: an archive of many entries fails at the first unwanted or repeated one,
    // before any member is read.
    bool wanted = false;
    for (const std::string& a : allowed) wanted = wanted || a == e.key;
    if (!wanted)
      fail_input(path + ": unexpected array '" + e.key + "' (allowed: " + allowed_list(allowed) + ")");
    // zipfile (and so np.load) would silently take the last of two members of one name.
    for (const Member& before : members)
      if (before.key == e.key) r.bad("member '" + e.key + "' appears twice");
    // Zip64 extra field (id 1): the 8-byte values present are those whose 32-bit field is full.
    for (size_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = r.u(x, 2), len = r.u(x + 2, 2);
      if (id == 1) {
        size_t p = x + 4;
        if (usize == 0xFFFFFFFFu) { usize = r.u(p, 8); p += 8; }
        if (csize == 0xFFFFFFFFu) { csize = r.u(p, 8); p += 8; }
        if (e.local == 0xFFFFFFFFu) { e.local = r.u(p, 8); }
      }
      x += 4 + len;
    }
    if (e.flags & 1u) r.bad("member '" + e.key + "' is encrypted");
    if (e.method != 0)
      fail_input(path + ": member '" + e.key + "' is compressed (zip method " +
                 std::to_string(e.method) + "); only stored members are read - save with np.savez, "
                 "not np.savez_compressed");
    if (csize != usize) r.bad("member '" + e.key + "' stored with differing sizes");
    e.size = usize;
    members.push_back(std::move(e));
    at += 46 + name_len + extra_len + comment_len;
  }
  return members;
}

// The member's local header says what the central directory says (name, method, and CRC and
// size unless they follow the data), and its data lies before the central directory.
void check_local_header(const std::vector<unsigned char>& b, const Reader& r, size_t central_at,
                        Member* e) {
  const std::string who = "member '" + e->key + "'";
  if (e->local >= central_at || r.u(e->local, 4) != kLocalSig) r.bad(who + " has no local header");
  const uint64_t flags = r.u(e->local + 6, 2), method = r.u(e->local + 8, 2);
  const size_t name_len = r.u(e->local + 26, 2), extra_len = r.u(e->local + 28, 2);
  const size_t name_at = e->local + 30;
  if (name_at > b.size() || b.size() - name_at < name_len + extra_len) r.bad(who + " is truncated");
  const std::string name(reinterpret_cast<const char*>(b.data() + name_at), name_len);
  if (name != e->name) r.bad(who + ": its local header names '" + name + "'");
  if (method != e->method) r.bad(who + ": its local header gives another zip method");
  e->data_at = name_at + name_len + extra_len;
  if (e->data_at > central_at || central_at - e->data_at < e->size)
    r.bad(who + " runs into the central directory");
  if (flags & 8u) return;  // CRC and sizes in a data descriptor after the data
  if (static_cast<uint32_t>(r.u(e->local + 14, 4)) != e->crc)
    r.bad(who + ": its local header gives another CRC-32");
  uint64_t csize = r.u(e->local + 18, 4), usize = r.u(e->local + 22, 4);
  for (size_t x = name_at + name_len; x + 4 <= name_at + name_len + extra_len;) {
    const uint64_t id = r.u(x, 2), len = r.u(x + 2, 2);
    if (id == 1) {  // in a local header the zip64 field holds both sizes (APPNOTE 4.5.3)
      if (usize == 0xFFFFFFFFu) usize = r.u(x + 4, 8);
      if (csize == 0xFFFFFFFFu) csize = r.u(x + 12, 8);
    }
    x += 4 + len;
  }
  if (usize != e->size || csize != e->size)
    r.bad(who + ": its local header gives " + std::to_string(usize) + " bytes, the central "
                "directory " + std::to_string(e->size));
}

}  // namespace

std::map<std::string, NpyArray> read_npz_file(const std::string& path,
                                              const std::vector<std::string>& allowed) {
  const std::vector<unsigned char> b = read_regular_file(path);
  const Reader r(b, path);
  size_t central_at = 0;
  std::vector<Member> members = read_central_directory(b, r, path, allowed, &central_at);
  for (Member& e : members) check_local_header(b, r, central_at, &e);
  // No two members share bytes, so the bytes read below are at most the file's size.
  std::vector<const Member*> by_offset;
  for (const Member& e : members) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Member* x, const Member* y) { return x->local < y->local; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->data_at + by_offset[i - 1]->size > by_offset[i]->local)
      r.bad("members '" + by_offset[i - 1]->key + "' and '" + by_offset[i]->key + "' overlap");

  std::map<std::string, NpyArray> arrays;
  for (const Member& e : members) {
    const unsigned char* payload = b.data() + e.data_at;
    if (crc32(payload, e.size) != e.crc) r.bad("member '" + e.key + "' fails its CRC-32 check");
    arrays[e.key] = parse_npy(std::vector<unsigned char>(payload, payload + e.size), path + ":" + e.key);
  }
  return arrays;
}

std::vector<unsigned char> serialize_npz(const std::map<std::string, NpyArray>& arrays) {
  std::vector<unsigned char> out, central;
  // 1980-01-01 00:00 in DOS time/date, as np.savez stamps its members.
  const uint32_t dos_time = 0, dos_date = (0u << 9) | (1u << 5) | 1u;
  for (const auto& [key, array] : arrays) {
    const std::vector<unsigned char> payload = serialize_npy(array);
    const std::string name = key + ".npy";
    const uint32_t crc = crc32(payload.data(), payload.size());
    const size_t offset = out.size();
    put(&out, kLocalSig, 4);
    put(&out, 20, 2);  // version needed: 2.0
    put(&out, 0, 2);   // flags
    put(&out, 0, 2);   // method: stored
    put(&out, dos_time, 2);
    put(&out, dos_date, 2);
    put(&out, crc, 4);
    put(&out, payload.size(), 4);
    put(&out, payload.size(), 4);
    put(&out, name.size(), 2);
    put(&out, 0, 2);   // extra length
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), payload.begin(), payload.end());

    put(&central, kCentralSig, 4);
    put(&central, 20, 2);  // version made by
    put(&central, 20, 2);  // version needed
    put(&central, 0, 2);
    put(&central, 0, 2);
    put(&central, dos_time, 2);
    put(&central, dos_date, 2);
    put(&central, crc, 4);
    put(&central, payload.size(), 4);
    put(&central, payload.size(), 4);
    put(&central, name.size(), 2);
    put(&central, 0, 2);  // extra length
    put(&central, 0, 2);  // comment length
    put(&central, 0, 2);  // disk number
    put(&central, 0, 2);  // internal attributes
    put(&central, 0, 4);  // external attributes
    put(&central, offset, 4);
    central.insert(central.end(), name.begin(), name.end());
  }
  const size_t central_at = out.size();
  out.insert(out.end(), central.begin(), central.end());
  put(&out, kEndSig, 4);
  put(&out, 0, 2);
  put(&out, 0, 2);
  put(&out, arrays.size(), 2);
  put(&out, arrays.size(), 2);
  put(&out, central.size(), 4);
  put(&out, central_at, 4);
  put(&out, 0, 2);  // comment length
  return out;
}

}  // namespace dilattn_cli
