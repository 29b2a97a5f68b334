// backward_mma_tf32.cu - the tensor-core backward kernels (SPEC 6 over SPEC 2-4) for f32, head
// dims 64 and 128, on mma.sync m16n8k8 with TF32 operands split 3xTF32 (cuda/tf32_split.cuh), so
// the products stay within SPEC 8's f32 tolerance, as the f32 forward (forward_mma_tf32.cu).
//
// The loops, shared with the f16/bf16 kernels (backward_mma.cu), are mma_backward_loop.cuh's
// (read its header): a dQ pass over 64-row query tiles with K and V chunks streaming, a dK/dV
// pass over 64-key tiles with Q and dO chunks streaming, every gradient element summed by one
// lane (no atomics: bitwise repeatable), the NaN rule kept on tensor cores. What this file adds
// is the products (Tf32BackwardProducts), read from shared memory by plain 32-bit loads (ldmatrix
// moves 16-bit elements only):
//   scores       s += a b^T over D in k steps of 8: A fragment a0 = a[g][t], a1 = a[g + 8][t],
//                a2, a3 the same at t + 4; B fragment of n tile n: b[8n + g][t], b[8n + g][t + 4]
//                (PTX ISA, "Matrix Fragments for mma.m16n8k8"; g = lane / 4, t = lane % 4);
//   accumulate   acc += x y: x's C fragment of n tile n is the A fragment of k block n with
//                k = t standing for column 2t and k = t + 4 for 2t + 1, {c0, c2, c1, c3}, and y's
//                B fragment reads rows 8n + 2t and 8n + 2t + 1 to match (forward_mma_tf32.cu's
//                P V): no shuffles.
// Rows are padded by 4 floats: a[g][t]'s bank is 4g + t and y[2t][g]'s 8t + g, 32 distinct.
// Chunks: 64 keys (D = 64) or 32 (D = 128) in the dQ pass, where Q and dO stay resident beside two
// K/V chunks (104 and 135 KB of shared memory, within sm_80's 163 KB); 32 or 16 query rows in the
// dK/dV pass (70 and 101 KB).
//
// Launched through tf32_backward (kernels.h; kernel_choice.h: f32, D 64 or 128, sm_80+). Checked
// by tests/kernels/test_backward_kernels.cpp and test_backward_nonfinite_kernels.cpp (emulator,
// three thread orders, against the reference) and tests/kernels/check_ptxas_spills.py.
#include "kernels.h"
#include "mma_backward_loop.cuh"
#include "tf32_split.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <int D>
struct Tf32BackwardProducts {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  using Input = float;
  static constexpr int kHeadDim = D, kStride = D + 4;
  static constexpr int kDqKeys = D == 64 ? 64 : 32, kKvRows = D == 64 ? 32 : 16;
  static constexpr int kKvRowsOptions = kKvRows;  // the variant and dropout instances too
  static constexpr bool kResidentKeys = false;    // K and V fragments read once a chunk
  // At D = 128 the dK/dV pass's dropout instance uses 255 registers with both ways of drawing
  // and spills (sm_80): it draws a call a pair there.
  static constexpr bool kQuadDraws = D == 64;

  // The lane's g = lane / 4 and t = lane % 4.
  struct Frags {
    int g, t;
  };
  static __device__ __forceinline__ Frags frags() {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    return Frags{lane >> 2, lane & 3};
  }

  template <int kN>
  static __device__ __forceinline__ void scores(const Frags& f, float (&s)[kN / 8][4],
                                                const float* a, const float* b) {
    const int g = f.g, t = f.t;
    // kk indexes no register array: left rolled, which keeps fewer operands live.
    for (int kk = 0; kk < D / 8; ++kk) {
      const float* arow = a + g * kStride + kk * 8 + t;
      const float af[4] = {arow[0], arow[8 * kStride], arow[4], arow[8 * kStride + 4]};
      const Tf32Operand<4> A = to_tf32<3>(af);
      DILATTN_UNROLL
      for (int n = 0; n < kN / 8; ++n) {
        const float* brow = b + (n * 8 + g) * kStride + kk * 8 + t;
        const float bf[2] = {brow[0], brow[4]};
        mma_f32<3>(s[n], A, to_tf32<3>(bf));
      }
    }
  }

  template <int kCols>
  static __device__ __forceinline__ void accumulate(const Frags& f, float (&acc)[D / 8][4],
                                                    const float (&x)[kCols / 8][4],
                                                    const float* y) {
    const int g = f.g, t = f.t;
    DILATTN_UNROLL
    for (int n = 0; n < kCols / 8; ++n) {
      const float xf[4] = {x[n][0], x[n][2], x[n][1], x[n][3]};
      const Tf32Operand<4> A = to_tf32<3>(xf);
      const float* yrow = y + (n * 8 + 2 * t) * kStride + g;
      DILATTN_UNROLL
      for (int nd = 0; nd < D / 8; ++nd) {
        const float yf[2] = {yrow[nd * 8], yrow[nd * 8 + kStride]};
        mma_f32<3>(acc[nd], A, to_tf32<3>(yf));
      }
    }
  }
};

// Variants: the instances with SPEC 10.1's window, softcap and ALiBi (mma_backward_loop.cuh,
// cuda/mma_variants.cuh); Dropout: the ones that draw SPEC 11.3's factors. kernel_choice.h picks
// one or the other (a problem with both runs SIMT).
template <int D, bool Variants, bool Dropout>
__global__ void __launch_bounds__(128, 1) backward_dq_mma_tf32_kernel(BackwardParams bp) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  mma_backward_dq<Tf32BackwardProducts<D>, Variants, Dropout>(bp, smem);
}

template <int D, bool Variants, bool Dropout>
__global__ void __launch_bounds__(128, 1) backward_dkdv_mma_tf32_kernel(BackwardParams bp) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  mma_backward_dkdv<Tf32BackwardProducts<D>, Variants, Dropout>(bp, smem);
}

template __global__ void backward_dq_mma_tf32_kernel<64, false, false>(BackwardParams);
template __global__ void backward_dq_mma_tf32_kernel<128, false, false>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<64, false, false>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<128, false, false>(BackwardParams);
template __global__ void backward_dq_mma_tf32_kernel<64, true, false>(BackwardParams);
template __global__ void backward_dq_mma_tf32_kernel<128, true, false>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<64, true, false>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<128, true, false>(BackwardParams);
template __global__ void backward_dq_mma_tf32_kernel<64, false, true>(BackwardParams);
template __global__ void backward_dq_mma_tf32_kernel<128, false, true>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<64, false, true>(BackwardParams);
template __global__ void backward_dkdv_mma_tf32_kernel<128, false, true>(BackwardParams);

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <int D, bool Variants, bool Dropout>
BackwardKernels tf32_backward_of() {
  using Products = Tf32BackwardProducts<D>;
  return BackwardKernels{backward_dq_mma_tf32_kernel<D, Variants, Dropout>,
                         backward_dkdv_mma_tf32_kernel<D, Variants, Dropout>,
                         smem_bytes_of<DqSmem<Products, Variants>>(),
                         smem_bytes_of<DkdvSmem<Products, Variants, Dropout>>(),
                         kMmaBackwardRows,
                         kMmaBackwardKeys,
                         kMmaBackwardThreads,
                         true,
                         !Variants};
}

// variants and dropout are never both set (kernel_choice.h sends such problems to SIMT).
BackwardKernels tf32_backward(int64_t D, bool variants, bool dropout) {  // f32, D = 64 or 128
  if (dropout)
    return D == 64 ? tf32_backward_of<64, false, true>() : tf32_backward_of<128, false, true>();
  if (variants)
    return D == 64 ? tf32_backward_of<64, true, false>() : tf32_backward_of<128, true, false>();
  return D == 64 ? tf32_backward_of<64, false, false>() : tf32_backward_of<128, false, false>();
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
