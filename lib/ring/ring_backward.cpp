// ring_backward.cpp - dilattn_ring_backward: SPEC 6 over SPEC 5's ring.
//
// With the combined LSE of the forward, P_ij = exp(S_ij - LSE_i) of every pair is exact, so the
// gradient of each (own query range, chunk key range) pair is independent: the same
// sub-problems as the forward (ring_pairs.h) run the backend's backward with this rank's full
// O and LSE rows (D_i = <dO_i, O_i> needs the whole O_i). dQ accumulates locally; the chunk's
// dK/dV accumulators travel with its K/V and, after P steps, arrive back at their owner:
//   step s: hold chunk (p - s) mod P; send its K/V on while computing with it; add this
//           rank's dK/dV to the chunk's accumulators; send those on (after the compute).
// The accumulators of chunk c receive rank c's terms first, then c+1's, ...: an order fixed by
// ring position, never by arrival time, so the gradients are bitwise the same on every run.
// Accumulators are f32 (f64 for f64 plans); each pair's gradient is rounded once to the plan's
// dtype by the backend before it is added. The sums run where the backend keeps its tensors
// (ring_ops.h: host loops, or kernels on the device's stream), each element by one thread in
// this fixed order, so the device path is bitwise schedule-independent too.
// Checked by tests/ring/test_ring_backward.cpp against the single-device reference.
#include "abi_enum.h"
#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "ring_call.h"
#include "ring_pairs.h"
#include "tensor_checks.h"

namespace dilattn {

namespace {

struct BackwardTensors {
  const dilattn_tensor &q, &k, &v, &o, &lse, &d_o, &dq, &dk, &dv;
};

dilattn_status run_backward(RingCall& c, const BackwardTensors& t) {
  const Problem& p = *c.p;
  RingOps& ops = *c.ops;
  const int64_t rows = c.mine.rows;
  const size_t esize = dtype_size(p.dtype), asize = dtype_size(c.acc_dtype);
  const size_t chunk_n = static_cast<size_t>(c.chunk_elements());
  // A message: K, V (plan dtype) then dK, dV accumulators (acc dtype), each [B, max_rows, Hkv, D].
  const size_t kv_bytes = 2 * chunk_n * esize, grad_bytes = 2 * chunk_n * asize;
  const size_t shard_q = static_cast<size_t>(p.B * rows * p.H * p.D);
  RingBuffer messages[2] = {RingBuffer(c.memory, kv_bytes + grad_bytes),
                            RingBuffer(c.memory, kv_bytes + grad_bytes)};
  RingBuffer dq_acc(c.memory, shard_q * asize), dq_part(c.memory, shard_q * esize);
  RingBuffer dk_part(c.memory, chunk_n * esize), dv_part(c.memory, chunk_n * esize);
  RingBuffer workspace(c.memory);
  for (const RingBuffer* b : {&messages[0], &messages[1], &dq_acc, &dq_part, &dk_part, &dv_part})
    if (dilattn_status s = b->status()) return s;

  const dilattn_tensor dq_acc_v = c.view(dq_acc.data(), c.acc_dtype, p.B, rows, p.H, p.D);
  const dilattn_tensor dq_part_v = c.view(dq_part.data(), p.dtype, p.B, rows, p.H, p.D);
  if (dilattn_status s = ops.copy(t.k, c.chunk_view(messages[0].data(), p.dtype, p.Hkv, rows)))
    return s;
  if (dilattn_status s =
          ops.copy(t.v, c.chunk_view(messages[0].data() + chunk_n * esize, p.dtype, p.Hkv, rows)))
    return s;

  dilattn_status status = DILATTN_SUCCESS;
  for (int32_t step = 0; step < c.P; ++step) {
    const int32_t owner = (c.rank - step + c.P) % c.P;
    unsigned char* cur = messages[step % 2].data();
    unsigned char* next = messages[(step + 1) % 2].data();
    const bool pass_on = step + 1 < c.P;
    if (pass_on) {
      if (dilattn_status s = c.ready_to_send()) return s;
      if (dilattn_status s = c.shift_begin(cur, next, kv_bytes)) return s;
    }
    const int64_t their_rows = c.rows_of(owner).rows;
    const dilattn_tensor k_chunk = c.chunk_view(cur, p.dtype, p.Hkv, their_rows);
    const dilattn_tensor v_chunk = c.chunk_view(cur + chunk_n * esize, p.dtype, p.Hkv, their_rows);
    const dilattn_tensor dk_acc = c.chunk_view(cur + kv_bytes, c.acc_dtype, p.Hkv, their_rows);
    const dilattn_tensor dv_acc = c.chunk_view(cur + kv_bytes + chunk_n * asize, c.acc_dtype, p.Hkv, their_rows);
    const dilattn_tensor dk_part_v = c.chunk_view(dk_part.data(), p.dtype, p.Hkv, their_rows);
    const dilattn_tensor dv_part_v = c.chunk_view(dv_part.data(), p.dtype, p.Hkv, their_rows);
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
      if (dilattn_status s = workspace.grow(c.backend->workspace_bytes(call.sub).backward)) return s;
      const BackwardArgs args{&qv, &kv, &vv, &ov,  &lv,
                              &dov, &dqv, &dkv, &dvv, workspace.data(), ops.stream_args()};
      if (dilattn_status s = c.backend->backward(call.sub, args))
        return s;
      if (dilattn_status s = ops.add(dqv, rows_view(dq_acc_v, call.q_rows, call.h0, nh))) return s;
      if (dilattn_status s = ops.add(dkv, rows_view(dk_acc, call.k_rows, call.g0, ng))) return s;
      return ops.add(dvv, rows_view(dv_acc, call.k_rows, call.g0, ng));
    };
    // After a failure the rank still passes chunks on, so no other rank waits for it.
    for (const RowRange& qr : c.mine.range)
      for (const RowRange& kr : c.rows_of(owner).range)
        if (status == DILATTN_SUCCESS)
          status = for_each_sub_call(p, qr, kr, c.backend->prepare, run);
    if (pass_on) {
      if (dilattn_status s = c.shift_end()) return s;
    }
    // The chunk's gradients go on to the next rank; after step P-1 they reach their owner.
    if (c.P > 1) {
      if (dilattn_status s = c.ready_to_send()) return s;
      if (dilattn_status s = c.shift_begin(cur + kv_bytes, next + kv_bytes, grad_bytes))
        return s;
      if (dilattn_status s = c.shift_end()) return s;
    }
  }
  if (status == DILATTN_SUCCESS) status = ops.wait();  // a failed kernel shows here at the latest
  if (dilattn_status s = finish_ring_call(c, status)) return s;
  unsigned char* own = messages[c.P > 1 ? c.P % 2 : 0].data();
  if (dilattn_status s = ops.copy(dq_acc_v, t.dq)) return s;
  if (dilattn_status s = ops.copy(c.chunk_view(own + kv_bytes, c.acc_dtype, p.Hkv, rows), t.dk))
    return s;
  if (dilattn_status s =
          ops.copy(c.chunk_view(own + kv_bytes + chunk_n * asize, c.acc_dtype, p.Hkv, rows), t.dv))
    return s;
  return ops.wait();
}

}  // namespace

}  // namespace dilattn

extern "C" dilattn_status dilattn_ring_backward(
    dilattn_plan plan, dilattn_comm comm, dilattn_ring_split split, const dilattn_tensor* q,
    const dilattn_tensor* k, const dilattn_tensor* v, const dilattn_tensor* o,
    const dilattn_tensor* lse, const dilattn_tensor* d_o, const dilattn_tensor* dq,
    const dilattn_tensor* dk, const dilattn_tensor* dv) {
  DILATTN_ABI_BEGIN
  using dilattn::TensorRole;
  auto role = [](TensorRole r) { return static_cast<int>(r); };
  dilattn::RingCall call;
  dilattn_status s = dilattn::start_ring_call(
      plan, comm, dilattn::enum_value(split), true,
      {{q, "q", role(TensorRole::q), false}, {k, "k", role(TensorRole::kv), false},
       {v, "v", role(TensorRole::kv), false}, {o, "o", role(TensorRole::o), false},
       {lse, "lse", role(TensorRole::lse), false}, {d_o, "d_o", role(TensorRole::o), false},
       {dq, "dq", role(TensorRole::q), false}, {dk, "dk", role(TensorRole::kv), false},
       {dv, "dv", role(TensorRole::kv), false}},
      &call);
  if (s != DILATTN_SUCCESS) return s;
  s = dilattn::run_backward(call, dilattn::BackwardTensors{*q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv});
  dilattn::record_ring_call(comm, call);
  return s;
  DILATTN_ABI_END
}
