// ring_backward.cpp - dilattn_ring_backward: SPEC 6 over SPEC 5's ring.
//
// With the combined LSE of the forward, P_ij = exp(S_ij - LSE_i) of every pair is exact, so the
// gradient of each (own query range, chunk key range) pair is independent: the same
// sub-problems as the forward (ring_pairs.h) run the backend's backward with this rank's full
// O and LSE rows (D_i = <dO_i, O_i> needs the whole O_i). K/V rows travel as in the forward
// (ring_forward.cpp: at step s rank p receives from o = p - s the rows of o's shard it needs,
// ring_needs.h). dQ accumulates locally; the gradient of o's rows goes back to o:
//   step s: compute with o's rows, summing this rank's dK/dV of them (a partial); send the
//           partial of exactly the rows it received to o, and receive from p + s its partial
//           of the rows of our shard it needed; add that into our dK/dV.
// Our dK/dV receives our own partial (step 0) first, then rank p+1's, p+2's, ...: an order
// fixed by ring position, never by arrival time or transport, so the gradients are bitwise the
// same on every run and every transport. Partials and dK/dV are f32 (f64 for f64 plans); each
// sub-problem's gradient is rounded once to the plan's dtype by the backend before it is
// added. The sums run where the backend keeps its tensors (ring_ops.h: host loops, or kernels
// on the device's stream), each element by one thread in this fixed order, so the device path
// is bitwise schedule-independent too.
// Memory on a rank (RingMemory), all allocated before the ranks' vote (ring_call.h): the K/V
// buffers of ring_kv_chunks.h (at most two K/V chunks when whole shards travel), the returning
// dK/dV partial arriving in the one of them no step reads then (grown to the largest partial
// if needed), this step's dK/dV partial of the rows received (a chunk pair, accumulator
// dtype), a packed copy of it to send back only where it is not the whole chunk in the packed
// layout, the sub-problems' dK/dV (a chunk pair) and dQ, the dQ and dK/dV accumulators, and a
// backend workspace: O(N / P). At P = 4, N = 65536, f32, H = 1, D = 64 with whole chunks
// travelling that is 50.7 MB beside 33.6 MB of shards (Q, K, V, O, LSE, dO, dQ, dK, dV), 1.43x
// of shards + two K/V chunks + the dK/dV partial: tests/ring/test_ring_memory.cpp bounds it at
// 1.5x (the forward at 1.3x of shards + two chunks).
// Options (SPEC 10, 11): the sub-problems carry them (ring_pairs.h), dropout regenerating the
// forward's decisions from the call's seed and offset at global positions. Sinks: the forward's
// LSE holds them, so the pair terms need nothing more; d_sinks is summed over this rank's rows
// (sink_gradient_of_rows) and then over the ranks in rank order (sum_over_ranks).
// Checked by tests/ring/test_ring_backward.cpp against the single-device reference.
#include <algorithm>
#include <cmath>
#include <memory>
#include <new>
#include <vector>

#include "abi_enum.h"
#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "ring_call.h"
#include "ring_kv_chunks.h"
#include "ring_pairs.h"
#include "softmax_rules.h"
#include "tensor_checks.h"

namespace dilattn {

namespace {

struct BackwardTensors {
  const dilattn_tensor &q, &k, &v, &o, &lse, &d_o, &dq, &dk, &dv;
};

// Everything the backward allocates, sized from the plan before the ranks' vote (ring_call.h).
struct BackwardBuffers {
  BackwardBuffers(RingCall& c, const dilattn_tensor& k, const dilattn_tensor& v)
      : kv(c, k, v), partial(c.memory), grad_out(c.memory),
        dq_acc(c.memory), dq_part(c.memory), dkv_acc(c.memory), dk_part(c.memory),
        dv_part(c.memory), workspace(c.memory) {
    const Problem& p = *c.p;
    const size_t esize = dtype_size(p.dtype), asize = dtype_size(c.acc_dtype);
    const size_t chunk_n = static_cast<size_t>(c.chunk_elements());
    const size_t shard_q = static_cast<size_t>(p.B * c.mine.rows * p.H * p.D);
    const size_t shard_kv = static_cast<size_t>(p.B * c.mine.rows * p.Hkv * p.D);
    int64_t most_recv, most_send;
    c.most_rows(&most_recv, &most_send);
    partial.grow(most_recv > 0 ? 2 * chunk_n * asize : 0);
    // A partial goes back from the partial buffer itself where it is the whole chunk in the
    // packed layout (ring_call.h message_of); else it is packed into grad_out.
    size_t packed_out = 0;
    for (int32_t s = 1; s < c.P && partial.data() != nullptr; ++s) {
      const RingStep step = c.step_at(s);
      const int64_t rows = c.rows_of(step.owner).rows;
      if (!sends_in_place(c, c.chunk_first(partial.data(), c.acc_dtype, rows),
                          c.chunk_second(partial.data(), c.acc_dtype, rows), step.recv))
        packed_out = std::max(packed_out, c.message_bytes(step.recv, c.acc_dtype));
    }
    grad_out.grow(packed_out);
    // A partial of our rows arrives in the K/V buffer no step reads at that moment.
    spare = kv.reserve_spare(2 * c.packed_bytes(most_send, c.acc_dtype));
    dq_acc.grow(shard_q * asize);
    dq_part.grow(shard_q * esize);
    dkv_acc.grow(2 * shard_kv * asize);
    dk_part.grow(chunk_n * esize);
    dv_part.grow(chunk_n * esize);
  }
  dilattn_status status() const {
    if (dilattn_status s = kv.status()) return s;
    if (spare != DILATTN_SUCCESS) return spare;
    for (const RingBuffer* b :
         {&partial, &grad_out, &dq_acc, &dq_part, &dkv_acc, &dk_part, &dv_part})
      if (dilattn_status s = b->status()) return s;
    return DILATTN_SUCCESS;
  }
  KvChunks kv;         // K/V rows in flight and computed on (ring_kv_chunks.h)
  RingBuffer partial;  // this step's dK/dV of the rows received (acc dtype, chunk layout)
  RingBuffer grad_out;  // a partial packed to go back (one arriving: kv.spare())
  dilattn_status spare = DILATTN_SUCCESS;
  RingBuffer dq_acc, dq_part, dkv_acc, dk_part, dv_part;
  RingBuffer workspace;  // grows to the largest sub-problem's need (a failure is the rank's status)
};

// A view t where host code can read it: t itself on a host backend (ref, cpu); on a device
// backend (cuda, and emu, which runs the same device code), a host copy of the bytes t spans
// (strides are >= 0, SPEC 15) through the ring's ops, viewed alike in `copy`.
dilattn_status readable_on_host(RingCall& c, const dilattn_tensor& t,
                                std::vector<unsigned char>* copy, dilattn_tensor* view) {
  *view = t;
  if (c.backend->ring_ops == make_host_ring_ops) return DILATTN_SUCCESS;
  int64_t extent = 0;
  for (int dim = 0; dim < 4; ++dim) extent += (t.shape[dim] - 1) * t.strides[dim];
  const size_t bytes = static_cast<size_t>(extent + 1) * dtype_size(t.dtype);
  try {
    copy->resize(bytes);
  } catch (const std::bad_alloc&) {
    return set_error(DILATTN_ERROR_OUT_OF_MEMORY,
                     "ring attention: %zu bytes of host memory for the sinks' gradient", bytes);
  }
  if (dilattn_status s = c.ops->copy_bytes(copy->data(), t.data, bytes)) return s;
  view->data = copy->data();
  view->device = DILATTN_DEVICE_CPU;
  view->device_index = 0;
  return DILATTN_SUCCESS;
}

// SPEC 10.3: this rank's part of d_sinks, -sum exp(sigma_h - LSE_i) <dO_i, O_i> over its rows
// with LSE_i != -inf, per query head, in f64 from the caller's O, dO and LSE, read in host
// memory (a device backend's copied there once, readable_on_host). The sub-problems run without
// sinks, with the forward's LSE (which holds the sink), so their pair terms are the
// single-device ones.
dilattn_status sink_gradient_of_rows(RingCall& c, const BackwardTensors& t,
                                     std::vector<double>* d) {
  const Problem& p = *c.p;
  std::vector<unsigned char> o_bytes, d_o_bytes, lse_bytes;
  dilattn_tensor o, d_o, lse;
  if (dilattn_status s = readable_on_host(c, t.o, &o_bytes, &o)) return s;
  if (dilattn_status s = readable_on_host(c, t.d_o, &d_o_bytes, &d_o)) return s;
  if (dilattn_status s = readable_on_host(c, t.lse, &lse_bytes, &lse)) return s;
  d->assign(static_cast<size_t>(p.H), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < c.mine.rows; ++i) {
        const double lse_i = load_element(lse.data, lse.dtype, element_offset(lse, b, h, i, 0));
        if (row_is_empty(lse_i)) continue;
        const int64_t o0 = element_offset(o, b, i, h, 0), g0 = element_offset(d_o, b, i, h, 0);
        double D_i = 0;
        for (int64_t x = 0; x < p.D; ++x)
          D_i += load_element(d_o.data, d_o.dtype, g0 + x * d_o.strides[3]) *
                 load_element(o.data, o.dtype, o0 + x * o.strides[3]);
        (*d)[static_cast<size_t>(h)] -= std::exp(c.sinks.values[h] - lse_i) * D_i;
      }
  return DILATTN_SUCCESS;
}

dilattn_status run_backward(RingCall& c, BackwardBuffers& buf, const BackwardTensors& t) {
  const Problem& p = *c.p;
  RingOps& ops = *c.ops;
  const int64_t rows = c.mine.rows;
  const size_t asize = dtype_size(c.acc_dtype);
  const size_t shard_kv = static_cast<size_t>(p.B * rows * p.Hkv * p.D);
  KvChunks& chunks = buf.kv;
  unsigned char* const partial = buf.partial.data();

  const dilattn_tensor dq_acc_v = c.view(buf.dq_acc.data(), c.acc_dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor dq_part_v = c.view(buf.dq_part.data(), p.dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor dk_acc_v = c.view(buf.dkv_acc.data(), c.acc_dtype, p.B, rows, p.Hkv, p.D);
  const dilattn_tensor dv_acc_v =
      c.view(buf.dkv_acc.data() + shard_kv * asize, c.acc_dtype, p.B, rows, p.Hkv, p.D);

  dilattn_status status = DILATTN_SUCCESS;
  RingStep current;  // step 0: our own shard, summed straight into our dK/dV
  for (int32_t step = 0; step < c.P; ++step) {
    const int32_t owner = (c.rank - step + c.P) % c.P;
    const int64_t their_rows = c.rows_of(owner).rows;
    const bool own = step == 0, computes = own || !current.recv.empty();
    // Step 0 reads our own K and V; a later step the rows received (ring_kv_chunks.h).
    const dilattn_tensor k_chunk = chunks.k(), v_chunk = chunks.v();
    const dilattn_tensor dk_sum = own ? dk_acc_v : c.chunk_first(partial, c.acc_dtype, their_rows);
    const dilattn_tensor dv_sum = own ? dv_acc_v : c.chunk_second(partial, c.acc_dtype, their_rows);
    const dilattn_tensor dk_part_v = c.chunk_view(buf.dk_part.data(), p.dtype, p.Hkv, their_rows);
    const dilattn_tensor dv_part_v = c.chunk_view(buf.dv_part.data(), p.dtype, p.Hkv, their_rows);
    // The next step's K/V rows travel while this one computes (as in the forward).
    const bool pass_on = step + 1 < c.P;
    RingStep next;
    if (pass_on) {
      next = c.step_at(step + 1);
      if (dilattn_status s = chunks.begin(next)) return s;
    }
    if (!own && computes) {  // a fresh partial for owner's rows
      if (dilattn_status s = ops.fill(dk_sum, 0.0)) return s;
      if (dilattn_status s = ops.fill(dv_sum, 0.0)) return s;
    }
    auto run = [&](const SubCall& call) -> dilattn_status {
      const int64_t nh = call.sub.H, ng = call.sub.Hkv;
      const dilattn_tensor qv = rows_view(t.q, call.q_rows, call.h0, nh);
      const dilattn_tensor ov = rows_view(t.o, call.q_rows, call.h0, nh);
      const dilattn_tensor lv = lse_rows_view(t.lse, call.q_rows, call.h0, nh);
      const dilattn_tensor dov = rows_view(t.d_o, call.q_rows, call.h0, nh);
      const dilattn_tensor dqv = rows_view(dq_part_v, call.q_rows, call.h0, nh);
      const dilattn_tensor kv = rows_view(k_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor vv = rows_view(v_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor dkv = rows_view(dk_part_v, call.k_rows, call.g0, ng);
      const dilattn_tensor dvv = rows_view(dv_part_v, call.k_rows, call.g0, ng);
      if (dilattn_status s = c.backend->can_run(call.sub)) return s;
      if (dilattn_status s = buf.workspace.grow(c.backend->workspace_bytes(call.sub).backward)) return s;
      const BackwardArgs args{&qv,  &kv,  &vv,  &ov,
                              &lv,  &dov, &dqv, &dkv,
                              &dvv, buf.workspace.data(), ops.stream_args(), c.dropout,
                              SinksCall{}};
      if (dilattn_status s = c.backend->backward(call.sub, args))
        return s;
      if (dilattn_status s = ops.add(dqv, rows_view(dq_acc_v, call.q_rows, call.h0, nh))) return s;
      if (dilattn_status s = ops.add(dkv, rows_view(dk_sum, call.k_rows, call.g0, ng))) return s;
      return ops.add(dvv, rows_view(dv_sum, call.k_rows, call.g0, ng));
    };
    // After a failure the rank still exchanges its rows, so no other rank waits for it.
    if (computes)
      for (const RowRange& qr : c.mine.range)
        for (const RowRange& kr : c.rows_of(owner).range)
          if (status == DILATTN_SUCCESS)
            status = for_each_sub_call(p, qr, kr, c.backend->prepare, run);
    if (pass_on) {
      if (dilattn_status s = chunks.end(next)) return s;
    }
    // The partial of owner's rows goes back to owner; rank + step's partial of ours comes in
    // and is added to our dK/dV (the order of steps: fixed).
    if (!own) {
      const dilattn_dtype a = c.acc_dtype;
      MessageHalves back;
      if (dilattn_status s =
              message_of(c, dk_sum, dv_sum, current.recv, buf.grad_out.data(), &back))
        return s;
      if (dilattn_status s = c.ready_to_send()) return s;
      unsigned char* const arriving = chunks.spare();
      if (dilattn_status s = c.exchange_begin(back, current.owner, arriving,
                                              c.message_bytes(current.send, a), current.to))
        return s;
      if (dilattn_status s = c.exchange_end()) return s;
      if (dilattn_status s =
              unpack_pair(c, arriving, current.send, dk_acc_v, dv_acc_v, true))
        return s;
    }
    current = std::move(next);
  }
  if (status == DILATTN_SUCCESS) status = ops.wait();  // a failed kernel shows here at the latest
  // SPEC 10.3: this rank's part of d_sinks, before the ranks' vote so that a failure is every
  // rank's; then the sum over every rank's rows, the same on every rank.
  std::vector<double> mine, d_sinks;
  if (status == DILATTN_SUCCESS && p.sinks) status = sink_gradient_of_rows(c, t, &mine);
  if (dilattn_status s = finish_ring_call(c, status)) return s;
  if (p.sinks) {
    d_sinks.resize(mine.size());
    if (dilattn_status s = sum_over_ranks(c, mine.data(), p.H, d_sinks.data())) return s;
  }
  if (c.sinks.d_values != nullptr)
    for (int64_t h = 0; h < p.H; ++h) c.sinks.d_values[h] = d_sinks[static_cast<size_t>(h)];
  if (dilattn_status s = ops.copy(dq_acc_v, t.dq)) return s;
  if (dilattn_status s = ops.copy(dk_acc_v, t.dk)) return s;
  if (dilattn_status s = ops.copy(dv_acc_v, t.dv)) return s;
  return ops.wait();
}

}  // namespace

}  // namespace dilattn

namespace {

// split: the caller's int, read from the enum argument by enum_value (SPEC 7, abi_enum.h).
dilattn_status ring_backward(dilattn_plan plan, dilattn_comm comm, int32_t split,
                             const dilattn_tensor* q, const dilattn_tensor* k,
                             const dilattn_tensor* v, const dilattn_tensor* o,
                             const dilattn_tensor* lse, const dilattn_tensor* d_o,
                             const dilattn_tensor* dq, const dilattn_tensor* dk,
                             const dilattn_tensor* dv, const dilattn_call_options* options,
                             const char* entry) {
  using dilattn::TensorRole;
  auto role = [](TensorRole r) { return static_cast<int>(r); };
  dilattn::RingCall call;
  std::unique_ptr<dilattn::BackwardBuffers> buffers;  // freed before call's memory
  auto allocate = [&](dilattn::RingCall& c) {
    buffers = std::make_unique<dilattn::BackwardBuffers>(c, *k, *v);
    return buffers->status();
  };
  dilattn_status s = dilattn::start_ring_call(
      plan, comm, split, true, options, entry,
      {{q, "q", role(TensorRole::q), false, false}, {k, "k", role(TensorRole::kv), false, false},
       {v, "v", role(TensorRole::kv), false, false}, {o, "o", role(TensorRole::o), false, false},
       {lse, "lse", role(TensorRole::lse), false, false},
       {d_o, "d_o", role(TensorRole::o), false, false},
       {dq, "dq", role(TensorRole::q), false, true}, {dk, "dk", role(TensorRole::kv), false, true},
       {dv, "dv", role(TensorRole::kv), false, true}},
      allocate, &call);
  if (s != DILATTN_SUCCESS) return s;
  s = dilattn::run_backward(
      call, *buffers, dilattn::BackwardTensors{*q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv});
  dilattn::record_ring_call(comm, call);
  return s;
}

}  // namespace

extern "C" dilattn_status dilattn_ring_backward(
    dilattn_plan plan, dilattn_comm comm, dilattn_ring_split split, const dilattn_tensor* q,
    const dilattn_tensor* k, const dilattn_tensor* v, const dilattn_tensor* o,
    const dilattn_tensor* lse, const dilattn_tensor* d_o, const dilattn_tensor* dq,
    const dilattn_tensor* dk, const dilattn_tensor* dv) {
  DILATTN_ABI_BEGIN
  return ring_backward(plan, comm, dilattn::enum_value(split), q, k, v, o, lse, d_o, dq, dk, dv,
                       nullptr, "dilattn_ring_backward");
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_ring_backward_ex(
    dilattn_plan plan, dilattn_comm comm, dilattn_ring_split split, const dilattn_tensor* q,
    const dilattn_tensor* k, const dilattn_tensor* v, const dilattn_tensor* o,
    const dilattn_tensor* lse, const dilattn_tensor* d_o, const dilattn_tensor* dq,
    const dilattn_tensor* dk, const dilattn_tensor* dv, const dilattn_call_options* options) {
  DILATTN_ABI_BEGIN
  return ring_backward(plan, comm, dilattn::enum_value(split), q, k, v, o, lse, d_o, dq, dk, dv,
                       options, "dilattn_ring_backward");
  DILATTN_ABI_END
}
