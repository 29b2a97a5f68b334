// test_cpu_dilation_near_int64_max.cpp - property: dilated plans whose segment length and
// dilation are near INT64_MAX (valid by SPEC 3: 1 <= r <= w, a segment longer than N is clipped)
// run without signed overflow (this test is meant to be run under UBSan too, as CI does) and
// equal the f64 reference, forward and backward. With r >= N each head sees only the one
// position its offset selects in each segment.
#include <cstdint>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

int main() {
  const int64_t kMax = INT64_MAX;
  struct Config {
    const char* name;
    std::vector<int64_t> w, r;
    dilattn_head_mode mode;
    bool causal;
  };
  const Config configs[] = {
      {"w_r_int64_max_mod", {kMax}, {kMax}, DILATTN_HEADS_MOD, false},
      {"w_r_int64_max_block_causal", {kMax}, {kMax}, DILATTN_HEADS_BLOCK, true},
      {"w_max_r_huge_groups", {kMax, 70}, {kMax - 1, 3}, DILATTN_HEADS_GROUPS, true},
      {"w_huge_r_half_max_with_dense_branch", {kMax - 5, 300}, {kMax / 2, 1}, DILATTN_HEADS_MOD,
       false},
  };
  for (const Config& cfg : configs) {
    AttentionCase c;
    c.name = cfg.name;
    c.kind = DILATTN_KIND_DILATED;
    c.Nq = c.Nk = 300; c.H = 4; c.Hkv = 2; c.D = 16;
    c.segments = cfg.w; c.dilations = cfg.r; c.head_mode = cfg.mode; c.causal = cfg.causal;
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 5, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, 2);
    CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
    CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
    const Gradients gwant = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
    const Gradients ggot = run_backward(c, in, want, DILATTN_BACKEND_CPU, 2);
    CHECK_CLOSE("dQ", ggot.dq, gwant.dq, spec8::of(c.dtype));
    CHECK_CLOSE("dK", ggot.dk, gwant.dk, spec8::of(c.dtype));
    CHECK_CLOSE("dV", ggot.dv, gwant.dv, spec8::of(c.dtype));
  }
  return finish("cpu_dilation_near_int64_max_matches_reference");
}
