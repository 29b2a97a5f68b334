// test_ring_backward.cpp - SPEC 5 + 6: every rank's dQ, dK and dV (dK/dV returned to their
// owner after travelling the ring) equal the matching rows of the single-device reference
// backward, for the cases of ring_test_util.h, P = 1..4, both splits; and SPEC 6 determinism:
// the ring's gradients are bitwise the same when one rank starts late (another schedule).
//   ring_f64_ref: sub-problems on the f64 reference, bound 1e-11 (rounding of the per-pair
//     sums only; gradients are O(1) here).
//   ring_f32_cpu: sub-problems on the cpu backend, SPEC 8's f32 tolerances.
#include <cstring>

#include "ring_test_util.h"

namespace {

void check_backward(dilattn_dtype dtype, dilattn_backend backend, cputest::Tolerance tol) {
  for (const ringtest::Case& c : ringtest::ring_cases(dtype)) {
    const cputest::Inputs in = cputest::make_inputs(c, 11);
    const cputest::ForwardOut fwd = cputest::run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    const cputest::Gradients want = cputest::run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
    for (int32_t P = 1; P <= 4; ++P)
      for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
        if (!ringtest::ring_supports(c, P)) continue;
        const ringtest::Ring ring{P, split, backend};
        const cputest::Gradients got = ringtest::ring_backward(c, in, fwd, ring);
        cputest::Case named = c;
        named.name = ringtest::label(c, ring);
        cputest::expect_close(named, "dQ", got.dq, want.dq, tol);
        cputest::expect_close(named, "dK", got.dk, want.dk, tol);
        cputest::expect_close(named, "dV", got.dv, want.dv, tol);
      }
  }
}

// ring_backward_bitwise_same_for_any_schedule
void check_schedule_independent() {
  for (const ringtest::Case& c : ringtest::ring_cases(DILATTN_F32)) {
    const cputest::Inputs in = cputest::make_inputs(c, 13);
    const cputest::ForwardOut fwd = cputest::run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    const ringtest::Ring ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_CPU};
    if (!ringtest::ring_supports(c, ring.P)) continue;
    const cputest::Gradients first = ringtest::ring_backward(c, in, fwd, ring);
    for (int32_t late = 0; late < ring.P; ++late) {
      const cputest::Gradients again = ringtest::ring_backward(c, in, fwd, ring, late);
      const bool same = first.dq.bytes == again.dq.bytes && first.dk.bytes == again.dk.bytes &&
                        first.dv.bytes == again.dv.bytes;
      if (!same) {
        std::fprintf(stderr, "FAILED [%s] gradients differ in bits when rank %d starts late\n",
                     c.name.c_str(), static_cast<int>(late));
        ++cputest::failure_count();
      }
    }
  }
}

}  // namespace

int main() {
  check_backward(DILATTN_F64, DILATTN_BACKEND_REF, {1e-11, 1e-11});
  check_backward(DILATTN_F32, DILATTN_BACKEND_CPU, cputest::tolerance_of(DILATTN_F32));
  check_schedule_independent();
  if (cputest::failure_count() == 0) std::printf("ring backward matches the reference\n");
  return cputest::failure_count() != 0;
}
