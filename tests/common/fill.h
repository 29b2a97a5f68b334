// fill.h - the one deterministic random number generator of the tests, and the fills built on
// it. splitmix64 (the generator dilattn_mask_random uses, SPEC 4) gives the same numbers on
// every platform and standard library, unlike std::uniform_real_distribution, so a failure
// seen in CI reproduces anywhere.
#ifndef DILATTN_TESTS_FILL_H
#define DILATTN_TESTS_FILL_H

#include <cstdint>
#include <vector>

#include "tensor.h"

namespace harness {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1): the top 53 bits as a fraction.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return unit() * (hi - lo) + lo; }

 private:
  uint64_t state_;
};

// Every element of t, in index order [i0, i1, i2, i3], uniform in [lo, hi) rounded once to
// t's dtype, so the reference later reads exactly the values the backend under test reads.
inline void fill_uniform(Tensor& t, SplitMix64& rng, double lo, double hi) {
  for (int64_t e = 0; e < t.count(); ++e) t.set_flat(e, rng.uniform(lo, hi));
}

inline std::vector<double> uniform_values(size_t n, SplitMix64& rng, double lo, double hi) {
  std::vector<double> x(n);
  for (double& e : x) e = rng.uniform(lo, hi);
  return x;
}

}  // namespace harness

#endif  // DILATTN_TESTS_FILL_H
