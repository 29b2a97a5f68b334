// test_cpu_huge_scale.cpp - property: a huge finite scale (+-1e38, where scale * <q, k> overflows
// f32 but not the f64 reference) gives the reference's forward in the cpu backend. The softmax
// is then a hard max: O is the V row of the best key and LSE is about scale * its score.
// softmax_rules.h's score_scale keeps only the scale's sign in the f32 scores and applies
// |scale| log2(e) after the max subtraction, as the reference's max subtraction does in f64.
// The same split at +-100 (past score_scale's fold limit) is checked forward and backward.
// Backward at +-1e38 is not checked: P = exp(S - LSE) needs S - LSE of the best key to be
// exactly 0, and f32 scores differ from the LSE by an ulp, which |scale| log2(e) turns into
// P = 0 or inf (SPEC 13). Cases: dense, causal, dilated, block-sparse, both signs; each again
// with f64 inputs (computed in f64: the same split, SPEC 12's bound, relative to the scale
// where the f32 bound is).
#include <cmath>
#include <cstdio>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

std::vector<AttentionCase> huge_cases(double scale) {
  std::vector<AttentionCase> cases;
  AttentionCase dense;
  dense.name = "dense";
  dense.Nq = dense.Nk = 90; dense.H = 2; dense.Hkv = 1; dense.D = 16;
  cases.push_back(dense);

  AttentionCase causal = dense;
  causal.name = "dense_causal";
  causal.Nq = 70; causal.Nk = 130; causal.causal = true;
  cases.push_back(causal);

  // groups mode: each head uses one branch, so no key is reached twice. (A key reached twice
  // has two equal branch LSEs L; the f64 reference's L + log 2 rounds to L at |L| ~ 1e38 and
  // its combination then weighs each branch 1 instead of 1/2.)
  AttentionCase dilated;
  dilated.name = "dilated_groups_causal";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 200; dilated.H = 3; dilated.Hkv = 1; dilated.D = 8;
  dilated.segments = {50, 200}; dilated.dilations = {1, 2}; dilated.causal = true;
  dilated.head_mode = DILATTN_HEADS_GROUPS;
  cases.push_back(dilated);

  AttentionCase sparse;
  sparse.name = "sparse";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.Nq = sparse.Nk = 160; sparse.D = 16;
  sparse.mask.bq = sparse.mask.bk = 32; sparse.mask.density = 0.5;
  cases.push_back(sparse);

  const size_t f32_cases = cases.size();
  for (size_t x = 0; x < f32_cases; ++x) {
    AttentionCase f64 = cases[x];
    f64.name += "_f64";
    f64.dtype = DILATTN_F64;
    cases.push_back(f64);
  }
  for (AttentionCase& c : cases) {
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
    for (const AttentionCase& c : huge_cases(scale)) {
      CaseScope scope(c.name);
      Inputs in = make_inputs(c, 4, 2.0);
      // Q / 16: |<q, k>| <= 2, so LSE ~ scale <q, k> stays inside the f32 range of the LSE.
      for (int64_t e = 0; e < in.q.count(); ++e) in.q.set_flat(e, in.q.flat(e) / 16);
      const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
      const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, 2);
      CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
      // LSE is about 1e38 here: an f32 LSE carries it to its own precision only, so the
      // absolute 1e-4 of SPEC 8 becomes relative (the f32 scores are rounded to ~6e-8), plus
      // one f32 rounding of the largest score |scale| * 2 (2^-24 of it), absolute: where a
      // row's scores cancel to a small LSE, a bound relative to |LSE| alone is below the
      // rounding of the scores themselves.
      // f64: the same with f64's rounding (2^-52), and relative 1e-13.
      const bool f64 = c.dtype == DILATTN_F64;
      const Tolerance lse_tol = f64 ? Tolerance{std::ldexp(std::fabs(scale), -52), 1e-13}
                                    : Tolerance{std::ldexp(std::fabs(scale), -23), 1e-6};
      CHECK_CLOSE("LSE", got.lse, want.lse, lse_tol);

      if (std::fabs(scale) > 1e3) continue;  // see the top: backward only at +-100
      const Gradients gwant = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
      const Gradients ggot = run_backward(c, in, want, DILATTN_BACKEND_CPU, 2);
      // dQ and dK are scale * sum dS k: the f32 rounding of S (~1e-7 of |S| ~ |scale|) comes
      // back multiplied by |scale|, so their absolute bound grows with it.
      const Tolerance scaled{spec8::of(c.dtype).atol * std::fabs(scale), spec8::of(c.dtype).rtol};
      CHECK_CLOSE("dQ", ggot.dq, gwant.dq, scaled);
      CHECK_CLOSE("dK", ggot.dk, gwant.dk, scaled);
      CHECK_CLOSE("dV", ggot.dv, gwant.dv, spec8::of(c.dtype));
    }
  return finish("cpu_huge_scale_matches_reference");
}
