// cpu_thread_pool.cpp - ThreadPool::run: an atomic item counter shared by std::thread workers.
// See cpu_thread_pool.h. A worker that cannot be started (std::system_error) is simply not used:
// the remaining workers, at least the caller, take its items.
#include "cpu_thread_pool.h"

#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace dilattn::cpu {

int ThreadPool::workers_for(int64_t items) const {
  return static_cast<int>(items < threads_ ? (items < 1 ? 1 : items) : threads_);
}

void ThreadPool::run(int64_t items, const std::function<void(int64_t, int)>& body) const {
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1))
      body(item, worker);
  };
  const int workers = workers_for(items);
  std::vector<std::thread> started;
  started.reserve(static_cast<size_t>(workers));
  for (int w = 1; w < workers; ++w) {
    try {
      started.emplace_back(work, w);
    } catch (const std::system_error&) {
      break;  // fewer workers; the results do not depend on how many
    }
  }
  work(0);
  for (std::thread& t : started) t.join();
}

}  // namespace dilattn::cpu
