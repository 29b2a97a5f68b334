// ring_kv_chunks.h - how K/V rows travel around the ring and where a rank computes on them
// (SPEC 5: memory per rank O(N/P)), shared by ring_forward.cpp and ring_backward.cpp.
//
// Sending step s's rows (RingStep::send, ring_needs.h): when they are the whole shard (every
// row, every kv head: dense, full causal, a mask listing everything) and the caller's K and V
// are contiguous [B, rows, Hkv, D] (the packed layout of that one run), the message's two
// halves are K and V themselves (ring_call.h message_of): no copy, no outgoing buffer.
// Otherwise the rows are packed into `outgoing`, sized by the largest such message.
// Receiving: two buffers take turns; step s + 1's rows arrive in the one step s does not
// compute on. Rows that are the whole of the owner's shard are computed on where they arrived
// (contiguous [B, rows, Hkv, D] K, then V): no unpack copy. Other rows are unpacked at their
// positions into the other buffer, in the chunk layout [B, max_rows, Hkv, D] (rows nobody sent
// are never read).
// Buffers (C: a K/V chunk pair, 2 B max_rows Hkv D elements; R: the largest message received;
// S: the largest message packed to send, 0 when every send is in place), each sized by playing
// the steps through (a buffer no step uses is empty):
//   only whole shards received: at most 2 R <= 2 C (the chunk computed on, the next arriving;
//                               one R when a single step receives);
//   only parts received:        C + R + S (the chunk unpacked into, the message arriving);
//   both:                       at most 2 C + S.
// With whole shards both ways (dense, causal, a mask listing every block) that is two chunks,
// what a ring that overlaps a transfer with compute must hold; with parts, R and S are the
// needed rows only.
#ifndef DILATTN_RING_KV_CHUNKS_H
#define DILATTN_RING_KV_CHUNKS_H

#include "ring_call.h"

namespace dilattn {

class KvChunks {
 public:
  // Allocates every buffer the call's steps need (from c.memory); status() says whether it could.
  KvChunks(RingCall& c, const dilattn_tensor& k, const dilattn_tensor& v);
  dilattn_status status() const;
  // Sends `next`.send of our K and V to next.to and receives next.recv from next.owner (the
  // exchange of step `next`, begun while the current step computes).
  dilattn_status begin(const RingStep& next);
  // Completes it: the rows received become the K and V of the next step (k(), v()).
  dilattn_status end(const RingStep& next);
  // Grows both buffers to at least `bytes`, so that spare() can hold a message that large.
  dilattn_status reserve_spare(size_t bytes);
  // The buffer the next step does not read, free between end() (or the last step's compute)
  // and the next begin(): the backward receives a dK/dV partial there.
  unsigned char* spare() const { return turn_[1 - computed_].data(); }
  // The K and V a step reads: the caller's at step 0, then the rows last received.
  const dilattn_tensor& k() const { return k_; }
  const dilattn_tensor& v() const { return v_; }

 private:
  RingCall& c_;
  const dilattn_tensor &own_k_, &own_v_;
  RingBuffer outgoing_, turn_[2];
  int computed_ = 0;  // the turn_ buffer the current step reads (or unpacks into)
  dilattn_tensor k_, v_;
};

}  // namespace dilattn

#endif  // DILATTN_RING_KV_CHUNKS_H
