// npy.cpp - the .npy format (numpy/lib/format.py, "NPY format"): magic "\x93NUMPY", a version
// byte pair, a little-endian header length (2 bytes in 1.0, 4 bytes in 2.0/3.0), then a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and
// a '\n' so the payload starts 64-byte aligned, then the raw C-order payload.
//
// The reader parses the dict with a small scanner (the three keys numpy always writes), checks
// every field, and requires the payload size to match the shape exactly. Checked by
// tests/cli/test_cli.py (npy round trips, bad magic, truncated header, fortran_order, <i4 input).
#include "npy.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "cli_error.h"

namespace dilattn_cli {

// ---------------------------------------------------------------- dtypes

const char* npy_descr(NpyType t) {
  switch (t) {
    case NpyType::f2: return "<f2";
    case NpyType::f4: return "<f4";
    case NpyType::f8: return "<f8";
    case NpyType::i4: return "<i4";
    case NpyType::i8: return "<i8";
  }
  return "?";
}

size_t npy_itemsize(NpyType t) {
  switch (t) {
    case NpyType::f2: return 2;
    case NpyType::f4: case NpyType::i4: return 4;
    case NpyType::f8: case NpyType::i8: return 8;
  }
  return 0;
}

namespace {

// IEEE binary16 to double, exactly (every half is a double).
double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0) v = frac * (1.0 / 16777216.0);  // subnormal: frac * 2^-24
  else if (exp == 31) v = frac ? std::numeric_limits<double>::quiet_NaN()
                               : std::numeric_limits<double>::infinity();
  else v = (1.0 + frac / 1024.0) * std::ldexp(1.0, exp - 15);
  return sign ? -v : v;
}

template <typename T>
T load_le(const unsigned char* p) {  // the host is little-endian (checked in main)
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

bool descr_type(const std::string& d, NpyType* t) {
  static const struct { const char* s; NpyType t; } known[] = {
      {"<f2", NpyType::f2}, {"<f4", NpyType::f4}, {"<f8", NpyType::f8},
      {"<i4", NpyType::i4}, {"<i8", NpyType::i8}};
  for (const auto& k : known)
    if (d == k.s) { *t = k.t; return true; }
  return false;
}

// A scanner over the header's dict literal.
class HeaderScanner {
 public:
  HeaderScanner(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  // Position just after the ':' following key 'key' (quoted either way); fails if absent.
  size_t value_of(const char* key) const {
    for (const char q : {'\'', '"'}) {
      const std::string k = std::string(1, q) + key + q;
      const size_t at = s_.find(k);
      if (at == std::string::npos) continue;
      size_t p = skip(at + k.size());
      if (p >= s_.size() || s_[p] != ':') bad(std::string("no ':' after '") + key + "'");
      return skip(p + 1);
    }
    bad(std::string("header has no '") + key + "' key");
  }
  std::string string_at(size_t p, const char* key) const {
    if (p >= s_.size() || (s_[p] != '\'' && s_[p] != '"')) bad(std::string("'") + key + "' is not a string");
    const size_t end = s_.find(s_[p], p + 1);
    if (end == std::string::npos) bad(std::string("'") + key + "' string is not closed");
    return s_.substr(p + 1, end - p - 1);
  }
  bool bool_at(size_t p, const char* key) const {
    if (s_.compare(p, 4, "True") == 0) return true;
    if (s_.compare(p, 5, "False") == 0) return false;
    bad(std::string("'") + key + "' is not True or False");
  }
  std::vector<int64_t> tuple_at(size_t p, const char* key) const {
    if (p >= s_.size() || s_[p] != '(') bad(std::string("'") + key + "' is not a tuple");
    std::vector<int64_t> dims;
    p = skip(p + 1);
    while (p < s_.size() && s_[p] != ')') {
      if (s_[p] < '0' || s_[p] > '9') bad(std::string("'") + key + "' holds a non-integer");
      int64_t d = 0;
      while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') {
        if (__builtin_mul_overflow(d, int64_t{10}, &d) ||
            __builtin_add_overflow(d, int64_t{s_[p] - '0'}, &d))
          bad(std::string("'") + key + "' dimension overflows int64");
        ++p;
      }
      if (p < s_.size() && s_[p] == 'L') ++p;  // Python 2 longs
      dims.push_back(d);
      p = skip(p);
      if (p < s_.size() && s_[p] == ',') p = skip(p + 1);
    }
    if (p >= s_.size()) bad(std::string("'") + key + "' tuple is not closed");
    return dims;
  }
  [[noreturn]] void bad(const std::string& what) const {
    fail_input(name_ + ": bad .npy header: " + what);
  }

 private:
  size_t skip(size_t p) const {
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return p;
  }
  const std::string& s_;
  const std::string& name_;
};

}  // namespace

// ---------------------------------------------------------------- arrays

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow was ruled out when the array was made
  return n;
}

double NpyArray::get(int64_t e) const {
  const unsigned char* p = data.data() + static_cast<size_t>(e) * npy_itemsize(type);
  switch (type) {
    case NpyType::f2: return half_to_double(load_le<uint16_t>(p));
    case NpyType::f4: return load_le<float>(p);
    case NpyType::f8: return load_le<double>(p);
    case NpyType::i4: return load_le<int32_t>(p);
    case NpyType::i8: return static_cast<double>(load_le<int64_t>(p));
  }
  return 0.0;
}

int64_t NpyArray::get_index(int64_t e, const std::string& what) const {
  const unsigned char* p = data.data() + static_cast<size_t>(e) * npy_itemsize(type);
  if (type == NpyType::i4) return load_le<int32_t>(p);
  if (type == NpyType::i8) return load_le<int64_t>(p);
  fail_input(what + ": dtype " + npy_descr(type) + ", expected an integer array (<i4 or <i8)");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// ---------------------------------------------------------------- reading

std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path + ": cannot open for reading");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) fail_input(path + ": read error");
  return bytes;
}

NpyArray parse_npy(const std::vector<unsigned char>& b, const std::string& name) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (b.size() < 8 || std::memcmp(b.data(), kMagic, 6) != 0)
    fail_input(name + ": not a .npy file (bad magic string)");
  const unsigned major = b[6];
  size_t header_len, header_start;
  if (major == 1) {
    if (b.size() < 10) fail_input(name + ": bad .npy header: truncated");
    header_len = b[8] | (static_cast<size_t>(b[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail_input(name + ": bad .npy header: truncated");
    header_len = b[8] | (static_cast<size_t>(b[9]) << 8) | (static_cast<size_t>(b[10]) << 16) |
                 (static_cast<size_t>(b[11]) << 24);
    header_start = 12;
  } else {
    fail_input(name + ": .npy format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (b.size() - header_start < header_len)
    fail_input(name + ": bad .npy header: truncated (header says " + std::to_string(header_len) +
               " bytes, file has " + std::to_string(b.size() - header_start) + ")");
  // Version 3.0 only allows utf-8 in the header; the keys we read are ASCII either way.
  const std::string text(reinterpret_cast<const char*>(b.data() + header_start), header_len);
  HeaderScanner scan(text, name);
  if (text.find('{') == std::string::npos || text.find('}') == std::string::npos)
    scan.bad("not a dict literal");

  NpyArray a;
  const std::string descr = scan.string_at(scan.value_of("descr"), "descr");
  if (!descr_type(descr, &a.type))
    fail_input(name + ": dtype '" + descr +
               "' is not supported (need little-endian <f4, <f8 or <f2; <i4 or <i8 for masks)");
  if (scan.bool_at(scan.value_of("fortran_order"), "fortran_order"))
    fail_input(name + ": fortran_order is True; only C-order arrays are read "
               "(save np.ascontiguousarray(x))");
  a.shape = scan.tuple_at(scan.value_of("shape"), "shape");

  int64_t bytes = static_cast<int64_t>(npy_itemsize(a.type));
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(bytes, d, &bytes))
      fail_input(name + ": shape " + shape_string(a.shape) + " overflows int64 bytes");
  const size_t payload = b.size() - header_start - header_len;
  if (static_cast<uint64_t>(bytes) != payload)
    fail_input(name + ": payload is " + std::to_string(payload) + " bytes, shape " +
               shape_string(a.shape) + " of " + descr + " needs " + std::to_string(bytes));
  a.data.assign(b.begin() + static_cast<std::ptrdiff_t>(header_start + header_len), b.end());
  return a;
}

NpyArray read_npy_file(const std::string& path) { return parse_npy(read_file_bytes(path), path); }

// ---------------------------------------------------------------- writing

std::vector<unsigned char> serialize_npy(const NpyArray& a) {
  std::string dict = std::string("{'descr': '") + npy_descr(a.type) +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < a.shape.size(); ++i) dict += std::to_string(a.shape[i]) + ", ";
  if (a.shape.size() > 1) dict.resize(dict.size() - 2);  // (3,) keeps its comma, (2, 3) none
  else if (a.shape.size() == 1) dict.resize(dict.size() - 1);
  dict += "), }";
  // Pad with spaces and end with '\n' so magic + version + length + header is a multiple of 64.
  const bool v1 = dict.size() + 1 + 10 <= 65535 + 10;
  const size_t prefix = v1 ? 10 : 12;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';

  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y',
                                    static_cast<unsigned char>(v1 ? 1 : 2), 0};
  const size_t n = dict.size();
  out.push_back(static_cast<unsigned char>(n & 0xff));
  out.push_back(static_cast<unsigned char>((n >> 8) & 0xff));
  if (!v1) {
    out.push_back(static_cast<unsigned char>((n >> 16) & 0xff));
    out.push_back(static_cast<unsigned char>((n >> 24) & 0xff));
  }
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

}  // namespace dilattn_cli
