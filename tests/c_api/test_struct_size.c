/*
 * test_struct_size.c - the versioned structs of the ABI (dilattn_tensor, dilattn_shape,
 * dilattn_bsr_view) are refused with INVALID_VALUE naming the argument when struct_size is not
 * the size the library was built with, before anything is written; a correct one runs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dilattn.h"

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, dilattn_last_error());
    ++failures;
  }
}

int main(void) {
  double q[2] = {1, 1}, k[2] = {0, 0}, v[2] = {1, 3}, o[2] = {-7, -7};
  dilattn_desc desc = NULL;
  dilattn_plan plan = (dilattn_plan)0;
  dilattn_shape shape = dilattn_shape_make(1, 2, 2, 1, 1, 1);
  dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F64, 1, 2, 1, 1);
  dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F64, 1, 2, 1, 1);
  dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F64, 1, 2, 1, 1);
  dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F64, 1, 2, 1, 1);
  dilattn_tensor zeroed;
  dilattn_bsr_view view;
  dilattn_mask mask = NULL;
  int64_t row_ptr[2] = {0, 1}, col_idx[1] = {0};

  expect(dilattn_desc_create(&desc) == DILATTN_SUCCESS, "desc");
  shape.struct_size = 8;
  expect(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF) ==
             DILATTN_ERROR_INVALID_VALUE && plan == NULL &&
             strstr(dilattn_last_error(), "'shape'") != NULL,
         "a shape with a wrong struct_size is refused, naming 'shape'");
  shape.struct_size = sizeof(dilattn_shape);
  expect(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF) ==
             DILATTN_SUCCESS, "a made shape is taken");

  memset(&zeroed, 0, sizeof zeroed);
  zeroed = tk;
  zeroed.struct_size = 0;
  expect(dilattn_forward(plan, &tq, &zeroed, &tv, &to, NULL, NULL, 0) ==
             DILATTN_ERROR_INVALID_VALUE && strstr(dilattn_last_error(), "'k'") != NULL,
         "a tensor with struct_size 0 is refused, naming 'k'");
  expect(o[0] == -7 && o[1] == -7, "nothing written on the refused call");
  expect(dilattn_forward(plan, &tq, &tk, &tv, &to, NULL, NULL, 0) == DILATTN_SUCCESS,
         "contiguous views run");
  /* Equal scores: O = (1 + 3) / 2 = 2 for both rows. */
  expect(fabs(o[0] - 2) < 1e-15 && fabs(o[1] - 2) < 1e-15, "O = 2");

  memset(&view, 0, sizeof view);
  view.seqlen_q = view.seqlen_k = view.block_q = view.block_k = view.num_heads = 1;
  view.index_type = DILATTN_INDEX_INT64;
  view.row_ptr = row_ptr;
  view.col_idx = col_idx;
  expect(dilattn_mask_create(&mask, &view) == DILATTN_ERROR_INVALID_VALUE && mask == NULL &&
             strstr(dilattn_last_error(), "'view'") != NULL,
         "a BSR view with struct_size 0 is refused, naming 'view'");
  view.struct_size = sizeof view;
  expect(dilattn_mask_create(&mask, &view) == DILATTN_SUCCESS, "a sized BSR view is taken");

  dilattn_mask_destroy(mask);
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  if (failures) return 1;
  printf("struct_size checked on dilattn_tensor, dilattn_shape and dilattn_bsr_view\n");
  return 0;
}
