// ring_kv_chunks.cpp - the K/V rows of the ring, sent and received (see ring_kv_chunks.h).
#include "ring_kv_chunks.h"

#include <algorithm>

namespace dilattn {

KvChunks::KvChunks(RingCall& c, const dilattn_tensor& k, const dilattn_tensor& v)
    : c_(c), own_k_(k), own_v_(v), outgoing_(c.memory), turn_{RingBuffer(c.memory),
                                                                RingBuffer(c.memory)},
      k_(k), v_(v) {
  const dilattn_dtype t = c.p->dtype;
  const size_t chunk = 2 * static_cast<size_t>(c.chunk_elements()) * dtype_size(t);
  // The steps played through as begin/end will: what each buffer ever holds.
  size_t packed_send = 0, need[2] = {0, 0};
  int computed = 0;
  for (int32_t s = 1; s < c.P; ++s) {
    const RingStep step = c.step_at(s);
    if (!sends_in_place(c, k, v, step.send))
      packed_send = std::max(packed_send, c.message_bytes(step.send, t));
    if (step.recv.empty()) continue;
    need[1 - computed] = std::max(need[1 - computed], c.message_bytes(step.recv, t));
    if (whole_shard(c, step.recv, c.rows_of(step.owner).rows))
      computed = 1 - computed;
    else
      need[computed] = chunk;  // unpacked in the chunk layout
  }
  outgoing_.grow(packed_send);
  turn_[0].grow(need[0]);
  turn_[1].grow(need[1]);
}

dilattn_status KvChunks::status() const {
  for (const RingBuffer* b : {&outgoing_, &turn_[0], &turn_[1]})
    if (dilattn_status s = b->status()) return s;
  return DILATTN_SUCCESS;
}

dilattn_status KvChunks::reserve_spare(size_t bytes) {
  for (RingBuffer& b : turn_)
    if (b.bytes() < bytes)
      if (dilattn_status s = b.grow(bytes)) return s;
  return DILATTN_SUCCESS;
}

dilattn_status KvChunks::begin(const RingStep& next) {
  MessageHalves message;
  if (dilattn_status s = message_of(c_, own_k_, own_v_, next.send, outgoing_.data(), &message))
    return s;
  if (dilattn_status s = c_.ready_to_send()) return s;
  return c_.exchange_begin(message, next.to, turn_[1 - computed_].data(),
                           c_.message_bytes(next.recv, c_.p->dtype), next.owner);
}

dilattn_status KvChunks::end(const RingStep& next) {
  if (dilattn_status s = c_.exchange_end()) return s;
  if (next.recv.empty()) return DILATTN_SUCCESS;  // a step with nothing to read is skipped
  const Problem& p = *c_.p;
  const int64_t rows = c_.rows_of(next.owner).rows;
  unsigned char* arrived = turn_[1 - computed_].data();
  if (whole_shard(c_, next.recv, rows)) {
    computed_ = 1 - computed_;
    k_ = c_.view(arrived, p.dtype, p.B, rows, p.Hkv, p.D);
    v_ = c_.view(arrived + c_.message_bytes(next.recv, p.dtype) / 2, p.dtype, p.B, rows, p.Hkv,
                 p.D);
    return DILATTN_SUCCESS;
  }
  k_ = c_.chunk_first(turn_[computed_].data(), p.dtype, rows);
  v_ = c_.chunk_second(turn_[computed_].data(), p.dtype, rows);
  return unpack_kv(c_, arrived, next.recv, k_, v_);
}

}  // namespace dilattn
