// pool_test_util.h - the few helpers the pool tests share: CHECK macros that print the failing
// expression with its line and count failures, and a stats snapshot.
#ifndef DILATTN_POOL_TEST_UTIL_H
#define DILATTN_POOL_TEST_UTIL_H

#include <cstdio>
#include <cstring>

#include "dilattn.h"

static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                                   \
  do {                                                                                   \
    const auto va_ = (a);                                                                \
    const auto vb_ = (b);                                                                \
    if (!(va_ == vb_)) {                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld (%s)\n", __FILE__, \
                   __LINE__, #a, static_cast<long long>(va_), #b, static_cast<long long>(vb_), \
                   dilattn_last_error());                                                \
      ++g_failures;                                                                      \
    }                                                                                    \
  } while (0)

inline dilattn_pool_stats pool_stats(dilattn_pool pool) {
  dilattn_pool_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  const dilattn_status st = dilattn_pool_get_stats(pool, &s);
  if (st != DILATTN_SUCCESS) {
    std::fprintf(stderr, "dilattn_pool_get_stats: %s\n", dilattn_last_error());
    ++g_failures;
  }
  return s;
}

inline bool same_stats(const dilattn_pool_stats& a, const dilattn_pool_stats& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

inline int finish(const char* name) {
  if (g_failures == 0) std::printf("%s: all checks passed\n", name);
  else std::fprintf(stderr, "%s: %d check(s) failed\n", name, g_failures);
  return g_failures == 0 ? 0 : 1;
}

#endif  // DILATTN_POOL_TEST_UTIL_H
