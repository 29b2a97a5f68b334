// test_ring_shards.cpp - SPEC 5's splits, hand-computed: contiguous rows
// [floor(p N / P), floor((p+1) N / P)), zigzag chunks p and 2P-1-p of 2P, ranks without rows
// when N < P, and no overflow near 2^62.
#include "../common/check.h"
#include "dilattn_ring.h"

using namespace harness;

namespace {

void expect_rows(int64_t N, int32_t P, int32_t rank, dilattn_ring_split split, int64_t f0,
                 int64_t c0, int64_t f1, int64_t c1) {
  int64_t first[2] = {-1, -1}, count[2] = {-1, -1};
  const dilattn_status s = dilattn_ring_shard_rows(N, P, rank, split, first, count);
  CHECK_MSG(s == DILATTN_SUCCESS && first[0] == f0 && count[0] == c0 && count[1] == c1 &&
                (c1 == 0 || first[1] == f1),
            "N=%lld P=%d rank %d split %d: %s, got [%lld,+%lld) [%lld,+%lld), want "
            "[%lld,+%lld) [%lld,+%lld)",
            static_cast<long long>(N), P, rank, static_cast<int>(split),
            dilattn_status_string(s), static_cast<long long>(first[0]),
            static_cast<long long>(count[0]), static_cast<long long>(first[1]),
            static_cast<long long>(count[1]), static_cast<long long>(f0),
            static_cast<long long>(c0), static_cast<long long>(f1), static_cast<long long>(c1));
}

}  // namespace

int main() {
  const auto C = DILATTN_RING_CONTIGUOUS, Z = DILATTN_RING_ZIGZAG;
  // N = 10, P = 3: cuts 0, 3, 6, 10.
  expect_rows(10, 3, 0, C, 0, 3, 0, 0);
  expect_rows(10, 3, 1, C, 3, 3, 0, 0);
  expect_rows(10, 3, 2, C, 6, 4, 0, 0);
  // Zigzag, 6 chunks cut at 0, 1, 3, 5, 6, 8, 10: rank p holds chunks p and 5 - p.
  expect_rows(10, 3, 0, Z, 0, 1, 8, 2);
  expect_rows(10, 3, 1, Z, 1, 2, 6, 2);
  expect_rows(10, 3, 2, Z, 3, 2, 5, 1);
  // N < P: cuts 0, 0, 1, 2, 3; rank 0 holds nothing.
  expect_rows(3, 4, 0, C, 0, 0, 0, 0);
  expect_rows(3, 4, 1, C, 0, 1, 0, 0);
  expect_rows(3, 4, 3, C, 2, 1, 0, 0);
  // P = 1: everything (zigzag: both halves, in order).
  expect_rows(7, 1, 0, C, 0, 7, 0, 0);
  expect_rows(7, 1, 0, Z, 0, 3, 3, 4);
  // Near 2^62 p N would overflow: N = 3 * 2^60 + 2, P = 3: cuts 2^60, 2^61 + 1.
  const int64_t big = 3 * (int64_t{1} << 60) + 2;
  expect_rows(big, 3, 1, C, int64_t{1} << 60, (int64_t{1} << 60) + 1, 0, 0);
  expect_rows(big, 3, 2, C, (int64_t{1} << 61) + 1, (int64_t{1} << 60) + 1, 0, 0);
  return finish("ring_shard_rows_hand_computed");
}
