// test_gqa_equals_repeated_kv.cpp - SPEC 1 and 6: grouped-query attention (H query heads over
// Hkv kv heads, head h reads kv head h / (H / Hkv)) equals multi-head attention on K and V with
// each kv head repeated H / Hkv times; dK and dV of GQA equal the repeated gradients summed over
// each group. Checked for dense, causal and dilated (block mode) attention.
#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

// K/V [B, N, Hkv, D] -> [B, N, H, D] with kv head g copied to query heads g*G .. g*G + G - 1.
Tensor repeat_heads(const AttentionCase& gqa, const Tensor& x) {
  const int64_t G = gqa.H / gqa.Hkv;
  Tensor out(DILATTN_F64, gqa.B, gqa.Nk, gqa.H, gqa.D);
  for (int64_t b = 0; b < gqa.B; ++b)
    for (int64_t n = 0; n < gqa.Nk; ++n)
      for (int64_t h = 0; h < gqa.H; ++h)
        for (int64_t d = 0; d < gqa.D; ++d) out.set(b, n, h, d, x.at(b, n, h / G, d));
  return out;
}

// The inverse for gradients: sum the H repeated heads of each group back into one kv head.
std::vector<double> sum_heads(const AttentionCase& gqa, const Tensor& x) {
  const int64_t G = gqa.H / gqa.Hkv;
  Tensor out = gqa.kv_like(DILATTN_F64);  // zeros
  for (int64_t b = 0; b < gqa.B; ++b)
    for (int64_t n = 0; n < gqa.Nk; ++n)
      for (int64_t h = 0; h < gqa.H; ++h)
        for (int64_t d = 0; d < gqa.D; ++d)
          out.set(b, n, h / G, d, out.at(b, n, h / G, d) + x.at(b, n, h, d));
  return out.values();
}

void check(AttentionCase gqa, const char* name, uint64_t seed) {
  gqa.name = name;
  CaseScope scope(name);
  AttentionCase mha = gqa;
  mha.Hkv = gqa.H;
  const Inputs in = make_inputs(gqa, seed, 1.0);
  const Inputs rep{in.q, repeat_heads(gqa, in.k), repeat_heads(gqa, in.v), in.d_o};
  const double kTol = 1e-12;  // identical arithmetic up to the order of the dK/dV group sums
  const Forward a = run_forward(gqa, in, DILATTN_BACKEND_REF);
  const Forward b = run_forward(mha, rep, DILATTN_BACKEND_REF);
  CHECK_MAX_ABS_DIFF("O", a.o, b.o, kTol);
  CHECK_MAX_ABS_DIFF("LSE", a.lse, b.lse, kTol);

  const Gradients ga = run_backward(gqa, in, a, DILATTN_BACKEND_REF);
  const Gradients gb = run_backward(mha, rep, b, DILATTN_BACKEND_REF);
  CHECK_MAX_ABS_DIFF("dQ", ga.dq, gb.dq, kTol);
  CHECK_MAX_ABS_DIFF("dK", ga.dk.values(), sum_heads(gqa, gb.dk), kTol);
  CHECK_MAX_ABS_DIFF("dV", ga.dv.values(), sum_heads(gqa, gb.dv), kTol);
}

}  // namespace

int main() {
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.B = 2; c.Nq = 5; c.Nk = 9; c.H = 6; c.Hkv = 2; c.D = 3;
  check(c, "dense_nq_ne_nk", 11);
  c.causal = true;
  check(c, "dense_causal_bottom_right", 12);
  c.Nq = c.Nk = 10;
  c.H = 6; c.Hkv = 3;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {4, 10};
  c.dilations = {2, 3};
  c.head_mode = DILATTN_HEADS_BLOCK;
  check(c, "dilated_block_causal", 13);
  c.causal = false;
  c.Hkv = 1;
  check(c, "dilated_block_one_kv_head", 14);
  return finish("gqa_equals_repeated_kv");
}
