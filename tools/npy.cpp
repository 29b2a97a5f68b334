// npy.cpp - the .npy format (numpy/lib/format.py, "NPY format"): magic "\x93NUMPY", a version
// byte pair, a little-endian header length (2 bytes in 1.0, 4 bytes in 2.0/3.0), then a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and
// a '\n' so the payload starts 64-byte aligned, then the raw C-order payload.
//
// The reader parses the dict as numpy does (npy_header.h), checks every field, and requires the
// payload size to match the shape exactly, from the file's size before the payload is read.
// Checked by tests/cli/test_cli_inputs.py (npy round trips, bad magic, truncated header, headers
// against numpy, fortran_order, <i4 input, a sparse 64 GiB file).
#include "npy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "cli_error.h"
#include "npy_header.h"
#include "regular_file.h"

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

// The fixed prefix: magic, version, header length. Needs at least 12 bytes or the whole file.
struct NpyPrefix {
  unsigned major = 1;
  uint64_t header_start = 10, header_len = 0;
};

NpyPrefix read_prefix(const unsigned char* b, uint64_t size, const std::string& name) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 8 || std::memcmp(b, kMagic, 6) != 0)
    fail_input(name + ": not a .npy file (bad magic string)");
  NpyPrefix p;
  p.major = b[6];
  if (p.major == 1) {
    if (size < 10) fail_input(name + ": bad .npy header: truncated");
    p.header_len = b[8] | (static_cast<uint64_t>(b[9]) << 8);
    p.header_start = 10;
  } else if (p.major == 2 || p.major == 3) {
    if (size < 12) fail_input(name + ": bad .npy header: truncated");
    p.header_len = b[8] | (static_cast<uint64_t>(b[9]) << 8) | (static_cast<uint64_t>(b[10]) << 16) |
                   (static_cast<uint64_t>(b[11]) << 24);
    p.header_start = 12;
  } else {
    fail_input(name + ": .npy format version " + std::to_string(p.major) + " is not 1, 2 or 3");
  }
  if (size - p.header_start < p.header_len)
    fail_input(name + ": bad .npy header: truncated (header says " + std::to_string(p.header_len) +
               " bytes, file has " + std::to_string(size - p.header_start) + ")");
  return p;
}

// The array described by the header (type and shape, no data yet) and its payload size in bytes,
// checked against `payload` (the bytes after the header) before any payload is read.
NpyArray describe(const NpyPrefix& p, const std::string& header, uint64_t payload,
                  const std::string& name) {
  // Version 3.0 only allows utf-8 in the header; every accepted header is ASCII either way.
  const NpyHeaderDict d = parse_npy_header_dict(header, name, p.major <= 2);
  NpyArray a;
  if (!descr_type(d.descr, &a.type))
    fail_input(name + ": dtype '" + d.descr +
               "' is not supported (need little-endian <f4, <f8 or <f2; <i4 or <i8 for masks)");
  if (d.fortran_order)
    fail_input(name + ": fortran_order is True; only C-order arrays are read "
               "(save np.ascontiguousarray(x))");
  a.shape = d.shape;
  int64_t bytes = static_cast<int64_t>(npy_itemsize(a.type));
  for (int64_t dim : a.shape)
    if (__builtin_mul_overflow(bytes, dim, &bytes))
      fail_input(name + ": shape " + shape_string(a.shape) + " overflows int64 bytes");
  if (static_cast<uint64_t>(bytes) != payload)
    fail_input(name + ": payload is " + std::to_string(payload) + " bytes, shape " +
               shape_string(a.shape) + " of " + d.descr + " needs " + std::to_string(bytes));
  return a;
}

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

NpyArray parse_npy(const std::vector<unsigned char>& b, const std::string& name) {
  const NpyPrefix p = read_prefix(b.data(), b.size(), name);
  const uint64_t header_end = p.header_start + p.header_len;
  const std::string header(reinterpret_cast<const char*>(b.data() + p.header_start), p.header_len);
  NpyArray a = describe(p, header, b.size() - header_end, name);
  a.data.assign(b.begin() + static_cast<std::ptrdiff_t>(header_end), b.end());
  return a;
}

NpyArray read_npy_file(const std::string& path) {
  // Prefix, then header, then (once the file's size matches the shape) the payload: a file
  // larger than its header says is refused without reading it.
  const RegularFile f(path);
  const std::vector<unsigned char> head = f.read(0, std::min<uint64_t>(f.size(), 12));
  const NpyPrefix p = read_prefix(head.data(), f.size(), path);
  const std::vector<unsigned char> text = f.read(p.header_start, p.header_len);
  const uint64_t header_end = p.header_start + p.header_len;
  NpyArray a = describe(p, std::string(text.begin(), text.end()), f.size() - header_end, path);
  a.data = f.read(header_end, f.size() - header_end);
  return a;
}

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
