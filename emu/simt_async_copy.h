// simt_async_copy.h - asynchronous 16-byte and 4-byte global -> shared copies (PTX
// cp.async.cg / .ca .shared.global with cp.async.commit_group and cp.async.wait_group n) for the
// emulator.
//
// Part of the SIMT emulator (emu/README.md). cuda/async_copy.cuh calls these where nvcc emits
// the PTX. What the GPU promises is only that a copy is complete after the wait_group that
// covers its group; so the emulator makes the data visible exactly then and never earlier:
//   issue   checks both addresses are aligned to the copy's size (16 or 4 bytes) and the
//           destination lies in the block's dynamic shared memory (else the launch fails),
//           reads the source bytes, and fills the destination with 0xFF (NaN as f32, f16 and
//           bf16; -1 as int32): a read before the wait sees poison;
//   commit  closes the thread's open copies into a group (copies never committed are never
//           completed by a wait, as in PTX);
//   wait n  writes the copies of every committed group but the newest n.
// A thread that returns with copies it never waited for fails the launch. Copies are per
// thread, as in PTX: another thread sees the data after the issuing thread's wait and a
// __syncthreads (a __syncthreads alone completes nothing).
// Checked by tests/emu/test_emu_async_copy.cpp (read before the wait, a missing commit, misaligned
// addresses, and the positive double-buffered copy).
#ifndef DILATTN_SIMT_ASYNC_COPY_H
#define DILATTN_SIMT_ASYNC_COPY_H

#include <cstdint>
#include <cstring>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

// Fails the launch with `what` from the calling thread. The message is built in a function
// that returns, and fail_thread gets the block's own error string: the thread never returns
// from fail_thread, so a temporary std::string made there would leak.
[[gnu::noinline]] inline void set_copy_error(BlockRun& b, const Fiber& f, const char* what) {
  if (b.error.empty()) b.error = thread_name(b, f.linear) + ": " + what;
}
[[noreturn]] inline void fail_copy(BlockRun& b, const Fiber& f, const char* what) {
  set_copy_error(b, f, what);
  fail_thread(b.error);
}

}  // namespace detail

// One copy of `size` bytes (16 or 4), as PTX cp.async of that size.
inline void cp_async_bytes(void* dst_shared, const void* src_global, int size) {
  detail::Fiber& f = detail::current_fiber();
  detail::BlockRun& b = *f.block;
  unsigned char* dst = static_cast<unsigned char*>(dst_shared);
  const uintptr_t align = static_cast<uintptr_t>(size);
  char buf[192];
  if (reinterpret_cast<uintptr_t>(dst) % align != 0 ||
      reinterpret_cast<uintptr_t>(src_global) % align != 0) {
    std::snprintf(buf, sizeof buf,
                  "cp.async: %d-byte copy from %p to %p: both addresses must be %d-byte aligned",
                  size, src_global, dst_shared, size);
    detail::fail_copy(b, f, buf);
  }
  if (dst < b.shared || dst + size > b.shared + b.shared_bytes) {
    std::snprintf(buf, sizeof buf,
                  "cp.async: destination %p is not in the block's dynamic shared memory",
                  dst_shared);
    detail::fail_copy(b, f, buf);
  }
  detail::PendingCopy c;
  c.dst = dst;
  c.size = size;
  std::memcpy(c.bytes, src_global, static_cast<size_t>(size));
  std::memset(dst, 0xFF, static_cast<size_t>(size));
  f.copies.push_back(c);
}

inline void cp_async_16(void* dst_shared, const void* src_global) {
  cp_async_bytes(dst_shared, src_global, 16);
}
inline void cp_async_4(void* dst_shared, const void* src_global) {
  cp_async_bytes(dst_shared, src_global, 4);
}

inline void cp_async_commit() {
  detail::Fiber& f = detail::current_fiber();
  for (detail::PendingCopy& c : f.copies)
    if (c.group < 0) c.group = f.committed_groups;
  ++f.committed_groups;
}

// Completes every committed group except the newest `pending` ones.
inline void cp_async_wait(int pending) {
  detail::Fiber& f = detail::current_fiber();
  const int complete_below = f.committed_groups - pending;
  size_t kept = 0;
  for (size_t i = 0; i < f.copies.size(); ++i) {
    const detail::PendingCopy& c = f.copies[i];
    if (c.group >= 0 && c.group < complete_below)
      std::memcpy(c.dst, c.bytes, static_cast<size_t>(c.size));
    else
      f.copies[kept++] = c;
  }
  f.copies.resize(kept);
}

}  // namespace simt

#endif  // DILATTN_SIMT_ASYNC_COPY_H
