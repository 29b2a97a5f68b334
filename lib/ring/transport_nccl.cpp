// transport_nccl.cpp - the NCCL transport of ring attention: one rank per GPU, in one process
// or many (SPEC 5, dilattn_comm_create_nccl). Built when meson finds NCCL with CUDA; otherwise
// transport_nccl_stub.cpp answers DILATTN_ERROR_UNSUPPORTED.
//
// The ring runs its kernels (ring_ops.h) and sub-problems on the caller's CUDA stream; the
// exchanges run on a stream of the transport's own, so that they overlap that compute:
//   exchange   exchange_begin records an event on the caller's stream (everything queued so
//              far, the packed rows included) and makes the transport's stream wait for it;
//              there ncclGroupStart; ncclSend of each half of the message to `to`; ncclRecv of
//              each half from `from`; ncclGroupEnd, each only when it moves bytes (the ring
//              sends only the rows a rank needs, ring_needs.h). The compute the ring queues
//              next runs beside it. exchange_end waits for the transport's stream alone and
//              makes the caller's stream wait for it too, so nothing queued later reads the
//              received rows early or writes the sent ones while they travel.
//   allgather  the rank's vote copied to a small device buffer (from pinned host memory, so the
//              copies never block the host), ncclAllGather of the P votes, copied back.
// Every wait polls cudaStreamQuery and ncclCommGetAsyncError (a non-blocking communicator may
// answer ncclInProgress first) until the timeout; past it, or on an NCCL error, the
// communicator is aborted (ncclCommAbort, so no kernel waits for ever on a missing peer) and
// this end is broken: every later call returns DILATTN_ERROR_COMM.
// Compiled and linked by the CUDA build; run by tests/ring/test_ring_cuda.cpp on a machine with
// a GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "errors.h"
#include "ring_shard.h"
#include "ring_transport.h"

namespace dilattn {

namespace {

using Clock = std::chrono::steady_clock;

// Makes the communicator's GPU current for a call and restores the caller's.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device)
      changed_ = cudaSetDevice(device) == cudaSuccess;
    cudaGetLastError();
  }
  ~CurrentDevice() {
    if (changed_) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class NcclTransport final : public RingTransport {
 public:
  NcclTransport(ncclComm_t comm, cudaStream_t stream, int32_t timeout_ms, int rank, int size,
                int device)
      : comm_(comm), stream_(stream), timeout_ms_(timeout_ms), rank_(rank), size_(size),
        device_(device) {}

  ~NcclTransport() override {
    CurrentDevice current(device_);
    if (votes_device_ != nullptr) cudaFree(votes_device_);
    if (votes_host_ != nullptr) cudaFreeHost(votes_host_);
    if (queued_ != nullptr) cudaEventDestroy(queued_);
    if (exchanged_ != nullptr) cudaEventDestroy(exchanged_);
    if (exchange_stream_ != nullptr) cudaStreamDestroy(exchange_stream_);
    cudaGetLastError();
  }

  // The vote buffers (P gathered votes then this rank's, on the device and pinned on the host),
  // the exchanges' stream and the two events that order it with the caller's.
  dilattn_status allocate() {
    CurrentDevice current(device_);
    const size_t bytes = static_cast<size_t>(size_ + 1) * sizeof(RingVote);
    cudaError_t e = cudaMalloc(&votes_device_, bytes);
    if (e == cudaSuccess) e = cudaMallocHost(&votes_host_, bytes);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&exchange_stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&exchanged_, cudaEventDisableTiming);
    if (e == cudaSuccess) return DILATTN_SUCCESS;
    cudaGetLastError();
    return set_error(DILATTN_ERROR_CUDA,
                     "dilattn_comm_create_nccl: the votes (%zu bytes), a stream and two events: %s",
                     bytes, cudaGetErrorString(e));
  }

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  Memory memory() const override { return Memory::device; }
  bool stream_ordered() const override { return true; }
  void* stream() const override { return stream_; }
  int32_t device_index() const override { return device_; }

  dilattn_status allgather(const RingVote& mine, RingVote* all) override {
    if (broken_) return broken_error();
    CurrentDevice current(device_);
    RingVote* host = static_cast<RingVote*>(votes_host_);
    RingVote* device = static_cast<RingVote*>(votes_device_);
    std::memcpy(&host[size_], &mine, sizeof(RingVote));
    cudaError_t e = cudaMemcpyAsync(&device[size_], &host[size_], sizeof(RingVote),
                                    cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess) return cuda_error(e, "cudaMemcpyAsync of the vote");
    if (dilattn_status s = enqueued(ncclAllGather(&device[size_], device, sizeof(RingVote),
                                                  ncclUint8, comm_, stream_),
                                    "ncclAllGather of the votes"))
      return s;
    e = cudaMemcpyAsync(host, device, static_cast<size_t>(size_) * sizeof(RingVote),
                        cudaMemcpyDeviceToHost, stream_);
    if (e != cudaSuccess) return cuda_error(e, "cudaMemcpyAsync of the votes");
    if (dilattn_status s = wait("waiting for every rank to start the ring call", stream_))
      return s;
    std::memcpy(all, host, static_cast<size_t>(size_) * sizeof(RingVote));
    return DILATTN_SUCCESS;
  }

  dilattn_status exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                size_t recv_bytes, int32_t from) override {
    if (broken_) return broken_error();
    to_ = to;
    from_ = from;
    exchanging_ = send.bytes() != 0 || recv_bytes != 0;
    if (!exchanging_) return DILATTN_SUCCESS;
    CurrentDevice current(device_);
    cudaError_t e = cudaEventRecord(queued_, stream_);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(exchange_stream_, queued_, 0);
    if (e != cudaSuccess) return cuda_error(e, "ordering the exchange after the queued work");
    // One ncclSend per half and one ncclRecv per half: NCCL matches them pairwise, in order.
    const size_t recv_half = recv_bytes / 2;
    auto* const recv_second = static_cast<unsigned char*>(recv) + recv_half;
    auto ok = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
    ncclResult_t r = ncclGroupStart();
    if (ok(r) && send.half_bytes != 0) {
      r = ncclSend(send.first, send.half_bytes, ncclUint8, to, comm_, exchange_stream_);
      if (ok(r))
        r = ncclSend(send.second, send.half_bytes, ncclUint8, to, comm_, exchange_stream_);
    }
    if (ok(r) && recv_half != 0) {
      r = ncclRecv(recv, recv_half, ncclUint8, from, comm_, exchange_stream_);
      if (ok(r)) r = ncclRecv(recv_second, recv_half, ncclUint8, from, comm_, exchange_stream_);
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    return enqueued(ok(r) ? end : r, "ncclSend/ncclRecv");
  }

  dilattn_status exchange_end() override {
    if (broken_) return broken_error();
    if (!exchanging_) return DILATTN_SUCCESS;
    exchanging_ = false;
    CurrentDevice current(device_);
    if (dilattn_status s = wait("rank " + std::to_string(rank_) + " sending rows to rank " +
                                    std::to_string(to_) + " and receiving from rank " +
                                    std::to_string(from_),
                                exchange_stream_))
      return s;
    cudaError_t e = cudaEventRecord(exchanged_, exchange_stream_);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, exchanged_, 0);
    if (e != cudaSuccess) return cuda_error(e, "ordering the queued work after the exchange");
    return DILATTN_SUCCESS;
  }

 private:
  // An enqueue's result: in progress is fine (a non-blocking communicator; wait() polls it).
  dilattn_status enqueued(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return DILATTN_SUCCESS;
    return abort(std::string(what) + ": " + ncclGetErrorString(r) + " (" +
                 ncclGetLastError(comm_) + ")");
  }

  dilattn_status cuda_error(cudaError_t e, const char* what) {
    cudaGetLastError();
    return abort(std::string(what) + ": " + cudaGetErrorString(e));
  }

  // Until the communicator has no operation in progress and `stream` ran everything queued
  // on it so far, or the timeout.
  dilattn_status wait(const std::string& what, cudaStream_t stream) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    for (;;) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
      if (r != ncclSuccess) async = r;
      if (async != ncclSuccess && async != ncclInProgress)
        return abort(what + ": " + ncclGetErrorString(async) + " (" + ncclGetLastError(comm_) + ")");
      if (async == ncclSuccess) {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return DILATTN_SUCCESS;
        if (e != cudaErrorNotReady) return cuda_error(e, what.c_str());
      }
      if (Clock::now() >= deadline)
        return abort(what + ": no answer within " + std::to_string(timeout_ms_) + " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Gives up on the communicator: ncclCommAbort ends its pending operations, so neither this
  // rank's stream nor a peer waits for ever.
  dilattn_status abort(const std::string& why) {
    if (!broken_) {
      broken_ = true;
      broken_why_ = why;
      ncclCommAbort(comm_);
    }
    return broken_error();
  }

  dilattn_status broken_error() {
    return set_error(DILATTN_ERROR_COMM,
                     "rank %d: the NCCL communicator was aborted (%s); create a new one",
                     static_cast<int>(rank_), broken_why_.c_str());
  }

  ncclComm_t comm_;
  cudaStream_t stream_;                     // the caller's: the ring's compute
  cudaStream_t exchange_stream_ = nullptr;  // the transport's: the exchanges
  cudaEvent_t queued_ = nullptr, exchanged_ = nullptr;
  const int32_t timeout_ms_;
  const int32_t rank_, size_;
  const int device_;
  void* votes_device_ = nullptr;
  void* votes_host_ = nullptr;
  bool broken_ = false;
  std::string broken_why_;
  int32_t to_ = 0, from_ = 0;  // of the exchange in progress
  bool exchanging_ = false;    // the exchange begun moves bytes
};

// ncclResult_t as a status of dilattn_comm_create_nccl.
dilattn_status query_failed(const char* what, ncclResult_t r) {
  return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'nccl_comm': %s failed: %s", what,
                   ncclGetErrorString(r));
}

}  // namespace

dilattn_status make_nccl_transport(const void* nccl_comm, void* cuda_stream, int32_t timeout_ms,
                                   std::unique_ptr<RingTransport>* transport) {
  const ncclComm_t comm = *static_cast<const ncclComm_t*>(nccl_comm);
  if (comm == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'nccl_comm' points to a NULL ncclComm_t");
  int size = 0, rank = 0, device = 0;
  if (ncclResult_t r = ncclCommCount(comm, &size)) return query_failed("ncclCommCount", r);
  if (ncclResult_t r = ncclCommUserRank(comm, &rank)) return query_failed("ncclCommUserRank", r);
  if (ncclResult_t r = ncclCommCuDevice(comm, &device)) return query_failed("ncclCommCuDevice", r);
  if (size < 1 || size > kMaxRingRanks)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'nccl_comm': %d ranks; ring attention takes 1 to %d", size,
                     static_cast<int>(kMaxRingRanks));
  auto made = std::make_unique<NcclTransport>(comm, static_cast<cudaStream_t>(cuda_stream),
                                              timeout_ms, rank, size, device);
  if (dilattn_status s = made->allocate()) return s;
  *transport = std::move(made);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
