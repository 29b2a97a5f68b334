// test_cpu_backward.cpp - property: the cpu backend's dQ, dK, dV equal the f64 reference's
// within SPEC 8 on every case of standard_cases(), both run from the same O and LSE (the
// reference forward's, SPEC 6), with 2 threads. Every output element is poisoned first, so an
// element the backend forgets to write fails.
#include "cpu_test_util.h"

using namespace cputest;

int main() {
  for (const Case& c : standard_cases()) {
    const Inputs in = make_inputs(c, 2);
    const ForwardOut fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
    const Gradients got = run_backward(c, in, fwd, DILATTN_BACKEND_CPU, 2);
    const Tolerance tol = tolerance_of(c.dtype);
    expect_close(c, "dQ", got.dq, want.dq, tol);
    expect_close(c, "dK", got.dk, want.dk, tol);
    expect_close(c, "dV", got.dv, want.dv, tol);
  }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
