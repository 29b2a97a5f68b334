// ring_transport.h - what the ring algorithm (ring_forward.cpp, ring_backward.cpp) needs from a
// transport, and the communicator handle that owns one (SPEC 5).
//
// Two operations, both collective over the P ranks of a communicator:
//   allgather: every rank's small fixed-size vote (its status, a digest of each field of its
//              call, its error message, a few values to sum), so that a bad input on one rank
//              fails every rank at once.
//   exchange:  send a message to rank `to` and receive `recv_bytes` from rank `from`, in
//              two calls so that a rank computes while the rows travel:
//              exchange_begin(...) ... compute ... exchange_end().
//              Every message is a pair of equal halves (K then V rows, or dK then dV: the ring's
//              messages are pairs), each half read from its own address (MessageHalves), so
//              a whole shard travels straight from the caller's K and V with no packed copy;
//              the halves arrive back to back in `recv`. Both ends split alike, which NCCL
//              needs (each ncclSend matched by an ncclRecv of its size).
//              The sent halves must stay unchanged and `recv` untouched until exchange_end
//              returns.
//              Zero bytes one way is no message that way (no copy, no MPI request, no
//              ncclSend/ncclRecv): the ring sends a rank only the rows it needs
//              (ring_needs.h), often none. Both ends know the sizes from the plan, so they
//              agree; a transport that sees a size mismatch breaks the communicator.
//              (The plain ring's shift is the exchange to rank + 1, from rank - 1.)
// One exchange at a time per rank. A transport never hangs for ever on a missing rank where it
// can help it: the threads and MPI transports give up after their timeout and mark the
// communicator broken (DILATTN_ERROR_COMM); NCCL's aborts its communicator (ncclCommAbort).
// Transports: transport_threads.cpp (P threads of one process), transport_mpi.cpp (one rank
// per MPI process; transport_mpi_absent.cpp in a build without MPI), transport_nccl.cpp (one
// rank per GPU; transport_nccl_stub.cpp without NCCL).
//
// Where the exchanged bytes live: host memory for a transport that moves them from the host
// (the default), device memory too for the threads transport (it receives with the ring's
// RingOps::copy_bytes, a device-to-device copy for the cuda backend), device memory only for
// NCCL. A stream-ordered transport (NCCL) orders each exchange after the work queued on its
// stream() when exchange_begin is called, and the work queued there after exchange_end after
// the exchange; in between its exchange runs beside the ring's compute on that stream, where
// the ring runs its element work and sub-problems. Any other transport reads the bytes from
// the host, so the ring waits for its queued work before an exchange_begin.
#ifndef DILATTN_RING_TRANSPORT_H
#define DILATTN_RING_TRANSPORT_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "dilattn_ring.h"
#include "handle_registry.h"
#include "ring_stats.h"

namespace dilattn {

// What each rank tells the others before (and after) the ring runs.
struct RingVote {
  static constexpr int kAgreedFields = 18;
  static constexpr int kSums = 16;
  int32_t status;        // the rank's own dilattn_status
  int32_t voter;         // the rank that voted, plus one: 0 in a slot no rank filled
  // A digest of each field of the call every rank must share (ring_call.cpp AgreedField).
  uint64_t agreed[kAgreedFields];
  char message[256];     // its last error when status != SUCCESS
  // Values every rank sums over all ranks after the ring (the sinks' gradient, ring_call.h
  // sum_over_ranks), kSums per round.
  double sums[kSums];
};

class RingOps;

// One exchange's outgoing message: two halves of half_bytes each, from their own addresses.
struct MessageHalves {
  const void* first = nullptr;
  const void* second = nullptr;
  size_t half_bytes = 0;
  size_t bytes() const { return 2 * half_bytes; }
  // The two halves of one buffer of `bytes` (even: a pair of equal tensors' rows).
  static MessageHalves of(const void* data, size_t bytes) {
    return {data, static_cast<const unsigned char*>(data) + bytes / 2, bytes / 2};
  }
};

class RingTransport {
 public:
  enum class Memory { host, host_or_device, device };

  virtual ~RingTransport() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  // all[r] = rank r's vote, for every r < size(). SUCCESS or DILATTN_ERROR_COMM.
  virtual dilattn_status allgather(const RingVote& mine, RingVote* all) = 0;
  virtual dilattn_status exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                        size_t recv_bytes, int32_t from) = 0;
  virtual dilattn_status exchange_end() = 0;

  virtual Memory memory() const { return Memory::host; }
  virtual bool stream_ordered() const { return false; }
  virtual void* stream() const { return nullptr; }
  // The ring call's element ops, for a transport that copies received bytes itself (threads);
  // null after the call.
  virtual void receive_with(RingOps* ops) { (void)ops; }
  // Bytes the transport itself holds for exchanges (the MPI transport's staging buffers), counted
  // in dilattn_comm_peak_bytes beside the ring's own.
  virtual size_t buffer_bytes() const { return 0; }
  // The GPU this end is bound to (NCCL: ncclCommCuDevice at creation), whose memory every
  // tensor of a ring call on it must be; -1: bound to no device.
  virtual int32_t device_index() const { return -1; }
};

// P transports sharing one in-process state, rank p = element p (transport_threads.cpp).
dilattn_status make_thread_transports(int32_t num_ranks, int32_t timeout_ms,
                                      std::unique_ptr<RingTransport>* transports);

// One rank of an NCCL communicator (*nccl_comm is the caller's ncclComm_t), exchanging on
// cuda_stream (transport_nccl.cpp); DILATTN_ERROR_UNSUPPORTED in a build without NCCL
// (transport_nccl_stub.cpp).
dilattn_status make_nccl_transport(const void* nccl_comm, void* cuda_stream, int32_t timeout_ms,
                                   std::unique_ptr<RingTransport>* transport);
// One MPI process's end over *static_cast<const MPI_Comm*>(mpi_comm) (transport_mpi.cpp):
// checks MPI's state and thread level, duplicates the communicator. An exchange travels in
// messages of at most piece_bytes (MPI counts are int); tests pass a small one.
constexpr size_t kMpiPieceBytes = size_t{1} << 30;
dilattn_status make_mpi_transport(const void* mpi_comm, int32_t timeout_ms, size_t piece_bytes,
                                  std::unique_ptr<RingTransport>* transport);

}  // namespace dilattn

struct dilattn_comm_s {
  static constexpr dilattn::HandleKind kKind = dilattn::HandleKind::comm;
  dilattn::LiveHandle live{this, kKind};
  std::unique_ptr<dilattn::RingTransport> transport;
  size_t peak_bytes = 0;  // of the last ring call on this rank (dilattn_comm_peak_bytes)
  dilattn::ShiftStats last_shifts;  // of the last ring call on this rank (ring_stats.h)
  // Test hook (tests/ring): fill the chunk rows a ring call did not receive with NaN, so a
  // read of a row nobody sent shows in the result.
  bool poison_chunks = false;
  // Set while a ring call runs on this rank: a communicator is one rank of one call at a time,
  // and a second call from another thread would vote in the same rank's place.
  std::atomic<bool> in_call{false};
};

#endif  // DILATTN_RING_TRANSPORT_H
