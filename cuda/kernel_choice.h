// kernel_choice.h - which kernels the CUDA launchers (cuda/launch.cu, launch_backward.cu) run,
// as pure functions of dtype, head dim and compute capability, so tests can name the kernel a
// case exercises (tests/kernels/test_forward_kernels.cpp and test_backward_kernels.cpp assert
// it for every case).
//
//   forward_kernel_for: WGMMA (forward_wgmma.cu, wgmma + TMA + warp specialisation): f16 or
//       bf16, D in {64, 128}, sm_90, no window, softcap, ALiBi or dropout (sinks are
//       joined as rows finish, as below), when the launcher says
//       the Hopper path is open (`hopper`: hopper_wanted's rule for the kind and
//       DILATTN_CUDA_WGMMA, the build holds sm_90a code, K and V are views TMA can read, every
//       dilation fits kWgmmaMaxStep: docs/spec.md 14.5); MMA (forward_mma.cu, mma.sync +
//       cp.async): f16 or bf16, D in {64, 128}, sm_80 or newer (bf16 tensor cores, cp.async);
//       MMA_TF32 (forward_mma_tf32.cu, 3xTF32 mma.sync): f32, D in {64, 128}, sm_80 or newer
//       (TF32 tensor cores); SIMT (forward_simt.cu) for the rest the backend takes:
//       f32/f16/bf16, D <= kMaxHeadDim.
//   backward_kernel_for: MMA (backward_mma.cu, mma.sync + cp.async) for the same f16/bf16
//       cases, MMA_TF32 (backward_mma_tf32.cu, 3xTF32) for the same f32 ones, SIMT
//       (backward_simt.cu) otherwise. Forward and backward choose alike.
//   variants: a problem with a window, softcap or ALiBi (SPEC 10.1) runs the chosen kernel's
//       variant instance (the tensor-core kernels' with mma_variants.cuh, the SIMT kernels'
//       with variant_tile.cuh): the options do not change which kernel runs. Sinks (SPEC
//       10.3) join each finished row once: the tensor-core forwards do that in every instance
//       and no backward kernel reads them, so sinks alone need the variant instance of the
//       SIMT forward only (launch_shared.h's uses_score_variants and uses_variant_kernels),
//       and the Hopper kernel, which has no variant instance, runs them too.
//   dropout (SPEC 11): a problem with p > 0 runs the chosen kernel's dropout instance; with SPEC
//       10 options as well it runs SIMT, whose dropout instance computes both (the tensor-core
//       kernels have a variant instance and a dropout instance, not one with both).
#ifndef DILATTN_KERNEL_CHOICE_H
#define DILATTN_KERNEL_CHOICE_H

#include <stdint.h>

#include "dilattn.h"
#include "softmax_rules.h"  // kMaxHeadDim

namespace dilattn {

enum class KernelChoice { simt, mma, mma_tf32, wgmma };

// DILATTN_CUDA_WGMMA (docs/spec.md 14.5): `0` never, `1` wherever the Hopper kernel can run,
// anything else (unset included) the measured rule of hopper_wanted.
enum class HopperMode { measured, always, never };

inline HopperMode hopper_mode_from(const char* value) {
  if (value != nullptr && value[0] != '\0' && value[1] == '\0') {
    if (value[0] == '0') return HopperMode::never;
    if (value[0] == '1') return HopperMode::always;
  }
  return HopperMode::measured;
}

// Whether a forward of this kind should take the Hopper kernel where it can. Measured on an
// H200 (docs/performance.md, "The Hopper forward"): 1.23-2.27x the sm_80 kernel's speed on
// dense, causal and dilated problems, 0.36-0.38x on a block-sparse mask of 64x64 blocks
// (likely because a 64-key span fills half of one of the kernel's 128-key chunks).
inline bool hopper_wanted(HopperMode mode, dilattn_kind kind) {
  switch (mode) {
    case HopperMode::never: return false;
    case HopperMode::always: return true;
    default: return kind != DILATTN_KIND_BLOCK_SPARSE;
  }
}

// `variants` alone or `dropout` alone does not change the choice among the sm_80 kernels (each
// has a variant instance and a dropout instance); both together run SIMT. The Hopper kernel
// has the plain instance only.
inline KernelChoice forward_kernel_for(dilattn_dtype dtype, int64_t D, int cc_major,
                                       bool variants = false, bool dropout = false,
                                       bool hopper = false) {
  if ((variants && dropout) || (D != 64 && D != 128) || cc_major < 8) return KernelChoice::simt;
  if (hopper && cc_major == 9 && !variants && !dropout &&
      (dtype == DILATTN_F16 || dtype == DILATTN_BF16))
    return KernelChoice::wgmma;
  if (dtype == DILATTN_F32) return KernelChoice::mma_tf32;
  return dtype == DILATTN_F16 || dtype == DILATTN_BF16 ? KernelChoice::mma : KernelChoice::simt;
}

inline KernelChoice backward_kernel_for(dilattn_dtype dtype, int64_t D, int cc_major,
                                        bool variants = false, bool dropout = false) {
  return forward_kernel_for(dtype, D, cc_major, variants, dropout);
}

inline const char* kernel_name(KernelChoice k) {
  switch (k) {
    case KernelChoice::mma: return "mma";
    case KernelChoice::mma_tf32: return "mma_tf32";
    case KernelChoice::wgmma: return "wgmma";
    default: return "simt";
  }
}

}  // namespace dilattn

#endif  // DILATTN_KERNEL_CHOICE_H
