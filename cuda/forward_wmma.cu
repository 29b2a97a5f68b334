// forward_wmma.cu - the tensor-core forward kernel: one branch of dense, dilated or
// block-sparse attention (SPEC 2-4) for f16 and bf16 inputs, head dims 64 and 128, with WMMA
// 16x16x16 tiles and f32 accumulation.
//
// The tile loop is forward_tile_loop.cuh's (query tile of BR = 16 rows, chunks of BC = 64 keys,
// online softmax in lib/internal/softmax_rules.h's base-2 domain, merge into the workspace); the Q, K, V
// tiles stay in the input dtype. What this kernel adds is the two products on tensor cores:
//   S = Q K^T    warp w computes the 16x16 block of keys 16w .. 16w+15 (K rows read as a
//                column-major B operand), stored to S in f32;
//   O = alpha O + P V    P rounded to the input dtype (as FlashAttention does); warp w
//                computes the 16-column blocks w, w + 4, ... of PV into f32 scratch; then
//                O = alpha O + PV elementwise (so no fragment layout is assumed).
// 128 threads (4 warps), one 16-key block of S per warp.
//
// Launched by cuda/launch.cu; checked by tests/kernels/test_forward_kernels.cpp and
// tests/kernels/test_nonfinite_kernels.cpp (emulator, against the reference) and
// tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "forward_tile_loop.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T, int D>
struct WmmaProducts {
  using Input = T;
  using Elem = T;  // tensor-core operands in the input dtype
  static constexpr int kThreads = 128;
  static constexpr int kBr = 16;  // query rows per tile: one WMMA row block
  static constexpr int kBc = 64;  // keys per chunk: one 16-key block per warp
  static_assert(kBc / 16 == kThreads / 32, "one 16-key block of S per warp");
  static_assert(D % 16 == 0, "PV in 16-column blocks");

  T* p;      // [BR][BC] the probabilities in the input dtype
  float* pv; // [BR][D] this chunk's P V

  __host__ __device__ void carve(SmemCarver& c, int64_t) {
    p = c.take<T>(kBr * kBc);
    pv = c.take<float>(kBr * D);
  }

  // S = Q K^T: warp w owns keys 16w .. 16w+15.
  __device__ __forceinline__ void scores(const TileMemory<T>& s, int64_t) {
    using namespace nvcuda;
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    const int num_warps = static_cast<int>(blockDim.x) >> 5;
    for (int cb = warp; cb < kBc / 16; cb += num_warps) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < D; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;
        wmma::load_matrix_sync(a, s.q + k0, D);
        wmma::load_matrix_sync(bt, s.k + cb * 16 * D + k0, D);
        wmma::mma_sync(acc, a, bt, acc);
      }
      wmma::store_matrix_sync(s.s + cb * 16, acc, kBc, wmma::mem_row_major);
    }
    __syncthreads();
  }

  // O = alpha O + P V: P to the input dtype, PV on tensor cores (warp w owns output columns
  // 16w .., 16(w + 4) .., ...), then the elementwise update.
  __device__ __forceinline__ void accumulate(const TileMemory<T>& s, int64_t, int64_t) {
    using namespace nvcuda;
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    const int warp = tid >> 5, num_warps = nt >> 5;
    for (int idx = tid; idx < kBr * kBc; idx += nt) p[idx] = from_float<T>(s.s[idx]);
    __syncthreads();
    for (int nb = warp; nb < D / 16; nb += num_warps) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < kBc; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
        wmma::load_matrix_sync(a, p + k0, kBc);
        wmma::load_matrix_sync(bv, s.v + k0 * D + nb * 16, D);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(pv + nb * 16, acc, D, wmma::mem_row_major);
    }
    __syncthreads();
    for (int idx = tid; idx < kBr * D; idx += nt) s.o[idx] = s.o[idx] * s.alpha[idx / D] + pv[idx];
    __syncthreads();
  }
};

template <class T, int D>
__global__ void forward_wmma_kernel(ForwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  forward_tile<WmmaProducts<T, D>>(p, D, smem);
}

template __global__ void forward_wmma_kernel<__half, 64>(ForwardParams);
template __global__ void forward_wmma_kernel<__half, 128>(ForwardParams);
template __global__ void forward_wmma_kernel<__nv_bfloat16, 64>(ForwardParams);
template __global__ void forward_wmma_kernel<__nv_bfloat16, 128>(ForwardParams);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
