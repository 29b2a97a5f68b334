// test_sparse_cpu.cpp - the cpu backend's block-sparse forward and backward against the f64
// reference (SPEC 4, 6, 8), through the public C ABI: random per-head and shared masks (from
// dilattn_mask_random, keeping the blocks the causal rule then empties), causal and not, GQA,
// N not a multiple of the block size, Nq != Nk, a full and an empty mask. Each backend's
// backward runs from its own forward. Tolerances: SPEC 8 f32 (LSE 1e-4 absolute).
// Exits 77 (meson: SKIP, not a pass) when this build has no cpu backend.
#include <string>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

struct Shape {
  int64_t B, Nq, Nk, H, Hkv, D, bq, bk, mask_heads;
  double density;
  bool causal;
};

void run_case(const Shape& s, uint64_t seed) {
  AttentionCase c;
  c.B = s.B; c.Nq = s.Nq; c.Nk = s.Nk; c.H = s.H; c.Hkv = s.Hkv; c.D = s.D;
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.mask.bq = s.bq; c.mask.bk = s.bk; c.mask.heads = s.mask_heads; c.mask.density = s.density;
  c.mask.seed = seed;
  c.mask.random_drops_causal_blocks = false;
  c.causal = s.causal;
  c.name = "B=" + std::to_string(s.B) + " Nq=" + std::to_string(s.Nq) + " Nk=" +
           std::to_string(s.Nk) + " H=" + std::to_string(s.H) + " Hkv=" + std::to_string(s.Hkv) +
           " bq=" + std::to_string(s.bq) + " bk=" + std::to_string(s.bk) +
           " density=" + std::to_string(s.density) + (s.causal ? " causal" : "");
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, seed, 2.0);
  const Inputs in64 = widened_to_f64(in);
  const Forward ref = run_forward(c, in64, DILATTN_BACKEND_REF);
  const Gradients gref = run_backward(c, in64, ref, DILATTN_BACKEND_REF);
  const Forward cpu = run_forward(c, in, DILATTN_BACKEND_CPU);
  const Gradients gcpu = run_backward(c, in, cpu, DILATTN_BACKEND_CPU);
  CHECK_CLOSE("O", cpu.o, ref.o, spec8::of(DILATTN_F32));
  CHECK_CLOSE("LSE", cpu.lse, ref.lse, spec8::lse());
  CHECK_CLOSE("dQ", gcpu.dq, gref.dq, spec8::of(DILATTN_F32));
  CHECK_CLOSE("dK", gcpu.dk, gref.dk, spec8::of(DILATTN_F32));
  CHECK_CLOSE("dV", gcpu.dv, gref.dv, spec8::of(DILATTN_F32));
}

}  // namespace

int main() {
  if (!dilattn_backend_available(DILATTN_BACKEND_CPU))
    return skip("the cpu backend is not in this build");
  const Shape shapes[] = {
      {1, 64, 64, 2, 2, 16, 16, 16, 1, 0.4, false}, {1, 64, 64, 2, 2, 16, 16, 16, 1, 0.4, true},
      {2, 77, 77, 4, 2, 32, 16, 16, 4, 0.3, true},  {1, 50, 90, 4, 1, 8, 8, 16, 4, 0.5, true},
      {1, 90, 50, 2, 1, 8, 16, 8, 1, 0.5, true},    {2, 100, 100, 3, 3, 64, 64, 64, 3, 0.6, false},
      {1, 33, 33, 2, 1, 4, 4, 4, 2, 1.0, false},    {1, 33, 33, 2, 1, 4, 4, 4, 2, 0.0, true}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) run_case(s, seed++);
  return finish("sparse_cpu");
}
