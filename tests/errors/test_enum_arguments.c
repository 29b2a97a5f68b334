/* test_enum_arguments.c - SPEC 7: an enum argument or field holding a value outside its enum
 * (99, -1; legal in C, where an enum is an int) is refused with INVALID_VALUE (or the tensor
 * status) and a message naming the argument and the value. A tensor's dtype or device that is
 * no dtype or device at all is INVALID_VALUE (dilattn.h: "an enum ... out of range"); a valid one
 * that disagrees with the plan stays DTYPE_MISMATCH / DEVICE_MISMATCH.
 *
 * Written in C on purpose: C may pass any int as an enum, and the C++ library must read such a
 * value as an integer before checking it. Loading it as a C++ enum without a fixed underlying
 * type is undefined behaviour, which the ASan+UBSan build (-fsanitize=enum) reports. */
#include <stdio.h>
#include <string.h>

#include "dilattn.h"

static int failures = 0;

/* The call returned `want` and the last error contains `needle1` and `needle2`. */
static void expect_error(dilattn_status got, dilattn_status want, const char* needle1,
                         const char* needle2, int line) {
  const char* message = dilattn_last_error();
  printf("  line %d: %s: \"%s\"\n", line, dilattn_status_string(got), message);
  if (got != want) {
    fprintf(stderr, "line %d: FAILED: status %s, want %s\n", line, dilattn_status_string(got),
            dilattn_status_string(want));
    ++failures;
  }
  if (strstr(message, needle1) == NULL || strstr(message, needle2) == NULL) {
    fprintf(stderr, "line %d: FAILED: message \"%s\" does not name \"%s\" and \"%s\"\n", line,
            message, needle1, needle2);
    ++failures;
  }
}
#define EXPECT_ERROR(call, want, n1, n2) expect_error((call), (want), (n1), (n2), __LINE__)

static const int bad_values[2] = {99, -1};

static void head_mode_argument(void) {
  dilattn_desc desc = NULL;
  const int64_t w[1] = {4}, r[1] = {2};
  int t;
  if (dilattn_desc_create(&desc) != DILATTN_SUCCESS) { ++failures; return; }
  for (t = 0; t < 2; ++t) {
    char value[32];
    snprintf(value, sizeof value, "= %d", bad_values[t]);
    EXPECT_ERROR(dilattn_desc_set_dilated(desc, 1, w, r, (dilattn_head_mode)bad_values[t]),
                 DILATTN_ERROR_INVALID_VALUE, "'head_mode'", value);
  }
  dilattn_desc_destroy(desc);
}

static void mask_index_type_field(void) {
  const int64_t row_ptr[2] = {0, 1}, col_idx[1] = {0};
  dilattn_bsr_view v;
  dilattn_mask mask = NULL;
  int t;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  v.seqlen_q = v.seqlen_k = v.block_q = v.block_k = 4;
  v.num_heads = 1;
  v.row_ptr = row_ptr;
  v.col_idx = col_idx;
  for (t = 0; t < 2; ++t) {
    char value[32];
    snprintf(value, sizeof value, "= %d", bad_values[t]);
    v.index_type = (dilattn_index_type)bad_values[t];
    EXPECT_ERROR(dilattn_mask_create(&mask, &v), DILATTN_ERROR_INVALID_VALUE, "index_type", value);
  }
  if (mask != NULL) { fprintf(stderr, "FAILED: mask slot written\n"); ++failures; }
}

/* dilattn_mask_topk takes its dtype from q: a bad q dtype is q's fault, not k's. */
static void topk_tensor_fields(void) {
  float q[4] = {1, 2, 3, 4}, k[4] = {1, 2, 3, 4};
  dilattn_mask mask = NULL;
  int t;
  for (t = 0; t < 2; ++t) {
    dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 4, 1, 1);
    dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, 1, 4, 1, 1);
    char value[32];
    snprintf(value, sizeof value, "%d", bad_values[t]);
    tq.dtype = (dilattn_dtype)bad_values[t];
    EXPECT_ERROR(dilattn_mask_topk(&mask, &tq, &tk, 2, 2, 1, 0), DILATTN_ERROR_INVALID_VALUE,
                 "'q'", value);
    tq.dtype = DILATTN_F32;
    tk.dtype = (dilattn_dtype)bad_values[t];
    EXPECT_ERROR(dilattn_mask_topk(&mask, &tq, &tk, 2, 2, 1, 0), DILATTN_ERROR_INVALID_VALUE,
                 "'k'", value);
    tk.dtype = DILATTN_F32;
    tq.device = (dilattn_device_type)bad_values[t];
    EXPECT_ERROR(dilattn_mask_topk(&mask, &tq, &tk, 2, 2, 1, 0), DILATTN_ERROR_INVALID_VALUE,
                 "'q'", value);
  }
  /* A valid dtype that differs from q's is k's fault. */
  {
    double k64[4] = {1, 2, 3, 4};
    dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 4, 1, 1);
    dilattn_tensor tk = dilattn_tensor_contiguous(k64, DILATTN_F64, 1, 4, 1, 1);
    EXPECT_ERROR(dilattn_mask_topk(&mask, &tq, &tk, 2, 2, 1, 0), DILATTN_ERROR_DTYPE_MISMATCH,
                 "'k'", "f64");
  }
  if (mask != NULL) { fprintf(stderr, "FAILED: mask slot written\n"); ++failures; }
}

/* dilattn_forward's tensor checks (tensor_checks.cpp) on a dense f32 plan. */
static void forward_tensor_fields(void) {
  float q[4] = {1, 2, 3, 4}, k[4] = {1, 2, 3, 4}, v[4] = {1, 2, 3, 4}, o[4] = {0, 0, 0, 0};
  float sentinel[4] = {0, 0, 0, 0};
  dilattn_desc desc = NULL;
  dilattn_plan plan = NULL;
  int t;
  const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 1, 1, 1);
  if (dilattn_desc_create(&desc) != DILATTN_SUCCESS ||
      dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF) !=
          DILATTN_SUCCESS) {
    fprintf(stderr, "FAILED: plan: %s\n", dilattn_last_error());
    ++failures;
    return;
  }
  for (t = 0; t < 2; ++t) {
    dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 4, 1, 1);
    dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, 1, 4, 1, 1);
    dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F32, 1, 4, 1, 1);
    dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F32, 1, 4, 1, 1);
    char value[32];
    snprintf(value, sizeof value, "%d", bad_values[t]);
    tv.dtype = (dilattn_dtype)bad_values[t];
    EXPECT_ERROR(dilattn_forward(plan, &tq, &tk, &tv, &to, NULL, NULL, 0),
                 DILATTN_ERROR_INVALID_VALUE, "'v'", value);
    tv.dtype = DILATTN_F32;
    tk.device = (dilattn_device_type)bad_values[t];
    EXPECT_ERROR(dilattn_forward(plan, &tq, &tk, &tv, &to, NULL, NULL, 0),
                 DILATTN_ERROR_INVALID_VALUE, "'k'", value);
  }
  if (memcmp(o, sentinel, sizeof o) != 0) { fprintf(stderr, "FAILED: o written\n"); ++failures; }
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
}

static void status_string_argument(void) {
  const char* unknown = dilattn_status_string(DILATTN_STATUS_COUNT_);
  int t;
  for (t = 0; t < 2; ++t)
    if (strcmp(dilattn_status_string((dilattn_status)bad_values[t]), unknown) != 0) {
      fprintf(stderr, "FAILED: status %d is not reported as unknown\n", bad_values[t]);
      ++failures;
    }
}

int main(void) {
  head_mode_argument();
  mask_index_type_field();
  topk_tensor_fields();
  forward_tensor_fields();
  status_string_argument();
  if (failures == 0) printf("every out-of-range enum value refused, naming its argument\n");
  return failures != 0;
}
