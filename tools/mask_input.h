// mask_input.h - block-sparse masks for the tool (SPEC 4): from a .npz of BSR arrays, from a
// pattern string, and back to .npz arrays.
//
// A .npz holds row_ptr and col_idx (and head_ptr for one mask per head), 1-D, int32 or int64.
// The tool checks what the C ABI cannot (array lengths: dilattn_mask_create reads raw pointers)
// and leaves every other rule (ascending, in range, row_ptr consistency) to dilattn_mask_create,
// whose message names the first bad entry. Checked by tests/cli/test_cli_mask.py (block-sparse forward
// against numpy, per-head mask, bad mask arrays exit 2).
#ifndef DILATTN_TOOLS_MASK_INPUT_H
#define DILATTN_TOOLS_MASK_INPUT_H

#include <map>
#include <string>
#include <vector>

#include "dilattn.h"
#include "npy.h"

namespace dilattn_cli {

// Owns a dilattn_mask.
class MaskHandle {
 public:
  MaskHandle() = default;
  ~MaskHandle() { dilattn_mask_destroy(mask_); }
  MaskHandle(const MaskHandle&) = delete;
  MaskHandle& operator=(const MaskHandle&) = delete;
  dilattn_mask* out() { return &mask_; }
  dilattn_mask get() const { return mask_; }

 private:
  dilattn_mask mask_ = nullptr;
};

void load_mask_npz(const std::string& path, int64_t seqlen_q, int64_t seqlen_k, int64_t block_q,
                   int64_t block_k, MaskHandle* mask);
// A mask from int64 BSR arrays whose lengths the caller checked (head_ptr empty: one head);
// `what` names them in an error.
void create_mask(const std::vector<int64_t>& row_ptr, const std::vector<int64_t>& col_idx,
                 const std::vector<int64_t>& head_ptr, int64_t seqlen_q, int64_t seqlen_k,
                 int64_t block_q, int64_t block_k, const std::string& what, MaskHandle* mask);
void build_mask_pattern(const std::string& pattern, int64_t seqlen_q, int64_t seqlen_k,
                        int64_t block_q, int64_t block_k, MaskHandle* mask);
// row_ptr, col_idx (int64) and head_ptr when the mask has more than one head.
std::map<std::string, NpyArray> mask_arrays(const MaskHandle& mask);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_MASK_INPUT_H
