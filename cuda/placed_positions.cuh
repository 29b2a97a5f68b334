// placed_positions.cuh - where a kernel's rows, keys and heads lie in the problem whose rules
// they follow: a ring's placed sub-problem (SPEC 5.5) takes its window, ALiBi distances and
// slopes and dropout draws from the whole problem.
//
// The ring cuts the whole problem into sub-problems of some rows and keys (lib/ring/
// ring_pairs.h). Where an option depends on positions (a window, ALiBi, dropout), a sub-problem
// is placed (lib/internal/problem.h Placement): its row t is position q_first + q_step * t of
// the whole sequence, its key t position k_first + k_step * t, its head h the whole problem's
// head h0 + h. The kernels index tensors with the sub-problem's own rows and keys, as for any
// problem, and ask this file for the positions the options see:
//
//   row_position, key_position  a row's or key's position for the options;
//   option_heads                the head a draw or slope takes and the head count beside it;
//   row_window_cut              a row's keys cut by the window at those positions;
//   window_query_cut          the dK/dV pass's rows whose window reaches a key range;
//   alibi_bias_at               the ALiBi bias of (row, key) at those positions.
//
// For every other problem (placed == 0) each is the identity on the problem's own rows, keys
// and heads, and costs one uniform branch. The causal rule stays the sub-problem's own: the
// launcher runs a placed problem only where its causal rule at its own indices is the whole
// problem's at the placed positions (launch_shared.cu, check_placement), which the ring's
// sub-problems always are (square diagonal parts, or keys wholly before the rows).
//
// The arithmetic is lib/placement_rules.h's, shared with the ref and cpu backends. Checked by
// tests/ring/test_ring_emu.cpp (rings over the emu backend with every option) against the
// single-device reference.
#ifndef DILATTN_PLACED_POSITIONS_CUH
#define DILATTN_PLACED_POSITIONS_CUH

#include "attention_tile.cuh"
#include "placement_rules.h"
#include "score_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

__device__ __forceinline__ int64_t row_position(const ForwardParams& p, int64_t i) {
  return p.placed ? placed_position(p.place_q_first, p.place_q_step, i) : i;
}
__device__ __forceinline__ int64_t key_position(const ForwardParams& p, int64_t j) {
  return p.placed ? placed_position(p.place_k_first, p.place_k_step, j) : j;
}

// The head a dropout draw or an ALiBi slope of head h takes, and the head count it is taken
// among (SPEC 11.1's b H + h, SPEC 10.1's [B][H] slopes).
struct OptionHead {
  int64_t head, heads;
};
__device__ __forceinline__ OptionHead option_heads(const ForwardParams& p, int64_t h) {
  return p.placed ? OptionHead{p.place_h0 + h, p.place_H} : OptionHead{h, p.H};
}

// The terms of kp (row i's keys, ascending) that the window allows (SPEC 10.1), in kp's indices.
__device__ __forceinline__ KeyProgression row_window_cut(const ForwardParams& p,
                                                         const KeyProgression& kp, int64_t i) {
  if (!p.placed) return window_cut(kp, i, p.Nq, p.Nk, p.window_left, p.window_right);
  return placed_key_cut(kp, p.place_k_first, p.place_k_step, row_position(p, i), p.place_Nq,
                        p.place_Nk, false, p.window_left, p.window_right);
}

// The terms of `rows` (ascending positions of a problem (Nq, Nk)) whose window can reach one of
// the keys at positions [key_lo, key_hi]: i + d - left <= key_hi and i + d + right >= key_lo.
__device__ __forceinline__ KeyProgression window_rows_reaching(const KeyProgression& rows,
                                                               int64_t key_lo, int64_t key_hi,
                                                               int64_t left, int64_t right,
                                                               int64_t Nq, int64_t Nk) {
  const int64_t d = Nk - Nq;
  const int64_t lo = right < 0 ? rows.first : key_lo - d - window_bound(right, Nq, Nk);
  const int64_t hi = left < 0 ? progression_at(rows, max_i64(rows.count - 1, 0))
                              : key_hi - d + window_bound(left, Nq, Nk);
  return range_cut(rows, lo, hi);
}

// The dK/dV pass: the rows of `rows` (ascending, the problem's own indices) whose window can
// reach one of the keys key_lo .. key_hi (the problem's own indices), in the problem's indices.
__device__ __forceinline__ KeyProgression window_query_cut(const ForwardParams& p,
                                                             const KeyProgression& rows,
                                                             int64_t key_lo, int64_t key_hi) {
  if (!p.placed)
    return window_rows_reaching(rows, key_lo, key_hi, p.window_left, p.window_right, p.Nq, p.Nk);
  const KeyProgression whole{row_position(p, rows.first), p.place_q_step * rows.step, rows.count};
  const KeyProgression cut =
      window_rows_reaching(whole, key_position(p, key_lo), key_position(p, key_hi),
                           p.window_left, p.window_right, p.place_Nq, p.place_Nk);
  if (cut.count == 0) return KeyProgression{rows.first, rows.step, 0};
  return KeyProgression{(cut.first - p.place_q_first) / p.place_q_step, rows.step, cut.count};
}

// SPEC 10.1's bias -m |i + d - j| of row i and key j, m = slope (score domain).
__device__ __forceinline__ float alibi_bias_at(const ForwardParams& p, float slope, int64_t i,
                                               int64_t j) {
  if (!p.placed) return alibi_bias_f32(slope, i, j, p.Nq, p.Nk);
  return alibi_bias_f32(slope, row_position(p, i), key_position(p, j), p.place_Nq, p.place_Nk);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_PLACED_POSITIONS_CUH
