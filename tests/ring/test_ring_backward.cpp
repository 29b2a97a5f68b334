// test_ring_backward.cpp - SPEC 5 + 6: every rank's dQ, dK and dV (dK/dV returned to their
// owner after travelling the ring) equal the matching rows of the single-device reference
// backward, for the cases of ring_test_util.h, P = 1..4, both splits; and SPEC 6 determinism:
// the ring's gradients are bitwise the same when one rank starts late (another schedule).
//   ring_f64_ref: sub-problems on the f64 reference, bound 1e-11 (rounding of the per-pair
//     sums only; gradients are O(1) here).
//   ring_f32_cpu: sub-problems on the cpu backend, SPEC 8's f32 tolerances.
#include "ring_checks.h"

using namespace harness;

namespace {

// ring_backward_bitwise_same_for_any_schedule
void check_schedule_independent() {
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 13, 2.0);
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const ringtest::Ring ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_CPU};
    if (!ringtest::ring_supports(c, ring.P)) continue;
    const Gradients first = ringtest::ring_backward(c, in, fwd, ring);
    for (int32_t late = 0; late < ring.P; ++late) {
      const Gradients again = ringtest::ring_backward(c, in, fwd, ring, late);
      CHECK_MSG(first.dq.bytes() == again.dq.bytes(), "dQ differs in bits when rank %d starts late",
                static_cast<int>(late));
      CHECK_MSG(first.dk.bytes() == again.dk.bytes(), "dK differs in bits when rank %d starts late",
                static_cast<int>(late));
      CHECK_MSG(first.dv.bytes() == again.dv.bytes(), "dV differs in bits when rank %d starts late",
                static_cast<int>(late));
    }
  }
}

}  // namespace

int main() {
  ringtest::check_backward_cases(DILATTN_F64, ringtest::rings(1, 4, DILATTN_BACKEND_REF),
                                 {1e-11, 1e-11});
  ringtest::check_backward_cases(DILATTN_F32, ringtest::rings(1, 4, DILATTN_BACKEND_CPU),
                                 spec8::of(DILATTN_F32));
  check_schedule_independent();
  return finish("ring_backward_matches_reference");
}
