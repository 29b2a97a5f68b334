// test_cpu_exp2.cpp - the vector exp2 of the cpu backend's softmax (cpu/cpu_microkernel.h,
// exp2v), for every instruction set this CPU runs (cpu/cpu_isa.h), against the f64 exp2:
//   - relative error <= 3.5e-6 over [-125.5, 127] (a dense grid, integers, half-integers and
//     random points; the degree-4 polynomial's 2.9e-6 on every ISA, with room for rounding),
//     far inside SPEC 8's f32 rtol = 1e-4 (a degree-3 one, 1.0e-4, fails it);
//   - the subnormal edge [-126.5, -125.5]: within one subnormal step (2^-149) of 2^x, plus the
//     same relative bound;
//   - exactly 1 at 0, exactly 0 below -126.5 and at -inf (masked scores contribute nothing,
//     SPEC 2), NaN for NaN (a NaN score keeps its row NaN, SPEC 13), 2^127 exactly
//     for x >= 127 (the clamp, never reached by the softmax, whose arguments are <= 0);
//   - the f64 copy (f64 inputs are computed in f64, SPEC 12): relative error <= 4e-16 (a few
//     ulp) over [-1022, 1023] against the long double exp2, within 2^-1022 below that down to
//     -1023.5; exactly 1 at 0, exactly 0 below -1022.5 and at -inf, NaN for NaN, 2^1023 for
//     x >= 1023. Degree 13 gives 1.6e-16 with FMA (AVX2) and 1.9e-16 without (SSE2); degree
//     12 gives 3.6e-16 and 4.0e-16 (it fails here without FMA), degree 5 3.2e-6.
// Internal: includes cpu_isa.h for the per-ISA tables.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "../common/check.h"
#include "cpu_isa.h"

using namespace dilattn::cpu;

namespace {

constexpr double kMaxRelativeError = 3.5e-6;
const double kSubnormalStep = std::ldexp(1.0, -149);

std::vector<float> exp2_of_each(const IsaKernels& k, const std::vector<float>& x) {
  std::vector<float> y(x.size(), -1.0f);
  k.exp2(x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

void check_accuracy(const IsaKernels& k) {
  std::vector<float> x;
  for (int i = -1265; i <= 1270; ++i) x.push_back(0.1f * static_cast<float>(i));  // grid
  for (int i = -126; i <= 127; ++i) {  // integers, half-integers, and their neighbours
    for (float f : {static_cast<float>(i), static_cast<float>(i) + 0.5f})
      for (float g : {std::nextafter(f, -1e9f), f, std::nextafter(f, 1e9f)}) x.push_back(g);
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-126.5f, 127.0f);
  for (int i = 0; i < 200000; ++i) x.push_back(u(rng));
  std::uniform_real_distribution<float> near0(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) x.push_back(near0(rng));
  const std::vector<float> y = exp2_of_each(k, x);
  double worst = 0;
  float worst_x = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -126.5f || x[i] > 127.0f) continue;
    const double ref = std::exp2(static_cast<double>(x[i]));
    const double err = std::fabs(static_cast<double>(y[i]) - ref);
    const double slack = x[i] < -125.5f ? kSubnormalStep : 0.0;
    if (!(err <= kMaxRelativeError * ref + slack)) ++bad;
    if (x[i] >= -125.5f && err / ref > worst) {
      worst = err / ref;
      worst_x = x[i];
    }
  }
  CHECK_MSG(bad == 0, "%s: %lld of %zu points off by more than %.1e relative (worst %.3e at %.9g)",
            k.name, static_cast<long long>(bad), x.size(), kMaxRelativeError, worst,
            static_cast<double>(worst_x));
  std::printf("%s: max relative error %.3e (at x = %.9g) over %zu points\n", k.name, worst,
              static_cast<double>(worst_x), x.size());
}

void check_special_values(const IsaKernels& k) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {0.0f, -0.0f, -inf, -std::numeric_limits<float>::max(), -1000.0f,
                                -127.0f, std::nextafter(-126.5f, -1e9f), nan, -nan, 127.0f,
                                200.0f, inf};
  const std::vector<float> y = exp2_of_each(k, x);
  CHECK_MSG(y[0] == 1.0f && y[1] == 1.0f, "%s: 2^0 = %.9g, 2^-0 = %.9g, want exactly 1", k.name,
            static_cast<double>(y[0]), static_cast<double>(y[1]));
  for (size_t i = 2; i <= 6; ++i)
    CHECK_MSG(y[i] == 0.0f && !std::signbit(y[i]), "%s: 2^(%.9g) = %.9g, want exactly +0",
              k.name, static_cast<double>(x[i]), static_cast<double>(y[i]));
  for (size_t i = 7; i <= 8; ++i)
    CHECK_MSG(std::isnan(y[i]), "%s: 2^NaN = %.9g, want NaN", k.name, static_cast<double>(y[i]));
  for (size_t i = 9; i <= 11; ++i)
    CHECK_MSG(y[i] == std::ldexp(1.0f, 127), "%s: 2^(%.9g) = %.9g, want 2^127 (the clamp)",
              k.name, static_cast<double>(x[i]), static_cast<double>(y[i]));
}

constexpr double kMaxRelativeErrorF64 = 4e-16;

std::vector<double> exp2_of_each(const IsaKernels& k, const std::vector<double>& x) {
  std::vector<double> y(x.size(), -1.0);
  k.exp2_f64(x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

void check_accuracy_f64(const IsaKernels& k) {
  std::vector<double> x;
  for (int i = -10235; i <= 10230; ++i) x.push_back(0.1 * i);  // grid
  for (int i = -1022; i <= 1023; ++i)  // integers, half-integers, and their neighbours
    for (double f : {static_cast<double>(i), i + 0.5})
      for (double g : {std::nextafter(f, -1e9), f, std::nextafter(f, 1e9)}) x.push_back(g);
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> u(-1023.5, 1023.0);
  for (int i = 0; i < 200000; ++i) x.push_back(u(rng));
  std::uniform_real_distribution<double> near0(-1.0, 1.0);  // the softmax's usual range
  for (int i = 0; i < 200000; ++i) x.push_back(near0(rng));
  const std::vector<double> y = exp2_of_each(k, x);
  const double smallest_normal = std::ldexp(1.0, -1022);
  double worst = 0, worst_x = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -1023.5 || x[i] > 1023.0) continue;
    const long double ref = std::exp2(static_cast<long double>(x[i]));
    const double err = static_cast<double>(std::fabs(static_cast<long double>(y[i]) - ref));
    const double rel = err / static_cast<double>(ref);
    const bool ok = x[i] < -1022.0 ? err <= smallest_normal : rel <= kMaxRelativeErrorF64;
    if (!ok) ++bad;
    if (x[i] >= -1022.0 && rel > worst) {
      worst = rel;
      worst_x = x[i];
    }
  }
  CHECK_MSG(bad == 0, "%s f64: %lld of %zu points off by more than %.1e relative (worst %.3e at "
            "%.17g)", k.name, static_cast<long long>(bad), x.size(), kMaxRelativeErrorF64, worst,
            worst_x);
  std::printf("%s f64: max relative error %.3e (at x = %.17g) over %zu points\n", k.name, worst,
              worst_x, x.size());
}

void check_special_values_f64(const IsaKernels& k) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {0.0, -0.0, -inf, -std::numeric_limits<double>::max(), -5000.0,
                                 -1023.0, std::nextafter(-1022.5, -1e9), nan, -nan, 1023.0,
                                 2000.0, inf};
  const std::vector<double> y = exp2_of_each(k, x);
  CHECK_MSG(y[0] == 1.0 && y[1] == 1.0, "%s f64: 2^0 = %.17g, 2^-0 = %.17g, want exactly 1",
            k.name, y[0], y[1]);
  for (size_t i = 2; i <= 6; ++i)
    CHECK_MSG(y[i] == 0.0 && !std::signbit(y[i]), "%s f64: 2^(%.17g) = %.17g, want exactly +0",
              k.name, x[i], y[i]);
  for (size_t i = 7; i <= 8; ++i)
    CHECK_MSG(std::isnan(y[i]), "%s f64: 2^NaN = %.17g, want NaN", k.name, y[i]);
  for (size_t i = 9; i <= 11; ++i)
    CHECK_MSG(y[i] == std::ldexp(1.0, 1023), "%s f64: 2^(%.17g) = %.17g, want 2^1023 (the clamp)",
              k.name, x[i], y[i]);
}

}  // namespace

int main() {
  const uint32_t have = this_cpu_features();
  int ran = 0;
  for (const char* name :
       {"amx", "avx512bf16", "avx512", "bf16emu", "amxemu", "avx2", "sse", "neon", "generic"}) {
    const IsaChoice c = choose_isa(name, have);
    if (c.kernels == nullptr) continue;  // not built, or this CPU lacks it
    harness::CaseScope scope(name);
    check_accuracy(*c.kernels);
    check_special_values(*c.kernels);
    check_accuracy_f64(*c.kernels);
    check_special_values_f64(*c.kernels);
    ++ran;
  }
  CHECK_MSG(ran > 0, "no instruction set ran (this CPU runs at least the baseline)");
  return harness::finish("cpu_exp2");
}
