// attention_runner.h - runs the f64 reference (backend ref) through the public C ABI for the
// tests in tests/reference/, plus the few checks those tests share.
//
// Every tensor is f64 and contiguous: Q, O [B, Nq, H, D]; K, V [B, Nk, Hkv, D]; LSE [B, H, Nq].
// A test describes a problem as a Config, fills inputs with fixed-seed random numbers, and calls
// forward() / backward(). A failed dilattn call or a failed check prints where and why and
// counts a failure; main returns failures() != 0. Header-only so each test stays one file.
#ifndef DILATTN_TESTS_ATTENTION_RUNNER_H
#define DILATTN_TESTS_ATTENTION_RUNNER_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "dilattn.h"

namespace runner {

inline int& failure_count() {
  static int n = 0;
  return n;
}
inline int failures() { return failure_count(); }

inline void fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
  ++failure_count();
}

#define EXPECT_TRUE(cond)                                         \
  do {                                                            \
    if (!(cond)) ::runner::fail(#cond, __FILE__, __LINE__);       \
  } while (0)

// |got - want| <= tol; infinities must match exactly. Prints both values on failure.
#define EXPECT_NEAR(got, want, tol)                                                          \
  do {                                                                                       \
    const double g_ = (got), w_ = (want), t_ = (tol);                                        \
    const bool ok_ = (std::isinf(w_) || std::isinf(g_)) ? g_ == w_ : std::fabs(g_ - w_) <= t_; \
    if (!ok_) {                                                                              \
      std::fprintf(stderr, "%s:%d: FAILED: %s = %.17g, want %.17g (tol %g)\n", __FILE__,     \
                   __LINE__, #got, g_, w_, t_);                                              \
      ++::runner::failure_count();                                                           \
    }                                                                                        \
  } while (0)

#define EXPECT_OK(call)                                                                      \
  do {                                                                                       \
    const dilattn_status s_ = (call);                                                        \
    if (s_ != DILATTN_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: FAILED: %s -> %s (%s)\n", __FILE__, __LINE__, #call,      \
                   dilattn_status_string(s_), dilattn_last_error());                         \
      ++::runner::failure_count();                                                           \
    }                                                                                        \
  } while (0)

// What to compute: dense (branches empty) or dilated, causal or not, scale (0 = default).
struct Config {
  int64_t B = 1, Nq = 1, Nk = 1, H = 1, Hkv = 1, D = 1;
  std::vector<int64_t> segments, dilations;  // dilated when not empty
  dilattn_head_mode mode = DILATTN_HEADS_MOD;
  bool causal = false;
  double scale = 0;

  size_t q_size() const { return static_cast<size_t>(B * Nq * H * D); }
  size_t kv_size() const { return static_cast<size_t>(B * Nk * Hkv * D); }
  size_t lse_size() const { return static_cast<size_t>(B * H * Nq); }
  // Flat index of element [b, n, h, d] of Q/O and of K/V, and of LSE [b, h, i].
  size_t qi(int64_t b, int64_t n, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * Nq + n) * H + h) * D + d);
  }
  size_t ki(int64_t b, int64_t n, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * Nk + n) * Hkv + h) * D + d);
  }
  size_t li(int64_t b, int64_t h, int64_t i) const { return static_cast<size_t>((b * H + h) * Nq + i); }
};

struct Inputs {
  std::vector<double> q, k, v;
};

inline std::vector<double> random_vector(size_t n, std::mt19937_64& rng) {
  // Uniform in [-1, 1): scores stay O(1), so no term of a softmax underflows to an exact 0.
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> x(n);
  for (double& e : x) e = u(rng);
  return x;
}

inline Inputs random_inputs(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = random_vector(c.q_size(), rng);
  in.k = random_vector(c.kv_size(), rng);
  in.v = random_vector(c.kv_size(), rng);
  return in;
}

// A plan for c on backend ref in f64; nullptr (and a counted failure) when creation fails.
inline dilattn_plan make_plan(const Config& c) {
  dilattn_desc desc = nullptr;
  dilattn_plan plan = nullptr;
  EXPECT_OK(dilattn_desc_create(&desc));
  if (!c.segments.empty())
    EXPECT_OK(dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.segments.size()),
                                       c.segments.data(), c.dilations.data(), c.mode));
  EXPECT_OK(dilattn_desc_set_causal(desc, c.causal ? 1 : 0));
  if (c.scale != 0) EXPECT_OK(dilattn_desc_set_scale(desc, c.scale));
  const dilattn_shape shape = dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
  EXPECT_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF));
  dilattn_desc_destroy(desc);
  return plan;
}

struct Outputs {
  std::vector<double> o, lse;
};

inline dilattn_tensor view(const Config& c, std::vector<double>& x, char role) {
  if (role == 'q') return dilattn_tensor_contiguous(x.data(), DILATTN_F64, c.B, c.Nq, c.H, c.D);
  if (role == 'k') return dilattn_tensor_contiguous(x.data(), DILATTN_F64, c.B, c.Nk, c.Hkv, c.D);
  return dilattn_tensor_contiguous(x.data(), DILATTN_F64, c.B, c.H, c.Nq, 1);  // 'l': LSE
}

inline Outputs forward(const Config& c, Inputs in) {
  Outputs out{std::vector<double>(c.q_size(), NAN), std::vector<double>(c.lse_size(), NAN)};
  dilattn_plan plan = make_plan(c);
  if (plan == nullptr) return out;
  const dilattn_tensor q = view(c, in.q, 'q'), k = view(c, in.k, 'k'), v = view(c, in.v, 'k');
  const dilattn_tensor o = view(c, out.o, 'q'), lse = view(c, out.lse, 'l');
  EXPECT_OK(dilattn_forward(plan, &q, &k, &v, &o, &lse, nullptr, 0));
  dilattn_plan_destroy(plan);
  return out;
}

struct Gradients {
  std::vector<double> dq, dk, dv;
};

// Forward, then backward with the given dO.
inline Gradients backward(const Config& c, Inputs in, std::vector<double> d_o) {
  Outputs fw = forward(c, in);
  Gradients g{std::vector<double>(c.q_size(), NAN), std::vector<double>(c.kv_size(), NAN),
              std::vector<double>(c.kv_size(), NAN)};
  dilattn_plan plan = make_plan(c);
  if (plan == nullptr) return g;
  const dilattn_tensor q = view(c, in.q, 'q'), k = view(c, in.k, 'k'), v = view(c, in.v, 'k');
  const dilattn_tensor o = view(c, fw.o, 'q'), lse = view(c, fw.lse, 'l');
  const dilattn_tensor dot = view(c, d_o, 'q');
  const dilattn_tensor dq = view(c, g.dq, 'q'), dk = view(c, g.dk, 'k'), dv = view(c, g.dv, 'k');
  EXPECT_OK(dilattn_backward(plan, &q, &k, &v, &o, &lse, &dot, &dq, &dk, &dv, nullptr, 0));
  dilattn_plan_destroy(plan);
  return g;
}

// max_i |a_i - b_i| (NaN counts as infinitely far; equal infinities as 0).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const double d = std::fabs(a[i] - b[i]);
    m = std::isnan(d) ? INFINITY : std::fmax(m, d);
  }
  return m;
}

}  // namespace runner

#endif  // DILATTN_TESTS_ATTENTION_RUNNER_H
