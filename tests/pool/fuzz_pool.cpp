// fuzz_pool.cpp - libFuzzer harness: arbitrary op sequences against the pool's C ABI.
//
// The input picks the arena (size, minimum block, growth) and then a sequence of operations:
// allocate a size, free a live block, free a block twice, free an interior or foreign pointer,
// allocate 0 or too much, read stats, reset. A shadow list of live blocks checks each answer:
// successful blocks are aligned, inside the pool and never overlap (each is filled with its own
// byte and checked before its free, so ASan and the pattern both watch the memory), abuse gets
// its exact status, and the statistics equal the shadow's sums. Any disagreement aborts.
// Built only by tests/pool/run_fuzz.sh (clang -fsanitize=fuzzer,address), not by meson.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dilattn.h"

namespace {

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz_pool: %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond,      \
                   dilattn_last_error());                                                 \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

struct Live {
  unsigned char* p;
  size_t bytes, block;
  unsigned char mark;
};

struct Input {
  const uint8_t* data;
  size_t size, at = 0;
  unsigned byte() { return at < size ? data[at++] : 0; }
  size_t word() { return byte() | (byte() << 8) | (static_cast<size_t>(byte()) << 16); }
  bool done() const { return at >= size; }
};

size_t block_for(size_t bytes, size_t min_block) {
  size_t b = min_block;
  while (b < bytes) b <<= 1;
  return b;
}

void check_stats(dilattn_pool pool, const std::vector<Live>& live) {
  dilattn_pool_stats s;
  s.struct_size = sizeof s;
  FUZZ_CHECK(dilattn_pool_get_stats(pool, &s) == DILATTN_SUCCESS);
  size_t in_use = 0, requested = 0;
  for (const Live& l : live) in_use += l.block, requested += l.bytes;
  FUZZ_CHECK(s.bytes_in_use == in_use);
  FUZZ_CHECK(s.bytes_requested == requested);
  FUZZ_CHECK(s.live_blocks == live.size());
  FUZZ_CHECK(s.internal_fragmentation == in_use - requested);
  FUZZ_CHECK(s.peak_bytes_in_use >= in_use);
  size_t free_bytes = 0;
  for (int k = 0; k < 64; ++k) free_bytes += s.free_blocks[k] << k;
  FUZZ_CHECK(free_bytes + in_use == s.arena_bytes_total);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const int arena_log2 = 10 + static_cast<int>(in.byte() % 11);  // 1 KiB .. 1 MiB
  const int min_log2 = 8 + static_cast<int>(in.byte() % 3);      // 256 .. 1024
  const bool grow = in.byte() % 4 == 0;
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, size_t{1} << arena_log2);
  o.min_block_bytes = size_t{1} << (min_log2 <= arena_log2 ? min_log2 : arena_log2);
  o.growth = grow ? DILATTN_POOL_GROW : DILATTN_POOL_FIXED;
  o.max_arenas = 4;
  dilattn_pool pool = nullptr;
  FUZZ_CHECK(dilattn_pool_create_host(&pool, &o) == DILATTN_SUCCESS);
  const size_t arena = o.arena_bytes;

  std::vector<Live> live;
  std::vector<void*> freed;  // freed and not handed out again (as far as the shadow knows)
  unsigned char next_mark = 1;
  while (!in.done() && live.size() < 512) {
    const unsigned op = in.byte() % 8;
    if (op <= 2) {  // allocate
      const size_t bytes = 1 + in.word() % (grow ? 4 * arena : arena);
      void* p = nullptr;
      const dilattn_status s = dilattn_pool_alloc(pool, bytes, &p);
      if (s == DILATTN_ERROR_OUT_OF_MEMORY) {
        FUZZ_CHECK(p == nullptr);
        continue;
      }
      FUZZ_CHECK(s == DILATTN_SUCCESS);
      FUZZ_CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
      size_t block = block_for(bytes, o.min_block_bytes);
      if (block > arena) block = 0;  // a grown arena's own minimum block may be larger
      unsigned char* c = static_cast<unsigned char*>(p);
      for (const Live& l : live) FUZZ_CHECK(c + bytes <= l.p || l.p + l.bytes <= c);
      const unsigned char mark = next_mark++;
      std::memset(c, mark, bytes);
      dilattn_pool_stats s2;
      s2.struct_size = sizeof s2;
      dilattn_pool_get_stats(pool, &s2);
      if (block == 0) {  // take the pool's word for the block, checked by the sums below
        size_t before = 0;
        for (const Live& l : live) before += l.block;
        block = s2.bytes_in_use - before;
      }
      live.push_back({c, bytes, block, mark});
      for (size_t i = 0; i < freed.size(); ++i)
        if (freed[i] >= p && static_cast<unsigned char*>(freed[i]) < c + block) {
          freed[i] = freed.back();
          freed.pop_back();
          --i;
        }
    } else if (op == 3 && !live.empty()) {  // free
      const size_t i = in.byte() % live.size();
      const Live l = live[i];
      FUZZ_CHECK(l.p[0] == l.mark && l.p[l.bytes - 1] == l.mark && l.p[l.bytes / 2] == l.mark);
      FUZZ_CHECK(dilattn_pool_free(pool, l.p) == DILATTN_SUCCESS);
      live[i] = live.back();
      live.pop_back();
      freed.push_back(l.p);
    } else if (op == 4 && !freed.empty()) {  // double free
      void* p = freed[in.byte() % freed.size()];
      bool inside_live = false;
      for (const Live& l : live)
        inside_live = inside_live || (p >= l.p && static_cast<unsigned char*>(p) < l.p + l.block);
      const dilattn_status s = dilattn_pool_free(pool, p);
      FUZZ_CHECK(s == (inside_live ? DILATTN_ERROR_POOL_INTERIOR_POINTER
                                   : DILATTN_ERROR_POOL_DOUBLE_FREE));
    } else if (op == 5 && !live.empty()) {  // interior pointer
      const Live& l = live[in.byte() % live.size()];
      const size_t off = 1 + in.word() % (l.block - 1);
      FUZZ_CHECK(dilattn_pool_free(pool, l.p + off) == DILATTN_ERROR_POOL_INTERIOR_POINTER);
    } else if (op == 6) {  // zero, too large, foreign
      void* p = nullptr;
      FUZZ_CHECK(dilattn_pool_alloc(pool, 0, &p) == DILATTN_ERROR_POOL_ZERO_SIZE);
      if (!grow) FUZZ_CHECK(dilattn_pool_alloc(pool, arena + 1 + in.byte(), &p) ==
                            DILATTN_ERROR_POOL_TOO_LARGE);
      int on_stack = 0;
      FUZZ_CHECK(dilattn_pool_free(pool, &on_stack) == DILATTN_ERROR_POOL_FOREIGN_POINTER);
    } else if (op == 7) {
      if (in.byte() % 16 == 0) {  // reset
        FUZZ_CHECK(dilattn_pool_reset(pool) == DILATTN_SUCCESS);
        live.clear();
        freed.clear();
      }
    }
    check_stats(pool, live);
  }
  for (const Live& l : live) FUZZ_CHECK(dilattn_pool_free(pool, l.p) == DILATTN_SUCCESS);
  live.clear();
  check_stats(pool, live);
  FUZZ_CHECK(dilattn_pool_destroy(pool) == DILATTN_SUCCESS);
  void* p = nullptr;
  FUZZ_CHECK(dilattn_pool_alloc(pool, 1, &p) == DILATTN_ERROR_POOL_DESTROYED);
  return 0;
}
