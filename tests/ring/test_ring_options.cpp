// test_ring_options.cpp - SPEC 5 with the options of SPEC 10 and 11: a ring over the ref backend
// gives the single-process result (dilattn_forward_ex / dilattn_backward_ex on ref) with a
// sliding window, a softcap, ALiBi (per head and per batch element and head), sinks and
// dropout, each alone and all together, for every kind of ring_cases() (dense, GQA, causal,
// N < P, dilated in three head modes, block-sparse per head and causal), P = 1..4, both
// splits, forward and backward, f64:
//   each_option_matches_single_process (ring_checks.h check_option_cases): O, LSE, dQ, dK, dV
//     within the f64 ring bounds of
//     test_ring_forward.cpp / test_ring_backward.cpp; with sinks, every rank's d_sinks equals
//     rank 0's bit for bit and the single-process d_sinks within 1e-11.
//   each_option_on_cpu_matches_single_process: the same rings on the cpu backend, whose placed
//     sub-problems (SPEC 5.5) cut windows and causal rules, draw dropout and measure ALiBi at
//     whole-sequence positions, within SPEC 12's f64 bound (1e-10).
//   dropout_is_the_same_draw_on_every_ring: dropout's O differs from the O without dropout (the
//     ring applies it), and rings of P = 2 and P = 3 give the same O and gradients within 1e-12
//     (the draws take global positions, SPEC 11.1).
//   plain_calls_refuse_what_needs_options: dilattn_ring_forward / _backward on a plan with
//     dropout or sinks: DILATTN_ERROR_INVALID_VALUE naming the _ex call, on every rank.
//   packed_batch_refused: a packed plan: DILATTN_ERROR_UNSUPPORTED naming "a packed batch
//     (varlen)" on every rank.
#include <cstdio>
#include <cstring>
#include <string>

#include "ring_checks.h"

using namespace harness;

namespace {

const Tolerance kGrad{1e-11, 1e-11};
const Tolerance kPOnP{1e-12, 1e-12};  // two rings: both merge orders round alike

void each_option_matches_single_process() {
  ringtest::check_option_cases(ringtest::rings(1, 4, DILATTN_BACKEND_REF));
}

void each_option_on_cpu_matches_single_process() {
  ringtest::check_option_cases(ringtest::rings(1, 4, DILATTN_BACKEND_CPU), ringtest::spec12_bounds());
}

double largest_difference(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t e = 0; e < a.count(); ++e) worst = std::fmax(worst, std::fabs(a.flat(e) - b.flat(e)));
  return worst;
}

void dropout_is_the_same_draw_on_every_ring() {
  for (AttentionCase c : ringtest::ring_cases(DILATTN_F64)) {
    if (!ringtest::ring_supports(c, 3)) continue;
    ringtest::CallOptions call;
    ringtest::add_dropout(&c, &call);
    CaseScope scope(c.name + " dropout on P = 2 and 3");
    const Inputs in = make_inputs(c, 23, 2.0);
    AttentionCase without = c;
    without.dropout_p = 0;
    const Forward plain = run_forward(without, in, DILATTN_BACKEND_REF, 1);
    const ringtest::Ring two{2, DILATTN_RING_ZIGZAG, DILATTN_BACKEND_REF},
        three{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
    const Forward a = ringtest::ring_forward(c, in, two, &call);
    const Forward b = ringtest::ring_forward(c, in, three, &call);
    CHECK_MSG(largest_difference(a.o, plain.o) > 1e-3,
              "O with dropout p = 0.3 is within %g of O without it", largest_difference(a.o, plain.o));
    CHECK_CLOSE("O, P = 3 against P = 2", b.o, a.o, kPOnP);
    const Gradients ga = ringtest::ring_backward(c, in, a, two, -1, &call);
    const Gradients gb = ringtest::ring_backward(c, in, a, three, -1, &call);
    CHECK_CLOSE("dQ, P = 3 against P = 2", gb.dq, ga.dq, kGrad);
    CHECK_CLOSE("dK, P = 3 against P = 2", gb.dk, ga.dk, kGrad);
    CHECK_CLOSE("dV, P = 3 against P = 2", gb.dv, ga.dv, kGrad);
  }
}

// Every rank of a 2-rank ring calls `body`; each returns `want` with a message holding `needle`
// (the failing rank's own status and message, the other's COMM naming it).
void every_rank_refused(const char* what, const AttentionCase& c, bool backward,
                        dilattn_status want, const char* needle) {
  CaseScope scope(what);
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return;
  const ringtest::Ring ring{2, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
  const Inputs in = make_inputs(c, 3, 1.0);
  std::vector<std::string> messages(2);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    const ringtest::Rows rows = ringtest::rows_of(c.Nq, ring, r);
    const Tensor q = ringtest::shard_of(in.q, rows, false), k = ringtest::shard_of(in.k, rows, false),
                 v = ringtest::shard_of(in.v, rows, false);
    Tensor o = ringtest::shard_of(in.q, rows, false), d_o = ringtest::shard_of(in.q, rows, false),
           dq = ringtest::shard_of(in.q, rows, false), dk = ringtest::shard_of(in.k, rows, false),
           dv = ringtest::shard_of(in.v, rows, false);
    Tensor lse(DILATTN_F64, c.B, c.H, rows.total(), 1);
    const dilattn_status s =
        backward ? dilattn_ring_backward(plan.get(), comm, ring.split, &q.view(), &k.view(),
                                         &v.view(), &o.view(), &lse.view(), &d_o.view(),
                                         &dq.view(), &dk.view(), &dv.view())
                 : dilattn_ring_forward(plan.get(), comm, ring.split, &q.view(), &k.view(),
                                        &v.view(), &o.view(), &lse.view());
    messages[static_cast<size_t>(r)] = dilattn_last_error();
    return s;
  });
  for (size_t r = 0; r < 2; ++r)
    CHECK_MSG((status[r] == want || status[r] == DILATTN_ERROR_COMM) &&
                  messages[r].find(needle) != std::string::npos,
              "rank %zu: %s (%s), want %s naming \"%s\"", r, dilattn_status_string(status[r]),
              messages[r].c_str(), dilattn_status_string(want), needle);
  CHECK_MSG(status[0] == want || status[1] == want, "no rank returned %s itself",
            dilattn_status_string(want));
}

AttentionCase small_case() {
  AttentionCase c;
  c.name = "dense_small";
  c.Nq = c.Nk = 16;
  c.H = 2;
  c.Hkv = 1;
  c.D = 4;
  c.dtype = DILATTN_F64;
  return c;
}

void plain_calls_refuse_what_needs_options() {
  for (bool backward : {false, true}) {
    AttentionCase c = small_case();
    c.dropout_p = 0.5;
    every_rank_refused("dropout, plain call", c, backward, DILATTN_ERROR_INVALID_VALUE,
                       backward ? "dilattn_ring_backward_ex" : "dilattn_ring_forward_ex");
    c = small_case();
    c.sinks = true;
    every_rank_refused("sinks, plain call", c, backward, DILATTN_ERROR_INVALID_VALUE,
                       backward ? "dilattn_ring_backward_ex" : "dilattn_ring_forward_ex");
  }
}

void packed_batch_refused() {
  for (bool backward : {false, true}) {
    AttentionCase c = small_case();
    c.cu_seqlens_q = c.cu_seqlens_k = {0, 5, 16};
    every_rank_refused("packed batch", c, backward, DILATTN_ERROR_UNSUPPORTED,
                       "a packed batch (varlen)");
  }
}

}  // namespace

int main() {
  each_option_matches_single_process();
  each_option_on_cpu_matches_single_process();
  dropout_is_the_same_draw_on_every_ring();
  plain_calls_refuse_what_needs_options();
  packed_batch_refused();
  return finish("ring_options_match_single_process");
}
