// test_sparse_masks.cpp - block-sparse masks through the public C ABI (SPEC 4), hand-computed:
// each builder on a small grid whose answer is written out below, the pattern grammar, union,
// and validation messages naming the first bad entry. The brute-force sweeps over many shapes
// are in test_sparse_masks.py; this file is the dependency-free C++ check of the same calls.
#include <string>
#include <vector>

#include "../common/check.h"
#include "dilattn.h"

namespace {

using Rows = std::vector<std::vector<int64_t>>;  // rows[ib] = key blocks (one-head masks)

Rows rows_of(dilattn_mask m, int64_t head = 0) {
  dilattn_bsr_view v;
  int64_t nnz = 0;
  Rows out;
  if (dilattn_mask_get(m, &v, &nnz) != DILATTN_SUCCESS) return out;
  const int64_t I = (v.seqlen_q + v.block_q - 1) / v.block_q;
  const auto* rp = static_cast<const int64_t*>(v.row_ptr) + head * (I + 1);
  const auto* ci = static_cast<const int64_t*>(v.col_idx) +
                   (v.num_heads > 1 ? static_cast<const int64_t*>(v.head_ptr)[head] : 0);
  for (int64_t ib = 0; ib < I; ++ib) out.emplace_back(ci + rp[ib], ci + rp[ib + 1]);
  return out;
}

// Takes &m, not m: the builder call in the same argument list fills m, and argument evaluation
// order is unspecified.
void expect_rows(dilattn_status s, dilattn_mask* mp, const Rows& want, const char* what) {
  if (!CHECK_OK(s)) return;
  dilattn_mask m = *mp;
  CHECK_MSG(rows_of(m) == want, "%s: mask differs", what);
  dilattn_mask_destroy(m);
}

void builders_on_a_4x4_grid() {
  dilattn_mask m = nullptr;
  // 16 x 16 tokens, blocks of 4: row block ib's diagonal is key block ib.
  expect_rows(dilattn_mask_local(&m, 16, 16, 4, 4, 1, 0), &m, {{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3}},
              "local window 1");
  expect_rows(dilattn_mask_local(&m, 16, 16, 4, 4, 1, 1), &m, {{0}, {0, 1}, {1, 2}, {2, 3}},
              "causal local window 1");
  expect_rows(dilattn_mask_sink(&m, 16, 16, 4, 4, 1, 0), &m, {{0, 1, 2, 3}, {0}, {0}, {0}}, "sink 1");
  expect_rows(dilattn_mask_sink(&m, 16, 16, 4, 4, 1, 1), &m, {{0}, {0}, {0}, {0}}, "causal sink 1");
  expect_rows(dilattn_mask_strided(&m, 16, 16, 4, 4, 2, 0), &m, {{0, 2}, {1, 3}, {0, 2}, {1, 3}},
              "strided 2");
  expect_rows(dilattn_mask_strided(&m, 16, 16, 4, 4, 2, 1), &m, {{0}, {1}, {0, 2}, {1, 3}},
              "causal strided 2");
  // Nq = 8 < Nk = 16 (bottom-right: query i sits at key i + 8): diag of row block 0 is key block 2.
  expect_rows(dilattn_mask_local(&m, 8, 16, 4, 4, 0, 1), &m, {{2}, {3}}, "causal diagonal, Nq < Nk");
  // Hierarchical, one level: rows 0, 8 are anchors, window 4 (2 each side), level block 2.
  const int64_t st[] = {8}, wi[] = {4}, bl[] = {2};
  expect_rows(dilattn_mask_hierarchical(&m, 16, 16, 4, 4, 1, st, wi, bl, 0), &m,
              {{0}, {}, {1, 2}, {}}, "hierarchical");
  // The grammar: union of local:0 and sink:1.
  expect_rows(dilattn_mask_from_pattern(&m, "local:0+sink:1", 16, 16, 4, 4), &m,
              {{0, 1, 2, 3}, {0, 1}, {0, 2}, {0, 3}}, "pattern local:0+sink:1");
}

void random_is_seeded_and_stable() {
  // Values from the splitmix64 definition in dilattn_mask.h (test_sparse_masks.py recomputes them).
  dilattn_mask m = nullptr;
  expect_rows(dilattn_mask_random(&m, 32, 32, 4, 4, 1, 0.25, 7, 0), &m,
              {{0, 1, 6, 7}, {0, 1, 3}, {0, 4, 5}, {}, {0, 2, 5}, {0, 2, 3}, {1, 5, 7}, {2, 4, 6}},
              "random seed 7");
}

void errors_name_the_term_and_entry() {
  dilattn_mask m = nullptr;
  CHECK_ERROR(dilattn_mask_from_pattern(&m, "local:2+strided:0", 16, 16, 4, 4),
              DILATTN_ERROR_INVALID_VALUE, "term 1 'strided:0'");
  CHECK(m == nullptr);
  // Per-head mask, head 1 row block 0 lists key block 1 twice.
  const int32_t row_ptr[] = {0, 1, 1, 0, 2, 2};
  const int32_t col_idx[] = {0, 1, 1};
  const int32_t head_ptr[] = {0, 1, 3};
  dilattn_bsr_view v{sizeof(dilattn_bsr_view), 8, 8, 4, 4, 2, DILATTN_INDEX_INT32, row_ptr, col_idx, head_ptr};
  CHECK_ERROR(dilattn_mask_create(&m, &v), DILATTN_ERROR_BAD_MASK,
              "head 1, row block 0, position 1");
  CHECK(m == nullptr);
}

}  // namespace

int main() {
  builders_on_a_4x4_grid();
  random_is_seeded_and_stable();
  errors_name_the_term_and_entry();
  return harness::finish("sparse_masks");
}
