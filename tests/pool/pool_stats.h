// pool_stats.h - what the pool tests share on top of tests/common/check.h: a statistics
// snapshot whose own failure is a failed check, and bytewise equality of two snapshots.
#ifndef DILATTN_TESTS_POOL_STATS_H
#define DILATTN_TESTS_POOL_STATS_H

#include <cstring>

#include "../common/check.h"
#include "dilattn.h"

inline dilattn_pool_stats pool_stats(dilattn_pool pool) {
  dilattn_pool_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(dilattn_pool_get_stats(pool, &s));
  return s;
}

inline bool same_stats(const dilattn_pool_stats& a, const dilattn_pool_stats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

#endif  // DILATTN_TESTS_POOL_STATS_H
