// test_pool_abuse.cpp - every kind of pool abuse gets its own status and leaves the pool as it was
// (dilattn_pool.h): double free, foreign pointer, interior pointer, size 0, a size
// over the arena, exhaustion, use after destroy, bad handles and bad arguments. After each, the
// statistics are bytewise unchanged and an allocation still succeeds.
#include <cstdint>
#include <cstdlib>

#include "pool_stats.h"

namespace {

// Statistics unchanged by the abuse, and the pool still hands out and takes back a block.
void check_pool_intact(dilattn_pool pool, const dilattn_pool_stats& before, int line) {
  const dilattn_pool_stats after = pool_stats(pool);
  harness::record(same_stats(before, after), __FILE__, line,
                  "statistics changed by a rejected call");
  void* p = nullptr;
  const bool allocates = dilattn_pool_alloc(pool, 1000, &p) == DILATTN_SUCCESS && p != nullptr &&
                         dilattn_pool_free(pool, p) == DILATTN_SUCCESS;
  harness::record(allocates, __FILE__, line, "the pool no longer allocates: %s",
                  dilattn_last_error());
}

}  // namespace

int main() {
  dilattn_pool_options o;
  CHECK_EQ(dilattn_pool_options_init(&o, 1 << 16), DILATTN_SUCCESS);
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_SUCCESS);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK_EQ(dilattn_pool_alloc(pool, 3000, &a), DILATTN_SUCCESS);  // a 4096-byte block
  CHECK_EQ(dilattn_pool_alloc(pool, 256, &b), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_alloc(pool, 700, &c), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(pool, b), DILATTN_SUCCESS);
  void* d = nullptr;  // raises the peak above what check_pool_intact's probe reaches
  CHECK_EQ(dilattn_pool_alloc(pool, 16384, &d), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(pool, d), DILATTN_SUCCESS);
  dilattn_pool_stats before = pool_stats(pool);
  CHECK_EQ(before.live_blocks, size_t{2});

  // double free
  CHECK_EQ(dilattn_pool_free(pool, b), DILATTN_ERROR_POOL_DOUBLE_FREE);
  check_pool_intact(pool, before, __LINE__);
  // interior pointers: one byte in, on a 256 boundary inside, the last byte
  char* ca = static_cast<char*>(a);
  CHECK_EQ(dilattn_pool_free(pool, ca + 1), DILATTN_ERROR_POOL_INTERIOR_POINTER);
  CHECK_EQ(dilattn_pool_free(pool, ca + 256), DILATTN_ERROR_POOL_INTERIOR_POINTER);
  CHECK_EQ(dilattn_pool_free(pool, ca + 4095), DILATTN_ERROR_POOL_INTERIOR_POINTER);
  check_pool_intact(pool, before, __LINE__);
  // foreign: memory of another allocation, a stack address, an address in free pool space
  // that was never handed out
  int on_stack = 0;
  void* elsewhere = std::malloc(64);
  CHECK_EQ(dilattn_pool_free(pool, elsewhere), DILATTN_ERROR_POOL_FOREIGN_POINTER);
  CHECK_EQ(dilattn_pool_free(pool, &on_stack), DILATTN_ERROR_POOL_FOREIGN_POINTER);
  CHECK_EQ(dilattn_pool_free(pool, ca + 60000), DILATTN_ERROR_POOL_FOREIGN_POINTER);
  std::free(elsewhere);
  check_pool_intact(pool, before, __LINE__);
  // size 0, over the arena, exhaustion
  void* p = reinterpret_cast<void*>(uintptr_t{1});
  CHECK_EQ(dilattn_pool_alloc(pool, 0, &p), DILATTN_ERROR_POOL_ZERO_SIZE);
  CHECK(p == nullptr);
  CHECK_EQ(dilattn_pool_alloc(pool, (1 << 16) + 1, &p), DILATTN_ERROR_POOL_TOO_LARGE);
  CHECK_EQ(dilattn_pool_alloc(pool, ~size_t{0}, &p), DILATTN_ERROR_POOL_TOO_LARGE);
  CHECK_EQ(dilattn_pool_alloc(pool, 1 << 16, &p), DILATTN_ERROR_OUT_OF_MEMORY);  // a, c are live
  CHECK(p == nullptr);
  check_pool_intact(pool, before, __LINE__);
  // bad arguments
  CHECK_EQ(dilattn_pool_alloc(pool, 64, nullptr), DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_alloc(nullptr, 64, &p), DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_free(nullptr, a), DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_free(pool, nullptr), DILATTN_SUCCESS);  // like free(NULL)
  dilattn_pool_stats small;
  small.struct_size = 8;
  CHECK_EQ(dilattn_pool_get_stats(pool, &small), DILATTN_ERROR_INVALID_VALUE);
  CHECK_EQ(dilattn_pool_get_stats(pool, nullptr), DILATTN_ERROR_NULL_POINTER);
  // a handle that is no pool (never read: the registry knows it is not one)
  dilattn_pool bogus = reinterpret_cast<dilattn_pool>(&on_stack);
  CHECK_EQ(dilattn_pool_alloc(bogus, 64, &p), DILATTN_ERROR_INVALID_VALUE);
  check_pool_intact(pool, before, __LINE__);
  // a pointer of one pool freed into another is foreign there
  dilattn_pool other = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&other, &o), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(other, a), DILATTN_ERROR_POOL_FOREIGN_POINTER);
  check_pool_intact(pool, before, __LINE__);

  // use after destroy: every entry point says DESTROYED, and a second destroy too
  CHECK_EQ(dilattn_pool_destroy(other), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_alloc(other, 64, &p), DILATTN_ERROR_POOL_DESTROYED);
  CHECK_EQ(dilattn_pool_free(other, a), DILATTN_ERROR_POOL_DESTROYED);
  dilattn_pool_stats s;
  s.struct_size = sizeof s;
  CHECK_EQ(dilattn_pool_get_stats(other, &s), DILATTN_ERROR_POOL_DESTROYED);
  CHECK_EQ(dilattn_pool_reset(other), DILATTN_ERROR_POOL_DESTROYED);
  CHECK_EQ(dilattn_pool_destroy(other), DILATTN_ERROR_POOL_DESTROYED);
  check_pool_intact(pool, before, __LINE__);

  // each status has its own string
  CHECK(std::strstr(dilattn_status_string(DILATTN_ERROR_POOL_DOUBLE_FREE), "DOUBLE_FREE") != nullptr);
  CHECK(std::strstr(dilattn_status_string(DILATTN_ERROR_POOL_DESTROYED), "DESTROYED") != nullptr);

  CHECK_EQ(dilattn_pool_free(pool, a), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(pool, c), DILATTN_SUCCESS);
  const dilattn_pool_stats end = pool_stats(pool);
  CHECK_EQ(end.bytes_in_use, size_t{0});
  CHECK_EQ(end.free_blocks[16], size_t{1});
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  return harness::finish("pool_abuse");
}
