// test_cpu_dilation_near_int64_max.cpp - property: dilated plans whose segment length and
// dilation are near INT64_MAX (valid by SPEC 3: 1 <= r <= w, a segment longer than N is clipped)
// run without signed overflow (this test is meant to be run under UBSan too, as CI does) and
// equal the f64 reference, forward and backward. With r >= N each head sees only the one
// position its offset selects in each segment.
#include <cstdint>

#include "cpu_test_util.h"

using namespace cputest;

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
    Case c;
    c.name = cfg.name;
    c.kind = DILATTN_KIND_DILATED;
    c.Nq = c.Nk = 300; c.H = 4; c.Hkv = 2; c.D = 16;
    c.segments = cfg.w; c.dilations = cfg.r; c.mode = cfg.mode; c.causal = cfg.causal;
    const Inputs in = make_inputs(c, 5);
    const ForwardOut want = run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    const ForwardOut got = run_forward(c, in, DILATTN_BACKEND_CPU, 2, DILATTN_F32);
    expect_close(c, "O", got.o, want.o, tolerance_of(c.dtype));
    expect_close(c, "LSE", got.lse, want.lse, Tolerance{spec8::kLseAtol, 0});
    const Gradients gwant = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
    const Gradients ggot = run_backward(c, in, want, DILATTN_BACKEND_CPU, 2);
    expect_close(c, "dQ", ggot.dq, gwant.dq, tolerance_of(c.dtype));
    expect_close(c, "dK", ggot.dk, gwant.dk, tolerance_of(c.dtype));
    expect_close(c, "dV", ggot.dv, gwant.dv, tolerance_of(c.dtype));
  }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
