// cpu_thread_pool.h - a small pool of std::thread that runs numbered work items (cpu backend).
//
// run(items, body) calls body(item, worker) once for every item in [0, items), on `threads`
// workers (the calling thread is worker 0). Items are handed out by an atomic counter, so which
// worker runs an item varies from run to run; the cpu backend keeps results independent of that
// by giving each item its own output rows and its own workspace tiles (indexed by worker), which
// is why its backward is bitwise identical for any thread count
// (tests/cpu/test_cpu_determinism.cpp).
// Threads live for one run: a plan may be used from several threads at once, so the pool holds
// no state between calls and needs no lock.
#ifndef DILATTN_CPU_THREAD_POOL_H
#define DILATTN_CPU_THREAD_POOL_H

#include <cstdint>
#include <functional>

namespace dilattn::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  // Workers actually used for `items` items (never more workers than items).
  int workers_for(int64_t items) const;
  void run(int64_t items, const std::function<void(int64_t item, int worker)>& body) const;

 private:
  int threads_;
};

}  // namespace dilattn::cpu

#endif  // DILATTN_CPU_THREAD_POOL_H
