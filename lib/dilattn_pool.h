/*
 * dilattn_pool.h - the buddy-allocator memory pool for host and device workspaces.
 * Included by dilattn.h; compiles alone too (it includes dilattn.h).
 *
 * A pool manages one arena (a power of two bytes) or, with the growth policy, several. A request
 * is rounded up to a power of two (at least the minimum block, default 256 bytes) and served by
 * splitting a larger free block; a freed block coalesces with its buddy. Every call is
 * O(log(arena / min_block)) per arena and thread-safe (one mutex per pool). Every block is
 * aligned to at least 256 bytes: it starts at a multiple of its size from its arena's base,
 * which is 256-aligned (caller memory), page-aligned (host) or as cudaMalloc returns (CUDA).
 *
 * The pool never reads or writes the memory it hands out, so CUDA device arenas work the same.
 * Abuse gets its own status and leaves the pool unchanged: double free, a pointer the pool did
 * not hand out, an interior pointer, size 0, a size over the arena, use after destroy.
 *
 * Plans take a pool for their workspace with dilattn_desc_set_pool; without one, a workspace the
 * caller does not pass comes from the library's default pool of the plan's device (created on
 * first use, growing as needed) and goes back at the end of the call.
 */
#ifndef DILATTN_POOL_H
#define DILATTN_POOL_H

#include "dilattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The smallest minimum block and the alignment of every block. */
#define DILATTN_POOL_MIN_BLOCK 256
/* arena_bytes / min_block_bytes may be at most 2^DILATTN_POOL_MAX_ORDER (metadata bound:
 * 11 host bytes per minimum block). Raise min_block_bytes for larger arenas. */
#define DILATTN_POOL_MAX_ORDER 24

typedef enum dilattn_pool_growth {
  DILATTN_POOL_FIXED = 0, /* one arena; exhaustion returns DILATTN_ERROR_OUT_OF_MEMORY */
  DILATTN_POOL_GROW = 1   /* on exhaustion add an arena of arena_bytes, or of the request
                             rounded up to a power of two when it is larger (no TOO_LARGE) */
} dilattn_pool_growth;

/* Options of a host or CUDA pool. Fill with dilattn_pool_options_init, then change fields:
 * struct_size lets later versions add fields without breaking callers. */
typedef struct dilattn_pool_options {
  size_t struct_size;     /* sizeof(dilattn_pool_options), set by dilattn_pool_options_init */
  size_t arena_bytes;     /* a power of two >= min_block_bytes */
  size_t min_block_bytes; /* a power of two >= DILATTN_POOL_MIN_BLOCK; default 256 */
  int32_t growth;         /* a dilattn_pool_growth; default DILATTN_POOL_FIXED */
  int32_t max_arenas;     /* with DILATTN_POOL_GROW: at most this many arenas, 0 = no limit */
} dilattn_pool_options;

/* Statistics, exact at the moment of the call. Set struct_size = sizeof(dilattn_pool_stats)
 * before the call; the library writes at most struct_size bytes. */
typedef struct dilattn_pool_stats {
  size_t struct_size;
  size_t num_arenas;
  size_t arena_bytes_total;      /* bytes of all arenas */
  size_t bytes_in_use;           /* sum of the sizes of live blocks (after rounding up) */
  size_t bytes_requested;        /* sum of the sizes asked for by live blocks */
  size_t internal_fragmentation; /* bytes_in_use - bytes_requested */
  size_t peak_bytes_in_use;      /* highest bytes_in_use since create or reset */
  size_t live_blocks;
  size_t largest_free_block;     /* bytes; 0 when every arena is full */
  /* free_blocks[k]: free blocks (after coalescing) of 2^k bytes, over all arenas. */
  size_t free_blocks[64];
} dilattn_pool_stats;

/* Fills *options with the defaults for an arena of arena_bytes: min block 256, fixed. */
DILATTN_API dilattn_status dilattn_pool_options_init(dilattn_pool_options* options,
                                                     size_t arena_bytes);

/* A pool over host memory (aligned_alloc; a grown arena is allocated on demand).
 * INVALID_VALUE for a size that is not a power of two, too small or too many blocks;
 * OUT_OF_MEMORY when the arena cannot be allocated. */
DILATTN_API dilattn_status dilattn_pool_create_host(dilattn_pool* pool,
                                                    const dilattn_pool_options* options);

/* A pool over memory of CUDA device device_index (cudaMalloc). DEVICE_NOT_BUILT in a build
 * without CUDA or when there is no such device; CUDA when cudaMalloc fails otherwise. */
DILATTN_API dilattn_status dilattn_pool_create_cuda(dilattn_pool* pool, int32_t device_index,
                                                    const dilattn_pool_options* options);

/* A pool over the caller's memory [memory, memory + bytes) on the given device; the library
 * never frees it. memory must be 256-aligned and bytes a power of two >= min_block_bytes
 * (0 = 256), else INVALID_VALUE. No growth. The memory must outlive the pool. */
DILATTN_API dilattn_status dilattn_pool_create_from_memory(dilattn_pool* pool, void* memory,
                                                           size_t bytes, size_t min_block_bytes,
                                                           dilattn_device_type device,
                                                           int32_t device_index);

/* *ptr = a block of at least bytes bytes, aligned to at least 256 bytes. On error *ptr = NULL:
 * POOL_ZERO_SIZE (bytes == 0), POOL_TOO_LARGE (bytes over the arena, fixed pools),
 * OUT_OF_MEMORY (no free block large enough, and no arena may be added). */
DILATTN_API dilattn_status dilattn_pool_alloc(dilattn_pool pool, size_t bytes, void** ptr);

/* Returns a block to the pool. free(NULL) is a no-op success. POOL_DOUBLE_FREE (a block freed
 * already), POOL_INTERIOR_POINTER (inside a live block, not its start), POOL_FOREIGN_POINTER
 * (anything else the pool did not hand out). The pool is unchanged by a failed free. */
DILATTN_API dilattn_status dilattn_pool_free(dilattn_pool pool, void* ptr);

/* Statistics; INVALID_VALUE when stats->struct_size is smaller than the fields up to
 * largest_free_block. */
DILATTN_API dilattn_status dilattn_pool_get_stats(dilattn_pool pool, dilattn_pool_stats* stats);

/* Frees every block at once (each arena becomes one free block) and zeroes the peak. Arenas
 * added by growth stay. Pointers handed out before are invalid afterwards; freeing one then
 * returns POOL_FOREIGN_POINTER. */
DILATTN_API dilattn_status dilattn_pool_reset(dilattn_pool pool);

/* Destroys the pool and releases the memory it allocated (not caller memory). NULL is a no-op.
 * The pool must not be in use by a running forward/backward. A later call with the destroyed
 * handle returns POOL_DESTROYED (best effort: the library remembers the last 1024 destroyed
 * handles, and a new pool may reuse an address). */
DILATTN_API dilattn_status dilattn_pool_destroy(dilattn_pool pool);

#ifdef __cplusplus
}
#endif
#endif /* DILATTN_POOL_H */
