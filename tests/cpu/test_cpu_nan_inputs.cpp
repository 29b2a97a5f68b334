// test_cpu_nan_inputs.cpp - property: a NaN in one key's K (or V) makes exactly the rows that
// meet that key NaN, in the cpu backend as in the f64 reference (README "Decisions"; SPEC 2's
// empty-row rule is about the index rules, never about values). Forward: O and LSE NaN exactly
// where the reference's are, SPEC 8 elsewhere. Backward (from the reference's O and LSE, SPEC 6):
// dQ, dK, dV NaN exactly where the reference's are, SPEC 8 elsewhere. Cases: dense, causal
// (rows before the key must stay finite: a masked key is never multiplied in), dilated
// (causal, GQA) and block-sparse (causal). Also: a row whose only score is -inf (softmax_rules.h:
// m stays -inf) is empty, O = 0 and LSE = -inf, in the reference and the cpu backend alike.
#include <limits>

#include "cpu_test_util.h"

using namespace cputest;

namespace {

std::vector<Case> nan_cases() {
  std::vector<Case> cases;
  Case dense;
  dense.name = "dense";
  dense.Nq = dense.Nk = 150; dense.H = 2; dense.Hkv = 1; dense.D = 40;
  cases.push_back(dense);

  Case causal = dense;
  causal.name = "dense_causal_nq_lt_nk";
  causal.Nq = 100; causal.Nk = 170; causal.causal = true;
  cases.push_back(causal);

  Case dilated;
  dilated.name = "dilated_causal_gqa";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 300; dilated.H = 4; dilated.Hkv = 2; dilated.D = 32;
  dilated.segments = {64, 300}; dilated.dilations = {1, 3}; dilated.causal = true;
  cases.push_back(dilated);

  Case sparse;
  sparse.name = "sparse_causal";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.Nq = sparse.Nk = 260; sparse.H = 2; sparse.Hkv = 2; sparse.D = 24;
  sparse.bq = sparse.bk = 32; sparse.density = 0.5; sparse.causal = true;
  cases.push_back(sparse);

  Case bf16 = causal;
  bf16.name = "dense_causal_bf16";
  bf16.dtype = DILATTN_BF16;
  cases.push_back(bf16);
  return cases;
}

// Sets element d of key j (batch 0, kv head 0) of `t` to NaN.
void poison(Buffer* t, int64_t j, int64_t d) {
  dilattn::store_element(t->view.data, t->dtype, dilattn::element_offset(t->view, 0, j, 0, d),
                         std::numeric_limits<double>::quiet_NaN());
}

void check(const Case& c, bool in_v) {
  Inputs in = make_inputs(c, 3);
  const int64_t j = c.Nk / 2 + 1;  // mid-tile, off every tile edge
  poison(in_v ? &in.v : &in.k, j, 3);
  const std::string name = c.name + (in_v ? "_nan_in_v" : "_nan_in_k");
  Case named = c;
  named.name = name;

  const ForwardOut want = run_forward(named, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
  // The reference itself must show the pattern: some rows NaN (those meeting key j) and, where
  // the index rules keep rows away from j, some finite.
  const int64_t nan_o = nan_count(want.o), all_o = want.o.count();
  if (nan_o == 0 || (c.causal && nan_o == all_o)) {
    std::fprintf(stderr, "FAILED [%s] reference O has %lld NaN of %lld: not the expected pattern\n",
                 name.c_str(), static_cast<long long>(nan_o), static_cast<long long>(all_o));
    ++failure_count();
  }
  const ForwardOut got = run_forward(named, in, DILATTN_BACKEND_CPU, 2, DILATTN_F32);
  expect_close(named, "O", got.o, want.o, tolerance_of(c.dtype));
  expect_close(named, "LSE", got.lse, want.lse, Tolerance{spec8::kLseAtol, 0});

  const Gradients gwant = run_backward(named, in, want, DILATTN_BACKEND_REF, 1);
  const Gradients ggot = run_backward(named, in, want, DILATTN_BACKEND_CPU, 2);
  expect_close(named, "dQ", ggot.dq, gwant.dq, tolerance_of(c.dtype));
  expect_close(named, "dK", ggot.dk, gwant.dk, tolerance_of(c.dtype));
  expect_close(named, "dV", ggot.dv, gwant.dv, tolerance_of(c.dtype));
}

// Causal row 0 sees key 0 alone; K row 0 = -inf and Q row 0 = 1 make its one score -inf.
void check_all_neg_inf_row_is_empty() {
  Case c;
  c.name = "causal_row0_score_neg_inf";
  c.Nq = c.Nk = 70; c.D = 4; c.causal = true;
  Inputs in = make_inputs(c, 6);
  for (int64_t d = 0; d < c.D; ++d) {
    dilattn::store_element(in.k.view.data, c.dtype, dilattn::element_offset(in.k.view, 0, 0, 0, d),
                           -std::numeric_limits<double>::infinity());
    dilattn::store_element(in.q.view.data, c.dtype, dilattn::element_offset(in.q.view, 0, 0, 0, d),
                           1.0);
  }
  const ForwardOut want = run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
  if (!(want.lse.at(0, 0, 0, 0) == -std::numeric_limits<double>::infinity() &&
        want.o.at(0, 0, 0, 0) == 0)) {
    std::fprintf(stderr, "FAILED [%s] reference row 0: O %g, LSE %g; want 0, -inf\n",
                 c.name.c_str(), want.o.at(0, 0, 0, 0), want.lse.at(0, 0, 0, 0));
    ++failure_count();
  }
  const ForwardOut got = run_forward(c, in, DILATTN_BACKEND_CPU, 1, DILATTN_F32);
  // Rows after 0 meet key 0 as a -inf score too: weight 0, finite results.
  expect_close(c, "O", got.o, want.o, tolerance_of(c.dtype));
  expect_close(c, "LSE", got.lse, want.lse, Tolerance{spec8::kLseAtol, 0});
}

}  // namespace

int main() {
  check_all_neg_inf_row_is_empty();
  for (const Case& c : nan_cases()) {
    check(c, false);
    check(c, true);
  }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
