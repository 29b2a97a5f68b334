// test_forward_kernels.cpp - every CUDA forward kernel x dtype x kind, run on the backend
// DILATTN_TEST_BACKEND names (emu, the default: the SIMT emulator; cuda: a GPU) and compared
// with the f64 reference (backend ref), SPEC 8 tolerances.
//
// Usage: [DILATTN_TEST_BACKEND=emu|cuda] test_forward_kernels simt|mma|mma_tf32|wgmma
// (mma: f16 and bf16; mma_tf32: f32, 3xTF32; wgmma: the Hopper kernel, f16 and bf16, asked for
// with DILATTN_CUDA_WGMMA=1 on an sm_90: the emulated device is set to 9.0, and each case must
// have launched it (hopper_launches.h), except the one whose K and V rows TMA cannot read, which
// must have fallen back to mma). The cases are kernel_cases.h's forward ones.
// Every case is repeated (kernel_case.h: emu in three thread orders, cuda twice, the second on
// a stream of its own); the outputs must be bitwise identical (no race, no order-dependent
// sum), and the first within SPEC 8 of the reference.
// forward_kernel_for (cuda/kernel_choice.h) must name the kernel this run is about for every
// case (sm_80 rules; every GPU the build targets is sm_80 or newer).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_cases.h"
#include "kernel_choice.h"
#include "hopper_launches.h"

namespace {

using Case = harness::AttentionCase;

void run_case(const Case& c, const std::string& kernel, dilattn_backend backend) {
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  const bool hopper = kernel == "wgmma";
  const dilattn::KernelChoice expected = kernel == "mma"        ? dilattn::KernelChoice::mma
                                         : kernel == "mma_tf32" ? dilattn::KernelChoice::mma_tf32
                                         : hopper               ? dilattn::KernelChoice::wgmma
                                                                : dilattn::KernelChoice::simt;
  const dilattn::KernelChoice chosen =  // sm_80 rules; sm_90 with the Hopper path for wgmma
      dilattn::forward_kernel_for(c.dtype, c.D, hopper ? 9 : 8, false, false, hopper);
  if (!CHECK_MSG(chosen == expected, "D = %lld runs %s, not %s", static_cast<long long>(c.D),
                 dilattn::kernel_name(chosen), kernel.c_str()))
    return;
  const harness::Inputs in = kcase::random_inputs(c);
  const harness::Forward ref =
      harness::run_forward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const uint64_t wgmma_before = hopper_launches(backend);
  const harness::Forward first = kcase::run_forward_repeated(c, in, backend);
  if (hopper) {
    // Rows of D + 4 elements are no tensor map's: that case falls back to forward_mma.cu.
    const bool tma_views = c.name.find("unaligned_rows") == std::string::npos;
    const uint64_t launched = hopper_launches(backend) - wgmma_before;
    CHECK_MSG((launched > 0) == tma_views, "forward_wgmma.cu launched %llu times, expected %s",
              static_cast<unsigned long long>(launched),
              tma_views ? "some" : "none (mma's element loads)");
  }
  CHECK_CLOSE("O", first.o, ref.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", first.lse, ref.lse, spec8::lse());
  // A case whose reference has no finite LSE checks little; each case here has some.
  int64_t finite = 0;
  for (double x : ref.lse.values()) finite += std::isfinite(x) ? 1 : 0;
  CHECK_MSG(finite > 0, "no row has a key");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  if (kcase::kernel_argument(argc, argv) == nullptr) return 2;
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  if (std::string(argv[1]) == "wgmma") {  // before the first call: device facts are cached
    setenv("DILATTN_CUDA_WGMMA", "1", 1);
    if (backend == DILATTN_BACKEND_EMU) simt::set_emulated_device(9, 0);
  }
  // The choice itself (cuda/kernel_choice.h): MMA needs f16/bf16, MMA_TF32 f32, both D 64 or
  // 128 and sm_80+ (mma.sync for bf16 and tf32, cp.async); everything else runs SIMT.
  using dilattn::KernelChoice;
  using dilattn::forward_kernel_for;
  CHECK(forward_kernel_for(DILATTN_F16, 64, 8) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_BF16, 128, 9) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_F16, 64, 7) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F32, 64, 9) == KernelChoice::mma_tf32);
  CHECK(forward_kernel_for(DILATTN_F32, 128, 8) == KernelChoice::mma_tf32);
  CHECK(forward_kernel_for(DILATTN_F32, 128, 7) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F32, 96, 8) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F64, 64, 8) == KernelChoice::simt);  // refused by can_run
  CHECK(forward_kernel_for(DILATTN_BF16, 96, 8) == KernelChoice::simt);
  // The Hopper kernel: sm_90, f16/bf16, D 64 or 128, no option, and only when the path is open.
  CHECK(forward_kernel_for(DILATTN_BF16, 64, 9, false, false, true) == KernelChoice::wgmma);
  CHECK(forward_kernel_for(DILATTN_F16, 128, 9, false, false, false) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_F16, 128, 8, false, false, true) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_F16, 64, 9, true, false, true) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_BF16, 64, 9, false, true, true) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_F32, 64, 9, false, false, true) == KernelChoice::mma_tf32);
  CHECK(forward_kernel_for(DILATTN_BF16, 96, 9, false, false, true) == KernelChoice::simt);
  for (const Case& c : kcase::kernel_cases(kcase::Direction::forward, argv[1]))
    run_case(c, argv[1], backend);
  return harness::finish(
      (std::string("kernels_forward_") + argv[1] + " on " +
       dilattn_backend_name(backend)).c_str());
}
