// ring_pairs.h - one (query range, key range) pair of the ring as sub-problems an existing
// backend runs (SPEC 5 on top of SPEC 2-4).
//
// The ring meets, on each rank, a contiguous range of its query rows with a contiguous range of
// the visiting chunk's keys. The keys of A(i) that fall in that range are those of a smaller
// problem of the same kind; its (O_b, LSE_b) are merged into the rank's running result:
//   dense:        one dense sub-problem, Nq = query rows, Nk = chunk rows.
//   causal:       ranges of both splits are equal or disjoint (chunk boundaries are shared), so
//                 a key range wholly before the queries is non-causal, the same range is a square
//                 causal sub-problem, a range after is skipped.
//   dilated:      per branch, per head using it, per segment meeting both ranges: the selected
//                 rows of the segment in each range are an arithmetic progression (index_rules.h
//                 selected_in_range), so a strided view (row stride r) of the shard is a dense
//                 sub-problem with one head, no copy. Branches are separate partials: SPEC 3
//                 combines them with the same merge as SPEC 5.
//   block-sparse: the mask rows and columns of the two ranges, renumbered from 0, when both
//                 ranges start on block boundaries (check_ring_split); else UNSUPPORTED.
// Options (SPEC 10, 11): a softcap depends on no position, so a sub-problem keeps it as it
// is. A window, ALiBi or dropout do: then every sub-problem is placed (problem.h Placement,
// ring_places): its rows and keys carry their positions in the whole sequence and its heads
// the whole problem's, so its backend applies the whole problem's causal rule, window, ALiBi
// distances and slopes, and draws dropout with global (b, h, i, j) (SPEC 11.1). A window also
// narrows each pair's keys to those some query of the pair reaches (key_reach): keys beyond
// it are neither sent (ring_needs.h) nor read; a pair with none is skipped like a causal one.
// Sinks join no sub-problem: the ring adds them once per row at the end of its merge
// (ring_forward.cpp) and sums their gradient itself (ring_backward.cpp).
// The backward runs the same sub-problems with the full rows of O and the combined LSE: each
// occurrence's P = exp(S - LSE) is then exact (SPEC 6), so the pairs' gradients simply add.
// Checked by tests/ring/test_ring_forward.cpp and test_ring_backward.cpp against the reference.
#ifndef DILATTN_RING_PAIRS_H
#define DILATTN_RING_PAIRS_H

#include <functional>

#include "index_rules.h"
#include "problem.h"
#include "ring_shard.h"

namespace dilattn {

// One sub-problem: sub.H query heads from h0 and sub.Hkv kv heads from g0, over the queries
// at shard rows q_rows and the keys at chunk rows k_rows (all batches).
struct SubCall {
  Problem sub;
  int64_t h0 = 0, g0 = 0;
  KeyProgression q_rows{0, 1, 0}, k_rows{0, 1, 0};
};

// What the causal rule leaves of a pair. Ranges of one split are equal or disjoint, since
// every rank cuts the sequence at the same points (ring_shard.h).
enum class CausalPart { skip, full, diagonal, straddle };
CausalPart causal_part(const Problem& p, const RowRange& qr, const RowRange& kr);

// Dilated: calls f(h, qs, ks) per branch, per head h using it, per segment meeting both ranges
// whose selected rows in each range (qs in qr, ks in kr: sequence rows, step r) are not
// empty; returns the first error f returns. The one place the ring walks segments: the
// sub-problems (for_each_sub_call) and the rows a rank needs (ring_needs.h) both come from it.
template <class F>
dilattn_status for_each_dilated_pair(const Problem& p, const RowRange& qr, const RowRange& kr,
                                     F&& f) {
  const int64_t N = p.Nq, m = p.num_branches();
  const int64_t q_end = qr.first + qr.count, k_end = kr.first + kr.count;
  for (int64_t b = 0; b < m; ++b) {
    const int64_t w = clipped_segment(p.branches[b].w, N), r = p.branches[b].r;
    const int64_t seg_lo = max_i64(qr.first / w, kr.first / w);
    const int64_t seg_hi = min_i64((q_end - 1) / w, (k_end - 1) / w);
    for (int64_t h = 0; h < p.H; ++h) {
      if (!head_uses_branch(p.head_mode, h, b, p.H, m)) continue;
      const int64_t o = head_offset(p.head_mode, h, b, r, p.H);
      for (int64_t seg = seg_lo; seg <= seg_hi; ++seg) {
        const int64_t s0 = seg * w, s1 = segment_end(s0, w, N);
        const KeyProgression qs = selected_in_range(s0, s1, r, o, qr.first, q_end);
        const KeyProgression ks = selected_in_range(s0, s1, r, o, kr.first, k_end);
        if (qs.count == 0 || ks.count == 0) continue;
        if (dilattn_status s = f(h, qs, ks)) return s;
      }
    }
  }
  return DILATTN_SUCCESS;
}

// SPEC 5: whether the ring's sub-problems of p are placed (an option that depends on
// positions: a window, ALiBi or dropout).
inline bool ring_places(const Problem& p) {
  return p.has_window() || !p.alibi_slopes.empty() || p.dropout_p > 0;
}

// The terms of ks (sequence positions) that the window lets some query of qs (sequence
// positions) read: ks itself without a window.
KeyProgression key_reach(const Problem& p, const KeyProgression& qs, const KeyProgression& ks);

// SUCCESS when every pair of this split can be cut into sub-problems; UNSUPPORTED (with the
// reason) for a block-sparse mask whose blocks straddle a shard boundary. Rank-independent, so
// every rank refuses alike.
dilattn_status check_ring_split(const Problem& p, int32_t num_ranks, int32_t split);

// Calls run(call) for every sub-problem of queries `qr` (this rank's) and keys `kr` (a chunk's),
// in a fixed order; returns the first error run returns. A dense sub-problem shares the plan's
// state (a device backend's copy of the whole problem's ALiBi slopes, which a placed
// sub-problem reads); a block-sparse one gets its own from `prepare` (the backend's
// Backend::prepare, may be null), since a device backend keeps the mask there and the sub-mask
// is not the plan's.
dilattn_status for_each_sub_call(const Problem& p, const RowRange& qr, const RowRange& kr,
                                 dilattn_status (*prepare)(Problem& p),
                                 const std::function<dilattn_status(const SubCall&)>& run);

// The view [B, rows.count, nh, D] of rows `rows` and heads [h0, h0 + nh) of t ([B, n, heads, D]).
dilattn_tensor rows_view(const dilattn_tensor& t, const KeyProgression& rows, int64_t h0,
                         int64_t nh);
// The view [B, nh, rows.count, 1] of an LSE tensor t ([B, H, n, 1]).
dilattn_tensor lse_rows_view(const dilattn_tensor& t, const KeyProgression& rows, int64_t h0,
                             int64_t nh);

}  // namespace dilattn

#endif  // DILATTN_RING_PAIRS_H
