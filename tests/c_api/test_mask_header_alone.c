/*
 * test_mask_header_alone.c - dilattn_mask.h compiles when it is the first and only header included,
 * and its builders work through it: a local window mask of 4 x 4 blocks has 3 + 2 + ... entries.
 */
#include "dilattn_mask.h"

#include <stdio.h>

int main(void) {
  dilattn_mask mask = NULL;
  dilattn_bsr_view view;
  int64_t nnz = 0;
  /* local:1 = each row block sees itself and its neighbours: 2 + 3 + 3 + 2 = 10 blocks. */
  if (dilattn_mask_from_pattern(&mask, "local:1", 16, 16, 4, 4) != DILATTN_SUCCESS ||
      dilattn_mask_get(mask, &view, &nnz) != DILATTN_SUCCESS) {
    fprintf(stderr, "FAILED: %s\n", dilattn_last_error());
    return 1;
  }
  if (nnz != 10 || view.struct_size != sizeof(dilattn_bsr_view)) {
    fprintf(stderr, "FAILED: nnz = %lld (want 10), struct_size = %zu\n", (long long)nnz,
            view.struct_size);
    return 1;
  }
  dilattn_mask_destroy(mask);
  printf("dilattn_mask.h compiles alone\n");
  return 0;
}
