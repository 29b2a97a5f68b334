// test_variant_scores.cpp - the SPEC 10.1 rules on hand-computed cases: the window's index rule
// (lib/index_rules.h: window_allows, window_cut of a key progression, bounds near INT64_MAX) and
// the score rules (lib/score_rules.h: softcap, its derivative, the ALiBi bias).
#include <cmath>
#include <cstdint>

#include "../common/check.h"
#include "index_rules.h"
#include "score_rules.h"

using namespace dilattn;

namespace {

bool same(const KeyProgression& a, int64_t first, int64_t step, int64_t count) {
  return a.count == count && (count == 0 || (a.first == first && a.step == step));
}

void window_allows_cases() {
  // Nq = 4, Nk = 6: d = 2, row 1 is aligned with key 3. Window (1, 2): keys 2 .. 5.
  for (int64_t j = 0; j < 6; ++j) CHECK_EQ(window_allows(1, j, 4, 6, 1, 2), j >= 2 && j <= 5);
  // Unbounded on one side.
  CHECK(window_allows(1, 0, 4, 6, -1, 0));
  CHECK(!window_allows(1, 4, 4, 6, -1, 0));
  CHECK(window_allows(1, 5, 4, 6, 0, -1));
  CHECK(!window_allows(1, 2, 4, 6, 0, -1));
  // Nq > Nk: d = -3, row 0 is aligned with key -3: window (0, 0) allows nothing.
  for (int64_t j = 0; j < 3; ++j) CHECK(!window_allows(0, j, 6, 3, 0, 0));
  // Bounds near INT64_MAX allow every key and do not overflow.
  CHECK(window_allows(0, 0, 5, 5, INT64_MAX, INT64_MAX));
  CHECK(window_allows(4, 0, 5, 5, INT64_MAX, 0));
}

void window_cut_cases() {
  // Keys 0 .. 9 (dense), N = 10, row 5, window (2, 1): 3 .. 6.
  CHECK(same(window_cut(KeyProgression{0, 1, 10}, 5, 10, 10, 2, 1), 3, 1, 4));
  // A dilated progression 1, 4, 7, 10 (step 3), row 6, window (3, 2): keys 3 .. 8 -> 4, 7.
  CHECK(same(window_cut(KeyProgression{1, 3, 4}, 6, 12, 12, 3, 2), 4, 3, 2));
  // Only a left bound: 4, 7, 10. Only a right bound: 1, 4, 7.
  CHECK(same(window_cut(KeyProgression{1, 3, 4}, 6, 12, 12, 3, -1), 4, 3, 3));
  CHECK(same(window_cut(KeyProgression{1, 3, 4}, 6, 12, 12, -1, 2), 1, 3, 3));
  // The window falls between two terms: nothing.
  CHECK(same(window_cut(KeyProgression{1, 3, 4}, 5, 12, 12, 0, 0), 0, 0, 0));
  // Nq != Nk: Nq = 3, Nk = 8 (d = 5), row 0 aligned with key 5, window (1, 0): keys 4, 5.
  CHECK(same(window_cut(KeyProgression{0, 1, 8}, 0, 3, 8, 1, 0), 4, 1, 2));
  // A step near INT64_MAX (r >= N): one term, cut without forming a second.
  CHECK(same(window_cut(KeyProgression{2, INT64_MAX, 1}, 2, 6, 6, 0, 0), 2, INT64_MAX, 1));
  CHECK(same(window_cut(KeyProgression{2, INT64_MAX, 1}, 4, 6, 6, 1, 0), 0, 0, 0));
  // Both bounds unbounded leave the progression as it is.
  CHECK(same(window_cut(KeyProgression{1, 3, 4}, 0, 12, 12, -1, -1), 1, 3, 4));
  CHECK(same(window_cut(KeyProgression{0, 1, 10}, 5, 10, 10, INT64_MAX, INT64_MAX), 0, 1, 10));
}

void score_cases() {
  // c tanh(s / c): s = 1.5, c = 0.5 -> 0.5 tanh(3).
  CHECK_NEAR(softcapped(1.5, 0.5), 0.5 * std::tanh(3.0), 1e-16);
  CHECK_EQ(softcapped(1.5, 0.0), 1.5);  // off
  CHECK_EQ(softcapped(INFINITY, 2.0), 2.0);
  CHECK_EQ(softcapped(-INFINITY, 2.0), -2.0);
  CHECK(std::isnan(softcapped(NAN, 2.0)));
  // d/ds c tanh(s / c) = 1 - tanh^2(s / c); 1 without a softcap.
  CHECK_NEAR(softcap_slope(1.5, 0.5), 1 - std::tanh(3.0) * std::tanh(3.0), 1e-16);
  CHECK_EQ(softcap_slope(1.5, 0.0), 1.0);
  // Central difference of softcapped at s = 0.7, c = 0.9.
  const double h = 1e-6;
  CHECK_NEAR(softcap_slope(0.7, 0.9), (softcapped(0.7 + h, 0.9) - softcapped(0.7 - h, 0.9)) / (2 * h),
             1e-9);
  // -m |i + d - j|: Nq = 3, Nk = 5 (d = 2), row 1, key 0: distance 3; key 4: distance 1.
  CHECK_EQ(alibi_bias(0.5, 1, 0, 3, 5), -1.5);
  CHECK_EQ(alibi_bias(0.5, 1, 4, 3, 5), -0.5);
  CHECK_EQ(alibi_bias(0.5, 1, 3, 3, 5), 0.0);
  CHECK_EQ(alibi_bias(-2.0, 2, 0, 3, 3), 4.0);  // a negative slope favours distant keys
  // The f32 forms the kernels use: the same values to f32 rounding.
  CHECK_NEAR(softcapped_f32(1.5f, 0.5f), 0.5 * std::tanh(3.0), 1e-6);
  CHECK_EQ(softcapped_f32(1.5f, 0.0f), 1.5f);
  CHECK_EQ(softcapped_f32(INFINITY, 2.0f), 2.0f);
  CHECK(std::isnan(softcapped_f32(NAN, 2.0f)));
  CHECK_NEAR(softcap_slope_f32(1.5f, 0.5f), 1 - std::tanh(3.0) * std::tanh(3.0), 1e-6);
  CHECK_EQ(softcap_slope_f32(1.5f, 0.0f), 1.0f);
  CHECK_EQ(alibi_bias_f32(0.5f, 1, 0, 3, 5), -1.5f);
  CHECK_EQ(alibi_bias_f32(-2.0f, 2, 0, 3, 3), 4.0f);
}

}  // namespace

int main() {
  window_allows_cases();
  window_cut_cases();
  score_cases();
  return harness::finish("variant_rules_hand_computed");
}
