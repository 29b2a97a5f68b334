// npy.h - reading and writing NumPy .npy arrays (format versions 1.0, 2.0 and 3.0).
//
// Accepted: little-endian '<f2', '<f4', '<f8', '<i4', '<i8' ('|' byte order is not used by these),
// C order only. A Fortran-order array, a big-endian dtype, any other dtype, a bad magic string, a
// truncated header or a payload shorter or longer than the shape says is a CliError (exit 2) whose
// message names the file. Writing always produces version 1.0 (what np.save writes for small
// headers). Only regular files are read (regular_file.h). Checked by tests/cli/test_cli_inputs.py
// and test_cli_outputs.py (round trips against numpy's own reader and writer, every malformed case).
#ifndef DILATTN_TOOLS_NPY_H
#define DILATTN_TOOLS_NPY_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dilattn_cli {

enum class NpyType { f2, f4, f8, i4, i8 };

const char* npy_descr(NpyType t);  // "<f4", ...
size_t npy_itemsize(NpyType t);

struct NpyArray {
  NpyType type = NpyType::f4;
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;  // C-order payload, little-endian

  int64_t numel() const;
  // Element e as a double (f2 decoded exactly, integers converted).
  double get(int64_t e) const;
  // Element e of an integer array as int64 (i4 or i8; CliError otherwise).
  int64_t get_index(int64_t e, const std::string& what) const;
};

// Parses the bytes of a .npy file; `name` (a path, or "M.npz:row_ptr") goes into every message.
NpyArray parse_npy(const std::vector<unsigned char>& bytes, const std::string& name);
NpyArray read_npy_file(const std::string& path);
// The bytes of a version 1.0 .npy file holding `a`.
std::vector<unsigned char> serialize_npy(const NpyArray& a);

// "[2, 16, 4, 8]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_NPY_H
