// test_pool_model_check.cpp - a randomized trace of a million pool operations checked against a
// simple reference model.
//
// The model is a sorted map of live blocks (start -> requested bytes). It knows nothing of the
// buddy tree; from the live set alone it derives what the pool must report: each live block is
// the request rounded up to a power of two (>= 256), aligned to its size; no two overlap; the
// free space splits into maximal buddy blocks in exactly one way (walk the arena's block tree:
// a block without live memory is free, a block that is live is not, otherwise look at both
// halves), which gives the free blocks per order and the largest free block; bytes in use,
// requested, live blocks and peak are sums and maxima. An OUT_OF_MEMORY is checked to be true
// (no free block that large), and abuse calls (double free, interior, foreign) mixed into the
// trace must leave the statistics unchanged. After all frees the pool is one free block.
//
// DILATTN_POOL_TRACE_OPS overrides the count (the sanitizer builds use fewer; see meson.build).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "pool_stats.h"

namespace {

constexpr size_t kArena = size_t{1} << 22;  // 4 MiB
constexpr size_t kMinBlock = 256;

size_t block_for(size_t bytes) {
  size_t b = kMinBlock;
  while (b < bytes) b <<= 1;
  return b;
}
int log2_of(size_t pow2) {
  int k = 0;
  while ((size_t{1} << k) < pow2) ++k;
  return k;
}

struct Model {
  uintptr_t base = 0;
  std::map<uintptr_t, size_t> live;  // offset -> requested bytes
  size_t in_use = 0, requested = 0, peak = 0;

  // Is any byte of [lo, hi) live?
  bool touches_live(uintptr_t lo, uintptr_t hi) const {
    auto it = live.lower_bound(lo);
    if (it != live.end() && it->first < hi) return true;
    if (it == live.begin()) return false;
    --it;
    return it->first + block_for(it->second) > lo;
  }
  // Maximal free blocks of the buddy tree under [lo, lo + size).
  void free_blocks(uintptr_t lo, size_t size, size_t* counts) const {
    if (!touches_live(lo, lo + size)) {
      ++counts[log2_of(size)];
      return;
    }
    auto it = live.find(lo);
    if (it != live.end() && block_for(it->second) == size) return;  // this block is live
    free_blocks(lo, size / 2, counts);
    free_blocks(lo + size / 2, size / 2, counts);
  }
};

void check_against_model(dilattn_pool pool, const Model& m, long op) {
  const dilattn_pool_stats s = pool_stats(pool);
  size_t counts[64] = {};
  m.free_blocks(0, kArena, counts);
  size_t largest = 0;
  for (int k = 0; k < 64; ++k)
    if (counts[k] != 0) largest = size_t{1} << k;
  bool ok = s.bytes_in_use == m.in_use && s.bytes_requested == m.requested &&
            s.internal_fragmentation == m.in_use - m.requested && s.peak_bytes_in_use == m.peak &&
            s.live_blocks == m.live.size() && s.largest_free_block == largest &&
            s.num_arenas == 1 && s.arena_bytes_total == kArena;
  for (int k = 0; k < 64; ++k) ok = ok && s.free_blocks[k] == counts[k];
  if (!CHECK_MSG(ok,
                 "op %ld: stats differ from the model: in_use %zu/%zu requested %zu/%zu peak "
                 "%zu/%zu live %zu/%zu largest %zu/%zu",
                 op, s.bytes_in_use, m.in_use, s.bytes_requested, m.requested,
                 s.peak_bytes_in_use, m.peak, s.live_blocks, m.live.size(), s.largest_free_block,
                 largest))
    for (int k = 0; k < 64; ++k)
      if (s.free_blocks[k] != counts[k])
        std::fprintf(stderr, "  free blocks of 2^%d: pool %zu, model %zu\n", k, s.free_blocks[k],
                     counts[k]);
}

}  // namespace

int main() {
  long ops = 1000000;
  if (const char* env = std::getenv("DILATTN_POOL_TRACE_OPS")) ops = std::atol(env);
  CHECK(ops > 0);

  // The arena is the caller's memory: the pool never touches it, the model never needs to.
  void* memory = std::aligned_alloc(4096, kArena);
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_from_memory(&pool, memory, kArena, kMinBlock, DILATTN_DEVICE_CPU, 0),
           DILATTN_SUCCESS);
  Model m;
  m.base = reinterpret_cast<uintptr_t>(memory);

  std::mt19937_64 rng(20261121);
  std::vector<uintptr_t> freed;  // recently freed offsets, for double frees
  long allocs = 0, frees = 0, ooms = 0, abuses = 0;
  for (long op = 0; op < ops && harness::failures() < 20; ++op) {
    const unsigned dice = static_cast<unsigned>(rng() % 1000);
    // Drift between filling and draining so the trace sees both a full and an empty pool.
    const bool filling = (op / 50000) % 2 == 0;
    if (dice < 10 && !freed.empty()) {
      // Double free of a block freed earlier (and not handed out again since).
      const uintptr_t off = freed[rng() % freed.size()];
      if (m.touches_live(off, off + 1)) continue;  // reused: no longer a double free
      const dilattn_pool_stats before = pool_stats(pool);
      CHECK_EQ(dilattn_pool_free(pool, reinterpret_cast<void*>(m.base + off)),
               DILATTN_ERROR_POOL_DOUBLE_FREE);
      CHECK(same_stats(before, pool_stats(pool)));
      ++abuses;
    } else if (dice < 20 && !m.live.empty()) {
      // Interior pointer: anywhere inside a live block but its start.
      auto it = m.live.begin();
      std::advance(it, static_cast<long>(rng() % std::min<size_t>(m.live.size(), 64)));
      const size_t block = block_for(it->second);
      const uintptr_t inside = it->first + 1 + rng() % (block - 1);
      const dilattn_pool_stats before = pool_stats(pool);
      CHECK_EQ(dilattn_pool_free(pool, reinterpret_cast<void*>(m.base + inside)),
               DILATTN_ERROR_POOL_INTERIOR_POINTER);
      CHECK(same_stats(before, pool_stats(pool)));
      ++abuses;
    } else if (dice < 25) {
      // Foreign: just past the arena.
      CHECK_EQ(dilattn_pool_free(pool, reinterpret_cast<void*>(m.base + kArena + 256 * (rng() % 8))),
               DILATTN_ERROR_POOL_FOREIGN_POINTER);
      ++abuses;
    } else if (dice < (filling ? 625u : 400u) || m.live.empty()) {
      // Sizes log-uniform over 1 B .. 512 KiB, sometimes a power of two exactly.
      const int shift = static_cast<int>(rng() % 20);
      size_t bytes = (size_t{1} << shift) + rng() % (size_t{1} << shift);
      if (rng() % 4 == 0) bytes = size_t{1} << shift;
      void* p = nullptr;
      const dilattn_status st = dilattn_pool_alloc(pool, bytes, &p);
      const size_t block = block_for(bytes);
      if (st == DILATTN_ERROR_OUT_OF_MEMORY) {
        // True only if the model has no free block of that size (checked on every 8th: the
        // model's walk costs more than the whole rest of an operation).
        if (ooms % 8 == 0) {
          size_t counts[64] = {};
          m.free_blocks(0, kArena, counts);
          for (int k = log2_of(block); k < 64; ++k) CHECK_EQ(counts[k], size_t{0});
        }
        CHECK(p == nullptr);
        ++ooms;
        continue;
      }
      CHECK_EQ(st, DILATTN_SUCCESS);
      if (st != DILATTN_SUCCESS) continue;
      const uintptr_t off = reinterpret_cast<uintptr_t>(p) - m.base;
      CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
      CHECK(off % block == 0);            // aligned to its own size in the arena
      CHECK(off + block <= kArena);       // inside the arena
      CHECK(!m.touches_live(off, off + block));  // overlaps no live block
      m.live[off] = bytes;
      m.in_use += block;
      m.requested += bytes;
      m.peak = std::max(m.peak, m.in_use);
      ++allocs;
    } else {
      auto it = m.live.begin();
      std::advance(it, static_cast<long>(rng() % std::min<size_t>(m.live.size(), 256)));
      if (rng() % 2) it = std::prev(m.live.end());
      CHECK_EQ(dilattn_pool_free(pool, reinterpret_cast<void*>(m.base + it->first)), DILATTN_SUCCESS);
      m.in_use -= block_for(it->second);
      m.requested -= it->second;
      if (freed.size() < 64) freed.push_back(it->first);
      else freed[rng() % freed.size()] = it->first;
      m.live.erase(it);
      ++frees;
    }
    if (op % 997 == 0) check_against_model(pool, m, op);
  }
  check_against_model(pool, m, ops);
  for (const auto& kv : m.live)
    CHECK_EQ(dilattn_pool_free(pool, reinterpret_cast<void*>(m.base + kv.first)), DILATTN_SUCCESS);
  m.live.clear();
  m.in_use = m.requested = 0;
  check_against_model(pool, m, ops);
  // After all frees the pool is one free block: the whole arena.
  const dilattn_pool_stats end = pool_stats(pool);
  CHECK_EQ(end.free_blocks[22], size_t{1});
  CHECK_EQ(end.largest_free_block, kArena);
  CHECK_EQ(end.bytes_in_use, size_t{0});
  size_t total_free = 0;
  for (size_t c : end.free_blocks) total_free += c;
  CHECK_EQ(total_free, size_t{1});
  std::printf("%ld operations: %ld allocations, %ld frees, %ld out-of-memory, %ld abuse calls, "
              "peak %zu bytes\n", ops, allocs, frees, ooms, abuses, m.peak);
  CHECK(allocs > ops / 4 && frees > ops / 4 && ooms > 0 && abuses > ops / 100);
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  std::free(memory);
  return harness::finish("pool_model_check");
}
