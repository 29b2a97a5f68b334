// test_pool_basics.cpp - the pool's contract on small hand-checked cases (dilattn_pool.h):
// statistics exact to the byte on a worked example, buddy splitting and coalescing, alignment,
// a pool over caller memory (alignment and size rules), options validation, the growth policy
// (max_arenas, a request larger than the arena), reset, and the CUDA constructor's status.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "pool_stats.h"

namespace {

void stats_worked_example() {
  // Arena 4096, min block 256: 16 leaves, orders 0..4 (256 .. 4096 bytes).
  alignas(256) static unsigned char arena[4096];
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, arena, sizeof arena, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_SUCCESS);
  dilattn_pool_stats s = pool_stats(pool);
  CHECK_EQ(s.free_blocks[12], size_t{1});
  CHECK_EQ(s.largest_free_block, size_t{4096});

  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK_EQ(dilattn_pool_alloc(pool, 100, &a), DILATTN_SUCCESS);  // 256 at offset 0
  // splitting 4096 down to 256 leaves one free block each of 256, 512, 1024, 2048
  s = pool_stats(pool);
  CHECK(a == arena);
  CHECK_EQ(s.bytes_in_use, size_t{256});
  CHECK_EQ(s.bytes_requested, size_t{100});
  CHECK_EQ(s.internal_fragmentation, size_t{156});
  CHECK_EQ(s.free_blocks[8], size_t{1});
  CHECK_EQ(s.free_blocks[9], size_t{1});
  CHECK_EQ(s.free_blocks[10], size_t{1});
  CHECK_EQ(s.free_blocks[11], size_t{1});
  CHECK_EQ(s.free_blocks[12], size_t{0});
  CHECK_EQ(s.largest_free_block, size_t{2048});

  CHECK_EQ(dilattn_pool_alloc(pool, 1025, &b), DILATTN_SUCCESS);  // 2048 at offset 2048
  CHECK(static_cast<unsigned char*>(b) == arena + 2048);
  CHECK_EQ(dilattn_pool_alloc(pool, 512, &c), DILATTN_SUCCESS);  // 512 at offset 512
  CHECK(static_cast<unsigned char*>(c) == arena + 512);
  s = pool_stats(pool);
  CHECK_EQ(s.bytes_in_use, size_t{256 + 2048 + 512});
  CHECK_EQ(s.bytes_requested, size_t{100 + 1025 + 512});
  CHECK_EQ(s.peak_bytes_in_use, size_t{2816});
  CHECK_EQ(s.live_blocks, size_t{3});
  CHECK_EQ(s.free_blocks[8], size_t{1});   // [256, 512)
  CHECK_EQ(s.free_blocks[10], size_t{1});  // [1024, 2048)
  CHECK_EQ(s.largest_free_block, size_t{1024});

  // Freeing a: its buddy [256, 512) is free, so they merge to 512; that one's buddy is c, live.
  CHECK_EQ(dilattn_pool_free(pool, a), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.free_blocks[8], size_t{0});
  CHECK_EQ(s.free_blocks[9], size_t{1});
  CHECK_EQ(s.free_blocks[10], size_t{1});
  CHECK_EQ(s.peak_bytes_in_use, size_t{2816});  // peak stays
  CHECK_EQ(s.bytes_in_use, size_t{2560});
  // Freeing c coalesces all the way to 2048: [0, 2048) free, b live.
  CHECK_EQ(dilattn_pool_free(pool, c), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.free_blocks[9], size_t{0});
  CHECK_EQ(s.free_blocks[10], size_t{0});
  CHECK_EQ(s.free_blocks[11], size_t{1});
  CHECK_EQ(dilattn_pool_free(pool, b), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.free_blocks[11], size_t{0});
  CHECK_EQ(s.free_blocks[12], size_t{1});
  CHECK_EQ(s.live_blocks, size_t{0});

  // Reset frees everything at once and zeroes the peak.
  CHECK_EQ(dilattn_pool_alloc(pool, 300, &a), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_alloc(pool, 300, &b), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_reset(pool), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.bytes_in_use, size_t{0});
  CHECK_EQ(s.peak_bytes_in_use, size_t{0});
  CHECK_EQ(s.free_blocks[12], size_t{1});
  CHECK_EQ(dilattn_pool_free(pool, b), DILATTN_ERROR_POOL_FOREIGN_POINTER);  // stale after reset
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
}

void alignment_and_min_block() {
  // Every block is 256-aligned whatever the request, and aligned to its size up to the host
  // arena's page alignment (4096); in the arena, every block starts at a multiple of its size.
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, 1 << 20);
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_SUCCESS);
  std::vector<void*> got;
  for (size_t bytes = 1; bytes < 20000; bytes = bytes * 3 + 1) {
    void* p = nullptr;
    CHECK_EQ(dilattn_pool_alloc(pool, bytes, &p), DILATTN_SUCCESS);
    size_t block = 256;
    while (block < bytes) block *= 2;
    CHECK_EQ(reinterpret_cast<uintptr_t>(p) % (block < 4096 ? block : 4096), uintptr_t{0});
    // got[0], the first block of an empty arena, is the arena's base
    const uintptr_t base = reinterpret_cast<uintptr_t>(got.empty() ? p : got[0]);
    CHECK_EQ((reinterpret_cast<uintptr_t>(p) - base) % block, uintptr_t{0});
    std::memset(p, 0xab, bytes);  // host memory: really usable
    got.push_back(p);
  }
  for (void* p : got) CHECK_EQ(dilattn_pool_free(pool, p), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);

  // A larger minimum block: a 1-byte request takes 4096 bytes.
  o.min_block_bytes = 4096;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_SUCCESS);
  void* p = nullptr;
  CHECK_EQ(dilattn_pool_alloc(pool, 1, &p), DILATTN_SUCCESS);
  CHECK_EQ(pool_stats(pool).bytes_in_use, size_t{4096});
  CHECK_EQ(reinterpret_cast<uintptr_t>(p) % 4096, uintptr_t{0});
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);  // with a live block: fine
}

void caller_memory_rules() {
  unsigned char* raw = static_cast<unsigned char*>(std::aligned_alloc(256, 8192));
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw + 16, 4096, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_ERROR_INVALID_VALUE);  // not 256-aligned
  CHECK(pool == nullptr);
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw, 3000, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_ERROR_INVALID_VALUE);  // not a power of two
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw, 128, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_ERROR_INVALID_VALUE);  // smaller than a block
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw, 4096, 100, DILATTN_DEVICE_CPU, 0),
           DILATTN_ERROR_INVALID_VALUE);  // min block not a power of two >= 256
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, nullptr, 4096, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw, 4096, 0,
                                           static_cast<dilattn_device_type>(7), 0),
           DILATTN_ERROR_INVALID_VALUE);
  // A good one hands out the caller's memory, and the caller frees it after destroy.
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, raw + 256, 4096, 0, DILATTN_DEVICE_CPU, 0),
           DILATTN_SUCCESS);
  void* p = nullptr;
  CHECK_EQ(dilattn_pool_alloc(pool, 4096, &p), DILATTN_SUCCESS);
  CHECK(p == raw + 256);
  CHECK_EQ(dilattn_pool_alloc(pool, 1, &p), DILATTN_ERROR_OUT_OF_MEMORY);  // no growth
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  std::free(raw);
}

void options_validation() {
  dilattn_pool_options o;
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_options_init(nullptr, 4096), DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_create_host(&pool, nullptr), DILATTN_ERROR_NULL_POINTER);
  CHECK_EQ(dilattn_pool_create_host(nullptr, &o), DILATTN_ERROR_NULL_POINTER);
  dilattn_pool_options_init(&o, 5000);
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_ERROR_INVALID_VALUE);
  dilattn_pool_options_init(&o, size_t{1} << 40);  // 2^32 blocks of 256: too many
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_ERROR_INVALID_VALUE);
  dilattn_pool_options_init(&o, 4096);
  o.growth = 5;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_ERROR_INVALID_VALUE);
  dilattn_pool_options_init(&o, 4096);
  o.max_arenas = -1;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_ERROR_INVALID_VALUE);
  dilattn_pool_options_init(&o, 4096);
  o.struct_size = 4;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_ERROR_INVALID_VALUE);
  CHECK(pool == nullptr);
}

void growth_policy() {
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, 4096);
  o.growth = DILATTN_POOL_GROW;
  o.max_arenas = 3;
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_SUCCESS);
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  CHECK_EQ(dilattn_pool_alloc(pool, 4096, &a), DILATTN_SUCCESS);
  CHECK_EQ(pool_stats(pool).num_arenas, size_t{1});
  CHECK_EQ(dilattn_pool_alloc(pool, 100, &b), DILATTN_SUCCESS);  // a second arena
  dilattn_pool_stats s = pool_stats(pool);
  CHECK_EQ(s.num_arenas, size_t{2});
  CHECK_EQ(s.arena_bytes_total, size_t{8192});
  // Larger than the arena: a third arena of the request rounded up (no TOO_LARGE).
  CHECK_EQ(dilattn_pool_alloc(pool, 10000, &c), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.num_arenas, size_t{3});
  CHECK_EQ(s.arena_bytes_total, size_t{8192 + 16384});
  CHECK_EQ(s.bytes_in_use, size_t{4096 + 256 + 16384});
  std::memset(c, 1, 10000);
  // max_arenas reached: exhaustion is OUT_OF_MEMORY.
  CHECK_EQ(dilattn_pool_alloc(pool, 4096, &d), DILATTN_ERROR_OUT_OF_MEMORY);
  // Frees find their arena; a grown arena stays for reuse.
  CHECK_EQ(dilattn_pool_free(pool, c), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(pool, a), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_free(pool, b), DILATTN_SUCCESS);
  s = pool_stats(pool);
  CHECK_EQ(s.num_arenas, size_t{3});
  CHECK_EQ(s.bytes_in_use, size_t{0});
  CHECK_EQ(s.free_blocks[12], size_t{2});
  CHECK_EQ(s.free_blocks[14], size_t{1});
  CHECK_EQ(s.largest_free_block, size_t{16384});
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
}

void cuda_constructor() {
  // With a GPU this is a working device pool; without one (or without CUDA in the build) it is
  // DEVICE_NOT_BUILT. Either way the status is checked.
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, 1 << 20);
  dilattn_pool pool = nullptr;
  const dilattn_status s = dilattn_pool_create_cuda(&pool, 0, &o);
  if (dilattn_backend_available(DILATTN_BACKEND_CUDA)) CHECK_EQ(s, DILATTN_SUCCESS);
  if (s == DILATTN_SUCCESS) {
    void* p = nullptr;
    CHECK_EQ(dilattn_pool_alloc(pool, 1000, &p), DILATTN_SUCCESS);
    CHECK_EQ(reinterpret_cast<uintptr_t>(p) % 256, uintptr_t{0});
    CHECK_EQ(dilattn_pool_free(pool, p), DILATTN_SUCCESS);
    CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  } else {
    CHECK_EQ(s, DILATTN_ERROR_DEVICE_NOT_BUILT);
    CHECK(pool == nullptr);
  }
  CHECK_EQ(dilattn_pool_create_cuda(&pool, 1000, &o), DILATTN_ERROR_DEVICE_NOT_BUILT);
}

}  // namespace

int main() {
  stats_worked_example();
  alignment_and_min_block();
  caller_memory_rules();
  options_validation();
  growth_policy();
  cuda_constructor();
  return harness::finish("pool_basics");
}
