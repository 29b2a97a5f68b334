// ring_needs.cpp - what of a shard another rank needs (see ring_needs.h).
#include "ring_needs.h"

#include <vector>

#include "ring_pairs.h"

namespace dilattn {

namespace {

// One flag per (kv head, shard row) of the owner: needed or not.
class NeededRows {
 public:
  NeededRows(int64_t heads, int64_t rows)
      : rows_(rows), flags_(static_cast<size_t>(heads * rows), 0) {}
  // The rows of progression `keys` (sequence rows in kr) for kv heads [g0, g0 + ng).
  void mark(const RowRange& kr, const KeyProgression& keys, int64_t g0, int64_t ng) {
    for (int64_t g = g0; g < g0 + ng; ++g)
      for (int64_t t = 0; t < keys.count; ++t)
        flags_[static_cast<size_t>(g * rows_ + progression_at(keys, t) - kr.first + kr.local)] = 1;
  }
  bool at(int64_t g, int64_t row) const { return flags_[static_cast<size_t>(g * rows_ + row)] != 0; }

 private:
  int64_t rows_;
  std::vector<char> flags_;
};

// The key rows of range kr that block-sparse queries in range qr read: for each query head,
// the listed blocks of its mask rows in qr, cut to kr, of its kv head. Both ranges start on
// block boundaries (check_ring_split), so a block lies wholly inside or outside kr.
void mark_listed_blocks(const Problem& p, const RowRange& qr, const RowRange& kr,
                        NeededRows& needed) {
  const BsrMask& m = *p.mask;
  const int64_t ib0 = qr.first / m.bq, ib1 = ceil_div(qr.first + qr.count, m.bq);
  const int64_t q_end = qr.first + qr.count, k_end = kr.first + kr.count;
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t ib = ib0; ib < ib1; ++ib) {
      // The mask row's queries in qr: a window lets them reach only some of its blocks' keys.
      const int64_t q_lo = max_i64(ib * m.bq, qr.first), q_hi = min_i64((ib + 1) * m.bq, q_end);
      const KeyProgression queries{q_lo, 1, q_hi - q_lo};
      int64_t count;
      const int64_t* cols = m.row_cols(h, ib, &count);
      for (int64_t c = 0; c < count; ++c) {
        const KeyProgression block = block_range(cols[c], m.bk, p.Nk);
        if (block.first < kr.first || block.first >= k_end) continue;
        needed.mark(kr,
                    key_reach(p, queries,
                              {block.first, 1, min_i64(block.count, k_end - block.first)}),
                    kv_head_of(h, p.H, p.Hkv), 1);
      }
    }
}

// The runs of one kv head's needed rows (heads [g, g + ng) when they all agree).
void append_runs(const NeededRows& needed, int64_t g, int64_t ng, int64_t rows, RowRuns& runs) {
  for (int64_t i = 0; i < rows; ++i) {
    if (!needed.at(g, i)) continue;
    if (!runs.empty() && runs.back().head == g && runs.back().first + runs.back().count == i)
      ++runs.back().count;
    else
      runs.push_back({i, 1, g, ng});
  }
}

}  // namespace

RowRuns needed_key_rows(const Problem& p, const ShardRows& queries, const ShardRows& owner) {
  NeededRows needed(p.Hkv, owner.rows);
  for (const RowRange& qr : queries.range)
    for (const RowRange& kr : owner.range) {
      if (qr.count == 0 || kr.count == 0) continue;
      if (causal_part(p, qr, kr) == CausalPart::skip) continue;
      if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
        mark_listed_blocks(p, qr, kr, needed);
      } else if (p.kind == DILATTN_KIND_DILATED) {
        for_each_dilated_pair(p, qr, kr, [&](int64_t h, const KeyProgression& qs,
                                             const KeyProgression& ks) {
          needed.mark(kr, key_reach(p, qs, ks), kv_head_of(h, p.H, p.Hkv), 1);
          return DILATTN_SUCCESS;
        });
      } else {
        needed.mark(kr, key_reach(p, {qr.first, 1, qr.count}, {kr.first, 1, kr.count}), 0,
                    p.Hkv);
      }
    }
  // One run for all kv heads where they agree (dense, causal, a shared mask), else per head.
  bool heads_agree = true;
  for (int64_t g = 1; g < p.Hkv && heads_agree; ++g)
    for (int64_t i = 0; i < owner.rows && heads_agree; ++i)
      heads_agree = needed.at(g, i) == needed.at(0, i);
  RowRuns runs;
  if (heads_agree) {
    append_runs(needed, 0, p.Hkv, owner.rows, runs);
  } else {
    for (int64_t g = 0; g < p.Hkv; ++g) append_runs(needed, g, 1, owner.rows, runs);
  }
  return runs;
}

int64_t head_rows_in(const RowRuns& runs) {
  int64_t n = 0;
  for (const RowRun& run : runs) n += run.count * run.heads;
  return n;
}

}  // namespace dilattn
