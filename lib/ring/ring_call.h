// ring_call.h - what ring_forward.cpp and ring_backward.cpp share: the checks of a ring call
// (SPEC 7 for shards), the agreement of all ranks before and after the ring, and the layout of
// the chunks the rows that travel are unpacked into.
//
// A ring call is collective: every rank first checks its own arguments, then all ranks
// exchange their status and a digest of each field of their call that must agree (allgather):
// the plan's shape, dtype, kind, causal flag, scale, segments, dilations, head mode and mask,
// its window, softcap, ALiBi slopes, sinks (the flag and the call's values) and dropout (p, and
// the call's seed and offset), the device type, split and direction. A bad argument on any rank thus fails every rank
// before any chunk moves (the others with DILATTN_ERROR_COMM naming it), and a rank called with
// another value of any of those fields is refused by all with DILATTN_ERROR_COMM naming the
// rank and the field. A communicator takes one call at a time: a second call on it from another
// thread is refused at once, without voting in its rank's place. Each rank allocates every
// buffer of its ring before that vote, so a rank out of memory fails every rank alike. After
// the ring the ranks agree once more, so that a failure during compute leaves every output
// untouched.
#ifndef DILATTN_RING_CALL_H
#define DILATTN_RING_CALL_H

#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>

#include "backend.h"
#include "dtype_convert.h"
#include "ring_memory.h"
#include "ring_needs.h"
#include "ring_ops.h"
#include "ring_shard.h"
#include "ring_stats.h"
#include "ring_transport.h"

namespace dilattn {

// Step s of the ring on one rank (1 <= s < P): it receives from `owner` = rank - s the rows of
// owner's shard it needs (`recv`) and sends to `to` = rank + s the rows of its own shard that
// rank needs (`send`), as ring_needs.h computes them on both ends.
struct RingStep {
  int32_t owner = 0, to = 0;
  RowRuns recv, send;
};

// One rank's view of a validated ring call.
struct RingCall {
  RingCall() = default;
  RingCall(const RingCall&) = delete;
  RingCall& operator=(const RingCall&) = delete;
  ~RingCall() {
    if (transport != nullptr) transport->receive_with(nullptr);
    if (claimed != nullptr) claimed->in_call.store(false);
  }

  dilattn_comm_s* claimed = nullptr;  // the communicator this call holds (in_call)
  const Problem* p = nullptr;       // the plan's full problem
  const Backend* backend = nullptr; // runs every sub-problem
  RingTransport* transport = nullptr;
  int32_t P = 1, rank = 0, split = 0;
  ShardRows mine;                   // this rank's rows
  int64_t max_rows = 0;             // the largest shard: the size of a chunk buffer
  dilattn_dtype acc_dtype = DILATTN_F32;  // accumulators: f64 for f64 plans, else f32
  DropoutCall dropout;              // the call's seed and offset (SPEC 11.2)
  SinksCall sinks;                  // the call's sink logits and d_sinks (SPEC 10.3)
  // Where the shards live (the backend's device); the ring's own views say the same.
  dilattn_device_type device = DILATTN_DEVICE_CPU;
  int32_t device_index = 0;
  std::unique_ptr<RingOps> ops;     // the element work, on the backend's memory (ring_ops.h)
  RingMemory memory;                // allocates through ops
  ShiftStats shifts;                // recorded by exchange_begin / _end (ring_stats.h)
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  bool poison = false;              // test hook: chunk rows not received NaN (comm->poison_chunks)

  ShardRows rows_of(int32_t r) const { return shard_rows(p->Nq, P, r, split); }
  RingStep step_at(int32_t s) const;
  // The (kv head, row) pairs of the largest message this rank receives, and sends, over the
  // steps (ring_needs.h head_rows_in).
  void most_rows(int64_t* recv, int64_t* send) const;
  // Bytes of one tensor's n packed (kv head, row) pairs: B n D elements of dtype t.
  size_t packed_bytes(int64_t n, dilattn_dtype t) const {
    return static_cast<size_t>(p->B * n * p->D) * dtype_size(t);
  }
  // Bytes of a message of `runs` of two tensors (K and V, or dK and dV) in dtype t.
  size_t message_bytes(const RowRuns& runs, dilattn_dtype t) const {
    return 2 * packed_bytes(head_rows_in(runs), t);
  }
  // Elements of one [B, max_rows, Hkv, D] chunk tensor.
  int64_t chunk_elements() const { return p->B * max_rows * p->Hkv * p->D; }
  // A contiguous [d0, d1, d2, d3] view of `data` (the ring's memory) in dtype t.
  dilattn_tensor view(void* data, dilattn_dtype t, int64_t d0, int64_t d1, int64_t d2,
                      int64_t d3) const;
  // A contiguous [B, max_rows, heads, D] view of `data` in dtype t (its rows: the first `rows`).
  dilattn_tensor chunk_view(void* data, dilattn_dtype t, int64_t heads, int64_t rows) const;
  // The two tensors of a chunk buffer (K then V, or dK then dV), each a chunk_view.
  dilattn_tensor chunk_first(unsigned char* data, dilattn_dtype t, int64_t rows) const {
    return chunk_view(data, t, p->Hkv, rows);
  }
  dilattn_tensor chunk_second(unsigned char* data, dilattn_dtype t, int64_t rows) const {
    return chunk_view(data + chunk_elements() * static_cast<int64_t>(dtype_size(t)), t, p->Hkv, rows);
  }
  // A contiguous LSE [B, H, mine.rows, 1] view.
  dilattn_tensor lse_view(void* data) const;
  // Before an exchange_begin: a transport that reads the bytes from the host needs the queued
  // work that wrote them done (the device's ops queue it); a stream-ordered one does not.
  dilattn_status ready_to_send() const {
    return transport->stream_ordered() ? DILATTN_SUCCESS : ops->wait();
  }
  // The transport's exchange, timed and counted into `shifts` (ring_stats.cpp).
  dilattn_status exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                size_t recv_bytes, int32_t from);
  dilattn_status exchange_end();
};

// The runs of a pair of tensors ([B, n, Hkv, D] each: K and V, or dK and dV) packed into the
// message `msg` (ring_ops.h pack_rows): the first's runs, then the second's, back to back;
// and unpacked from it into (or, with `add`, added to) the same rows and heads.
dilattn_status pack_pair(RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                         const RowRuns& runs, unsigned char* msg);
dilattn_status unpack_pair(RingCall& c, const unsigned char* msg, const RowRuns& runs,
                           const dilattn_tensor& a, const dilattn_tensor& b, bool add);
// True when `runs` are the whole of a shard of `rows` rows: every row, every kv head (one run).
bool whole_shard(const RingCall& c, const RowRuns& runs, int64_t rows);
// True when the message of `runs` of (a, b) can be a and b themselves: the runs are the whole of
// them and each is contiguous [B, rows, Hkv, D], the packed layout of that one run.
bool sends_in_place(const RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                    const RowRuns& runs);
// The message of `runs` of (a, b): their own bytes where sends_in_place, else packed into `msg`
// (pack_pair).
dilattn_status message_of(RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                          const RowRuns& runs, unsigned char* msg, MessageHalves* message);
// K and V rows received into a chunk: unpack_pair, after the poison hook (c.poison: every
// row and head of the chunk NaN first, so a read of one not received shows).
dilattn_status unpack_kv(RingCall& c, const unsigned char* msg, const RowRuns& runs,
                         const dilattn_tensor& k, const dilattn_tensor& v);

// Tensors of a ring call, with their roles, for the shard checks.
struct RingTensor {
  const dilattn_tensor* t;
  const char* name;
  int role;  // TensorRole
  bool optional;
  bool written;  // an output: its elements must not share memory (tensor_checks.h)
};

// The whole start of a ring call on this rank: its own checks (plan, comm, split, shard
// tensors), then allocate(*call) (every buffer the ring needs, sized from the plan: after the
// checks succeeded and *call is filled), then the agreement of all ranks, where a failed
// allocation counts like a bad argument. SUCCESS: *call is ready. `split` is the caller's enum
// read as an integer at the entry point (abi_enum.h): any int may arrive from C.
// `options`: the call's dilattn_call_options (null for the plain calls), read as
// dilattn_forward_ex reads them (call_options.h); `entry` names the call in a refusal.
dilattn_status start_ring_call(dilattn_plan plan, dilattn_comm comm, int32_t split_value,
                               bool backward, const dilattn_call_options* options,
                               const char* entry, std::initializer_list<RingTensor> tensors,
                               const std::function<dilattn_status(RingCall&)>& allocate,
                               RingCall* call);

// The agreement after the ring: SUCCESS when every rank's `status` is SUCCESS.
dilattn_status finish_ring_call(RingCall& call, dilattn_status status);

// total[x] = the sum over ranks, in rank order, of every rank's mine[x], x < n: the same bits
// on every rank. Collective; after finish_ring_call succeeded on every rank.
dilattn_status sum_over_ranks(RingCall& call, const double* mine, int64_t n, double* total);

// What the call leaves on its communicator: peak bytes (the ring's and the transport's) and
// its shift timings (ring_stats.cpp).
void record_ring_call(dilattn_comm comm, RingCall& call);

}  // namespace dilattn

#endif  // DILATTN_RING_CALL_H
