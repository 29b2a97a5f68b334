// test_repeated_branch_counts_twice.cpp - SPEC 2 and 3: A(i) is a multiset; a key reached by two
// branches counts twice. Two identical branches (w, r) double every term: the softmax weights
// are unchanged, so O equals the one-branch O and LSE = LSE_one + ln 2. Backward: every
// P_ij = exp(S_ij - LSE_i) is halved but each key occurs twice, so dQ, dK, dV are unchanged.
#include <cmath>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

int main() {
  const double kTol = 1e-12;
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK};
  uint64_t seed = 31;
  for (bool causal : {false, true})
    for (dilattn_head_mode mode : modes) {
      AttentionCase one;
      one.name = std::string(causal ? "causal_" : "") +
                 (mode == DILATTN_HEADS_MOD ? "mod" : "block") + "_branch_twice";
      one.dtype = DILATTN_F64;
      one.B = 1; one.Nq = one.Nk = 11; one.H = 3; one.Hkv = 3; one.D = 4;
      one.causal = causal;
      one.kind = DILATTN_KIND_DILATED;
      one.head_mode = mode;
      one.segments = {4};  // segments [0,4) [4,8) [8,11): the last one partial
      one.dilations = {2};
      AttentionCase two = one;
      two.segments = {4, 4};
      two.dilations = {2, 2};
      CaseScope scope(one.name);
      const Inputs in = make_inputs(one, seed++, 1.0);
      const Forward a = run_forward(one, in, DILATTN_BACKEND_REF);
      const Forward b = run_forward(two, in, DILATTN_BACKEND_REF);
      CHECK_MAX_ABS_DIFF("O", a.o, b.o, kTol);
      std::vector<double> lse_plus_ln2 = a.lse.values();
      for (double& x : lse_plus_ln2) x += std::log(2.0);  // -inf stays -inf
      CHECK_MAX_ABS_DIFF("LSE", b.lse.values(), lse_plus_ln2, kTol);

      const Gradients ga = run_backward(one, in, a, DILATTN_BACKEND_REF);
      const Gradients gb = run_backward(two, in, b, DILATTN_BACKEND_REF);
      CHECK_MAX_ABS_DIFF("dQ", ga.dq, gb.dq, kTol);
      CHECK_MAX_ABS_DIFF("dK", ga.dk, gb.dk, kTol);
      CHECK_MAX_ABS_DIFF("dV", ga.dv, gb.dv, kTol);
    }

  // A key reached by two different branches: (4, 1) and (2, 1) with N = 4, one head. Row 0
  // sees {0,1,2,3} + {0,1}: the softmax over the multiset equals dense attention over keys
  // k_0, k_0, k_1, k_1, k_2, k_3, checked against a dense run on those six keys (Nq = 1).
  AttentionCase dil;
  dil.name = "two_different_branches";
  dil.dtype = DILATTN_F64;
  dil.Nq = dil.Nk = 4; dil.D = 3;
  dil.kind = DILATTN_KIND_DILATED;
  dil.segments = {4, 2};
  dil.dilations = {1, 1};
  CaseScope scope(dil.name);
  const Inputs in = make_inputs(dil, 41, 1.0);
  const Forward r = run_forward(dil, in, DILATTN_BACKEND_REF);
  AttentionCase dense;
  dense.name = "six_keys_dense";
  dense.dtype = DILATTN_F64;
  dense.Nq = 1; dense.Nk = 6; dense.D = 3;
  Inputs six{dense.q_like(DILATTN_F64), dense.kv_like(DILATTN_F64), dense.kv_like(DILATTN_F64),
             dense.q_like(DILATTN_F64)};
  int n = 0;
  for (int j : {0, 0, 1, 1, 2, 3}) {
    for (int d = 0; d < 3; ++d) {
      six.k.set(0, n, 0, d, in.k.at(0, j, 0, d));
      six.v.set(0, n, 0, d, in.v.at(0, j, 0, d));
    }
    ++n;
  }
  for (int d = 0; d < 3; ++d) six.q.set(0, 0, 0, d, in.q.at(0, 0, 0, d));
  const Forward want = run_forward(dense, six, DILATTN_BACKEND_REF);
  for (int d = 0; d < 3; ++d) CHECK_NEAR(r.o.at(0, 0, 0, d), want.o.at(0, 0, 0, d), kTol);
  CHECK_NEAR(r.lse.at(0, 0, 0, 0), want.lse.at(0, 0, 0, 0), kTol);
  return finish("repeated_branch_counts_twice");
}
