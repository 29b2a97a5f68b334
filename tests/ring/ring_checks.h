// ring_checks.h - the ring's agreement with the single-device reference over every case of
// ring_cases(), for a list of rings (P, split, backend, where the ranks run). Shared by the
// threads tests (test_ring_forward.cpp, test_ring_backward.cpp: P = 1..4) and the MPI tests
// (tests/ring/mpi/: P = the MPI world size), so both transports pass the same checks; with the
// options of SPEC 10 and 11 too (check_option_cases).
#ifndef DILATTN_TESTS_RING_CHECKS_H
#define DILATTN_TESTS_RING_CHECKS_H

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ring_test_util.h"

namespace ringtest {

// Every P in [p_min, p_max], both splits, on `backend`, ranks on `host` (nullptr: threads).
inline std::vector<Ring> rings(int32_t p_min, int32_t p_max, dilattn_backend backend,
                               const RankHost* host = nullptr) {
  std::vector<Ring> out;
  for (int32_t P = p_min; P <= p_max; ++P)
    for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
      Ring ring{P, split, backend};
      ring.host = host;
      out.push_back(ring);
    }
  return out;
}

// O and LSE of every case on every ring against the reference's (SPEC 5, 8).
inline void check_forward_cases(dilattn_dtype dtype, const std::vector<Ring>& on,
                                harness::Tolerance tol, harness::Tolerance lse_tol) {
  using namespace harness;
  for (const AttentionCase& c : ring_cases(dtype)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 7, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    for (const Ring& ring : on) {
      if (!ring_supports(c, ring.P)) continue;
      const Forward got = ring_forward(c, in, ring);
      CaseScope named(label(c, ring));
      CHECK_CLOSE("O", got.o, want.o, tol);
      CHECK_CLOSE("LSE", got.lse, want.lse, lse_tol);
    }
  }
}

// dQ, dK and dV of every case on every ring against the reference backward (SPEC 5, 6, 8).
inline void check_backward_cases(dilattn_dtype dtype, const std::vector<Ring>& on,
                                 harness::Tolerance tol) {
  using namespace harness;
  for (const AttentionCase& c : ring_cases(dtype)) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 11, 2.0);
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
    for (const Ring& ring : on) {
      if (!ring_supports(c, ring.P)) continue;
      const Gradients got = ring_backward(c, in, fwd, ring);
      CaseScope named(label(c, ring));
      CHECK_CLOSE("dQ", got.dq, want.dq, tol);
      CHECK_CLOSE("dK", got.dk, want.dk, tol);
      CHECK_CLOSE("dV", got.dv, want.dv, tol);
    }
  }
}

// ================================================================ SPEC 10 and 11 options
// The ring with the options of SPEC 10 and 11 against the single-process call with the same
// options (dilattn_forward_ex / dilattn_backward_ex on ref), shared by
// tests/ring/test_ring_options.cpp (threads, P = 1..4) and tests/ring/mpi/ (P = world size).

// One option (or all of them) added to a case: name and how.
struct Option {
  const char* name;
  void (*apply)(AttentionCase* c, CallOptions* call);
};

inline void add_window(AttentionCase* c, CallOptions*) {
  // Reaches across shards on every P (shards of N / 4 >= 19 rows for N >= 77), but not all.
  c->window_left = c->Nq / 5;
  c->window_right = c->causal ? 0 : c->Nq / 9;
}
inline void add_softcap(AttentionCase* c, CallOptions*) { c->softcap = 1.5; }
inline void add_alibi_per_head(AttentionCase* c, CallOptions*) {
  c->alibi_slopes.clear();
  for (int64_t h = 0; h < c->H; ++h) c->alibi_slopes.push_back(0.05 * double(h + 1));
}
inline void add_alibi_per_batch_and_head(AttentionCase* c, CallOptions*) {
  c->alibi_slopes.clear();
  for (int64_t x = 0; x < c->B * c->H; ++x) c->alibi_slopes.push_back(0.03 * double(x % 5) - 0.02);
}
inline void add_sinks(AttentionCase* c, CallOptions* call) {
  c->sinks = true;
  call->sinks.clear();
  for (int64_t h = 0; h < c->H; ++h) call->sinks.push_back(h == 1 ? -INFINITY : 0.4 * double(h) - 0.3);
}
inline void add_dropout(AttentionCase* c, CallOptions* call) {
  c->dropout_p = 0.3;
  call->seed = 0x1234567890abcdefull;
  call->offset = 17;
}
inline void add_all(AttentionCase* c, CallOptions* call) {
  add_window(c, call);
  add_softcap(c, call);
  add_alibi_per_head(c, call);
  add_sinks(c, call);
  add_dropout(c, call);
}

const Option kOptions[] = {
    {"window", add_window},       {"softcap", add_softcap},
    {"alibi_per_head", add_alibi_per_head},
    {"alibi_per_batch_and_head", add_alibi_per_batch_and_head},
    {"sinks", add_sinks},         {"dropout", add_dropout},
    {"all_together", add_all},
};

// The single-process ref result with the call's options: O, LSE (f64), gradients, d_sinks.
struct Single {
  harness::Forward fwd;
  harness::Gradients grad;
  std::vector<double> d_sinks;
};

inline Single single_process(const AttentionCase& c, const harness::Inputs& in,
                             const CallOptions& call) {
  const dilattn_dtype t = in.q.dtype();
  Single r{{c.q_like(t), c.lse_like(DILATTN_F64)},
           {c.q_like(t), c.kv_like(t), c.kv_like(t)},
           std::vector<double>(static_cast<size_t>(c.H), NAN)};
  harness::Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return r;
  const dilattn_call_options options = call.make(r.d_sinks.data());
  CHECK_OK(dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                              &r.fwd.o.view(), &r.fwd.lse.view(), &options, nullptr, 0));
  CHECK_OK(dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                               &r.fwd.o.view(), &r.fwd.lse.view(), &in.d_o.view(),
                               &r.grad.dq.view(), &r.grad.dk.view(), &r.grad.dv.view(), &options,
                               nullptr, 0));
  return r;
}

inline void check_d_sinks(const RankHost& host, const std::vector<std::vector<double>>& per_rank,
                          const std::vector<double>& want, double tol = 1e-11) {
  size_t first = per_rank.size();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (!host.hosts(static_cast<int32_t>(r))) continue;
    if (first == per_rank.size()) first = r;
    for (size_t h = 0; h < want.size(); ++h) {
      CHECK_MSG(std::memcmp(&per_rank[r][h], &per_rank[first][h], sizeof(double)) == 0,
                "d_sinks[%zu]: rank %zu has %.17g, rank %zu %.17g", h, r, per_rank[r][h], first,
                per_rank[first][h]);
      CHECK_MSG(std::fabs(per_rank[r][h] - want[h]) <= tol * (1 + std::fabs(want[h])),
                "d_sinks[%zu]: rank %zu has %.17g, single process %.17g", h, r, per_rank[r][h],
                want[h]);
    }
  }
}

// The bounds of a ring of f64 cases against the single-process ref call: the ref backend's
// (test_ring_forward.cpp, test_ring_backward.cpp), and SPEC 12's f64 fast path for cpu.
// dropout_widens_dq_dk: dQ's and dK's bound times 1.25 / (1 - p) in a case with dropout (SPEC 12:
// a tensor-core backward rounds dS, which holds M dP, up to 1 / (1 - p) times the dS without it,
// or -P D for a dropped pair).
struct OptionBounds {
  harness::Tolerance o{1e-13, 1e-12}, lse{1e-12, 0}, grad{1e-11, 1e-11};
  double d_sinks = 1e-11;
  bool dropout_widens_dq_dk = false;
};
inline OptionBounds spec12_bounds() {
  return OptionBounds{{1e-10, 1e-10}, {1e-10, 1e-10}, {1e-10, 1e-10}, 1e-10};
}

// Every case of `cases` (ring_cases() in f64 by default) with each option (and all together)
// on every ring, against the single-process ref call with the same options and inputs (within
// `bounds`); with sinks, each hosted rank's d_sinks against the single-process d_sinks and, bit
// for bit, the first hosted rank's.
inline void check_option_cases(const std::vector<Ring>& on, const OptionBounds& bounds = {},
                               const std::vector<AttentionCase>& cases = ring_cases(DILATTN_F64)) {
  using namespace harness;
  const Tolerance o_tol = bounds.o, lse_tol = bounds.lse, grad_tol = bounds.grad;
  for (const Option& option : kOptions)
    for (AttentionCase c : cases) {
      CallOptions call;
      option.apply(&c, &call);
      c.name += std::string(" + ") + option.name;
      CaseScope scope(c.name);
      const Inputs in = make_inputs(c, 21, 2.0);
      const Single want = single_process(c, in, call);
      for (const Ring& ring : on) {
        if (!ring_supports(c, ring.P)) continue;
        const Forward got = ring_forward(c, in, ring, &call);
        std::vector<std::vector<double>> d_sinks;
        const Gradients got_g = ring_backward(c, in, want.fwd, ring, -1, &call, &d_sinks);
        CaseScope named(label(c, ring));
        CHECK_CLOSE("O", got.o, want.fwd.o, o_tol);
        CHECK_CLOSE("LSE", got.lse, want.fwd.lse, lse_tol);
        const double widen =
            bounds.dropout_widens_dq_dk ? spec8::dropout_ds_widening(c.dropout_p) : 1.0;
        const Tolerance dq_dk_tol{grad_tol.atol * widen, grad_tol.rtol * widen};
        CHECK_CLOSE("dQ", got_g.dq, want.grad.dq, dq_dk_tol);
        CHECK_CLOSE("dK", got_g.dk, want.grad.dk, dq_dk_tol);
        CHECK_CLOSE("dV", got_g.dv, want.grad.dv, grad_tol);
        if (c.sinks) check_d_sinks(host_of(ring), d_sinks, want.d_sinks, bounds.d_sinks);
      }
    }
}
}  // namespace ringtest

#endif  // DILATTN_TESTS_RING_CHECKS_H
