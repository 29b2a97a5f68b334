// test_empty_rows.cpp - SPEC 2 and 3: a row with no allowed key gets O = 0 and LSE = -inf, never
// NaN, and contributes nothing to the backward (dQ row 0, no NaN anywhere).
//   1. Dilated: rows no branch selects (one branch (6, 3), mod mode: head h selects rows with
//      (p - s0) mod 3 == h mod 3; the others are empty).
//   2. Dense causal with Nq > Nk: row i keeps j <= i + (Nk - Nq), so rows i < Nq - Nk are empty.
#include "attention_runner.h"

namespace {

void check_rows(const runner::Config& c, uint64_t seed, bool (*empty)(int64_t h, int64_t i)) {
  const runner::Inputs in = runner::random_inputs(c, seed);
  const runner::Outputs r = runner::forward(c, in);
  std::mt19937_64 rng(seed + 1);
  const runner::Gradients g = runner::backward(c, in, runner::random_vector(c.q_size(), rng));
  int empties = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Nq; ++i) {
        const double lse = r.lse[c.li(b, h, i)];
        EXPECT_TRUE(!std::isnan(lse));
        if (empty(h, i)) {
          ++empties;
          EXPECT_NEAR(lse, -INFINITY, 0.0);
          for (int64_t d = 0; d < c.D; ++d) {
            EXPECT_NEAR(r.o[c.qi(b, i, h, d)], 0.0, 0.0);
            EXPECT_NEAR(g.dq[c.qi(b, i, h, d)], 0.0, 0.0);
          }
        } else {
          EXPECT_TRUE(std::isfinite(lse));
        }
      }
  EXPECT_TRUE(empties > 0);  // the case does exercise empty rows
  for (const std::vector<double>* x : {&r.o, &g.dq, &g.dk, &g.dv})
    for (double e : *x) EXPECT_TRUE(std::isfinite(e));
}

}  // namespace

int main() {
  runner::Config dil;
  dil.B = 2; dil.Nq = dil.Nk = 8; dil.H = 3; dil.Hkv = 3; dil.D = 4;
  dil.segments = {6};  // segments [0, 6) and the partial [6, 8)
  dil.dilations = {3};
  for (bool causal : {false, true}) {
    dil.causal = causal;
    check_rows(dil, 51, [](int64_t h, int64_t i) { return (i % 6) % 3 != h % 3; });
  }

  runner::Config dense;
  dense.B = 1; dense.Nq = 7; dense.Nk = 3; dense.H = 2; dense.Hkv = 1; dense.D = 5;
  dense.causal = true;  // rows 0..3 keep j <= i - 4 < 0: empty; rows 4..6 see keys 0..i-4
  check_rows(dense, 52, [](int64_t, int64_t i) { return i < 4; });
  if (runner::failures() == 0) std::printf("empty rows give O = 0, LSE = -inf: pass\n");
  return runner::failures() != 0;
}
