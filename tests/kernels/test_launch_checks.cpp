// test_launch_checks.cpp - what a plan or call on the CUDA backend's launcher (cuda/launch.cu, run
// as backend emu) refuses, before touching memory (SPEC 1, 7): f64 and head dims above 256
// (UNSUPPORTED, the launcher's own limits); a misaligned data pointer and an output view whose
// stride 0 would make rows share memory (forward's O, backward's dK) are refused with
// INVALID_VALUE by the checks every backend shares (lib/tensor_checks.cpp, SPEC 15). Each
// refusal must leave the output untouched, and a plain call must succeed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../common/check.h"
#include "../common/test_backend.h"
#include "dilattn.h"

namespace {

dilattn_plan make_plan(dilattn_dtype dtype, int64_t D, dilattn_status* status) {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(1, 8, 8, 1, 1, D);
  *status = dilattn_plan_create(&plan, desc, &shape, dtype, DILATTN_BACKEND_EMU);
  dilattn_desc_destroy(desc);
  return plan;
}

}  // namespace

int main() {
  // On cuda this test says it is emu-only and is not counted as run (test_backend.h).
  if (!harness::runs_only_on_emu(
          "kernels_launch_checks",
          "refusals on host tensors, which are the emulator's device memory"))
    return harness::kExitSkip;
  dilattn_status s;
  make_plan(DILATTN_F64, 8, &s);
  CHECK_EQ(s, DILATTN_ERROR_UNSUPPORTED);  // f64 plan on emu
  make_plan(DILATTN_F32, 264, &s);
  CHECK_EQ(s, DILATTN_ERROR_UNSUPPORTED);  // head_dim 264 on emu

  dilattn_plan plan = make_plan(DILATTN_F32, 8, &s);
  if (!CHECK_OK(s)) return harness::finish("kernels_launch_checks");  // f32 D=8 plan on emu
  std::vector<float> q(1 + 8 * 8, 0.5f), k(8 * 8, 0.25f), v(8 * 8, 1.0f), o(8 * 8, -7.0f);
  dilattn_tensor tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, 1, 8, 1, 8);

  // A float pointer one byte off its alignment.
  dilattn_tensor misaligned = tq;
  misaligned.data = reinterpret_cast<unsigned char*>(q.data()) + 1;
  CHECK_EQ(dilattn_forward(plan, &misaligned, &tk, &tv, &to, nullptr, nullptr, 0),
           DILATTN_ERROR_INVALID_VALUE);
  // Every query row written to the same 8 floats.
  dilattn_tensor overlapping = to;
  overlapping.strides[1] = 0;
  CHECK_EQ(dilattn_forward(plan, &tq, &tk, &tv, &overlapping, nullptr, nullptr, 0),
           DILATTN_ERROR_INVALID_VALUE);
  bool untouched = true;
  for (float x : o) untouched = untouched && x == -7.0f;
  CHECK_MSG(untouched, "a refused call wrote the output");

  // The plain call: every row attends to equal keys, so O is v's row, 1.0.
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  for (float x : o)
    if (!CHECK_MSG(x == 1.0f, "plain forward: O element %g, want 1", static_cast<double>(x)))
      break;

  std::vector<float> lse(8), d_o(8 * 8, 1.0f), dq(8 * 8, -7.0f), dk(8 * 8, -7.0f),
      dv(8 * 8, -7.0f);
  dilattn_tensor tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, 1, 1, 8, 1);
  dilattn_tensor tdo = dilattn_tensor_contiguous(d_o.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor tdq = dilattn_tensor_contiguous(dq.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor tdk = dilattn_tensor_contiguous(dk.data(), DILATTN_F32, 1, 8, 1, 8);
  dilattn_tensor tdv = dilattn_tensor_contiguous(dv.data(), DILATTN_F32, 1, 8, 1, 8);
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0));
  // Every key row's gradient written to the same 8 floats.
  dilattn_tensor overlapping_dk = tdk;
  overlapping_dk.strides[1] = 0;
  CHECK_EQ(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &overlapping_dk, &tdv,
                            nullptr, 0),
           DILATTN_ERROR_INVALID_VALUE);
  bool grads_untouched = true;
  for (const std::vector<float>* g : {&dq, &dk, &dv})
    for (float x : *g) grads_untouched = grads_untouched && x == -7.0f;
  CHECK_MSG(grads_untouched, "a refused backward wrote a gradient");
  // The plain backward: all scores equal, so P = 1/8, dP = <dO, v> = 8 = D_i and dS = 0:
  // dQ = dK = 0, and dV_j = sum_i P_ij dO_i = 1.
  CHECK_OK(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, 0));
  for (int n = 0; n < 8 * 8; ++n)
    if (!CHECK_MSG(std::fabs(dq[n]) <= 1e-6f && std::fabs(dk[n]) <= 1e-6f &&
                       std::fabs(dv[n] - 1.0f) <= 1e-6f,
                   "plain backward: element %d: dQ %g, dK %g, dV %g; want 0, 0, 1", n,
                   static_cast<double>(dq[n]), static_cast<double>(dk[n]),
                   static_cast<double>(dv[n])))
      break;
  dilattn_plan_destroy(plan);
  return harness::finish("kernels_launch_checks");
}
