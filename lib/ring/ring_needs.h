// ring_needs.h - which rows of a rank's K/V shard the queries of another rank read (SPEC 5):
// the rows the ring sends, so that no row travels that nobody needs.
//
// needed_key_rows(p, queries, owner) is the set of (kv head, row) of the owner's shard (local
// rows, as disjoint runs: ring_ops.h RowRun) that any sub-problem of (a range of `queries`, a
// range of `owner`) reads (ring_pairs.h for_each_sub_call), kind by kind:
//   dense, GQA:   every row of a key range the causal rule does not skip (causal_part), every
//                 kv head (the query heads of a group share their kv head's rows).
//   causal:       a key range wholly after the query range is skipped, any other is whole.
//   block-sparse: the rows of the key blocks that the query range's mask rows list, per query
//                 head for its kv head (a sub-problem reads the listed blocks only).
//   dilated:      per branch, head using it and segment meeting both ranges, the segment's
//                 selected rows in the key range, for the head's kv head
//                 (for_each_dilated_pair, the sub-problems' own walk): so a segment inside one
//                 shard needs nothing from any other, and a kv head only its heads' offsets.
//   a window:     each of the above cut to the keys some query of the range reaches
//                 (ring_pairs.h key_reach), so rows beyond the window never travel.
// Where every kv head needs the same rows the runs cover all heads (one run per row range);
// otherwise they are per kv head, sorted by head, then row.
// Both ends compute it from the plan and the split alone, so nothing about it travels: the
// owner packs exactly the rows the other unpacks (ring_forward.cpp, ring_backward.cpp).
// Checked by tests/ring/test_ring_needs.cpp (equal to the rows the sub-problems read, for
// every kind, P = 1..4, both splits) and the poisoned-chunk ring tests.
#ifndef DILATTN_RING_NEEDS_H
#define DILATTN_RING_NEEDS_H

#include "problem.h"
#include "ring_ops.h"
#include "ring_shard.h"

namespace dilattn {

RowRuns needed_key_rows(const Problem& p, const ShardRows& queries, const ShardRows& owner);

// The (kv head, row) pairs of `runs`: a packed message of them holds B * that * D elements
// per tensor.
int64_t head_rows_in(const RowRuns& runs);

}  // namespace dilattn

#endif  // DILATTN_RING_NEEDS_H
