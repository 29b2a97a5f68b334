// test_ring_nonfinite_backward.cpp - property: through the ring backward (SPEC 5, 6) a NaN or an
// infinity in one row of dO, Q, K or V reaches exactly the rows and keys the index rules connect
// it to, as in the single-device f64 reference (SPEC 13): the assembled dQ, dK, dV
// have the reference's finite/nonfinite pattern exactly and its finite values within SPEC 8.
// Dilated causal and dense causal cases, P = 2 and 3, both splits, on the cpu backend (whose
// sub-problems are cut by the causal rule) and the reference.
#include <cmath>
#include <limits>

#include "ring_test_util.h"

using namespace harness;

namespace {

void check_pattern(const char* what, const Tensor& got, const Tensor& want, Tolerance tol) {
  int64_t pattern_misses = 0, value_misses = 0;
  for (int64_t e = 0; e < want.count(); ++e) {
    const double g = got.flat(e), w = want.flat(e);
    if (std::isfinite(g) != std::isfinite(w)) {
      if (pattern_misses++ < 3)
        std::fprintf(stderr, "  %s%s = %g, reference %g\n", what,
                     index_text(e, want.view().shape).c_str(), g, w);
    } else if (std::isfinite(w) && !matches_reference(g, w, tol)) {
      if (value_misses++ < 3)
        std::fprintf(stderr, "  %s%s = %.9g, reference %.9g\n", what,
                     index_text(e, want.view().shape).c_str(), g, w);
    }
  }
  CHECK_MSG(pattern_misses == 0 && value_misses == 0,
            "%s: %lld elements finite in one and not the other, %lld finite ones out of SPEC 8",
            what, static_cast<long long>(pattern_misses), static_cast<long long>(value_misses));
}

}  // namespace

int main() {
  AttentionCase dilated;
  dilated.name = "dilated_causal";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 96; dilated.H = 2; dilated.Hkv = 1; dilated.D = 16;
  dilated.segments = {24, 96}; dilated.dilations = {1, 2}; dilated.causal = true;
  AttentionCase dense = dilated;
  dense.name = "dense_causal";
  dense.kind = DILATTN_KIND_DENSE;
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  for (const AttentionCase& c : {dilated, dense})
    for (char tensor : {'o', 'q', 'v'})
      for (double bad : {inf, nan}) {
        Inputs in = make_inputs(c, 21, 1.0);
        // Row 3 of head 0, element 3 (row 40 too: a later shard's row).
        for (int64_t row : {int64_t{3}, int64_t{40}}) {
          Tensor& t = tensor == 'q' ? in.q : tensor == 'v' ? in.v : in.d_o;
          t.set(0, row, 0, 3, bad);
        }
        const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
        const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
        for (dilattn_backend backend : {DILATTN_BACKEND_CPU, DILATTN_BACKEND_REF})
          for (int32_t P : {2, 3})
            for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
              const ringtest::Ring ring{P, split, backend, 60000};
              CaseScope scope(ringtest::label(c, ring) + " " + tensor +
                              (std::isnan(bad) ? " NaN" : " inf"));
              const Gradients got = ringtest::ring_backward(c, in, fwd, ring);
              check_pattern("dQ", got.dq, want.dq, spec8::of(c.dtype));
              check_pattern("dK", got.dk, want.dk, spec8::of(c.dtype));
              check_pattern("dV", got.dv, want.dv, spec8::of(c.dtype));
            }
      }
  return finish("ring_nonfinite_backward_matches_reference");
}
