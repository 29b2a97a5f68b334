//! What to compute (Attention: dense, dilated or block-sparse; causal; scale; the variants of
//! SPEC 10; dropout; a workspace pool), for which sizes (Shape), on which backend: a Plan, which
//! runs forward and backward on tensor views, with per-call options (CallOptions) where needed.
use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::os::raw::{c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;

use dilattn_sys as sys;

use crate::error::{check, Error, Result};
use crate::mask::Mask;
use crate::pool::{self, Pool};
use crate::tensor::{Dtype, Element, Tensor, TensorMut};

/// How dilated branches pick rows per head (SPEC 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadMode {
    /// offset h mod r (the LongNet paper)
    Mod,
    /// offset floor(h / ceil(H / r)) (microsoft/torchscale)
    Block,
    /// head group g uses branch g alone (dilated-attention-pytorch)
    Groups,
}

/// Where a plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// cuda when a GPU can run the problem, else cpu, else ref
    Auto,
    /// the f64 reference: exact, slow
    Ref,
    /// tiled online softmax, multithreaded
    Cpu,
    Cuda,
    /// the CUDA kernels run by the CPU SIMT emulator (tests)
    Emu,
}

impl Backend {
    pub(crate) fn raw(self) -> sys::dilattn_backend {
        match self {
            Backend::Auto => sys::DILATTN_BACKEND_AUTO,
            Backend::Ref => sys::DILATTN_BACKEND_REF,
            Backend::Cpu => sys::DILATTN_BACKEND_CPU,
            Backend::Cuda => sys::DILATTN_BACKEND_CUDA,
            Backend::Emu => sys::DILATTN_BACKEND_EMU,
        }
    }

    fn from_raw(raw: sys::dilattn_backend) -> Backend {
        match raw {
            sys::DILATTN_BACKEND_REF => Backend::Ref,
            sys::DILATTN_BACKEND_CPU => Backend::Cpu,
            sys::DILATTN_BACKEND_CUDA => Backend::Cuda,
            sys::DILATTN_BACKEND_EMU => Backend::Emu,
            _ => Backend::Auto,
        }
    }
}

/// The sizes of a problem: Q [batch, seqlen_q, heads_q, head_dim], K and V
/// [batch, seqlen_k, heads_kv, head_dim].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub batch: usize,
    pub seqlen_q: usize,
    pub seqlen_k: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
}

impl Shape {
    /// Nq = Nk = n and H = Hkv = h.
    pub fn self_attention(batch: usize, n: usize, h: usize, head_dim: usize) -> Shape {
        Shape { batch, seqlen_q: n, seqlen_k: n, heads_q: h, heads_kv: h, head_dim }
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Dense,
    Dilated { segments: Vec<i64>, dilations: Vec<i64>, mode: HeadMode },
    BlockSparse(Mask),
}

/// A pool shared by the attentions and plans that use it (it lives as long as they do).
#[derive(Clone)]
struct SharedPool(Arc<pool::Handle>);

impl std::fmt::Debug for SharedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({:p})", self.0.raw())
    }
}

/// What a plan computes (SPEC 2-4, 10, 11): built as Attention::dense() and friends, then
/// .causal(), .scale(), the variants (.window(), .softcap(), .alibi(), .varlen(), .sinks()),
/// .dropout() and .pool().
#[derive(Clone, Debug)]
pub struct Attention {
    kind: Kind,
    causal: bool,
    scale: Option<f64>,
    dropout: f64,
    window: Option<(Option<usize>, Option<usize>)>,
    softcap: f64,
    alibi: Vec<f64>,
    varlen: Option<(Vec<usize>, Vec<usize>)>,
    sinks: bool,
    pool: Option<SharedPool>,
}

impl Attention {
    fn of_kind(kind: Kind) -> Attention {
        Attention { kind, causal: false, scale: None, dropout: 0.0, window: None, softcap: 0.0,
                    alibi: Vec::new(), varlen: None, sinks: false, pool: None }
    }

    pub fn dense() -> Attention {
        Attention::of_kind(Kind::Dense)
    }

    /// Branches (segment length w, dilation r); the library validates them at Plan::new.
    pub fn dilated(branches: &[(usize, usize)], mode: HeadMode) -> Attention {
        Attention::of_kind(Kind::Dilated {
            segments: branches.iter().map(|b| b.0 as i64).collect(),
            dilations: branches.iter().map(|b| b.1 as i64).collect(),
            mode,
        })
    }

    pub fn block_sparse(mask: &Mask) -> Attention {
        Attention::of_kind(Kind::BlockSparse(mask.clone()))
    }

    /// Causal: key j allowed for row i iff j <= i + (Nk - Nq) (SPEC 2).
    pub fn causal(mut self, causal: bool) -> Attention {
        self.causal = causal;
        self
    }

    /// The softmax scale; 1/sqrt(D) without this call.
    pub fn scale(mut self, scale: f64) -> Attention {
        self.scale = Some(scale);
        self
    }

    /// Attention dropout with probability p in [0, 1) (SPEC 11; the library checks p at
    /// Plan::new). A plan with p > 0 runs on the cpu and ref backends only, and only through
    /// Plan::forward_dropout / Plan::backward_dropout, which carry the seed and offset.
    pub fn dropout(mut self, p: f64) -> Attention {
        self.dropout = p;
        self
    }

    /// Sliding window (SPEC 10.1): key j is allowed for row i iff
    /// i + d - left <= j <= i + d + right (d = Nk - Nq, per sequence in a packed batch), within
    /// the kind's allowed keys; None is unbounded, (None, None) no window. Only Backend::Ref
    /// computes it: the other backends refuse the plan with DILATTN_ERROR_UNSUPPORTED, so
    /// Backend::Auto resolves to Ref.
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Attention {
        self.window = Some((left, right));
        self
    }

    /// Softcap c (SPEC 10.1): S = c * tanh(scale <q, k> / c); 0 is none; the library refuses a
    /// negative, NaN or infinite c at Plan::new. Ref backend only (as for .window()).
    pub fn softcap(mut self, c: f64) -> Attention {
        self.softcap = c;
        self
    }

    /// ALiBi slopes (SPEC 10.1): S += -m * |i + d - j| after the softcap, with heads_q slopes
    /// (one per head) or batch * heads_q (row-major `[batch][heads_q]`; in a packed batch,
    /// `[sequences][heads_q]`); empty is none. The library checks the values and the count at
    /// Plan::new. Ref backend only (as for .window()).
    pub fn alibi(mut self, slopes: &[f64]) -> Attention {
        self.alibi = slopes.to_vec();
        self
    }

    /// A packed batch of variable-length sequences (SPEC 10.2): sequence b owns query rows
    /// `[cu_seqlens_q[b], cu_seqlens_q[b+1])` and keys `[cu_seqlens_k[b], cu_seqlens_k[b+1])`; both
    /// hold one offset more than there are sequences, start at 0 and never decrease, and the
    /// plan's shape has batch 1, seqlen_q and seqlen_k the last offsets. Each sequence attends
    /// only within itself. Two empty slices are no packed batch. Checked at Plan::new; ref
    /// backend only (as for .window()).
    pub fn varlen(mut self, cu_seqlens_q: &[usize], cu_seqlens_k: &[usize]) -> Attention {
        self.varlen = Some((cu_seqlens_q.to_vec(), cu_seqlens_k.to_vec()));
        self
    }

    /// Attention sinks (SPEC 10.3): one logit per query head joins every softmax of its head
    /// with no value. The values come per call in CallOptions::sinks (Plan::forward_ex and
    /// Plan::backward_ex, which returns their gradient); the plain calls refuse such a plan.
    /// Ref backend only (as for .window()).
    pub fn sinks(mut self, enabled: bool) -> Attention {
        self.sinks = enabled;
        self
    }

    /// Plans take their workspace from this pool (on the plan's device) instead of the
    /// library's default pool; the attention and its plans share the pool.
    pub fn pool(mut self, pool: &Pool) -> Attention {
        self.pool = Some(SharedPool(pool.shared()));
        self
    }

    /// A description handle with these settings; the caller destroys it.
    fn describe(&self) -> Result<Description> {
        let mut desc = Description(ptr::null_mut());
        check(unsafe { sys::dilattn_desc_create(&mut desc.0) })?;
        match &self.kind {
            Kind::Dense => {}
            Kind::Dilated { segments, dilations, mode } => {
                let mode = match mode {
                    HeadMode::Mod => sys::DILATTN_HEADS_MOD,
                    HeadMode::Block => sys::DILATTN_HEADS_BLOCK,
                    HeadMode::Groups => sys::DILATTN_HEADS_GROUPS,
                };
                check(unsafe {
                    sys::dilattn_desc_set_dilated(desc.0, segments.len() as i32,
                                                  segments.as_ptr(), dilations.as_ptr(), mode)
                })?;
            }
            Kind::BlockSparse(mask) => {
                check(unsafe { sys::dilattn_desc_set_block_sparse(desc.0, mask.raw()) })?
            }
        }
        check(unsafe { sys::dilattn_desc_set_causal(desc.0, self.causal as i32) })?;
        if let Some(scale) = self.scale {
            check(unsafe { sys::dilattn_desc_set_scale(desc.0, scale) })?;
        }
        if self.dropout != 0.0 {
            check(unsafe { sys::dilattn_desc_set_dropout(desc.0, self.dropout) })?;
        }
        if let Some((left, right)) = self.window {
            let (left, right) = (window_side("left", left)?, window_side("right", right)?);
            check(unsafe { sys::dilattn_desc_set_window(desc.0, left, right) })?;
        }
        if self.softcap != 0.0 {
            check(unsafe { sys::dilattn_desc_set_softcap(desc.0, self.softcap) })?;
        }
        if !self.alibi.is_empty() {
            check(unsafe {
                sys::dilattn_desc_set_alibi(desc.0, self.alibi.as_ptr(), self.alibi.len() as i64)
            })?;
        }
        if let Some((cu_q, cu_k)) = &self.varlen {
            // The library reads num_seqs + 1 offsets from each array.
            if cu_q.len() != cu_k.len() {
                return Err(Error::new(sys::DILATTN_ERROR_INVALID_VALUE, format!(
                    "cu_seqlens_q has {} offsets but cu_seqlens_k has {}", cu_q.len(),
                    cu_k.len())));
            }
            let cu_q = offsets("cu_seqlens_q", cu_q)?;
            let cu_k = offsets("cu_seqlens_k", cu_k)?;
            let num_seqs = cu_q.len().saturating_sub(1) as i64;
            check(unsafe {
                sys::dilattn_desc_set_varlen(desc.0, num_seqs, cu_q.as_ptr(), cu_k.as_ptr())
            })?;
        }
        if self.sinks {
            check(unsafe { sys::dilattn_desc_set_sinks(desc.0, 1) })?;
        }
        if let Some(pool) = &self.pool {
            check(unsafe { sys::dilattn_desc_set_pool(desc.0, pool.0.raw()) })?;
        }
        Ok(desc)
    }
}

/// A window side for the C API: -1 is unbounded.
fn window_side(name: &str, side: Option<usize>) -> Result<i64> {
    match side {
        None => Ok(-1),
        Some(n) => i64::try_from(n).map_err(|_| {
            Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                       format!("window {name} = {n} is too large"))
        }),
    }
}

/// Offsets as the C API's int64.
fn offsets(name: &str, values: &[usize]) -> Result<Vec<i64>> {
    values.iter().enumerate().map(|(i, &v)| {
        i64::try_from(v).map_err(|_| {
            Error::new(sys::DILATTN_ERROR_INVALID_VALUE, format!("{name}[{i}] = {v} is too large"))
        })
    }).collect()
}

/// Owns a dilattn_desc for the duration of Plan::new.
struct Description(sys::dilattn_desc);

impl Drop for Description {
    fn drop(&mut self) {
        if !self.0.is_null() {
            unsafe { sys::dilattn_desc_destroy(self.0) };
        }
    }
}

/// An attention, sizes, a dtype and a backend, fixed. Immutable: forward and backward take
/// &self and may run from several threads at once.
#[derive(Debug)]
pub struct Plan {
    raw: sys::dilattn_plan,
    shape: Shape,
    dtype: Dtype,
    backend: Backend,
    _pool: Option<SharedPool>, // kept alive while the plan may take workspace from it
}

// The C header guarantees a plan "is immutable and may be used from several threads at once",
// and plan_destroy may run on any thread.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Plan {
    pub fn new(attention: &Attention, shape: Shape, dtype: Dtype, backend: Backend)
        -> Result<Plan> {
        let desc = attention.describe()?;
        let s = shape;
        let raw_shape = unsafe {
            sys::dilattn_shape_make(s.batch as i64, s.seqlen_q as i64, s.seqlen_k as i64,
                                    s.heads_q as i64, s.heads_kv as i64, s.head_dim as i64)
        };
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::dilattn_plan_create(&mut raw, desc.0, &raw_shape, dtype.raw(), backend.raw())
        })?;
        let mut plan = Plan { raw, shape, dtype, backend, _pool: attention.pool.clone() };
        let mut chosen = 0;
        check(unsafe { sys::dilattn_plan_backend(raw, &mut chosen) })?;
        plan.backend = Backend::from_raw(chosen);
        Ok(plan)
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub(crate) fn raw(&self) -> sys::dilattn_plan {
        self.raw
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The backend the plan runs on (Auto resolved).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// (forward, backward): the workspace bytes a call takes from the plan's pool.
    pub fn workspace_bytes(&self) -> Result<(usize, usize)> {
        let (mut forward, mut backward) = (0usize, 0usize);
        check(unsafe { sys::dilattn_plan_workspace_size(self.raw, &mut forward, &mut backward) })?;
        Ok((forward, backward))
    }

    /// O (and LSE, [B, H, Nq, 1] in f32 or f64: f64 from the ref backend and for f64 inputs,
    /// which the cpu backend computes in f64) = attention(Q, K, V).
    pub fn forward<T: Element, L: Element>(&self, q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                           o: &mut TensorMut<T>, lse: &mut TensorMut<L>)
        -> Result<()> {
        let (q, k, v, o, lse) = (q.raw(), k.raw(), v.raw(), o.raw(), lse.raw());
        check(unsafe { sys::dilattn_forward(self.raw, &q, &k, &v, &o, &lse, ptr::null_mut(), 0) })
    }

    /// O = attention(Q, K, V), without the LSE.
    pub fn forward_output<T: Element>(&self, q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                      o: &mut TensorMut<T>) -> Result<()> {
        let (q, k, v, o) = (q.raw(), k.raw(), v.raw(), o.raw());
        check(unsafe {
            sys::dilattn_forward(self.raw, &q, &k, &v, &o, ptr::null(), ptr::null_mut(), 0)
        })
    }

    /// dQ, dK, dV from dO and the forward's O and LSE (SPEC 6). Deterministic.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<T: Element, L: Element>(&self, q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                            o: &Tensor<T>, lse: &Tensor<L>, d_o: &Tensor<T>,
                                            dq: &mut TensorMut<T>, dk: &mut TensorMut<T>,
                                            dv: &mut TensorMut<T>) -> Result<()> {
        let inputs = [q.raw(), k.raw(), v.raw(), o.raw()];
        let (lse, d_o) = (lse.raw(), d_o.raw());
        let (dq, dk, dv) = (dq.raw(), dk.raw(), dv.raw());
        check(unsafe {
            sys::dilattn_backward(self.raw, &inputs[0], &inputs[1], &inputs[2], &inputs[3], &lse,
                                  &d_o, &dq, &dk, &dv, ptr::null_mut(), 0)
        })
    }

    /// forward with per-call options (SPEC 11.2, 10.3): the dropout seed and offset of a plan
    /// with .dropout(p), the sink logits of a plan with .sinks(true). Those plans need this
    /// call; they run on Backend::Ref only (the other backends refuse them at Plan::new with
    /// DILATTN_ERROR_UNSUPPORTED, so Backend::Auto resolves to Ref).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_ex<T: Element, L: Element>(&self, options: &CallOptions, q: &Tensor<T>,
                                              k: &Tensor<T>, v: &Tensor<T>,
                                              o: &mut TensorMut<T>, lse: &mut TensorMut<L>)
        -> Result<()> {
        let bridge = ProgressBridge::new(options.progress);
        let raw_options = options.raw(self.shape, None, &bridge)?;
        let (q, k, v, o, lse) = (q.raw(), k.raw(), v.raw(), o.raw(), lse.raw());
        let status = unsafe {
            sys::dilattn_forward_ex(self.raw, &q, &k, &v, &o, &lse, &raw_options, ptr::null_mut(),
                                    0)
        };
        bridge.resume_panic();
        check(status)
    }

    /// backward of forward_ex, with the same options (SPEC 11.3, 10.3). Returns the sinks'
    /// gradient (heads_q values, summed over batch and rows) when options.sinks is given, else
    /// None. Backend::Ref only, as forward_ex.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_ex<T: Element, L: Element>(&self, options: &CallOptions, q: &Tensor<T>,
                                               k: &Tensor<T>, v: &Tensor<T>, o: &Tensor<T>,
                                               lse: &Tensor<L>, d_o: &Tensor<T>,
                                               dq: &mut TensorMut<T>, dk: &mut TensorMut<T>,
                                               dv: &mut TensorMut<T>)
        -> Result<Option<Vec<f64>>> {
        let mut d_sinks = options.sinks.map(|_| vec![0.0; self.shape.heads_q]);
        let bridge = ProgressBridge::new(options.progress);
        let raw_options = options.raw(self.shape, d_sinks.as_deref_mut(), &bridge)?;
        let inputs = [q.raw(), k.raw(), v.raw(), o.raw()];
        let (lse, d_o) = (lse.raw(), d_o.raw());
        let (dq, dk, dv) = (dq.raw(), dk.raw(), dv.raw());
        let status = unsafe {
            sys::dilattn_backward_ex(self.raw, &inputs[0], &inputs[1], &inputs[2], &inputs[3],
                                     &lse, &d_o, &dq, &dk, &dv, &raw_options, ptr::null_mut(), 0)
        };
        bridge.resume_panic();
        check(status)?;
        Ok(d_sinks)
    }

    /// forward with the dropout mask of (seed, offset) (SPEC 11): offset below 2^32; advance
    /// it every training step and give backward_dropout the same pair. forward_ex with only
    /// the seed and offset.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_dropout<T: Element, L: Element>(&self, seed: u64, offset: u64, q: &Tensor<T>,
                                                   k: &Tensor<T>, v: &Tensor<T>,
                                                   o: &mut TensorMut<T>, lse: &mut TensorMut<L>)
        -> Result<()> {
        let options = CallOptions { dropout_seed: seed, dropout_offset: offset,
                                    ..CallOptions::default() };
        self.forward_ex(&options, q, k, v, o, lse)
    }

    /// backward of forward_dropout with the same seed and offset (SPEC 11.3).
    #[allow(clippy::too_many_arguments)]
    pub fn backward_dropout<T: Element, L: Element>(&self, seed: u64, offset: u64,
                                                    q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                                    o: &Tensor<T>, lse: &Tensor<L>,
                                                    d_o: &Tensor<T>, dq: &mut TensorMut<T>,
                                                    dk: &mut TensorMut<T>, dv: &mut TensorMut<T>)
        -> Result<()> {
        let options = CallOptions { dropout_seed: seed, dropout_offset: offset,
                                    ..CallOptions::default() };
        self.backward_ex(&options, q, k, v, o, lse, d_o, dq, dk, dv).map(|_| ())
    }
}

/// A progress callback (SPEC 14.11): called as `f(done, total)` on the calling thread; `true`
/// stops the call, which then returns an error with status DILATTN_ERROR_CANCELLED and leaves
/// every output as it was.
pub type Progress<'a> = &'a dyn Fn(i64, i64) -> bool;

/// Per-call options of Plan::forward_ex and Plan::backward_ex (SPEC 11.2, 10.3, 14.11). The
/// default is seed 0, offset 0, no sinks, no progress callback.
#[derive(Clone, Copy, Default)]
pub struct CallOptions<'a> {
    /// The dropout seed: any value (a plan with .dropout(p)).
    pub dropout_seed: u64,
    /// The dropout offset, below 2^32: advance it every training step.
    pub dropout_offset: u64,
    /// heads_q sink logits, `sinks[h]` for query head h, finite or -inf (no sink for that head),
    /// for a plan with .sinks(true); None for a plan without.
    pub sinks: Option<&'a [f64]>,
    /// A progress callback for a long call; a panic in it stops the call and resumes once the
    /// call has returned.
    pub progress: Option<Progress<'a>>,
}

impl fmt::Debug for CallOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallOptions")
            .field("dropout_seed", &self.dropout_seed)
            .field("dropout_offset", &self.dropout_offset)
            .field("sinks", &self.sinks)
            .field("progress", &self.progress.map(|_| "Fn(done, total) -> bool"))
            .finish()
    }
}

/// The Rust side of a call's progress callback: the closure, and a panic it raised (a panic
/// must not unwind through the C library, so it is caught, the call is stopped, and the panic
/// resumes once the call has returned).
struct ProgressBridge<'a> {
    progress: Option<Progress<'a>>,
    panic: Cell<Option<Box<dyn Any + Send>>>,
}

impl<'a> ProgressBridge<'a> {
    fn new(progress: Option<Progress<'a>>) -> Self {
        ProgressBridge { progress, panic: Cell::new(None) }
    }

    fn resume_panic(&self) {
        if let Some(payload) = self.panic.take() {
            panic::resume_unwind(payload);
        }
    }
}

unsafe extern "C" fn progress_trampoline(user: *mut c_void, done: i64, total: i64) -> c_int {
    // SAFETY: user is the ProgressBridge of the running call (CallOptions::raw), which outlives it.
    let bridge = unsafe { &*(user as *const ProgressBridge) };
    let Some(progress) = bridge.progress else { return 0 };
    match panic::catch_unwind(AssertUnwindSafe(|| progress(done, total))) {
        Ok(stop) => c_int::from(stop),
        Err(payload) => {
            bridge.panic.set(Some(payload));
            1
        }
    }
}

impl CallOptions<'_> {
    /// The C options; d_sinks (heads_q values) receives the sinks' gradient in a backward;
    /// bridge carries the progress callback.
    fn raw(&self, shape: Shape, d_sinks: Option<&mut [f64]>, bridge: &ProgressBridge)
        -> Result<sys::dilattn_call_options> {
        let mut options = unsafe { sys::dilattn_call_options_make() };
        if bridge.progress.is_some() {
            options.progress = Some(progress_trampoline);
            options.progress_user = bridge as *const ProgressBridge as *mut c_void;
        }
        options.dropout_seed = self.dropout_seed;
        options.dropout_offset = self.dropout_offset;
        if let Some(sinks) = self.sinks {
            // The library reads heads_q values.
            if sinks.len() != shape.heads_q {
                return Err(Error::new(sys::DILATTN_ERROR_INVALID_VALUE, format!(
                    "sinks has {} values but the plan's heads_q is {}", sinks.len(),
                    shape.heads_q)));
            }
            options.sinks = sinks.as_ptr();
        }
        if let Some(d_sinks) = d_sinks {
            options.d_sinks = d_sinks.as_mut_ptr();
        }
        Ok(options)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe { sys::dilattn_plan_destroy(self.raw) };
    }
}
