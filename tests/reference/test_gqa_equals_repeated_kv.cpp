// test_gqa_equals_repeated_kv.cpp - SPEC 1 and 6: grouped-query attention (H query heads over
// Hkv kv heads, head h reads kv head h / (H / Hkv)) equals multi-head attention on K and V with
// each kv head repeated H / Hkv times; dK and dV of GQA equal the repeated gradients summed over
// each group. Checked for dense, causal and dilated (block mode) attention.
#include "attention_runner.h"

namespace {

// K/V [B, N, Hkv, D] -> [B, N, H, D] with kv head g copied to query heads g*G .. g*G + G - 1.
std::vector<double> repeat_heads(const runner::Config& gqa, const std::vector<double>& x) {
  const int64_t G = gqa.H / gqa.Hkv;
  std::vector<double> out;
  for (int64_t b = 0; b < gqa.B; ++b)
    for (int64_t n = 0; n < gqa.Nk; ++n)
      for (int64_t h = 0; h < gqa.H; ++h)
        for (int64_t d = 0; d < gqa.D; ++d) out.push_back(x[gqa.ki(b, n, h / G, d)]);
  return out;
}

// The inverse for gradients: sum the H repeated heads of each group back into one kv head.
std::vector<double> sum_heads(const runner::Config& gqa, const std::vector<double>& x) {
  const int64_t G = gqa.H / gqa.Hkv;
  std::vector<double> out(gqa.kv_size(), 0.0);
  size_t e = 0;
  for (int64_t b = 0; b < gqa.B; ++b)
    for (int64_t n = 0; n < gqa.Nk; ++n)
      for (int64_t h = 0; h < gqa.H; ++h)
        for (int64_t d = 0; d < gqa.D; ++d) out[gqa.ki(b, n, h / G, d)] += x[e++];
  return out;
}

void check(runner::Config gqa, uint64_t seed) {
  runner::Config mha = gqa;
  mha.Hkv = gqa.H;
  const runner::Inputs in = runner::random_inputs(gqa, seed);
  const runner::Inputs rep{in.q, repeat_heads(gqa, in.k), repeat_heads(gqa, in.v)};
  const double kTol = 1e-12;  // identical arithmetic up to the order of the dK/dV group sums
  const runner::Outputs a = runner::forward(gqa, in), b = runner::forward(mha, rep);
  EXPECT_TRUE(runner::max_abs_diff(a.o, b.o) <= kTol);
  EXPECT_TRUE(runner::max_abs_diff(a.lse, b.lse) <= kTol);

  std::mt19937_64 rng(seed + 1000);
  const std::vector<double> d_o = runner::random_vector(gqa.q_size(), rng);
  const runner::Gradients ga = runner::backward(gqa, in, d_o), gb = runner::backward(mha, rep, d_o);
  EXPECT_TRUE(runner::max_abs_diff(ga.dq, gb.dq) <= kTol);
  EXPECT_TRUE(runner::max_abs_diff(ga.dk, sum_heads(gqa, gb.dk)) <= kTol);
  EXPECT_TRUE(runner::max_abs_diff(ga.dv, sum_heads(gqa, gb.dv)) <= kTol);
}

}  // namespace

int main() {
  runner::Config c;
  c.B = 2; c.Nq = 5; c.Nk = 9; c.H = 6; c.Hkv = 2; c.D = 3;
  check(c, 11);  // dense, Nq != Nk
  c.causal = true;
  check(c, 12);  // causal bottom-right
  c.Nq = c.Nk = 10;
  c.H = 6; c.Hkv = 3;
  c.segments = {4, 10};
  c.dilations = {2, 3};
  c.mode = DILATTN_HEADS_BLOCK;
  check(c, 13);  // dilated, causal
  c.causal = false;
  c.Hkv = 1;
  check(c, 14);  // dilated, all heads on one kv head
  if (runner::failures() == 0) std::printf("GQA equals repeated K/V: pass\n");
  return runner::failures() != 0;
}
