// kernel_choice.h - which forward kernel the CUDA launcher (cuda/launch.cu) runs, as a pure
// function of dtype, head dim and compute capability, so tests can name the kernel a case
// exercises (tests/kernels/test_forward_kernels.cpp asserts it for every case).
//
//   WMMA (forward_wmma.cu): f16 or bf16, D in {64, 128}, sm_80 or newer (bf16 tensor cores).
//   SIMT (forward_simt.cu): everything else the backend takes: f32/f16/bf16, D <= kMaxHeadDim.
#ifndef DILATTN_KERNEL_CHOICE_H
#define DILATTN_KERNEL_CHOICE_H

#include <stdint.h>

#include "dilattn.h"
#include "softmax_rules.h"  // kMaxHeadDim

namespace dilattn {

enum class KernelChoice { simt, wmma };

inline KernelChoice kernel_for(dilattn_dtype dtype, int64_t D, int cc_major) {
  const bool tensor_dtype = dtype == DILATTN_F16 || dtype == DILATTN_BF16;
  return tensor_dtype && (D == 64 || D == 128) && cc_major >= 8 ? KernelChoice::wmma
                                                                : KernelChoice::simt;
}

inline const char* kernel_name(KernelChoice k) {
  return k == KernelChoice::wmma ? "forward_wmma" : "forward_simt";
}

}  // namespace dilattn

#endif  // DILATTN_KERNEL_CHOICE_H
