// test_cpu_variants.cpp - property: the cpu backend computes the SPEC 10 variants (sliding
// window, softcap, ALiBi per head and per batch x head, sinks with their gradient, packed
// batches) as the f64 reference does, within SPEC 8 (SPEC 12 for f64): every option alone and
// all together, on every kind (dense, causal with Nq != Nk, GQA, dilated in each head mode,
// block-sparse), in every dtype, forward (O, LSE) and backward (dQ, dK, dV, d_sinks) from the
// reference forward's O and LSE. Also: the same bits for 1, 2 and 7 threads (d_sinks included);
// a NaN or inf in Q, K or V reaches only the rows the window and the sequences connect it to
// (SPEC 13); a huge scale (the scale applied after the max) with softcap and ALiBi.
// An argument runs only the cases whose name contains it (meson runs them all).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../common/attention_run.h"
#include "../common/compare.h"

using namespace harness;

namespace {

const char* g_only = nullptr;  // the argument: run only the cases whose name holds it
bool selected(const std::string& name) {
  return g_only == nullptr || name.find(g_only) != std::string::npos;
}

struct Run {
  Forward fwd;
  Gradients grads;
  std::vector<double> d_sinks;
};

std::vector<double> sinks_of(const AttentionCase& c) {
  std::vector<double> s;
  for (int64_t h = 0; h < c.H; ++h) s.push_back(h == 1 ? -std::numeric_limits<double>::infinity()
                                                       : 0.5 - 0.4 * static_cast<double>(h));
  return s;
}

// Forward on `backend`, then the backward from `from` (the reference forward's O and LSE, or
// this run's own when from is null), through the _ex calls (the sinks ride on the options).
Run run(const AttentionCase& c, const Inputs& in, dilattn_backend backend, int32_t threads,
        const Forward* from, bool backward = true) {
  CaseScope scope(c.name);
  const std::vector<double> sinks = sinks_of(c);
  Run r{{c.q_like(in.q.dtype(), output_layout_of(c, backend)),
         c.lse_like(lse_dtype_of(backend, in.q.dtype()))},
        {c.q_like(in.q.dtype(), output_layout_of(c, backend)),
         c.kv_like(in.q.dtype(), output_layout_of(c, backend)),
         c.kv_like(in.q.dtype(), output_layout_of(c, backend))},
        std::vector<double>(static_cast<size_t>(c.H), std::nan(""))};
  r.fwd.o.poison();
  r.fwd.lse.poison();
  r.grads.dq.poison();
  r.grads.dk.poison();
  r.grads.dv.poison();
  AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  Plan plan;
  if (!CHECK_OK(plan.create(planned, backend, threads))) return r;
  dilattn_call_options options = dilattn_call_options_make();
  if (c.sinks) options.sinks = sinks.data();
  CHECK_OK(dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                              &r.fwd.o.view(), &r.fwd.lse.view(), &options, nullptr, 0));
  if (!backward) return r;
  const Forward& f = from != nullptr ? *from : r.fwd;
  if (c.sinks) options.d_sinks = r.d_sinks.data();
  CHECK_OK(dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &f.o.view(),
                               &f.lse.view(), &in.d_o.view(), &r.grads.dq.view(),
                               &r.grads.dk.view(), &r.grads.dv.view(), &options, nullptr, 0));
  return r;
}

void compare(const AttentionCase& c, const Inputs& in, int32_t threads) {
  if (!selected(c.name)) return;
  CaseScope scope(c.name);
  const Run want = run(c, in, DILATTN_BACKEND_REF, 1, nullptr);
  const Run got = run(c, in, DILATTN_BACKEND_CPU, threads, &want.fwd);
  const Tolerance tol = spec8::of(c.dtype);
  CHECK_CLOSE("O", got.fwd.o, want.fwd.o, tol);
  CHECK_CLOSE("LSE", got.fwd.lse, want.fwd.lse, spec8::lse(c.dtype));
  CHECK_CLOSE("dQ", got.grads.dq, want.grads.dq, tol);
  CHECK_CLOSE("dK", got.grads.dk, want.grads.dk, tol);
  CHECK_CLOSE("dV", got.grads.dv, want.grads.dv, tol);
  if (c.sinks) CHECK_CLOSE("d_sinks", got.d_sinks, want.d_sinks, tol);
}

// The kinds, at sizes that cross several 64-key tiles and (dilated) several segments.
std::vector<AttentionCase> kinds() {
  std::vector<AttentionCase> out;
  AttentionCase c;
  c.name = "dense"; c.B = 2; c.Nq = c.Nk = 150; c.H = 2; c.Hkv = 2; c.D = 24;
  out.push_back(c);
  c = AttentionCase{};
  c.name = "causal_gqa_nq_lt_nk"; c.Nq = 100; c.Nk = 170; c.H = 2; c.Hkv = 1; c.D = 40;
  c.causal = true;
  out.push_back(c);
  c = AttentionCase{};
  c.name = "gqa"; c.Nq = c.Nk = 130; c.H = 4; c.Hkv = 2; c.D = 32;
  out.push_back(c);
  for (dilattn_head_mode mode : {DILATTN_HEADS_MOD, DILATTN_HEADS_BLOCK, DILATTN_HEADS_GROUPS}) {
    c = AttentionCase{};
    c.name = mode == DILATTN_HEADS_MOD ? "dilated_mod_causal"
             : mode == DILATTN_HEADS_BLOCK ? "dilated_block" : "dilated_groups_causal";
    c.Nq = c.Nk = 300; c.H = 4; c.Hkv = 2; c.D = 16;
    c.kind = DILATTN_KIND_DILATED; c.segments = {64, 128, 300}; c.dilations = {1, 2, 4};
    c.head_mode = mode; c.causal = mode != DILATTN_HEADS_BLOCK;
    out.push_back(c);
  }
  c = AttentionCase{};
  c.name = "block_sparse_causal"; c.Nq = c.Nk = 260; c.H = 2; c.Hkv = 1; c.D = 24;
  c.kind = DILATTN_KIND_BLOCK_SPARSE; c.mask.bq = 32; c.mask.bk = 48; c.mask.heads = 2;
  c.mask.density = 0.6; c.causal = true;
  out.push_back(c);
  return out;
}

// SPEC 10.2: sequences of mixed lengths, one empty, one without keys (dilated: square ones).
void make_packed(AttentionCase* c) {
  const bool square = c->kind == DILATTN_KIND_DILATED;
  const std::vector<int64_t> q = {70, 0, 130, 45, 66};
  const std::vector<int64_t> k = square ? q : std::vector<int64_t>{90, 20, 130, 0, 40};
  c->cu_seqlens_q = {0};
  c->cu_seqlens_k = {0};
  for (size_t s = 0; s < q.size(); ++s) {
    c->cu_seqlens_q.push_back(c->cu_seqlens_q.back() + q[s]);
    c->cu_seqlens_k.push_back(c->cu_seqlens_k.back() + k[s]);
  }
  c->B = 1;
  c->Nq = c->cu_seqlens_q.back();
  c->Nk = c->cu_seqlens_k.back();
}

std::vector<double> slopes(int64_t count) {
  std::vector<double> s;
  for (int64_t x = 0; x < count; ++x) s.push_back(x % 3 == 2 ? -0.01 : 0.3 / (1.0 + static_cast<double>(x)));
  return s;
}

// Each option alone, then all of them, applied to a kind.
struct Option {
  const char* name;
  void (*apply)(AttentionCase*);
};
const Option kOptions[] = {
    {"window", [](AttentionCase* c) { c->window_left = 40; c->window_right = 10; }},
    {"window_left_only", [](AttentionCase* c) { c->window_left = 70; }},
    {"softcap", [](AttentionCase* c) { c->softcap = 0.8; }},
    {"alibi_per_head", [](AttentionCase* c) { c->alibi_slopes = slopes(c->H); }},
    {"alibi_per_batch_head", [](AttentionCase* c) { c->alibi_slopes = slopes(c->B * c->H); }},
    {"sinks", [](AttentionCase* c) { c->sinks = true; }},
    {"packed", [](AttentionCase* c) { make_packed(c); }},
    {"packed_alibi_per_sequence", [](AttentionCase* c) {
       make_packed(c);
       c->alibi_slopes = slopes(static_cast<int64_t>(c->cu_seqlens_q.size() - 1) * c->H);
     }},
    {"all", [](AttentionCase* c) {
       make_packed(c);
       c->window_left = 50; c->window_right = 0; c->softcap = 1.5; c->sinks = true;
       c->alibi_slopes = slopes(c->H);
     }},
};

AttentionCase with_option(const AttentionCase& kind, const Option& o, dilattn_dtype t) {
  AttentionCase c = kind;
  o.apply(&c);
  c.dtype = t;
  static const char* const names[] = {"f32", "f16", "bf16", "f64"};
  c.name += std::string("+") + o.name + "_" + names[t == DILATTN_F32 ? 0 : t == DILATTN_F16 ? 1
                                                    : t == DILATTN_BF16 ? 2 : 3];
  return c;
}

void check_same_bytes(const char* what, const std::string& name, int32_t threads,
                      const Tensor& got, const Tensor& want) {
  CHECK_MSG(got.bytes() == want.bytes(), "%s: %s with %d threads differs from 1 thread",
            name.c_str(), what, threads);
}

void deterministic_across_threads(const AttentionCase& c) {
  if (!selected(c.name)) return;
  CaseScope scope(c.name);
  const Inputs in = make_inputs(c, 5, 2.0);
  const Run one = run(c, in, DILATTN_BACKEND_CPU, 1, nullptr);
  for (int32_t threads : {2, 7}) {
    const Run r = run(c, in, DILATTN_BACKEND_CPU, threads, &one.fwd);
    check_same_bytes("O", c.name, threads, r.fwd.o, one.fwd.o);
    check_same_bytes("LSE", c.name, threads, r.fwd.lse, one.fwd.lse);
    check_same_bytes("dQ", c.name, threads, r.grads.dq, one.grads.dq);
    check_same_bytes("dK", c.name, threads, r.grads.dk, one.grads.dk);
    check_same_bytes("dV", c.name, threads, r.grads.dv, one.grads.dv);
    CHECK_MSG(std::memcmp(r.d_sinks.data(), one.d_sinks.data(),
                          sizeof(double) * r.d_sinks.size()) == 0,
              "%s: d_sinks with %d threads differs from 1 thread", c.name.c_str(), threads);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_only = argv[1];
  for (const AttentionCase& kind : kinds())
    for (const Option& o : kOptions)
      for (dilattn_dtype t : {DILATTN_F32, DILATTN_F16, DILATTN_BF16, DILATTN_F64}) {
        const AttentionCase c = with_option(kind, o, t);
        if (selected(c.name)) compare(c, make_inputs(c, 11, 2.0), 3);
      }

  {  // Bitwise the same for any thread count, with several work items per head.
    AttentionCase c;
    c.name = "threads_dense_window_softcap_alibi_sinks";
    c.B = 2; c.Nq = c.Nk = 700; c.H = 2; c.Hkv = 1; c.D = 32;
    c.window_left = 100; c.window_right = 30; c.softcap = 2; c.alibi_slopes = slopes(4);
    c.sinks = true;
    deterministic_across_threads(c);
    for (dilattn_dtype t : {DILATTN_F32, DILATTN_F64}) {
      for (const AttentionCase& kind : kinds()) {
        AttentionCase k = with_option(kind, kOptions[8], t);  // "all"
        k.name = "threads_" + k.name;
        deterministic_across_threads(k);
      }
    }
  }

  {  // SPEC 13: nonfinite inputs reach only the rows the window and the sequences connect.
    for (bool packed : {false, true}) {
      AttentionCase c;
      c.name = packed ? "nan_packed_window" : "nan_window";
      c.Nq = c.Nk = 200; c.H = 2; c.Hkv = 1; c.D = 16;
      c.window_left = 20; c.window_right = 5; c.softcap = 3; c.sinks = true;
      if (packed) make_packed(&c);
      for (dilattn_dtype t : {DILATTN_F32, DILATTN_F64}) {
        c.dtype = t;
        Inputs in = make_inputs(c, 7, 2.0);
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const double inf = std::numeric_limits<double>::infinity();
        in.q.set_flat((10 * c.H + 1) * c.D + 3, nan);   // row 10, head 1
        in.k.set_flat((60 * c.Hkv) * c.D + 2, nan);     // key 60
        in.v.set_flat((120 * c.Hkv) * c.D + 5, inf);    // key 120
        in.d_o.set_flat((150 * c.H) * c.D + 1, -inf);   // row 150, head 0
        compare(c, in, 2);
      }
    }
  }

  {  // A huge scale (post != 1 in softmax_rules.h) with softcap and ALiBi: forward.
    AttentionCase c;
    c.name = "huge_scale_softcap_alibi";
    c.Nq = c.Nk = 130; c.H = 2; c.Hkv = 2; c.D = 8; c.scale = 1e6;
    c.softcap = 4; c.alibi_slopes = slopes(2); c.window_left = 60;
    for (dilattn_dtype t : {DILATTN_F32, DILATTN_F64}) {
      c.dtype = t;
      if (!selected(c.name)) break;
      const Inputs in = make_inputs(c, 9, 1.0);
      const Run want = run(c, in, DILATTN_BACKEND_REF, 1, nullptr, false);
      const Run got = run(c, in, DILATTN_BACKEND_CPU, 2, nullptr, false);
      CHECK_CLOSE("O", got.fwd.o, want.fwd.o, spec8::of(t));
      CHECK_CLOSE("LSE", got.fwd.lse, want.fwd.lse, spec8::lse(t));
    }
  }
  return finish("cpu_variants_match_reference");
}
