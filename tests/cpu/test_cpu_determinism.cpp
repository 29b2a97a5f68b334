// test_cpu_determinism.cpp - property: the cpu backend's backward is bitwise identical run after
// run and for 1, 2 and 7 threads (SPEC 6: no float atomics; every output row has one owner and
// one summation order). The forward is checked the same way. Cases have several work items per
// head (N above the 256-row block) so threads really split the work, and one has B x Hkv = 8
// (the one-pass backward, one item per (b, kv head)); each in f32 and in f64 (computed in f64,
// SPEC 12); no reference needed.
#include "../common/attention_run.h"

using namespace harness;

namespace {

void check_same_bytes(const char* what, int32_t threads, const Tensor& got, const Tensor& want) {
  CHECK_MSG(got.bytes() == want.bytes(), "%s with %d threads differs from 1 thread", what,
            threads);
}

}  // namespace

int main() {
  std::vector<AttentionCase> cases(4);
  cases[0].name = "dilated_mod_causal_gqa";
  cases[0].Nq = cases[0].Nk = 600; cases[0].H = 4; cases[0].Hkv = 2; cases[0].D = 40;
  cases[0].kind = DILATTN_KIND_DILATED; cases[0].segments = {128, 512, 600};
  cases[0].dilations = {1, 2, 2}; cases[0].head_mode = DILATTN_HEADS_MOD; cases[0].causal = true;
  cases[1].name = "dense_gqa";
  cases[1].B = 2; cases[1].Nq = 300; cases[1].Nk = 520; cases[1].H = 2; cases[1].Hkv = 1;
  cases[1].D = 72;
  cases[2].name = "sparse_per_head";
  cases[2].Nq = cases[2].Nk = 600; cases[2].H = 2; cases[2].Hkv = 1; cases[2].D = 64;
  cases[2].kind = DILATTN_KIND_BLOCK_SPARSE; cases[2].mask.heads = 2; cases[2].mask.density = 0.3;
  cases[2].causal = true;
  // B x Hkv = 8: the one-pass backward (cpu_tile_loop.h, backward_one_pass), 8 items.
  cases[3] = cases[0];
  cases[3].name = "dilated_mod_causal_gqa_one_pass";
  cases[3].B = 4;
  for (size_t x = 0; x < 4; ++x) {
    AttentionCase f64 = cases[x];
    f64.name += "_f64";
    f64.dtype = DILATTN_F64;
    cases.push_back(f64);
  }

  for (const AttentionCase& c : cases) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 3, 2.0);
    const Forward fwd1 = run_forward(c, in, DILATTN_BACKEND_CPU, 1);
    const Gradients g1 = run_backward(c, in, fwd1, DILATTN_BACKEND_CPU, 1);
    for (int32_t threads : {1, 2, 7}) {
      const Forward fwd = run_forward(c, in, DILATTN_BACKEND_CPU, threads);
      check_same_bytes("O", threads, fwd.o, fwd1.o);
      check_same_bytes("LSE", threads, fwd.lse, fwd1.lse);
      const Gradients g = run_backward(c, in, fwd1, DILATTN_BACKEND_CPU, threads);
      check_same_bytes("dQ", threads, g.dq, g1.dq);
      check_same_bytes("dK", threads, g.dk, g1.dk);
      check_same_bytes("dV", threads, g.dv, g1.dv);
    }
  }
  return finish("cpu_bitwise_identical_across_threads");
}
