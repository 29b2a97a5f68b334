// compare.h - a path's output against the reference's, elementwise, as SPEC 8 says:
// |x - ref| <= atol + rtol |ref| with the tolerances of spec_tolerance.h. Where the reference is
// NaN the path must be NaN too, and only there (SPEC 13: a NaN score makes its row
// NaN in every backend); infinities (the -inf LSE of an empty row, SPEC 2) must match exactly.
//
//   CHECK_CLOSE(what, got, want, tol)         tensors or value vectors: one check, the first
//                                             few misses printed with their index
//   CHECK_MAX_ABS_DIFF(what, got, want, tol)  max_i |got_i - want_i| <= tol, for identities
//                                             between two runs of the f64 reference
#ifndef DILATTN_TESTS_COMPARE_H
#define DILATTN_TESTS_COMPARE_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "spec_tolerance.h"
#include "tensor.h"

namespace harness {

using spec8::Tolerance;

// SPEC 8's rule for one element.
inline bool matches_reference(double got, double want, Tolerance tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

// Index e of a tensor of `shape` as "[a,b,c,d]", or "[e]" without a shape.
inline std::string index_text(int64_t e, const int64_t* shape) {
  char t[96];
  if (shape == nullptr) {
    std::snprintf(t, sizeof t, "[%lld]", static_cast<long long>(e));
    return t;
  }
  long long i[4];
  for (int k = 3; k >= 0; --k) {
    i[k] = e % shape[k];
    e /= shape[k];
  }
  std::snprintf(t, sizeof t, "[%lld,%lld,%lld,%lld]", i[0], i[1], i[2], i[3]);
  return t;
}

inline bool check_close_values(const char* what, const std::vector<double>& got,
                               const std::vector<double>& want, Tolerance tol,
                               const int64_t* shape, const char* file, int line) {
  if (got.size() != want.size())
    return record(false, file, line, "%s: %zu values, reference has %zu", what, got.size(),
                  want.size());
  int64_t misses = 0;
  double worst = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    if (matches_reference(got[e], want[e], tol)) continue;
    worst = std::fmax(worst, std::fabs(got[e] - want[e]));
    if (misses++ < 3)
      std::fprintf(stderr, "  %s%s = %.9g, reference %.9g\n", what,
                   index_text(static_cast<int64_t>(e), shape).c_str(), got[e], want[e]);
  }
  return record(misses == 0, file, line,
                "%s: %lld of %zu elements out of tolerance (atol %g, rtol %g), worst |diff| %g",
                what, static_cast<long long>(misses), got.size(), tol.atol, tol.rtol, worst);
}

inline bool check_close(const char* what, const Tensor& got, const Tensor& want, Tolerance tol,
                        const char* file, int line) {
  for (int k = 0; k < 4; ++k)
    if (got.dim(k) != want.dim(k))
      return record(false, file, line, "%s: dimension %d is %lld, reference %lld", what, k,
                    static_cast<long long>(got.dim(k)), static_cast<long long>(want.dim(k)));
  return check_close_values(what, got.values(), want.values(), tol, got.view().shape, file, line);
}
inline bool check_close(const char* what, const std::vector<double>& got,
                        const std::vector<double>& want, Tolerance tol, const char* file,
                        int line) {
  return check_close_values(what, got, want, tol, nullptr, file, line);
}

// max_i |a_i - b_i|: NaN counts as infinitely far, equal infinities as 0, sizes that differ
// as infinity.
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
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a.values(), b.values());
}

template <class A, class B>
bool check_max_abs_diff(const char* what, const A& got, const B& want, double tol,
                        const char* file, int line) {
  const double d = max_abs_diff(got, want);
  return record(d <= tol, file, line, "%s: max |diff| %g > %g", what, d, tol);
}

// How many elements are NaN.
inline int64_t nan_count(const Tensor& t) {
  int64_t n = 0;
  for (int64_t e = 0; e < t.count(); ++e) n += std::isnan(t.flat(e)) ? 1 : 0;
  return n;
}

}  // namespace harness

#define CHECK_CLOSE(what, got, want, tol) \
  ::harness::check_close((what), (got), (want), (tol), __FILE__, __LINE__)
#define CHECK_MAX_ABS_DIFF(what, got, want, tol) \
  ::harness::check_max_abs_diff((what), (got), (want), (tol), __FILE__, __LINE__)

#endif  // DILATTN_TESTS_COMPARE_H
