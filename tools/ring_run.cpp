// ring_run.cpp - `--ring-threads P` (see ring_run.h): shards in, ring call per rank thread,
// shards out.
#include "ring_run.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli_error.h"
#include "library_status.h"

namespace dilattn_cli {

namespace {

// One rank's shards: its rows of every input, and its rows of every output to fill.
struct RankShards {
  std::vector<std::unique_ptr<Shard>> inputs, outputs;
  const dilattn_tensor* in(size_t i) const { return inputs[i]->view(); }
  const dilattn_tensor* out(size_t i) const { return outputs[i]->view(); }
};

// One thread per rank, each held until every rank's thread started: a rank may enter the ring
// only when every other rank will, else it would wait for a missing rank until the ring's
// timeout. The destructor lets them go (or not, see release) and joins every one, so no path out
// of run_ranks, an exception included, leaves a joinable std::thread (std::terminate).
class RankThreads {
 public:
  RankThreads() = default;
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  ~RankThreads() {
    release(false);  // no effect after an earlier release
    for (std::thread& t : threads_) t.join();
  }
  void reserve(int32_t n) { threads_.reserve(static_cast<size_t>(n)); }
  // Starts a thread that runs body once released with go; false (error() says why) when the
  // thread could not start, e.g. past a process or address-space limit.
  template <class Body>
  bool start(Body body) {
    try {
      threads_.emplace_back([this, body] {
        try {
          if (wait()) body();
        } catch (const std::bad_alloc&) {
          // body's status is set before its message is copied; the message alone is lost
        }
      });
      return true;
    } catch (const std::system_error& e) {
      error_ = e.what();
      return false;
    }
  }
  const std::string& error() const { return error_; }
  // Lets every thread run its body (go) or return at once (!go); the first call counts.
  void release(bool go) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (released_) return;
      released_ = true;
      go_ = go;
    }
    cv_.notify_all();
  }

 private:
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return released_; });
    return go_;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false, go_ = false;
  std::string error_;  // what() of the std::system_error
  std::vector<std::thread> threads_;
};

// Makes every rank's shards here, then runs call(comm, shards) on one thread per rank, then
// copies every rank's output rows into the full outputs. The shards come first so that a rank
// failing to make them (out of memory, a CUDA error) stops the command before any rank enters
// the ring, where the others would wait for it until the timeout; for the same reason no rank
// calls the ring until every rank's thread started (RankThreads), and a thread that cannot
// start (a process or address-space limit) stops the command, exit 3, once every started
// thread returned. A failed call throws for the first failure, preferring a rank's own error
// over the DILATTN_ERROR_COMM of the ranks that saw it fail; no output is touched then.
template <class Call>
void run_ranks(const RingOptions& ring, ShardPlace place, int64_t seqlen, const char* what,
               std::initializer_list<Operand> inputs, std::initializer_list<Operand> outputs,
               Call call) {
  std::vector<RankShards> shards(static_cast<size_t>(ring.ranks));
  for (int32_t r = 0; r < ring.ranks; ++r) {
    Rows rows;
    check_status(dilattn_ring_shard_rows(seqlen, ring.ranks, r, ring.split, rows.first, rows.count),
                 "--ring-threads");
    for (const Operand& t : inputs)
      shards[r].inputs.push_back(std::make_unique<Shard>(*t.full, rows, t.lse, true, place));
    for (const Operand& t : outputs)
      shards[r].outputs.push_back(std::make_unique<Shard>(*t.full, rows, t.lse, false, place));
  }
  std::vector<dilattn_comm> comms(static_cast<size_t>(ring.ranks), nullptr);
  check_status(dilattn_comm_create_threads(ring.ranks, ring.timeout_ms, comms.data()), "--ring-threads");
  std::vector<dilattn_status> status(comms.size(), DILATTN_SUCCESS);
  std::vector<std::string> message(comms.size());
  std::string not_started;  // why a rank's thread could not start; empty when all did
  {
    RankThreads threads;
    try {
      threads.reserve(ring.ranks);
      for (int32_t r = 0; r < ring.ranks; ++r) {
        const bool started = threads.start([&, r] {
          status[r] = call(comms[r], shards[r]);
          message[r] = dilattn_last_error();
        });
        if (!started) {
          not_started = "could not start the thread of ring rank " + std::to_string(r) + " of " +
                        std::to_string(ring.ranks) + ": " + threads.error();
          break;
        }
      }
    } catch (const std::bad_alloc&) {
      not_started = "out of memory starting the ring's threads";
    }
    threads.release(not_started.empty());  // and every started thread is joined
  }
  if (!not_started.empty()) {
    for (dilattn_comm c : comms) dilattn_comm_destroy(c);
    throw CliError(kExitRuntime, "flag --ring-threads " + std::to_string(ring.ranks) + ": " +
                                     not_started + " (a process or memory limit?)");
  }
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  int32_t worst = -1;
  for (int32_t r = 0; r < ring.ranks; ++r)
    if (status[r] != DILATTN_SUCCESS && (worst < 0 || (status[worst] == DILATTN_ERROR_COMM &&
                                                       status[r] != DILATTN_ERROR_COMM)))
      worst = r;
  if (worst >= 0)
    check_status(status[worst], std::string(what) + " (ring rank " + std::to_string(worst) + ")",
                 message[worst]);
  for (RankShards& s : shards)  // each rank's own rows of the full outputs
    for (std::unique_ptr<Shard>& out : s.outputs) out->copy_out();
}

}  // namespace

void ring_forward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                  const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                  const dilattn_tensor& o, const dilattn_tensor& lse,
                  const dilattn_call_options* call) {
  run_ranks(ring, place, q.shape[1], "forward", {{&q}, {&k}, {&v}}, {{&o}, {&lse, true}},
            [&](dilattn_comm comm, const RankShards& s) {
              return dilattn_ring_forward_ex(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                             s.out(0), s.out(1), call);
            });
}

void ring_backward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                   const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                   const dilattn_tensor& o, const dilattn_tensor& lse, const dilattn_tensor& d_o,
                   const dilattn_tensor& dq, const dilattn_tensor& dk, const dilattn_tensor& dv,
                   const dilattn_call_options* call, int64_t heads) {
  // One d_sinks per rank: the ranks run at once, so none writes another's.
  const bool d_sinks = call != nullptr && call->d_sinks != nullptr;
  std::vector<std::vector<double>> rank_d_sinks(
      static_cast<size_t>(ring.ranks), std::vector<double>(d_sinks ? static_cast<size_t>(heads) : 0));
  run_ranks(ring, place, q.shape[1], "backward", {{&q}, {&k}, {&v}, {&o}, {&lse, true}, {&d_o}},
            {{&dq}, {&dk}, {&dv}}, [&](dilattn_comm comm, const RankShards& s) {
              int32_t rank = 0, ranks = 0;
              if (dilattn_status st = dilattn_comm_rank(comm, &rank, &ranks)) return st;
              dilattn_call_options mine = call != nullptr ? *call : dilattn_call_options{};
              if (d_sinks) mine.d_sinks = rank_d_sinks[static_cast<size_t>(rank)].data();
              return dilattn_ring_backward_ex(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                              s.in(3), s.in(4), s.in(5), s.out(0), s.out(1),
                                              s.out(2), call != nullptr ? &mine : nullptr);
            });
  if (d_sinks)
    std::copy(rank_d_sinks[0].begin(), rank_d_sinks[0].end(), call->d_sinks);
}

}  // namespace dilattn_cli
