// test_empty_rows.cpp - SPEC 2 and 3: a row with no allowed key gets O = 0 and LSE = -inf, never
// NaN, and contributes nothing to the backward (dQ row 0, no NaN anywhere).
//   1. Dilated: rows no branch selects (one branch (6, 3), mod mode: head h selects rows with
//      (p - s0) mod 3 == h mod 3; the others are empty).
//   2. Dense causal with Nq > Nk: row i keeps j <= i + (Nk - Nq), so rows i < Nq - Nk are empty.
#include <cmath>

#include "../common/attention_run.h"

using namespace harness;

namespace {

void check_rows(const AttentionCase& c, uint64_t seed, bool (*empty)(int64_t h, int64_t i)) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, seed, 1.0);
  const Forward r = run_forward(c, in, DILATTN_BACKEND_REF);
  const Gradients g = run_backward(c, in, r, DILATTN_BACKEND_REF);
  int empties = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Nq; ++i) {
        const double lse = r.lse.at(b, h, i, 0);
        CHECK(!std::isnan(lse));
        if (empty(h, i)) {
          ++empties;
          CHECK_NEAR(lse, -INFINITY, 0.0);
          for (int64_t d = 0; d < c.D; ++d) {
            CHECK_NEAR(r.o.at(b, i, h, d), 0.0, 0.0);
            CHECK_NEAR(g.dq.at(b, i, h, d), 0.0, 0.0);
          }
        } else {
          CHECK(std::isfinite(lse));
        }
      }
  CHECK(empties > 0);  // the case does exercise empty rows
  for (const Tensor* x : {&r.o, &g.dq, &g.dk, &g.dv})
    for (double e : x->values()) CHECK(std::isfinite(e));
}

}  // namespace

int main() {
  AttentionCase dil;
  dil.dtype = DILATTN_F64;
  dil.B = 2; dil.Nq = dil.Nk = 8; dil.H = 3; dil.Hkv = 3; dil.D = 4;
  dil.kind = DILATTN_KIND_DILATED;
  dil.segments = {6};  // segments [0, 6) and the partial [6, 8)
  dil.dilations = {3};
  for (bool causal : {false, true}) {
    dil.causal = causal;
    dil.name = causal ? "dilated_unselected_rows_causal" : "dilated_unselected_rows";
    check_rows(dil, 51, [](int64_t h, int64_t i) { return (i % 6) % 3 != h % 3; });
  }

  AttentionCase dense;
  dense.name = "dense_causal_nq_gt_nk";
  dense.dtype = DILATTN_F64;
  dense.B = 1; dense.Nq = 7; dense.Nk = 3; dense.H = 2; dense.Hkv = 1; dense.D = 5;
  dense.causal = true;  // rows 0..3 keep j <= i - 4 < 0: empty; rows 4..6 see keys 0..i-4
  check_rows(dense, 52, [](int64_t, int64_t i) { return i < 4; });
  return finish("empty_rows_give_zero_and_neg_inf");
}
