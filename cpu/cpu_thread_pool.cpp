// cpu_thread_pool.cpp - ThreadPool::run on the process-wide helper threads (cpu_thread_pool.h).
//
// A run is a Job: an atomic item counter and a number of worker slots (slot 0: the caller).
// The caller queues the job, works on it, then withdraws it (no helper joins after that) and
// waits for the helpers that joined to finish their last item. A helper takes the oldest
// queued job and one of its slots. A helper that cannot be started (std::system_error) is
// simply not there: the results do not depend on how many workers run.
// fork(): the child has none of the parent's helpers. pthread_atfork handlers hold the lock
// across fork() (no helper is taking a job at that moment) and give the child an empty pool
// that starts its own helpers on first use; the parent's threads are never joined there
// (joining a thread the process does not have would wait forever at exit).
#include "cpu_thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace dilattn::cpu {

namespace {

struct Job {
  int64_t items = 0;
  const std::function<void(int64_t, int)>* body = nullptr;
  Progress* progress = nullptr;  // the call's (SPEC 14.11), or null
  std::atomic<int64_t> next{0};
  int slots = 1;    // workers allowed, the caller included
  int taken = 1;    // slots handed out (the caller has slot 0); under Helpers::mu_
  int running = 0;  // helpers inside the job; under Helpers::mu_

  void work(int slot) {
    if (progress == nullptr) {
      for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1))
        (*body)(item, slot);
      return;
    }
    // Slot 0 is the calling thread, the only one that may call the callback.
    for (int64_t item = next.fetch_add(1); item < items && !progress->cancelled();
         item = next.fetch_add(1)) {
      (*body)(item, slot);
      progress->add(1);
      if (slot == 0) progress->report();
    }
  }
};

class Helpers {
 public:
  static Helpers& instance() {
    static Helpers helpers;  // started on first use, joined at exit
    return helpers;
  }

  // Queues the job for up to job.slots - 1 helpers, starting helpers up to that many.
  void offer(Job* job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t wanted = static_cast<size_t>(job->slots - 1);
      try {
        while (threads_.size() < wanted) threads_.emplace_back([this] { loop(); });
      } catch (const std::system_error&) {
        // fewer helpers; the caller does what they do not
      }
      queue_.push_back(job);
    }
    work_cv_.notify_all();
  }

  // No helper joins the job after this; returns when those that joined are done.
  void finish(Job* job) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto at = std::find(queue_.begin(), queue_.end(), job);
    if (at != queue_.end()) queue_.erase(at);
    done_cv_.wait(lock, [job] { return job->running == 0; });
  }

  // The pthread_atfork handlers, registered with the pool.
  static void before_fork() { instance().mu_.lock(); }
  static void after_fork_in_parent() { instance().mu_.unlock(); }
  static void after_fork_in_child() {
    Helpers& h = instance();
    // The parent's std::thread objects name threads this process does not have, and its
    // condition variables count waiters it does not have: keep the threads, unused and
    // unjoined, until exit; start over with a fresh lock, condition variables and queue.
    static std::vector<std::thread>* parents = new std::vector<std::thread>();
    parents->insert(parents->end(), std::make_move_iterator(h.threads_.begin()),
                    std::make_move_iterator(h.threads_.end()));
    h.threads_.clear();
    h.queue_.clear();  // jobs of the parent's other threads: they are not here either
    new (&h.work_cv_) std::condition_variable();
    new (&h.done_cv_) std::condition_variable();
    new (&h.mu_) std::mutex();  // the parent's copy is held (before_fork)
  }

  ~Helpers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  Helpers() { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Job* job = queue_.front();
      const int slot = job->taken++;
      if (job->taken == job->slots) queue_.pop_front();  // every slot handed out
      ++job->running;
      lock.unlock();
      job->work(slot);
      lock.lock();
      if (--job->running == 0) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stop_
  std::condition_variable done_cv_;  // a job's last helper left it
  std::deque<Job*> queue_;           // jobs with slots left
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace

void ThreadPool::run(int64_t items, const std::function<void(int64_t, int)>& body) const {
  Job job;
  job.items = items;
  job.body = &body;
  job.progress = progress_;
  job.slots = static_cast<int>(std::min<int64_t>(threads_, std::max<int64_t>(items, 1)));
  if (job.slots == 1) return job.work(0);  // nothing to share: no lock, no helper
  Helpers& helpers = Helpers::instance();
  helpers.offer(&job);
  job.work(0);
  helpers.finish(&job);
}

}  // namespace dilattn::cpu
