// forward_simt.cu - the SIMT forward kernel: one branch of dense, dilated or block-sparse
// attention (SPEC 2-4) for f32, f16 and bf16 inputs, f32 accumulation, any head dim <= 256.
//
// The tile loop is forward_tile_loop.cuh's (query tile of BR = 16 rows, chunks of BC = 32 keys,
// online softmax in lib/softmax_rules.h's base-2 domain, merge into the workspace). What this
// kernel adds is how the two products are computed, with plain f32 loops over shared tiles:
//   S = Q K^T    thread idx owns S[idx / BC][idx % BC]: one dot product of D terms; the 32
//                lanes of a warp read element d of 32 keys at once, so K rows are padded to
//                an odd pitch (key_pitch): 32 distinct banks, where pitch D = 64 hit one
//                bank 32 times (checked by tests/kernels/test_smem_banks.cpp);
//   O = alpha O + P V    thread idx owns O[idx / D][idx % D]: rescale, then add its P V sum,
//                        over the keys the row sees only (a NaN in a V row the row does not
//                        see must not reach it as 0 * NaN).
// 128 threads (4 warps); every output element is summed by one thread in a fixed order.
// Three instances per dtype: the plain one, the variant one (kVariants: the window, softcap,
// ALiBi and sinks of SPEC 10.1 and 10.3, variant_tile.cuh) that kernel_choice.h picks for a
// problem with any of them, and the dropout one (kVariants and kDropout: SPEC 11,
// dropout_tile.cuh, with any of those options) for a problem with p > 0 that runs SIMT, so the
// plain and variant ones stay as they are.
//
// Launched by cuda/launch.cu through simt_forward (kernels.h). Checked by
// tests/kernels/test_forward_kernels.cpp and tests/kernels/test_nonfinite_kernels.cpp (emulator,
// against the reference) and tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "forward_tile_loop.cuh"
#include "kernels.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T, bool Variants = false, bool Dropout = false>
struct SimtProducts {
  using Input = T;
  using Elem = float;  // inputs are widened to f32 once, when gathered
  static constexpr bool kVariants = Variants;
  static constexpr bool kDropout = Dropout;
  static constexpr int kThreads = 128;
  static constexpr int kBr = 16;  // query rows per tile
  static constexpr int kBc = 32;  // keys per chunk
  static_assert(kBr % (kThreads / 32) == 0, "the warps share the tile's rows evenly");

  __host__ __device__ void carve(SmemCarver&, int64_t) {}  // no scratch of its own

  // K's row pitch in f32 words: odd, so words c * pitch + d of keys c = 0 .. 31 fall in 32
  // distinct banks of the 32 (4-byte banks; an odd pitch is coprime with 32).
  __host__ __device__ static int64_t key_pitch(int64_t D) { return D | 1; }

  // S[t][c] = <Q_t, K_c>.
  __device__ __forceinline__ void scores(const TileMemory<float>& s, int64_t D) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    const int64_t kpitch = key_pitch(D);
    for (int idx = tid; idx < kBr * kBc; idx += nt) {
      const int64_t t = idx / kBc, c = idx % kBc;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += s.q[t * D + d] * s.k[c * kpitch + d];
      s.s[idx] = dot;
    }
    __syncthreads();
  }

  // O = alpha O + P V, over the keys of this chunk that row t sees (c0 + c < cnt[t]; variant
  // instances: and c0 + c >= from[t], the window's first key).
  __device__ __forceinline__ void accumulate(const TileMemory<float>& s, int64_t D, int64_t c0) {
    const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    for (int64_t idx = tid; idx < kBr * D; idx += nt) {
      const int64_t t = idx / D, d = idx % D;
      const int64_t seen = min_i64(kBc, s.cnt[t] - c0);
      int64_t c = 0;
      if constexpr (kVariants) c = max_i64(0, s.from[t] - c0);
      float acc = s.o[idx] * s.alpha[t];
      for (; c < seen; ++c) acc += s.s[t * kBc + c] * s.v[c * D + d];
      s.o[idx] = acc;
    }
    __syncthreads();
  }
};

// No __launch_bounds__(128): with it ptxas 13 spilled 40 bytes in the f16/bf16 versions (seen
// in the ptxas report), without it none.
template <class T, bool Variants, bool Dropout>
__global__ void forward_simt_kernel(ForwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  forward_tile<SimtProducts<T, Variants, Dropout>>(p, p.D, smem);
}

template __global__ void forward_simt_kernel<float, false, false>(ForwardParams);
template __global__ void forward_simt_kernel<__half, false, false>(ForwardParams);
template __global__ void forward_simt_kernel<__nv_bfloat16, false, false>(ForwardParams);
template __global__ void forward_simt_kernel<float, true, false>(ForwardParams);
template __global__ void forward_simt_kernel<__half, true, false>(ForwardParams);
template __global__ void forward_simt_kernel<__nv_bfloat16, true, false>(ForwardParams);
template __global__ void forward_simt_kernel<float, true, true>(ForwardParams);
template __global__ void forward_simt_kernel<__half, true, true>(ForwardParams);
template __global__ void forward_simt_kernel<__nv_bfloat16, true, true>(ForwardParams);

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T, bool Variants, bool Dropout>
ForwardKernel simt_forward_instance(int64_t D) {
  using Products = SimtProducts<T, Variants, Dropout>;
  return ForwardKernel{forward_simt_kernel<T, Variants, Dropout>, tile_smem_bytes<Products>(D),
                       Products::kBr, Products::kThreads};
}

template <class T>
ForwardKernel simt_forward(int64_t D, bool variants, bool dropout) {
  if (dropout) return simt_forward_instance<T, true, true>(D);
  return variants ? simt_forward_instance<T, true, false>(D)
                  : simt_forward_instance<T, false, false>(D);
}

template ForwardKernel simt_forward<float>(int64_t, bool, bool);
template ForwardKernel simt_forward<__half>(int64_t, bool, bool);
template ForwardKernel simt_forward<__nv_bfloat16>(int64_t, bool, bool);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
