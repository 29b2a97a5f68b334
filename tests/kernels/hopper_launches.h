// hopper_launches.h - how many times the CUDA launcher ran the Hopper forward
// (cuda/forward_wgmma.cu) in this process, for the backend a kernel test runs on: the
// emulator's copy of the launcher (emu) or the GPU's (cuda). The launcher falls back to
// forward_mma.cu where it cannot make the kernel's tensor maps, so a test of the Hopper kernel
// checks that its calls took it (test_forward_kernels.cpp, test_nonfinite_kernels.cpp).
// DILATTN_TEST_EMU and DILATTN_TEST_CUDA (tests/kernels/meson.build) say which backends the
// library holds; the counters are cuda/launch.cu's wgmma_launch_count (cuda/kernels.h).
#ifndef DILATTN_TESTS_HOPPER_LAUNCHES_H
#define DILATTN_TESTS_HOPPER_LAUNCHES_H

#include <cstdint>

#include "dilattn.h"

namespace dilattn {
#if DILATTN_TEST_EMU
namespace emu {
uint64_t wgmma_launch_count();
}
#endif
#if DILATTN_TEST_CUDA
namespace cuda {
uint64_t wgmma_launch_count();
}
#endif
}  // namespace dilattn

inline uint64_t hopper_launches(dilattn_backend backend) {
#if DILATTN_TEST_EMU
  if (backend == DILATTN_BACKEND_EMU) return dilattn::emu::wgmma_launch_count();
#endif
#if DILATTN_TEST_CUDA
  if (backend == DILATTN_BACKEND_CUDA) return dilattn::cuda::wgmma_launch_count();
#endif
  (void)backend;
  return 0;
}

#endif  // DILATTN_TESTS_HOPPER_LAUNCHES_H
