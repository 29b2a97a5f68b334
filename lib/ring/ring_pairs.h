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
// The backward runs the same sub-problems with the full rows of O and the combined LSE: each
// occurrence's P = exp(S - LSE) is then exact (SPEC 6), so the pairs' gradients simply add.
// Checked by tests/ring/test_ring_forward.cpp and test_ring_backward.cpp against the reference.
#ifndef DILATTN_RING_PAIRS_H
#define DILATTN_RING_PAIRS_H

#include <functional>

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

// SUCCESS when every pair of this split can be cut into sub-problems; UNSUPPORTED (with the
// reason) for a block-sparse mask whose blocks straddle a shard boundary. Rank-independent, so
// every rank refuses alike.
dilattn_status check_ring_split(const Problem& p, int32_t num_ranks, int32_t split);

// Calls run(call) for every sub-problem of queries `qr` (this rank's) and keys `kr` (a chunk's),
// in a fixed order; returns the first error run returns. A sub-problem has no plan state of
// its own; `prepare` (the backend's Backend::prepare, may be null) makes it first, since a
// device backend keeps the block-sparse mask there and the sub-mask is not the plan's.
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
