// mma_rows.cuh - a tensor-core forward warp's query rows, held in mma's C fragment layout:
// the online softmax over a chunk of scores and the finished row's O and LSE (SPEC 2-5,
// through lib/softmax_rules.h). Used by cuda/forward_mma.cu (m16n8k16) and cuda/forward_mma_tf32.cu
// (m16n8k8): the two products' C fragments have the same layout.
//
// Lane (g = lane / 4, t = lane % 4) of warp w holds rows 16w + g ("row 0") and 16w + g + 8
// ("row 1") of the tile and, of every 8-column block, columns 2t and 2t + 1 (PTX ISA, "Matrix
// Fragments for mma.m16n8k8" and "... mma.m16n8k16": c[0], c[1] row g; c[2], c[3] row g + 8).
//
//   RowState<D>                 O as D / 8 C fragments, the running max m and sum l (base 2)
//   row_keys_in_chunk(...)      how many of a chunk's keys a row takes
//   softmax_chunk(p, s, ...)    S of one chunk (kTiles C fragments): scale, mask, the online
//                               update of m, l and O; S becomes P (softmax_scaled: the
//                               same with pre and post given; softmax_scaled_scores and
//                               rescale_rows: its two halves, the scores' and O's)
//   finish_row<T, D>(p, ...)    one branch: O / l and LSE to the caller's tensors (with
//                               the sink joined, SPEC 10.3, when kSinks); several: SPEC 5's
//                               merge into the workspace
// Checked through the kernel by tests/kernels/test_forward_kernels.cpp.
#ifndef DILATTN_MMA_ROWS_CUH
#define DILATTN_MMA_ROWS_CUH

#include "forward_outputs.cuh"
#include "softmax_rules.h"
#include "variant_tile.cuh"  // sink_merge

namespace dilattn {
namespace DILATTN_BACKEND_NS {
namespace mma_rows {

template <int D>
struct RowState {
  float o[D / 8][4];  // O, as C fragments over D in 8-column blocks
  float m[2], l[2];   // running max and sum of rows 0 and 1 (base 2, softmax_rules.h)
};

template <int D>
__device__ __forceinline__ void start(RowState<D>& st) {
  for (int nd = 0; nd < D / 8; ++nd)
    for (int e = 0; e < 4; ++e) st.o[nd][e] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;
}

// max_nan / sum over the 4 lanes of a row (lanes 4g .. 4g + 3), in a fixed order.
__device__ __forceinline__ float row_max_nan(float x) {
  x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// How many of a chunk's first keys a row takes: of the chunk's cn keys (from key c0 of its
// span), those before the row's own count in the span (the causal cut, the span's end); 0 to cn.
__device__ __forceinline__ int row_keys_in_chunk(int64_t cn, int64_t count, int64_t c0) {
  return static_cast<int>(max_i64(0, min_i64(cn, count - c0)));
}

// s: the chunk's scores <q, k> (kTiles C fragments: the lane's keys are c = 8n + 2t + (e & 1)).
// A key at or past the row's keys0 / keys1 (row_keys_in_chunk) is -inf, by selection, so a NaN
// key masked out stays out: one 32-bit compare per score, against the row's count less 2t,
// made only when one of the lane's rows stops inside the chunk. Then softmax_rules.h's online
// update: s becomes P (unnormalised, base 2), O and l rescaled by alpha and l += the chunk's row
// sums. The caller adds P V to O.
//
// The work per score is what bounds these kernels (tensor cores wait on it), so the usual case
// takes four instructions: with pre > 0 the scaled maximum is pre times the unscaled one (f32
// multiplication by a positive number keeps order, so m is bitwise max(pre s)), and with post = 1
// each probability is online_prob_fused's one fused multiply-add and 2^x; then the row sum. O is
// rescaled only when some row of the warp moved its maximum (alpha = 1 multiplies exactly, so
// skipping it changes no bit). A negative pre, post != 1 or a scaled maximum that overflowed takes
// the general form, score by score as online_prob states it.
//
// softmax_scaled is the same with pre and post given: the variant instances (mma_variants.cuh)
// apply pre, the softcap and ALiBi to the scores first and pass pre = 1. It is
// softmax_scaled_scores (m, l, P and the rows' alpha) then rescale_rows (O *= alpha): a kernel
// whose O is still being written by an asynchronous product (forward_wgmma.cu) calls the two
// apart.
//
// lw (shared pairs, lib/pair_sharing.h): log2 of the weight of the lane's pairs, per row and
// column parity (lw[e >> 1][e & 1] for s[n][e]); each probability is 2^(... + lw), the weight
// times it, by one more term in the shift the exponent takes already: no work per score. 0
// everywhere leaves every bit as without it; -inf makes the pair's probability 0.
// kWeighted false: the unweighted form, which holds no register for lw (the instances that
// never share pairs take it).
template <int kTiles, int D, bool kWeighted>
__device__ __forceinline__ void softmax_scores_as(const float pre, const float post,
                                                  float (&s)[kTiles][4], int keys0, int keys1,
                                                  RowState<D>& st, float (&alpha)[2],
                                                  const float (&lw)[2][2]) {
  constexpr int kKeys = kTiles * 8;
  const int t = static_cast<int>(threadIdx.x) & 3;
  const bool pre_positive = pre > 0.0f;
  if (!pre_positive)
    for (int n = 0; n < kTiles; ++n)
      for (int e = 0; e < 4; ++e) s[n][e] *= pre;
  if (keys0 < kKeys || keys1 < kKeys) {
    const int keep[2] = {keys0 - 2 * t, keys1 - 2 * t};
    for (int n = 0; n < kTiles; ++n)
      for (int e = 0; e < 4; ++e)
        s[n][e] = n * 8 + (e & 1) < keep[e >> 1] ? s[n][e] : -INFINITY;
  }
  float chunk_max[2] = {-INFINITY, -INFINITY};
  for (int n = 0; n < kTiles; ++n)
    for (int e = 0; e < 4; ++e) chunk_max[e >> 1] = max_nan(chunk_max[e >> 1], s[n][e]);
  float sum[2] = {0.0f, 0.0f}, shift[2];
  for (int r = 0; r < 2; ++r) {
    const float scaled_max = pre_positive ? row_max_nan(chunk_max[r]) * pre
                                          : row_max_nan(chunk_max[r]);
    const float m_new = max_nan(st.m[r], scaled_max);
    shift[r] = online_shift(m_new);
    alpha[r] = online_rescale(st.m[r], m_new, post);
    st.m[r] = m_new;
  }
  if (pre_positive && post == 1.0f && shift[0] != INFINITY && shift[1] != INFINITY) {
    float weighted[2][2];
    for (int x = 0; x < 4; ++x)
      weighted[x / 2][x % 2] = kWeighted ? shift[x / 2] - lw[x / 2][x % 2] : shift[x / 2];
    for (int n = 0; n < kTiles; ++n)
      for (int e = 0; e < 4; ++e) {
        s[n][e] = online_prob_fused(s[n][e], pre, weighted[e >> 1][e & 1]);
        sum[e >> 1] += s[n][e];
      }
  } else {
    const float factor = pre_positive ? pre : 1.0f;  // a negative pre is in s already
    float weighted[2][2];
    for (int x = 0; x < 4; ++x)
      weighted[x / 2][x % 2] =
          kWeighted ? shift[x / 2] - __fdividef(lw[x / 2][x % 2], post) : shift[x / 2];
    for (int n = 0; n < kTiles; ++n)
      for (int e = 0; e < 4; ++e) {
        s[n][e] = online_prob(s[n][e] * factor, weighted[e >> 1][e & 1], post);
        sum[e >> 1] += s[n][e];
      }
  }
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + row_sum(sum[r]);
}

template <int kTiles, int D>
__device__ __forceinline__ void softmax_scaled_scores(const float pre, const float post,
                                                      float (&s)[kTiles][4], int keys0,
                                                      int keys1, RowState<D>& st,
                                                      float (&alpha)[2],
                                                      const float (&lw)[2][2]) {
  softmax_scores_as<kTiles, D, true>(pre, post, s, keys0, keys1, st, alpha, lw);
}
// Unweighted: every pair once.
template <int kTiles, int D>
__device__ __forceinline__ void softmax_scaled_scores(const float pre, const float post,
                                                      float (&s)[kTiles][4], int keys0,
                                                      int keys1, RowState<D>& st,
                                                      float (&alpha)[2]) {
  const float unweighted[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  softmax_scores_as<kTiles, D, false>(pre, post, s, keys0, keys1, st, alpha, unweighted);
}

// O rescaled by the rows' alpha, unless no row of the warp moved its maximum (alpha = 1
// multiplies exactly, so skipping it changes no bit).
template <int D>
__device__ __forceinline__ void rescale_rows(RowState<D>& st, const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
    for (int nd = 0; nd < D / 8; ++nd)
      for (int e = 0; e < 4; ++e) st.o[nd][e] *= alpha[e >> 1];
}

template <int kTiles, int D>
__device__ __forceinline__ void softmax_scaled(const float pre, const float post,
                                               float (&s)[kTiles][4], int keys0, int keys1,
                                               RowState<D>& st) {
  float alpha[2];
  softmax_scaled_scores<kTiles, D>(pre, post, s, keys0, keys1, st, alpha);
  rescale_rows<D>(st, alpha);
}

template <int kTiles, int D>
__device__ __forceinline__ void softmax_chunk(const ForwardParams& p, float (&s)[kTiles][4],
                                              int keys0, int keys1, RowState<D>& st) {
  softmax_scaled<kTiles, D>(p.score_pre, p.score_post, s, keys0, keys1, st);
}

// softmax_chunk with the lane's shared-pair weights (attention_tile.cuh lane_weights).
template <int kTiles, int D>
__device__ __forceinline__ void softmax_chunk(const ForwardParams& p, float (&s)[kTiles][4],
                                              int keys0, int keys1, RowState<D>& st,
                                              const float (&lw)[2][2]) {
  float alpha[2];
  softmax_scaled_scores<kTiles, D>(p.score_pre, p.score_post, s, keys0, keys1, st, alpha, lw);
  rescale_rows<D>(st, alpha);
}

// Row r (0 or 1) of the lane, query row i (-1: none): one branch writes O / l and LSE to the
// caller's tensors; several branches merge (O / l, LSE) into the workspace with SPEC 5's
// update. All 4 lanes of the row read the old LSE before the first of them writes it.
// With sinks (SPEC 10.3), in every instance of every kernel that finishes here: one branch joins
// the head's sink once (variant_tile.cuh's sink_merge); several merge into a workspace the
// launcher started at the sinks (launch.cu). So sinks alone need no variant instance.
template <class T, int D>
__device__ __forceinline__ void finish_row(const ForwardParams& p, int64_t b, int64_t h,
                                           int64_t i, int r, const RowState<D>& st) {
  const int t = static_cast<int>(threadIdx.x) & 3;
  const float m = st.m[r], l = st.l[r];
  double lse_b = finalize_lse(m, l, p.score_post);
  float factor = finalize_o_factor(m, l);
  if (p.o != nullptr) {
    if (i < 0) return;
    if (p.sinks != nullptr) sink_merge(p.sinks[h], &lse_b, &factor);
    for (int nd = 0; nd < D / 8; ++nd)
      for (int e = 0; e < 2; ++e)
        store_o<T>(p, b, i, h, nd * 8 + 2 * t + e, st.o[nd][2 * r + e] * factor);
    if (t == 0) store_lse(p, b, h, i, lse_b);
    return;
  }
  // A row all of whose pairs in this branch an earlier branch computes (shared pairs,
  // lib/pair_sharing.h) has l = 0 here: it adds nothing (and 0 * (1 / 0) would be a NaN). A NaN
  // l is not 0 and merges, so the NaN reaches the row (SPEC 13).
  const bool merge = i >= 0 && !row_is_empty(m) && l != 0.0f;
  const int64_t row = (b * p.H + h) * p.Nq + i;
  const double lse_old = merge ? p.lse_acc[row] : 0.0;
  __syncwarp();
  if (!merge) return;
  const double lse_new = merge_lse(lse_old, lse_b);
  if (t == 0) p.lse_acc[row] = lse_new;
  const float keep = static_cast<float>(merge_weight(lse_old, lse_new));
  const float add = static_cast<float>(merge_weight(lse_b, lse_new)) * factor;
  float* acc = p.o_acc + row * D;
  for (int nd = 0; nd < D / 8; ++nd)
    for (int e = 0; e < 2; ++e) {
      float* x = acc + nd * 8 + 2 * t + e;
      *x = *x * keep + st.o[nd][2 * r + e] * add;
    }
}

}  // namespace mma_rows
}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_ROWS_CUH
