// ring_needs.cpp - the rows of a shard another rank needs (see ring_needs.h).
#include "ring_needs.h"

#include <vector>

#include "ring_pairs.h"

namespace dilattn {

namespace {

// Marks the shard rows of the progression `rows` (sequence rows in kr) as needed.
void mark(std::vector<char>& needed, const RowRange& kr, const KeyProgression& rows) {
  for (int64_t t = 0; t < rows.count; ++t)
    needed[static_cast<size_t>(progression_at(rows, t) - kr.first + kr.local)] = 1;
}

// The key rows of range kr that block-sparse queries in range qr read: the listed blocks of
// the mask rows of qr (every head), cut to kr. Both ranges start on block boundaries
// (check_ring_split), so a block lies wholly inside or outside kr.
void mark_listed_blocks(const Problem& p, const RowRange& qr, const RowRange& kr,
                        std::vector<char>& needed) {
  const BsrMask& m = *p.mask;
  const int64_t ib0 = qr.first / m.bq, ib1 = ceil_div(qr.first + qr.count, m.bq);
  const int64_t k_end = kr.first + kr.count;
  for (int64_t h = 0; h < m.num_heads; ++h)
    for (int64_t ib = ib0; ib < ib1; ++ib) {
      int64_t count;
      const int64_t* cols = m.row_cols(h, ib, &count);
      for (int64_t c = 0; c < count; ++c) {
        const KeyProgression block = block_range(cols[c], m.bk, p.Nk);
        if (block.first < kr.first || block.first >= k_end) continue;
        mark(needed, kr, {block.first, 1, min_i64(block.count, k_end - block.first)});
      }
    }
}

}  // namespace

RowRuns needed_key_rows(const Problem& p, const ShardRows& queries, const ShardRows& owner) {
  std::vector<char> needed(static_cast<size_t>(owner.rows), 0);
  for (const RowRange& qr : queries.range)
    for (const RowRange& kr : owner.range) {
      if (qr.count == 0 || kr.count == 0) continue;
      const CausalPart part = causal_part(p, qr, kr);
      if (part == CausalPart::skip) continue;
      if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
        mark_listed_blocks(p, qr, kr, needed);
      } else if (p.kind == DILATTN_KIND_DILATED) {
        for_each_dilated_pair(p, qr, kr, [&](int64_t, const KeyProgression&,
                                             const KeyProgression& ks) {
          mark(needed, kr, ks);
          return DILATTN_SUCCESS;
        });
      } else {
        mark(needed, kr, {kr.first, 1, kr.count});
      }
    }
  RowRuns runs;
  for (int64_t i = 0; i < owner.rows; ++i) {
    if (!needed[static_cast<size_t>(i)]) continue;
    if (!runs.empty() && runs.back().first + runs.back().count == i)
      ++runs.back().count;
    else
      runs.push_back({i, 1});
  }
  return runs;
}

int64_t rows_in(const RowRuns& runs) {
  int64_t n = 0;
  for (const RowRun& run : runs) n += run.count;
  return n;
}

}  // namespace dilattn
