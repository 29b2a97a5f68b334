// test_cpu_backward.cpp - property: the cpu backend's dQ, dK, dV equal the f64 reference's
// within SPEC 8 (SPEC 12 for f64 inputs) on every case of standard_cases(), both run from the
// same O and LSE (the reference forward's, SPEC 6), with 2 threads. Every output element is
// poisoned first, so an element the backend forgets to write fails. f64 cases also run the
// whole chain on the cpu backend (its own forward's O and f64 LSE into its backward), as an
// f64 user (a gradient check) does: still within SPEC 12 of the reference's.
#include "../common/attention_run.h"
#include "../common/compare.h"
#include "standard_cases.h"

using namespace harness;

int main() {
  for (const AttentionCase& c : cpucases::standard_cases()) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 2, 2.0);
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
    const Gradients got = run_backward(c, in, fwd, DILATTN_BACKEND_CPU, 2);
    const Tolerance tol = spec8::of(c.dtype);
    CHECK_CLOSE("dQ", got.dq, want.dq, tol);
    CHECK_CLOSE("dK", got.dk, want.dk, tol);
    CHECK_CLOSE("dV", got.dv, want.dv, tol);
    if (c.dtype != DILATTN_F64) continue;
    const Forward own = run_forward(c, in, DILATTN_BACKEND_CPU, 2);
    const Gradients chain = run_backward(c, in, own, DILATTN_BACKEND_CPU, 2);
    CHECK_CLOSE("dQ (cpu forward)", chain.dq, want.dq, tol);
    CHECK_CLOSE("dK (cpu forward)", chain.dk, want.dk, tol);
    CHECK_CLOSE("dV (cpu forward)", chain.dv, want.dv, tol);
  }
  return finish("cpu_backward_matches_reference");
}
