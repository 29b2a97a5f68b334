// mma_variants.cuh - what the tensor-core kernels' variant instances (forward_mma.cu,
// forward_mma_tf32.cu, backward_mma.cu and backward_mma_tf32.cu with Variants = true) add to a
// warp's chunk for SPEC 10.1 and 10.3: the window's cut of each row's keys, the softcap and ALiBi
// bias of each score (and the softcap's slope in the backward), and the sink's place in a row's
// result. The plain instances never include these steps (if constexpr), so the
// kernels of problems without an option run the instructions they ran without this file.
//
//   ChunkWindow               the chunk's keys as the variant steps see them: its first key
//                             index and step, and the first of its keys each of the lane's two
//                             rows takes (the window's start; the count is keys0 / keys1);
//   chunk_window(...)         that, from the span's descriptor and the rows' ranges [from, cnt)
//                             (read_window_span, variant_tile.cuh);
//   VariantRows               the lane's two query rows and the block's ALiBi slope;
//   softmax_chunk_variant     mma_rows::softmax_chunk with each score element of the C
//                             fragments (row i, key j known per element) masked to its row's
//                             window range, softcapped and biased (variant_tile.cuh's
//                             variant_score), in variant_tile.cuh's score domain;
//   window_unseen_values_not_finite
//                             mma_unseen_pairs.cuh's test for the NaN rule with the keys a
//                             row's window starts after also unseen;
//   variant_prob_and_ds       the backward's P and dS of one pair (mma_backward_loop.cuh's
//                             prob_and_ds) with the variant score, dS times the softcap's slope
//                             1 - tanh^2 (SPEC 10.1), as backward_tile_loop.cuh's SIMT instance.
//
// The walk itself skips what no window reaches: read_window_span starts a tile's span at the
// first key any of its rows sees and ends it at the last, so the chunk loop (mma_chunk_loop.cuh)
// walks only the chunks the rows' windows reach, and a warp none of whose rows sees a key of a
// chunk skips it; the backward's dK/dV pass walks only the query rows whose window reaches its
// key tile (window_query_cut, placed_positions.cuh). Sinks join each finished row of the forward
// once, in every instance (mma_rows::finish_row), so sinks alone run the plain instances;
// d_sinks is the launcher's (launch_backward.cu).
// Checked by tests/kernels/test_variant_kernels.cpp against the reference.
#ifndef DILATTN_MMA_VARIANTS_CUH
#define DILATTN_MMA_VARIANTS_CUH

#include "mma_rows.cuh"
#include "mma_unseen_pairs.cuh"
#include "variant_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

struct ChunkWindow {
  int64_t key0, step;  // the chunk's key c is key0 + step * c
  int from0, from1;    // the first key of the chunk rows 0 and 1 of the lane take, 0 .. BC
};

// The chunk loop's fifth argument where there is one (variant instances), else an empty window.
__device__ __forceinline__ ChunkWindow chunk_window_or_none() { return ChunkWindow{0, 1, 0, 0}; }
__device__ __forceinline__ ChunkWindow chunk_window_or_none(const ChunkWindow& w) { return w; }

// span: the span's descriptor {first, step, largest count}; c0: the chunk's first key in it;
// from_r0, from_r1: the lane's rows' window starts in the span (read_window_span).
template <int kBc>
__device__ __forceinline__ ChunkWindow chunk_window(const int64_t* span, int64_t c0,
                                                    int64_t from_r0, int64_t from_r1) {
  ChunkWindow w;
  w.key0 = span[0] + span[1] * c0;
  w.step = span[1];
  w.from0 = static_cast<int>(min_i64(kBc, max_i64(0, from_r0 - c0)));
  w.from1 = static_cast<int>(min_i64(kBc, max_i64(0, from_r1 - c0)));
  return w;
}

struct VariantRows {
  int64_t i0 = -1, i1 = -1;  // the lane's rows 0 and 1 (-1: none; such a row takes no key)
  float slope = 0.0f;        // the block's ALiBi slope in the score domain (0: none)
};

__device__ __forceinline__ VariantRows variant_rows(const ForwardParams& p, int64_t b, int64_t h,
                                                    int64_t i0, int64_t i1) {
  VariantRows vr;
  vr.i0 = i0;
  vr.i1 = i1;
  vr.slope = block_alibi_slope(p, b, h);
  return vr;
}

// s: the chunk's scores <q, k> in C fragments (the lane's keys c = 8n + 2t + (e & 1), rows
// e >> 1). Row r takes keys [from_r, keys_r) of the chunk: those become variant_score(pre s),
// the rest -inf (by selection: a NaN key outside the window stays out); then the online update
// with the scale already applied (pre = 1).
template <int kTiles, int D>
__device__ __forceinline__ void softmax_chunk_variant(const ForwardParams& p,
                                                      float (&s)[kTiles][4], int keys0,
                                                      int keys1, const ChunkWindow& w,
                                                      const VariantRows& vr,
                                                      mma_rows::RowState<D>& st) {
  const int t = static_cast<int>(threadIdx.x) & 3;
  const int from[2] = {w.from0, w.from1}, keys[2] = {keys0, keys1};
  const int64_t row[2] = {vr.i0, vr.i1};
  for (int n = 0; n < kTiles; ++n)
    for (int e = 0; e < 4; ++e) {
      const int c = n * 8 + 2 * t + (e & 1), r = e >> 1;
      s[n][e] = c >= from[r] && c < keys[r]
                    ? variant_score(p, s[n][e] * p.score_pre, vr.slope, row[r], w.key0 + w.step * c)
                    : -INFINITY;
    }
  constexpr int kKeys = kTiles * 8;  // every key is masked or scored already
  mma_rows::softmax_scaled<kTiles, D>(1.0f, p.score_post, s, kKeys, kKeys, st);
}

// Whether P V must take the exact path (mma_unseen_pairs.cuh): a key of the chunk some row of the
// warp skips has a V row not finite; the skipped keys are those before the latest window start
// and those from the fewest keys on.
template <class T, int D, int kStride, int kBc>
__device__ __forceinline__ bool window_unseen_values_not_finite(const T* v, int keys0, int keys1,
                                                                const ChunkWindow& w) {
  if (__all_sync(0xffffffffu, keys0 == kBc && keys1 == kBc && w.from0 == 0 && w.from1 == 0))
    return false;
  const int fewest = warp_fewest_keys(keys0, keys1);
  const int latest = -warp_fewest_keys(-w.from0, -w.from1);
  return (fewest < kBc && warp_rows_not_finite<T, D, kStride>(v, fewest, kBc)) ||
         (latest > 0 && warp_rows_not_finite<T, D, kStride>(v, 0, latest));
}

// The backward's pair (query row i, key j), seen or not: P = 2^(post (score - lse_s)) with
// score = variant_score(pre s), and dS = P (dP - D_i) (1 - tanh^2(pre s / cs)); both exactly 0
// where the pair is not seen (selection: whatever s and dp hold there).
__device__ __forceinline__ void variant_prob_and_ds(const ForwardParams& p, bool seen,
                                                    float slope, int64_t i, int64_t j,
                                                    float lse_s, float di, float& s, float& dp) {
  const float x = s * p.score_pre;
  const float prob =
      seen ? online_prob(variant_score(p, x, slope, i, j), lse_s, p.score_post) : 0.0f;
  dp = seen ? prob * (dp - di) * softcap_slope_f32(x, p.softcap_s) : 0.0f;
  s = prob;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_VARIANTS_CUH
