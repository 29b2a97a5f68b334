// test_cpu_huge_scale.cpp - property: a huge finite scale (+-1e38, where scale * <q, k> overflows
// f32 but not the f64 reference) gives the reference's forward in the cpu backend. The softmax
// is then a hard max: O is the V row of the best key and LSE is about scale * its score.
// softmax_rules.h's score_scale keeps only the scale's sign in the f32 scores and applies
// |scale| log2(e) after the max subtraction, as the reference's max subtraction does in f64.
// The same split at +-100 (past score_scale's fold limit) is checked forward and backward.
// Backward at +-1e38 is not checked: P = exp(S - LSE) needs S - LSE of the best key to be
// exactly 0, and f32 scores differ from the LSE by an ulp, which |scale| log2(e) turns into
// P = 0 or inf (README "Decisions"). Cases: dense, causal, dilated, block-sparse, both signs.
#include "cpu_test_util.h"

using namespace cputest;

namespace {

std::vector<Case> huge_cases(double scale) {
  std::vector<Case> cases;
  Case dense;
  dense.name = "dense";
  dense.Nq = dense.Nk = 90; dense.H = 2; dense.Hkv = 1; dense.D = 16;
  cases.push_back(dense);

  Case causal = dense;
  causal.name = "dense_causal";
  causal.Nq = 70; causal.Nk = 130; causal.causal = true;
  cases.push_back(causal);

  // groups mode: each head uses one branch, so no key is reached twice. (A key reached twice
  // has two equal branch LSEs L; the f64 reference's L + log 2 rounds to L at |L| ~ 1e38 and
  // its combination then weighs each branch 1 instead of 1/2.)
  Case dilated;
  dilated.name = "dilated_groups_causal";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 200; dilated.H = 3; dilated.Hkv = 1; dilated.D = 8;
  dilated.segments = {50, 200}; dilated.dilations = {1, 2}; dilated.causal = true;
  dilated.mode = DILATTN_HEADS_GROUPS;
  cases.push_back(dilated);

  Case sparse;
  sparse.name = "sparse";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.Nq = sparse.Nk = 160; sparse.D = 16; sparse.bq = sparse.bk = 32; sparse.density = 0.5;
  cases.push_back(sparse);

  for (Case& c : cases) {
    c.scale = scale;
    char tag[32];
    std::snprintf(tag, sizeof tag, "_scale_%g", scale);
    c.name += tag;
  }
  return cases;
}

}  // namespace

int main() {
  for (double scale : {1e38, -1e38, 100.0, -100.0})
    for (const Case& c : huge_cases(scale)) {
      Inputs in = make_inputs(c, 4);
      // Q / 16: |<q, k>| <= 2, so LSE ~ scale <q, k> stays inside the f32 range of the LSE.
      for (int64_t x = 0; x < in.q.count(); ++x)
        dilattn::store_element(in.q.view.data, c.dtype, x,
                               dilattn::load_element(in.q.view.data, c.dtype, x) / 16);
      const ForwardOut want = run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
      const ForwardOut got = run_forward(c, in, DILATTN_BACKEND_CPU, 2, DILATTN_F32);
      expect_close(c, "O", got.o, want.o, tolerance_of(c.dtype));
      // LSE is about scale <q, k>, up to 2 |scale|: the f32 scores are rounded to ~6e-8 of
      // that size, so the absolute 1e-4 of SPEC 8 becomes 1e-6 |scale| (1e-4 at +-100). Not
      // relative to LSE itself: a row's LSE can cancel to near 0 (-0.41 at scale -100) while
      // its scores carry the error of their own size.
      expect_close(c, "LSE", got.lse, want.lse, Tolerance{1e-6 * std::fabs(scale), 1e-6});

      if (std::fabs(scale) > 1e3) continue;  // see the top: backward only at +-100
      const Gradients gwant = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
      const Gradients ggot = run_backward(c, in, want, DILATTN_BACKEND_CPU, 2);
      // dQ and dK are scale * sum dS k: the f32 rounding of S (~1e-7 of |S| ~ |scale|) comes
      // back multiplied by |scale|, so their absolute bound grows with it.
      const Tolerance scaled{tolerance_of(c.dtype).atol * std::fabs(scale),
                             tolerance_of(c.dtype).rtol};
      expect_close(c, "dQ", ggot.dq, gwant.dq, scaled);
      expect_close(c, "dK", ggot.dk, gwant.dk, scaled);
      expect_close(c, "dV", ggot.dv, gwant.dv, tolerance_of(c.dtype));
    }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
