// reference_rows.h - pieces of the f64 reference shared by its forward and backward files.
#ifndef DILATTN_REFERENCE_ROWS_H
#define DILATTN_REFERENCE_ROWS_H

#include <limits>
#include <vector>

#include "backend.h"
#include "dropout_rng.h"
#include "dtype_convert.h"
#include "reference_key_sets.h"
#include "score_rules.h"

namespace dilattn::ref {

// Row [b, n, h, :] of a tensor, read as f64.
inline void load_row(const dilattn_tensor& t, int64_t b, int64_t n, int64_t h, int64_t D,
                     double* out) {
  const int64_t base = element_offset(t, b, n, h, 0);
  for (int64_t d = 0; d < D; ++d) out[d] = load_element(t.data, t.dtype, base + d * t.strides[3]);
}

inline void store_row(const dilattn_tensor& t, int64_t b, int64_t n, int64_t h, int64_t D,
                      const double* row) {
  const int64_t base = element_offset(t, b, n, h, 0);
  for (int64_t d = 0; d < D; ++d) store_element(t.data, t.dtype, base + d * t.strides[3], row[d]);
}

inline double dot(const double* a, const double* b, int64_t D) {
  double s = 0;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// SPEC 10.1: the score S_ij from the scaled product s = scale * <q_i, k_j>: softcapped, then
// the ALiBi bias of (sequence, h) added, its distance taken in the sequence's own positions
// (SPEC 10.2; f = p.frame_of_row(b, i), i and j positions of the tensors), or in the whole
// problem's for a placed ring sub-problem (SPEC 5). Without either option, s itself.
inline double variant_score(const Problem& p, const SequenceFrame& f, int64_t h, int64_t i,
                            int64_t j, double s) {
  double score = softcapped(s, p.softcap);
  if (!p.alibi_slopes.empty())
    score += alibi_bias(p.alibi_slope(f.seq, h), p.row_position(f, i), p.key_position(f, j),
                        f.nq, f.nk);
  return score;
}

// LSE entry [b, h, i] of an f32 or f64 tensor.
inline int64_t lse_offset(const dilattn_tensor& t, int64_t b, int64_t h, int64_t i) {
  return element_offset(t, b, h, i, 0);
}

// SPEC 11: the dropout factor M_ij = keep_ij / (1 - p) of a score, from lib/dropout_rng.h.
// Inactive (every factor 1, never applied) for a plan with p = 0, so that p = 0 is no dropout
// bitwise.
struct DropoutMask {
  bool active = false;
  uint64_t seed = 0, offset = 0, threshold = 0;
  double keep_scale = 1;  // 1 / (1 - p), in f64
  const Problem* problem = nullptr;

  DropoutMask() = default;
  DropoutMask(const Problem& p, const DropoutCall& call)
      : active(p.dropout_p > 0), seed(call.seed), offset(call.offset),
        threshold(dropout_threshold(p.dropout_p)), keep_scale(1.0 / (1.0 - p.dropout_p)),
        problem(&p) {}
  // The factor of pair (i, j) of a row in frame f: the draw takes the sequence and the
  // positions within it (SPEC 10.2, 11.1), which without packing are (b, i, j) themselves; a
  // placed ring sub-problem draws with the whole problem's heads and positions (SPEC 5).
  double factor(const SequenceFrame& f, int64_t h, int64_t i, int64_t j) const {
    const Problem& p = *problem;
    return dropout_keep(seed, offset, f.seq, p.draw_head(h), p.draw_heads(),
                        p.row_position(f, i), p.key_position(f, j), threshold)
               ? keep_scale
               : 0.0;
  }
};

// SPEC 2 and 3 for one query row: O_i (D values) and LSE_i, in f64; with an active mask, each
// key's weight times its factor (SPEC 11; LSE unchanged). sink: the head's sink logit joining
// the merged softmax once (SPEC 10.3), -inf for none.
void forward_row(const Problem& p, const dilattn_tensor& q, const dilattn_tensor& k,
                 const dilattn_tensor& v, int64_t b, int64_t h, int64_t i,
                 const DropoutMask& dropout, double sink, double* o, double* lse);

// SPEC 10.3: the sink logit of head h in a call, -inf (no sink) for a plan without sinks.
inline double sink_of(const SinksCall& sinks, int64_t h) {
  return sinks.values != nullptr ? sinks.values[h] : -std::numeric_limits<double>::infinity();
}

}  // namespace dilattn::ref

#endif  // DILATTN_REFERENCE_ROWS_H
