// score_rules.h - what SPEC 10.1 does to a score after scale * <q, k>: the softcap and the ALiBi
// bias, and the softcap's derivative for the backward. In one place, next to index_rules.h
// (which holds the window), so every backend that implements them shares the arithmetic. Host
// and device; plain arithmetic.
//
// Checked by tests/reference/test_variant_scores.cpp (hand-computed cases) and, through the
// reference, by the Python tests against tests/common/spec_numpy.py.
#ifndef DILATTN_SCORE_RULES_H
#define DILATTN_SCORE_RULES_H

#include <math.h>
#include <stdint.h>

#include "index_rules.h"  // DILATTN_HD

namespace dilattn {

// Softcap c > 0: c * tanh(s / c), s the scaled score; c == 0 leaves s as it is.
DILATTN_HD double softcapped(double s, double c) { return c > 0 ? c * tanh(s / c) : s; }

// d softcapped(s, c) / ds = 1 - tanh^2(s / c): the factor dS_raw = dS * it of the backward.
DILATTN_HD double softcap_slope(double s, double c) {
  if (!(c > 0)) return 1;
  const double t = tanh(s / c);
  return 1 - t * t;
}

// The same two in f32, for the kernels' scores (cuda/variant_tile.cuh): a kernel's scores and
// softcap are f32 in its base-2 score domain, where the softcap keeps this form. Named apart
// from the f64 ones so that a call with mixed arguments is never ambiguous.
DILATTN_HD float softcapped_f32(float s, float c) { return c > 0 ? c * tanhf(s / c) : s; }
DILATTN_HD float softcap_slope_f32(float s, float c) {
  if (!(c > 0)) return 1;
  const float t = tanhf(s / c);
  return 1 - t * t;
}

// ALiBi: -m * |i + d - j|, d = Nk - Nq. |i + d - j| < Nq + Nk, which fits int64 (plan.cpp).
DILATTN_HD double alibi_bias(double slope, int64_t i, int64_t j, int64_t Nq, int64_t Nk) {
  const int64_t distance = i + (Nk - Nq) - j;
  return -slope * static_cast<double>(distance < 0 ? -distance : distance);
}
DILATTN_HD float alibi_bias_f32(float slope, int64_t i, int64_t j, int64_t Nq, int64_t Nk) {
  const int64_t distance = i + (Nk - Nq) - j;
  return -slope * static_cast<float>(distance < 0 ? -distance : distance);
}

}  // namespace dilattn

#endif  // DILATTN_SCORE_RULES_H
