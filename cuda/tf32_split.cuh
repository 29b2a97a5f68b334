// tf32_split.cuh - f32 products on TF32 tensor cores within SPEC 8's f32 tolerance: the
// 3xTF32 split of cuda/forward_mma_tf32.cu's header (read it), shared with the f32 backward
// (cuda/backward_mma_tf32.cu).
//
//   Tf32Operand<N>             N f32 values as TF32 operands: big, small and big_finite
//   to_tf32<kProducts>(x)      the split (kProducts = 3), or big alone rounded to nearest (1)
//   mma_f32<kProducts>(acc, a, b)
//                              acc += a b for one m16n8k8 tile: small_a big_b + big_a small_b
//                              + big_a big_b (kProducts = 3), or big_a big_b (1)
// Checked by tests/kernels/test_tf32_split.cpp and, through the kernels, tests/kernels/.
#ifndef DILATTN_TF32_SPLIT_CUH
#define DILATTN_TF32_SPLIT_CUH

#include <math.h>
#include <stdint.h>

#include "mma_sync.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// N f32 values as TF32 operands: big alone (kProducts = 1: rounded to nearest), or big
// (truncated) and small (kProducts = 3), as the header says. big_finite is big with
// infinities as 0: the B operand of the small_a big_b product, so that an infinite b meets a
// only through big_a big_b (small_a may be 0 or of the other sign: small_a inf would add a
// NaN or the wrong infinity where the reference has a b's infinity times a).
template <int N>
struct Tf32Operand {
  uint32_t big[N], small[N], big_finite[N];
};

template <int kProducts, int N>
__device__ __forceinline__ Tf32Operand<N> to_tf32(const float (&x)[N]) {
  Tf32Operand<N> r;
  for (int e = 0; e < N; ++e) {
    if (kProducts == 1) {
      r.big[e] = r.big_finite[e] = cvt_rna_tf32(x[e]);
      r.small[e] = 0;
      continue;
    }
    r.big[e] = __float_as_uint(x[e]) & 0xffffe000u;
    const float rest = isinf(x[e]) ? 0.0f : x[e] - __uint_as_float(r.big[e]);
    r.small[e] = cvt_rna_tf32(rest);
    r.big_finite[e] = isinf(x[e]) ? 0u : r.big[e];
  }
  return r;
}

// acc += a b for one m16n8k8 tile.
template <int kProducts>
__device__ __forceinline__ void mma_f32(float* acc, const Tf32Operand<4>& a,
                                        const Tf32Operand<2>& b) {
  if (kProducts == 3) {
    mma_m16n8k8_tf32(acc, a.small, b.big_finite, acc);
    mma_m16n8k8_tf32(acc, a.big, b.small, acc);
  }
  mma_m16n8k8_tf32(acc, a.big, b.big, acc);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_TF32_SPLIT_CUH
