// cpu_thread_pool.h - the cpu backend's threads: one pool per process, started on first use,
// that runs numbered work items.
//
// ThreadPool(threads).run(items, body) calls body(item, worker) once for every item in
// [0, items), on up to `threads` workers: the calling thread is worker 0, the others are
// helper threads of the process-wide pool, which grows to the largest `threads` any call asked
// for (the plan's num_threads: desc, else DILATTN_NUM_THREADS, else the core count) and lives
// until the process ends. Items are handed out by an atomic counter, so which worker runs an
// item varies from run to run; the cpu backend keeps results independent of that by giving
// each item its own output rows and its own workspace tiles (indexed by worker, within the
// call's own workspace), which is why its results are bitwise identical for any thread count
// (tests/cpu/test_cpu_determinism.cpp).
//
// A plan may be used from several threads at once: each run is its own job with its own
// counter and worker numbers; jobs of different callers share the helpers, and a caller
// always works on its own job, so it finishes even when every helper is busy elsewhere (or
// there are none: a helper that cannot be started, or a child after fork()). Checked by
// tests/cpu/test_cpu_isa_concurrent.cpp (4 user threads at once, bitwise equal results).
#ifndef DILATTN_CPU_THREAD_POOL_H
#define DILATTN_CPU_THREAD_POOL_H

#include <cstdint>
#include <functional>

#include "progress.h"

namespace dilattn::cpu {

// With a call's Progress (SPEC 14.11; null: none), every finished item is counted, the
// calling thread reports between its items, and once the callback cancels no worker starts
// another item (of this run or any later run of the call).
class ThreadPool {
 public:
  explicit ThreadPool(int threads, Progress* progress = nullptr)
      : threads_(threads < 1 ? 1 : threads), progress_(progress) {}
  void run(int64_t items, const std::function<void(int64_t item, int worker)>& body) const;

 private:
  int threads_;
  Progress* progress_;
};

}  // namespace dilattn::cpu

#endif  // DILATTN_CPU_THREAD_POOL_H
