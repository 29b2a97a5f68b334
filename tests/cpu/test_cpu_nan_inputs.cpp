// test_cpu_nan_inputs.cpp - property: a NaN in one key's K (or V) makes exactly the rows that
// meet that key NaN, in the cpu backend as in the f64 reference (SPEC 13; SPEC 2's
// empty-row rule is about the index rules, never about values). Forward: O and LSE NaN exactly
// where the reference's are, SPEC 8 elsewhere. Backward (from the reference's O and LSE, SPEC 6):
// dQ, dK, dV NaN exactly where the reference's are, SPEC 8 elsewhere. Cases: dense, causal
// (rows before the key must stay finite: a masked key is never multiplied in), dilated
// (causal, GQA) and block-sparse (causal), in f32 and again in f64 (computed in f64, SPEC 12's
// bound), one case in bf16. Also: a row whose only score is -inf (softmax_rules.h:
// m stays -inf) is empty, O = 0 and LSE = -inf, in the reference and the cpu backend alike;
// a row whose only score is NaN is NaN, not empty.
#include <cmath>
#include <limits>
#include <string>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

std::vector<AttentionCase> nan_cases() {
  std::vector<AttentionCase> cases;
  AttentionCase dense;
  dense.name = "dense";
  dense.Nq = dense.Nk = 150; dense.H = 2; dense.Hkv = 1; dense.D = 40;
  cases.push_back(dense);

  AttentionCase causal = dense;
  causal.name = "dense_causal_nq_lt_nk";
  causal.Nq = 100; causal.Nk = 170; causal.causal = true;
  cases.push_back(causal);

  AttentionCase dilated;
  dilated.name = "dilated_causal_gqa";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 300; dilated.H = 4; dilated.Hkv = 2; dilated.D = 32;
  dilated.segments = {64, 300}; dilated.dilations = {1, 3}; dilated.causal = true;
  cases.push_back(dilated);

  // B x Hkv = 8: the one-pass backward (cpu_tile_loop.h, backward_one_pass); the others
  // take the two passes.
  AttentionCase one_pass = dilated;
  one_pass.name = "dilated_causal_gqa_one_pass";
  one_pass.B = 4;
  cases.push_back(one_pass);

  AttentionCase sparse;
  sparse.name = "sparse_causal";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.Nq = sparse.Nk = 260; sparse.H = 2; sparse.Hkv = 2; sparse.D = 24;
  sparse.mask.bq = sparse.mask.bk = 32; sparse.mask.density = 0.5; sparse.causal = true;
  cases.push_back(sparse);

  // Every case so far again with f64 inputs, computed in f64 (SPEC 12).
  const size_t f32_cases = cases.size();
  for (size_t x = 0; x < f32_cases; ++x) {
    AttentionCase f64 = cases[x];
    f64.name += "_f64";
    f64.dtype = DILATTN_F64;
    cases.push_back(f64);
  }

  AttentionCase bf16 = causal;
  bf16.name = "dense_causal_bf16";
  bf16.dtype = DILATTN_BF16;
  cases.push_back(bf16);
  return cases;
}

void check(AttentionCase c, bool in_v) {
  c.name += in_v ? "_nan_in_v" : "_nan_in_k";
  CaseScope scope(c.name);
  Inputs in = make_inputs(c, 3, 2.0);
  const int64_t j = c.Nk / 2 + 1;  // mid-tile, off every tile edge
  // Element d = 3 of key j (batch 0, kv head 0).
  (in_v ? in.v : in.k).set(0, j, 0, 3, std::numeric_limits<double>::quiet_NaN());

  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  // The reference itself must show the pattern: some rows NaN (those meeting key j) and, where
  // the index rules keep rows away from j, some finite.
  const int64_t nan_o = nan_count(want.o), all_o = want.o.count();
  CHECK_MSG(nan_o != 0 && !(c.causal && nan_o == all_o),
            "reference O has %lld NaN of %lld: not the expected pattern",
            static_cast<long long>(nan_o), static_cast<long long>(all_o));
  const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, 2);
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));

  const Gradients gwant = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
  const Gradients ggot = run_backward(c, in, want, DILATTN_BACKEND_CPU, 2);
  CHECK_CLOSE("dQ", ggot.dq, gwant.dq, spec8::of(c.dtype));
  CHECK_CLOSE("dK", ggot.dk, gwant.dk, spec8::of(c.dtype));
  CHECK_CLOSE("dV", ggot.dv, gwant.dv, spec8::of(c.dtype));
}

// Causal row 0 sees key 0 alone; K row 0 = -inf and Q row 0 = 1 make its one score -inf.
void check_all_neg_inf_row_is_empty(dilattn_dtype t) {
  AttentionCase c;
  c.name = std::string("causal_row0_score_neg_inf_") + (t == DILATTN_F64 ? "f64" : "f32");
  c.Nq = c.Nk = 70; c.D = 4; c.causal = true; c.dtype = t;
  CaseScope scope(c.name);
  Inputs in = make_inputs(c, 6, 2.0);
  for (int64_t d = 0; d < c.D; ++d) {
    in.k.set(0, 0, 0, d, -std::numeric_limits<double>::infinity());
    in.q.set(0, 0, 0, d, 1.0);
  }
  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  CHECK_MSG(want.lse.at(0, 0, 0, 0) == -std::numeric_limits<double>::infinity() &&
                want.o.at(0, 0, 0, 0) == 0,
            "reference row 0: O %g, LSE %g; want 0, -inf", want.o.at(0, 0, 0, 0),
            want.lse.at(0, 0, 0, 0));
  const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, 1);
  // Rows after 0 meet key 0 as a -inf score too: weight 0, finite results.
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
}

// Causal row 0 sees key 0 alone, and its one score is NaN (K row 0 holds a NaN): the row is
// NaN, not empty, though every other score of its tile is -inf (masked). The cpu forward's row
// max may drop that NaN (vmax_plain) and must restore it from the row's sum; every later row
// meets key 0 too, so the whole O and LSE are NaN, as in the reference.
void check_nan_score_alone_is_nan_not_empty(dilattn_dtype t) {
  AttentionCase c;
  c.name = std::string("causal_row0_score_nan_") + (t == DILATTN_F64 ? "f64" : "f32");
  c.Nq = c.Nk = 70; c.D = 4; c.causal = true; c.dtype = t;
  CaseScope scope(c.name);
  Inputs in = make_inputs(c, 7, 2.0);
  in.k.set(0, 0, 0, 1, std::numeric_limits<double>::quiet_NaN());
  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  CHECK_MSG(std::isnan(want.lse.at(0, 0, 0, 0)) && std::isnan(want.o.at(0, 0, 0, 0)),
            "reference row 0: O %g, LSE %g; want NaN, NaN", want.o.at(0, 0, 0, 0),
            want.lse.at(0, 0, 0, 0));
  const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, 1);
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
}

}  // namespace

int main() {
  for (dilattn_dtype t : {DILATTN_F32, DILATTN_F64}) {
    check_all_neg_inf_row_is_empty(t);
    check_nan_score_alone_is_nan_not_empty(t);
  }
  for (const AttentionCase& c : nan_cases()) {
    check(c, false);
    check(c, true);
  }
  return finish("cpu_nan_in_k_or_v_matches_reference");
}
