// ring_forward.cpp - dilattn_ring_forward: SPEC 5's ring, forward.
//
// Rank p computes with its own K/V at step 0; at step s (1 <= s < P) with the rows of rank
// o = (p - s) mod P's shard that its queries read. Nothing else travels (ring_needs.h): at
// step s rank p sends rank (p + s) mod P the rows of its own shard that rank needs and
// receives from o the rows of o's shard it needs (ring_kv_chunks.h: a whole shard straight
// from the caller's K and V and computed on where it arrived; other rows packed, and unpacked
// at their row positions into a chunk buffer, where rows nobody sent are never read).
// The exchange for step s + 1 runs while step s computes. A step that receives no row has
// nothing to compute (every sub-problem of it reads no key) and is skipped: block-sparse
// chunks without a listed block, dilated segments inside another shard, causal keys after
// every query.
// Each (own query range, chunk key range) pair is cut into backend sub-problems
// (ring_pairs.h) whose partial (O_b, LSE_b) is merged into the running (O, LSE) with SPEC 5's
// stable update (softmax_rules.h merge_lse / merge_weight). The merge order is the step order,
// fixed by ring position, so a run gives the same bits every time.
// Memory on a rank (RingMemory), all allocated before the ranks' vote (ring_call.h): the K/V
// buffers of ring_kv_chunks.h (C a K/V chunk pair, R and S the largest needed message
// received and packed to send): at most 2 C when whole shards travel (dense, causal, a mask
// listing every block; tests/ring/test_ring_memory.cpp checks it), C + R + S when only parts
// do, 2 C + S when both; plus the running O and LSE (accumulator dtype), one partial O and
// LSE, and a backend workspace: O(N / P). The MPI transport adds its staging, one message
// each way (buffer_bytes). The element work (packing, the merge) runs where the backend keeps
// its tensors (ring_ops.h): host loops for ref and cpu, kernels on the device's stream for
// cuda and emu.
// Options (SPEC 10, 11): the sub-problems carry them (ring_pairs.h); sinks join each row once,
// as the last partial of its merge (merge_sinks).
// Checked by tests/ring/test_ring_forward.cpp against the single-device reference and by
// tests/ring/test_ring_needs.cpp (bytes sent, chunk rows not received poisoned with NaN).
#include <cmath>
#include <memory>

#include "abi_enum.h"
#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "ring_call.h"
#include "ring_kv_chunks.h"
#include "ring_pairs.h"
#include "tensor_checks.h"

namespace dilattn {

namespace {

// Everything the forward allocates, sized from the plan before the ranks' vote (ring_call.h).
struct ForwardBuffers {
  ForwardBuffers(RingCall& c, const dilattn_tensor& k, const dilattn_tensor& v)
      : kv(c, k, v),
        o_acc(c.memory, shard_o(c) * dtype_size(c.acc_dtype)),
        lse_acc(c.memory, shard_lse(c) * dtype_size(c.acc_dtype)),
        o_part(c.memory, shard_o(c) * dtype_size(c.p->dtype)),
        lse_part(c.memory, shard_lse(c) * dtype_size(c.acc_dtype)),
        workspace(c.memory) {}
  static size_t shard_o(const RingCall& c) {
    return static_cast<size_t>(c.p->B * c.mine.rows * c.p->H * c.p->D);
  }
  static size_t shard_lse(const RingCall& c) {
    return static_cast<size_t>(c.p->B * c.p->H * c.mine.rows);
  }
  dilattn_status status() const {
    if (dilattn_status s = kv.status()) return s;
    for (const RingBuffer* b : {&o_acc, &lse_acc, &o_part, &lse_part})
      if (dilattn_status s = b->status()) return s;
    return DILATTN_SUCCESS;
  }
  KvChunks kv;
  RingBuffer o_acc, lse_acc, o_part, lse_part;
  RingBuffer workspace;  // grows to the largest sub-problem's need (a failure is the rank's status)
};

// SPEC 10.3: (o, lse) <- the merge of (o, lse) and the sink partial (0, sigma_h), head by head,
// in the partial buffers o_part, lse_part.
dilattn_status merge_sinks(RingCall& c, const dilattn_tensor& o_part, const dilattn_tensor& lse_part,
                           const dilattn_tensor& o, const dilattn_tensor& lse) {
  RingOps& ops = *c.ops;
  if (dilattn_status s = ops.fill(o_part, 0.0)) return s;
  const KeyProgression all_rows{0, 1, c.mine.rows};
  for (int64_t h = 0; h < c.p->H; ++h)
    if (dilattn_status s = ops.fill(lse_rows_view(lse_part, all_rows, h, 1), c.sinks.values[h]))
      return s;
  return ops.merge(o_part, lse_part, o, lse);
}

dilattn_status run_forward(RingCall& c, ForwardBuffers& buf, const dilattn_tensor& q,
                           const dilattn_tensor& o, const dilattn_tensor* lse) {
  const Problem& p = *c.p;
  RingOps& ops = *c.ops;
  const int64_t rows = c.mine.rows;
  KvChunks& chunks = buf.kv;

  const dilattn_tensor o_acc_v = c.view(buf.o_acc.data(), c.acc_dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor o_part_v = c.view(buf.o_part.data(), p.dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor lse_acc_v = c.lse_view(buf.lse_acc.data());
  const dilattn_tensor lse_part_v = c.lse_view(buf.lse_part.data());
  // An empty running result (SPEC 2: O = 0, LSE = -inf).
  if (dilattn_status s = ops.fill(lse_acc_v, -INFINITY)) return s;

  dilattn_status status = DILATTN_SUCCESS;
  bool received_rows = true;  // step 0: our own shard
  for (int32_t step = 0; step < c.P; ++step) {
    const ShardRows theirs = c.rows_of((c.rank - step + c.P) % c.P);
    // Step 0 reads our own K and V; a later step the rows received (ring_kv_chunks.h).
    const dilattn_tensor k_chunk = chunks.k(), v_chunk = chunks.v();
    // The next step's rows travel while this one computes.
    const bool pass_on = step + 1 < c.P;
    RingStep next;
    if (pass_on) {
      next = c.step_at(step + 1);
      if (dilattn_status s = chunks.begin(next)) return s;
    }
    auto run = [&](const SubCall& call) -> dilattn_status {
      const int64_t nh = call.sub.H, ng = call.sub.Hkv;
      const dilattn_tensor qv = rows_view(q, call.q_rows, call.h0, nh);
      const dilattn_tensor kv = rows_view(k_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor vv = rows_view(v_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor ov = rows_view(o_part_v, call.q_rows, call.h0, nh);
      const dilattn_tensor lv = lse_rows_view(lse_part_v, call.q_rows, call.h0, nh);
      if (dilattn_status s = c.backend->can_run(call.sub)) return s;
      if (dilattn_status s = buf.workspace.grow(c.backend->workspace_bytes(call.sub).forward)) return s;
      const ForwardArgs args{&qv, &kv, &vv, &ov, &lv, buf.workspace.data(), ops.stream_args(),
                             c.dropout, SinksCall{}};
      if (dilattn_status s = c.backend->forward(call.sub, args))
        return s;
      return ops.merge(ov, lv, rows_view(o_acc_v, call.q_rows, call.h0, nh),
                       lse_rows_view(lse_acc_v, call.q_rows, call.h0, nh));
    };
    // After a failure the rank still exchanges its rows, so no other rank waits for it.
    if (received_rows)
      for (const RowRange& qr : c.mine.range)
        for (const RowRange& kr : theirs.range)
          if (status == DILATTN_SUCCESS)
            status = for_each_sub_call(p, qr, kr, c.backend->prepare, run);
    if (pass_on) {
      if (dilattn_status s = chunks.end(next)) return s;
      received_rows = !next.recv.empty();
    }
  }
  // SPEC 10.3: each row's sink joins its softmax once, here, after every step's partial: one
  // more partial (O_b = 0, LSE_b = sigma_h) merged last.
  if (status == DILATTN_SUCCESS && p.sinks && rows > 0)
    status = merge_sinks(c, o_part_v, lse_part_v, o_acc_v, lse_acc_v);
  if (status == DILATTN_SUCCESS) status = ops.wait();  // a failed kernel shows here at the latest
  if (dilattn_status s = finish_ring_call(c, status)) return s;
  if (dilattn_status s = ops.copy(o_acc_v, o)) return s;
  if (lse != nullptr) {
    if (dilattn_status s = ops.copy(lse_acc_v, *lse)) return s;
  }
  return ops.wait();
}

}  // namespace

}  // namespace dilattn

namespace {

// split: the caller's int, read from the enum argument by enum_value (SPEC 7, abi_enum.h).
dilattn_status ring_forward(dilattn_plan plan, dilattn_comm comm, int32_t split,
                            const dilattn_tensor* q, const dilattn_tensor* k,
                            const dilattn_tensor* v, const dilattn_tensor* o,
                            const dilattn_tensor* lse, const dilattn_call_options* options,
                            const char* entry) {
  using dilattn::TensorRole;
  auto role = [](TensorRole r) { return static_cast<int>(r); };
  dilattn::RingCall call;
  std::unique_ptr<dilattn::ForwardBuffers> buffers;  // freed before call's memory
  auto allocate = [&](dilattn::RingCall& c) {
    buffers = std::make_unique<dilattn::ForwardBuffers>(c, *k, *v);
    return buffers->status();
  };
  dilattn_status s = dilattn::start_ring_call(
      plan, comm, split, false, options, entry,
      {{q, "q", role(TensorRole::q), false, false}, {k, "k", role(TensorRole::kv), false, false},
       {v, "v", role(TensorRole::kv), false, false}, {o, "o", role(TensorRole::o), false, true},
       {lse, "lse", role(TensorRole::lse), true, true}},
      allocate, &call);
  if (s != DILATTN_SUCCESS) return s;
  s = dilattn::run_forward(call, *buffers, *q, *o, lse);
  dilattn::record_ring_call(comm, call);
  return s;
}

}  // namespace

extern "C" dilattn_status dilattn_ring_forward(dilattn_plan plan, dilattn_comm comm,
                                               dilattn_ring_split split, const dilattn_tensor* q,
                                               const dilattn_tensor* k, const dilattn_tensor* v,
                                               const dilattn_tensor* o,
                                               const dilattn_tensor* lse) {
  DILATTN_ABI_BEGIN
  return ring_forward(plan, comm, dilattn::enum_value(split), q, k, v, o, lse, nullptr,
                      "dilattn_ring_forward");
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_ring_forward_ex(dilattn_plan plan, dilattn_comm comm,
                                                  dilattn_ring_split split,
                                                  const dilattn_tensor* q, const dilattn_tensor* k,
                                                  const dilattn_tensor* v, const dilattn_tensor* o,
                                                  const dilattn_tensor* lse,
                                                  const dilattn_call_options* options) {
  DILATTN_ABI_BEGIN
  return ring_forward(plan, comm, dilattn::enum_value(split), q, k, v, o, lse, options,
                      "dilattn_ring_forward");
  DILATTN_ABI_END
}
