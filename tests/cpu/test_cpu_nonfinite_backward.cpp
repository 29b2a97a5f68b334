// test_cpu_nonfinite_backward.cpp - property: in the cpu backend's backward a NaN or an infinity
// in one row of Q, K, V or dO reaches exactly the rows and keys the index rules connect it to,
// as in the f64 reference (SPEC 13): a key a query row never sees gets nothing from
// that row, not even 0 x inf. For each case and each of NaN, +inf, -inf placed in one element
// of one row (of Q, K, V or dO; a row inside a causal tile's cut, so masked pairs exist next to
// it), the backward from the reference's forward must give dQ, dK, dV whose finite/nonfinite
// pattern equals the reference's exactly, and whose finite values are within SPEC 8 (SPEC 12
// for f64 inputs, computed in f64).
// Cases: dense causal N = 16 (row 3: keys 4..15 must stay finite), dense causal across tiles
// (N = 150, Nq < Nk), dense without a mask, block-sparse causal local:1 (keys 4..7), dilated
// causal (two passes) and dilated causal GQA with B x Hkv = 8 (the one pass); the dense causal
// across tiles, the block-sparse and both dilated cases again in f64, and all but the unmasked
// dense one in bf16. Runs once per
// instruction set (DILATTN_CPU_ISA, tests/cpu/meson.build); an instruction set this CPU lacks is
// a skip (exit 77), never a pass.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> all;
  AttentionCase small;
  small.name = "dense_causal_n16";
  small.Nq = small.Nk = 16; small.H = 1; small.Hkv = 1; small.D = 8; small.causal = true;
  all.push_back(small);

  AttentionCase wide = small;
  wide.name = "dense_causal_nq_lt_nk_tiles";
  wide.Nq = 150; wide.Nk = 170; wide.H = 2; wide.D = 40;
  all.push_back(wide);

  AttentionCase dense = small;
  dense.name = "dense";
  dense.causal = false; dense.Nq = dense.Nk = 70;
  all.push_back(dense);

  AttentionCase sparse = small;
  sparse.name = "sparse_local1_causal";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.mask.bq = sparse.mask.bk = 4;
  sparse.mask.pattern = "local:1";
  all.push_back(sparse);

  AttentionCase dilated;
  dilated.name = "dilated_causal";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.Nq = dilated.Nk = 200; dilated.H = 2; dilated.Hkv = 1; dilated.D = 16;
  dilated.segments = {64, 200}; dilated.dilations = {1, 2}; dilated.causal = true;
  all.push_back(dilated);

  AttentionCase one_pass = dilated;  // B x Hkv = 8: backward_one_pass (cpu_tile_loop.h)
  one_pass.name = "dilated_causal_gqa_one_pass";
  one_pass.B = 4; one_pass.H = 4; one_pass.Hkv = 2; one_pass.Nq = one_pass.Nk = 130;
  one_pass.segments = {32, 130};
  all.push_back(one_pass);

  for (const AttentionCase* c : {&wide, &sparse, &dilated, &one_pass}) {
    AttentionCase f64 = *c;
    f64.name += "_f64";
    f64.dtype = DILATTN_F64;
    all.push_back(f64);
  }
  // bf16: on avx512bf16 and bf16emu the pair products, whose pairs of keys or rows a masked
  // neighbour may share (cpu/cpu_pair_dot.h, pair_keep).
  for (const AttentionCase* c : {&small, &wide, &sparse, &dilated, &one_pass}) {
    AttentionCase bf16 = *c;
    bf16.name += "_bf16";
    bf16.dtype = DILATTN_BF16;
    all.push_back(bf16);
  }
  return all;
}

// The finite/nonfinite pattern exactly, the finite values within SPEC 8 (SPEC 12 for f64).
void check_gradient(const char* what, const Tensor& got, const Tensor& want, Tolerance tol) {
  int64_t pattern_misses = 0, value_misses = 0, nonfinite = 0;
  for (int64_t e = 0; e < want.count(); ++e) {
    const double g = got.flat(e), w = want.flat(e);
    nonfinite += std::isfinite(w) ? 0 : 1;
    if (std::isfinite(g) != std::isfinite(w)) {
      if (pattern_misses++ < 3)
        std::fprintf(stderr, "  %s%s = %g, reference %g\n", what,
                     index_text(e, want.view().shape).c_str(), g, w);
      continue;
    }
    if (std::isfinite(w) && !matches_reference(g, w, tol) && value_misses++ < 3)
      std::fprintf(stderr, "  %s%s = %.9g, reference %.9g\n", what,
                   index_text(e, want.view().shape).c_str(), g, w);
  }
  CHECK_MSG(pattern_misses == 0, "%s: %lld elements finite in one and not the other (%lld nonfinite in the reference)",
            what, static_cast<long long>(pattern_misses), static_cast<long long>(nonfinite));
  CHECK_MSG(value_misses == 0, "%s: %lld finite elements out of SPEC 8/12", what,
            static_cast<long long>(value_misses));
}

int64_t mixed_cases = 0;  // cases whose reference gradients are partly finite

void check(const AttentionCase& base, char tensor, double bad) {
  AttentionCase c = base;
  c.name += std::string(" ") + tensor + (std::isnan(bad) ? " NaN" : bad > 0 ? " +inf" : " -inf");
  CaseScope scope(c.name);
  Inputs in = make_inputs(c, 11, 1.0);
  // Row 3 (inside the first causal tile: later keys are masked for it) of batch 0, head 0,
  // element d = 3; for keys, the last kv head too.
  const int64_t row = 3;
  switch (tensor) {
    case 'q': in.q.set(0, row, 0, 3, bad); break;
    case 'k': in.k.set(0, row, c.Hkv - 1, 3, bad); break;
    case 'v': in.v.set(0, row, c.Hkv - 1, 3, bad); break;
    default: in.d_o.set(0, row, 0, 3, bad); break;
  }
  const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
  // Counted over all cases: those where the value reaches some gradient and leaves others
  // finite (what the rule is about). A value may reach nothing: in a row whose every score is
  // -inf (Q = -inf against positive K), the row is empty and has no term.
  int64_t finite = 0, total = 0;
  for (const Tensor* g : {&want.dq, &want.dk, &want.dv})
    for (int64_t e = 0; e < g->count(); ++e, ++total) finite += std::isfinite(g->flat(e)) ? 1 : 0;
  if (finite > 0 && finite < total) ++mixed_cases;
  const Gradients got = run_backward(c, in, fwd, DILATTN_BACKEND_CPU, 2);
  check_gradient("dQ", got.dq, want.dq, spec8::of(c.dtype));
  check_gradient("dK", got.dk, want.dk, spec8::of(c.dtype));
  check_gradient("dV", got.dv, want.dv, spec8::of(c.dtype));
}

// DILATTN_CPU_ISA names an instruction set this CPU lacks: every cpu plan is refused.
bool isa_unavailable() {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 1, 1, 4);
  dilattn_plan plan = nullptr;
  const dilattn_status s = dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU);
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  return s != DILATTN_SUCCESS;
}

}  // namespace

int main() {
  const char* isa = std::getenv("DILATTN_CPU_ISA");
  if (isa_unavailable()) {
    std::printf("DILATTN_CPU_ISA='%s': not available on this CPU (%s): skipped\n",
                isa == nullptr ? "" : isa, dilattn_last_error());
    return 77;
  }
  std::printf("instruction set: %s\n", dilattn_cpu_isa());
  const double nan = std::numeric_limits<double>::quiet_NaN(),
               inf = std::numeric_limits<double>::infinity();
  for (const AttentionCase& c : cases())
    for (char tensor : {'q', 'k', 'v', 'o'})
      for (double bad : {nan, inf, -inf}) check(c, tensor, bad);
  // Most cases keep some gradients finite (a dense case without a mask may not).
  CHECK_MSG(mixed_cases >= 40, "only %lld cases leave reference gradients partly finite",
            static_cast<long long>(mixed_cases));
  return finish("cpu_nonfinite_backward_matches_reference");
}
