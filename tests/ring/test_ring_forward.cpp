// test_ring_forward.cpp - SPEC 5: every rank's O and LSE equal the matching rows of the
// single-device reference, for dense, causal, GQA, dilated (mod/block/groups, segments shorter
// and longer than a shard) and block-sparse attention, P = 1..4, contiguous and zigzag splits,
// uneven N and ranks without rows.
//   ring_f64_ref_equals_reference: sub-problems on the f64 reference; only the merge's rounding
//     differs from one softmax, so the bound is 1e-12 (not SPEC 8's f32 bound).
//   ring_f32_cpu_within_spec8: sub-problems on the cpu backend, SPEC 8's f32 tolerances
//     against the reference on the same f32 inputs.
#include "ring_checks.h"

using namespace harness;

int main() {
  ringtest::check_forward_cases(DILATTN_F64, ringtest::rings(1, 4, DILATTN_BACKEND_REF), {1e-13, 1e-12},
                      {1e-12, 0});
  ringtest::check_forward_cases(DILATTN_F32, ringtest::rings(1, 4, DILATTN_BACKEND_CPU),
                      spec8::of(DILATTN_F32), spec8::lse());
  return finish("ring_forward_matches_reference");
}
