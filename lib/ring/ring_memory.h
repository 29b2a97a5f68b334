// ring_memory.h - every byte the ring allocates on a rank, counted (SPEC 5: memory per rank is
// O(N/P)). Chunks in flight, partial results, accumulators and sub-problem workspaces all come
// from one RingMemory per call; its peak is what dilattn_comm_peak_bytes reports and what
// tests/ring/test_ring_memory.cpp bounds.
#ifndef DILATTN_RING_MEMORY_H
#define DILATTN_RING_MEMORY_H

#include <cstddef>
#include <cstdlib>
#include <new>

namespace dilattn {

class RingMemory {
 public:
  void* allocate(size_t bytes) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);  // zeroed: accumulators start at 0
    if (p == nullptr) throw std::bad_alloc();          // DILATTN_ABI_END turns it into a status
    current_ += bytes;
    if (current_ > peak_) peak_ = current_;
    return p;
  }
  void release(void* p, size_t bytes) {
    std::free(p);
    current_ -= bytes;
  }
  size_t peak() const { return peak_; }

 private:
  size_t current_ = 0, peak_ = 0;
};

// A zeroed block of a RingMemory, freed with it; grow() replaces it by a larger one.
class RingBuffer {
 public:
  explicit RingBuffer(RingMemory& memory, size_t bytes = 0) : memory_(&memory) { grow(bytes); }
  ~RingBuffer() { reset(); }
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;

  void grow(size_t bytes) {
    if (bytes <= bytes_ && data_ != nullptr) return;
    reset();
    data_ = memory_->allocate(bytes);
    bytes_ = bytes;
  }
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
};

}  // namespace dilattn

#endif  // DILATTN_RING_MEMORY_H
