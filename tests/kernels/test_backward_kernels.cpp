// test_backward_kernels.cpp - every CUDA backward kernel x dtype x kind (SPEC 6), run on the
// backend DILATTN_TEST_BACKEND names (emu, the default: the SIMT emulator; cuda: a GPU) and
// compared with the f64 reference backward (backend ref).
//
// Usage: [DILATTN_TEST_BACKEND=emu|cuda] test_backward_kernels simt|mma|mma_tf32. The cases are
// kernel_cases.h's backward ones. Each case runs forward then backward on each backend (each
// with its own O and LSE) and compares dQ, dK, dV. Every case is repeated (kernel_case.h: emu
// in three thread orders, cuda twice, the second on a stream of its own); the gradients must be
// bitwise identical (no race, no order-dependent sum: SPEC 6's determinism), and the first
// within SPEC 8 of the reference.
// backward_kernel_for (cuda/kernel_choice.h) must name the kernel this run is about for every case.
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_cases.h"
#include "kernel_choice.h"

namespace {

using Case = harness::AttentionCase;

void run_case(const Case& c, const std::string& kernel, dilattn_backend backend) {
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  const dilattn::KernelChoice expected =
      kernel == "mma"        ? dilattn::KernelChoice::mma
      : kernel == "mma_tf32" ? dilattn::KernelChoice::mma_tf32
                             : dilattn::KernelChoice::simt;
  const dilattn::KernelChoice chosen = dilattn::backward_kernel_for(c.dtype, c.D, 8);  // sm_80
  if (!CHECK_MSG(chosen == expected, "D = %lld runs %s, not %s", static_cast<long long>(c.D),
                 dilattn::kernel_name(chosen), kernel.c_str()))
    return;
  const harness::Inputs in = kcase::random_inputs(c);
  const harness::Gradients ref =
      kcase::run_forward_backward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const harness::Gradients first = kcase::run_backward_repeated(c, in, backend);
  // SPEC 8 as for O: no looser bound needed here (at these shapes the worst f16/bf16 element
  // uses 0.7 of it).
  const spec8::Tolerance tol = spec8::of(c.dtype);
  CHECK_CLOSE("dQ", first.dq, ref.dq, tol);
  CHECK_CLOSE("dK", first.dk, ref.dk, tol);
  CHECK_CLOSE("dV", first.dv, ref.dv, tol);
  // A case whose reference gradients are all zero checks little; each case here has some.
  int64_t nonzero = 0;
  for (const harness::Tensor* g : {&ref.dq, &ref.dk, &ref.dv})
    for (double x : g->values()) nonzero += x != 0 ? 1 : 0;
  CHECK_MSG(nonzero > 0, "the reference gradients are all 0");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  if (kcase::kernel_argument(argc, argv) == nullptr) return 2;
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  for (const Case& c : kcase::kernel_cases(kcase::Direction::backward, argv[1]))
    run_case(c, argv[1], backend);
  return harness::finish(
      (std::string("kernels_backward_") + argv[1] + " on " +
       dilattn_backend_name(backend)).c_str());
}
