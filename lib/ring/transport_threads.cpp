// transport_threads.cpp - the threads transport of ring attention: P ranks are P threads of one
// process (SPEC 5, dilattn_comm_create_threads).
//
// Ranks share one state guarded by one mutex. An exchange is a rendezvous per direction: the
// sender posts its message (two halves, ring_transport.h) in its outgoing slot, addressed to
// rank `to`; rank `to` copies the halves, back to back, into its own buffer (so no rank ever
// computes on another's memory) and marks the slot consumed; the sender's exchange_end waits
// for that. Zero bytes posts nothing (and a receive of zero bytes waits for nothing): the ring
// sends only rows the receiver needs. Every wait has the communicator's timeout: past it the
// waiting rank marks the state broken, wakes everyone, and every call from then on returns
// DILATTN_ERROR_COMM. A rank never returns while a neighbour is still copying from its buffer
// (the copy itself never waits), so a timeout cannot leave a dangling read. The receiver copies
// with its ring call's RingOps::copy_bytes (ring_ops.h): a host memcpy for the CPU backends, a
// finished device-to-device copy for the cuda backend, so ranks on one or several GPUs of this
// process pass chunks in device memory (the ring waits for a chunk's writes before posting it).
// Checked by tests/ring/test_ring_errors.cpp (a missing rank, a failing rank).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "errors.h"
#include "ring_ops.h"
#include "ring_transport.h"

namespace dilattn {

namespace {

using Clock = std::chrono::steady_clock;

struct ThreadsState {
  explicit ThreadsState(int32_t n, int32_t timeout) : P(n), timeout_ms(timeout), votes(n), arrived(n, false), slots(n) {}
  const int32_t P;
  const int32_t timeout_ms;
  std::mutex mu;
  std::condition_variable cv;
  bool broken = false;
  std::string broken_why;

  // allgather: one round at a time; `round` counts completed rounds.
  uint64_t round = 0;
  int32_t arrived_count = 0;
  std::vector<RingVote> votes, result;
  std::vector<bool> arrived;

  // Slot r holds rank r's outgoing rows, for rank `to`.
  struct Slot {
    MessageHalves message;
    int32_t to = 0;
    uint64_t posted = 0, consumed = 0;
    bool copying = false;
  };
  std::vector<Slot> slots;
};

class ThreadsTransport final : public RingTransport {
 public:
  ThreadsTransport(std::shared_ptr<ThreadsState> state, int32_t rank)
      : s_(std::move(state)), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return s_->P; }
  Memory memory() const override { return Memory::host_or_device; }
  void receive_with(RingOps* ops) override { ops_ = ops; }

  dilattn_status allgather(const RingVote& mine, RingVote* all) override {
    ThreadsState& s = *s_;
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.broken) return broken_error();
    const uint64_t my_round = s.round;
    s.votes[rank_] = mine;
    s.arrived[rank_] = true;
    if (++s.arrived_count == s.P) {  // the last to arrive publishes the round
      s.result = s.votes;
      s.arrived_count = 0;
      s.arrived.assign(s.P, false);
      ++s.round;
      s.cv.notify_all();
    } else if (!wait(lock, [&] { return s.round != my_round; })) {
      std::string missing;
      for (int32_t r = 0; r < s.P; ++r)
        if (!s.arrived[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return time_out(lock, "ranks waiting for rank(s) " + missing + " to start the ring call");
    }
    if (s.round == my_round) return broken_error();  // woken by another rank's timeout
    for (int32_t r = 0; r < s.P; ++r) all[r] = s.result[r];
    return DILATTN_SUCCESS;
  }

  dilattn_status exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                size_t recv_bytes, int32_t from) override {
    ThreadsState& s = *s_;
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.broken) return broken_error();
    sending_ = send.bytes() != 0;
    if (sending_) {
      ThreadsState::Slot& out = s.slots[rank_];
      out.message = send;
      out.to = to;
      ++out.posted;
      s.cv.notify_all();
    }
    to_ = to;
    recv_ = recv;
    recv_bytes_ = recv_bytes;
    from_ = from;
    return DILATTN_SUCCESS;
  }

  dilattn_status exchange_end() override {
    ThreadsState& s = *s_;
    std::unique_lock<std::mutex> lock(s.mu);
    if (recv_bytes_ != 0) {
      if (dilattn_status st = receive(lock)) return st;
    } else if (s.broken) {
      return retract(lock);
    }
    // Our own rows must have been copied before their buffer may change.
    if (!sending_) return DILATTN_SUCCESS;
    ThreadsState::Slot& out = s.slots[rank_];
    if (!wait(lock, [&] { return s.broken || out.consumed == out.posted; }))
      return time_out(lock, "rank " + std::to_string(rank_) + " waiting for rank " +
                                std::to_string(to_) + " to take its rows");
    if (out.consumed != out.posted) return retract(lock);
    return DILATTN_SUCCESS;
  }

 private:
  // Copies rank from_'s posted rows, addressed to us, into our own buffer.
  dilattn_status receive(std::unique_lock<std::mutex>& lock) {
    ThreadsState& s = *s_;
    ThreadsState::Slot& in = s.slots[from_];
    // A posted message of rank from_ for another rank is not ours: wait until it was taken.
    if (!wait(lock, [&] { return s.broken || (in.posted > in.consumed && in.to == rank_); }))
      return time_out(lock, "rank " + std::to_string(rank_) + " waiting for rows from rank " +
                                std::to_string(from_));
    if (s.broken) return retract(lock);
    if (in.message.bytes() != recv_bytes_) {
      s.broken = true;
      s.broken_why = "rank " + std::to_string(from_) + " sent " + std::to_string(in.message.bytes()) +
                     " bytes, rank " + std::to_string(rank_) + " expected " +
                     std::to_string(recv_bytes_);
      s.cv.notify_all();
      return retract(lock);
    }
    in.copying = true;
    lock.unlock();
    const MessageHalves& m = in.message;
    auto* const second = static_cast<unsigned char*>(recv_) + m.half_bytes;
    dilattn_status copied = DILATTN_SUCCESS;
    if (ops_ != nullptr) {
      copied = ops_->copy_bytes(recv_, m.first, m.half_bytes);
      if (copied == DILATTN_SUCCESS) copied = ops_->copy_bytes(second, m.second, m.half_bytes);
    } else {
      std::memcpy(recv_, m.first, m.half_bytes);
      std::memcpy(second, m.second, m.half_bytes);
    }
    lock.lock();
    in.copying = false;
    ++in.consumed;
    s.cv.notify_all();
    if (copied == DILATTN_SUCCESS) return DILATTN_SUCCESS;
    if (!s.broken) {
      s.broken = true;
      s.broken_why = "rank " + std::to_string(rank_) + " could not copy rows: " +
                     dilattn_last_error();
      s.cv.notify_all();
    }
    return retract(lock);
  }

  // Waits until done() or the timeout; false on timeout (done() still false).
  template <class Done>
  bool wait(std::unique_lock<std::mutex>& lock, Done done) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(s_->timeout_ms);
    return s_->cv.wait_until(lock, deadline, done);
  }

  dilattn_status broken_error() {
    return set_error(DILATTN_ERROR_COMM, "rank %d: the communicator is broken (%s); create a new one",
                     static_cast<int>(rank_), s_->broken_why.c_str());
  }

  // A wait ran out: break the communicator for everyone, then leave safely.
  dilattn_status time_out(std::unique_lock<std::mutex>& lock, const std::string& what) {
    ThreadsState& s = *s_;
    if (!s.broken) {
      s.broken = true;
      s.broken_why = what + ": no answer within " + std::to_string(s.timeout_ms) + " ms";
      s.cv.notify_all();
    }
    return retract(lock);
  }

  // On a broken communicator: withdraw our posted chunk, waiting out a copy in progress (it
  // never blocks), so no neighbour reads our buffer after we return.
  dilattn_status retract(std::unique_lock<std::mutex>& lock) {
    ThreadsState::Slot& out = s_->slots[rank_];
    s_->cv.wait(lock, [&] { return !out.copying; });
    out.message = MessageHalves{};
    out.consumed = out.posted;
    return broken_error();
  }

  std::shared_ptr<ThreadsState> s_;
  const int32_t rank_;
  // The exchange in progress.
  bool sending_ = false;
  int32_t to_ = 0, from_ = 0;
  void* recv_ = nullptr;
  size_t recv_bytes_ = 0;
  RingOps* ops_ = nullptr;
};

}  // namespace

dilattn_status make_thread_transports(int32_t num_ranks, int32_t timeout_ms,
                                      std::unique_ptr<RingTransport>* transports) {
  auto state = std::make_shared<ThreadsState>(num_ranks, timeout_ms);
  for (int32_t r = 0; r < num_ranks; ++r)
    transports[r] = std::make_unique<ThreadsTransport>(state, r);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
