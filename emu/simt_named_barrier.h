// simt_named_barrier.h - named barriers (PTX bar.sync / barrier.sync and bar.arrive with a
// barrier id and a thread count) for the emulator.
//
// Part of the SIMT emulator (emu/README.md). Warp-specialised kernels synchronise subsets of the
// block with them: two consumer warpgroups take turns (one arrives, the other syncs), a
// producer and its consumers meet without stopping the whole block. The PTX ISA, section
// "Parallel Synchronization and Communication Instructions: bar, barrier", counts arrivals at
// barrier `id` until `count` threads have arrived, then releases the waiting ones and resets;
// bar.arrive counts without waiting. Here:
//   - ids 1 .. 15 (0 is __syncthreads' barrier, which the emulator keeps apart);
//   - `count` a positive multiple of 32 and at most the block's threads;
//   - every arrival of one phase must give the same count, else the launch fails;
//   - arrivals are counted per thread, so a warp of which only some lanes arrive never
//     completes the barrier and the launch fails with a deadlock naming it (the GPU counts
//     whole warps and would hang or misbehave);
//   - a barrier still short of its count when nothing else can run is a deadlock.
// Checked by tests/emu/test_emu_warp_specialization.cpp.
#ifndef DILATTN_SIMT_NAMED_BARRIER_H
#define DILATTN_SIMT_NAMED_BARRIER_H

#include <cstdint>
#include <cstdio>
#include <string>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

struct NamedBarrier {
  unsigned expected = 0;  // threads this phase needs (0: no phase open)
  unsigned arrived = 0;
  uint64_t generation = 0;  // phases completed
};

struct NamedBarrierState : BlockExtension {
  NamedBarrier barriers[16];
};

inline bool named_barrier_passed(BlockRun& b, const Fiber& f) {
  const unsigned id = static_cast<unsigned>(reinterpret_cast<uintptr_t>(f.wait.ptr));
  return block_extension<NamedBarrierState>(b).barriers[id].generation != f.wait.value;
}
inline std::string named_barrier_text(BlockRun& b, const Fiber& f) {
  const unsigned id = static_cast<unsigned>(reinterpret_cast<uintptr_t>(f.wait.ptr));
  const NamedBarrier& n = block_extension<NamedBarrierState>(b).barriers[id];
  char buf[128];
  std::snprintf(buf, sizeof buf, "named barrier %u, which %u of the %u threads it counts reached",
                id, n.arrived, n.expected);
  return buf;
}

// Counts the calling thread at barrier `id`; returns the generation it arrived in and whether
// its arrival completed the phase.
inline uint64_t named_barrier_count(unsigned id, unsigned count, const char* what,
                                    bool* completed) {
  BlockRun& b = *current_fiber().block;
  const unsigned threads = static_cast<unsigned>(b.fibers.size());
  char buf[192];
  if (id < 1 || id > 15) {
    std::snprintf(buf, sizeof buf, "%s: barrier id %u outside 1 .. 15", what, id);
    fail_thread(buf);
  }
  if (count == 0 || count % 32 != 0 || count > threads) {
    std::snprintf(buf, sizeof buf,
                  "%s %u: thread count %u is not a positive multiple of 32 up to the block's %u",
                  what, id, count, threads);
    fail_thread(buf);
  }
  NamedBarrier& n = block_extension<NamedBarrierState>(b).barriers[id];
  if (n.arrived == 0) {
    n.expected = count;
  } else if (n.expected != count) {
    std::snprintf(buf, sizeof buf,
                  "%s %u: this thread counts %u threads, earlier arrivals of the phase %u", what,
                  id, count, n.expected);
    fail_thread(buf);
  }
  const uint64_t generation = n.generation;
  *completed = ++n.arrived == n.expected;
  if (*completed) {
    n.arrived = 0;
    ++n.generation;
  }
  return generation;
}

}  // namespace detail

// bar.sync id, count: waits until `count` threads have arrived at barrier `id`.
inline void named_barrier_sync(unsigned id, unsigned count) {
  bool completed = false;
  const uint64_t generation = detail::named_barrier_count(id, count, "bar.sync", &completed);
  if (completed) return;
  detail::WaitPost post;
  post.ready = detail::named_barrier_passed;
  post.describe = detail::named_barrier_text;
  post.ptr = reinterpret_cast<const void*>(static_cast<uintptr_t>(id));
  post.value = generation;
  detail::wait_until(post);
}

// bar.arrive id, count: counts the calling thread at barrier `id` and goes on.
inline void named_barrier_arrive(unsigned id, unsigned count) {
  bool completed = false;
  detail::named_barrier_count(id, count, "bar.arrive", &completed);
}

}  // namespace simt

#endif  // DILATTN_SIMT_NAMED_BARRIER_H
