// test_dropout_reference.cpp - SPEC 11 on the f64 reference through the public C ABI
// (dilattn_forward_ex, dilattn_backward_ex), with the seed and offset of each call:
//   - the mask seen through O: with q = 0 every probability is 1/Nk, and with v_j the unit
//     vector e_j (D = Nk) element j of O_i is P_ij M_ij, so it is 0 exactly for a dropped pair
//     and 1 / (Nk (1 - p)) for a kept one. The fraction dropped must lie within 5 binomial
//     standard deviations of p (p = 0.1, 0.5, 0.9), and each decision must equal
//     lib/dropout_rng.h's dropout_keep for that (b, h, i, j), LSE must be log(Nk) (unaffected);
//   - the same seed and offset give the same O bitwise, another offset or seed another mask;
//   - a dropped pair adds 0 * v_j: an infinite v_j of a dropped pair makes the row NaN;
//   - p = 0 gives the bits of a plan without dropout, forward and backward;
//   - SPEC 11.3: the backward is the gradient of the forward with the same seed and offset,
//     checked against central differences of L = sum(dO * O) in f64 (tolerance as in
//     test_gradients_finite_difference.cpp: 1e-6 (1 + |grad|)), on dense, causal, GQA, dilated
//     with a key two branches hold, and block-sparse.
// The Python tests (tests/packages/python/test_dropout.py) check O and the gradients against an
// independent numpy Philox (tests/common/spec_numpy.py).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "../common/attention_run.h"
#include "../common/compare.h"
#include "dropout_rng.h"

using namespace harness;

namespace {

struct Call {
  uint64_t seed = 0, offset = 0;
};

dilattn_call_options options_of(Call call) {
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_seed = call.seed;
  options.dropout_offset = call.offset;
  return options;
}

// The forward and backward of case c through the _ex calls, on `plan` (made from c on ref).
Forward forward_ex(const AttentionCase& c, dilattn_plan plan, const Inputs& in, Call call) {
  CaseScope scope(c.name);
  Forward out{c.q_like(c.dtype), c.lse_like(DILATTN_F64)};
  out.o.poison();
  out.lse.poison();
  const dilattn_call_options options = options_of(call);
  CHECK_OK(dilattn_forward_ex(plan, &in.q.view(), &in.k.view(), &in.v.view(), &out.o.view(),
                              &out.lse.view(), &options, nullptr, 0));
  return out;
}

Gradients backward_ex(const AttentionCase& c, dilattn_plan plan, const Inputs& in,
                      const Forward& fwd, Call call) {
  CaseScope scope(c.name);
  Gradients g{c.q_like(c.dtype), c.kv_like(c.dtype), c.kv_like(c.dtype)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  const dilattn_call_options options = options_of(call);
  CHECK_OK(dilattn_backward_ex(plan, &in.q.view(), &in.k.view(), &in.v.view(), &fwd.o.view(),
                               &fwd.lse.view(), &in.d_o.view(), &g.dq.view(), &g.dk.view(),
                               &g.dv.view(), &options, nullptr, 0));
  return g;
}

Forward forward_ex(const AttentionCase& c, const Inputs& in, Call call) {
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF))) return {};
  return forward_ex(c, plan.get(), in, call);
}

Gradients backward_ex(const AttentionCase& c, const Inputs& in, const Forward& fwd, Call call) {
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF))) return {};
  return backward_ex(c, plan.get(), in, fwd, call);
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.bytes() == b.bytes(); }

// The mask made visible: q = 0, v_j = e_j (see the file comment).
AttentionCase mask_probe_case(double p) {
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.B = 2; c.H = 3; c.Hkv = 3; c.Nq = 40; c.Nk = c.D = 37;  // Nk not a multiple of 4
  c.dropout_p = p;
  c.name = "mask probe p=" + std::to_string(p);
  return c;
}

Inputs mask_probe_inputs(const AttentionCase& c) {
  Inputs in = make_inputs(c, 7, 1.0);
  for (int64_t e = 0; e < in.q.count(); ++e) in.q.set_flat(e, 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t j = 0; j < c.Nk; ++j)
      for (int64_t g = 0; g < c.Hkv; ++g)
        for (int64_t d = 0; d < c.D; ++d) in.v.set(b, j, g, d, d == j ? 1.0 : 0.0);
  return in;
}

void check_fraction_and_decisions(double p, Call call) {
  const AttentionCase c = mask_probe_case(p);
  CaseScope scope(c.name);
  const Inputs in = mask_probe_inputs(c);
  const Forward f = forward_ex(c, in, call);
  const uint64_t threshold = dilattn::dropout_threshold(p);
  const double kept_value = 1.0 / (static_cast<double>(c.Nk) * (1.0 - p));
  int64_t dropped = 0, total = 0, wrong_decisions = 0, wrong_values = 0, wrong_lse = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Nq; ++i) {
        if (std::fabs(f.lse.at(b, h, i, 0) - std::log(static_cast<double>(c.Nk))) > 1e-12)
          ++wrong_lse;
        for (int64_t j = 0; j < c.Nk; ++j) {
          const double o = f.o.at(b, i, h, j);
          const bool kept = o != 0.0;
          ++total;
          dropped += !kept;
          if (kept != dilattn::dropout_keep(call.seed, call.offset, b, h, c.H, i, j, threshold))
            ++wrong_decisions;
          if (kept && std::fabs(o - kept_value) > 1e-14) ++wrong_values;
        }
      }
  const double n = static_cast<double>(total);
  const double fraction = static_cast<double>(dropped) / n;
  const double sigma = std::sqrt(p * (1 - p) / n);
  CHECK_MSG(std::fabs(fraction - p) <= 5 * sigma,
            "p=%g: dropped fraction %.4f of %lld pairs, outside p +- 5 sigma (%.4f)", p, fraction,
            static_cast<long long>(total), 5 * sigma);
  CHECK_EQ(wrong_decisions, 0);
  CHECK_EQ(wrong_values, 0);
  CHECK_EQ(wrong_lse, 0);
  std::printf("p=%.1f: dropped %.4f of %lld pairs (5 sigma %.4f)\n", p, fraction,
              static_cast<long long>(total), 5 * sigma);
}

void check_seed_and_offset_select_the_mask() {
  const AttentionCase c = mask_probe_case(0.5);
  CaseScope scope("seed and offset");
  const Inputs in = mask_probe_inputs(c);
  const Forward base = forward_ex(c, in, Call{42, 9});
  CHECK_MSG(same_bits(base.o, forward_ex(c, in, Call{42, 9}).o),
            "the same seed and offset must give the same O bitwise");
  CHECK_MSG(!same_bits(base.o, forward_ex(c, in, Call{42, 10}).o),
            "offset 10 must give another mask than offset 9");
  CHECK_MSG(!same_bits(base.o, forward_ex(c, in, Call{43, 9}).o),
            "seed 43 must give another mask than seed 42");
  CHECK_MSG(!same_bits(base.o, forward_ex(c, in, Call{42 + (uint64_t{1} << 32), 9}).o),
            "the seed's high word must change the mask");
}

// SPEC 11: a dropped pair's term is 0 * v_j, so an infinite v_j of a dropped pair makes the
// row NaN, as the formula (and a P * V product of a fast backend) gives.
void check_dropped_infinite_value_reaches_the_row() {
  const AttentionCase c = mask_probe_case(0.5);
  CaseScope scope("dropped infinite v");
  Inputs in = mask_probe_inputs(c);
  const Call call{21, 4};
  const uint64_t threshold = dilattn::dropout_threshold(c.dropout_p);
  int64_t j = 0;  // the first key dropped for (b, h, i) = (0, 0, 0)
  while (j < c.Nk && dilattn::dropout_keep(call.seed, call.offset, 0, 0, c.H, 0, j, threshold)) ++j;
  if (!CHECK(j < c.Nk)) return;
  in.v.set(0, j, 0, 0, std::numeric_limits<double>::infinity());
  const Forward f = forward_ex(c, in, call);
  CHECK_MSG(std::isnan(f.o.at(0, 0, 0, 0)), "O[0, 0, 0, 0] = %g, want NaN", f.o.at(0, 0, 0, 0));
}

// p = 0 is no dropout, bitwise (SPEC 11), forward and backward, whatever the seed.
void check_p_zero_is_bitwise_no_dropout() {
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.B = 2; c.Nq = c.Nk = 12; c.H = 4; c.Hkv = 2; c.D = 5;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {4, 8};
  c.dilations = {1, 2};
  c.causal = true;
  c.name = "p = 0";
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, 3, 2.0);
  const Forward plain = run_forward(c, in, DILATTN_BACKEND_REF);
  const Gradients plain_g = run_backward(c, in, plain, DILATTN_BACKEND_REF);
  // A plan whose description was given p = 0 explicitly.
  Desc desc;
  CHECK_OK(desc.create(c));
  CHECK_OK(dilattn_desc_set_dropout(desc.get(), 0.0));
  const dilattn_shape shape = shape_of(c);
  dilattn_plan plan = nullptr;
  if (!CHECK_OK(dilattn_plan_create(&plan, desc.get(), &shape, c.dtype, DILATTN_BACKEND_REF)))
    return;
  const Forward ex = forward_ex(c, plan, in, Call{12345, 77});
  CHECK_MSG(same_bits(plain.o, ex.o) && same_bits(plain.lse, ex.lse),
            "p = 0 through dilattn_forward_ex must give dilattn_forward's bits");
  const Gradients ex_g = backward_ex(c, plan, in, ex, Call{12345, 77});
  dilattn_plan_destroy(plan);
  CHECK_MSG(same_bits(plain_g.dq, ex_g.dq) && same_bits(plain_g.dk, ex_g.dk) &&
                same_bits(plain_g.dv, ex_g.dv),
            "p = 0 through dilattn_backward_ex must give dilattn_backward's bits");
}

double loss(const AttentionCase& c, const Inputs& in, Call call) {
  const Forward r = forward_ex(c, in, call);
  double l = 0;
  for (int64_t e = 0; e < in.d_o.count(); ++e) l += in.d_o.flat(e) * r.o.flat(e);
  return l;
}

void check_backward_is_the_gradient(const AttentionCase& c, uint64_t input_seed, Call call) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, input_seed, 1.0);
  const Forward fwd = forward_ex(c, in, call);
  const Gradients g = backward_ex(c, in, fwd, call);
  // The dropped output differs from the undropped one: the case really drops something.
  Forward undropped;
  {
    AttentionCase plain = c;
    plain.dropout_p = 0;
    undropped = run_forward(plain, in, DILATTN_BACKEND_REF);
  }
  CHECK_MSG(max_abs_diff(fwd.o, undropped.o) > 1e-3, "%s: dropout changed nothing",
            c.name.c_str());
  const double h = 1e-6;
  double worst = 0;
  struct Pair { Tensor Inputs::*x; const Tensor* grad; };
  for (const Pair& p : {Pair{&Inputs::q, &g.dq}, Pair{&Inputs::k, &g.dk}, Pair{&Inputs::v, &g.dv}})
    for (int64_t e = 0; e < (in.*p.x).count(); ++e) {
      Inputs plus = in, minus = in;
      (plus.*p.x).set_flat(e, (in.*p.x).flat(e) + h);
      (minus.*p.x).set_flat(e, (in.*p.x).flat(e) - h);
      const double fd = (loss(c, plus, call) - loss(c, minus, call)) / (2 * h);
      const double an = p.grad->flat(e);
      CHECK_NEAR(an, fd, 1e-6 * (1 + std::fabs(an)));
      worst = std::fmax(worst, std::fabs(an - fd));
    }
  std::printf("%-34s max |grad - central difference| = %.2e\n", c.name.c_str(), worst);
}

void check_gradients() {
  AttentionCase c;
  c.dtype = DILATTN_F64;
  c.dropout_p = 0.5;
  c.B = 1; c.Nq = c.Nk = 6; c.H = 2; c.Hkv = 2; c.D = 3;
  c.name = "dense p=0.5";
  check_backward_is_the_gradient(c, 71, Call{5, 0});
  c.causal = true;
  c.Nq = 5; c.Nk = 7;
  c.dropout_p = 0.1;
  c.name = "causal Nq=5 Nk=7 p=0.1";
  check_backward_is_the_gradient(c, 72, Call{6, 3});
  c.causal = false;
  c.Nq = c.Nk = 6; c.H = 4; c.Hkv = 2;
  c.dropout_p = 0.5;
  c.name = "GQA H=4 Hkv=2 p=0.5";
  check_backward_is_the_gradient(c, 73, Call{7, 1});
  // Branches (4, 1) and (4, 2) both hold every even key of a segment for head 0: those pairs
  // occur twice in A(i), and one decision covers both occurrences.
  c.H = c.Hkv = 2;
  c.Nq = c.Nk = 8;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {4, 4, 8};
  c.dilations = {1, 2, 4};
  c.name = "dilated, keys held twice p=0.5";
  check_backward_is_the_gradient(c, 74, Call{8, 2});
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.segments.clear();
  c.dilations.clear();
  c.mask.bq = 2;
  c.mask.bk = 2;
  c.mask.row_ptr = {0, 2, 4, 7, 9};
  c.mask.col_idx = {0, 2, 1, 2, 0, 1, 3, 2, 3};
  c.causal = true;
  c.dropout_p = 0.1;
  c.name = "block-sparse causal p=0.1";
  check_backward_is_the_gradient(c, 75, Call{9, 4});
}

}  // namespace

int main() {
  for (double p : {0.1, 0.5, 0.9}) check_fraction_and_decisions(p, Call{0x0123456789abcdefULL, 11});
  check_seed_and_offset_select_the_mask();
  check_dropped_infinite_value_reaches_the_row();
  check_p_zero_is_bitwise_no_dropout();
  check_gradients();
  return finish("dropout_reference");
}
