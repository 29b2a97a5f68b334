// backward_wmma.cu - the tensor-core backward kernels: dQ, and dK with dV, of one branch of
// dense, dilated or block-sparse attention (SPEC 6 over SPEC 2-4) for f16 and bf16 inputs, head
// dims 64 and 128, with WMMA 16x16x16 tiles and f32 accumulation.
//
// The loops are backward_tile_loop.cuh's (query chunks of BR = 16 rows, key chunks of BC = 64
// keys, P from the forward's LSE in lib/softmax_rules.h's base-2 domain); the Q, K, V, dO tiles
// stay in the input dtype. What this file adds is the products on tensor cores:
//   scores           out = a b^T: warp w computes the 16x16 block of keys 16w .. 16w+15
//                    (b's rows read as a column-major B operand), as the forward's S;
//   accumulate_rows  dQ += dS K: dS rounded to the input dtype (as FlashAttention rounds P and
//                    dS); warp w owns the 16-column blocks w, w + 4, ... of dQ, loads them from
//                    the f32 tile, adds dS K over the 4 key blocks in order and stores them back;
//   accumulate_cols  dK += dS^T Q, dV += P^T dO: warp w owns key rows 16w .. 16w+15 of dK and
//                    dV; x^T is read as a column-major A operand of the rounded x.
// 128 threads (4 warps). Each output block has one owning warp and a fixed mma order, so the
// result is bitwise the same in every thread order. A pair a row does not see has P = dS = 0,
// but the tensor-core product still multiplies it: a NaN in a Q, K or dO row the pair's other
// side does not see can reach it here as 0 * NaN (the SIMT kernels skip such pairs).
//
// Launched by cuda/launch_backward.cu through wmma_backward (kernels.h). Checked by
// tests/kernels/test_backward_kernels.cpp (emulator, against the reference) and
// tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "backward_tile_loop.cuh"
#include "kernels.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T, int D>
struct WmmaBackwardProducts {
  using Input = T;
  using Elem = T;  // tensor-core operands in the input dtype
  static constexpr int kThreads = 128;
  static constexpr int kBr = 16;  // query rows per chunk: one WMMA row block
  static constexpr int kBc = 64;  // keys per chunk: one 16-key block per warp
  static_assert(kBc / 16 == kThreads / 32, "one 16-key block per warp");
  static_assert(D % 16 == 0, "16-column blocks");

  T* xe;  // [BR][BC] P or dS rounded to the input dtype

  __host__ __device__ void carve(SmemCarver& c, int64_t) { xe = c.take<T>(kBr * kBc); }

  // out = a b^T: warp w owns keys 16w .. 16w+15.
  __device__ __forceinline__ void scores(const T* a, const T* b, float* out, int64_t) {
    using namespace nvcuda;
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    const int num_warps = static_cast<int>(blockDim.x) >> 5;
    for (int cb = warp; cb < kBc / 16; cb += num_warps) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < D; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, a + k0, D);
        wmma::load_matrix_sync(fb, b + cb * 16 * D + k0, D);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(out + cb * 16, acc, kBc, wmma::mem_row_major);
    }
    __syncthreads();
  }

  // x to the input dtype (0 already where the row does not see the key).
  __device__ __forceinline__ void round_x(const float* x) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int idx = tid; idx < kBr * kBc; idx += nt) xe[idx] = from_float<T>(x[idx]);
    __syncthreads();
  }

  // acc [BR][D] += x y, y [BC][D]: warp w owns the column blocks w, w + 4, ...
  __device__ __forceinline__ void accumulate_rows(float* acc, const float* x, const T* y,
                                                  const int64_t*, int64_t) {
    using namespace nvcuda;
    round_x(x);
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    const int num_warps = static_cast<int>(blockDim.x) >> 5;
    for (int nb = warp; nb < D / 16; nb += num_warps) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
      wmma::load_matrix_sync(fc, acc + nb * 16, D, wmma::mem_row_major);
      for (int k0 = 0; k0 < kBc; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, xe + k0, kBc);
        wmma::load_matrix_sync(fb, y + k0 * D + nb * 16, D);
        wmma::mma_sync(fc, fa, fb, fc);
      }
      wmma::store_matrix_sync(acc + nb * 16, fc, D, wmma::mem_row_major);
    }
    __syncthreads();
  }

  // acc [BC][D] += x^T y, y [BR][D]: warp w owns key rows 16w .. 16w+15.
  __device__ __forceinline__ void accumulate_cols(float* acc, const float* x, const T* y,
                                                  const int64_t*, int64_t) {
    using namespace nvcuda;
    round_x(x);
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    const int num_warps = static_cast<int>(blockDim.x) >> 5;
    for (int cb = warp; cb < kBc / 16; cb += num_warps) {
      // x^T rows 16cb .., i.e. x's columns: element (c, t) at xe[t * BC + 16cb + c].
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> fa;
      wmma::load_matrix_sync(fa, xe + cb * 16, kBc);
      for (int nb = 0; nb < D / 16; ++nb) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        float* block = acc + cb * 16 * D + nb * 16;
        wmma::load_matrix_sync(fc, block, D, wmma::mem_row_major);
        wmma::load_matrix_sync(fb, y + nb * 16, D);
        wmma::mma_sync(fc, fa, fb, fc);
        wmma::store_matrix_sync(block, fc, D, wmma::mem_row_major);
      }
    }
    __syncthreads();
  }
};

template <class T, int D>
__global__ void backward_dq_wmma_kernel(BackwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  backward_dq_tile<WmmaBackwardProducts<T, D>>(p, D, smem);
}

template <class T, int D>
__global__ void backward_dkdv_wmma_kernel(BackwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  backward_dkdv_tile<WmmaBackwardProducts<T, D>>(p, D, smem);
}

template __global__ void backward_dq_wmma_kernel<__half, 64>(BackwardParams);
template __global__ void backward_dq_wmma_kernel<__half, 128>(BackwardParams);
template __global__ void backward_dq_wmma_kernel<__nv_bfloat16, 64>(BackwardParams);
template __global__ void backward_dq_wmma_kernel<__nv_bfloat16, 128>(BackwardParams);
template __global__ void backward_dkdv_wmma_kernel<__half, 64>(BackwardParams);
template __global__ void backward_dkdv_wmma_kernel<__half, 128>(BackwardParams);
template __global__ void backward_dkdv_wmma_kernel<__nv_bfloat16, 64>(BackwardParams);
template __global__ void backward_dkdv_wmma_kernel<__nv_bfloat16, 128>(BackwardParams);

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T, int D>
BackwardKernels wmma_backward_of() {
  using Products = WmmaBackwardProducts<T, D>;
  return BackwardKernels{backward_dq_wmma_kernel<T, D>,
                         backward_dkdv_wmma_kernel<T, D>,
                         backward_smem_bytes<Products>(D, false),
                         backward_smem_bytes<Products>(D, true),
                         Products::kBr,
                         Products::kBc,
                         Products::kThreads};
}

template <class T>
BackwardKernels wmma_backward(int64_t D) {  // backward_kernel_for picks WMMA for D = 64, 128 only
  return D == 64 ? wmma_backward_of<T, 64>() : wmma_backward_of<T, 128>();
}

template BackwardKernels wmma_backward<__half>(int64_t);
template BackwardKernels wmma_backward<__nv_bfloat16>(int64_t);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
