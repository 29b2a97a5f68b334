//! What to compute (Attention: dense, dilated or block-sparse; causal; scale; a workspace
//! pool), for which sizes (Shape), on which backend: a Plan, which runs forward and backward on
//! tensor views.
use std::ptr;
use std::sync::Arc;

use dilattn_sys as sys;

use crate::error::{check, Result};
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

/// What a plan computes (SPEC 2-4): built as Attention::dense() and friends, then .causal(),
/// .scale(), .dropout() and .pool().
#[derive(Clone, Debug)]
pub struct Attention {
    kind: Kind,
    causal: bool,
    scale: Option<f64>,
    dropout: f64,
    pool: Option<SharedPool>,
}

impl Attention {
    pub fn dense() -> Attention {
        Attention { kind: Kind::Dense, causal: false, scale: None, dropout: 0.0, pool: None }
    }

    /// Branches (segment length w, dilation r); the library validates them at Plan::new.
    pub fn dilated(branches: &[(usize, usize)], mode: HeadMode) -> Attention {
        let kind = Kind::Dilated {
            segments: branches.iter().map(|b| b.0 as i64).collect(),
            dilations: branches.iter().map(|b| b.1 as i64).collect(),
            mode,
        };
        Attention { kind, causal: false, scale: None, dropout: 0.0, pool: None }
    }

    pub fn block_sparse(mask: &Mask) -> Attention {
        Attention { kind: Kind::BlockSparse(mask.clone()), causal: false, scale: None,
                    dropout: 0.0, pool: None }
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
    /// Plan::new). A plan with p > 0 runs on the ref backend only, and only through
    /// Plan::forward_dropout / Plan::backward_dropout, which carry the seed and offset.
    pub fn dropout(mut self, p: f64) -> Attention {
        self.dropout = p;
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
        if let Some(pool) = &self.pool {
            check(unsafe { sys::dilattn_desc_set_pool(desc.0, pool.0.raw()) })?;
        }
        Ok(desc)
    }
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

    /// forward with the dropout mask of (seed, offset) (SPEC 11): offset below 2^32; advance
    /// it every training step and give backward_dropout the same pair.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_dropout<T: Element, L: Element>(&self, seed: u64, offset: u64, q: &Tensor<T>,
                                                   k: &Tensor<T>, v: &Tensor<T>,
                                                   o: &mut TensorMut<T>, lse: &mut TensorMut<L>)
        -> Result<()> {
        let options = call_options(seed, offset);
        let (q, k, v, o, lse) = (q.raw(), k.raw(), v.raw(), o.raw(), lse.raw());
        check(unsafe {
            sys::dilattn_forward_ex(self.raw, &q, &k, &v, &o, &lse, &options, ptr::null_mut(), 0)
        })
    }

    /// backward of forward_dropout with the same seed and offset (SPEC 11.3).
    #[allow(clippy::too_many_arguments)]
    pub fn backward_dropout<T: Element, L: Element>(&self, seed: u64, offset: u64,
                                                    q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                                    o: &Tensor<T>, lse: &Tensor<L>,
                                                    d_o: &Tensor<T>, dq: &mut TensorMut<T>,
                                                    dk: &mut TensorMut<T>, dv: &mut TensorMut<T>)
        -> Result<()> {
        let options = call_options(seed, offset);
        let inputs = [q.raw(), k.raw(), v.raw(), o.raw()];
        let (lse, d_o) = (lse.raw(), d_o.raw());
        let (dq, dk, dv) = (dq.raw(), dk.raw(), dv.raw());
        check(unsafe {
            sys::dilattn_backward_ex(self.raw, &inputs[0], &inputs[1], &inputs[2], &inputs[3],
                                     &lse, &d_o, &dq, &dk, &dv, &options, ptr::null_mut(), 0)
        })
    }
}

fn call_options(seed: u64, offset: u64) -> sys::dilattn_call_options {
    let mut options = unsafe { sys::dilattn_call_options_make() };
    options.dropout_seed = seed;
    options.dropout_offset = offset;
    options
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe { sys::dilattn_plan_destroy(self.raw) };
    }
}
