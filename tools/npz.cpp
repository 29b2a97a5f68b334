// npz.cpp - .npz = zip archive of .npy members (PKWARE APPNOTE 6.3: local headers, central
// directory, end-of-central-directory record).
//
// Reading: find the end record (scanning back over a possible comment), walk the central
// directory, and for each member take its sizes there (np.savez writes 0xFFFFFFFF in the local
// header and the real sizes in a zip64 extra field; the central directory has them plainly, or
// in its own zip64 extra field for members over 4 GiB), skip the local header, check the CRC,
// and parse the .npy payload. Writing: local header + payload per member, then the central
// directory and end record; no zip64 (the tool writes masks, far below 4 GiB).
// Checked by tests/cli/test_cli_inputs.py (np.savez archives read, our archives read by np.load,
// compressed archive rejected, bad mask arrays).
#include "npz.h"

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

std::map<std::string, NpyArray> read_npz_file(const std::string& path) {
  const std::vector<unsigned char> b = read_regular_file(path);
  const Reader r(b, path);
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

  std::map<std::string, NpyArray> arrays;
  for (uint64_t m = 0; m < count; ++m) {
    if (r.u(at, 4) != kCentralSig) r.bad("central directory entry " + std::to_string(m) + " is corrupt");
    const uint64_t flags = r.u(at + 8, 2), method = r.u(at + 10, 2);
    const uint32_t crc = static_cast<uint32_t>(r.u(at + 16, 4));
    uint64_t csize = r.u(at + 20, 4), usize = r.u(at + 24, 4);
    const size_t name_len = r.u(at + 28, 2), extra_len = r.u(at + 30, 2), comment_len = r.u(at + 32, 2);
    uint64_t local = r.u(at + 42, 4);
    if (b.size() - (at + 46) < name_len + extra_len) r.bad("truncated central directory");
    const std::string member(reinterpret_cast<const char*>(b.data() + at + 46), name_len);
    // Zip64 extra field (id 1): the 8-byte values present are those whose 32-bit field is full.
    for (size_t e = at + 46 + name_len; e + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = r.u(e, 2), len = r.u(e + 2, 2);
      if (id == 1) {
        size_t p = e + 4;
        if (usize == 0xFFFFFFFFu) { usize = r.u(p, 8); p += 8; }
        if (csize == 0xFFFFFFFFu) { csize = r.u(p, 8); p += 8; }
        if (local == 0xFFFFFFFFu) { local = r.u(p, 8); }
      }
      e += 4 + len;
    }
    if (flags & 1u) r.bad("member '" + member + "' is encrypted");
    if (method != 0)
      fail_input(path + ": member '" + member + "' is compressed (zip method " +
                 std::to_string(method) + "); only stored members are read - save with np.savez, "
                 "not np.savez_compressed");
    if (csize != usize) r.bad("member '" + member + "' stored with differing sizes");
    if (r.u(local, 4) != kLocalSig) r.bad("member '" + member + "' has no local header");
    const size_t data_at = local + 30 + r.u(local + 26, 2) + r.u(local + 28, 2);
    if (data_at > b.size() || b.size() - data_at < usize) r.bad("member '" + member + "' is truncated");
    const std::vector<unsigned char> payload(b.begin() + static_cast<std::ptrdiff_t>(data_at),
                                             b.begin() + static_cast<std::ptrdiff_t>(data_at + usize));
    if (crc32(payload.data(), payload.size()) != crc)
      r.bad("member '" + member + "' fails its CRC-32 check");
    std::string key = member;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    // zipfile (and so np.load) would silently take the last of two members of one name.
    if (arrays.count(key)) r.bad("member '" + key + "' appears twice");
    arrays[key] = parse_npy(payload, path + ":" + key);
    at += 46 + name_len + extra_len + comment_len;
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
