// mma_unseen_pairs.cuh - the NaN rule (SPEC 13) on tensor cores. An mma product multiplies every
// pair of its tile: where a row does not see a key its probability (or dS) is exactly 0, but
// 0 * NaN and 0 * inf are NaN, so a value that is not finite in the other operand's row would
// reach rows that never see it. A warp whose chunk holds such a row on the side a product reads,
// and a pair one of its rows does not see, computes that product here instead, pair by pair,
// leaving the unseen pairs out. Finite inputs never come here.
//
//   warp_rows_not_finite<T, D, kStride>(tile, lo, hi)
//       whether rows lo .. hi - 1 of a padded tile hold a value that is not finite; every lane
//       of the warp gets the answer.
//   unseen_values_not_finite<T, D, kStride, kBc>(v, keys0, keys1)
//       the forward's test: whether a V row of the chunk that some row of the warp skips is not
//       finite (keys0, keys1: how many of the chunk's keys the lane's rows take).
//   exact_rows_product<T, D, kStride, kCols>(acc, x, y, seen)
//       acc[r][d] += sum over the columns c with seen(r, c) of round_T(x[r][c]) * y[c][d], for
//       the warp's 16 rows: acc (16 x D) and x (16 x kCols) in mma's C fragment layout (lane
//       g = lane / 4, t = lane % 4 holds rows g and g + 8, columns 2t, 2t + 1 of each 8-column
//       block), y a padded tile of kCols rows. x is rounded to T as the tensor-core path rounds
//       it; the sums run in column order.
//   exact_rows_product_at<T, D, kCols>(acc, x, y_at, seen)
//       the same with y's elements read through y_at(c, d) (a swizzled tile).
// Used by cuda/forward_mma.cu, cuda/forward_mma_tf32.cu, cuda/forward_wgmma.cu (P V) and
// cuda/backward_mma.cu (dS K, P^T dO, dS^T Q). Checked by tests/kernels/test_nonfinite_kernels.cpp
// and test_backward_nonfinite_kernels.cpp (a NaN in one row of Q, K, V or dO, against the
// reference).
#ifndef DILATTN_MMA_UNSEEN_PAIRS_CUH
#define DILATTN_MMA_UNSEEN_PAIRS_CUH

#include <math.h>

#include "attention_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// The fewest of a chunk's keys any row of the warp takes (keys0, keys1: the lane's two rows'):
// keys from there on are skipped by some row of the warp.
__device__ __forceinline__ int warp_fewest_keys(int keys0, int keys1) {
  int m = keys0 < keys1 ? keys0 : keys1;
  for (int o = 1; o < 32; o <<= 1) {
    const int other = __shfl_xor_sync(0xffffffffu, m, o);
    m = other < m ? other : m;
  }
  return m;
}

// Whether the forward's P V must take the exact path: a key of the chunk some row of the warp
// skips (from the fewest on; rows past the chunk's end are zeros) has a V row not finite.
template <class T, int D, int kStride, int kBc>
__device__ __forceinline__ bool unseen_values_not_finite(const T* v, int keys0, int keys1);

template <class T, int D, int kStride>
__device__ __forceinline__ bool warp_rows_not_finite(const T* tile, int lo, int hi) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  bool bad = false;
  for (int idx = lane; idx < (hi - lo) * D; idx += 32) {
    const float x = to_float(tile[(lo + idx / D) * kStride + idx % D]);
    bad = bad || !isfinite(x);
  }
  return __any_sync(0xffffffffu, bad) != 0;
}

template <class T, int D, int kStride, int kBc>
__device__ __forceinline__ bool unseen_values_not_finite(const T* v, int keys0, int keys1) {
  // Most chunks: every row takes every key (one vote, no shuffles).
  if (__all_sync(0xffffffffu, keys0 == kBc && keys1 == kBc)) return false;
  const int fewest = warp_fewest_keys(keys0, keys1);
  return fewest < kBc && warp_rows_not_finite<T, D, kStride>(v, fewest, kBc);
}

// The same with y read through y_at(c, d) (a float), for tiles that are not padded rows
// (forward_wgmma.cu's swizzled V).
template <class T, int D, int kCols, class YAt, class Seen>
__device__ __forceinline__ void exact_rows_product_at(float (&acc)[D / 8][4],
                                                      const float (&x)[kCols / 8][4], YAt y_at,
                                                      Seen seen) {
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  DILATTN_UNROLL
  for (int n = 0; n < kCols / 8; ++n)
    for (int src_t = 0; src_t < 4; ++src_t)
      DILATTN_UNROLL
      for (int e = 0; e < 2; ++e) {
        // Column c = 8n + 2 src_t + e, held by lane 4g + src_t as x[n][e] (row g) and
        // x[n][2 + e] (row g + 8).
        const int c = 8 * n + 2 * src_t + e;
        const float x0 = to_float(from_float<T>(__shfl_sync(0xffffffffu, x[n][e], 4 * g + src_t)));
        const float x1 =
            to_float(from_float<T>(__shfl_sync(0xffffffffu, x[n][2 + e], 4 * g + src_t)));
        const bool seen0 = seen(g, c), seen1 = seen(g + 8, c);
        DILATTN_UNROLL
        for (int nd = 0; nd < D / 8; ++nd)
          DILATTN_UNROLL
          for (int f = 0; f < 2; ++f) {
            const float yv = y_at(c, nd * 8 + 2 * t + f);
            if (seen0) acc[nd][f] += x0 * yv;
            if (seen1) acc[nd][2 + f] += x1 * yv;
          }
      }
}

// Element (c, d) of a tile of rows kStride elements apart.
template <class T, int kStride>
struct PaddedRows {
  const T* y;
  __device__ __forceinline__ float operator()(int c, int d) const {
    return to_float(y[c * kStride + d]);
  }
};

template <class T, int D, int kStride, int kCols, class Seen>
__device__ __forceinline__ void exact_rows_product(float (&acc)[D / 8][4],
                                                   const float (&x)[kCols / 8][4], const T* y,
                                                   Seen seen) {
  exact_rows_product_at<T, D, kCols>(acc, x, PaddedRows<T, kStride>{y}, seen);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_UNSEEN_PAIRS_CUH
