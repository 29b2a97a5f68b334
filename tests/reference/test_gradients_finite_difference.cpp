// test_gradients_finite_difference.cpp - SPEC 6: the reference backward is the exact gradient of
// the reference forward. With loss L = sum(dO * O), dL/dx for every element x of Q, K and V is
// compared with the central difference (L(x + h) - L(x - h)) / (2h), all in f64.
//
// Tolerance: with h = 1e-6 the truncation error is O(h^2 |L'''|) ~ 1e-12 and the rounding
// error ~ eps |L| / h ~ 2e-16 * 10 / 1e-6 = 2e-9, so |fd - grad| <= 1e-6 (1 + |grad|) leaves a
// 500x margin yet catches any wrong term (a missing factor or term is O(0.01 .. 1)).
// Cases: dense, causal with Nq != Nk, GQA, and dilated in each head mode with partial segments;
// then SPEC 10.1's window, softcap and ALiBi (alone and together) on dense, GQA, dilated and
// block-sparse plans. The softcap cases use scale 2 so that tanh is well into its curve: a
// missing 1 - tanh^2 factor is then far outside the tolerance. Last, SPEC 10.2's packed
// batches with each kind and the variants.
#include <cmath>
#include <cstdio>

#include "../common/attention_run.h"

using namespace harness;

namespace {

double loss(const AttentionCase& c, const Inputs& in) {
  const Forward r = run_forward(c, in, DILATTN_BACKEND_REF);
  double l = 0;
  for (int64_t e = 0; e < in.d_o.count(); ++e) l += in.d_o.flat(e) * r.o.flat(e);
  return l;
}

void check(const AttentionCase& c, uint64_t seed) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, seed, 1.0);
  const Gradients g = run_backward(c, in, run_forward(c, in, DILATTN_BACKEND_REF),
                                   DILATTN_BACKEND_REF);
  const double h = 1e-6;
  double worst = 0;
  struct Pair { Tensor Inputs::*x; const Tensor* grad; };
  for (const Pair& p : {Pair{&Inputs::q, &g.dq}, Pair{&Inputs::k, &g.dk}, Pair{&Inputs::v, &g.dv}})
    for (int64_t e = 0; e < (in.*p.x).count(); ++e) {
      Inputs plus = in, minus = in;
      (plus.*p.x).set_flat(e, (in.*p.x).flat(e) + h);
      (minus.*p.x).set_flat(e, (in.*p.x).flat(e) - h);
      const double fd = (loss(c, plus) - loss(c, minus)) / (2 * h);
      const double an = p.grad->flat(e);
      CHECK_NEAR(an, fd, 1e-6 * (1 + std::fabs(an)));
      worst = std::fmax(worst, std::fabs(an - fd));
    }
  std::printf("%-28s max |grad - central difference| = %.2e\n", c.name.c_str(), worst);
}

}  // namespace

int main() {
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.B = 1; c.Nq = c.Nk = 6; c.H = 2; c.Hkv = 2; c.D = 3;
  c.name = "dense";
  check(c, 61);
  c.causal = true;
  c.Nq = 5; c.Nk = 7;
  c.name = "causal, Nq=5 Nk=7";
  check(c, 62);
  c.causal = false;
  c.Nq = c.Nk = 6; c.H = 4; c.Hkv = 2;
  c.name = "GQA H=4 Hkv=2";
  check(c, 63);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {4, 6};  // (4, 2): segments [0,4) [4,6); (6, 3): one segment
  c.dilations = {2, 3};
  c.H = 3; c.Hkv = 1;   // H % r != 0: block mode offsets floor(h / ceil(3 / r))
  c.causal = true;
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS};
  const char* names[] = {"dilated mod, causal", "dilated block, causal", "dilated groups, causal"};
  for (int m = 0; m < 3; ++m) {
    c.head_mode = modes[m];
    c.name = names[m];
    check(c, 64 + static_cast<uint64_t>(m));
  }
  c.causal = false;
  c.head_mode = DILATTN_HEADS_MOD;
  c.name = "dilated mod, not causal";
  check(c, 70);

  // SPEC 10.1 variants.
  AttentionCase w;
  w.dtype = DILATTN_F64;
  w.B = 2; w.Nq = 5; w.Nk = 7; w.H = 2; w.Hkv = 1; w.D = 3;
  w.window_left = 2; w.window_right = 1;
  w.name = "window, Nq=5 Nk=7, GQA";
  check(w, 71);
  w.window_left = w.window_right = -1;
  w.softcap = 0.6; w.scale = 2;
  w.name = "softcap 0.6, scale 2";
  check(w, 72);
  w.softcap = 0; w.scale = 0;
  w.alibi_slopes = {0.3, 0.7, 0.1, 0.5};  // [B][H]
  w.name = "ALiBi per batch and head";
  check(w, 73);
  w.window_left = 1; w.window_right = 2; w.softcap = 0.8; w.scale = 2; w.causal = true;
  w.alibi_slopes = {0.4, 0.2};  // per head
  w.name = "all three, causal";
  check(w, 74);
  w.kind = DILATTN_KIND_DILATED;
  w.Nq = w.Nk = 7; w.H = 3; w.B = 1;
  w.segments = {4, 7}; w.dilations = {2, 3};
  w.head_mode = DILATTN_HEADS_GROUPS; w.causal = false;
  w.alibi_slopes = {0.4, 0.2, 0.9};
  w.name = "all three, dilated groups";
  check(w, 75);
  w.kind = DILATTN_KIND_BLOCK_SPARSE;
  w.Nq = 6; w.Nk = 8; w.H = 2;
  w.mask.bq = 2; w.mask.bk = 3; w.mask.pattern = "local:1+sink:1";
  w.alibi_slopes = {0.4, 0.2};
  w.name = "all three, block-sparse";
  check(w, 76);

  // SPEC 10.2 packed batches: an empty sequence, a sequence with no key, Nq != Nk per
  // sequence (causal bottom-right in each), GQA; then every variant with slopes per sequence,
  // dilated with segments restarting per sequence, and a block-sparse mask over the packed
  // tensor.
  AttentionCase pk;
  pk.dtype = DILATTN_F64;
  pk.B = 1; pk.H = 2; pk.Hkv = 1; pk.D = 3;
  pk.cu_seqlens_q = {0, 3, 3, 5, 9};
  pk.cu_seqlens_k = {0, 4, 6, 6, 8};
  pk.Nq = 9; pk.Nk = 8; pk.causal = true;
  pk.name = "packed, causal, GQA";
  check(pk, 81);
  pk.causal = false;
  pk.window_left = 1; pk.window_right = 1; pk.softcap = 0.8; pk.scale = 2;
  pk.alibi_slopes = {0.3, 0.7, 0.1, 0.5, 0.2, 0.6, 0.4, 0.9};  // [4 sequences][H]
  pk.name = "packed, all three";
  check(pk, 82);
  pk.window_left = pk.window_right = -1; pk.softcap = 0; pk.scale = 0;
  pk.alibi_slopes.clear();
  pk.kind = DILATTN_KIND_DILATED;
  pk.cu_seqlens_q = pk.cu_seqlens_k = {0, 5, 5, 12};
  pk.Nq = pk.Nk = 12; pk.H = 3; pk.causal = true;
  pk.segments = {4, 7}; pk.dilations = {2, 3};
  pk.head_mode = DILATTN_HEADS_BLOCK;
  pk.name = "packed, dilated block";
  check(pk, 83);
  pk.kind = DILATTN_KIND_BLOCK_SPARSE;
  pk.cu_seqlens_q = {0, 4, 9};
  pk.cu_seqlens_k = {0, 5, 8};
  pk.Nq = 9; pk.Nk = 8; pk.H = 2;
  pk.mask.bq = 2; pk.mask.bk = 3; pk.mask.pattern = "local:1+sink:1";
  pk.name = "packed, block-sparse, causal";
  check(pk, 84);
  return finish("backward_matches_finite_differences");
}
