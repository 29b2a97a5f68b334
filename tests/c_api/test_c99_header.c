/*
 * test_c99_header.c - dilattn.h is plain C99 (compiled with -std=c99 -Wall -Wextra -pedantic
 * -Werror), and a tiny dense forward through the C API gives the hand-computed value.
 *
 * D = 1, scale 1, Nq = 1, Nk = 2, q = 1, k = (0, ln 3), v = (10, 20):
 * exp S = (1, 3), LSE = ln 4, O = (1 * 10 + 3 * 20) / 4 = 17.5.
 */
#include <math.h>
#include <stdio.h>

#include "dilattn.h"

#define CHECK(call)                                                                         \
  do {                                                                                      \
    dilattn_status s_ = (call);                                                             \
    if (s_ != DILATTN_SUCCESS) {                                                            \
      fprintf(stderr, "FAILED: %s -> %s (%s)\n", #call, dilattn_status_string(s_),          \
              dilattn_last_error());                                                        \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  float q[1] = {1.0f};
  float k[2];
  float v[2] = {10.0f, 20.0f};
  float o[1] = {0.0f};
  float lse[1] = {0.0f};
  dilattn_desc desc;
  dilattn_plan plan;
  dilattn_tensor tq, tk, tv, to, tlse;
  k[0] = 0.0f;
  k[1] = (float)log(3.0);
  tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 1, 1, 1);
  tk = dilattn_tensor_contiguous(k, DILATTN_F32, 1, 2, 1, 1);
  tv = dilattn_tensor_contiguous(v, DILATTN_F32, 1, 2, 1, 1);
  to = dilattn_tensor_contiguous(o, DILATTN_F32, 1, 1, 1, 1);
  tlse = dilattn_tensor_contiguous(lse, DILATTN_F32, 1, 1, 1, 1);

  CHECK(dilattn_desc_create(&desc));
  CHECK(dilattn_desc_set_scale(desc, 1.0));
  const dilattn_shape shape = dilattn_shape_make(1, 1, 2, 1, 1, 1);
  CHECK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF));
  CHECK(dilattn_forward(plan, &tq, &tk, &tv, &to, &tlse, NULL, 0));
  CHECK(dilattn_plan_destroy(plan));
  CHECK(dilattn_desc_destroy(desc));

  /* f32 storage of k[1] = ln 3 and of the result: a few ulps of 17.5 and of ln 4. */
  if (fabs(o[0] - 17.5) > 1e-5 || fabs(lse[0] - log(4.0)) > 1e-6) {
    fprintf(stderr, "FAILED: O = %.9g (want 17.5), LSE = %.9g (want ln 4 = %.9g)\n", o[0],
            lse[0], log(4.0));
    return 1;
  }
  printf("C99 header compiles; dense forward O = %.7g, LSE = %.7g\n", o[0], lse[0]);
  return 0;
}
