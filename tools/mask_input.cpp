// mask_input.cpp - see mask_input.h. Lengths first (row_ptr = heads * (I + 1), head_ptr =
// heads + 1, col_idx = the total row_ptr says), all indices widened to int64, then
// dilattn_mask_create validates the contents. Checked by tests/cli/test_cli_mask.py.
#include "mask_input.h"

#include <cstring>
#include <vector>

#include "cli_error.h"
#include "library_status.h"
#include "npz.h"

namespace dilattn_cli {

namespace {

// ceil(n / block) for n, block >= 1 (SPEC 4's I and J). Not (n + block - 1) / block: that
// overflows int64 for sizes near 2^63, which flags and files can ask for.
int64_t block_count(int64_t n, int64_t block) { return n / block + (n % block != 0); }

std::vector<int64_t> index_array(const std::map<std::string, NpyArray>& arrays,
                                 const std::string& path, const std::string& key) {
  const auto it = arrays.find(key);
  if (it == arrays.end()) fail_input(path + ": no array '" + key + "' (need row_ptr and col_idx)");
  const NpyArray& a = it->second;
  const std::string what = path + ":" + key;
  if (a.shape.size() != 1)
    fail_input(what + ": shape " + shape_string(a.shape) + ", expected a 1-D array");
  std::vector<int64_t> out(static_cast<size_t>(a.numel()));
  for (int64_t e = 0; e < a.numel(); ++e) out[static_cast<size_t>(e)] = a.get_index(e, what);
  return out;
}

}  // namespace

void load_mask_npz(const std::string& path, int64_t seqlen_q, int64_t seqlen_k, int64_t block_q,
                   int64_t block_k, MaskHandle* mask) {
  const std::map<std::string, NpyArray> arrays =
      read_npz_file(path, {"row_ptr", "col_idx", "head_ptr"});
  const std::vector<int64_t> row_ptr = index_array(arrays, path, "row_ptr");
  const std::vector<int64_t> col_idx = index_array(arrays, path, "col_idx");
  std::vector<int64_t> head_ptr;
  int64_t heads = 1;
  if (arrays.count("head_ptr")) {
    head_ptr = index_array(arrays, path, "head_ptr");
    if (head_ptr.size() < 2)
      fail_input(path + ":head_ptr: length " + std::to_string(head_ptr.size()) +
                 ", expected heads + 1 >= 2");
    heads = static_cast<int64_t>(head_ptr.size()) - 1;
  }
  const int64_t I = block_count(seqlen_q, block_q);
  // heads * (I + 1) may not fit in int64 (N = 2^63 - 1 in blocks of 1); then no file matches.
  int64_t want_rows = 0;
  const bool representable = !__builtin_add_overflow(I, int64_t{1}, &want_rows) &&
                             !__builtin_mul_overflow(heads, want_rows, &want_rows);
  if (!representable || static_cast<int64_t>(row_ptr.size()) != want_rows)
    fail_input(path + ":row_ptr: length " + std::to_string(row_ptr.size()) + ", expected " +
               std::to_string(heads) + " head(s) x (" + std::to_string(I) + " query blocks + 1)");
  int64_t nnz = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t last = row_ptr[static_cast<size_t>(h * (I + 1) + I)];
    if (last < 0 || __builtin_add_overflow(nnz, last, &nnz))
      fail_input(path + ":row_ptr: head " + std::to_string(h) + " ends at " + std::to_string(last));
  }
  if (static_cast<int64_t>(col_idx.size()) != nnz)
    fail_input(path + ":col_idx: length " + std::to_string(col_idx.size()) + ", row_ptr says " +
               std::to_string(nnz) + " entries");
  create_mask(row_ptr, col_idx, head_ptr, seqlen_q, seqlen_k, block_q, block_k, "--mask " + path,
              mask);
}

void create_mask(const std::vector<int64_t>& row_ptr, const std::vector<int64_t>& col_idx,
                 const std::vector<int64_t>& head_ptr, int64_t seqlen_q, int64_t seqlen_k,
                 int64_t block_q, int64_t block_k, const std::string& what, MaskHandle* mask) {
  dilattn_bsr_view view;
  std::memset(&view, 0, sizeof(view));
  view.struct_size = sizeof(view);
  view.seqlen_q = seqlen_q;
  view.seqlen_k = seqlen_k;
  view.block_q = block_q;
  view.block_k = block_k;
  view.num_heads = head_ptr.empty() ? 1 : static_cast<int64_t>(head_ptr.size()) - 1;
  view.index_type = DILATTN_INDEX_INT64;
  view.row_ptr = row_ptr.data();
  view.col_idx = col_idx.empty() ? nullptr : col_idx.data();
  view.head_ptr = head_ptr.empty() ? nullptr : head_ptr.data();
  check_status(dilattn_mask_create(mask->out(), &view), what);
}

void build_mask_pattern(const std::string& pattern, int64_t seqlen_q, int64_t seqlen_k,
                        int64_t block_q, int64_t block_k, MaskHandle* mask) {
  check_status(dilattn_mask_from_pattern(mask->out(), pattern.c_str(), seqlen_q, seqlen_k, block_q,
                                         block_k),
               "--pattern '" + pattern + "'");
}

std::map<std::string, NpyArray> mask_arrays(const MaskHandle& mask) {
  dilattn_bsr_view view;
  int64_t nnz = 0;
  check_status(dilattn_mask_get(mask.get(), &view, &nnz), "mask");
  const int64_t I = block_count(view.seqlen_q, view.block_q);
  auto make = [](const void* src, int64_t n) {
    NpyArray a;
    a.type = NpyType::i8;
    a.shape = {n};
    a.data.resize(static_cast<size_t>(n) * 8);
    if (n > 0) std::memcpy(a.data.data(), src, a.data.size());
    return a;
  };
  std::map<std::string, NpyArray> out;
  out["row_ptr"] = make(view.row_ptr, view.num_heads * (I + 1));
  out["col_idx"] = make(view.col_idx, nnz);
  if (view.num_heads > 1) out["head_ptr"] = make(view.head_ptr, view.num_heads + 1);
  return out;
}

}  // namespace dilattn_cli
