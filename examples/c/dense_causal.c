/*
 * dense_causal.c - the smallest complete use of the C ABI: causal dense attention with
 * grouped-query heads, forward then backward, on the cpu backend if built (else the reference).
 * Build: part of `meson compile`; run: build/examples/dilattn_example_c
 */
#include <stdio.h>
#include <stdlib.h>

#include "dilattn.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    dilattn_status s_ = (call);                                                               \
    if (s_ != DILATTN_SUCCESS) {                                                              \
      fprintf(stderr, "%s: %s\n  %s\n", #call, dilattn_status_string(s_), dilattn_last_error()); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

int main(void) {
  enum { B = 1, N = 64, H = 4, HKV = 2, D = 32 };
  static float q[B * N * H * D], k[B * N * HKV * D], v[B * N * HKV * D], o[B * N * H * D];
  static float lse[B * H * N], d_o[B * N * H * D], dq[B * N * H * D], dk[B * N * HKV * D],
      dv[B * N * HKV * D];
  for (int i = 0; i < B * N * H * D; ++i) { q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f; d_o[i] = 1.0f; }
  for (int i = 0; i < B * N * HKV * D; ++i) {
    k[i] = (float)((i * 53) % 19) / 19.0f - 0.5f;
    v[i] = (float)((i * 71) % 23) / 23.0f;
  }

  dilattn_desc desc;
  CHECK(dilattn_desc_create(&desc));
  CHECK(dilattn_desc_set_causal(desc, 1));
  const dilattn_backend backend =
      dilattn_backend_available(DILATTN_BACKEND_CPU) ? DILATTN_BACKEND_CPU : DILATTN_BACKEND_REF;
  dilattn_plan plan;
  const dilattn_shape shape = dilattn_shape_make(B, N, N, H, HKV, D);
  CHECK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, backend));

  dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, B, N, H, D);
  dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, B, N, HKV, D);
  dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F32, B, N, HKV, D);
  dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F32, B, N, H, D);
  dilattn_tensor tl = dilattn_tensor_contiguous(lse, DILATTN_F32, B, H, N, 1);
  dilattn_tensor tdo = dilattn_tensor_contiguous(d_o, DILATTN_F32, B, N, H, D);
  dilattn_tensor tdq = dilattn_tensor_contiguous(dq, DILATTN_F32, B, N, H, D);
  dilattn_tensor tdk = dilattn_tensor_contiguous(dk, DILATTN_F32, B, N, HKV, D);
  dilattn_tensor tdv = dilattn_tensor_contiguous(dv, DILATTN_F32, B, N, HKV, D);
  CHECK(dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, NULL, 0));
  CHECK(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, NULL, 0));

  /* Causal row 0 sees only key 0, so O[0] = v[0] of its kv head (SPEC 2). */
  printf("backend %s: O[0,0,0,:3] = %.4f %.4f %.4f (v_0 = %.4f %.4f %.4f), dV[0,0,0,0] = %.4f\n",
         dilattn_backend_name(backend), o[0], o[1], o[2], v[0], v[1], v[2], dv[0]);
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  return 0;
}
