// softmax_rules.h - the softmax arithmetic of SPEC 2, 3 and 5, in one place, next to
// index_rules.h: the online-softmax update, the LSE merge, the finalize and the empty-row rule.
//
// Used by the reference (cpu_ref/reference_*), the cpu backend (cpu/cpu_*), the CUDA
// kernels (cuda/) and, through the merge, anything that combines partial results. Host and
// device; plain arithmetic, no allocation, no C++ library types.
//
// The running state of a row is FlashAttention's (m, l) in the base-2 domain:
//     s_j = pre * <q, k_j>                       (the score as the tile kernels compute it)
//     p_j = 2^(post * (s_j - m)),  m = max_j s_j,  l = sum_j p_j
//     LSE = (post * m + log2 l) * ln 2          (natural log, SPEC 2)
// with pre * post = scale * log2(e) (score_scale below). Normally post = 1 and the scale is
// folded into the scores; for a huge |scale| the scores keep only its sign and the scale is
// applied after the max subtraction, so scale * <q, k> never overflows f32 where the f64
// reference is finite.
//
// NaN and infinity (SPEC 13): a NaN in any score of a row makes its m, l and so its
// O and LSE NaN (max_nan never drops a NaN as fmax does). A row is empty only when it met no
// key: m stays -inf, and then O = 0 and LSE = -inf (SPEC 2); a sum cannot underflow to 0
// because the largest term is 2^0 = 1.
//
// Checked by tests/reference/test_softmax_rules.cpp (hand-computed cases) and through every
// backend's comparison with the reference.
#ifndef DILATTN_SOFTMAX_RULES_H
#define DILATTN_SOFTMAX_RULES_H

#include <math.h>
#include <stdint.h>

#include "index_rules.h"  // DILATTN_HD

namespace dilattn {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
// score_scale_in, finalize_lse and lse_in_score_domain multiply by these constants rounded to
// the compute type: the f32 paths by their f32 roundings (the scale is the f32 product
// float(scale) * float(log2 e)), whose difference from the f64 constants (3e-9 relative) is far
// below f32 resolution; the f64 paths by the f64 constants.
// The largest head dimension the fast backends' tiles are sized for.
constexpr int64_t kMaxHeadDim = 256;

// ---------------------------------------------------------------- where the scale goes
// Above this |scale * log2(e)| the scale moves after the max subtraction (see the top).
constexpr double kMaxFoldedScale = 64.0;

// In the compute type T: float for the f32 paths, double where f64 inputs are computed in f64
// (the cpu backend, SPEC 12).
template <class T>
struct ScoreScaleOf {
  T pre;   // multiplies <q, k> in the score tile
  T post;  // multiplies (s - m) in the exponent, and m in the LSE
};
using ScoreScale = ScoreScaleOf<float>;

template <class T>
inline ScoreScaleOf<T> score_scale_in(double scale) {
  const double folded = scale * kLog2e;
  if (folded <= kMaxFoldedScale && folded >= -kMaxFoldedScale)
    return ScoreScaleOf<T>{static_cast<T>(scale) * static_cast<T>(kLog2e), T(1)};
  return ScoreScaleOf<T>{folded > 0 ? T(1) : T(-1), static_cast<T>(folded > 0 ? folded : -folded)};
}
inline ScoreScale score_scale(double scale) { return score_scale_in<float>(scale); }

// The fast backends compute in f32 (the cpu backend's f64 path keeps the same limit, so every
// fast path takes the same scales): |scale| * log2(e) must be a finite f32 (|scale| up to about
// 2.4e38) or the exponent's factor `post` overflows. Larger finite scales (SPEC 7 allows any
// finite one) run on the f64 reference only; the fast backends' can_run refuses them.
inline bool scale_fits_f32(double scale) {
  const double folded = scale * kLog2e;
  return folded <= 3.4028234663852886e38 && folded >= -3.4028234663852886e38;
}

// ---------------------------------------------------------------- SPEC 2: the online update
// 2^x. On the GPU (sm_80+) the f32 one is the MUFU.EX2 instruction alone (ex2.approx.ftz: about
// 2 ulp, results below 2^-126 flushed to 0), not exp2f's extra subnormal scaling (3 more
// instructions per score in the tile kernels): every use is a probability or a rescale factor
// relative to a row's largest term 1, where 2^-126 is invisible in f32. Host: exp2f.
DILATTN_HD float exp2_of(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
DILATTN_HD double exp2_of(double x) { return exp2(x); }

// max(a, b) that returns NaN when either is NaN (fmax would drop it).
template <class T>
DILATTN_HD T max_nan(T a, T b) {
  return (a > b || a != a) ? a : b;
}
// The same for f32; on the GPU (sm_80+) one max.NaN instruction instead of two compares and a
// select.
DILATTN_HD float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return max_nan<float>(a, b);
#endif
}

// The value subtracted from a chunk's scores: the new running max, or 0 while the row has
// seen only masked keys (m = -inf), so that -inf - -inf never makes a NaN.
template <class T>
DILATTN_HD T online_shift(T m_new) {
  return m_new == -static_cast<T>(INFINITY) ? T(0) : m_new;
}

// One score's probability in the current chunk: 2^(post (s - shift)); 0 for a masked s = -inf.
template <class T>
DILATTN_HD T online_prob(T s, T shift, T post) {
  return exp2_of(post * (s - shift));
}

// The same probability from the unscaled score <q, k> when post = 1 (score_scale's usual
// case): 2^(pre <q, k> - shift) as one fused multiply-add, one rounding fewer than
// online_prob(pre * <q, k>, shift, 1) and one instruction instead of three in the tile kernels'
// inner loop. Equal to it up to that rounding wherever shift is finite; a caller whose shift
// may be +inf (a scaled maximum that overflowed f32) takes online_prob instead, because there
// the rounded product's inf - inf = NaN is the rule (SPEC 13) and the fused product's is not.
DILATTN_HD float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
DILATTN_HD double fma_of(double a, double b, double c) { return fma(a, b, c); }
template <class T>
DILATTN_HD T online_prob_fused(T raw_score, T pre, T shift) {
  return exp2_of(fma_of(raw_score, pre, -shift));
}

// The factor that rescales the old O and l when the running max moves from m_old to m_new.
// 1 when it did not move (no rescaling needed: exact), 0 when the row had seen no key.
// A NaN max gives a NaN factor, so the NaN reaches O and l.
template <class T>
DILATTN_HD T online_rescale(T m_old, T m_new, T post) {
  if (m_old == m_new) return T(1);
  if (m_old == -static_cast<T>(INFINITY) && m_new == m_new) return T(0);
  return exp2_of(post * (m_old - m_new));
}

// ---------------------------------------------------------------- SPEC 2: finalize
// Empty row: no key reached it, by the index rules (masked keys are -inf scores).
template <class T>
DILATTN_HD bool row_is_empty(T m) {
  return m == -static_cast<T>(INFINITY);
}
// The natural LSE of a finished row; -inf for an empty row, NaN for a NaN row. The state is in
// the compute type T (float, or double where f64 is computed in f64), ln 2 rounded to T.
template <class T>
DILATTN_HD double finalize_lse_in(T m, T l, T post) {
  if (row_is_empty(m)) return -static_cast<double>(INFINITY);
  return (static_cast<double>(post) * static_cast<double>(m) + log2(static_cast<double>(l))) *
         static_cast<double>(static_cast<T>(kLn2));
}
DILATTN_HD double finalize_lse(float m, float l, float post) { return finalize_lse_in(m, l, post); }
DILATTN_HD double finalize_lse(double m, double l, double post) {
  return finalize_lse_in(m, l, post);
}
// The factor O is multiplied by at the end: 1/l, or 0 for an empty row (O = 0, SPEC 2).
template <class T>
DILATTN_HD T finalize_o_factor_in(T m, T l) { return row_is_empty(m) ? T(0) : T(1) / l; }
DILATTN_HD float finalize_o_factor(float m, float l) { return finalize_o_factor_in(m, l); }
DILATTN_HD double finalize_o_factor(double m, double l) { return finalize_o_factor_in(m, l); }

// ---------------------------------------------------------------- backward: P from the LSE
// The forward's natural LSE expressed in the s domain, so that P = 2^(post (s - lse_s))
// (online_prob with shift = lse_s). An empty row gets +inf: every P is then 0, never NaN. In
// the compute type T of post, log2(e) rounded to T.
template <class T>
DILATTN_HD T lse_in_score_domain_in(double lse, T post) {
  if (lse == -static_cast<double>(INFINITY)) return static_cast<T>(INFINITY);
  return static_cast<T>(lse * static_cast<double>(static_cast<T>(kLog2e)) /
                        static_cast<double>(post));
}
DILATTN_HD float lse_in_score_domain(double lse, float post) {
  return lse_in_score_domain_in(lse, post);
}
DILATTN_HD double lse_in_score_domain(double lse, double post) {
  return lse_in_score_domain_in(lse, post);
}

// ---------------------------------------------------------------- SPEC 3/5: merging partials
// The stable merge of a partial (o_b, lse_b) into a running (o, lse):
//   lse' = max(lse, lse_b) + log1p(exp(-|lse - lse_b|))
//   o'   = o * exp(lse - lse') + o_b * exp(lse_b - lse')
// A partial that reached nothing (lse_b = -inf) leaves (o, lse) unchanged; NaN propagates.
DILATTN_HD float log1p_of(float x) { return log1pf(x); }
DILATTN_HD double log1p_of(double x) { return log1p(x); }
DILATTN_HD float exp_of(float x) { return expf(x); }
DILATTN_HD double exp_of(double x) { return exp(x); }

template <class T>
DILATTN_HD T merge_lse(T lse, T lse_b) {
  const T neg_inf = -static_cast<T>(INFINITY);
  if (lse_b == neg_inf) return lse;
  if (lse == neg_inf) return lse_b;
  const T diff = lse - lse_b;
  return max_nan(lse, lse_b) + log1p_of(exp_of(diff < 0 ? diff : -diff));
}
// The weight of a partial with LSE `part` in the merged result `merged`: exp(part - merged),
// 0 for a partial that reached nothing.
template <class T>
DILATTN_HD T merge_weight(T part, T merged) {
  return part == -static_cast<T>(INFINITY) ? T(0) : exp_of(part - merged);
}
// One element of the merged O, o' = w_old * o + w_part * o_b (weights from merge_weight): a
// weight of 0 contributes nothing, even against an inf or NaN it would multiply. The ring's
// merge (lib/ring/ring_tensor_ops.h on the host, cuda/ring_ops.cu on a device) is this.
template <class T>
DILATTN_HD T merge_element(T w_old, T o, T w_part, T o_b) {
  return (w_old == T(0) ? T(0) : w_old * o) + (w_part == T(0) ? T(0) : w_part * o_b);
}

}  // namespace dilattn

#endif  // DILATTN_SOFTMAX_RULES_H
