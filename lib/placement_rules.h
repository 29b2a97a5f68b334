// placement_rules.h - the keys of a ring sub-problem's row under the whole problem's causal
// rule and window (SPEC 5 with SPEC 2 and 10.1), in one place.
//
// The ring cuts the whole problem into sub-problems of some rows and keys (lib/ring/
// ring_pairs.h). Where an option depends on positions (a window, ALiBi, dropout), the
// sub-problem is placed (problem.h Placement): its row t and key t are positions
// first + step * t of the whole sequence, and the causal rule and window are the whole
// problem's at those positions. A backend that runs placed problems cuts each row's local keys
// with placed_key_cut, so every backend shares the arithmetic. Host and device; plain integer
// arithmetic.
//
// Checked by tests/reference/test_placement_rules.cpp (hand-computed cases) and, through the
// reference, by the ring tests (tests/ring) against the single-device result.
#ifndef DILATTN_PLACEMENT_RULES_H
#define DILATTN_PLACEMENT_RULES_H

#include <stdint.h>

#include "index_rules.h"

namespace dilattn {

// Position first + step * t of a placed sub-problem's row or key t.
DILATTN_HD int64_t placed_position(int64_t first, int64_t step, int64_t t) {
  return first + step * t;
}

// The terms of `local` (ascending key indices of the sub-problem, whose key t sits at position
// k_first + k_step * t, k_step >= 1) that the whole problem (Nq, Nk) allows for its row at
// position i: the causal rule when `causal`, then the window (left, right; -1 unbounded).
// Still one progression, in the sub-problem's key indices.
DILATTN_HD KeyProgression placed_key_cut(const KeyProgression& local, int64_t k_first,
                                         int64_t k_step, int64_t i, int64_t Nq, int64_t Nk,
                                         bool causal, int64_t left, int64_t right) {
  if (local.count == 0) return local;
  KeyProgression whole{placed_position(k_first, k_step, local.first), k_step * local.step,
                       local.count};
  if (causal) whole = range_cut(whole, whole.first, causal_last_key(i, Nq, Nk));
  whole = window_cut(whole, i, Nq, Nk, left, right);
  if (whole.count == 0) return KeyProgression{local.first, local.step, 0};
  return KeyProgression{(whole.first - k_first) / k_step, local.step, whole.count};
}

}  // namespace dilattn

#endif  // DILATTN_PLACEMENT_RULES_H
