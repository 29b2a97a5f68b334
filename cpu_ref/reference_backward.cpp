// reference_backward.cpp - the f64 reference backward, SPEC 6 as written:
//
//   D_i = <dO_i, O_i>;  for every occurrence of j in A(i):  P_ij = exp(S_ij - LSE_i),
//   dV_j += P_ij dO_i,  dS_ij = P_ij (<dO_i, v_j> - D_i),
//   dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i.
//
// SPEC 10.1: S_ij is the softcapped, ALiBi-biased score (the window only selects the keys);
// the softcap multiplies dS by its derivative 1 - tanh^2(scale <q, k> / c) before dQ and dK,
// and the ALiBi bias has no gradient. SPEC 10.2: in a packed batch a row's keys all lie in its
// own sequence (row_key_groups), so a key's gradient comes from its sequence's rows alone.
//
// LSE is the combined one the forward returned, so dilated branches need no extra weights: a
// key reached by two branches is two occurrences. dK and dV sum over the query heads of a kv
// head (GQA). Accumulation is f64 in the workspace, in a fixed order: deterministic.
// Dropout (SPEC 11.3) regenerates each pair's factor M_ij from the call's seed and offset:
//   dV_j += P_ij M_ij dO_i,  dS_ij = P_ij (M_ij <dO_i, v_j> - D_i),  D_i = <dO_i, O_i> of the
//   dropped output the forward returned.
// SPEC 10.3: P_ij uses the forward's LSE, which holds the sink, so the pair terms are as above;
// the sink adds d sigma_h = -sum_i exp(sigma_h - LSE_i) D_i over the rows of head h.
// Checked by tests/reference/test_gradients_finite_difference.cpp (finite differences in f64).
#include <cmath>

#include "backend.h"
#include "reference_rows.h"
#include "softmax_rules.h"

namespace dilattn::ref {

dilattn_status backward(const Problem& p, const BackwardArgs& a) {
  const int64_t D = p.D;
  // f64 accumulators, contiguous [B, N, heads, D], carved from the workspace.
  double* dq_acc = static_cast<double*>(a.workspace);
  double* dk_acc = dq_acc + p.B * p.Nq * p.H * D;
  double* dv_acc = dk_acc + p.B * p.Nk * p.Hkv * D;
  const size_t total = static_cast<size_t>(p.B * p.Nq * p.H * D + 2 * p.B * p.Nk * p.Hkv * D);
  for (size_t x = 0; x < total; ++x) dq_acc[x] = 0;
  auto q_at = [&](int64_t b, int64_t i, int64_t h) { return ((b * p.Nq + i) * p.H + h) * D; };
  auto kv_at = [&](int64_t b, int64_t j, int64_t g) { return ((b * p.Nk + j) * p.Hkv + g) * D; };

  const DropoutMask dropout(p, a.dropout);
  std::vector<double> q_row(D), o_row(D), do_row(D), k_row(D), v_row(D);
  std::vector<double> d_sink_acc(static_cast<size_t>(p.H), 0.0);  // SPEC 10.3, per query head
  std::vector<KeyGroup> groups;
  // The terms of row i of head h (batch b), accumulated in place.
  auto add_row = [&](int64_t b, int64_t h, int64_t i) {
    const int64_t kvh = kv_head_of(h, p.H, p.Hkv);
    const double lse = load_element(a.lse->data, a.lse->dtype, lse_offset(*a.lse, b, h, i));
    // A row the forward found empty (LSE = -inf) has no term: P would be -inf - -inf.
    if (row_is_empty(lse)) return;
    row_key_groups(p, h, i, &groups);
    // A row with no key has no pair term; with sinks it still has the sink's (O = 0 there
    // when O is the forward's, so that term is 0 too).
    if (groups.empty() && a.sinks.d_values == nullptr) return;
    const SequenceFrame f = p.frame_of_row(b, i);  // SPEC 10.2: the row's sequence
    load_row(*a.q, b, i, h, D, q_row.data());
    load_row(*a.o, b, i, h, D, o_row.data());
    load_row(*a.d_o, b, i, h, D, do_row.data());
    const double D_i = dot(do_row.data(), o_row.data(), D);
    // SPEC 10.3: dO_i / dsigma_h = -exp(sigma_h - LSE_i) O_i.
    if (a.sinks.d_values != nullptr)
      d_sink_acc[static_cast<size_t>(h)] -= std::exp(a.sinks.values[h] - lse) * D_i;
    double* dq_i = dq_acc + q_at(b, i, h);
    for (const KeyGroup& group : groups)
      for (const KeyProgression& kp : group)
        for (int64_t t = 0; t < kp.count; ++t) {
          const int64_t j = kp.first + t * kp.step;
          load_row(*a.k, b, j, kvh, D, k_row.data());
          load_row(*a.v, b, j, kvh, D, v_row.data());
          const double s = p.scale * dot(q_row.data(), k_row.data(), D);
          const double P = std::exp(variant_score(p, f, h, i, j, s) - lse);
          double dP = dot(do_row.data(), v_row.data(), D);
          double P_kept = P;  // P_ij M_ij: the weight v_j had in O_i
          if (dropout.active) {
            const double factor = dropout.factor(f, h, i, j);
            dP *= factor;
            P_kept *= factor;
          }
          // SPEC 10.1: through the softcap, dS picks up its slope 1 - tanh^2.
          const double dS = P * (dP - D_i) * softcap_slope(s, p.softcap);
          double* dk_j = dk_acc + kv_at(b, j, kvh);
          double* dv_j = dv_acc + kv_at(b, j, kvh);
          for (int64_t d = 0; d < D; ++d) {
            dv_j[d] += P_kept * do_row[d];
            dq_i[d] += p.scale * dS * k_row[d];
            dk_j[d] += p.scale * dS * q_row[d];
          }
        }
  };
  if (a.progress) a.progress->begin(p.B * p.H * p.Nq);  // SPEC 14.11: one unit per row
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        add_row(b, h, i);
        if (a.progress && !a.progress->step()) return DILATTN_SUCCESS;  // dispatch.cpp reports it
      }

  if (a.sinks.d_values != nullptr)
    for (int64_t h = 0; h < p.H; ++h) a.sinks.d_values[h] = d_sink_acc[static_cast<size_t>(h)];
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t i = 0; i < p.Nq; ++i)
      for (int64_t h = 0; h < p.H; ++h) store_row(*a.dq, b, i, h, D, dq_acc + q_at(b, i, h));
    for (int64_t j = 0; j < p.Nk; ++j)
      for (int64_t g = 0; g < p.Hkv; ++g) {
        store_row(*a.dk, b, j, g, D, dk_acc + kv_at(b, j, g));
        store_row(*a.dv, b, j, g, D, dv_acc + kv_at(b, j, g));
      }
  }
  return DILATTN_SUCCESS;
}

}  // namespace dilattn::ref
