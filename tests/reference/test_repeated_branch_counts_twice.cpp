// test_repeated_branch_counts_twice.cpp - SPEC 2 and 3: A(i) is a multiset; a key reached by two
// branches counts twice. Two identical branches (w, r) double every term: the softmax weights
// are unchanged, so O equals the one-branch O and LSE = LSE_one + ln 2. Backward: every
// P_ij = exp(S_ij - LSE_i) is halved but each key occurs twice, so dQ, dK, dV are unchanged.
#include "attention_runner.h"

int main() {
  const double kTol = 1e-12;
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK};
  uint64_t seed = 31;
  for (bool causal : {false, true})
    for (dilattn_head_mode mode : modes) {
      runner::Config one;
      one.B = 1; one.Nq = one.Nk = 11; one.H = 3; one.Hkv = 3; one.D = 4;
      one.causal = causal;
      one.mode = mode;
      one.segments = {4};  // segments [0,4) [4,8) [8,11): the last one partial
      one.dilations = {2};
      runner::Config two = one;
      two.segments = {4, 4};
      two.dilations = {2, 2};
      const runner::Inputs in = runner::random_inputs(one, seed++);
      const runner::Outputs a = runner::forward(one, in), b = runner::forward(two, in);
      EXPECT_TRUE(runner::max_abs_diff(a.o, b.o) <= kTol);
      std::vector<double> lse_plus_ln2 = a.lse;
      for (double& x : lse_plus_ln2) x += std::log(2.0);  // -inf stays -inf
      EXPECT_TRUE(runner::max_abs_diff(b.lse, lse_plus_ln2) <= kTol);

      std::mt19937_64 rng(seed++);
      const std::vector<double> d_o = runner::random_vector(one.q_size(), rng);
      const runner::Gradients ga = runner::backward(one, in, d_o), gb = runner::backward(two, in, d_o);
      EXPECT_TRUE(runner::max_abs_diff(ga.dq, gb.dq) <= kTol);
      EXPECT_TRUE(runner::max_abs_diff(ga.dk, gb.dk) <= kTol);
      EXPECT_TRUE(runner::max_abs_diff(ga.dv, gb.dv) <= kTol);
    }

  // A key reached by two different branches: (4, 1) and (2, 1) with N = 4, one head. Row 0
  // sees {0,1,2,3} + {0,1}: the softmax over the multiset equals dense attention over keys
  // k_0, k_0, k_1, k_1, k_2, k_3, checked against a dense run on those six keys (Nq = 1).
  runner::Config dil;
  dil.Nq = dil.Nk = 4; dil.D = 3;
  dil.segments = {4, 2};
  dil.dilations = {1, 1};
  const runner::Inputs in = runner::random_inputs(dil, 41);
  const runner::Outputs r = runner::forward(dil, in);
  runner::Config dense;
  dense.Nq = 1; dense.Nk = 6; dense.D = 3;
  runner::Inputs six{{in.q.begin(), in.q.begin() + 3}, {}, {}};
  for (int j : {0, 0, 1, 1, 2, 3})
    for (int d = 0; d < 3; ++d) {
      six.k.push_back(in.k[static_cast<size_t>(j * 3 + d)]);
      six.v.push_back(in.v[static_cast<size_t>(j * 3 + d)]);
    }
  const runner::Outputs want = runner::forward(dense, six);
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(r.o[static_cast<size_t>(d)], want.o[static_cast<size_t>(d)], kTol);
  EXPECT_NEAR(r.lse[0], want.lse[0], kTol);
  if (runner::failures() == 0) std::printf("a key reached by two branches counts twice: pass\n");
  return runner::failures() != 0;
}
