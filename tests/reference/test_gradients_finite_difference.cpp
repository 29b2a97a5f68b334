// test_gradients_finite_difference.cpp - SPEC 6: the reference backward is the exact gradient of
// the reference forward. With loss L = sum(dO * O), dL/dx for every element x of Q, K and V is
// compared with the central difference (L(x + h) - L(x - h)) / (2h), all in f64.
//
// Tolerance: with h = 1e-6 the truncation error is O(h^2 |L'''|) ~ 1e-12 and the rounding
// error ~ eps |L| / h ~ 2e-16 * 10 / 1e-6 = 2e-9, so |fd - grad| <= 1e-6 (1 + |grad|) leaves a
// 500x margin yet catches any wrong term (a missing factor or term is O(0.01 .. 1)).
// Cases: dense, causal with Nq != Nk, GQA, and dilated in each head mode with partial segments.
#include "attention_runner.h"

namespace {

double loss(const runner::Config& c, const runner::Inputs& in, const std::vector<double>& d_o) {
  const runner::Outputs r = runner::forward(c, in);
  double l = 0;
  for (size_t e = 0; e < d_o.size(); ++e) l += d_o[e] * r.o[e];
  return l;
}

void check(const char* name, const runner::Config& c, uint64_t seed) {
  const runner::Inputs in = runner::random_inputs(c, seed);
  std::mt19937_64 rng(seed + 7);
  const std::vector<double> d_o = runner::random_vector(c.q_size(), rng);
  const runner::Gradients g = runner::backward(c, in, d_o);
  const double h = 1e-6;
  double worst = 0;
  struct Pair { std::vector<double> runner::Inputs::*x; const std::vector<double>* grad; };
  for (const Pair& p : {Pair{&runner::Inputs::q, &g.dq}, Pair{&runner::Inputs::k, &g.dk},
                        Pair{&runner::Inputs::v, &g.dv}})
    for (size_t e = 0; e < (in.*p.x).size(); ++e) {
      runner::Inputs plus = in, minus = in;
      (plus.*p.x)[e] += h;
      (minus.*p.x)[e] -= h;
      const double fd = (loss(c, plus, d_o) - loss(c, minus, d_o)) / (2 * h);
      const double an = (*p.grad)[e];
      EXPECT_NEAR(an, fd, 1e-6 * (1 + std::fabs(an)));
      worst = std::fmax(worst, std::fabs(an - fd));
    }
  std::printf("%-28s max |grad - central difference| = %.2e\n", name, worst);
}

}  // namespace

int main() {
  runner::Config c;
  c.B = 1; c.Nq = c.Nk = 6; c.H = 2; c.Hkv = 2; c.D = 3;
  check("dense", c, 61);
  c.causal = true;
  c.Nq = 5; c.Nk = 7;
  check("causal, Nq=5 Nk=7", c, 62);
  c.causal = false;
  c.Nq = c.Nk = 6; c.H = 4; c.Hkv = 2;
  check("GQA H=4 Hkv=2", c, 63);
  c.segments = {4, 6};  // (4, 2): segments [0,4) [4,6); (6, 3): one segment
  c.dilations = {2, 3};
  c.H = 3; c.Hkv = 1;   // H % r != 0: block mode offsets floor(h / ceil(3 / r))
  c.causal = true;
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS};
  const char* names[] = {"dilated mod, causal", "dilated block, causal", "dilated groups, causal"};
  for (int m = 0; m < 3; ++m) {
    c.mode = modes[m];
    check(names[m], c, 64 + static_cast<uint64_t>(m));
  }
  c.causal = false;
  c.mode = DILATTN_HEADS_MOD;
  check("dilated mod, not causal", c, 70);
  if (runner::failures() == 0) std::printf("backward matches central differences: pass\n");
  return runner::failures() != 0;
}
