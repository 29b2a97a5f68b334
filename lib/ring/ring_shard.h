// ring_shard.h - which rows of the sequence each rank holds (SPEC 5): contiguous or zigzag.
//
// Contiguous: rank p holds [floor(p N / P), floor((p+1) N / P)). Zigzag (causal balance): N is
// cut the same way into 2P chunks and rank p holds chunk p, then chunk 2P-1-p. Every rank
// computes every rank's rows from (N, P, split) alone, so no row counts travel the ring.
// Checked by tests/ring/test_ring_shards.cpp (hand-computed splits).
#ifndef DILATTN_RING_SHARD_H
#define DILATTN_RING_SHARD_H

#include <cstdint>

#include "dilattn_ring.h"

namespace dilattn {

// Ranks per communicator at most: keeps part * (N mod parts) below 2^63 in cut_point.
constexpr int32_t kMaxRingRanks = 1 << 16;

// Rows [first, first + count) of the sequence, stored from row `local` of the shard tensors.
struct RowRange {
  int64_t first = 0, count = 0, local = 0;
};

struct ShardRows {
  RowRange range[2];  // the second is empty for the contiguous split
  int64_t rows = 0;   // the shard's row count
};

// floor(part * N / parts) without forming part * N (it may overflow): parts <= 2 kMaxRingRanks.
inline int64_t cut_point(int64_t N, int64_t part, int64_t parts) {
  return part * (N / parts) + part * (N % parts) / parts;
}

inline ShardRows shard_rows(int64_t N, int32_t P, int32_t rank, int32_t split) {
  ShardRows s;
  if (split == DILATTN_RING_ZIGZAG) {
    const int64_t a = rank, b = 2 * static_cast<int64_t>(P) - 1 - rank;
    s.range[0] = {cut_point(N, a, 2 * P), cut_point(N, a + 1, 2 * P) - cut_point(N, a, 2 * P), 0};
    s.range[1] = {cut_point(N, b, 2 * P), cut_point(N, b + 1, 2 * P) - cut_point(N, b, 2 * P),
                  s.range[0].count};
  } else {
    s.range[0] = {cut_point(N, rank, P), cut_point(N, rank + 1, P) - cut_point(N, rank, P), 0};
    s.range[1] = {0, 0, s.range[0].count};
  }
  s.rows = s.range[0].count + s.range[1].count;
  return s;
}

}  // namespace dilattn

#endif  // DILATTN_RING_SHARD_H
