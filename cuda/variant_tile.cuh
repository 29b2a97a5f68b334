// variant_tile.cuh - what the SIMT kernels' variant instances (forward_simt.cu and
// backward_simt.cu with Products::kVariants) add to a tile for SPEC 10.1 and 10.3: the window's
// cut of each row's keys, the softcap and ALiBi bias of each score, and the sink's place in a
// row's result. The plain instances never include these steps (if constexpr), so the kernels of
// problems without an option run the instructions they ran without this file.
//
//   block_alibi_slope     the ALiBi slope of the block's (b, h), in the score domain;
//   variant_score         a scaled score (pre * <q, k>) softcapped, then biased by ALiBi;
//   read_window_span      read_span (attention_tile.cuh) with each row's keys cut by the
//                         window: the rows' keys are then a range [from, cnt) of the shared
//                         progression, and the span starts at the first key any row sees, so a
//                         tile walks only the chunks its rows' windows reach;
//   window_query_cut      (placed_positions.cuh) the dK/dV pass's query rows cut to those
//                         whose window can reach the key tile (the same skipping from the
//                         keys' side);
//   window_keys_seen      the tile's keys a query row sees, a range [lo, hi) of them;
//   sink_merge            a finished row's (O factor, LSE) with the sink joined once.
//
// The score domain is lib/softmax_rules.h's: s = pre * <q, k> and p = 2^(post (s - m)), so a
// natural score S is s = S * log2(e) / post. The launcher runs a softcapped problem with post = 1
// (launch_shared.cu, kernel_score_scale): the softcap bounds every score, so no scale needs to
// move after the maximum, and c * tanh(S / c) in the score domain is cs * tanh(s / cs) with
// cs = c * log2(e) (lib/score_rules.h's softcapped_f32).
//
// Checked by tests/kernels/test_variant_kernels.cpp against the reference.
#ifndef DILATTN_VARIANT_TILE_CUH
#define DILATTN_VARIANT_TILE_CUH

#include "attention_tile.cuh"
#include "placed_positions.cuh"
#include "score_rules.h"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// The ALiBi slope of (b, h) in the score domain (0 without ALiBi): slopes[h] or slopes[b][h]
// (SPEC 10.1; a placed sub-problem's head in the whole problem's), times log2(e) / post.
__device__ __forceinline__ float block_alibi_slope(const ForwardParams& p, int64_t b, int64_t h) {
  if (p.alibi == nullptr) return 0.0f;
  const OptionHead at = option_heads(p, h);
  const double m = p.alibi[p.alibi_per_batch ? b * at.heads + at.head : at.head];
  return static_cast<float>(m * p.alibi_to_score);
}

// SPEC 10.1 in the score domain: the scaled score x = pre * <q_i, k_j> softcapped (cs > 0),
// then the ALiBi bias of (i, j) added (slope_s 0: none).
__device__ __forceinline__ float variant_score(const ForwardParams& p, float x, float slope_s,
                                               int64_t i, int64_t j) {
  float s = softcapped_f32(x, p.softcap_s);
  if (slope_s != 0.0f) s += alibi_bias_at(p, slope_s, i, j);
  return s;
}

// read_span with the window: rows keep their keys kw = window_cut(row_keys) as the range
// [from[t], cnt[t]) of indices into the span's progression {span_out[0], span_out[1]}, which
// starts at the first key any row of the tile sees; span_out[2] is the largest cnt. Rows with
// no key get from = cnt = 0. Run by the 32 lanes of warp 0; the result does not depend on which
// lane read which row (first and step from the last row with a key, as read_span).
__device__ __forceinline__ void read_window_span(const ForwardParams& p, int64_t h, int64_t tile,
                                                 int64_t span, const int64_t* rows, int br,
                                                 int64_t* from, int64_t* cnt,
                                                 int64_t* span_out) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t kNone = INT64_MAX;
  int64_t first = 0, step = 1, lowest = kNone, highest = 0;
  int last_row = -1;
  for (int t = lane; t < br; t += 32) {
    from[t] = cnt[t] = 0;
    if (rows[t] < 0) continue;
    const KeyProgression kp = row_keys(p, h, tile, span, rows[t]);
    const KeyProgression kw = row_window_cut(p, kp, rows[t]);
    if (kw.count == 0) continue;
    const int64_t lo = (kw.first - kp.first) / kp.step;  // kw's first term, as a term of kp
    from[t] = lo;
    cnt[t] = lo + kw.count;
    first = kp.first;
    step = kp.step;
    last_row = t;
    lowest = min_i64(lowest, lo);
    highest = max_i64(highest, lo + kw.count);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const int64_t other_lowest = __shfl_xor_sync(0xffffffffu, lowest, offset);
    const int64_t other_highest = __shfl_xor_sync(0xffffffffu, highest, offset);
    const int other_row = __shfl_xor_sync(0xffffffffu, last_row, offset);
    const int64_t other_first = __shfl_xor_sync(0xffffffffu, first, offset);
    const int64_t other_step = __shfl_xor_sync(0xffffffffu, step, offset);
    lowest = min_i64(lowest, other_lowest);
    highest = max_i64(highest, other_highest);
    if (other_row > last_row) {
      last_row = other_row;
      first = other_first;
      step = other_step;
    }
  }
  if (lowest == kNone) lowest = 0;  // no row sees a key: an empty span
  // Each lane moves its own rows' ranges to the span's start.
  for (int t = lane; t < br; t += 32)
    if (cnt[t] > 0) {
      from[t] -= lowest;
      cnt[t] -= lowest;
    }
  if (lane == 0) {
    span_out[0] = first + step * lowest;
    span_out[1] = step;
    span_out[2] = highest - lowest;
  }
  __syncwarp();
}

// The keys of keys[0 .. n) (ascending terms of the row's progression kp) that row i sees with
// the window: the range [*lo, *hi) of them.
__device__ __forceinline__ void window_keys_seen(const ForwardParams& p, const KeyProgression& kp,
                                                 int64_t i, const int64_t* keys, int n,
                                                 int64_t* lo, int64_t* hi) {
  const KeyProgression kw = row_window_cut(p, kp, i);
  *lo = *hi = 0;
  if (kw.count == 0) return;
  const int64_t last = progression_at(kw, kw.count - 1);
  int64_t before = 0, upto = 0;
  for (int c = 0; c < n; ++c) {
    before += keys[c] < kw.first ? 1 : 0;
    upto += keys[c] <= last ? 1 : 0;
  }
  *lo = before;
  *hi = max_i64(before, upto);
}

// SPEC 10.3: a finished row's branch result (LSE lse, O factor o_factor) with the head's sink
// logit joined once: LSE' = log(exp(lse) + exp(sink)), O' = O * exp(lse - LSE'). An empty row
// (lse = -inf) gets O = 0 and LSE = sink; a NaN row stays NaN (merge_lse, merge_weight).
__device__ __forceinline__ void sink_merge(double sink, double* lse, float* o_factor) {
  const double merged = merge_lse(*lse, sink);
  *o_factor = *o_factor * static_cast<float>(merge_weight(*lse, merged));
  *lse = merged;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_VARIANT_TILE_CUH
