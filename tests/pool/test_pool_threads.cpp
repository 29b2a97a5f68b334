// test_pool_threads.cpp - four threads allocate and free on one pool at once (thread-safe).
//
// Each thread fills every block it gets with its own pattern and checks the pattern is intact
// before it frees the block, so two threads ever given overlapping blocks fail the test (and the
// ThreadSanitizer build, tests/pool/tsan.sh, sees any unlocked access). A fifth concern, stats
// read while the others work, must always be self-consistent. At the end the pool is one free
// block again and its counters are zero.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "pool_stats.h"

namespace {

constexpr int kThreads = 4;
constexpr size_t kArena = size_t{1} << 22;

struct Block {
  unsigned char* p;
  size_t bytes;
};

std::atomic<long> g_bad{0}, g_allocs{0}, g_ooms{0};
std::atomic<int> g_ready{0};  // a start line, so the threads really run at the same time

void worker(dilattn_pool pool, int id, int iterations) {
  std::mt19937 rng(1234u + static_cast<unsigned>(id));
  std::vector<Block> live;
  const unsigned char mark = static_cast<unsigned char>(0x11 * (id + 1));
  auto release = [&](size_t i) {
    const Block b = live[i];
    for (size_t j = 0; j < b.bytes; j += 61)
      if (b.p[j] != mark) {
        ++g_bad;
        break;
      }
    if (dilattn_pool_free(pool, b.p) != DILATTN_SUCCESS) ++g_bad;
    live[i] = live.back();
    live.pop_back();
  };
  ++g_ready;
  while (g_ready.load() < kThreads) std::this_thread::yield();
  for (int it = 0; it < iterations; ++it) {
    if (live.empty() || (rng() % 100 < 55 && live.size() < 64)) {
      const size_t bytes = 1 + rng() % (size_t{1} << (rng() % 16));
      void* p = nullptr;
      const dilattn_status s = dilattn_pool_alloc(pool, bytes, &p);
      if (s == DILATTN_ERROR_OUT_OF_MEMORY) {
        ++g_ooms;
        if (!live.empty()) release(rng() % live.size());
        continue;
      }
      if (s != DILATTN_SUCCESS || reinterpret_cast<uintptr_t>(p) % 256 != 0) {
        ++g_bad;
        continue;
      }
      std::memset(p, mark, bytes);
      live.push_back({static_cast<unsigned char*>(p), bytes});
      ++g_allocs;
    } else {
      release(rng() % live.size());
    }
  }
  while (!live.empty()) release(live.size() - 1);
}

}  // namespace

int main() {
  int iterations = 100000;
  if (const char* env = std::getenv("DILATTN_POOL_THREAD_ITERS")) iterations = std::atoi(env);
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, kArena);
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&pool, &o), DILATTN_SUCCESS);

  std::atomic<bool> done{false};
  std::atomic<long> inconsistent{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      dilattn_pool_stats s = pool_stats(pool);
      size_t free_bytes = 0;
      for (int k = 0; k < 64; ++k) free_bytes += s.free_blocks[k] << k;
      if (free_bytes + s.bytes_in_use != kArena || s.bytes_in_use > s.peak_bytes_in_use ||
          s.bytes_requested > s.bytes_in_use)
        ++inconsistent;
      ++reads;
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(worker, pool, t, iterations);
  for (std::thread& t : workers) t.join();
  done = true;
  reader.join();

  CHECK_EQ(g_bad.load(), 0L);
  CHECK_EQ(inconsistent.load(), 0L);
  CHECK(reads.load() > 0);
  CHECK(g_allocs.load() > static_cast<long>(kThreads) * iterations / 3);
  const dilattn_pool_stats end = pool_stats(pool);
  CHECK_EQ(end.bytes_in_use, size_t{0});
  CHECK_EQ(end.bytes_requested, size_t{0});
  CHECK_EQ(end.live_blocks, size_t{0});
  CHECK_EQ(end.free_blocks[22], size_t{1});
  CHECK_EQ(end.largest_free_block, kArena);
  std::printf("%d threads x %d iterations: %ld allocations, %ld out-of-memory, %ld stats reads, "
              "peak %zu bytes\n", kThreads, iterations, g_allocs.load(), g_ooms.load(),
              reads.load(), end.peak_bytes_in_use);
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  return harness::finish("pool_threads");
}
