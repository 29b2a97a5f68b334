// test_ring_forward.cpp - SPEC 5: every rank's O and LSE equal the matching rows of the
// single-device reference, for dense, causal, GQA, dilated (mod/block/groups, segments shorter
// and longer than a shard) and block-sparse attention, P = 1..4, contiguous and zigzag splits,
// uneven N and ranks without rows.
//   ring_f64_ref_equals_reference: sub-problems on the f64 reference; only the merge's rounding
//     differs from one softmax, so the bound is 1e-12 (not SPEC 8's f32 bound).
//   ring_f32_cpu_within_spec8: sub-problems on the cpu backend, SPEC 8's f32 tolerances
//     against the reference on the same f32 inputs.
#include "ring_test_util.h"

namespace {

void check_forward(dilattn_dtype dtype, dilattn_backend backend, cputest::Tolerance tol,
                   double lse_atol) {
  for (const ringtest::Case& c : ringtest::ring_cases(dtype)) {
    const cputest::Inputs in = cputest::make_inputs(c, 7);
    const cputest::ForwardOut want = cputest::run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    for (int32_t P = 1; P <= 4; ++P)
      for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
        if (!ringtest::ring_supports(c, P)) continue;
        const ringtest::Ring ring{P, split, backend};
        const cputest::ForwardOut got = ringtest::ring_forward(c, in, ring);
        cputest::Case named = c;
        named.name = ringtest::label(c, ring);
        cputest::expect_close(named, "O", got.o, want.o, tol);
        cputest::expect_close(named, "LSE", got.lse, want.lse, {lse_atol, 0});
      }
  }
}

}  // namespace

int main() {
  check_forward(DILATTN_F64, DILATTN_BACKEND_REF, {1e-13, 1e-12}, 1e-12);
  check_forward(DILATTN_F32, DILATTN_BACKEND_CPU, cputest::tolerance_of(DILATTN_F32),
                spec8::kLseAtol);
  if (cputest::failure_count() == 0) std::printf("ring forward matches the reference\n");
  return cputest::failure_count() != 0;
}
