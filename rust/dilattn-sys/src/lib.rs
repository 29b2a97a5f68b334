//! Raw bindings of the dilattn C ABI: every function, struct and enum value of lib/dilattn.h,
//! lib/dilattn_mask.h, lib/dilattn_pool.h and lib/dilattn_ring.h, written by hand with the header's names (the
//! pool header's two #define limits are not enum values and are left out). tests/header.rs
//! compares this file with the headers: function names and parameter counts, enum values, and
//! struct sizes as the library itself reports them.
//!
//! Everything here is `unsafe` to call; the `dilattn` crate is the safe API.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

// ---------------------------------------------------------------- opaque handles
#[repr(C)]
pub struct dilattn_desc_s {
    _private: [u8; 0],
}
#[repr(C)]
pub struct dilattn_plan_s {
    _private: [u8; 0],
}
#[repr(C)]
pub struct dilattn_mask_s {
    _private: [u8; 0],
}
#[repr(C)]
pub struct dilattn_pool_s {
    _private: [u8; 0],
}
pub type dilattn_desc = *mut dilattn_desc_s;
pub type dilattn_plan = *mut dilattn_plan_s;
pub type dilattn_mask = *mut dilattn_mask_s;
pub type dilattn_pool = *mut dilattn_pool_s;
#[repr(C)]
pub struct dilattn_comm_s {
    _private: [u8; 0],
}
/// One rank's end of a ring communicator (dilattn_ring.h).
pub type dilattn_comm = *mut dilattn_comm_s;

// ---------------------------------------------------------------- enums (C ints)
pub type dilattn_status = c_int;
pub const DILATTN_SUCCESS: dilattn_status = 0;
pub const DILATTN_ERROR_NULL_POINTER: dilattn_status = 1;
pub const DILATTN_ERROR_SHAPE_MISMATCH: dilattn_status = 2;
pub const DILATTN_ERROR_DTYPE_MISMATCH: dilattn_status = 3;
pub const DILATTN_ERROR_HEADS_NOT_DIVISIBLE: dilattn_status = 4;
pub const DILATTN_ERROR_BAD_SEGMENT: dilattn_status = 5;
pub const DILATTN_ERROR_BAD_DILATION: dilattn_status = 6;
pub const DILATTN_ERROR_NO_BRANCHES: dilattn_status = 7;
pub const DILATTN_ERROR_GROUPS_TOO_FEW_HEADS: dilattn_status = 8;
pub const DILATTN_ERROR_BAD_SCALE: dilattn_status = 9;
pub const DILATTN_ERROR_SIZE_OVERFLOW: dilattn_status = 10;
pub const DILATTN_ERROR_BAD_MASK: dilattn_status = 11;
pub const DILATTN_ERROR_DEVICE_NOT_BUILT: dilattn_status = 12;
pub const DILATTN_ERROR_DEVICE_MISMATCH: dilattn_status = 13;
pub const DILATTN_ERROR_INVALID_VALUE: dilattn_status = 14;
pub const DILATTN_ERROR_SEQLEN_MISMATCH: dilattn_status = 15;
pub const DILATTN_ERROR_UNSUPPORTED: dilattn_status = 16;
pub const DILATTN_ERROR_BACKEND_NOT_BUILT: dilattn_status = 17;
pub const DILATTN_ERROR_OUT_OF_MEMORY: dilattn_status = 18;
pub const DILATTN_ERROR_WORKSPACE_TOO_SMALL: dilattn_status = 19;
pub const DILATTN_ERROR_CUDA: dilattn_status = 20;
pub const DILATTN_ERROR_INTERNAL: dilattn_status = 21;
pub const DILATTN_ERROR_POOL_DOUBLE_FREE: dilattn_status = 22;
pub const DILATTN_ERROR_POOL_FOREIGN_POINTER: dilattn_status = 23;
pub const DILATTN_ERROR_POOL_INTERIOR_POINTER: dilattn_status = 24;
pub const DILATTN_ERROR_POOL_ZERO_SIZE: dilattn_status = 25;
pub const DILATTN_ERROR_POOL_TOO_LARGE: dilattn_status = 26;
pub const DILATTN_ERROR_POOL_DESTROYED: dilattn_status = 27;
pub const DILATTN_ERROR_COMM: dilattn_status = 28;
pub const DILATTN_ERROR_CANCELLED: dilattn_status = 29;
pub const DILATTN_STATUS_COUNT_: dilattn_status = 30;

pub type dilattn_dtype = c_int;
pub const DILATTN_F32: dilattn_dtype = 0;
pub const DILATTN_F64: dilattn_dtype = 1;
pub const DILATTN_F16: dilattn_dtype = 2;
pub const DILATTN_BF16: dilattn_dtype = 3;

pub type dilattn_device_type = c_int;
pub const DILATTN_DEVICE_CPU: dilattn_device_type = 0;
pub const DILATTN_DEVICE_CUDA: dilattn_device_type = 1;

pub type dilattn_head_mode = c_int;
pub const DILATTN_HEADS_MOD: dilattn_head_mode = 0;
pub const DILATTN_HEADS_BLOCK: dilattn_head_mode = 1;
pub const DILATTN_HEADS_GROUPS: dilattn_head_mode = 2;

pub type dilattn_kind = c_int;
pub const DILATTN_KIND_DENSE: dilattn_kind = 0;
pub const DILATTN_KIND_DILATED: dilattn_kind = 1;
pub const DILATTN_KIND_BLOCK_SPARSE: dilattn_kind = 2;

pub type dilattn_backend = c_int;
pub const DILATTN_BACKEND_AUTO: dilattn_backend = 0;
pub const DILATTN_BACKEND_REF: dilattn_backend = 1;
pub const DILATTN_BACKEND_CPU: dilattn_backend = 2;
pub const DILATTN_BACKEND_CUDA: dilattn_backend = 3;
pub const DILATTN_BACKEND_EMU: dilattn_backend = 4;

pub type dilattn_index_type = c_int;
pub const DILATTN_INDEX_INT32: dilattn_index_type = 0;
pub const DILATTN_INDEX_INT64: dilattn_index_type = 1;

/// dilattn_pool.h; stored in dilattn_pool_options::growth (an int32_t).
pub type dilattn_pool_growth = i32;
pub const DILATTN_POOL_FIXED: dilattn_pool_growth = 0;
pub const DILATTN_POOL_GROW: dilattn_pool_growth = 1;
pub type dilattn_ring_split = c_int;
pub const DILATTN_RING_CONTIGUOUS: dilattn_ring_split = 0;
pub const DILATTN_RING_ZIGZAG: dilattn_ring_split = 1;

// ---------------------------------------------------------------- structs
/// A view of caller memory (SPEC 1). struct_size = size_of::<dilattn_tensor>().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_tensor {
    pub struct_size: usize,
    pub data: *mut c_void,
    pub dtype: dilattn_dtype,
    pub device: dilattn_device_type,
    pub device_index: i32,
    pub shape: [i64; 4],
    pub strides: [i64; 4],
}

/// The sizes of a problem. struct_size = size_of::<dilattn_shape>().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_shape {
    pub struct_size: usize,
    pub batch: i64,
    pub seqlen_q: i64,
    pub seqlen_k: i64,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub head_dim: i64,
}

/// A progress callback (SPEC 14.11): (user, done, total), a non-zero return cancels the call.
pub type dilattn_progress_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, done: i64, total: i64) -> c_int>;

/// Per-call options of dilattn_forward_ex / dilattn_backward_ex (SPEC 11.2): the dropout seed
/// and offset (below 2^32); for a plan with sinks (SPEC 10.3) the heads_q sink logits and where
/// the backward writes their gradient (null: not wanted); a progress callback and its user
/// pointer (SPEC 14.11; None: none). struct_size = size_of::<dilattn_call_options>()
/// (dilattn_call_options_make sets it and nulls the pointers).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_call_options {
    pub struct_size: usize,
    pub dropout_seed: u64,
    pub dropout_offset: u64,
    pub sinks: *const f64,
    pub d_sinks: *mut f64,
    pub progress: dilattn_progress_fn,
    pub progress_user: *mut c_void,
}

/// A caller's BSR arrays (dilattn_mask.h). struct_size = size_of::<dilattn_bsr_view>().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_bsr_view {
    pub struct_size: usize,
    pub seqlen_q: i64,
    pub seqlen_k: i64,
    pub block_q: i64,
    pub block_k: i64,
    pub num_heads: i64,
    pub index_type: dilattn_index_type,
    pub row_ptr: *const c_void,
    pub col_idx: *const c_void,
    pub head_ptr: *const c_void,
}

/// Options of a pool (dilattn_pool.h); dilattn_pool_options_init fills them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_pool_options {
    pub struct_size: usize,
    pub arena_bytes: usize,
    pub min_block_bytes: usize,
    pub growth: i32,
    pub max_arenas: i32,
}

/// A pool's statistics (dilattn_pool.h). struct_size = size_of::<dilattn_pool_stats>().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dilattn_pool_stats {
    pub struct_size: usize,
    pub num_arenas: usize,
    pub arena_bytes_total: usize,
    pub bytes_in_use: usize,
    pub bytes_requested: usize,
    pub internal_fragmentation: usize,
    pub peak_bytes_in_use: usize,
    pub live_blocks: usize,
    pub largest_free_block: usize,
    pub free_blocks: [usize; 64],
}

// ---------------------------------------------------------------- functions
extern "C" {
    // dilattn.h
    pub fn dilattn_version() -> c_int;
    pub fn dilattn_status_string(status: dilattn_status) -> *const c_char;
    pub fn dilattn_last_error() -> *const c_char;
    pub fn dilattn_tensor_contiguous(
        data: *mut c_void,
        dtype: dilattn_dtype,
        d0: i64,
        d1: i64,
        d2: i64,
        d3: i64,
    ) -> dilattn_tensor;
    pub fn dilattn_desc_create(desc: *mut dilattn_desc) -> dilattn_status;
    pub fn dilattn_desc_destroy(desc: dilattn_desc) -> dilattn_status;
    pub fn dilattn_desc_set_dense(desc: dilattn_desc) -> dilattn_status;
    pub fn dilattn_desc_set_dilated(
        desc: dilattn_desc,
        num_branches: i32,
        segments: *const i64,
        dilations: *const i64,
        head_mode: dilattn_head_mode,
    ) -> dilattn_status;
    pub fn dilattn_desc_set_block_sparse(desc: dilattn_desc, mask: dilattn_mask) -> dilattn_status;
    pub fn dilattn_desc_set_causal(desc: dilattn_desc, causal: i32) -> dilattn_status;
    pub fn dilattn_desc_set_scale(desc: dilattn_desc, scale: f64) -> dilattn_status;
    pub fn dilattn_desc_set_num_threads(desc: dilattn_desc, num_threads: i32) -> dilattn_status;
    pub fn dilattn_desc_set_pool(desc: dilattn_desc, pool: dilattn_pool) -> dilattn_status;
    pub fn dilattn_desc_set_dropout(desc: dilattn_desc, p: f64) -> dilattn_status;
    pub fn dilattn_desc_set_window(desc: dilattn_desc, left: i64, right: i64) -> dilattn_status;
    pub fn dilattn_desc_set_softcap(desc: dilattn_desc, softcap: f64) -> dilattn_status;
    pub fn dilattn_desc_set_alibi(
        desc: dilattn_desc,
        slopes: *const f64,
        count: i64,
    ) -> dilattn_status;
    pub fn dilattn_desc_set_sinks(desc: dilattn_desc, enabled: i32) -> dilattn_status;
    pub fn dilattn_desc_set_varlen(
        desc: dilattn_desc,
        num_seqs: i64,
        cu_seqlens_q: *const i64,
        cu_seqlens_k: *const i64,
    ) -> dilattn_status;
    pub fn dilattn_shape_make(
        batch: i64,
        seqlen_q: i64,
        seqlen_k: i64,
        heads_q: i64,
        heads_kv: i64,
        head_dim: i64,
    ) -> dilattn_shape;
    pub fn dilattn_plan_create(
        plan: *mut dilattn_plan,
        desc: dilattn_desc,
        shape: *const dilattn_shape,
        dtype: dilattn_dtype,
        backend: dilattn_backend,
    ) -> dilattn_status;
    pub fn dilattn_plan_destroy(plan: dilattn_plan) -> dilattn_status;
    pub fn dilattn_plan_backend(plan: dilattn_plan, backend: *mut dilattn_backend) -> dilattn_status;
    pub fn dilattn_plan_score_count(plan: dilattn_plan, score_terms: *mut i64) -> dilattn_status;
    pub fn dilattn_plan_workspace_size(
        plan: dilattn_plan,
        forward_bytes: *mut usize,
        backward_bytes: *mut usize,
    ) -> dilattn_status;
    pub fn dilattn_forward(
        plan: dilattn_plan,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_backward(
        plan: dilattn_plan,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_call_options_make() -> dilattn_call_options;
    /// options: null for the plain call (refused by a plan with dropout).
    pub fn dilattn_forward_ex(
        plan: dilattn_plan,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        options: *const dilattn_call_options,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_backward_ex(
        plan: dilattn_plan,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
        options: *const dilattn_call_options,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_reference_rows(
        plan: dilattn_plan,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        rows: *const i64,
        num_rows: i64,
        o_rows: *mut f64,
        lse_rows: *mut f64,
    ) -> dilattn_status;
    pub fn dilattn_backend_available(backend: dilattn_backend) -> c_int;
    pub fn dilattn_backend_name(backend: dilattn_backend) -> *const c_char;
    pub fn dilattn_build_info() -> *const c_char;
    pub fn dilattn_cpu_isa() -> *const c_char;
    /// `cuda_stream`: a `cudaStream_t` (null: the legacy default stream).
    pub fn dilattn_forward_on_stream(
        plan: dilattn_plan,
        cuda_stream: *mut c_void,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_backward_on_stream(
        plan: dilattn_plan,
        cuda_stream: *mut c_void,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    /// The `_ex` calls on `cuda_stream`, as the `_on_stream` calls run.
    pub fn dilattn_forward_on_stream_ex(
        plan: dilattn_plan,
        cuda_stream: *mut c_void,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        options: *const dilattn_call_options,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;
    pub fn dilattn_backward_on_stream_ex(
        plan: dilattn_plan,
        cuda_stream: *mut c_void,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
        options: *const dilattn_call_options,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> dilattn_status;

    // dilattn_mask.h
    pub fn dilattn_mask_create(mask: *mut dilattn_mask, view: *const dilattn_bsr_view)
        -> dilattn_status;
    pub fn dilattn_mask_destroy(mask: dilattn_mask) -> dilattn_status;
    pub fn dilattn_mask_get(
        mask: dilattn_mask,
        view: *mut dilattn_bsr_view,
        nnz_total: *mut i64,
    ) -> dilattn_status;
    pub fn dilattn_mask_from_pattern(
        mask: *mut dilattn_mask,
        pattern: *const c_char,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
    ) -> dilattn_status;
    pub fn dilattn_mask_local(
        mask: *mut dilattn_mask,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
        window_blocks: i64,
        causal: i32,
    ) -> dilattn_status;
    pub fn dilattn_mask_sink(
        mask: *mut dilattn_mask,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
        global_blocks: i64,
        causal: i32,
    ) -> dilattn_status;
    pub fn dilattn_mask_strided(
        mask: *mut dilattn_mask,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
        stride: i64,
        causal: i32,
    ) -> dilattn_status;
    pub fn dilattn_mask_random(
        mask: *mut dilattn_mask,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
        num_heads: i64,
        density: f64,
        seed: u64,
        causal: i32,
    ) -> dilattn_status;
    pub fn dilattn_mask_union(mask: *mut dilattn_mask, masks: *const dilattn_mask, count: i32)
        -> dilattn_status;
    pub fn dilattn_mask_hierarchical(
        mask: *mut dilattn_mask,
        seqlen_q: i64,
        seqlen_k: i64,
        block_q: i64,
        block_k: i64,
        levels: i32,
        strides: *const i64,
        windows: *const i64,
        block_sizes: *const i64,
        causal: i32,
    ) -> dilattn_status;
    pub fn dilattn_mask_topk(
        mask: *mut dilattn_mask,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        block_q: i64,
        block_k: i64,
        k_keep: i64,
        causal: i32,
    ) -> dilattn_status;

    // dilattn_pool.h
    pub fn dilattn_pool_options_init(options: *mut dilattn_pool_options, arena_bytes: usize)
        -> dilattn_status;
    pub fn dilattn_pool_create_host(pool: *mut dilattn_pool, options: *const dilattn_pool_options)
        -> dilattn_status;
    pub fn dilattn_pool_create_cuda(
        pool: *mut dilattn_pool,
        device_index: i32,
        options: *const dilattn_pool_options,
    ) -> dilattn_status;
    pub fn dilattn_pool_create_from_memory(
        pool: *mut dilattn_pool,
        memory: *mut c_void,
        bytes: usize,
        min_block_bytes: usize,
        device: dilattn_device_type,
        device_index: i32,
    ) -> dilattn_status;
    pub fn dilattn_pool_alloc(pool: dilattn_pool, bytes: usize, ptr: *mut *mut c_void)
        -> dilattn_status;
    pub fn dilattn_pool_free(pool: dilattn_pool, ptr: *mut c_void) -> dilattn_status;
    pub fn dilattn_pool_get_stats(pool: dilattn_pool, stats: *mut dilattn_pool_stats)
        -> dilattn_status;
    pub fn dilattn_pool_reset(pool: dilattn_pool) -> dilattn_status;
    pub fn dilattn_pool_destroy(pool: dilattn_pool) -> dilattn_status;

    // dilattn_ring.h
    pub fn dilattn_comm_create_threads(num_ranks: i32, timeout_ms: i32, comms: *mut dilattn_comm)
        -> dilattn_status;
    pub fn dilattn_comm_create_nccl(
        nccl_comm: *const c_void,
        cuda_stream: *mut c_void,
        timeout_ms: i32,
        comm: *mut dilattn_comm,
    ) -> dilattn_status;
    pub fn dilattn_comm_create_mpi(mpi_comm: *const c_void, timeout_ms: i32,
                                   comm: *mut dilattn_comm) -> dilattn_status;
    pub fn dilattn_comm_destroy(comm: dilattn_comm) -> dilattn_status;
    pub fn dilattn_comm_rank(comm: dilattn_comm, rank: *mut i32, num_ranks: *mut i32)
        -> dilattn_status;
    pub fn dilattn_comm_peak_bytes(comm: dilattn_comm, bytes: *mut usize) -> dilattn_status;
    pub fn dilattn_ring_shard_rows(
        seqlen: i64,
        num_ranks: i32,
        rank: i32,
        split: dilattn_ring_split,
        first: *mut i64,
        count: *mut i64,
    ) -> dilattn_status;
    pub fn dilattn_ring_forward(
        plan: dilattn_plan,
        comm: dilattn_comm,
        split: dilattn_ring_split,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
    ) -> dilattn_status;
    pub fn dilattn_ring_backward(
        plan: dilattn_plan,
        comm: dilattn_comm,
        split: dilattn_ring_split,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
    ) -> dilattn_status;
    /// dilattn_ring_forward with per-call options (dropout seed and offset, sinks); null: the
    /// plain call.
    pub fn dilattn_ring_forward_ex(
        plan: dilattn_plan,
        comm: dilattn_comm,
        split: dilattn_ring_split,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        options: *const dilattn_call_options,
    ) -> dilattn_status;
    /// dilattn_ring_backward with per-call options; options.d_sinks receives the sinks'
    /// gradient summed over every rank.
    pub fn dilattn_ring_backward_ex(
        plan: dilattn_plan,
        comm: dilattn_comm,
        split: dilattn_ring_split,
        q: *const dilattn_tensor,
        k: *const dilattn_tensor,
        v: *const dilattn_tensor,
        o: *const dilattn_tensor,
        lse: *const dilattn_tensor,
        d_o: *const dilattn_tensor,
        dq: *const dilattn_tensor,
        dk: *const dilattn_tensor,
        dv: *const dilattn_tensor,
        options: *const dilattn_call_options,
    ) -> dilattn_status;
}
