/*
 * test_score_count.c - dilattn_plan_score_count counts every score term S_ij of SPEC 2-4, a key
 * counted once per occurrence, on hand-counted problems: dense, causal with Nq < Nk, two dilated
 * branches in mod mode (with and without causal), a block-sparse local window, B = 2.
 */
#include <stdio.h>

#include "dilattn.h"

static int failures = 0;

static void expect_count(dilattn_desc desc, int64_t B, int64_t Nq, int64_t Nk, int64_t H,
                         int64_t want, const char* what) {
  dilattn_shape shape = dilattn_shape_make(B, Nq, Nk, H, H, 4);
  dilattn_plan plan = NULL;
  int64_t got = -1;
  if (dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF) != DILATTN_SUCCESS ||
      dilattn_plan_score_count(plan, &got) != DILATTN_SUCCESS || got != want) {
    fprintf(stderr, "FAILED %s: got %lld, want %lld (%s)\n", what, (long long)got,
            (long long)want, dilattn_last_error());
    ++failures;
  }
  dilattn_plan_destroy(plan);
}

int main(void) {
  const int64_t segments[2] = {4, 8}, dilations[2] = {1, 2};
  dilattn_desc desc = NULL;
  dilattn_mask mask = NULL;
  dilattn_desc_create(&desc);
  /* Dense: every row sees every key: B * H * Nq * Nk = 2 * 2 * 4 * 4. */
  expect_count(desc, 2, 4, 4, 2, 64, "dense");
  /* Causal, Nq = 3, Nk = 5 (bottom-right): the rows see 3, 4, 5 keys; times H = 2. */
  dilattn_desc_set_causal(desc, 1);
  expect_count(desc, 1, 3, 5, 2, 24, "dense causal");
  /* Dilated, N = 8, branches (4, 1) and (8, 2), mod heads, H = 2. Branch (4, 1): 8 rows x 4 keys.
   * Branch (8, 2): 4 selected rows x 4 selected keys for each head. Per head 32 + 16 = 48. */
  dilattn_desc_set_causal(desc, 0);
  dilattn_desc_set_dilated(desc, 2, segments, dilations, DILATTN_HEADS_MOD);
  expect_count(desc, 1, 8, 8, 2, 96, "dilated");
  /* Causal: branch (4, 1): 1+2+3+4 per segment, two segments = 20; branch (8, 2): 1+2+3+4 = 10. */
  dilattn_desc_set_causal(desc, 1);
  expect_count(desc, 1, 8, 8, 2, 60, "dilated causal");
  /* Block-sparse local:0, N = 8, blocks of 4: the two diagonal blocks, 4 x 4 each, per head. */
  dilattn_desc_set_causal(desc, 0);
  if (dilattn_mask_from_pattern(&mask, "local:0", 8, 8, 4, 4) != DILATTN_SUCCESS ||
      dilattn_desc_set_block_sparse(desc, mask) != DILATTN_SUCCESS) {
    fprintf(stderr, "FAILED mask: %s\n", dilattn_last_error());
    return 1;
  }
  dilattn_mask_destroy(mask);
  expect_count(desc, 1, 8, 8, 2, 64, "block-sparse local:0");
  if (dilattn_plan_score_count(NULL, NULL) != DILATTN_ERROR_NULL_POINTER) {
    fprintf(stderr, "FAILED: a NULL plan is not refused\n");
    ++failures;
  }
  dilattn_desc_destroy(desc);
  if (failures) return 1;
  printf("score counts match the hand counts\n");
  return 0;
}
