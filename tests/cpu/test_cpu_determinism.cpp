// test_cpu_determinism.cpp - property: the cpu backend's backward is bitwise identical run after
// run and for 1, 2 and 7 threads (SPEC 6: no float atomics; every output row has one owner and
// one summation order). The forward is checked the same way. Cases have several work items per
// head (N above the 256-row block) so threads really split the work; no reference needed.
#include <cstring>

#include "cpu_test_util.h"

using namespace cputest;

namespace {

bool same_bytes(const Buffer& a, const Buffer& b) {
  return a.bytes.size() == b.bytes.size() &&
         std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

void expect_same(const Case& c, const char* what, int32_t threads, const Buffer& got,
                 const Buffer& want) {
  if (!same_bytes(got, want)) {
    std::fprintf(stderr, "FAILED [%s] %s with %d threads differs from 1 thread\n",
                 c.name.c_str(), what, threads);
    ++failure_count();
  }
}

}  // namespace

int main() {
  std::vector<Case> cases(3);
  cases[0].name = "dilated_mod_causal_gqa";
  cases[0].Nq = cases[0].Nk = 600; cases[0].H = 4; cases[0].Hkv = 2; cases[0].D = 40;
  cases[0].kind = DILATTN_KIND_DILATED; cases[0].segments = {128, 512, 600};
  cases[0].dilations = {1, 2, 2}; cases[0].mode = DILATTN_HEADS_MOD; cases[0].causal = true;
  cases[1].name = "dense_gqa";
  cases[1].B = 2; cases[1].Nq = 300; cases[1].Nk = 520; cases[1].H = 2; cases[1].Hkv = 1;
  cases[1].D = 72;
  cases[2].name = "sparse_per_head";
  cases[2].Nq = cases[2].Nk = 600; cases[2].H = 2; cases[2].Hkv = 1; cases[2].D = 64;
  cases[2].kind = DILATTN_KIND_BLOCK_SPARSE; cases[2].mask_heads = 2; cases[2].density = 0.3;
  cases[2].causal = true;

  for (const Case& c : cases) {
    const Inputs in = make_inputs(c, 3);
    const ForwardOut fwd1 = run_forward(c, in, DILATTN_BACKEND_CPU, 1, DILATTN_F32);
    const Gradients g1 = run_backward(c, in, fwd1, DILATTN_BACKEND_CPU, 1);
    for (int32_t threads : {1, 2, 7}) {
      const ForwardOut fwd = run_forward(c, in, DILATTN_BACKEND_CPU, threads, DILATTN_F32);
      expect_same(c, "O", threads, fwd.o, fwd1.o);
      expect_same(c, "LSE", threads, fwd.lse, fwd1.lse);
      const Gradients g = run_backward(c, in, fwd1, DILATTN_BACKEND_CPU, threads);
      expect_same(c, "dQ", threads, g.dq, g1.dq);
      expect_same(c, "dK", threads, g.dk, g1.dk);
      expect_same(c, "dV", threads, g.dv, g1.dv);
    }
  }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
