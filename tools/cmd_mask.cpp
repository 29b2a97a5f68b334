// cmd_mask.cpp - `dilattn mask (--pattern P | --mask IN.npz) --n N [--n-k NK] --block-size B
// [--block-size-k BK] --out M.npz`: writes the BSR arrays the pattern builder (SPEC 4,
// dilattn_mask_from_pattern) makes, or a given mask validated and normalised, as int64 row_ptr and
// col_idx (and head_ptr for a per-head mask), readable by np.load and by `dilattn forward --mask`.
// Checked by tests/cli/test_cli_mask.py.
#include <string>

#include "cli_error.h"
#include "commands.h"
#include "flags.h"
#include "mask_input.h"
#include "npz.h"
#include "output_files.h"

namespace dilattn_cli {

int cmd_mask(int argc, char** argv, int first) {
  const Flags f(argc, argv, first,
                {{"pattern", true}, {"mask", true}, {"n", true}, {"n-k", true}, {"block-size", true},
                 {"block-size-k", true}, {"out", true}},
                0);
  if (f.has("pattern") == f.has("mask")) fail_input("mask needs exactly one of --pattern and --mask");
  f.required("n");
  const int64_t n = f.get_int("n", 0, 1);
  const int64_t n_k = f.get_int("n-k", n, 1);
  const int64_t block_q = f.get_int("block-size", 64, 1);
  const int64_t block_k = f.get_int("block-size-k", block_q, 1);
  OutputFiles outputs;
  if (f.has("mask")) outputs.note_input("mask", f.required("mask"));
  const size_t out_file = outputs.reserve("out", f.required("out"));
  MaskHandle mask;
  if (f.has("pattern"))
    build_mask_pattern(f.required("pattern"), n, n_k, block_q, block_k, &mask);
  else
    load_mask_npz(f.required("mask"), n, n_k, block_q, block_k, &mask);
  outputs.write(out_file, serialize_npz(mask_arrays(mask)));
  outputs.commit();
  return kExitOk;
}

}  // namespace dilattn_cli
