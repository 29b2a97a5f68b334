//! Block-sparse masks (SPEC 4): built from a pattern string, a builder or BSR arrays, and
//! validated by the library. Each builder is the C builder of the same name (lib/dilattn_mask.h
//! states its rule); sizes are in tokens, windows and strides in blocks.
use std::ffi::CString;
use std::ptr;
use std::sync::Arc;

use dilattn_sys as sys;

use crate::error::{check, Error, Result};

struct Handle(sys::dilattn_mask);

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { sys::dilattn_mask_destroy(self.0) };
    }
}

// A mask never changes after creation (the library holds it as shared const data), so it may
// be read and destroyed from any thread.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// A validated mask; cloning shares it.
#[derive(Clone)]
pub struct Mask {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bsr = self.bsr();
        write!(f, "Mask({}x{} tokens, blocks {}x{}, {} heads, nnz {})", bsr.seqlen_q,
               bsr.seqlen_k, bsr.block_q, bsr.block_k, bsr.num_heads, bsr.col_idx.len())
    }
}

/// A mask's arrays in the layout of dilattn_mask.h (int64 copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bsr {
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub block_q: usize,
    pub block_k: usize,
    pub num_heads: usize,
    pub row_ptr: Vec<i64>,
    pub col_idx: Vec<i64>,
    /// None for a mask shared by all heads.
    pub head_ptr: Option<Vec<i64>>,
}

impl Bsr {
    /// The sorted key blocks listed for (head, row block).
    pub fn row(&self, head: usize, row_block: usize) -> &[i64] {
        let rows = (self.seqlen_q + self.block_q - 1) / self.block_q;
        let rp = &self.row_ptr[head * (rows + 1)..(head + 1) * (rows + 1)];
        let base = self.head_ptr.as_ref().map_or(0, |hp| hp[head]) as usize;
        &self.col_idx[base + rp[row_block] as usize..base + rp[row_block + 1] as usize]
    }
}

fn build(make: impl FnOnce(*mut sys::dilattn_mask) -> sys::dilattn_status) -> Result<Mask> {
    let mut raw = ptr::null_mut();
    check(make(&mut raw))?;
    Ok(Mask { handle: Arc::new(Handle(raw)) })
}

fn i(x: usize) -> i64 {
    x as i64
}

impl Mask {
    pub(crate) fn raw(&self) -> sys::dilattn_mask {
        self.handle.0
    }

    /// The union a pattern string describes, e.g. "local:2+sink:1+strided:4+random:0.05:seed=7".
    pub fn pattern(pattern: &str, seqlen_q: usize, seqlen_k: usize, block_q: usize,
                   block_k: usize) -> Result<Mask> {
        let text = CString::new(pattern).map_err(|_| {
            Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                       format!("pattern {pattern:?} contains a NUL byte"))
        })?;
        build(|m| unsafe {
            sys::dilattn_mask_from_pattern(m, text.as_ptr(), i(seqlen_q), i(seqlen_k), i(block_q),
                                           i(block_k))
        })
    }

    pub fn local(seqlen_q: usize, seqlen_k: usize, block_q: usize, block_k: usize,
                 window_blocks: usize, causal: bool) -> Result<Mask> {
        build(|m| unsafe {
            sys::dilattn_mask_local(m, i(seqlen_q), i(seqlen_k), i(block_q), i(block_k),
                                    i(window_blocks), causal as i32)
        })
    }

    pub fn sink(seqlen_q: usize, seqlen_k: usize, block_q: usize, block_k: usize,
                global_blocks: usize, causal: bool) -> Result<Mask> {
        build(|m| unsafe {
            sys::dilattn_mask_sink(m, i(seqlen_q), i(seqlen_k), i(block_q), i(block_k),
                                   i(global_blocks), causal as i32)
        })
    }

    pub fn strided(seqlen_q: usize, seqlen_k: usize, block_q: usize, block_k: usize,
                   stride: usize, causal: bool) -> Result<Mask> {
        build(|m| unsafe {
            sys::dilattn_mask_strided(m, i(seqlen_q), i(seqlen_k), i(block_q), i(block_k),
                                      i(stride), causal as i32)
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn random(seqlen_q: usize, seqlen_k: usize, block_q: usize, block_k: usize,
                  num_heads: usize, density: f64, seed: u64, causal: bool) -> Result<Mask> {
        build(|m| unsafe {
            sys::dilattn_mask_random(m, i(seqlen_q), i(seqlen_k), i(block_q), i(block_k),
                                     i(num_heads), density, seed, causal as i32)
        })
    }

    pub fn union(masks: &[&Mask]) -> Result<Mask> {
        let raws: Vec<sys::dilattn_mask> = masks.iter().map(|m| m.raw()).collect();
        build(|m| unsafe { sys::dilattn_mask_union(m, raws.as_ptr(), raws.len() as i32) })
    }

    /// A mask from BSR arrays (copied and validated); head_ptr for one mask per head.
    pub fn from_bsr(seqlen_q: usize, seqlen_k: usize, block_q: usize, block_k: usize,
                    row_ptr: &[i64], col_idx: &[i64], head_ptr: Option<&[i64]>)
        -> Result<Mask> {
        let col_idx: Vec<i64> = col_idx.iter().copied().chain([0]).collect(); // non-null
        let view = sys::dilattn_bsr_view {
            struct_size: std::mem::size_of::<sys::dilattn_bsr_view>(),
            seqlen_q: i(seqlen_q),
            seqlen_k: i(seqlen_k),
            block_q: i(block_q),
            block_k: i(block_k),
            num_heads: head_ptr.map_or(1, |hp| hp.len() as i64 - 1),
            index_type: sys::DILATTN_INDEX_INT64,
            row_ptr: row_ptr.as_ptr() as *const _,
            col_idx: col_idx.as_ptr() as *const _,
            head_ptr: head_ptr.map_or(ptr::null(), |hp| hp.as_ptr() as *const _),
        };
        build(|m| unsafe { sys::dilattn_mask_create(m, &view) })
    }

    /// A copy of the mask's arrays.
    pub fn bsr(&self) -> Bsr {
        let mut view = unsafe { std::mem::zeroed::<sys::dilattn_bsr_view>() };
        let mut nnz = 0i64;
        check(unsafe { sys::dilattn_mask_get(self.raw(), &mut view, &mut nnz) })
            .expect("dilattn_mask_get on a valid mask");
        let heads = view.num_heads as usize;
        let rows = ((view.seqlen_q + view.block_q - 1) / view.block_q) as usize;
        let copy = |p: *const std::ffi::c_void, n: usize| -> Vec<i64> {
            if n == 0 {
                return Vec::new();
            }
            unsafe { std::slice::from_raw_parts(p as *const i64, n) }.to_vec()
        };
        Bsr {
            seqlen_q: view.seqlen_q as usize,
            seqlen_k: view.seqlen_k as usize,
            block_q: view.block_q as usize,
            block_k: view.block_k as usize,
            num_heads: heads,
            row_ptr: copy(view.row_ptr, heads * (rows + 1)),
            col_idx: copy(view.col_idx, nnz as usize),
            head_ptr: (heads > 1).then(|| copy(view.head_ptr, heads + 1)),
        }
    }
}
