// cpu_thread_pool.cpp - ThreadPool::run on the process-wide helper threads (cpu_thread_pool.h).
//
// A run is a Job: an atomic item counter and a number of worker slots (slot 0: the caller).
// The caller queues the job, works on it, then withdraws it (no helper joins after that) and
// waits for the helpers that joined to finish their last item. A helper takes the oldest
// queued job and one of its slots. A helper that cannot be started (std::system_error) is
// simply not there: the results do not depend on how many workers run.
#include "cpu_thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace dilattn::cpu {

namespace {

struct Job {
  int64_t items = 0;
  const std::function<void(int64_t, int)>* body = nullptr;
  std::atomic<int64_t> next{0};
  int slots = 1;    // workers allowed, the caller included
  int taken = 1;    // slots handed out (the caller has slot 0); under Helpers::mu_
  int running = 0;  // helpers inside the job; under Helpers::mu_

  void work(int slot) {
    for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1))
      (*body)(item, slot);
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

  ~Helpers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  Helpers() = default;

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
  job.slots = static_cast<int>(std::min<int64_t>(threads_, std::max<int64_t>(items, 1)));
  if (job.slots == 1) return job.work(0);  // nothing to share: no lock, no helper
  Helpers& helpers = Helpers::instance();
  helpers.offer(&job);
  job.work(0);
  helpers.finish(&job);
}

}  // namespace dilattn::cpu
