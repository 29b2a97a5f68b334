// test_ring_forward.cpp - SPEC 5: every rank's O and LSE equal the matching rows of the
// single-device reference, for dense, causal, GQA, dilated (mod/block/groups, segments shorter
// and longer than a shard) and block-sparse attention, P = 1..4, contiguous and zigzag splits,
// uneven N and ranks without rows.
//   ring_f64_ref_equals_reference: sub-problems on the f64 reference; only the merge's rounding
//     differs from one softmax, so the bound is 1e-12 (not SPEC 8's f32 bound).
//   ring_f32_cpu_within_spec8: sub-problems on the cpu backend, SPEC 8's f32 tolerances
//     against the reference on the same f32 inputs.
#include "ring_test_util.h"

using namespace harness;

namespace {

void check_forward(dilattn_dtype dtype, dilattn_backend backend, Tolerance tol,
                   Tolerance lse_tol) {
  for (const AttentionCase& c : ringtest::ring_cases(dtype)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 7, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    for (int32_t P = 1; P <= 4; ++P)
      for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
        if (!ringtest::ring_supports(c, P)) continue;
        const ringtest::Ring ring{P, split, backend};
        const Forward got = ringtest::ring_forward(c, in, ring);
        CaseScope named(ringtest::label(c, ring));
        CHECK_CLOSE("O", got.o, want.o, tol);
        CHECK_CLOSE("LSE", got.lse, want.lse, lse_tol);
      }
  }
}

}  // namespace

int main() {
  check_forward(DILATTN_F64, DILATTN_BACKEND_REF, {1e-13, 1e-12}, {1e-12, 0});
  check_forward(DILATTN_F32, DILATTN_BACKEND_CPU, spec8::of(DILATTN_F32), spec8::lse());
  return finish("ring_forward_matches_reference");
}
