//! The library's buddy-allocator memory pool (lib/dilattn_pool.h): a safe owner of one pool,
//! its statistics, blocks that go back when dropped, and plans that take their workspace from
//! it (Attention::pool).
//!
//! Lifetimes: a Pool destroys the C pool on Drop, once nothing else holds it: every Attention
//! and Plan that uses the pool shares it, so a plan never outlives its workspace pool. A Block
//! borrows the pool, and Pool::reset needs `&mut` and an unshared pool, so no block handed out
//! before and no plan running on another thread can see a reset.
use std::ptr;
use std::sync::Arc;

use dilattn_sys as sys;

use crate::error::{check, Error, Result};

pub(crate) struct Handle(sys::dilattn_pool);

impl Handle {
    pub(crate) fn raw(&self) -> sys::dilattn_pool {
        self.0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { sys::dilattn_pool_destroy(self.0) };
    }
}

// The header: "Every call is ... thread-safe (one mutex per pool)".
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// What a full pool does (dilattn_pool_growth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// One arena; a request it cannot serve is DILATTN_ERROR_OUT_OF_MEMORY.
    Fixed,
    /// Adds an arena (of arena_bytes, or the request rounded up to a power of two) up to
    /// max_arenas of them; 0 = no limit.
    Grow { max_arenas: u32 },
}

/// A pool's statistics, exact at the moment of Pool::stats (dilattn_pool_stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub num_arenas: usize,
    pub arena_bytes_total: usize,
    /// The sizes of live blocks, after rounding up.
    pub bytes_in_use: usize,
    /// The sizes asked for by live blocks.
    pub bytes_requested: usize,
    pub internal_fragmentation: usize,
    /// The highest bytes_in_use since creation or the last reset.
    pub peak_bytes_in_use: usize,
    pub live_blocks: usize,
    pub largest_free_block: usize,
    /// free_blocks[k]: free blocks of 2^k bytes (after coalescing), over all arenas.
    pub free_blocks: [usize; 64],
}

/// A buddy-allocator pool over host memory or one CUDA device's memory.
pub struct Pool {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({:p})", self.handle.0)
    }
}

fn options(arena_bytes: usize, min_block_bytes: Option<usize>, growth: Growth)
    -> Result<sys::dilattn_pool_options> {
    let mut o: sys::dilattn_pool_options = unsafe { std::mem::zeroed() };
    check(unsafe { sys::dilattn_pool_options_init(&mut o, arena_bytes) })?;
    if let Some(m) = min_block_bytes {
        o.min_block_bytes = m;
    }
    if let Growth::Grow { max_arenas } = growth {
        o.growth = sys::DILATTN_POOL_GROW;
        o.max_arenas = i32::try_from(max_arenas).map_err(|_| {
            Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                       format!("max_arenas = {max_arenas}: at most {}", i32::MAX))
        })?;
    }
    Ok(o)
}

impl Pool {
    /// A host pool of arena_bytes (a power of two >= min_block_bytes; min_block_bytes None is
    /// the header's default, 256).
    pub fn host(arena_bytes: usize, min_block_bytes: Option<usize>, growth: Growth)
        -> Result<Pool> {
        let o = options(arena_bytes, min_block_bytes, growth)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::dilattn_pool_create_host(&mut raw, &o) })?;
        Ok(Pool { handle: Arc::new(Handle(raw)) })
    }

    /// A pool over memory of CUDA device `device`; DILATTN_ERROR_DEVICE_NOT_BUILT in a build
    /// without CUDA or without that device.
    pub fn cuda(device: i32, arena_bytes: usize, min_block_bytes: Option<usize>, growth: Growth)
        -> Result<Pool> {
        let o = options(arena_bytes, min_block_bytes, growth)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::dilattn_pool_create_cuda(&mut raw, device, &o) })?;
        Ok(Pool { handle: Arc::new(Handle(raw)) })
    }

    pub(crate) fn shared(&self) -> Arc<Handle> {
        Arc::clone(&self.handle)
    }

    pub fn stats(&self) -> Result<PoolStats> {
        let mut s: sys::dilattn_pool_stats = unsafe { std::mem::zeroed() };
        s.struct_size = std::mem::size_of::<sys::dilattn_pool_stats>();
        check(unsafe { sys::dilattn_pool_get_stats(self.handle.0, &mut s) })?;
        Ok(PoolStats {
            num_arenas: s.num_arenas,
            arena_bytes_total: s.arena_bytes_total,
            bytes_in_use: s.bytes_in_use,
            bytes_requested: s.bytes_requested,
            internal_fragmentation: s.internal_fragmentation,
            peak_bytes_in_use: s.peak_bytes_in_use,
            live_blocks: s.live_blocks,
            largest_free_block: s.largest_free_block,
            free_blocks: s.free_blocks,
        })
    }

    /// A block of at least `bytes`, 256-aligned, on the pool's device; it goes back to the
    /// pool when dropped.
    pub fn alloc(&self, bytes: usize) -> Result<Block<'_>> {
        let mut ptr = ptr::null_mut();
        check(unsafe { sys::dilattn_pool_alloc(self.handle.0, bytes, &mut ptr) })?;
        Ok(Block { pool: self, ptr: ptr.cast(), bytes })
    }

    /// Frees every block at once and zeroes the peak. Refused (INVALID_VALUE) while an
    /// Attention or Plan shares the pool, as a plan may be using it on another thread.
    pub fn reset(&mut self) -> Result<()> {
        let sharers = Arc::strong_count(&self.handle) - 1;
        if sharers != 0 {
            return Err(Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                                  format!("Pool::reset: {sharers} attention(s) or plan(s) still \
                                           use the pool; drop them first")));
        }
        check(unsafe { sys::dilattn_pool_reset(self.handle.0) })
    }
}

/// A block from Pool::alloc; returned to the pool on drop. The memory is on the pool's
/// device and is never read or written by the library.
#[derive(Debug)]
pub struct Block<'p> {
    pool: &'p Pool,
    ptr: *mut u8,
    bytes: usize,
}

impl Block<'_> {
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The bytes asked for (the block may be larger: a power of two).
    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        unsafe { sys::dilattn_pool_free(self.pool.handle.0, self.ptr.cast()) };
    }
}
