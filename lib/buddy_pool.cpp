// buddy_pool.cpp - the memory pool C ABI (dilattn_pool.h): pools over host memory, a
// CUDA device or caller memory; allocate, free, statistics, reset, destroy; the growth policy;
// the default pool per device used by plans (pool_internal.h).
//
// A pool is a list of arenas sorted by address, each with its BuddyAllocator (the bookkeeping,
// buddy_allocator.h). Allocation tries the arenas in order and, with DILATTN_POOL_GROW, adds one
// when none fits; free finds the arena by binary search on the address. One std::mutex per pool.
// Handles are checked against a registry of live pools (a shared lock held for the whole call,
// so destroy waits for calls in flight); a recently destroyed handle is recognised without
// reading its freed memory.
// Checked by tests/pool/ (model check, abuse, basics, threads, workspace) and fuzz_pool.cpp.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <unordered_set>
#include <vector>

#include "abi_enum.h"
#include "buddy_allocator.h"
#include "dilattn_config.h"
#include "errors.h"
#include "pool_internal.h"

#if DILATTN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using dilattn::BuddyAllocator;
using dilattn::set_error;

struct dilattn_pool_s {
  struct Arena {
    std::unique_ptr<BuddyAllocator> books;
    void* memory;  // what to release; null for caller memory
  };
  std::mutex mu;
  dilattn_device_type device = DILATTN_DEVICE_CPU;
  int32_t device_index = 0;
  bool caller_memory = false;
  int32_t growth = DILATTN_POOL_FIXED;
  int32_t max_arenas = 0;
  size_t arena_bytes = 0, min_block = DILATTN_POOL_MIN_BLOCK;
  std::vector<Arena> arenas;  // sorted by base address
  size_t in_use = 0, peak = 0;
};

namespace {

// ---------------------------------------------------------------- utils

bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

int log2_exact(size_t pow2) {
  int k = 0;
  while ((size_t{1} << k) < pow2) ++k;
  return k;
}

// The smallest power of two >= x, or 0 when it does not fit a size_t.
size_t round_up_pow2(size_t x) {
  size_t p = 1;
  while (p < x) {
    if (p > (~size_t{0} >> 1)) return 0;
    p <<= 1;
  }
  return p;
}

dilattn_status check_sizes(size_t arena_bytes, size_t min_block, const char* arena_name) {
  if (!is_pow2(min_block) || min_block < DILATTN_POOL_MIN_BLOCK)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'min_block_bytes' = %zu: must be a power of two >= %d", min_block,
                     DILATTN_POOL_MIN_BLOCK);
  if (!is_pow2(arena_bytes) || arena_bytes < min_block)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument '%s' = %zu: must be a power of two >= min_block_bytes (%zu)",
                     arena_name, arena_bytes, min_block);
  if (arena_bytes / min_block > (size_t{1} << DILATTN_POOL_MAX_ORDER))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument '%s' = %zu: more than 2^%d blocks of %zu bytes; raise "
                     "min_block_bytes",
                     arena_name, arena_bytes, DILATTN_POOL_MAX_ORDER, min_block);
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- the registry of live pools

struct Registry {
  std::shared_mutex mu;
  std::unordered_set<const dilattn_pool_s*> live;
  std::array<const void*, 1024> destroyed{};  // a ring of the last destroyed handles
  size_t next_destroyed = 0;
};

// Never destroyed: the default host pool is destroyed at exit and must still find it.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

dilattn_status not_live(dilattn_pool pool) {
  const Registry& r = registry();
  if (std::find(r.destroyed.begin(), r.destroyed.end(), static_cast<const void*>(pool)) !=
      r.destroyed.end())
    return set_error(DILATTN_ERROR_POOL_DESTROYED, "argument 'pool' = %p: destroyed already",
                     static_cast<void*>(pool));
  return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'pool' = %p is not a pool",
                   static_cast<void*>(pool));
}

// Runs f(pool) with the registry shared-locked (destroy waits) and the pool's mutex held.
template <class F>
dilattn_status with_pool(dilattn_pool pool, F&& f) {
  if (pool == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'pool' is NULL");
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> reg(r.mu);
  if (r.live.count(pool) == 0) return not_live(pool);
  std::lock_guard<std::mutex> lock(pool->mu);
  return f(*pool);
}

// ---------------------------------------------------------------- arena memory

dilattn_status allocate_arena(const dilattn_pool_s& pool, size_t bytes, void** memory) {
  *memory = nullptr;
  if (pool.device == DILATTN_DEVICE_CPU) {
    *memory = std::aligned_alloc(std::min<size_t>(bytes, 4096), bytes);
    if (*memory == nullptr)
      return set_error(DILATTN_ERROR_OUT_OF_MEMORY, "pool arena of %zu host bytes: aligned_alloc "
                       "failed", bytes);
    return DILATTN_SUCCESS;
  }
#if DILATTN_HAVE_CUDA
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(pool.device_index) != cudaSuccess) {
    cudaGetLastError();
    return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "argument 'device_index' = %d: no such CUDA "
                     "device", static_cast<int>(pool.device_index));
  }
  const cudaError_t e = cudaMalloc(memory, bytes);
  cudaSetDevice(previous);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *memory = nullptr;
    return set_error(e == cudaErrorMemoryAllocation ? DILATTN_ERROR_OUT_OF_MEMORY
                                                    : DILATTN_ERROR_CUDA,
                     "pool arena of %zu bytes on CUDA device %d: %s", bytes,
                     static_cast<int>(pool.device_index), cudaGetErrorString(e));
  }
  return DILATTN_SUCCESS;
#else
  return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "a CUDA pool: this build has no CUDA");
#endif
}

void release_arena(const dilattn_pool_s& pool, void* memory) {
  if (memory == nullptr) return;
  if (pool.device == DILATTN_DEVICE_CPU) {
    std::free(memory);
    return;
  }
#if DILATTN_HAVE_CUDA
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(pool.device_index) == cudaSuccess) {
    cudaFree(memory);
    cudaSetDevice(previous);
  }
  cudaGetLastError();
#endif
}

// Adds an arena of `bytes` (checked by the caller) over `memory`, keeping the list sorted.
void insert_arena(dilattn_pool_s& pool, void* memory, size_t bytes, size_t min_block,
                  bool owned) {
  dilattn_pool_s::Arena a{
      std::make_unique<BuddyAllocator>(reinterpret_cast<uintptr_t>(memory), bytes, min_block),
      owned ? memory : nullptr};
  auto at = std::upper_bound(pool.arenas.begin(), pool.arenas.end(), a.books->base(),
                             [](uintptr_t base, const dilattn_pool_s::Arena& x) {
                               return base < x.books->base();
                             });
  pool.arenas.insert(at, std::move(a));
}

// The arena holding address p, or null.
BuddyAllocator* arena_of(dilattn_pool_s& pool, uintptr_t p) {
  auto it = std::upper_bound(pool.arenas.begin(), pool.arenas.end(), p,
                             [](uintptr_t x, const dilattn_pool_s::Arena& a) {
                               return x < a.books->base();
                             });
  if (it == pool.arenas.begin()) return nullptr;
  --it;
  return it->books->contains(p) ? it->books.get() : nullptr;
}

// ---------------------------------------------------------------- allocate / free

dilattn_status allocate_locked(dilattn_pool_s& pool, size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0)
    return set_error(DILATTN_ERROR_POOL_ZERO_SIZE, "argument 'bytes' = 0: nothing to allocate");
  const bool grow = pool.growth == DILATTN_POOL_GROW;
  if (bytes > pool.arena_bytes && !grow)
    return set_error(DILATTN_ERROR_POOL_TOO_LARGE,
                     "argument 'bytes' = %zu: larger than the pool's arena of %zu bytes", bytes,
                     pool.arena_bytes);
  for (dilattn_pool_s::Arena& a : pool.arenas) {
    if (bytes > a.books->arena_bytes()) continue;
    const uintptr_t p = a.books->allocate(bytes);
    if (p != 0) {
      pool.in_use += a.books->block_bytes_for(bytes);
      pool.peak = std::max(pool.peak, pool.in_use);
      *ptr = reinterpret_cast<void*>(p);
      return DILATTN_SUCCESS;
    }
  }
  if (!grow || (pool.max_arenas > 0 && pool.arenas.size() >= static_cast<size_t>(pool.max_arenas)))
    return set_error(DILATTN_ERROR_OUT_OF_MEMORY,
                     "argument 'bytes' = %zu: no free block large enough in %zu arena(s)", bytes,
                     pool.arenas.size());
  // Growth: one more arena, large enough for this request.
  if (round_up_pow2(bytes) == 0)
    return set_error(DILATTN_ERROR_POOL_TOO_LARGE, "argument 'bytes' = %zu: too large", bytes);
  const size_t arena = std::max(pool.arena_bytes, round_up_pow2(bytes));
  const size_t min_block =
      std::max(pool.min_block, arena >> DILATTN_POOL_MAX_ORDER);  // bound the metadata
  void* memory = nullptr;
  dilattn_status s = allocate_arena(pool, arena, &memory);
  if (s != DILATTN_SUCCESS) return s;
  insert_arena(pool, memory, arena, min_block, true);
  BuddyAllocator* books = arena_of(pool, reinterpret_cast<uintptr_t>(memory));
  const uintptr_t p = books->allocate(bytes);
  pool.in_use += books->block_bytes_for(bytes);
  pool.peak = std::max(pool.peak, pool.in_use);
  *ptr = reinterpret_cast<void*>(p);
  return DILATTN_SUCCESS;
}

dilattn_status free_locked(dilattn_pool_s& pool, void* ptr) {
  if (ptr == nullptr) return DILATTN_SUCCESS;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  BuddyAllocator* books = arena_of(pool, p);
  if (books == nullptr)
    return set_error(DILATTN_ERROR_POOL_FOREIGN_POINTER,
                     "argument 'ptr' = %p: not in any arena of this pool", ptr);
  // block size before the free, for the pool's in_use (free leaves books unchanged on error)
  const size_t before = books->bytes_in_use();
  switch (books->free(p)) {
    case BuddyAllocator::FreeResult::ok: pool.in_use -= before - books->bytes_in_use(); break;
    case BuddyAllocator::FreeResult::double_free:
      return set_error(DILATTN_ERROR_POOL_DOUBLE_FREE, "argument 'ptr' = %p: freed already", ptr);
    case BuddyAllocator::FreeResult::interior:
      return set_error(DILATTN_ERROR_POOL_INTERIOR_POINTER,
                       "argument 'ptr' = %p: inside a live block, not its start", ptr);
    case BuddyAllocator::FreeResult::foreign:
      return set_error(DILATTN_ERROR_POOL_FOREIGN_POINTER,
                       "argument 'ptr' = %p: never handed out by this pool", ptr);
  }
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- create / destroy

dilattn_status register_pool(std::unique_ptr<dilattn_pool_s> made, dilattn_pool* pool) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> reg(r.mu);
  dilattn_pool_s* p = made.release();
  r.live.insert(p);
  // A new pool at a recently destroyed address is live again.
  std::replace(r.destroyed.begin(), r.destroyed.end(), static_cast<const void*>(p),
               static_cast<const void*>(nullptr));
  *pool = p;
  return DILATTN_SUCCESS;
}

dilattn_status create_owned(dilattn_pool* pool, dilattn_device_type device, int32_t device_index,
                            const dilattn_pool_options* options) {
  if (pool == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'pool' is NULL");
  *pool = nullptr;
  if (options == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'options' is NULL");
  if (options->struct_size < sizeof(dilattn_pool_options))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "options->struct_size = %zu: use dilattn_pool_options_init",
                     options->struct_size);
  dilattn_status s = check_sizes(options->arena_bytes, options->min_block_bytes,
                                 "options->arena_bytes");
  if (s != DILATTN_SUCCESS) return s;
  if (options->growth != DILATTN_POOL_FIXED && options->growth != DILATTN_POOL_GROW)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "options->growth = %d: not a dilattn_pool_growth",
                     static_cast<int>(options->growth));
  if (options->max_arenas < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "options->max_arenas = %d: must be >= 0",
                     static_cast<int>(options->max_arenas));
  auto made = std::make_unique<dilattn_pool_s>();
  made->device = device;
  made->device_index = device_index;
  made->growth = options->growth;
  made->max_arenas = options->max_arenas;
  made->arena_bytes = options->arena_bytes;
  made->min_block = options->min_block_bytes;
  void* memory = nullptr;
  if ((s = allocate_arena(*made, made->arena_bytes, &memory)) != DILATTN_SUCCESS) return s;
  insert_arena(*made, memory, made->arena_bytes, made->min_block, true);
  return register_pool(std::move(made), pool);
}

}  // namespace

// ---------------------------------------------------------------- C ABI

extern "C" dilattn_status dilattn_pool_options_init(dilattn_pool_options* options,
                                                    size_t arena_bytes) {
  DILATTN_ABI_BEGIN
  if (options == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'options' is NULL");
  options->struct_size = sizeof(dilattn_pool_options);
  options->arena_bytes = arena_bytes;
  options->min_block_bytes = DILATTN_POOL_MIN_BLOCK;
  options->growth = DILATTN_POOL_FIXED;
  options->max_arenas = 0;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_create_host(dilattn_pool* pool,
                                                   const dilattn_pool_options* options) {
  DILATTN_ABI_BEGIN
  return create_owned(pool, DILATTN_DEVICE_CPU, 0, options);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_create_cuda(dilattn_pool* pool, int32_t device_index,
                                                   const dilattn_pool_options* options) {
  DILATTN_ABI_BEGIN
#if DILATTN_HAVE_CUDA
  if (pool != nullptr) *pool = nullptr;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device_index < 0 || device_index >= count)
    return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT,
                     "argument 'device_index' = %d: this machine has %d CUDA device(s)",
                     static_cast<int>(device_index), count);
  return create_owned(pool, DILATTN_DEVICE_CUDA, device_index, options);
#else
  if (pool != nullptr) *pool = nullptr;
  (void)options;
  return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT,
                   "dilattn_pool_create_cuda(device_index = %d): this build has no CUDA",
                   static_cast<int>(device_index));
#endif
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_create_from_memory(dilattn_pool* pool, void* memory,
                                                          size_t bytes, size_t min_block_bytes,
                                                          dilattn_device_type device,
                                                          int32_t device_index) {
  DILATTN_ABI_BEGIN
  if (pool == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'pool' is NULL");
  *pool = nullptr;
  if (memory == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'memory' is NULL");
  if (reinterpret_cast<uintptr_t>(memory) % DILATTN_POOL_MIN_BLOCK != 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'memory' = %p: not %d-byte aligned",
                     memory, DILATTN_POOL_MIN_BLOCK);
  const int32_t device_value = dilattn::enum_value(device);  // any int may arrive from C
  if (device_value != DILATTN_DEVICE_CPU && device_value != DILATTN_DEVICE_CUDA)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'device' = %d: not a device type",
                     static_cast<int>(device_value));
  if (min_block_bytes == 0) min_block_bytes = DILATTN_POOL_MIN_BLOCK;
  dilattn_status s = check_sizes(bytes, min_block_bytes, "bytes");
  if (s != DILATTN_SUCCESS) return s;
  if (reinterpret_cast<uintptr_t>(memory) > ~uintptr_t{0} - bytes)
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "memory %p + %zu bytes wraps around", memory,
                     bytes);
  auto made = std::make_unique<dilattn_pool_s>();
  made->device = device;
  made->device_index = device_index;
  made->caller_memory = true;
  made->arena_bytes = bytes;
  made->min_block = min_block_bytes;
  insert_arena(*made, memory, bytes, min_block_bytes, false);
  return register_pool(std::move(made), pool);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_alloc(dilattn_pool pool, size_t bytes, void** ptr) {
  DILATTN_ABI_BEGIN
  return dilattn::pool_allocate(pool, bytes, ptr);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_free(dilattn_pool pool, void* ptr) {
  DILATTN_ABI_BEGIN
  return with_pool(pool, [&](dilattn_pool_s& p) { return free_locked(p, ptr); });
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_get_stats(dilattn_pool pool, dilattn_pool_stats* stats) {
  DILATTN_ABI_BEGIN
  if (stats == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'stats' is NULL");
  const size_t minimum = offsetof(dilattn_pool_stats, free_blocks);
  if (stats->struct_size < minimum)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "stats->struct_size = %zu: at least %zu (set it to sizeof(dilattn_pool_stats))",
                     stats->struct_size, minimum);
  return with_pool(pool, [&](dilattn_pool_s& p) {
    dilattn_pool_stats s{};
    s.struct_size = std::min(stats->struct_size, sizeof(dilattn_pool_stats));
    s.num_arenas = p.arenas.size();
    for (const dilattn_pool_s::Arena& a : p.arenas) {
      const BuddyAllocator& b = *a.books;
      s.arena_bytes_total += b.arena_bytes();
      s.bytes_in_use += b.bytes_in_use();
      s.bytes_requested += b.bytes_requested();
      s.live_blocks += b.live_blocks();
      s.largest_free_block = std::max(s.largest_free_block, b.largest_free_block());
      const int base_log2 = log2_exact(b.min_block_bytes());
      for (int k = 0; k <= b.max_order(); ++k)
        s.free_blocks[base_log2 + k] += b.free_blocks(k);
    }
    s.internal_fragmentation = s.bytes_in_use - s.bytes_requested;
    s.peak_bytes_in_use = p.peak;
    std::memcpy(stats, &s, s.struct_size);
    return DILATTN_SUCCESS;
  });
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_reset(dilattn_pool pool) {
  DILATTN_ABI_BEGIN
  return with_pool(pool, [](dilattn_pool_s& p) {
    for (dilattn_pool_s::Arena& a : p.arenas) a.books->reset();
    p.in_use = p.peak = 0;
    return DILATTN_SUCCESS;
  });
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_pool_destroy(dilattn_pool pool) {
  DILATTN_ABI_BEGIN
  if (pool == nullptr) return DILATTN_SUCCESS;  // like free(NULL)
  Registry& r = registry();
  {
    // The exclusive lock waits for every call in flight on any pool.
    std::unique_lock<std::shared_mutex> reg(r.mu);
    if (r.live.erase(pool) == 0) return not_live(pool);
    r.destroyed[r.next_destroyed] = pool;
    r.next_destroyed = (r.next_destroyed + 1) % r.destroyed.size();
  }
  for (dilattn_pool_s::Arena& a : pool->arenas) release_arena(*pool, a.memory);
  delete pool;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

// ---------------------------------------------------------------- for dispatch.cpp

namespace dilattn {

dilattn_status pool_allocate(dilattn_pool pool, size_t bytes, void** ptr) {
  if (ptr == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'ptr' is NULL");
  *ptr = nullptr;
  return with_pool(pool, [&](dilattn_pool_s& p) { return allocate_locked(p, bytes, ptr); });
}

void pool_release(dilattn_pool pool, void* ptr) {
  if (pool == nullptr || ptr == nullptr) return;
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> reg(r.mu);
  if (r.live.count(pool) == 0) return;
  std::lock_guard<std::mutex> lock(pool->mu);
  BuddyAllocator* books = arena_of(*pool, reinterpret_cast<uintptr_t>(ptr));
  if (books == nullptr) return;
  const size_t before = books->bytes_in_use();
  if (books->free(reinterpret_cast<uintptr_t>(ptr)) == BuddyAllocator::FreeResult::ok)
    pool->in_use -= before - books->bytes_in_use();
}

dilattn_status pool_device(dilattn_pool pool, dilattn_device_type* device, int32_t* device_index) {
  return with_pool(pool, [&](dilattn_pool_s& p) {
    *device = p.device;
    *device_index = p.device_index;
    return DILATTN_SUCCESS;
  });
}

namespace {
struct DefaultPools {
  std::mutex mu;
  dilattn_pool host = nullptr;
  std::map<int32_t, dilattn_pool> cuda;
  ~DefaultPools() { dilattn_pool_destroy(host); }
};
DefaultPools& default_pools() {
  static DefaultPools pools;
  return pools;
}
}  // namespace

dilattn_status default_pool(dilattn_device_type device, int32_t device_index, dilattn_pool* pool) {
  DefaultPools& d = default_pools();
  std::lock_guard<std::mutex> lock(d.mu);
  dilattn_pool* slot = device == DILATTN_DEVICE_CPU ? &d.host : &d.cuda[device_index];
  if (*slot == nullptr) {
    dilattn_pool_options o{};
    o.struct_size = sizeof o;
    o.arena_bytes = device == DILATTN_DEVICE_CPU ? kDefaultHostArenaBytes : kDefaultCudaArenaBytes;
    o.min_block_bytes = DILATTN_POOL_MIN_BLOCK;
    o.growth = DILATTN_POOL_GROW;
    o.max_arenas = 0;
    dilattn_pool made = nullptr;
    const dilattn_status s = device == DILATTN_DEVICE_CPU
                                 ? create_owned(&made, DILATTN_DEVICE_CPU, 0, &o)
                                 : dilattn_pool_create_cuda(&made, device_index, &o);
    if (s != DILATTN_SUCCESS) return s;
    *slot = made;
  }
  *pool = *slot;
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
