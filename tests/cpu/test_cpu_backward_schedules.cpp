// test_cpu_backward_schedules.cpp - property: both schedules of the cpu backward (cpu_tile_loop.h,
// backward_one_pass: one pass per (b, kv head) when B x Hkv >= 8, else a dQ pass and a dK/dV
// pass) give dQ, dK, dV within SPEC 8 of the f64 reference, bitwise the same for 1, 2 and 3
// threads (SPEC 6), on the same per-head shapes: each case runs with B x Hkv = 4 (two passes)
// and 8 (one pass). Which schedule ran is seen in the plan's workspace query (cpu_workspace.h):
// the one pass adds its dK and dV accumulators of all Nk keys; the two passes need what the
// forward needs. The backward runs in a caller workspace of exactly the queried size, so a
// schedule that carves more than it asks for writes past a heap block (ASan in CI).
// Cases: N above one work item's block (several query blocks per head), keys across 64-key
// tiles, GQA, causal, dilated with several branches, per-head block-sparse, f16; dense and
// dilated again in f64 (computed in f64, SPEC 12's bound; the one pass's accumulators of
// doubles take twice the bytes).
#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

std::vector<AttentionCase> per_head_shapes() {
  std::vector<AttentionCase> cases(7);
  cases[0].name = "dense_causal_gqa_nq_lt_nk";
  cases[0].Nq = 300; cases[0].Nk = 330; cases[0].H = 4; cases[0].Hkv = 2; cases[0].D = 40;
  cases[0].causal = true;
  cases[1].name = "dilated_mod_causal_gqa";
  cases[1].Nq = cases[1].Nk = 600; cases[1].H = 4; cases[1].Hkv = 2; cases[1].D = 32;
  cases[1].kind = DILATTN_KIND_DILATED; cases[1].segments = {128, 512, 600};
  cases[1].dilations = {1, 2, 2}; cases[1].head_mode = DILATTN_HEADS_MOD; cases[1].causal = true;
  cases[2].name = "dilated_groups_one_kv_head";
  cases[2].Nq = cases[2].Nk = 300; cases[2].H = 3; cases[2].Hkv = 1; cases[2].D = 24;
  cases[2].kind = DILATTN_KIND_DILATED; cases[2].segments = {64, 150, 300};
  cases[2].dilations = {1, 3, 2}; cases[2].head_mode = DILATTN_HEADS_GROUPS;
  cases[3].name = "sparse_per_head_causal";
  cases[3].Nq = cases[3].Nk = 300; cases[3].H = 2; cases[3].Hkv = 2; cases[3].D = 64;
  cases[3].kind = DILATTN_KIND_BLOCK_SPARSE; cases[3].mask.heads = 2; cases[3].mask.density = 0.4;
  cases[3].causal = true;
  cases[4].name = "dense_f16_nq_gt_nk";
  cases[4].Nq = 270; cases[4].Nk = 200; cases[4].H = 2; cases[4].Hkv = 2; cases[4].D = 100;
  cases[4].dtype = DILATTN_F16;
  for (int x : {0, 1}) {
    cases[5 + x] = cases[x];
    cases[5 + x].name += "_f64";
    cases[5 + x].dtype = DILATTN_F64;
  }
  return cases;
}

// The case with B chosen so that B x Hkv = items.
AttentionCase with_items(AttentionCase c, int64_t items, const char* schedule) {
  c.B = items / c.Hkv;
  c.name += std::string("_") + schedule;
  return c;
}

bool runs_one_pass(const AttentionCase& c) {
  Plan plan;
  size_t forward_bytes = 0, backward_bytes = 0;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CPU, 2)) ||
      !CHECK_OK(dilattn_plan_workspace_size(plan.get(), &forward_bytes, &backward_bytes)))
    return false;
  return backward_bytes > forward_bytes;
}

void check_same_bytes(const char* what, int32_t threads, const Tensor& got, const Tensor& want) {
  CHECK_MSG(got.bytes() == want.bytes(), "%s with %d threads differs from 1 thread", what,
            threads);
}

}  // namespace

int main() {
  for (const AttentionCase& shape : per_head_shapes())
    for (const bool one_pass : {false, true}) {
      const AttentionCase c =
          with_items(shape, one_pass ? 8 : 4, one_pass ? "one_pass" : "two_pass");
      CaseScope scope(c.name);
      CHECK_MSG(runs_one_pass(c) == one_pass, "B x Hkv = %lld: expected the %s backward",
                static_cast<long long>(c.B * c.Hkv), one_pass ? "one-pass" : "two-pass");
      const Inputs in = make_inputs(c, 4, 2.0);
      const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
      const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
      const Gradients g1 = run_backward(c, in, fwd, DILATTN_BACKEND_CPU, 1, true);
      const Tolerance tol = spec8::of(c.dtype);
      CHECK_CLOSE("dQ", g1.dq, want.dq, tol);
      CHECK_CLOSE("dK", g1.dk, want.dk, tol);
      CHECK_CLOSE("dV", g1.dv, want.dv, tol);
      for (int32_t threads : {2, 3}) {
        const Gradients g = run_backward(c, in, fwd, DILATTN_BACKEND_CPU, threads, true);
        check_same_bytes("dQ", threads, g.dq, g1.dq);
        check_same_bytes("dK", threads, g.dk, g1.dk);
        check_same_bytes("dV", threads, g.dv, g1.dv);
      }
    }
  return finish("cpu_backward_both_schedules_match_reference");
}
