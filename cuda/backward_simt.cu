// backward_simt.cu - the SIMT backward kernels: dQ, and dK with dV, of one branch of dense,
// dilated or block-sparse attention (SPEC 6 over SPEC 2-4) for f32, f16 and bf16 inputs, f32
// accumulation, any head dim <= 256.
//
// The loops are backward_tile_loop.cuh's (query chunks of BR = 16 rows, key chunks of BC = 16
// keys, P from the forward's LSE in lib/softmax_rules.h's base-2 domain). What this file adds
// is how the products are computed, with plain f32 loops over shared tiles:
//   scores           thread idx owns out[idx / BC][idx % BC]: one dot product of D terms;
//   accumulate_rows  thread idx owns acc[idx / D][idx % D] (dQ += dS K), summed over the keys
//                    the row sees only;
//   accumulate_cols  thread idx owns acc[idx / D][idx % D] (dK += dS^T Q, dV += P^T dO),
//                    summed over the rows that see the key only (a NaN in a row that does not
//                    see it must not reach it as 0 * NaN).
// 128 threads (4 warps); every output element is summed by one thread in a fixed order.
// Three instances per dtype, as forward_simt.cu's: plain, variant (kVariants: SPEC 10.1's
// window, softcap and ALiBi, variant_tile.cuh) for the problems kernel_choice.h sends there,
// and dropout (kVariants and kDropout: SPEC 11.3, dropout_tile.cuh) for a problem with p > 0
// that runs SIMT.
// BC = 16 keeps the dK/dV pass's tiles (K, V, dK, dV: [BC][D] f32 each) within the 163 KiB of
// an sm_80 block at D = 256.
//
// Launched by cuda/launch_backward.cu through simt_backward (kernels.h). Checked by
// tests/kernels/test_backward_kernels.cpp (emulator, against the reference) and
// tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "backward_tile_loop.cuh"
#include "kernels.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T, bool Variants = false, bool Dropout = false>
struct SimtBackwardProducts {
  using Input = T;
  using Elem = float;  // inputs are widened to f32 once, when gathered
  static constexpr bool kVariants = Variants;  // SPEC 10.1 steps (variant_tile.cuh)
  static constexpr bool kDropout = Dropout;    // SPEC 11.3 (dropout_tile.cuh)
  static constexpr int kThreads = 128;
  static constexpr int kBr = 16;  // query rows per chunk
  static constexpr int kBc = 16;  // keys per chunk

  __host__ __device__ void carve(SmemCarver&, int64_t) {}  // no scratch of its own

  // out[t][c] = <a_t, b_c>.
  __device__ __forceinline__ void scores(const float* a, const float* b, float* out, int64_t D) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int idx = tid; idx < kBr * kBc; idx += nt) {
      const int64_t t = idx / kBc, c = idx % kBc;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += a[t * D + d] * b[c * D + d];
      out[idx] = dot;
    }
    __syncthreads();
  }

  // acc[t] += sum over c < seen[t] (variant instances: and c >= seen_lo[t]) of x[t][c] y[c].
  __device__ __forceinline__ void accumulate_rows(float* acc, const float* x, const float* y,
                                                  const int64_t* seen_lo, const int64_t* seen,
                                                  int64_t D) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int64_t idx = tid; idx < kBr * D; idx += nt) {
      const int64_t t = idx / D, d = idx % D;
      float sum = acc[idx];
      int64_t c = 0;
      if constexpr (kVariants) c = seen_lo[t];
      for (; c < seen[t]; ++c) sum += x[t * kBc + c] * y[c * D + d];
      acc[idx] = sum;
    }
    __syncthreads();
  }

  // acc[c] += sum over the rows t that see key c (c < seen[t]; variant instances: and
  // c >= seen_lo[t]) of x[t][c] y[t].
  __device__ __forceinline__ void accumulate_cols(float* acc, const float* x, const float* y,
                                                  const int64_t* seen_lo, const int64_t* seen,
                                                  int64_t D) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int64_t idx = tid; idx < kBc * D; idx += nt) {
      const int64_t c = idx / D, d = idx % D;
      float sum = acc[idx];
      for (int64_t t = 0; t < kBr; ++t) {
        bool sees = c < seen[t];
        if constexpr (kVariants) sees = sees && c >= seen_lo[t];
        if (sees) sum += x[t * kBc + c] * y[t * D + d];
      }
      acc[idx] = sum;
    }
    __syncthreads();
  }
};

template <class T, bool Variants, bool Dropout>
__global__ void backward_dq_simt_kernel(BackwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  backward_dq_tile<SimtBackwardProducts<T, Variants, Dropout>>(p, p.ix.D, smem);
}

template <class T, bool Variants, bool Dropout>
__global__ void backward_dkdv_simt_kernel(BackwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  backward_dkdv_tile<SimtBackwardProducts<T, Variants, Dropout>>(p, p.ix.D, smem);
}

template __global__ void backward_dq_simt_kernel<float, false, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__half, false, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__nv_bfloat16, false, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<float, false, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__half, false, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__nv_bfloat16, false, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<float, true, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__half, true, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__nv_bfloat16, true, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<float, true, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__half, true, false>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__nv_bfloat16, true, false>(BackwardParams);
template __global__ void backward_dq_simt_kernel<float, true, true>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__half, true, true>(BackwardParams);
template __global__ void backward_dq_simt_kernel<__nv_bfloat16, true, true>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<float, true, true>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__half, true, true>(BackwardParams);
template __global__ void backward_dkdv_simt_kernel<__nv_bfloat16, true, true>(BackwardParams);

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T, bool Variants, bool Dropout>
BackwardKernels simt_backward_instance(int64_t D) {
  using Products = SimtBackwardProducts<T, Variants, Dropout>;
  BackwardKernels k{backward_dq_simt_kernel<T, Variants, Dropout>,
                    backward_dkdv_simt_kernel<T, Variants, Dropout>,
                    backward_smem_bytes<Products>(D, false),
                    backward_smem_bytes<Products>(D, true),
                    Products::kBr,
                    Products::kBc,
                    Products::kThreads};
  // The dK/dV kernel walks the query heads of a kv head itself, dilated ones too, every
  // instance: its tiles live in shared memory, so the walk adds no registers.
  k.dkdv_all_heads = true;
  k.dkdv_dilated_heads = true;
  return k;
}

template <class T>
BackwardKernels simt_backward(int64_t D, bool variants, bool dropout) {
  if (dropout) return simt_backward_instance<T, true, true>(D);
  return variants ? simt_backward_instance<T, true, false>(D)
                  : simt_backward_instance<T, false, false>(D);
}

template BackwardKernels simt_backward<float>(int64_t, bool, bool);
template BackwardKernels simt_backward<__half>(int64_t, bool, bool);
template BackwardKernels simt_backward<__nv_bfloat16>(int64_t, bool, bool);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
