// test_single_branch_equals_dense.cpp - SPEC 3: a dilated config with one branch (N, 1) is dense
// attention, causal or not, in every head mode; a segment longer than N is clipped to N, so
// (w > N, 1) is dense too. Forward (O, LSE) and backward (dQ, dK, dV) must agree to rounding.
#include "attention_runner.h"

int main() {
  const double kTol = 1e-12;  // same sums, possibly another order of the same f64 terms
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS};
  uint64_t seed = 1;
  for (bool causal : {false, true})
    for (dilattn_head_mode mode : modes)
      for (int64_t w_extra : {0, 5}) {
        runner::Config dense;
        dense.B = 2; dense.Nq = dense.Nk = 7; dense.H = 4; dense.Hkv = 2; dense.D = 5;
        dense.causal = causal;
        runner::Config dilated = dense;
        dilated.segments = {dense.Nq + w_extra};
        dilated.dilations = {1};
        dilated.mode = mode;
        const runner::Inputs in = runner::random_inputs(dense, seed++);
        const runner::Outputs a = runner::forward(dense, in), b = runner::forward(dilated, in);
        EXPECT_TRUE(runner::max_abs_diff(a.o, b.o) <= kTol);
        EXPECT_TRUE(runner::max_abs_diff(a.lse, b.lse) <= kTol);

        std::mt19937_64 rng(seed++);
        const std::vector<double> d_o = runner::random_vector(dense.q_size(), rng);
        const runner::Gradients ga = runner::backward(dense, in, d_o);
        const runner::Gradients gb = runner::backward(dilated, in, d_o);
        EXPECT_TRUE(runner::max_abs_diff(ga.dq, gb.dq) <= kTol);
        EXPECT_TRUE(runner::max_abs_diff(ga.dk, gb.dk) <= kTol);
        EXPECT_TRUE(runner::max_abs_diff(ga.dv, gb.dv) <= kTol);
      }
  if (runner::failures() == 0) std::printf("one branch (N, 1) equals dense: pass\n");
  return runner::failures() != 0;
}
