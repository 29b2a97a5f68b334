// ring_checks.h - the ring's agreement with the single-device reference over every case of
// ring_cases(), for a list of rings (P, split, backend, where the ranks run). Shared by the
// threads tests (test_ring_forward.cpp, test_ring_backward.cpp: P = 1..4) and the MPI tests
// (tests/ring/mpi/: P = the MPI world size), so both transports pass the same checks.
#ifndef DILATTN_TESTS_RING_CHECKS_H
#define DILATTN_TESTS_RING_CHECKS_H

#include <vector>

#include "ring_test_util.h"

namespace ringtest {

// Every P in [p_min, p_max], both splits, on `backend`, ranks on `host` (nullptr: threads).
inline std::vector<Ring> rings(int32_t p_min, int32_t p_max, dilattn_backend backend,
                               const RankHost* host = nullptr) {
  std::vector<Ring> out;
  for (int32_t P = p_min; P <= p_max; ++P)
    for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
      Ring ring{P, split, backend};
      ring.host = host;
      out.push_back(ring);
    }
  return out;
}

// O and LSE of every case on every ring against the reference's (SPEC 5, 8).
inline void check_forward_cases(dilattn_dtype dtype, const std::vector<Ring>& on,
                                harness::Tolerance tol, harness::Tolerance lse_tol) {
  using namespace harness;
  for (const AttentionCase& c : ring_cases(dtype)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 7, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    for (const Ring& ring : on) {
      if (!ring_supports(c, ring.P)) continue;
      const Forward got = ring_forward(c, in, ring);
      CaseScope named(label(c, ring));
      CHECK_CLOSE("O", got.o, want.o, tol);
      CHECK_CLOSE("LSE", got.lse, want.lse, lse_tol);
    }
  }
}

// dQ, dK and dV of every case on every ring against the reference backward (SPEC 5, 6, 8).
inline void check_backward_cases(dilattn_dtype dtype, const std::vector<Ring>& on,
                                 harness::Tolerance tol) {
  using namespace harness;
  for (const AttentionCase& c : ring_cases(dtype)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 11, 2.0);
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
    for (const Ring& ring : on) {
      if (!ring_supports(c, ring.P)) continue;
      const Gradients got = ring_backward(c, in, fwd, ring);
      CaseScope named(label(c, ring));
      CHECK_CLOSE("dQ", got.dq, want.dq, tol);
      CHECK_CLOSE("dK", got.dk, want.dk, tol);
      CHECK_CLOSE("dV", got.dv, want.dv, tol);
    }
  }
}

}  // namespace ringtest

#endif  // DILATTN_TESTS_RING_CHECKS_H
