// reference_forward.cpp - the f64 reference forward: SPEC 2 (dense softmax), 3 (dilated
// branches combined by LSE), 4 (block-sparse), 10.1 (window, softcap, ALiBi), 10.2 (packed
// batches: each row within its own sequence), 10.3 (sinks, in the merge) and 11 (dropout),
// written to be read, not to be fast.
//
// For each (b, h, i): split A(i) into softmax groups (reference_key_sets.cpp), compute each group's
// (O^g, LSE^g) exactly as SPEC 2 writes it, then combine the groups as SPEC 3 writes it.
// Maxima and the empty-row rule come from lib/softmax_rules.h: a NaN score makes the row NaN
// (max_nan keeps it where std::fmax would drop it), and a group whose scores are all -inf
// counts as reaching nothing (O = 0, LSE = -inf), never as -inf - -inf = NaN.
// Checked by tests/reference/ (hand-computed cases, identities) and tests/python/
// (an independent numpy implementation).
#include <cmath>
#include <limits>

#include "backend.h"
#include "reference_rows.h"
#include "softmax_rules.h"

namespace dilattn::ref {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Calls f(j) for every key of a group, in order, duplicates included.
template <class F>
void for_each_key(const KeyGroup& group, F&& f) {
  for (const KeyProgression& kp : group)
    for (int64_t t = 0; t < kp.count; ++t) f(kp.first + t * kp.step);
}

// SPEC 2 for one softmax group: S_j = scale <q, k_j> (softcapped and biased, SPEC 10.1), LSE = log sum exp S_j,
// O = sum exp(S_j - LSE) v_j. The max is subtracted first so exp never overflows, and the
// weights are exp(S_j - max) / sum rather than exp(S_j - LSE): for scores near 1e38 (a huge
// finite scale) max + log(sum) rounds back to max in f64 and exp(S_j - LSE) would drop the sum.
// With an active dropout mask each weight is multiplied by its factor M_ij (SPEC 11): a
// dropped key adds 0 * v_j, as the formula writes it, and LSE is the softmax's, before dropout.
void attend_group(const Problem& p, const double* q_row, const dilattn_tensor& k,
                  const dilattn_tensor& v, int64_t b, const SequenceFrame& f, int64_t h,
                  int64_t i, int64_t kvh, const KeyGroup& group, const DropoutMask& dropout,
                  double* o, double* lse) {
  const int64_t D = p.D;
  std::vector<double> key(static_cast<size_t>(D)), scores;
  for_each_key(group, [&](int64_t j) {
    load_row(k, b, j, kvh, D, key.data());
    scores.push_back(variant_score(p, f, h, i, j, p.scale * dot(q_row, key.data(), D)));
  });
  double max_score = kNegInf;
  for (double s : scores) max_score = max_nan(max_score, s);
  for (int64_t d = 0; d < D; ++d) o[d] = 0;
  if (row_is_empty(max_score)) {  // every score -inf: no weight anywhere
    *lse = kNegInf;
    return;
  }
  double sum = 0;
  for (double s : scores) sum += std::exp(s - max_score);
  *lse = max_score + std::log(sum);

  std::vector<double> value(static_cast<size_t>(D));
  size_t n = 0;
  for_each_key(group, [&](int64_t j) {
    double weight = std::exp(scores[n++] - max_score) / sum;
    if (dropout.active) weight *= dropout.factor(f, h, i, j);
    load_row(v, b, j, kvh, D, value.data());
    for (int64_t d = 0; d < D; ++d) o[d] += weight * value[d];
  });
}

}  // namespace

void forward_row(const Problem& p, const dilattn_tensor& q, const dilattn_tensor& k,
                 const dilattn_tensor& v, int64_t b, int64_t h, int64_t i,
                 const DropoutMask& dropout, double sink, double* o, double* lse) {
  const int64_t D = p.D;
  const int64_t kvh = kv_head_of(h, p.H, p.Hkv);
  std::vector<KeyGroup> groups;
  row_key_groups(p, h, i, &groups);
  const SequenceFrame f = p.frame_of_row(b, i);

  std::vector<double> q_row(static_cast<size_t>(D));
  load_row(q, b, i, h, D, q_row.data());
  std::vector<double> group_o(groups.size() * static_cast<size_t>(D));
  std::vector<double> group_lse(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    attend_group(p, q_row.data(), k, v, b, f, h, i, kvh, groups[g], dropout, &group_o[g * D],
                 &group_lse[g]);

  // SPEC 3: LSE = log sum_g exp(LSE^g), O = sum_g exp(LSE^g - LSE) O^g, the weights formed as
  // exp(LSE^g - max) / sum for the reason attend_group gives. SPEC 10.3: the sink is one more
  // term of the sum, once per row after the merge, with no value (-inf when there is none).
  // No group and no sink: O = 0, LSE = -inf (SPEC 2, empty A(i)); no group but a sink:
  // O = 0, LSE = sink.
  double max_lse = sink;
  for (double l : group_lse) max_lse = max_nan(max_lse, l);
  for (int64_t d = 0; d < D; ++d) o[d] = 0;
  if (row_is_empty(max_lse)) {  // no group, or none that reached anything, and no sink
    *lse = kNegInf;
    return;
  }
  double sum = std::exp(sink - max_lse);
  for (double l : group_lse) sum += std::exp(l - max_lse);
  *lse = max_lse + std::log(sum);
  for (size_t g = 0; g < groups.size(); ++g) {
    const double weight = std::exp(group_lse[g] - max_lse) / sum;
    for (int64_t d = 0; d < D; ++d) o[d] += weight * group_o[g * D + d];
  }
}

WorkspaceBytes workspace_bytes(const Problem& p) {
  // Forward needs only per-row scratch (allocated per row). Backward accumulates dQ, dK and
  // dV in f64 before rounding them once into the caller's dtype.
  WorkspaceBytes w;
  w.backward = sizeof(double) * static_cast<size_t>(p.B * p.Nq * p.H * p.D + 2 * p.B * p.Nk * p.Hkv * p.D);
  return w;
}

dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  std::vector<double> o(static_cast<size_t>(p.D));
  const DropoutMask dropout(p, a.dropout);
  if (a.progress) a.progress->begin(p.B * p.H * p.Nq);  // SPEC 14.11: one unit per row
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Nq; ++i) {
        double lse;
        forward_row(p, *a.q, *a.k, *a.v, b, h, i, dropout, sink_of(a.sinks, h), o.data(),
                    &lse);
        store_row(*a.o, b, i, h, p.D, o.data());
        if (a.lse) store_element(a.lse->data, a.lse->dtype, lse_offset(*a.lse, b, h, i), lse);
        if (a.progress && !a.progress->step()) return DILATTN_SUCCESS;  // dispatch.cpp reports it
      }
  return DILATTN_SUCCESS;
}

dilattn_status forward_rows(const Problem& p, const dilattn_tensor& q, const dilattn_tensor& k,
                            const dilattn_tensor& v, const int64_t* rows, int64_t num_rows,
                            double* o_rows, double* lse_rows) {
  const DropoutMask no_dropout;  // dispatch.cpp refuses a dropout plan here (SPEC 11.2)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t r = 0; r < num_rows; ++r) {
        double lse;
        double* o = o_rows + ((b * num_rows + r) * p.H + h) * p.D;
        forward_row(p, q, k, v, b, h, rows[r], no_dropout, kNegInf, o, &lse);  // no sinks here
        if (lse_rows) lse_rows[(b * p.H + h) * num_rows + r] = lse;
      }
  return DILATTN_SUCCESS;
}

}  // namespace dilattn::ref
