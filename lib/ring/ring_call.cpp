// ring_call.cpp - checks and agreement of a ring call (see ring_call.h).
#include "ring_call.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "call_options.h"
#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "ring_pairs.h"
#include "tensor_checks.h"

namespace dilattn {

namespace {

// The SPEC 10 and 11 options a ring call runs (Problem::options_used): all but a packed batch,
// whose sequences would cut across the shards.
constexpr uint32_t kRingOptions = kOptionsAll & ~kOptionPacked;

// What the ring asks of the backend that runs its sub-problems (ring_pairs.h): the plan's
// options less sinks (the ring adds them itself at the merge), and placed sub-problems where an
// option depends on positions.
uint32_t options_of_sub_problems(const Problem& p) {
  return (p.options_used() & ~kOptionSinks) | (ring_places(p) ? kOptionPlaced : 0u);
}

// FNV-1a: a digest of one field of the call.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  Digest& add(int64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(x >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
    return *this;
  }
  Digest& add(const std::vector<int64_t>& xs) {
    add(static_cast<int64_t>(xs.size()));
    for (int64_t x : xs) add(x);
    return *this;
  }
  Digest& add_double(double x) {
    int64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return add(bits);
  }
};

// What every rank of one ring call must share, each a digest in the vote so that the ranks
// can name the field they disagree on. Any of them changes the result (or, for the device type,
// whether a rank's chunk is memory its neighbour can copy); a field that does not apply to the
// plan's kind (segments of a dense plan) digests as nothing. What may differ between ranks is
// what only changes how a rank computes: the backend of the same device type, threads, pool.
enum AgreedField {
  kShape, kDtype, kDevice, kKind, kCausal, kScale, kBranches, kHeadMode, kMask, kRanks,
  kSplit, kDirection, kWindow, kSoftcap, kAlibi, kSinks, kDropoutP, kDropoutDraw, kAgreedCount
};
static_assert(kAgreedCount == RingVote::kAgreedFields, "one digest per agreed field");
const char* const kAgreedNames[kAgreedCount] = {
    "plan shape [B, N, H, Hkv, D]", "dtype", "device type", "kind", "causal flag", "scale",
    "segments and dilations", "head mode",
    "block-sparse mask (block sizes, row_ptr, col_idx or per-head layout)", "number of ranks",
    "split", "direction (forward or backward)", "window (left, right)", "softcap",
    "ALiBi slopes", "sinks (the plan's flag or the call's sink values)", "dropout p",
    "dropout seed or offset"};

void agreed_fields(const Problem& p, const RingCall& call, dilattn_device_type device,
                   int32_t P, int32_t split, bool backward, uint64_t* agreed) {
  agreed[kShape] = Digest{}.add(p.B).add(p.Nq).add(p.Nk).add(p.H).add(p.Hkv).add(p.D).h;
  agreed[kDtype] = Digest{}.add(static_cast<int64_t>(p.dtype)).h;
  agreed[kDevice] = Digest{}.add(static_cast<int64_t>(device)).h;
  agreed[kKind] = Digest{}.add(static_cast<int64_t>(p.kind)).h;
  agreed[kCausal] = Digest{}.add(static_cast<int64_t>(p.causal)).h;
  int64_t scale_bits;
  std::memcpy(&scale_bits, &p.scale, sizeof scale_bits);
  agreed[kScale] = Digest{}.add(scale_bits).h;
  const bool dilated = p.kind == DILATTN_KIND_DILATED;
  Digest branches;
  if (dilated)
    for (const Branch& b : p.branches) branches.add(b.w).add(b.r);
  agreed[kBranches] = branches.h;
  agreed[kHeadMode] = Digest{}.add(dilated ? static_cast<int64_t>(p.head_mode) : 0).h;
  Digest mask;
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE && p.mask)
    mask.add(p.mask->Nq).add(p.mask->Nk).add(p.mask->bq).add(p.mask->bk)
        .add(p.mask->num_heads).add(p.mask->row_ptr).add(p.mask->col_idx)
        .add(p.mask->head_ptr);
  agreed[kMask] = mask.h;
  agreed[kRanks] = Digest{}.add(P).h;
  agreed[kSplit] = Digest{}.add(split).h;
  agreed[kDirection] = Digest{}.add(static_cast<int64_t>(backward)).h;
  agreed[kWindow] = Digest{}.add(p.window_left).add(p.window_right).h;
  agreed[kSoftcap] = Digest{}.add_double(p.softcap).h;
  Digest slopes;
  slopes.add(static_cast<int64_t>(p.alibi_slopes.size()));
  for (double m : p.alibi_slopes) slopes.add_double(m);
  agreed[kAlibi] = slopes.h;
  Digest sinks;
  sinks.add(static_cast<int64_t>(p.sinks));
  for (int64_t h = 0; p.sinks && h < p.H; ++h) sinks.add_double(call.sinks.values[h]);
  agreed[kSinks] = sinks.h;
  agreed[kDropoutP] = Digest{}.add_double(p.dropout_p).h;
  // The seed and offset matter only with dropout: without it any value gives the same result.
  Digest draw;
  if (p.dropout_p > 0)
    draw.add(static_cast<int64_t>(call.dropout.seed)).add(static_cast<int64_t>(call.dropout.offset));
  agreed[kDropoutDraw] = draw.h;
}

// This rank's own checks (SPEC 7), before any other rank is involved.
dilattn_status check_own_call(dilattn_plan plan, dilattn_comm comm, int32_t split_value,
                              bool backward, const dilattn_call_options* options,
                              const char* entry, std::initializer_list<RingTensor> tensors,
                              DropoutCall* dropout, SinksCall* sinks) {
  if (dilattn_status s = check_handle(plan, "plan")) return s;
  if (split_value != DILATTN_RING_CONTIGUOUS && split_value != DILATTN_RING_ZIGZAG)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'split' = %d is not a ring split",
                     static_cast<int>(split_value));
  const Problem& p = plan->problem;
  // SPEC 14.11: no progress argument, so a callback is refused.
  if (dilattn_status s = read_call_options(p, options, entry, backward, dropout, sinks, nullptr))
    return s;
  if (p.Nq != p.Nk)
    return set_error(DILATTN_ERROR_SEQLEN_MISMATCH,
                     "ring attention needs seqlen_q == seqlen_k, the plan has %lld and %lld",
                     static_cast<long long>(p.Nq), static_cast<long long>(p.Nk));
  // SPEC 10 and 11: the options the ring's partial results and merge carry (kRingOptions); the
  // rest refused by name. Then what the sub-problems need of the plan's backend: a backend
  // that runs an option for a whole problem may not yet run the placed sub-problems the ring
  // gives it (problem.h Placement).
  if (const char* variant = Problem::first_option_outside(p.options_used(), kRingOptions))
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "ring attention does not support %s (docs/spec.md section 5.5)", variant);
  if (const char* need = Problem::first_option_outside(options_of_sub_problems(p),
                                                       plan->backend->runs_options))
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "ring attention over backend '%s': its sub-problems need %s, which the "
                     "backend does not run yet (docs/spec.md section 5.5; use backend ref)",
                     plan->backend->name, need);
  const RingTransport::Memory memory = comm->transport->memory();
  const bool on_gpu = plan->backend->device == DILATTN_DEVICE_CUDA;
  if (memory == RingTransport::Memory::device && !on_gpu)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "argument 'comm': an NCCL communicator moves GPU memory and needs a plan on "
                     "the cuda backend; the plan's backend is %s", plan->backend->name);
  if (memory == RingTransport::Memory::host && on_gpu)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "argument 'comm': its transport moves host memory only; ring attention on "
                     "the cuda backend needs the threads or NCCL transport");
  const int32_t P = comm->transport->size();
  if (dilattn_status s = check_ring_split(p, P, split_value)) return s;
  // Each shard is the plan's problem with N replaced by this rank's row count.
  Problem shard = p;
  shard.Nq = shard.Nk = shard_rows(p.Nq, P, comm->transport->rank(), split_value).rows;
  for (const RingTensor& t : tensors) {
    if (t.optional && t.t == nullptr) continue;
    if (dilattn_status s = check_tensor(shard, t.t, t.name, static_cast<TensorRole>(t.role),
                                        t.written ? TensorUse::written : TensorUse::read))
      return s;
  }
  // A communicator bound to a GPU (NCCL) moves that GPU's memory only: a tensor elsewhere is
  // a device mismatch (SPEC 7), caught here rather than as a fault inside NCCL.
  const int32_t comm_device = comm->transport->device_index();
  if (comm_device >= 0)
    for (const RingTensor& t : tensors) {
      if (t.t == nullptr ||
          (t.t->device == DILATTN_DEVICE_CUDA && t.t->device_index == comm_device))
        continue;
      return set_error(DILATTN_ERROR_DEVICE_MISMATCH,
                       "argument '%s' is on %s device %d; the communicator's GPU is cuda device %d",
                       t.name, t.t->device == DILATTN_DEVICE_CUDA ? "cuda" : "cpu",
                       static_cast<int>(t.t->device_index), static_cast<int>(comm_device));
    }
  return DILATTN_SUCCESS;
}

// Every rank's vote; SUCCESS only when all succeeded and agree on the call (`agreed`: null in
// the vote after the ring, where only the statuses count).
dilattn_status agree(RingTransport& t, dilattn_status mine, const uint64_t* agreed) {
  RingVote vote{};
  vote.status = mine;
  vote.voter = t.rank() + 1;
  if (agreed != nullptr) std::memcpy(vote.agreed, agreed, sizeof vote.agreed);
  if (mine != DILATTN_SUCCESS)
    std::snprintf(vote.message, sizeof vote.message, "%s", dilattn_last_error());
  std::vector<RingVote> all(static_cast<size_t>(t.size()));
  if (dilattn_status s = t.allgather(vote, all.data())) return s;
  if (mine != DILATTN_SUCCESS) return mine;  // our own message is still the last error
  // A slot that does not hold its own rank's vote: the round completed without that rank.
  for (int32_t r = 0; r < t.size(); ++r)
    if (all[r].voter != r + 1)
      return set_error(DILATTN_ERROR_COMM,
                       "rank %d did not vote in the agreement of the ring call, yet the round "
                       "completed%s: is one rank's communicator used by two calls at once?",
                       static_cast<int>(r),
                       all[r].voter == 0 ? " with its slot empty" : " with another rank's vote");
  for (int32_t r = 0; r < t.size(); ++r)
    if (all[r].status != DILATTN_SUCCESS)
      return set_error(DILATTN_ERROR_COMM, "rank %d failed: %s (%s)", static_cast<int>(r),
                       dilattn_status_string(static_cast<dilattn_status>(all[r].status)),
                       all[r].message);
  if (agreed == nullptr) return DILATTN_SUCCESS;
  for (int32_t r = 0; r < t.size(); ++r)
    for (int f = 0; f < kAgreedCount; ++f)
      if (all[r].agreed[f] != agreed[f])
        return set_error(DILATTN_ERROR_COMM,
                         "rank %d called with another %s than rank %d: every rank of a ring call "
                         "must pass the same plan (shape, dtype, kind, causal, scale, segments, "
                         "dilations, head mode, mask, window, softcap, ALiBi slopes, sinks, "
                         "dropout), sink values, dropout seed and offset, device type, split "
                         "and direction",
                         static_cast<int>(r), kAgreedNames[f], static_cast<int>(t.rank()));
  return DILATTN_SUCCESS;
}

}  // namespace

dilattn_tensor RingCall::view(void* data, dilattn_dtype t, int64_t d0, int64_t d1, int64_t d2,
                              int64_t d3) const {
  dilattn_tensor v = dilattn_tensor_contiguous(data, t, d0, d1, d2, d3);
  v.device = device;
  v.device_index = device_index;
  return v;
}

dilattn_tensor RingCall::chunk_view(void* data, dilattn_dtype t, int64_t heads, int64_t rows) const {
  dilattn_tensor v = view(data, t, p->B, max_rows, heads, p->D);
  v.shape[1] = rows;
  return v;
}

dilattn_tensor RingCall::lse_view(void* data) const {
  return view(data, acc_dtype, p->B, p->H, mine.rows, 1);
}

RingStep RingCall::step_at(int32_t s) const {
  RingStep step;
  step.owner = (rank - s + P) % P;
  step.to = (rank + s) % P;
  step.recv = needed_key_rows(*p, mine, rows_of(step.owner));
  step.send = needed_key_rows(*p, rows_of(step.to), mine);
  return step;
}

void RingCall::most_rows(int64_t* recv, int64_t* send) const {
  *recv = *send = 0;
  for (int32_t s = 1; s < P; ++s) {
    const RingStep step = step_at(s);
    *recv = max_i64(*recv, head_rows_in(step.recv));
    *send = max_i64(*send, head_rows_in(step.send));
  }
}

dilattn_status pack_pair(RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                         const RowRuns& runs, unsigned char* msg) {
  if (dilattn_status s = c.ops->pack_rows(a, runs, msg)) return s;
  return c.ops->pack_rows(b, runs, msg + c.message_bytes(runs, a.dtype) / 2);
}

dilattn_status unpack_pair(RingCall& c, const unsigned char* msg, const RowRuns& runs,
                           const dilattn_tensor& a, const dilattn_tensor& b, bool add) {
  if (dilattn_status s = c.ops->unpack_rows(msg, runs, a, add)) return s;
  return c.ops->unpack_rows(msg + c.message_bytes(runs, a.dtype) / 2, runs, b, add);
}

bool whole_shard(const RingCall& c, const RowRuns& runs, int64_t rows) {
  return runs.size() == 1 && runs[0].first == 0 && runs[0].count == rows && runs[0].head == 0 &&
         runs[0].heads == c.p->Hkv;
}

bool sends_in_place(const RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                    const RowRuns& runs) {
  auto packed_layout = [&](const dilattn_tensor& t) {
    const int64_t* n = t.shape;
    return t.strides[3] == 1 && t.strides[2] == n[3] && t.strides[1] == n[2] * n[3] &&
           (n[0] == 1 || t.strides[0] == n[1] * n[2] * n[3]);
  };
  return whole_shard(c, runs, a.shape[1]) && packed_layout(a) && packed_layout(b);
}

dilattn_status message_of(RingCall& c, const dilattn_tensor& a, const dilattn_tensor& b,
                          const RowRuns& runs, unsigned char* msg, MessageHalves* message) {
  const size_t bytes = c.message_bytes(runs, a.dtype);
  if (sends_in_place(c, a, b, runs)) {
    *message = {a.data, b.data, bytes / 2};
    return DILATTN_SUCCESS;
  }
  *message = MessageHalves::of(msg, bytes);
  return pack_pair(c, a, b, runs, msg);
}

dilattn_status unpack_kv(RingCall& c, const unsigned char* msg, const RowRuns& runs,
                         const dilattn_tensor& k, const dilattn_tensor& v) {
  if (c.poison) {
    if (dilattn_status s = c.ops->fill(k, NAN)) return s;
    if (dilattn_status s = c.ops->fill(v, NAN)) return s;
  }
  return unpack_pair(c, msg, runs, k, v, false);
}

dilattn_status start_ring_call(dilattn_plan plan, dilattn_comm comm, int32_t split_value,
                               bool backward, const dilattn_call_options* options,
                               const char* entry, std::initializer_list<RingTensor> tensors,
                               const std::function<dilattn_status(RingCall&)>& allocate,
                               RingCall* call) {
  if (dilattn_status s = check_live(comm, dilattn_comm_s::kKind, "comm")) return s;
  // Refused before any vote: the call on the other thread keeps its round intact.
  if (comm->in_call.exchange(true))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'comm': rank %d's communicator is already in a ring call on "
                     "another thread; a communicator serves one call at a time",
                     static_cast<int>(comm->transport->rank()));
  call->claimed = comm;
  RingTransport& t = *comm->transport;
  dilattn_status own = check_own_call(plan, comm, split_value, backward, options, entry, tensors,
                                      &call->dropout, &call->sinks);
  // The element ops on the shards' device (the first tensor is q), before the vote: a rank
  // whose device cannot be used fails every rank.
  if (own == DILATTN_SUCCESS) {
    call->device = plan->backend->device;
    call->device_index = tensors.begin()->t->device_index;
    own = plan->backend->ring_ops(call->device_index, t.stream(), &call->ops);
  }
  if (own == DILATTN_SUCCESS) {
    call->memory.use(call->ops.get());
    t.receive_with(call->ops.get());
    call->p = &plan->problem;
    call->backend = plan->backend;
    call->transport = &t;
    call->P = t.size();
    call->rank = t.rank();
    call->split = split_value;
    call->poison = comm->poison_chunks;
    call->mine = call->rows_of(call->rank);
    for (int32_t r = 0; r < call->P; ++r)
      call->max_rows = max_i64(call->max_rows, call->rows_of(r).rows);
    call->acc_dtype = plan->problem.dtype == DILATTN_F64 ? DILATTN_F64 : DILATTN_F32;
    // Every buffer of the ring before the vote too: a rank that cannot have them fails every
    // rank here, rather than leaving its neighbours waiting for rows until their timeout.
    own = allocate(*call);
  }
  uint64_t agreed[kAgreedCount] = {};
  if (own == DILATTN_SUCCESS)
    agreed_fields(plan->problem, *call, plan->backend->device, t.size(), split_value, backward,
                  agreed);
  return agree(t, own, agreed);
}

dilattn_status finish_ring_call(RingCall& call, dilattn_status status) {
  return agree(*call.transport, status, nullptr);
}

dilattn_status sum_over_ranks(RingCall& call, const double* mine, int64_t n, double* total) {
  RingTransport& t = *call.transport;
  std::vector<RingVote> all(static_cast<size_t>(t.size()));
  for (int64_t x0 = 0; x0 < n; x0 += RingVote::kSums) {
    const int64_t m = min_i64(n - x0, RingVote::kSums);
    RingVote vote{};
    vote.status = DILATTN_SUCCESS;
    vote.voter = t.rank() + 1;
    for (int64_t x = 0; x < m; ++x) vote.sums[x] = mine[x0 + x];
    if (dilattn_status s = t.allgather(vote, all.data())) return s;
    for (int64_t x = 0; x < m; ++x) {
      double sum = 0;
      for (int32_t r = 0; r < t.size(); ++r) sum += all[static_cast<size_t>(r)].sums[x];
      total[x0 + x] = sum;
    }
  }
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
