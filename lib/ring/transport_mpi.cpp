// transport_mpi.cpp - the MPI transport of ring attention: one rank per MPI process (SPEC 5,
// dilattn_comm_create_mpi). Built when meson finds MPI (option mpi); transport_mpi_absent.cpp
// stands in otherwise.
//
//   create:    MPI_Comm_idup of the caller's communicator, so the ring's messages never match
//              the caller's; the errors of the duplicate return (MPI_ERRORS_RETURN), never abort.
//   allgather: MPI_Iallgather of the fixed-size RingVote, as bytes.
//   exchange:  exchange_begin copies the message's two halves, back to back, into a staging
//              buffer the transport owns and posts MPI_Irecv from `from` and MPI_Isend to
//              `to` (in pieces of at most kMpiPieceBytes: MPI counts are int); exchange_end
//              waits for both and copies the received staging buffer into the caller's. Zero bytes one way posts nothing
//              that way (the ring sends only the rows a rank needs, ring_needs.h).
// Every wait polls (MPI_Testall) against the communicator's timeout. Past it the rank marks the
// communicator broken (every later call: DILATTN_ERROR_COMM) and returns; nothing calls
// MPI_Abort. A send MPI cannot cancel (Open MPI's ob1 cancels no send) and a collective no one
// may cancel stay posted after a timeout: that is why they read and write only buffers this
// transport owns, and why destroy keeps such buffers for the life of the process (park) rather
// than free memory MPI may still touch. The staging costs one copy of each message on each
// side; its bytes count in dilattn_comm_peak_bytes (buffer_bytes()).
// Checked by tests/ring/mpi/ (run under mpirun): every ring case, a failing rank, a missing rank,
// chunks split into pieces, bitwise equality with the threads transport.
// The C API only: the deprecated C++ bindings (and their warnings) stay out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"
#include "ring_shard.h"
#include "ring_transport.h"

namespace dilattn {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExchangeTag = 1;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

// Polls `requests` until all completed or `timeout_ms` passed: true when all completed. The
// first polls spin (a neighbour that is ready answers within microseconds), then the rank
// sleeps between polls so that it leaves the core to the ranks still computing.
bool wait_all(std::vector<MPI_Request>& requests, int32_t timeout_ms, int* error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  *error = MPI_SUCCESS;
  for (int poll = 0;; ++poll) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      *error = rc;
      return false;
    }
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    if (poll >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// What posted requests read and write: owned here, apart from the transport object, so that
// after a timeout it can outlive the transport (see the top of the file).
struct MpiBuffers {
  RingVote vote{};
  std::vector<RingVote> votes;
  std::vector<unsigned char> send, recv;
};

// Buffers of a broken communicator that posted requests may still touch: kept for the life of
// the process (reachable, so a leak checker does not report them; never more than one set per
// broken communicator).
void park(std::unique_ptr<MpiBuffers> buffers) {
  static std::mutex mu;
  static auto* parked = new std::vector<std::unique_ptr<MpiBuffers>>();
  std::lock_guard<std::mutex> lock(mu);
  parked->push_back(std::move(buffers));
}

class MpiTransport final : public RingTransport {
 public:
  MpiTransport(MPI_Comm comm, int32_t timeout_ms, size_t piece_bytes, bool main_thread_only)
      : comm_(comm), timeout_ms_(timeout_ms), piece_bytes_(piece_bytes),
        main_thread_only_(main_thread_only), buf_(std::make_unique<MpiBuffers>()) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    buf_->votes.resize(static_cast<size_t>(size_));
  }

  ~MpiTransport() override {
    bool posted = false;
    for (MPI_Request r : requests_) posted = posted || r != MPI_REQUEST_NULL;
    if (posted) park(std::move(buf_));  // MPI may still touch them
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;  // too late for MPI calls; the process is ending
    // After a timeout: a receive is cancelled; sends and receives are freed (MPI completes them
    // in the background); a collective request may be neither, it stays.
    for (size_t i = 0; i < requests_.size() && exchanging_; ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      if (i < receives_) MPI_Cancel(&requests_[i]);  // the receives come first (exchange_begin)
      MPI_Request_free(&requests_[i]);
    }
    MPI_Comm_free(&comm_);
  }

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  size_t buffer_bytes() const override { return buf_->send.size() + buf_->recv.size(); }

  dilattn_status allgather(const RingVote& mine, RingVote* all) override {
    if (dilattn_status s = usable()) return s;
    buf_->vote = mine;
    exchanging_ = false;
    requests_.assign(1, MPI_REQUEST_NULL);
    const int vote_bytes = static_cast<int>(sizeof(RingVote));
    const int rc = MPI_Iallgather(&buf_->vote, vote_bytes, MPI_BYTE, buf_->votes.data(),
                                  vote_bytes, MPI_BYTE, comm_, &requests_[0]);
    if (rc != MPI_SUCCESS) return fail("MPI_Iallgather failed: " + mpi_error_string(rc));
    if (dilattn_status s = wait("waiting for every rank to start the ring call")) return s;
    for (int32_t r = 0; r < size_; ++r) all[r] = buf_->votes[static_cast<size_t>(r)];
    return DILATTN_SUCCESS;
  }

  dilattn_status exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                size_t recv_bytes, int32_t from) override {
    if (dilattn_status s = usable()) return s;
    const size_t send_bytes = send.bytes();
    grow(buf_->send, send_bytes);
    grow(buf_->recv, recv_bytes);
    if (send_bytes != 0) {  // the halves back to back, as they arrive
      std::memcpy(buf_->send.data(), send.first, send.half_bytes);
      std::memcpy(buf_->send.data() + send.half_bytes, send.second, send.half_bytes);
    }
    recv_dst_ = recv;
    recv_bytes_ = recv_bytes;
    to_ = to;
    from_ = from;
    exchanging_ = true;
    requests_.clear();
    // Receives first, then sends, each piece by piece: MPI keeps the order of messages with
    // the same source, tag and communicator, so every piece lands in its place.
    for (size_t off = 0; off < recv_bytes; off += piece_bytes_) {
      const int n = static_cast<int>(std::min(recv_bytes - off, piece_bytes_));
      requests_.push_back(MPI_REQUEST_NULL);
      const int rc = MPI_Irecv(buf_->recv.data() + off, n, MPI_BYTE, from, kExchangeTag, comm_,
                               &requests_.back());
      if (rc != MPI_SUCCESS) return fail("MPI_Irecv failed: " + mpi_error_string(rc));
    }
    receives_ = requests_.size();
    for (size_t off = 0; off < send_bytes; off += piece_bytes_) {
      const int n = static_cast<int>(std::min(send_bytes - off, piece_bytes_));
      requests_.push_back(MPI_REQUEST_NULL);
      const int rc = MPI_Isend(buf_->send.data() + off, n, MPI_BYTE, to, kExchangeTag, comm_,
                               &requests_.back());
      if (rc != MPI_SUCCESS) return fail("MPI_Isend failed: " + mpi_error_string(rc));
    }
    return DILATTN_SUCCESS;
  }

  dilattn_status exchange_end() override {
    if (dilattn_status s = usable()) return s;
    if (dilattn_status s = wait("rank " + std::to_string(rank_) + " sending rows to rank " +
                                std::to_string(to_) + " and receiving from rank " +
                                std::to_string(from_)))
      return s;
    if (recv_bytes_ != 0) std::memcpy(recv_dst_, buf_->recv.data(), recv_bytes_);
    return DILATTN_SUCCESS;
  }

 private:
  // Staging grows only while nothing is posted (after a completed wait).
  static void grow(std::vector<unsigned char>& buffer, size_t bytes) {
    if (buffer.size() >= bytes) return;
    std::vector<unsigned char>().swap(buffer);
    buffer.resize(bytes);
  }

  dilattn_status usable() {
    if (broken_)
      return set_error(DILATTN_ERROR_COMM, "rank %d: the communicator is broken (%s); create a new one",
                       static_cast<int>(rank_), broken_why_.c_str());
    if (main_thread_only_) {
      int is_main = 0;
      MPI_Is_thread_main(&is_main);
      if (!is_main)
        return set_error(DILATTN_ERROR_UNSUPPORTED,
                         "rank %d: MPI was initialised below MPI_THREAD_SERIALIZED, so ring calls "
                         "must come from the main thread; this is another thread",
                         static_cast<int>(rank_));
    }
    return DILATTN_SUCCESS;
  }

  dilattn_status wait(const std::string& what) {
    int error = MPI_SUCCESS;
    if (wait_all(requests_, timeout_ms_, &error)) {
      requests_.clear();
      return DILATTN_SUCCESS;
    }
    if (error != MPI_SUCCESS) return fail(what + ": " + mpi_error_string(error));
    return fail(what + ": no answer within " + std::to_string(timeout_ms_) + " ms");
  }

  // Breaks the communicator for good; requests still posted stay posted (see the top).
  dilattn_status fail(const std::string& why) {
    broken_ = true;
    broken_why_ = why;
    return set_error(DILATTN_ERROR_COMM, "rank %d: %s", static_cast<int>(rank_), why.c_str());
  }

  MPI_Comm comm_;
  const int32_t timeout_ms_;
  const size_t piece_bytes_;
  const bool main_thread_only_;
  int rank_ = 0, size_ = 1;
  bool broken_ = false;
  std::string broken_why_;
  std::unique_ptr<MpiBuffers> buf_;
  std::vector<MPI_Request> requests_;  // posted and not yet completed
  bool exchanging_ = false;            // requests_ are an exchange's (else the allgather's)
  size_t receives_ = 0;                // of an exchange's requests_, the first are receives
  int32_t to_ = 0, from_ = 0;
  void* recv_dst_ = nullptr;
  size_t recv_bytes_ = 0;
};

}  // namespace

dilattn_status make_mpi_transport(const void* mpi_comm, int32_t timeout_ms, size_t piece_bytes,
                                  std::unique_ptr<RingTransport>* transport) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "MPI is %s: call MPI_Init_thread before dilattn_comm_create_mpi",
                     finalized ? "finalized" : "not initialised");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  // The ring's MPI calls come from the caller's thread while the cpu backend runs worker
  // threads, which MPI_THREAD_SINGLE does not allow.
  if (level < MPI_THREAD_FUNNELED)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "MPI thread level %d is MPI_THREAD_SINGLE: initialise MPI with "
                     "MPI_Init_thread(..., MPI_THREAD_FUNNELED or higher, ...)", level);
  const bool main_thread_only = level < MPI_THREAD_SERIALIZED;
  if (main_thread_only) {
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (!is_main)
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "MPI was initialised below MPI_THREAD_SERIALIZED and this is not the main "
                       "thread: create (and use) the communicator on the main thread");
  }
  const MPI_Comm user = *static_cast<const MPI_Comm*>(mpi_comm);
  if (user == MPI_COMM_NULL)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'mpi_comm' points to MPI_COMM_NULL");
  int size = 0;
  if (MPI_Comm_size(user, &size) != MPI_SUCCESS || size < 1 || size > kMaxRingRanks)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'mpi_comm': size %d, ring attention takes 1 to %d ranks", size,
                     static_cast<int>(kMaxRingRanks));
  // The duplicate is collective too: poll it like every other wait.
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(user, &dup, &request);
  if (rc != MPI_SUCCESS)
    return set_error(DILATTN_ERROR_COMM, "MPI_Comm_idup failed: %s", mpi_error_string(rc).c_str());
  std::vector<MPI_Request> requests{request};
  if (!wait_all(requests, timeout_ms, &rc))
    return set_error(DILATTN_ERROR_COMM,
                     "not every rank called dilattn_comm_create_mpi within %d ms%s%s",
                     static_cast<int>(timeout_ms), rc != MPI_SUCCESS ? ": " : "",
                     rc != MPI_SUCCESS ? mpi_error_string(rc).c_str() : "");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  *transport = std::make_unique<MpiTransport>(dup, timeout_ms, piece_bytes, main_thread_only);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn

extern "C" dilattn_status dilattn_comm_create_mpi(const void* mpi_comm, int32_t timeout_ms,
                                                  dilattn_comm* comm) {
  DILATTN_ABI_BEGIN
  if (comm == nullptr) return dilattn::set_error(DILATTN_ERROR_NULL_POINTER, "argument 'comm' is NULL");
  if (mpi_comm == nullptr)
    return dilattn::set_error(DILATTN_ERROR_NULL_POINTER, "argument 'mpi_comm' is NULL");
  if (timeout_ms < 1)
    return dilattn::set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'timeout_ms' = %d: must be >= 1",
                              static_cast<int>(timeout_ms));
  std::unique_ptr<dilattn::RingTransport> transport;
  if (dilattn_status s = dilattn::make_mpi_transport(mpi_comm, timeout_ms, dilattn::kMpiPieceBytes,
                                                     &transport))
    return s;
  auto made = std::make_unique<dilattn_comm_s>();
  made->transport = std::move(transport);
  *comm = made.release();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
