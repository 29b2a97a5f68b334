//! Ring attention (SPEC 5, lib/dilattn_ring.h): P ranks each hold a shard of the rows of Q, K
//! and V; K/V chunks travel the ring and every rank gets its own rows of O and LSE
//! ([`Plan::ring_forward`]) or of dQ, dK and dV ([`Plan::ring_backward`]), equal to the
//! single-device result within SPEC 8.
//!
//! The plan describes the FULL problem (seqlen_q == seqlen_k == N); the views a rank passes are
//! its shards, N replaced by its row count: q, o `[B, rows, H, D]`; k, v `[B, rows, Hkv, D]`;
//! lse `[B, H, rows, 1]`. [`shard_rows`] says which rows of the full sequence a rank holds, in
//! shard order. A call is collective: every rank of a communicator calls the same function with
//! the same plan shape and split. A rank with bad input gets its own error; every other rank
//! gets `DILATTN_ERROR_COMM` naming it. Nothing is written to outputs on an error.
//!
//! ```no_run
//! use dilattn::ring::{self, Split};
//! use dilattn::{Attention, Backend, Dtype, Plan, Shape, Tensor, TensorMut};
//! let (b, n, h, d, ranks) = (1, 64, 2, 8, 4);
//! let q = vec![0.5f32; b * n * h * d]; // the full Q (K and V alike), [B, N, H, D]
//! let plan = Plan::new(&Attention::dense().causal(true), Shape::self_attention(b, n, h, d),
//!                      Dtype::F32, Backend::Cpu).unwrap();
//! // One thread per rank; each gathers its rows, runs its shard, returns its O.
//! let outputs = ring::run_threads(ranks, |comm| -> dilattn::Result<Vec<f32>> {
//!     let rows = ring::shard_rows(n, comm.size(), comm.rank(), Split::Zigzag)?;
//!     let shard: Vec<f32> = rows.iter()
//!         .flat_map(|&i| q[i * h * d..(i + 1) * h * d].iter().copied()).collect();
//!     let dims = [b, rows.len(), h, d];
//!     let mut o = vec![0f32; shard.len()];
//!     let mut lse = vec![0f32; b * h * rows.len()];
//!     let x = Tensor::new(&shard, dims)?;
//!     plan.ring_forward(comm, Split::Zigzag, &x, &x, &x, &mut TensorMut::new(&mut o, dims)?,
//!                       &mut TensorMut::new(&mut lse, [b, h, rows.len(), 1])?)?;
//!     Ok(o)
//! }).unwrap();
//! assert!(outputs.iter().all(|o| o.is_ok()));
//! ```
//!
//! Transports: [`Comm::threads`] (P ranks on P threads of this process) and, with a library built
//! with MPI, [`Comm::from_mpi`] (one rank per process). The NCCL transport needs device tensors,
//! which the safe crate's views (host slices) are not; it is left to dilattn-sys.
//!
//! Tested by rust/dilattn/tests/ring.rs against single-device plans.
use std::ffi::c_void;
use std::ops::Range;
use std::ptr;
use std::time::Duration;

use dilattn_sys as sys;

use crate::attention::Plan;
use crate::error::{check, Error, Result};
use crate::tensor::{Element, Tensor, TensorMut};

/// The timeout of [`run_threads`]: how long a rank waits for another before its call fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How the N rows are split over P ranks (SPEC 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Rank p holds rows `[floor(p N / P), floor((p+1) N / P))`; a rank may hold none (N < P).
    Contiguous,
    /// Causal balance: N is cut into 2P chunks the same way; rank p holds chunk p, then chunk
    /// 2P-1-p, in that order in its shards.
    Zigzag,
}

impl Split {
    fn raw(self) -> sys::dilattn_ring_split {
        match self {
            Split::Contiguous => sys::DILATTN_RING_CONTIGUOUS,
            Split::Zigzag => sys::DILATTN_RING_ZIGZAG,
        }
    }
}

/// A count or index the C ABI takes as int32; a larger one is refused here, naming it, rather
/// than passed on truncated.
fn to_i32(name: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| {
        Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                   format!("argument '{name}' = {value}: does not fit the C ABI's int32"))
    })
}

/// The C ABI counts the timeout in whole milliseconds (>= 1): a fraction is rounded up, so only
/// a zero timeout is refused (by the library, naming timeout_ms); a longer one than int32 ms
/// (about 24 days) is clamped.
fn timeout_ms(timeout: Duration) -> i32 {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    i32::try_from(ms).unwrap_or(i32::MAX)
}

/// One rank's end of a communicator (dilattn_comm). Send: each end moves to the thread of its
/// rank. Not Sync: the library does not allow two calls on one end at once. Dropping it destroys
/// this end; drop every end only when its rank is done (a rank still waiting for a dropped one
/// gets `DILATTN_ERROR_COMM` after the timeout; the shared state goes with the last end).
#[derive(Debug)]
pub struct Comm {
    raw: sys::dilattn_comm,
    rank: usize,
    size: usize,
}

// The library takes one call at a time on an end, from any thread (not Sync, so never two at
// once); the ends' shared state is guarded by the transport's own mutex and outlives any one end,
// so an end may be destroyed on any thread, even while other ranks wait (tested: a rank's panic
// drops its end mid-ring). MPI ends restrict this further: Comm::from_mpi's safety section.
unsafe impl Send for Comm {}

impl Comm {
    /// `num_ranks` ends of one communicator whose ranks are threads of this process, rank p at
    /// index p. `timeout` bounds every wait for another rank; past it the call returns
    /// `DILATTN_ERROR_COMM` and the communicator is broken (create a new one).
    pub fn threads(num_ranks: usize, timeout: Duration) -> Result<Vec<Comm>> {
        // dilattn_ring_shard_rows bounds num_ranks with the same limit as
        // dilattn_comm_create_threads (both in lib/ring/ring_comm.cpp): asked first, it refuses
        // a count out of range, naming it, before a buffer of that many handles is allocated.
        shard_ranges(1, num_ranks, 0, Split::Contiguous)?;
        let mut raw = vec![ptr::null_mut(); num_ranks];
        check(unsafe {
            sys::dilattn_comm_create_threads(num_ranks as i32, timeout_ms(timeout),
                                             raw.as_mut_ptr())
        })?;
        // Own every end before asking any its rank, so that an error still destroys them all.
        let mut ends: Vec<Comm> =
            raw.into_iter().map(|raw| Comm { raw, rank: 0, size: 0 }).collect();
        for end in &mut ends {
            (end.rank, end.size) = rank_and_size(end.raw)?;
        }
        Ok(ends)
    }

    /// This process's end over an MPI communicator (dilattn_comm_create_mpi). Collective: every
    /// rank of the MPI communicator calls it. The library duplicates the communicator. A library
    /// built without MPI returns `DILATTN_ERROR_UNSUPPORTED`.
    ///
    /// # Safety
    /// `mpi_comm` points to a valid `MPI_Comm` of the MPI the library was built with, MPI is
    /// initialised with at least `MPI_THREAD_FUNNELED` and is finalised only after this Comm is
    /// dropped. Below `MPI_THREAD_SERIALIZED` every call on the Comm, its drop included, must
    /// come from the thread that initialised MPI: do not move it to another thread then.
    pub unsafe fn from_mpi(mpi_comm: *const c_void, timeout: Duration) -> Result<Comm> {
        let mut raw = ptr::null_mut();
        check(sys::dilattn_comm_create_mpi(mpi_comm, timeout_ms(timeout), &mut raw))?;
        let mut end = Comm { raw, rank: 0, size: 0 };
        (end.rank, end.size) = rank_and_size(raw)?;
        Ok(end)
    }

    /// This end's rank, in [0, size()).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks of the communicator.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The most bytes the ring held at once on this rank during its last ring call (chunks in
    /// flight, partial results, accumulators, sub-problem workspaces), beyond the shards.
    pub fn peak_bytes(&self) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe { sys::dilattn_comm_peak_bytes(self.raw, &mut bytes) })?;
        Ok(bytes)
    }
}

fn rank_and_size(raw: sys::dilattn_comm) -> Result<(usize, usize)> {
    let (mut rank, mut size) = (0i32, 0i32);
    check(unsafe { sys::dilattn_comm_rank(raw, &mut rank, &mut size) })?;
    Ok((rank as usize, size as usize))
}

impl Drop for Comm {
    fn drop(&mut self) {
        unsafe { sys::dilattn_comm_destroy(self.raw) };
    }
}

/// The rows of a sequence of `seqlen` rows that `rank` of `num_ranks` holds: up to two ranges,
/// in shard order (contiguous: the second is empty).
pub fn shard_ranges(seqlen: usize, num_ranks: usize, rank: usize, split: Split)
    -> Result<[Range<usize>; 2]> {
    let seqlen = i64::try_from(seqlen).map_err(|_| {
        Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                   format!("argument 'seqlen' = {seqlen}: does not fit the C ABI's int64"))
    })?;
    let (num_ranks, rank) = (to_i32("num_ranks", num_ranks)?, to_i32("rank", rank)?);
    let (mut first, mut count) = ([0i64; 2], [0i64; 2]);
    check(unsafe {
        sys::dilattn_ring_shard_rows(seqlen, num_ranks, rank, split.raw(), first.as_mut_ptr(),
                                     count.as_mut_ptr())
    })?;
    Ok([0, 1].map(|r| first[r] as usize..(first[r] + count[r]) as usize))
}

/// The rows `rank` holds, one index per row, in shard order: row t of its shards is row
/// `shard_rows(..)[t]` of the full sequence.
pub fn shard_rows(seqlen: usize, num_ranks: usize, rank: usize, split: Split)
    -> Result<Vec<usize>> {
    Ok(shard_ranges(seqlen, num_ranks, rank, split)?.into_iter().flatten().collect())
}

impl Plan {
    /// This rank's O and LSE (`[B, H, rows, 1]`, f32 or f64: f64 from the ref backend and for
    /// f64 inputs) for its shards of Q, K and V. Collective over `comm`'s ranks.
    #[allow(clippy::too_many_arguments)]
    pub fn ring_forward<T: Element, L: Element>(&self, comm: &Comm, split: Split, q: &Tensor<T>,
                                                k: &Tensor<T>, v: &Tensor<T>,
                                                o: &mut TensorMut<T>, lse: &mut TensorMut<L>)
        -> Result<()> {
        let (q, k, v, o, lse) = (q.raw(), k.raw(), v.raw(), o.raw(), lse.raw());
        check(unsafe {
            sys::dilattn_ring_forward(self.raw(), comm.raw, split.raw(), &q, &k, &v, &o, &lse)
        })
    }

    /// This rank's O for its shards, without the LSE. Collective.
    pub fn ring_forward_output<T: Element>(&self, comm: &Comm, split: Split, q: &Tensor<T>,
                                           k: &Tensor<T>, v: &Tensor<T>, o: &mut TensorMut<T>)
        -> Result<()> {
        let (q, k, v, o) = (q.raw(), k.raw(), v.raw(), o.raw());
        check(unsafe {
            sys::dilattn_ring_forward(self.raw(), comm.raw, split.raw(), &q, &k, &v, &o,
                                      ptr::null())
        })
    }

    /// This rank's dQ, dK and dV (SPEC 6) from its shards of Q, K, V, dO and of the forward's O
    /// and LSE. dK/dV contributions travel back to their owner in ring order, so the result is
    /// bitwise the same on every run. Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn ring_backward<T: Element, L: Element>(&self, comm: &Comm, split: Split,
                                                 q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>,
                                                 o: &Tensor<T>, lse: &Tensor<L>,
                                                 d_o: &Tensor<T>, dq: &mut TensorMut<T>,
                                                 dk: &mut TensorMut<T>, dv: &mut TensorMut<T>)
        -> Result<()> {
        let inputs = [q.raw(), k.raw(), v.raw(), o.raw()];
        let (lse, d_o) = (lse.raw(), d_o.raw());
        let (dq, dk, dv) = (dq.raw(), dk.raw(), dv.raw());
        check(unsafe {
            sys::dilattn_ring_backward(self.raw(), comm.raw, split.raw(), &inputs[0], &inputs[1],
                                       &inputs[2], &inputs[3], &lse, &d_o, &dq, &dk, &dv)
        })
    }
}

/// Runs `f(comm)` for every end of `comms`, each on its own scoped thread, and returns the
/// results in the order of `comms`. The ends are dropped when every rank is done. A panic of a
/// rank is resumed here once every thread has finished (the others' ring calls fail with
/// `DILATTN_ERROR_COMM` after the timeout).
pub fn run_comms<R, F>(comms: Vec<Comm>, f: F) -> Vec<R>
where
    R: Send,
    F: Fn(&Comm) -> R + Sync,
{
    let f = &f;
    let finished: Vec<_> = std::thread::scope(|scope| {
        let ranks: Vec<_> = comms.into_iter()
            .map(|comm| scope.spawn(move || { let result = f(&comm); (result, comm) }))
            .collect();
        ranks.into_iter().map(|rank| rank.join()).collect()
    });
    let mut results = Vec::with_capacity(finished.len());
    let mut ends = Vec::with_capacity(finished.len());
    let mut panic = None;
    for rank in finished {
        match rank {
            Ok((result, comm)) => {
                results.push(result);
                ends.push(comm);
            }
            Err(payload) => panic = panic.or(Some(payload)),
        }
    }
    drop(ends);
    if let Some(payload) = panic {
        std::panic::resume_unwind(payload);
    }
    results
}

/// Runs `f(comm)` for every rank of a new threads communicator of `num_ranks` ranks (timeout
/// [`DEFAULT_TIMEOUT`]), one scoped thread each, and returns the results in rank order. Only
/// creating the communicator can fail here; each rank's own outcome is in its result.
pub fn run_threads<R, F>(num_ranks: usize, f: F) -> Result<Vec<R>>
where
    R: Send,
    F: Fn(&Comm) -> R + Sync,
{
    Ok(run_comms(Comm::threads(num_ranks, DEFAULT_TIMEOUT)?, f))
}
