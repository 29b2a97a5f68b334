// progress.h - a call's progress callback (SPEC 14.11): one Progress per call that has one,
// made by dispatch.cpp from dilattn_call_options and handed to the backend in its arguments
// (null without a callback, so a call without one pays a pointer test per thread-pool run,
// and per row in the reference).
//
// The callback runs on the calling thread only. Work items may finish on any worker thread,
// so they are counted with an atomic (add); the calling thread turns the count into calls
// (report), at most one per kMinInterval, between its own work items. A non-zero return sets
// a flag every worker reads before its next item (cancelled), so a cancel stops the work
// within one item on each worker.
// Checked by tests/progress/test_progress.cpp.
#ifndef DILATTN_PROGRESS_H
#define DILATTN_PROGRESS_H

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "dilattn.h"

namespace dilattn {

class Progress {
 public:
  // SPEC 14.11: at most one call per 100 ms between the first and the last.
  static constexpr std::chrono::milliseconds kMinInterval{100};

  Progress(dilattn_progress_fn fn, void* user) : fn_(fn), user_(user) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Calling thread, before any work: fixes the total (at least 1) and makes the first call.
  void begin(int64_t total) {
    total_ = std::max<int64_t>(total, 1);
    call(0);
  }

  // Any thread, after finishing `units` work items.
  void add(int64_t units) { done_.fetch_add(units, std::memory_order_relaxed); }

  // Calling thread, between work items: a call when kMinInterval has passed since the last
  // one began (so a callback slower than the interval is called after every item).
  void report() {
    if (cancelled()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_call_ < kMinInterval) return;
    call(std::min(done_.load(std::memory_order_relaxed), total_ - 1));
  }

  // Calling thread, after one unit of work done on it alone (the reference's rows): counts it,
  // reports, and says whether to go on.
  bool step() {
    add(1);
    report();
    return !cancelled();
  }

  // Any thread: whether a call asked the work to stop.
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // Calling thread, after the outputs are written: the last call, done = total. Its return
  // value is ignored, since the work it could stop is over.
  void finish() { fn_(user_, total_, total_); }

 private:
  // Before the last call done stays below total: "done = total" means the outputs are written.
  void call(int64_t done) {
    last_call_ = std::chrono::steady_clock::now();
    if (fn_(user_, done, total_) != 0) cancelled_.store(true, std::memory_order_relaxed);
  }

  dilattn_progress_fn fn_;
  void* user_;
  int64_t total_ = 1;
  std::atomic<int64_t> done_{0};
  std::atomic<bool> cancelled_{false};
  std::chrono::steady_clock::time_point last_call_{};
};

}  // namespace dilattn

#endif  // DILATTN_PROGRESS_H
