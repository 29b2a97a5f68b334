// test_sinks_reference.cpp - SPEC 10.3 on the f64 reference: a hand-computed row (the sink in
// the denominator and in LSE), rows with no key (O = 0, LSE = sigma; -inf without a sink), the
// sink joining a dilated row once (not once per branch), and the backward against central
// differences of L = sum(dO * O) in Q, K, V and every sink (dense, causal with empty rows, GQA,
// dilated in each head mode, block-sparse, packed with the SPEC 10.1 variants, all in f64).
//
// Tolerance: as tests/reference/test_gradients_finite_difference.cpp (h = 1e-6, truncation
// ~1e-12, rounding ~2e-9): |fd - grad| <= 1e-6 (1 + |grad|); a missing term is O(0.01 .. 1).
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "../common/attention_run.h"

using namespace harness;

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

struct SinkRun {
  Tensor o, lse, dq, dk, dv;
  std::vector<double> d_sinks;
};

// Forward (and, with want_backward, backward with d_sinks) of case c on ref with the sinks.
SinkRun run(const AttentionCase& c, const Inputs& in, const std::vector<double>& sinks,
            bool want_backward) {
  SinkRun r{c.q_like(DILATTN_F64), c.lse_like(DILATTN_F64), c.q_like(DILATTN_F64),
            c.kv_like(DILATTN_F64), c.kv_like(DILATTN_F64), std::vector<double>(c.H, 0.0)};
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF))) return r;
  dilattn_call_options options = dilattn_call_options_make();
  options.sinks = sinks.data();
  CHECK_OK(dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &r.o.view(),
                              &r.lse.view(), &options, nullptr, 0));
  if (!want_backward) return r;
  options.d_sinks = r.d_sinks.data();
  CHECK_OK(dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &r.o.view(),
                               &r.lse.view(), &in.d_o.view(), &r.dq.view(), &r.dk.view(),
                               &r.dv.view(), &options, nullptr, 0));
  return r;
}

double loss(const AttentionCase& c, const Inputs& in, const std::vector<double>& sinks) {
  const SinkRun r = run(c, in, sinks, false);
  double l = 0;
  for (int64_t e = 0; e < in.d_o.count(); ++e) l += in.d_o.flat(e) * r.o.flat(e);
  return l;
}

void check_gradients(const AttentionCase& c, uint64_t seed, const std::vector<double>& sinks) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, seed, 1.0);
  const SinkRun g = run(c, in, sinks, true);
  const double h = 1e-6;
  double worst = 0;
  struct Pair { Tensor Inputs::*x; const Tensor* grad; };
  for (const Pair& p : {Pair{&Inputs::q, &g.dq}, Pair{&Inputs::k, &g.dk}, Pair{&Inputs::v, &g.dv}})
    for (int64_t e = 0; e < (in.*p.x).count(); ++e) {
      Inputs plus = in, minus = in;
      (plus.*p.x).set_flat(e, (in.*p.x).flat(e) + h);
      (minus.*p.x).set_flat(e, (in.*p.x).flat(e) - h);
      const double fd = (loss(c, plus, sinks) - loss(c, minus, sinks)) / (2 * h);
      CHECK_NEAR(p.grad->flat(e), fd, 1e-6 * (1 + std::fabs(p.grad->flat(e))));
      worst = std::fmax(worst, std::fabs(p.grad->flat(e) - fd));
    }
  for (size_t head = 0; head < sinks.size(); ++head) {
    std::vector<double> plus = sinks, minus = sinks;
    plus[head] += h;
    minus[head] -= h;
    const double fd = (loss(c, in, plus) - loss(c, in, minus)) / (2 * h);
    CHECK_NEAR(g.d_sinks[head], fd, 1e-6 * (1 + std::fabs(g.d_sinks[head])));
    CHECK(std::fabs(g.d_sinks[head]) > 1e-3);  // the sink matters here, or this proves little
    worst = std::fmax(worst, std::fabs(g.d_sinks[head] - fd));
  }
  std::printf("%-32s max |grad - central difference| = %.2e\n", c.name.c_str(), worst);
}

// One row, two keys, one head: Z = e^sigma + e^S0 + e^S1, O = (e^S0 v0 + e^S1 v1) / Z,
// LSE = log Z.
void hand_computed_row() {
  CaseScope scope("hand-computed row");
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.Nq = 1; c.Nk = 2; c.D = 2; c.sinks = true; c.scale = 1;
  Inputs in{Tensor(DILATTN_F64, 1, 1, 1, 2), Tensor(DILATTN_F64, 1, 2, 1, 2),
            Tensor(DILATTN_F64, 1, 2, 1, 2), Tensor(DILATTN_F64, 1, 1, 1, 2)};
  const double qv[2] = {1, 2}, kv[4] = {0.5, 0.25, -1, 0.5}, vv[4] = {1, 0, 0, 1};
  for (int e = 0; e < 2; ++e) in.q.set_flat(e, qv[e]);
  for (int e = 0; e < 4; ++e) { in.k.set_flat(e, kv[e]); in.v.set_flat(e, vv[e]); }
  const double sigma = 0.7, s0 = 1.0, s1 = 0.0;  // <q, k0> = 1, <q, k1> = 0
  const double Z = std::exp(sigma) + std::exp(s0) + std::exp(s1);
  const SinkRun r = run(c, in, {sigma}, false);
  CHECK_NEAR(r.o.flat(0), std::exp(s0) / Z, 1e-15);
  CHECK_NEAR(r.o.flat(1), std::exp(s1) / Z, 1e-15);
  CHECK_NEAR(r.lse.flat(0), std::log(Z), 1e-15);
}

// Causal with Nq = 4 > Nk = 2: rows 0 and 1 have no key. With sinks (0.3, -inf) head 0's get
// O = 0, LSE = 0.3 and head 1's O = 0, LSE = -inf; the other rows have finite LSE above the sink.
void rows_without_keys() {
  CaseScope scope("rows without keys");
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.Nq = 4; c.Nk = 2; c.H = 2; c.Hkv = 1; c.D = 2; c.causal = true; c.sinks = true;
  const Inputs in = make_inputs(c, 5, 1.0);
  const SinkRun r = run(c, in, {0.3, kNegInf}, false);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 2; ++d) CHECK(r.o.flat((i * 2 + h) * 2 + d) == 0);
    CHECK(r.lse.flat(0 * 4 + i) == 0.3);
    CHECK(r.lse.flat(1 * 4 + i) == kNegInf);
  }
  for (int64_t i = 2; i < 4; ++i) CHECK(r.lse.flat(i) > 0.3 && std::isfinite(r.lse.flat(4 + i)));
}

// Two identical branches (4, 1) hold each key twice (SPEC 3.4): Z = e^sigma + 2 sum_j e^S_j.
// A sink per branch would give 2 e^sigma instead. So O = 2 sum e^S_j v_j / Z and LSE = log Z,
// checked against a dense plan's (O_d, LSE_d) = (sum e^S v / W, log W) with W = sum_j e^S_j.
void dilated_row_holds_one_sink() {
  CaseScope scope("dilated row holds one sink");
  AttentionCase dil;
  dil.dtype = DILATTN_F64;
  dil.Nq = dil.Nk = 4; dil.D = 3;
  dil.kind = DILATTN_KIND_DILATED;
  dil.segments = {4, 4}; dil.dilations = {1, 1};
  dil.sinks = true;
  AttentionCase dense = dil;
  dense.kind = DILATTN_KIND_DENSE;
  dense.segments.clear(); dense.dilations.clear();
  const Inputs in = make_inputs(dil, 9, 1.0);
  const double sigma = 1.1;
  const SinkRun r = run(dil, in, {sigma}, false);
  const SinkRun d = run(dense, in, {kNegInf}, false);  // no sink: the plain dense row
  for (int64_t i = 0; i < 4; ++i) {
    const double W = std::exp(d.lse.flat(i)), Z = std::exp(sigma) + 2 * W;
    CHECK_NEAR(r.lse.flat(i), std::log(Z), 1e-13);
    for (int64_t e = 0; e < 3; ++e)
      CHECK_NEAR(r.o.flat(i * 3 + e), 2 * W * d.o.flat(i * 3 + e) / Z, 1e-13);
  }
}

}  // namespace

int main() {
  hand_computed_row();
  rows_without_keys();
  dilated_row_holds_one_sink();

  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.sinks = true;
  c.Nq = 5; c.Nk = 4; c.H = 2; c.Hkv = 1; c.D = 3; c.causal = true;  // rows 0 empty: LSE = sigma
  c.name = "dense causal Nq>Nk, GQA";
  check_gradients(c, 91, {0.4, -0.3});
  c.causal = false;
  c.kind = DILATTN_KIND_DILATED;
  c.Nq = c.Nk = 7; c.H = 3;
  c.segments = {4, 7}; c.dilations = {2, 3};
  const dilattn_head_mode modes[] = {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS};
  const char* names[] = {"dilated mod", "dilated block", "dilated groups"};
  for (int m = 0; m < 3; ++m) {
    c.head_mode = modes[m];
    c.name = names[m];
    check_gradients(c, 92 + static_cast<uint64_t>(m), {0.2, 0.9, -0.5});
  }
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.Nq = 6; c.Nk = 8; c.H = 2; c.causal = true;
  c.mask.bq = 2; c.mask.bk = 3; c.mask.pattern = "local:1+sink:1";
  c.name = "block-sparse causal";
  check_gradients(c, 96, {0.1, 0.6});
  AttentionCase pk;
  pk.dtype = DILATTN_F64;
  pk.sinks = true;
  pk.H = 2; pk.Hkv = 1; pk.D = 3;
  pk.cu_seqlens_q = {0, 3, 3, 5, 9};
  pk.cu_seqlens_k = {0, 4, 6, 6, 8};  // sequence 2 has rows and no key
  pk.Nq = 9; pk.Nk = 8;
  pk.window_left = 1; pk.window_right = 1; pk.softcap = 0.8; pk.scale = 2;
  pk.alibi_slopes = {0.3, 0.7};
  pk.name = "packed, window, softcap, ALiBi";
  check_gradients(pk, 97, {0.5, -0.2});
  return finish("sinks_reference");
}
