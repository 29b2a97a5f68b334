// test_cpu_dropout.cpp - SPEC 11 on the cpu backend against the f64 reference, through the
// public C ABI (dilattn_forward_ex, dilattn_backward_ex), on the instruction set DILATTN_CPU_ISA
// names (tests/cpu/meson.build runs it once per value; one this CPU lacks is a skip, exit 77):
//   - the same decisions as the reference, pair by pair: with q = 0 and v_j = e_j (D = Nk),
//     element j of O_i is P_ij M_ij, exactly 0 for a dropped pair; cpu's O must be 0 exactly
//     where the reference's is, and within SPEC 8 (SPEC 12 for f64) elsewhere. Dense, causal,
//     GQA, block-sparse (key blocks not a multiple of 4 keys), dilated in every head mode with
//     pairs several branches hold (computed once with a weight on the cpu backend,
//     cpu/cpu_pair_weights.h), keys r apart (r = 2, 3, 4, 5) and segments that start off a
//     multiple of 4; f32, f16, bf16 and f64;
//   - the fraction dropped within 5 binomial standard deviations of p = 0.1, 0.5, 0.9;
//   - random inputs: O, LSE and dQ, dK, dV within SPEC 8 / SPEC 12 of the reference with the
//     same seed and offset (the backward from the reference forward's O and LSE, so it must
//     regenerate the forward's decisions: nothing is stored), and the LSE bitwise the LSE of
//     the same plan without dropout (dropout acts after the softmax);
//   - the backward with another seed than the forward's gives other gradients (it draws);
//   - the bits of O, LSE, dQ, dK, dV are the same for 1, 2, 3 and 5 threads;
//   - p = 0 through the _ex calls gives the bits of a plan without dropout;
//   - SPEC 13: an infinite v_j of a dropped pair makes the row NaN (0 * inf), and a NaN in a
//     Q row makes that row NaN; both as in the reference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

Forward forward_ex(const AttentionCase& c, const Inputs& in, dilattn_backend backend, Call call,
                   int32_t threads = 2) {
  CaseScope scope(c.name);
  Forward out{c.q_like(in.q.dtype(), output_layout_of(c, backend)),
              c.lse_like(lse_dtype_of(backend, in.q.dtype()))};
  out.o.poison();
  out.lse.poison();
  AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  Plan plan;
  if (!CHECK_OK(plan.create(planned, backend, threads))) return out;
  const dilattn_call_options options = options_of(call);
  CHECK_OK(dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                              &out.o.view(), &out.lse.view(), &options, nullptr, 0));
  return out;
}

Gradients backward_ex(const AttentionCase& c, const Inputs& in, const Forward& fwd,
                      dilattn_backend backend, Call call, int32_t threads = 2) {
  CaseScope scope(c.name);
  const Layout layout = output_layout_of(c, backend);
  Gradients g{c.q_like(in.q.dtype(), layout), c.kv_like(in.q.dtype(), layout),
              c.kv_like(in.q.dtype(), layout)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  Plan plan;
  if (!CHECK_OK(plan.create(planned, backend, threads))) return g;
  const dilattn_call_options options = options_of(call);
  CHECK_OK(dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                               &fwd.o.view(), &fwd.lse.view(), &in.d_o.view(), &g.dq.view(),
                               &g.dk.view(), &g.dv.view(), &options, nullptr, 0));
  return g;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.bytes() == b.bytes(); }

// ---------------------------------------------------------------- the decisions, through O
AttentionCase probe_base(const char* name, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv,
                         dilattn_dtype t, double p) {
  AttentionCase c;
  c.name = name;
  c.B = 2; c.Nq = Nq; c.Nk = Nk; c.D = Nk; c.H = H; c.Hkv = Hkv;
  c.dtype = t;
  c.dropout_p = p;
  return c;
}

AttentionCase dilated_probe(const char* name, int64_t N, int64_t H, std::vector<int64_t> w,
                            std::vector<int64_t> r, dilattn_head_mode mode, bool causal,
                            dilattn_dtype t) {
  AttentionCase c = probe_base(name, N, N, H, H, t, 0.4);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = w;
  c.dilations = r;
  c.head_mode = mode;
  c.causal = causal;
  return c;
}

std::vector<AttentionCase> probe_cases() {
  std::vector<AttentionCase> cases;
  cases.push_back(probe_base("probe dense f32", 70, 201, 3, 3, DILATTN_F32, 0.3));
  cases.push_back(probe_base("probe dense gqa f64", 33, 130, 4, 2, DILATTN_F64, 0.3));
  AttentionCase causal = probe_base("probe dense causal f16", 90, 150, 2, 1, DILATTN_F16, 0.5);
  causal.causal = true;
  cases.push_back(causal);
  AttentionCase decode = probe_base("probe decode bf16", 1, 256, 2, 2, DILATTN_BF16, 0.2);
  cases.push_back(decode);
  AttentionCase sparse = probe_base("probe sparse odd key blocks f32", 130, 200, 2, 1,
                                    DILATTN_F32, 0.4);
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.mask.bq = 32;
  sparse.mask.bk = 30;
  sparse.mask.heads = 2;
  sparse.mask.density = 0.5;
  cases.push_back(sparse);
  // Nested LongNet branches: pairs of the r = 2 and r = 4 branches that the r = 1 branch holds
  // too are computed once there, with a weight (cpu_pair_weights.h), in every head mode.
  cases.push_back(dilated_probe("probe dilated mod nested f32", 256, 4, {64, 128, 256},
                                {1, 2, 4}, DILATTN_HEADS_MOD, false, DILATTN_F32));
  cases.push_back(dilated_probe("probe dilated block nested causal f64", 256, 5,
                                {64, 128, 256}, {1, 2, 4}, DILATTN_HEADS_BLOCK, true,
                                DILATTN_F64));
  cases.push_back(dilated_probe("probe dilated groups f32", 200, 3, {50, 100, 200}, {1, 3, 5},
                                DILATTN_HEADS_GROUPS, false, DILATTN_F32));
  // Segments of 50 and 70 keys: dilation-1 tiles that start off a multiple of 4; dilations 3
  // and 5 with every offset; a repeated branch (every pair held twice).
  cases.push_back(dilated_probe("probe dilated odd segments f64", 210, 5, {50, 70, 70},
                                {1, 3, 3}, DILATTN_HEADS_MOD, true, DILATTN_F64));
  cases.push_back(dilated_probe("probe dilated r2 bf16", 180, 2, {60, 180}, {2, 4},
                                DILATTN_HEADS_MOD, false, DILATTN_BF16));
  return cases;
}

Inputs probe_inputs(const AttentionCase& c) {
  Inputs in = make_inputs(c, 7, 1.0);
  for (int64_t e = 0; e < in.q.count(); ++e) in.q.set_flat(e, 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t j = 0; j < c.Nk; ++j)
      for (int64_t g = 0; g < c.Hkv; ++g)
        for (int64_t d = 0; d < c.D; ++d) in.v.set(b, j, g, d, d == j ? 1.0 : 0.0);
  return in;
}

void check_same_decisions(const AttentionCase& c) {
  CaseScope scope(c.name);
  const Inputs in = probe_inputs(c);
  const Call call{0x0123456789ABCDEFull, 17};
  const Forward want = forward_ex(c, in, DILATTN_BACKEND_REF, call);
  const Forward got = forward_ex(c, in, DILATTN_BACKEND_CPU, call);
  int64_t kept = 0, dropped_or_absent = 0, differ = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.Nq; ++i)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t j = 0; j < c.Nk; ++j) {
          const bool ref_zero = want.o.at(b, i, h, j) == 0.0;
          const bool cpu_zero = got.o.at(b, i, h, j) == 0.0;
          kept += !ref_zero;
          dropped_or_absent += ref_zero;
          differ += ref_zero != cpu_zero;
        }
  CHECK_MSG(differ == 0, "%lld pairs where exactly one of ref and cpu drops (of %lld kept)",
            static_cast<long long>(differ), static_cast<long long>(kept));
  CHECK_MSG(kept > 0 && dropped_or_absent > 0, "the probe shows no decision");
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
}

// The fraction of dense pairs the cpu backend drops, from the probe's O.
void check_fraction(double p) {
  AttentionCase c = probe_base("fraction", 256, 256, 4, 4, DILATTN_F32, p);
  c.name = "fraction p=" + std::to_string(p);
  CaseScope scope(c.name);
  const Inputs in = probe_inputs(c);
  const Forward got = forward_ex(c, in, DILATTN_BACKEND_CPU, Call{99, 3});
  int64_t dropped = 0;
  const int64_t total = c.B * c.Nq * c.H * c.Nk;
  for (int64_t e = 0; e < total; ++e) dropped += got.o.flat(e) == 0.0;
  const double n = static_cast<double>(total), fraction = static_cast<double>(dropped) / n;
  const double sigma = std::sqrt(p * (1 - p) / n);
  CHECK_MSG(std::fabs(fraction - p) <= 5 * sigma,
            "p=%g: dropped %.4f of %lld pairs, outside p +- 5 sigma (%.4f)", p, fraction,
            static_cast<long long>(total), 5 * sigma);
  std::printf("cpu p=%.1f: dropped %.4f of %lld pairs (5 sigma %.4f)\n", p, fraction,
              static_cast<long long>(total), 5 * sigma);
}

// ---------------------------------------------------------------- random inputs
std::vector<AttentionCase> value_cases() {
  std::vector<AttentionCase> cases;
  auto add = [&](const char* name, int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv,
                 int64_t D, bool causal, dilattn_dtype t) {
    AttentionCase c;
    c.name = name; c.B = B; c.Nq = Nq; c.Nk = Nk; c.H = H; c.Hkv = Hkv; c.D = D;
    c.causal = causal; c.dtype = t; c.dropout_p = 0.3;
    cases.push_back(c);
    return &cases.back();
  };
  add("dense gqa d40", 2, 77, 150, 4, 2, 40, false, DILATTN_F32);
  add("dense causal d72 permuted", 1, 130, 130, 2, 2, 72, true, DILATTN_F32)->output_layout =
      Layout{true, 0};
  add("dense f16 causal d64", 1, 100, 100, 2, 1, 64, true, DILATTN_F16);
  add("dense bf16 d32", 1, 90, 90, 2, 2, 32, false, DILATTN_BF16);
  add("dense f64 causal nq>nk empty rows d16", 1, 150, 70, 2, 1, 16, true, DILATTN_F64);
  add("decode f32 d64", 2, 1, 300, 4, 2, 64, true, DILATTN_F32);
  // Enough (b, kv head) items for the one-pass backward (cpu_tile_loop.h backward_one_pass).
  add("dense one-pass backward d16", 2, 200, 200, 4, 4, 16, true, DILATTN_F32);
  AttentionCase* d = add("dilated mod nested causal d32", 2, 512, 512, 4, 4, 32, true,
                         DILATTN_F32);
  d->kind = DILATTN_KIND_DILATED; d->segments = {128, 256, 512}; d->dilations = {1, 2, 4};
  d = add("dilated block f64 d40", 1, 300, 300, 4, 2, 40, false, DILATTN_F64);
  d->kind = DILATTN_KIND_DILATED; d->segments = {64, 128, 300}; d->dilations = {1, 2, 4};
  d->head_mode = DILATTN_HEADS_BLOCK;
  d = add("dilated groups causal gqa f16 d64", 1, 333, 333, 3, 1, 64, true, DILATTN_F16);
  d->kind = DILATTN_KIND_DILATED; d->segments = {100, 200, 333}; d->dilations = {1, 3, 2};
  d->head_mode = DILATTN_HEADS_GROUPS;
  AttentionCase* s = add("sparse causal d40", 1, 300, 300, 2, 1, 40, true, DILATTN_F32);
  s->kind = DILATTN_KIND_BLOCK_SPARSE; s->mask.bq = 64; s->mask.bk = 48; s->mask.heads = 2;
  s->mask.density = 0.4;
  return cases;
}

void check_values(const AttentionCase& c) {
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, 5, 2.0);
  const Call call{77, 5};
  const Forward want = forward_ex(c, in, DILATTN_BACKEND_REF, call);
  const Forward got = forward_ex(c, in, DILATTN_BACKEND_CPU, call);
  const Tolerance tol = spec8::of(c.dtype);
  CHECK_CLOSE("O", got.o, want.o, tol);
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
  // The LSE is the softmax's: bitwise that of the plan without dropout.
  AttentionCase plain = c;
  plain.dropout_p = 0;
  const Forward undropped = run_forward(plain, in, DILATTN_BACKEND_CPU, 2);
  CHECK_MSG(same_bits(got.lse, undropped.lse), "dropout changed the LSE");
  CHECK_MSG(max_abs_diff(got.o, undropped.o) > 1e-2, "dropout changed nothing");

  // Both backwards from the reference forward's O and LSE, so they differentiate the same O:
  // the cpu backend must draw the forward's decisions again (SPEC 11.3).
  const Forward& from_ref = want;
  const Gradients want_g = backward_ex(c, in, from_ref, DILATTN_BACKEND_REF, call);
  const Gradients got_g = backward_ex(c, in, from_ref, DILATTN_BACKEND_CPU, call);
  CHECK_CLOSE("dQ", got_g.dq, want_g.dq, tol);
  CHECK_CLOSE("dK", got_g.dk, want_g.dk, tol);
  CHECK_CLOSE("dV", got_g.dv, want_g.dv, tol);
  const Gradients other = backward_ex(c, in, from_ref, DILATTN_BACKEND_CPU, Call{78, 5});
  CHECK_MSG(max_abs_diff(other.dv, got_g.dv) > 1e-2,
            "the backward with another seed gave the same dV: it does not draw");

  // Bitwise across thread counts, forward and backward.
  for (int32_t threads : {1, 3, 5}) {
    const Forward f = forward_ex(c, in, DILATTN_BACKEND_CPU, call, threads);
    const Gradients g = backward_ex(c, in, from_ref, DILATTN_BACKEND_CPU, call, threads);
    CHECK_MSG(same_bits(f.o, got.o) && same_bits(f.lse, got.lse),
              "forward with %d threads differs from 2 threads", threads);
    CHECK_MSG(same_bits(g.dq, got_g.dq) && same_bits(g.dk, got_g.dk) && same_bits(g.dv, got_g.dv),
              "backward with %d threads differs from 2 threads", threads);
  }
}

// p = 0 through the _ex calls: the bits of the plain calls, forward and backward.
void check_p_zero_is_bitwise_no_dropout() {
  AttentionCase c = value_cases()[7];  // dilated, nested branches
  c.dropout_p = 0;
  c.name = "p = 0";
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, 3, 2.0);
  const Forward plain = run_forward(c, in, DILATTN_BACKEND_CPU, 2);
  const Gradients plain_g = run_backward(c, in, plain, DILATTN_BACKEND_CPU, 2);
  Desc desc;
  CHECK_OK(desc.create(c, 2));
  CHECK_OK(dilattn_desc_set_dropout(desc.get(), 0.0));
  const dilattn_shape shape = shape_of(c);
  dilattn_plan plan = nullptr;
  if (!CHECK_OK(dilattn_plan_create(&plan, desc.get(), &shape, c.dtype, DILATTN_BACKEND_CPU)))
    return;
  const dilattn_call_options options = options_of(Call{12345, 77});
  Forward ex{c.q_like(c.dtype, c.output_layout), c.lse_like(DILATTN_F32)};
  CHECK_OK(dilattn_forward_ex(plan, &in.q.view(), &in.k.view(), &in.v.view(), &ex.o.view(),
                              &ex.lse.view(), &options, nullptr, 0));
  Gradients g{c.q_like(c.dtype), c.kv_like(c.dtype), c.kv_like(c.dtype)};
  CHECK_OK(dilattn_backward_ex(plan, &in.q.view(), &in.k.view(), &in.v.view(), &ex.o.view(),
                               &ex.lse.view(), &in.d_o.view(), &g.dq.view(), &g.dk.view(),
                               &g.dv.view(), &options, nullptr, 0));
  dilattn_plan_destroy(plan);
  CHECK_MSG(same_bits(plain.o, ex.o) && same_bits(plain.lse, ex.lse),
            "p = 0 through dilattn_forward_ex must give dilattn_forward's bits");
  CHECK_MSG(same_bits(plain_g.dq, g.dq) && same_bits(plain_g.dk, g.dk) &&
                same_bits(plain_g.dv, g.dv),
            "p = 0 through dilattn_backward_ex must give dilattn_backward's bits");
}

// SPEC 11 and 13: a dropped pair still adds 0 * v_j (NaN for an infinite v_j), and a NaN Q row
// makes its row NaN; the cpu backend's NaN must sit exactly where the reference's does.
void check_nonfinite_rows() {
  AttentionCase c = probe_base("dropped infinite v", 20, 37, 2, 2, DILATTN_F32, 0.5);
  CaseScope scope(c.name);
  Inputs in = make_inputs(c, 11, 1.0);
  const Call call{21, 4};
  const uint64_t threshold = dilattn::dropout_threshold(c.dropout_p);
  int64_t j = 0;  // the first key dropped for (b, h, i) = (0, 0, 0)
  while (j < c.Nk && dilattn::dropout_keep(call.seed, call.offset, 0, 0, c.H, 0, j, threshold)) ++j;
  if (!CHECK(j < c.Nk)) return;
  in.v.set(0, j, 0, 0, std::numeric_limits<double>::infinity());
  in.q.set(1, 5, 1, 3, std::numeric_limits<double>::quiet_NaN());
  const Forward want = forward_ex(c, in, DILATTN_BACKEND_REF, call);
  const Forward got = forward_ex(c, in, DILATTN_BACKEND_CPU, call);
  CHECK_MSG(std::isnan(got.o.at(0, 0, 0, 0)), "O[0, 0, 0, 0] = %g, want NaN",
            got.o.at(0, 0, 0, 0));
  CHECK_MSG(std::isnan(got.o.at(1, 5, 1, 0)), "O[1, 5, 1, 0] = %g, want NaN",
            got.o.at(1, 5, 1, 0));
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
  const Gradients want_g = backward_ex(c, in, want, DILATTN_BACKEND_REF, call);
  const Gradients got_g = backward_ex(c, in, want, DILATTN_BACKEND_CPU, call);
  CHECK_CLOSE("dQ", got_g.dq, want_g.dq, spec8::of(c.dtype));
  CHECK_CLOSE("dK", got_g.dk, want_g.dk, spec8::of(c.dtype));
  CHECK_CLOSE("dV", got_g.dv, want_g.dv, spec8::of(c.dtype));
}

// DILATTN_CPU_ISA names an instruction set this CPU lacks: every cpu plan is refused.
bool isa_unavailable() {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 1, 1, 4);
  dilattn_plan plan = nullptr;
  const dilattn_status s =
      dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU);
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
  for (const AttentionCase& c : probe_cases()) check_same_decisions(c);
  for (double p : {0.1, 0.5, 0.9}) check_fraction(p);
  for (const AttentionCase& c : value_cases()) check_values(c);
  check_p_zero_is_bitwise_no_dropout();
  check_nonfinite_rows();
  return finish("cpu_dropout_matches_reference");
}
