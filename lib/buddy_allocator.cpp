// buddy_allocator.cpp - one buddy-allocator arena: allocate, free, reset, statistics.
//
// The tree and its invariant are described in buddy_allocator.h. In short: node_[i] & 0x7f is
// the order+1 of the largest free block under node i, a node whose whole block is free holds
// its own order+1, and a live block holds kLive (so it offers nothing to its ancestors). The
// nodes below a live block keep the "all free" values they had, which is exactly right again
// when the block is freed.
// Checked by tests/pool/test_pool_model_check.cpp, test_pool_abuse.cpp and test_pool_basics.cpp.
#include "buddy_allocator.h"

#include <algorithm>

namespace dilattn {

BuddyAllocator::BuddyAllocator(uintptr_t base, size_t arena_bytes, size_t min_block_bytes)
    : base_(base), arena_bytes_(arena_bytes), min_block_(min_block_bytes), max_order_(0) {
  while ((min_block_ << max_order_) < arena_bytes_) ++max_order_;
  const size_t leaves = size_t{1} << max_order_;
  node_.resize(2 * leaves);
  requested_.resize(leaves);
  freed_.resize(leaves);
  free_count_.resize(static_cast<size_t>(max_order_) + 1);
  reset();
}

void BuddyAllocator::reset() {
  // Every node's block is free: node i at depth d holds order (max_order - d) + 1.
  for (int depth = 0; depth <= max_order_; ++depth) {
    const size_t first = size_t{1} << depth;
    std::fill(node_.begin() + static_cast<std::ptrdiff_t>(first),
              node_.begin() + static_cast<std::ptrdiff_t>(2 * first),
              static_cast<uint8_t>(order_of_depth(depth) + 1));
  }
  std::fill(freed_.begin(), freed_.end(), uint8_t{0});
  std::fill(requested_.begin(), requested_.end(), uint64_t{0});
  std::fill(free_count_.begin(), free_count_.end(), size_t{0});
  free_count_[static_cast<size_t>(max_order_)] = 1;
  bytes_in_use_ = bytes_requested_ = live_blocks_ = 0;
}

size_t BuddyAllocator::block_bytes_for(size_t bytes) const {
  if (bytes > arena_bytes_) return 0;
  size_t b = min_block_;
  while (b < bytes) b <<= 1;
  return b;
}

size_t BuddyAllocator::largest_free_block() const {
  const int v = node_[1] & 0x7f;
  return v == 0 ? 0 : min_block_ << (v - 1);
}

// After node's value changed, its ancestors' "largest free" values follow: a parent is all
// free when both halves are, else it offers the larger of what its halves offer.
void BuddyAllocator::recompute_parents(size_t node, int depth) {
  while (node > 1) {
    node >>= 1;
    --depth;
    const int whole = order_of_depth(depth);  // each half all free holds `whole` (= its order+1)
    const int l = node_[2 * node] & 0x7f, r = node_[2 * node + 1] & 0x7f;
    const uint8_t value = static_cast<uint8_t>(l == whole && r == whole ? whole + 1 : std::max(l, r));
    if (node_[node] == value) return;  // unchanged here, so unchanged above
    node_[node] = value;
  }
}

uintptr_t BuddyAllocator::allocate(size_t bytes) {
  int k = 0;
  while ((min_block_ << k) < bytes) ++k;
  const int need = k + 1;
  if ((node_[1] & 0x7f) < need) return 0;
  // Walk down, preferring the left half, to a free node of order k. The first all-free node on
  // the way is the maximal free block this allocation splits.
  size_t node = 1;
  int depth = 0, split_from = -1;
  for (; order_of_depth(depth) > k; ++depth) {
    if (split_from < 0 && node_[node] == order_of_depth(depth) + 1)
      split_from = order_of_depth(depth);
    node = (node_[2 * node] & 0x7f) >= need ? 2 * node : 2 * node + 1;
  }
  if (split_from < 0) split_from = k;
  // Splitting a free block of order K down to k leaves one free buddy of each order k..K-1.
  --free_count_[static_cast<size_t>(split_from)];
  for (int j = k; j < split_from; ++j) ++free_count_[static_cast<size_t>(j)];
  node_[node] = kLive;
  recompute_parents(node, depth);

  const size_t unit = (node - (size_t{1} << depth)) << k;
  requested_[unit] = bytes;
  freed_[unit] = 0;
  bytes_in_use_ += min_block_ << k;
  bytes_requested_ += bytes;
  ++live_blocks_;
  return base_ + unit * min_block_;
}

BuddyAllocator::FreeResult BuddyAllocator::free(uintptr_t p) {
  const uintptr_t offset = p - base_;
  const size_t unit = offset / min_block_;
  const bool on_boundary = offset % min_block_ == 0;
  size_t node = 1;
  int depth = 0;
  if (on_boundary && requested_[unit] != 0) {
    // The common case: a live block starts here (requested_ is nonzero exactly there), and its
    // order follows from the size asked for.
    int k = 0;
    while ((min_block_ << k) < requested_[unit]) ++k;
    depth = max_order_ - k;
    node = ((size_t{1} << max_order_) + unit) >> k;
  } else {
    // Walk down the path to the leaf holding p; the first live node on it is the block p is
    // in (then p is interior), else p is in free memory.
    for (;;) {
      if (node_[node] & kLive) break;
      if (depth == max_order_) {
        // p lies in free memory: freed once already, or never handed out.
        return on_boundary && freed_[unit] ? FreeResult::double_free : FreeResult::foreign;
      }
      const int child_order = order_of_depth(depth) - 1;
      node = 2 * node + ((unit >> child_order) & 1);
      ++depth;
    }
  }
  int order = order_of_depth(depth);
  const size_t start = (node - (size_t{1} << depth)) << order;
  if (!on_boundary || start != unit) return FreeResult::interior;

  bytes_in_use_ -= min_block_ << order;
  bytes_requested_ -= requested_[start];
  requested_[start] = 0;
  freed_[start] = 1;
  --live_blocks_;
  // Coalesce: while the buddy is all free (hence a maximal free block), merge with it.
  node_[node] = static_cast<uint8_t>(order + 1);
  while (node > 1 && node_[node ^ 1] == order + 1) {
    --free_count_[static_cast<size_t>(order)];
    node >>= 1;
    --depth;
    ++order;
    node_[node] = static_cast<uint8_t>(order + 1);
  }
  ++free_count_[static_cast<size_t>(order)];
  recompute_parents(node, depth);
  return FreeResult::ok;
}

}  // namespace dilattn
