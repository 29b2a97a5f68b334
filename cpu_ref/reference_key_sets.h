// reference_key_sets.h - the allowed keys A(i) of one query row, as the reference walks them.
//
// A(i) is a multiset (SPEC 2-4). The reference splits it into softmax groups: one group for
// dense and block-sparse attention, one per dilated branch that selects row i (SPEC 3 combines
// the groups by their LSE). Each group is a list of arithmetic key progressions from
// lib/index_rules.h, so the rules themselves live in one place.
#ifndef DILATTN_REFERENCE_KEY_SETS_H
#define DILATTN_REFERENCE_KEY_SETS_H

#include <vector>

#include "problem.h"

namespace dilattn::ref {

using KeyGroup = std::vector<KeyProgression>;

// Softmax groups of query row i of head h; groups that contribute no key are left out.
void row_key_groups(const Problem& p, int64_t h, int64_t i, std::vector<KeyGroup>* groups);

// The number of score terms S_ij of the whole problem: the sizes of every A(i), duplicates
// counted, summed over batches, heads and rows (dilattn_plan_score_count); -1 when the count
// overflows int64.
int64_t score_count(const Problem& p);

}  // namespace dilattn::ref

#endif  // DILATTN_REFERENCE_KEY_SETS_H
