// pool_internal.h - what dispatch.cpp needs from the pool (buddy_pool.cpp) beyond the C ABI:
// allocation that reports through the last error without clearing it first, a release that
// never touches the last error (it runs after a backend may have set one), and the default pool
// of a device. Checked by tests/pool/test_pool_workspace.cpp.
#ifndef DILATTN_POOL_INTERNAL_H
#define DILATTN_POOL_INTERNAL_H

#include <cstddef>
#include <cstdint>

#include "dilattn.h"

namespace dilattn {

// dilattn_pool_alloc without clearing the last error (set only on failure).
dilattn_status pool_allocate(dilattn_pool pool, size_t bytes, void** ptr);
// dilattn_pool_free of a block pool_allocate returned; leaves the last error alone.
void pool_release(dilattn_pool pool, void* ptr);
// The device of a live pool (sets the last error when pool is not one).
dilattn_status pool_device(dilattn_pool pool, dilattn_device_type* device, int32_t* device_index);
// The library's pool for a device, created on first use (thread-safe) with the growth policy,
// so a workspace larger than its arena gets a new arena instead of a failure. The host pool is
// destroyed at exit; CUDA pools are left to the driver (the runtime may be gone by then).
dilattn_status default_pool(dilattn_device_type device, int32_t device_index, dilattn_pool* pool);

// Gives back to their pools the call workspaces whose stream work is done (dispatch.cpp's
// stream-ordered release); every call does this first, and dilattn_plan_destroy too, so that a
// program whose last call ran on a stream leaves no block behind once it has synchronised.
void release_finished_workspaces();

// Arena sizes of the default pools.
constexpr size_t kDefaultHostArenaBytes = size_t{16} << 20;
constexpr size_t kDefaultCudaArenaBytes = size_t{256} << 20;
// Every workspace a backend receives starts on this boundary (SPEC 14.6; dispatch.cpp).
constexpr size_t kWorkspaceAlignment = 256;

}  // namespace dilattn

#endif  // DILATTN_POOL_INTERNAL_H
