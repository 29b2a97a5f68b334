// npy_header.h - the header dict of a .npy file, read as numpy reads it.
//
// numpy reads the header with ast.literal_eval and then requires exactly the keys 'descr',
// 'fortran_order' and 'shape', a tuple of ints and a bool. This parser accepts the subset of
// Python literal syntax those values are written in (strings in either quote, True/False, tuples
// of decimal ints, Python's whitespace and trailing commas, keys in any order) and gives the
// same values numpy gives; everything else is a CliError (exit 2) naming the file: a duplicate,
// missing or unknown key, a value of the wrong kind, text after the dict, and literal syntax it
// does not implement (string escapes and prefixes, comments, '_' in numbers) even where numpy
// would accept it. So a header is never read differently from numpy, only possibly refused.
// Checked by tests/cli/test_cli_inputs.py (headers numpy reads and rejects, numpy as the oracle).
#ifndef DILATTN_TOOLS_NPY_HEADER_H
#define DILATTN_TOOLS_NPY_HEADER_H

#include <cstdint>
#include <string>
#include <vector>

namespace dilattn_cli {

struct NpyHeaderDict {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// `text` is the header after the length field; `name` goes into every message. With
// python2_longs (format versions 1.0 and 2.0, as numpy's _filter_header) an int may end in 'L'.
NpyHeaderDict parse_npy_header_dict(const std::string& text, const std::string& name,
                                    bool python2_longs);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_NPY_HEADER_H
