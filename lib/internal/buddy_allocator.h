// buddy_allocator.h - the bookkeeping of one buddy-allocator arena (dilattn_pool.h).
//
// Pure bookkeeping over an address range [base, base + arena_bytes): it never reads or writes
// the memory it manages, so the same class serves host arenas and CUDA device arenas.
//
// Algorithm: the arena is a complete binary tree of blocks; node 1 is the whole arena, the
// children of node i are its two halves 2i and 2i+1, and the leaves are the minimum blocks.
// Each node keeps one byte: the order+1 of the largest free block inside its subtree (0: none),
// and a flag for "this node is a live block". Allocation rounds the size up to a power of two
// and walks down from the root to the leftmost fitting node (splitting on the way). Free finds
// a live block starting at the pointer from a per-leaf record of the size asked for; any other
// pointer walks down from the root along its path, so a double free, an interior pointer and a
// pointer the arena never handed out are told apart without touching the block. Then free walks
// up coalescing with the buddy. Both are O(log n); the walk up stops where nothing changes. Per-order free-block counts, bytes in use and
// requested bytes are kept incrementally, so statistics are exact and O(orders).
//
// Not thread-safe by itself: the pool (buddy_pool.cpp) holds a mutex around every call.
// Checked by tests/pool/test_pool_model_check.cpp (a million operations against a reference model).
#ifndef DILATTN_BUDDY_ALLOCATOR_H
#define DILATTN_BUDDY_ALLOCATOR_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dilattn {

class BuddyAllocator {
 public:
  // Largest supported arena_bytes / min_block_bytes is 2^kMaxOrder: the metadata is 11 bytes
  // per minimum block (2 tree nodes, a requested size, a freed flag), so at most 185 MB.
  static constexpr int kMaxOrder = 24;

  enum class FreeResult { ok, double_free, interior, foreign };

  // arena_bytes and min_block_bytes are powers of two, min_block_bytes <= arena_bytes and
  // arena_bytes / min_block_bytes <= 2^kMaxOrder (the caller, buddy_pool.cpp, checks this).
  BuddyAllocator(uintptr_t base, size_t arena_bytes, size_t min_block_bytes);

  uintptr_t base() const { return base_; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t min_block_bytes() const { return min_block_; }
  bool contains(uintptr_t p) const { return p >= base_ && p - base_ < arena_bytes_; }

  // The block size a request of `bytes` gets (a power of two >= min_block), 0 if > arena.
  size_t block_bytes_for(size_t bytes) const;
  // The start of a free block of block_bytes_for(bytes) bytes, or 0 when no free block is
  // large enough (bytes must be in [1, arena_bytes]).
  uintptr_t allocate(size_t bytes);
  // Frees the live block starting at p, or says why p is not one. p must be contains()-ed.
  FreeResult free(uintptr_t p);
  // Every block free again, as after construction.
  void reset();

  // Statistics, exact at every moment.
  size_t bytes_in_use() const { return bytes_in_use_; }      // sum of live block sizes
  size_t bytes_requested() const { return bytes_requested_; }// sum of the sizes asked for
  size_t live_blocks() const { return live_blocks_; }
  size_t largest_free_block() const;
  int max_order() const { return max_order_; }
  // Free blocks (maximal: after coalescing) of min_block << order bytes.
  size_t free_blocks(int order) const { return free_count_[static_cast<size_t>(order)]; }

 private:
  static constexpr uint8_t kLive = 0x80;  // node flag: a live block starts and ends here
  int order_of_depth(int depth) const { return max_order_ - depth; }
  void recompute_parents(size_t node, int depth);

  uintptr_t base_;
  size_t arena_bytes_, min_block_;
  int max_order_;                       // arena = min_block << max_order
  std::vector<uint8_t> node_;           // per tree node: kLive | (largest free order + 1)
  std::vector<uint64_t> requested_;     // per leaf: bytes asked for by the live block starting
                                        // there, 0 where none starts
  std::vector<uint8_t> freed_;          // per leaf: a block starting here was freed since
                                          // (construction or reset): a second free is double
  std::vector<size_t> free_count_;      // per order: free blocks
  size_t bytes_in_use_ = 0, bytes_requested_ = 0, live_blocks_ = 0;
};

}  // namespace dilattn

#endif  // DILATTN_BUDDY_ALLOCATOR_H
