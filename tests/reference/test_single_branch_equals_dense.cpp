// test_single_branch_equals_dense.cpp - SPEC 3: a dilated config with one branch (N, 1) is dense
// attention, causal or not, in every head mode; a segment longer than N is clipped to N, so
// (w > N, 1) is dense too. Forward (O, LSE) and backward (dQ, dK, dV) must agree to rounding.
#include <string>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

int main() {
  const double kTol = 1e-12;  // same sums, possibly another order of the same f64 terms
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS};
  uint64_t seed = 1;
  for (bool causal : {false, true})
    for (dilattn_head_mode mode : modes)
      for (int64_t w_extra : {0, 5}) {
        AttentionCase dense;
        dense.dtype = DILATTN_F64;
        dense.B = 2; dense.Nq = dense.Nk = 7; dense.H = 4; dense.Hkv = 2; dense.D = 5;
        dense.causal = causal;
        AttentionCase dilated = dense;
        dilated.kind = DILATTN_KIND_DILATED;
        dilated.segments = {dense.Nq + w_extra};
        dilated.dilations = {1};
        dilated.head_mode = mode;
        CaseScope scope("w=" + std::to_string(dilated.segments[0]) + " mode " +
                        std::to_string(static_cast<int>(mode)) + (causal ? " causal" : ""));
        const Inputs in = make_inputs(dense, seed++, 1.0);
        const Forward a = run_forward(dense, in, DILATTN_BACKEND_REF);
        const Forward b = run_forward(dilated, in, DILATTN_BACKEND_REF);
        CHECK_MAX_ABS_DIFF("O", a.o, b.o, kTol);
        CHECK_MAX_ABS_DIFF("LSE", a.lse, b.lse, kTol);

        const Gradients ga = run_backward(dense, in, a, DILATTN_BACKEND_REF);
        const Gradients gb = run_backward(dilated, in, b, DILATTN_BACKEND_REF);
        CHECK_MAX_ABS_DIFF("dQ", ga.dq, gb.dq, kTol);
        CHECK_MAX_ABS_DIFF("dK", ga.dk, gb.dk, kTol);
        CHECK_MAX_ABS_DIFF("dV", ga.dv, gb.dv, kTol);
      }
  return finish("dilated_single_branch_equals_dense");
}
