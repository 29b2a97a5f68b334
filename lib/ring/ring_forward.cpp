// ring_forward.cpp - dilattn_ring_forward: SPEC 5's ring, forward.
//
// Rank p starts with its own K/V chunk; at step s (0 <= s < P) it holds the chunk of rank
// (p - s) mod P, sends it on to p + 1 while it computes with it, and receives the next from
// p - 1. Each (own query range, chunk key range) pair is cut into backend sub-problems
// (ring_pairs.h) whose partial (O_b, LSE_b) is merged into the running (O, LSE) with SPEC 5's
// stable update (softmax_rules.h merge_lse / merge_weight). The merge order is the step order,
// fixed by ring position, so a run gives the same bits every time.
// Memory on a rank (RingMemory): two K/V chunks (one computed on, one arriving), the running O
// and LSE, one partial O and LSE, and a backend workspace: O(N / P). The element work (copies,
// the merge) runs where the backend keeps its tensors (ring_ops.h): host loops for ref and cpu,
// kernels on the device's stream for cuda and emu.
// Checked by tests/ring/test_ring_forward.cpp against the single-device reference.
#include <cmath>

#include "abi_enum.h"
#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "ring_call.h"
#include "ring_pairs.h"
#include "tensor_checks.h"

namespace dilattn {

namespace {

dilattn_status run_forward(RingCall& c, const dilattn_tensor& q, const dilattn_tensor& k,
                           const dilattn_tensor& v, const dilattn_tensor& o,
                           const dilattn_tensor* lse) {
  const Problem& p = *c.p;
  RingOps& ops = *c.ops;
  const int64_t rows = c.mine.rows;
  const size_t esize = dtype_size(p.dtype), asize = dtype_size(c.acc_dtype);
  const size_t chunk_bytes = static_cast<size_t>(c.chunk_elements()) * esize;
  const size_t shard_o = static_cast<size_t>(p.B * rows * p.H * p.D);
  const size_t shard_lse = static_cast<size_t>(p.B * p.H * rows);
  RingBuffer chunks[2] = {RingBuffer(c.memory, 2 * chunk_bytes), RingBuffer(c.memory, 2 * chunk_bytes)};
  RingBuffer o_acc(c.memory, shard_o * asize), lse_acc(c.memory, shard_lse * asize);
  RingBuffer o_part(c.memory, shard_o * esize), lse_part(c.memory, shard_lse * asize);
  RingBuffer workspace(c.memory);
  for (const RingBuffer* b : {&chunks[0], &chunks[1], &o_acc, &lse_acc, &o_part, &lse_part})
    if (dilattn_status s = b->status()) return s;

  const dilattn_tensor o_acc_v = c.view(o_acc.data(), c.acc_dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor o_part_v = c.view(o_part.data(), p.dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor lse_acc_v = c.lse_view(lse_acc.data()), lse_part_v = c.lse_view(lse_part.data());
  // An empty running result (SPEC 2: O = 0, LSE = -inf), and our own chunk, packed: K then V,
  // each [B, max_rows, Hkv, D].
  if (dilattn_status s = ops.fill(lse_acc_v, -INFINITY)) return s;
  if (dilattn_status s = ops.copy(k, c.chunk_view(chunks[0].data(), p.dtype, p.Hkv, rows))) return s;
  if (dilattn_status s = ops.copy(v, c.chunk_view(chunks[0].data() + chunk_bytes, p.dtype, p.Hkv, rows)))
    return s;

  dilattn_status status = DILATTN_SUCCESS;
  for (int32_t step = 0; step < c.P; ++step) {
    const int32_t owner = (c.rank - step + c.P) % c.P;
    unsigned char* cur = chunks[step % 2].data();
    const bool pass_on = step + 1 < c.P;
    if (pass_on) {
      if (dilattn_status s = c.ready_to_send()) return s;
      if (dilattn_status s = c.shift_begin(cur, chunks[(step + 1) % 2].data(), 2 * chunk_bytes))
        return s;
    }
    const ShardRows theirs = c.rows_of(owner);
    const dilattn_tensor k_chunk = c.chunk_view(cur, p.dtype, p.Hkv, theirs.rows);
    const dilattn_tensor v_chunk = c.chunk_view(cur + chunk_bytes, p.dtype, p.Hkv, theirs.rows);
    auto run = [&](const SubCall& call) -> dilattn_status {
      const int64_t nh = call.sub.H, ng = call.sub.Hkv;
      const dilattn_tensor qv = rows_view(q, call.q_rows, call.h0, nh);
      const dilattn_tensor kv = rows_view(k_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor vv = rows_view(v_chunk, call.k_rows, call.g0, ng);
      const dilattn_tensor ov = rows_view(o_part_v, call.q_rows, call.h0, nh);
      const dilattn_tensor lv = lse_rows_view(lse_part_v, call.q_rows, call.h0, nh);
      if (dilattn_status s = c.backend->can_run(call.sub)) return s;
      if (dilattn_status s = workspace.grow(c.backend->workspace_bytes(call.sub).forward)) return s;
      const ForwardArgs args{&qv, &kv, &vv, &ov, &lv, workspace.data(), ops.stream_args()};
      if (dilattn_status s = c.backend->forward(call.sub, args))
        return s;
      return ops.merge(ov, lv, rows_view(o_acc_v, call.q_rows, call.h0, nh),
                       lse_rows_view(lse_acc_v, call.q_rows, call.h0, nh));
    };
    // After a failure the rank still passes chunks on, so no other rank waits for it.
    for (const RowRange& qr : c.mine.range)
      for (const RowRange& kr : theirs.range)
        if (status == DILATTN_SUCCESS)
          status = for_each_sub_call(p, qr, kr, c.backend->prepare, run);
    if (pass_on) {
      if (dilattn_status s = c.shift_end()) return s;
    }
  }
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

extern "C" dilattn_status dilattn_ring_forward(dilattn_plan plan, dilattn_comm comm,
                                               dilattn_ring_split split, const dilattn_tensor* q,
                                               const dilattn_tensor* k, const dilattn_tensor* v,
                                               const dilattn_tensor* o,
                                               const dilattn_tensor* lse) {
  DILATTN_ABI_BEGIN
  using dilattn::TensorRole;
  auto role = [](TensorRole r) { return static_cast<int>(r); };
  dilattn::RingCall call;
  dilattn_status s = dilattn::start_ring_call(
      plan, comm, dilattn::enum_value(split), false,
      {{q, "q", role(TensorRole::q), false}, {k, "k", role(TensorRole::kv), false},
       {v, "v", role(TensorRole::kv), false}, {o, "o", role(TensorRole::o), false},
       {lse, "lse", role(TensorRole::lse), true}},
      &call);
  if (s != DILATTN_SUCCESS) return s;
  s = dilattn::run_forward(call, *q, *k, *v, *o, lse);
  dilattn::record_ring_call(comm, call);
  return s;
  DILATTN_ABI_END
}
