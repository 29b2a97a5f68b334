// test_causal_row0_returns_v0.cpp - SPEC 2: with Nq == Nk and causal, row 0 sees key 0 alone, so
// O_0 = v_0 exactly (weight exp(S - LSE) = exp(0) = 1) and LSE_0 = scale <q_0, k_0>, for every
// batch and head (GQA included). The same holds for a dilated branch whose offset is 0.
#include <cmath>

#include "../common/attention_run.h"

using namespace harness;

namespace {

void check(const AttentionCase& c, uint64_t seed) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, seed, 1.0);
  const Forward r = run_forward(c, in, DILATTN_BACKEND_REF);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  const int64_t G = c.H / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      double s = 0;
      for (int64_t d = 0; d < c.D; ++d) {
        CHECK_NEAR(r.o.at(b, 0, h, d), in.v.at(b, 0, h / G, d), 0.0);  // exact: 1 * v
        s += in.q.at(b, 0, h, d) * in.k.at(b, 0, h / G, d);
      }
      CHECK_NEAR(r.lse.at(b, h, 0, 0), scale * s, 1e-15);
    }
}

}  // namespace

int main() {
  AttentionCase c;
  c.name = "dense_causal_gqa";
  c.dtype = DILATTN_F64;
  c.B = 2; c.Nq = c.Nk = 6; c.H = 4; c.Hkv = 2; c.D = 7;
  c.causal = true;
  check(c, 21);
  // Dilated, one branch (3, 1): r = 1 gives every head offset 0, row 0 starts segment [0, 3)
  // and, causal, sees key 0 alone: O_0 = v_0 again.
  c.name = "dilated_one_branch_causal";
  c.H = 2; c.Hkv = 1;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {3};
  c.dilations = {1};
  check(c, 22);
  return finish("causal_row0_returns_v0");
}
