//! Safe Rust API of dilattn: dense, dilated (LongNet) and block-sparse attention, forward and
//! backward, on the library's CPU reference, its fast CPU backend or its CUDA kernels. docs/spec.md
//! defines what every backend computes.
//!
//! ```no_run
//! use dilattn::{Attention, Backend, Dtype, HeadMode, Plan, Shape, Tensor, TensorMut};
//! let (b, n, h, d) = (1, 16, 2, 8);
//! let q = vec![0.5f32; b * n * h * d];
//! let mut o = vec![0f32; q.len()];
//! let mut lse = vec![0f32; b * h * n];
//! let attention = Attention::dilated(&[(4, 1), (16, 4)], HeadMode::Mod).causal(true);
//! let shape = Shape::self_attention(b, n, h, d);
//! let plan = Plan::new(&attention, shape, Dtype::F32, Backend::Cpu).unwrap();
//! let qv = Tensor::new(&q, [b, n, h, d]).unwrap();
//! plan.forward(&qv, &qv, &qv, &mut TensorMut::new(&mut o, [b, n, h, d]).unwrap(),
//!              &mut TensorMut::new(&mut lse, [b, h, n, 1]).unwrap()).unwrap();
//! ```
//!
//! Ring attention over P ranks (SPEC 5): the [`ring`] module ([`Comm`], [`Split`],
//! [`ring::shard_rows`], [`Plan::ring_forward`], [`Plan::ring_backward`], [`ring::run_threads`]).
//!
//! The variants of SPEC 10 (windows, softcap, ALiBi, packed batches, sinks) and dropout (SPEC 11)
//! are [`Attention`] options that the ref backend computes; sinks and dropout take per-call
//! [`CallOptions`] through [`Plan::forward_ex`] and [`Plan::backward_ex`].
//!
//! Elements: f32, f64, and f16 / bf16 as [`F16`] / [`Bf16`] (u16 bits). Workspace memory:
//! [`Pool`] (the library's buddy pool) attached with [`Attention::pool`].
//!
//! Every fallible call returns `Result<_, Error>`; an error carries the C status and the
//! library's message naming the argument and its value.
mod attention;
mod error;
mod half;
mod mask;
mod pool;
pub mod ring;
mod tensor;

pub use attention::{Attention, Backend, CallOptions, HeadMode, Plan, Progress, Shape};
pub use error::{Error, Result};
pub use half::{Bf16, F16};
pub use mask::{Bsr, Mask};
pub use pool::{Block, Growth, Pool, PoolStats};
pub use ring::{Comm, Split};
pub use tensor::{Dtype, Element, Tensor, TensorMut};

use std::ffi::CStr;

/// The C library's version, "major.minor.patch".
pub fn version() -> String {
    let v = unsafe { dilattn_sys::dilattn_version() };
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
}

/// Whether a backend is built and can run here (cuda: a GPU is present).
pub fn backend_available(backend: Backend) -> bool {
    unsafe { dilattn_sys::dilattn_backend_available(backend.raw()) == 1 }
}

/// The library's build information, one fact per line.
pub fn build_info() -> String {
    unsafe { CStr::from_ptr(dilattn_sys::dilattn_build_info()) }.to_string_lossy().into_owned()
}
