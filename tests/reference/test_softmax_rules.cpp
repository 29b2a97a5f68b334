// test_softmax_rules.cpp - lib/softmax_rules.h against hand-computed values: the LSE merge of
// SPEC 3/5, the online update and finalize of SPEC 2 (base-2 domain), the empty-row rule
// (m = -inf: O = 0, LSE = -inf) and NaN propagation (SPEC 13: a NaN score makes its
// row NaN; nothing here may drop it as fmax does), and where score_scale puts the scale; the
// f64 forms (the cpu backend computes f64 inputs in f64, SPEC 12) to f64 precision.
#include <cmath>

#include "../common/check.h"
#include "softmax_rules.h"

using namespace dilattn;

namespace {

const double kInf = INFINITY, kNaN = NAN;

void expect(const char* what, double got, double want, double tol = 1e-12) {
  const bool ok = std::isnan(want) ? std::isnan(got)
                  : std::isinf(want) ? got == want
                                     : std::fabs(got - want) <= tol * (1 + std::fabs(want));
  CHECK_MSG(ok, "%s: got %.17g, want %.17g", what, got, want);
}

}  // namespace

int main() {
  // max_nan: a NaN on either side wins; otherwise the larger.
  expect("max_nan(NaN, 1)", max_nan(kNaN, 1.0), kNaN);
  expect("max_nan(1, NaN)", max_nan(1.0, kNaN), kNaN);
  expect("max_nan(-inf, 2)", max_nan(-kInf, 2.0), 2.0);
  expect("max_nan(3, -1) f32", max_nan(3.0f, -1.0f), 3.0);

  // merge_lse: log(e^a + e^b); -inf is the identity; NaN propagates.
  expect("merge_lse(-inf, 2)", merge_lse(-kInf, 2.0), 2.0);
  expect("merge_lse(1, -inf)", merge_lse(1.0, -kInf), 1.0);
  expect("merge_lse(-inf, -inf)", merge_lse(-kInf, -kInf), -kInf);
  expect("merge_lse(0, 0) = ln 2", merge_lse(0.0, 0.0), std::log(2.0));
  expect("merge_lse(ln 2, ln 6) = ln 8", merge_lse(std::log(2.0), std::log(6.0)), std::log(8.0));
  expect("merge_lse(ln 6, ln 2) = ln 8", merge_lse(std::log(6.0), std::log(2.0)), std::log(8.0));
  expect("merge_lse(NaN, 0)", merge_lse(kNaN, 0.0), kNaN);
  expect("merge_lse(0, NaN)", merge_lse(0.0, kNaN), kNaN);
  expect("merge_lse f32 (0, 0)", merge_lse(0.0f, 0.0f), std::log(2.0), 1e-6);

  // merge_weight: exp(part - merged), 0 for a partial that reached nothing.
  expect("merge_weight(ln 2, ln 8)", merge_weight(std::log(2.0), std::log(8.0)), 0.25);
  expect("merge_weight(-inf, 0)", merge_weight(-kInf, 0.0), 0.0);
  expect("merge_weight(-inf, -inf)", merge_weight(-kInf, -kInf), 0.0);
  expect("merge_weight(NaN, 0)", merge_weight(kNaN, 0.0), kNaN);

  // online_shift / online_prob: 2^(post (s - shift)); shift 0 while m = -inf.
  expect("online_shift(-inf)", online_shift(-kInf), 0.0);
  expect("online_shift(5)", online_shift(5.0), 5.0);
  expect("online_prob(-inf, 0, 1)", online_prob(-kInf, 0.0, 1.0), 0.0);
  expect("online_prob(3, 1, 0.5) = 2", online_prob(3.0, 1.0, 0.5), 2.0);
  expect("online_prob(NaN, 0, 1)", online_prob(kNaN, 0.0, 1.0), kNaN);
  // online_prob_fused: 2^(pre s - shift) from the unscaled score, post = 1.
  expect("online_prob_fused(4, 0.5, 1) = 2", online_prob_fused(4.0, 0.5, 1.0), 2.0);
  expect("online_prob_fused f32 (3, 2, 4) = 4", online_prob_fused(3.0f, 2.0f, 4.0f), 4.0, 1e-6);
  expect("online_prob_fused(-inf, 2, 5)", online_prob_fused(-kInf, 2.0, 5.0), 0.0);
  expect("online_prob_fused(NaN, 1, 0)", online_prob_fused(kNaN, 1.0, 0.0), kNaN);
  expect("online_prob_fused(inf, 1, inf)", online_prob_fused(kInf, 1.0, kInf), kNaN);

  // online_rescale: 1 when m did not move, 0 from -inf, 2^(post (m_old - m_new)), NaN kept.
  expect("online_rescale(2, 2)", online_rescale(2.0, 2.0, 7.0), 1.0);
  expect("online_rescale(-inf, -inf)", online_rescale(-kInf, -kInf, 1.0), 1.0);
  expect("online_rescale(-inf, 3)", online_rescale(-kInf, 3.0, 1.0), 0.0);
  expect("online_rescale(1, 3) = 1/4", online_rescale(1.0, 3.0, 1.0), 0.25);
  expect("online_rescale(2, 3, post 2) = 1/4", online_rescale(2.0, 3.0, 2.0), 0.25);
  expect("online_rescale(1, NaN)", online_rescale(1.0, kNaN, 1.0), kNaN);
  expect("online_rescale(-inf, NaN)", online_rescale(-kInf, kNaN, 1.0), kNaN);
  expect("online_rescale(NaN, NaN)", online_rescale(kNaN, kNaN, 1.0), kNaN);

  // finalize: empty only when m = -inf; LSE = (post m + log2 l) ln 2.
  expect("row_is_empty(-inf)", row_is_empty(-kInf) ? 1 : 0, 1);
  expect("row_is_empty(NaN)", row_is_empty(kNaN) ? 1 : 0, 0);
  expect("row_is_empty(-1e30)", row_is_empty(-1e30) ? 1 : 0, 0);
  expect("finalize_lse(-inf, 0)", finalize_lse(-INFINITY, 0.0f, 1.0f), -kInf);
  expect("finalize_lse(2, 4) = 4 ln 2", finalize_lse(2.0f, 4.0f, 1.0f), 4 * std::log(2.0), 1e-8);
  expect("finalize_lse(1, 1, post 3) = 3 ln 2", finalize_lse(1.0f, 1.0f, 3.0f),
         3 * std::log(2.0), 1e-8);
  expect("finalize_lse(NaN, NaN)", finalize_lse(NAN, NAN, 1.0f), kNaN);
  expect("finalize_lse(-inf, NaN): empty wins", finalize_lse(-INFINITY, NAN, 1.0f), -kInf);
  expect("finalize_o_factor(-inf, 0)", finalize_o_factor(-INFINITY, 0.0f), 0.0);
  expect("finalize_o_factor(1, 4)", finalize_o_factor(1.0f, 4.0f), 0.25);
  expect("finalize_o_factor(NaN, NaN)", finalize_o_factor(NAN, NAN), kNaN);

  // lse_in_score_domain: the inverse of finalize_lse's scaling; +inf for an empty row.
  expect("lse_in_score_domain(-inf)", lse_in_score_domain(-kInf, 1.0f), kInf);
  expect("lse_in_score_domain(3 ln 2)", lse_in_score_domain(3 * std::log(2.0), 1.0f), 3.0, 1e-6);
  expect("lse_in_score_domain(3 ln 2, post 3)", lse_in_score_domain(3 * std::log(2.0), 3.0f), 1.0,
         1e-6);
  expect("lse_in_score_domain(NaN)", lse_in_score_domain(kNaN, 1.0f), kNaN);

  // score_scale: folded while |scale log2 e| <= 64 (post 1), else pre = sign, post = |.|.
  const ScoreScale ordinary = score_scale(0.125);
  expect("score_scale(0.125).pre", ordinary.pre, 0.125 * kLog2e, 1e-7);
  expect("score_scale(0.125).post", ordinary.post, 1.0);
  expect("score_scale(44).post", score_scale(44.0).post, 1.0);  // 44 log2 e = 63.5
  const ScoreScale big = score_scale(45.0);                    // 45 log2 e = 64.9
  expect("score_scale(45).pre", big.pre, 1.0);
  expect("score_scale(45).post", big.post, 45 * kLog2e, 1e-7);
  const ScoreScale huge_neg = score_scale(-1e38);
  expect("score_scale(-1e38).pre", huge_neg.pre, -1.0);
  expect("score_scale(-1e38).post", huge_neg.post, 1e38 * kLog2e, 1e-7);

  // The f64 forms: the same rules, f64 constants, f64 precision (1e-15, where the f32 forms
  // above are held to 1e-6 .. 1e-8).
  expect("finalize_lse(2, 4) f64 = 4 ln 2", finalize_lse(2.0, 4.0, 1.0), 4 * std::log(2.0), 1e-15);
  expect("finalize_lse(1, 1, post 3) f64", finalize_lse(1.0, 1.0, 3.0), 3 * std::log(2.0), 1e-15);
  expect("finalize_lse(-inf, NaN) f64", finalize_lse(-kInf, kNaN, 1.0), -kInf);
  expect("finalize_o_factor(1, 3) f64", finalize_o_factor(1.0, 3.0), 1.0 / 3.0, 1e-16);
  expect("finalize_o_factor(-inf, 0) f64", finalize_o_factor(-kInf, 0.0), 0.0);
  expect("lse_in_score_domain(3 ln 2) f64", lse_in_score_domain(3 * std::log(2.0), 1.0), 3.0,
         1e-15);
  expect("lse_in_score_domain(-inf) f64", lse_in_score_domain(-kInf, 1.0), kInf);
  const ScoreScaleOf<double> ordinary64 = score_scale_in<double>(0.125);
  expect("score_scale_in<double>(0.125).pre", ordinary64.pre, 0.125 * kLog2e, 1e-16);
  expect("score_scale_in<double>(0.125).post", ordinary64.post, 1.0);
  const ScoreScaleOf<double> big64 = score_scale_in<double>(-45.0);
  expect("score_scale_in<double>(-45).pre", big64.pre, -1.0);
  expect("score_scale_in<double>(-45).post", big64.post, 45 * kLog2e, 1e-16);

  return harness::finish("softmax_rules_hand_computed");
}
