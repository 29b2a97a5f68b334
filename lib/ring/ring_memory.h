// ring_memory.h - every byte the ring allocates on a rank, counted (SPEC 5: memory per rank is
// O(N/P)). Chunks in flight, partial results, accumulators and sub-problem workspaces all come
// from one RingMemory per call, allocated where the plan's backend keeps its tensors (host
// memory, or the device's through ring_ops.h); its peak is what dilattn_comm_peak_bytes
// reports and what tests/ring/test_ring_memory.cpp bounds.
#ifndef DILATTN_RING_MEMORY_H
#define DILATTN_RING_MEMORY_H

#include <cstddef>

#include "ring_ops.h"

namespace dilattn {

class RingMemory {
 public:
  void use(RingOps* ops) { ops_ = ops; }
  // *p zeroed (accumulators start at 0).
  dilattn_status allocate(size_t bytes, void** p) {
    if (dilattn_status s = ops_->allocate(bytes, p)) return s;
    current_ += bytes;
    if (current_ > peak_) peak_ = current_;
    return DILATTN_SUCCESS;
  }
  void release(void* p, size_t bytes) {
    ops_->release(p);
    current_ -= bytes;
  }
  size_t peak() const { return peak_; }

 private:
  RingOps* ops_ = nullptr;
  size_t current_ = 0, peak_ = 0;
};

// A zeroed block of a RingMemory, freed with it; grow() replaces it by a larger one. A block
// that could not be allocated has no data: grow returns the status, status() keeps it.
class RingBuffer {
 public:
  explicit RingBuffer(RingMemory& memory, size_t bytes = 0) : memory_(&memory) { grow(bytes); }
  ~RingBuffer() { reset(); }
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;

  dilattn_status grow(size_t bytes) {
    if (bytes <= bytes_ && data_ != nullptr) return DILATTN_SUCCESS;
    reset();
    status_ = memory_->allocate(bytes, &data_);
    if (status_ == DILATTN_SUCCESS) bytes_ = bytes;
    return status_;
  }
  // SUCCESS, or why the last grow failed (then data() is null).
  dilattn_status status() const { return status_; }
  unsigned char* data() const { return static_cast<unsigned char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (data_ != nullptr) memory_->release(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  RingMemory* memory_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  dilattn_status status_ = DILATTN_SUCCESS;
};

}  // namespace dilattn

#endif  // DILATTN_RING_MEMORY_H
