//! Ring attention (SPEC 5) through the safe API, one scoped thread per rank:
//!   * ring_forward / ring_backward on P = 1..4 ranks, contiguous and zigzag splits, dense causal
//!     GQA, dilated, dilated causal, and fewer rows than ranks: every rank's shard of O, LSE, dQ,
//!     dK and dV equals the same rows of a single-device ref plan within SPEC 8 (cpu backend,
//!     f32) and within 1e-12 (ref backend, f64);
//!   * the ring backward is bitwise the same on a second run (SPEC 6), and ring_forward_output
//!     gives the bits of ring_forward's O;
//!   * shard_rows gives the rows SPEC 5 defines (by hand), and a bad rank is refused naming it;
//!   * a bad shard on one rank: that rank gets its own SHAPE_MISMATCH, every other rank a COMM
//!     error naming it, and no rank's outputs are written;
//!   * a rank that never calls: the others get a COMM error after the timeout; a rank that
//!     panics: the others finish the same way, then run_comms resumes the panic;
//!   * Comm: rank, size, peak bytes; a bad num_ranks or timeout is refused naming it.
mod common;

use std::time::Duration;

use common::{assert_within, inputs, sizes, Spec};
use dilattn::ring::{self, Comm, Split};
use dilattn::{Backend, Dtype, Element, HeadMode, Plan, Shape, Tensor, TensorMut};
use dilattn_sys as sys;

struct Case {
    name: &'static str,
    shape: Shape,
    spec: Spec,
}

fn spec(branches: &[(usize, usize)], mode: HeadMode, causal: bool) -> Spec {
    Spec { branches: branches.to_vec(), mode, causal, scale: None }
}

fn shape(b: usize, n: usize, h: usize, hkv: usize, d: usize) -> Shape {
    Shape { batch: b, seqlen_q: n, seqlen_k: n, heads_q: h, heads_kv: hkv, head_dim: d }
}

fn cases() -> Vec<Case> {
    vec![
        Case { name: "dense_causal_gqa", shape: shape(2, 22, 4, 2, 5),
               spec: spec(&[], HeadMode::Mod, true) },
        Case { name: "dilated_mod", shape: shape(1, 24, 3, 3, 4),
               spec: spec(&[(6, 1), (12, 2)], HeadMode::Mod, false) },
        Case { name: "dilated_block_causal", shape: shape(1, 24, 4, 2, 3),
               spec: spec(&[(6, 2), (12, 3)], HeadMode::Block, true) },
        // N < P: some ranks hold no rows (contiguous), or hold empty chunks (zigzag).
        Case { name: "dense_causal_fewer_rows_than_ranks", shape: shape(1, 3, 2, 1, 4),
               spec: spec(&[], HeadMode::Mod, true) },
    ]
}

/// The rows `rows` (axis `axis`) of a C-order tensor of `dims`: a rank's shard.
fn gather<T: Copy>(full: &[T], dims: [usize; 4], axis: usize, rows: &[usize]) -> Vec<T> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut shard = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in rows {
            let at = (o * dims[axis] + r) * inner;
            shard.extend_from_slice(&full[at..at + inner]);
        }
    }
    shard
}

fn with_rows(dims: [usize; 4], axis: usize, rows: usize) -> [usize; 4] {
    let mut d = dims;
    d[axis] = rows;
    d
}

/// One rank's results, in f64: O, LSE [B, H, rows], dQ, dK, dV.
struct Shards {
    rows: Vec<usize>,
    outputs: [Vec<f64>; 5],
}

const OUTPUT_NAMES: [&str; 5] = ["O", "LSE", "dQ", "dK", "dV"];

fn as_f64<T: Into<f64> + Copy>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&v| v.into()).collect()
}

/// Forward then backward of this rank's shards of q, k, v, dO (full tensors in `data`).
fn rank_main<T: Element + Into<f64>, L: Element + Into<f64>>(plan: &Plan, comm: &Comm,
                                                             split: Split, data: &[Vec<T>; 4])
    -> dilattn::Result<Shards> {
    let s = plan.shape();
    let (qs, ks, ls) = sizes(&s);
    let rows = ring::shard_rows(s.seqlen_q, comm.size(), comm.rank(), split)?;
    let (qd, kd, ld) = (with_rows(qs, 1, rows.len()), with_rows(ks, 1, rows.len()),
                        with_rows(ls, 2, rows.len()));
    let [q, k, v, d_o] =
        [(0, qs), (1, ks), (2, ks), (3, qs)].map(|(t, dims)| gather(&data[t], dims, 1, &rows));
    let (q, k, v, d_o) = (Tensor::new(&q, qd)?, Tensor::new(&k, kd)?, Tensor::new(&v, kd)?,
                          Tensor::new(&d_o, qd)?);
    let mut o = vec![T::default(); qd.iter().product()];
    let mut lse = vec![L::default(); ld.iter().product()];
    let (mut o_view, mut lse_view) = (TensorMut::new(&mut o, qd)?, TensorMut::new(&mut lse, ld)?);
    plan.ring_forward(comm, split, &q, &k, &v, &mut o_view, &mut lse_view)?;
    let mut grads = [qd, kd, kd].map(|dims| vec![T::default(); dims.iter().product()]);
    let [dq, dk, dv] = &mut grads;
    plan.ring_backward(comm, split, &q, &k, &v, &o_view.as_tensor(), &lse_view.as_tensor(), &d_o,
                       &mut TensorMut::new(dq, qd)?, &mut TensorMut::new(dk, kd)?,
                       &mut TensorMut::new(dv, kd)?)?;
    let [dq, dk, dv] = grads.map(|g| as_f64(&g));
    Ok(Shards { rows, outputs: [as_f64(&o), as_f64(&lse), dq, dk, dv] })
}

/// The single-device result on the ref backend in f64: O, LSE [B, H, N, 1], dQ, dK, dV.
fn single_device(case: &Case, data: &[Vec<f64>; 4]) -> [Vec<f64>; 5] {
    let s = case.shape;
    let (qs, ks, ls) = sizes(&s);
    let plan = Plan::new(&case.spec.attention(), s, Dtype::F64, Backend::Ref).unwrap();
    let [q, k, v, d_o] = [(0, qs), (1, ks), (2, ks), (3, qs)]
        .map(|(t, dims)| Tensor::new(&data[t], dims).unwrap());
    let mut o = vec![0f64; data[0].len()];
    let mut lse = vec![0f64; ls.iter().product()];
    let (mut o_view, mut lse_view) = (TensorMut::new(&mut o, qs).unwrap(),
                                      TensorMut::new(&mut lse, ls).unwrap());
    plan.forward(&q, &k, &v, &mut o_view, &mut lse_view).unwrap();
    let [mut dq, mut dk, mut dv] = [qs, ks, ks].map(|d| vec![0f64; d.iter().product()]);
    plan.backward(&q, &k, &v, &o_view.as_tensor(), &lse_view.as_tensor(), &d_o,
                  &mut TensorMut::new(&mut dq, qs).unwrap(),
                  &mut TensorMut::new(&mut dk, ks).unwrap(),
                  &mut TensorMut::new(&mut dv, ks).unwrap()).unwrap();
    [o, lse, dq, dk, dv]
}

/// Every rank's shards against the same rows of the single-device result, within (atol, rtol)
/// for O and the gradients and `lse_tol` for the LSE.
fn check_ranks(what: &str, s: &Shape, ranks: Vec<dilattn::Result<Shards>>,
               want: &[Vec<f64>; 5], tol: (f64, f64), lse_tol: (f64, f64)) {
    let (qs, ks, ls) = sizes(s);
    for (p, rank) in ranks.into_iter().enumerate() {
        let got = rank.unwrap_or_else(|e| panic!("{what}: rank {p}: {e}"));
        let layouts = [(qs, 1), (ls, 2), (qs, 1), (ks, 1), (ks, 1)];
        for (t, &(dims, axis)) in layouts.iter().enumerate() {
            let expected = gather(&want[t], dims, axis, &got.rows);
            let (a, r) = if t == 1 { lse_tol } else { tol };
            assert_within(&format!("{what} rank {p} {}", OUTPUT_NAMES[t]), &got.outputs[t],
                          &expected, a, r);
        }
    }
}

#[test]
fn every_ranks_shard_equals_the_single_device_rows() {
    for case in cases() {
        let data = inputs(&case.shape, 5);
        let data32 = data.clone().map(|x| x.iter().map(|&v| v as f32).collect::<Vec<f32>>());
        let rounded = data32.clone().map(|x| as_f64(&x));
        let want = single_device(&case, &data);
        let want_rounded = single_device(&case, &rounded);
        let cpu = Plan::new(&case.spec.attention(), case.shape, Dtype::F32, Backend::Cpu).unwrap();
        let exact =
            Plan::new(&case.spec.attention(), case.shape, Dtype::F64, Backend::Ref).unwrap();
        for p in 1..=4 {
            for split in [Split::Contiguous, Split::Zigzag] {
                let what = format!("{} P={p} {split:?}", case.name);
                let ranks = ring::run_threads(p, |comm| {
                    rank_main::<f32, f32>(&cpu, comm, split, &data32)
                }).unwrap();
                // SPEC 8, f32: atol 1e-5, rtol 1e-4; LSE absolute 1e-4.
                check_ranks(&format!("{what} cpu f32"), &case.shape, ranks, &want_rounded,
                            (1e-5, 1e-4), (1e-4, 0.0));
                let ranks = ring::run_threads(p, |comm| {
                    rank_main::<f64, f64>(&exact, comm, split, &data)
                }).unwrap();
                check_ranks(&format!("{what} ref f64"), &case.shape, ranks, &want, (1e-12, 1e-12),
                            (1e-12, 1e-12));
            }
        }
    }
}

#[test]
fn ring_backward_is_bitwise_the_same_on_a_second_run() {
    let case = &cases()[2];
    let data = inputs(&case.shape, 6).map(|x| x.iter().map(|&v| v as f32).collect::<Vec<f32>>());
    let plan = Plan::new(&case.spec.attention(), case.shape, Dtype::F32, Backend::Cpu).unwrap();
    let run = || -> Vec<[Vec<u64>; 5]> {
        ring::run_threads(3, |comm| rank_main::<f32, f32>(&plan, comm, Split::Zigzag, &data))
            .unwrap().into_iter()
            .map(|r| r.unwrap().outputs.map(|x| x.iter().map(|v| v.to_bits()).collect()))
            .collect()
    };
    assert!(run() == run(), "two runs of the same ring differ");
}

#[test]
fn ring_forward_output_gives_the_o_of_ring_forward() {
    let case = &cases()[2];
    let s = case.shape;
    let data = inputs(&s, 9).map(|x| x.iter().map(|&v| v as f32).collect::<Vec<f32>>());
    let plan = Plan::new(&case.spec.attention(), s, Dtype::F32, Backend::Cpu).unwrap();
    let (qs, ks, _) = sizes(&s);
    let same = ring::run_threads(2, |comm| {
        let rows = ring::shard_rows(s.seqlen_q, 2, comm.rank(), Split::Zigzag).unwrap();
        let (qd, kd) = (with_rows(qs, 1, rows.len()), with_rows(ks, 1, rows.len()));
        let [q, k, v] = [(0, qs), (1, ks), (2, ks)].map(|(t, d)| gather(&data[t], d, 1, &rows));
        let (q, k, v) = (Tensor::new(&q, qd).unwrap(), Tensor::new(&k, kd).unwrap(),
                         Tensor::new(&v, kd).unwrap());
        let mut with_lse = vec![0f32; q.shape().iter().product()];
        let mut lse = vec![0f32; s.heads_q * rows.len()];
        plan.ring_forward(comm, Split::Zigzag, &q, &k, &v,
                          &mut TensorMut::new(&mut with_lse, qd).unwrap(),
                          &mut TensorMut::new(&mut lse, [1, s.heads_q, rows.len(), 1]).unwrap())
            .unwrap();
        let mut alone = vec![7f32; with_lse.len()];
        plan.ring_forward_output(comm, Split::Zigzag, &q, &k, &v,
                                 &mut TensorMut::new(&mut alone, qd).unwrap()).unwrap();
        with_lse.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits())
    }).unwrap();
    assert_eq!(same, [true, true], "O without the LSE differs from O with it");
}

#[test]
fn shard_rows_by_hand() {
    let rows = |n, p, r, split| ring::shard_rows(n, p, r, split).unwrap();
    assert_eq!(rows(10, 3, 0, Split::Contiguous), [0, 1, 2]);
    assert_eq!(rows(10, 3, 2, Split::Contiguous), [6, 7, 8, 9]);
    assert_eq!(rows(3, 4, 0, Split::Contiguous), Vec::<usize>::new());
    // zigzag: 2P = 4 chunks of 10 rows (2, 3, 2, 3); rank 0 holds chunks 0 and 3, in that order
    assert_eq!(rows(10, 2, 0, Split::Zigzag), [0, 1, 7, 8, 9]);
    assert_eq!(rows(10, 2, 1, Split::Zigzag), [2, 3, 4, 5, 6]);
    assert_eq!(ring::shard_ranges(10, 2, 0, Split::Zigzag).unwrap(), [0..2, 7..10]);
    assert_eq!(ring::shard_ranges(10, 3, 1, Split::Contiguous).unwrap(), [3..6, 0..0]);
    let e = ring::shard_rows(10, 3, 3, Split::Contiguous).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("'rank' = 3"), "{}", e.message());
}

#[test]
fn a_bad_shard_on_one_rank_fails_every_rank_and_writes_nothing() {
    let (p, bad, n) = (3, 1, 12);
    let s = shape(1, n, 2, 2, 4);
    let plan = Plan::new(&spec(&[], HeadMode::Mod, false).attention(), s, Dtype::F64,
                         Backend::Ref).unwrap();
    let [q, k, v, _] = inputs(&s, 7);
    let (qs, ks, _) = sizes(&s);
    let results = ring::run_threads(p, |comm| {
        let mut rows = ring::shard_rows(n, p, comm.rank(), Split::Contiguous).unwrap();
        let kv_rows = rows.clone();
        if comm.rank() == bad {
            rows.push(rows[rows.len() - 1]); // one Q row too many
        }
        let q = gather(&q, qs, 1, &rows);
        let (k, v) = (gather(&k, ks, 1, &kv_rows), gather(&v, ks, 1, &kv_rows));
        let (qd, kd) = ([1, rows.len(), 2, 4], [1, kv_rows.len(), 2, 4]);
        let mut o = vec![7.0f64; q.len()];
        let mut lse = vec![7.0f64; 2 * rows.len()];
        let status = plan.ring_forward(comm, Split::Contiguous, &Tensor::new(&q, qd).unwrap(),
                                       &Tensor::new(&k, kd).unwrap(), &Tensor::new(&v, kd).unwrap(),
                                       &mut TensorMut::new(&mut o, qd).unwrap(),
                                       &mut TensorMut::new(&mut lse, [1, 2, rows.len(), 1])
                                           .unwrap());
        (status, o.iter().chain(&lse).all(|&x| x == 7.0))
    }).unwrap();
    for (r, (status, untouched)) in results.into_iter().enumerate() {
        let e = status.expect_err(&format!("rank {r} must fail"));
        if r == bad {
            assert_eq!(e.status_name(), "DILATTN_ERROR_SHAPE_MISMATCH", "rank {r}: {e}");
            assert!(e.message().contains("'q'"), "rank {r}: {e}");
        } else {
            assert_eq!(e.status(), sys::DILATTN_ERROR_COMM, "rank {r}: {e}");
            assert!(e.message().contains(&format!("rank {bad} failed")), "rank {r}: {e}");
        }
        assert!(untouched, "rank {r}: outputs must stay untouched");
    }
}

#[test]
fn a_rank_that_never_calls_times_the_others_out() {
    let s = shape(1, 8, 1, 1, 2);
    let plan = Plan::new(&spec(&[], HeadMode::Mod, false).attention(), s, Dtype::F64,
                         Backend::Ref).unwrap();
    let comms = Comm::threads(2, Duration::from_millis(200)).unwrap();
    let results = ring::run_comms(comms, |comm| {
        if comm.rank() == 1 {
            return None; // never arrives
        }
        let x = vec![0.5f64; 4 * 2];
        let (mut o, mut lse) = (vec![0f64; 8], vec![0f64; 4]);
        let t = Tensor::new(&x, [1, 4, 1, 2]).unwrap();
        Some(plan.ring_forward(comm, Split::Contiguous, &t, &t, &t,
                               &mut TensorMut::new(&mut o, [1, 4, 1, 2]).unwrap(),
                               &mut TensorMut::new(&mut lse, [1, 1, 4, 1]).unwrap()))
    });
    let e = results[0].clone().unwrap().unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_COMM, "{e}");
    assert!(e.message().contains("rank(s) 1"), "{e}");
}

#[test]
fn a_rank_that_panics_is_resumed_after_the_others_time_out() {
    let s = shape(1, 8, 1, 1, 2);
    let plan = Plan::new(&spec(&[], HeadMode::Mod, false).attention(), s, Dtype::F64,
                         Backend::Ref).unwrap();
    let outcome = std::sync::Mutex::new(None);
    let comms = Comm::threads(2, Duration::from_millis(200)).unwrap();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ring::run_comms(comms, |comm| {
            if comm.rank() == 1 {
                panic!("rank 1 gives up");
            }
            let x = vec![0.5f64; 8];
            let mut o = vec![0f64; 8];
            let t = Tensor::new(&x, [1, 4, 1, 2]).unwrap();
            let status = plan.ring_forward_output(comm, Split::Contiguous, &t, &t, &t,
                                                  &mut TensorMut::new(&mut o, [1, 4, 1, 2])
                                                      .unwrap());
            *outcome.lock().unwrap() = Some(status);
        })
    }));
    let payload = run.expect_err("the panic of rank 1 must reach the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"rank 1 gives up"));
    let status = outcome.lock().unwrap().take().expect("rank 0 must have finished");
    assert_eq!(status.unwrap_err().status(), sys::DILATTN_ERROR_COMM);
}

/// The peak bytes of every rank of a P-rank ring forward and backward of dense attention over
/// n rows (ref backend, f64, H = Hkv = 2, D = 4).
fn ring_peaks(p: usize, n: usize) -> Vec<usize> {
    let s = shape(1, n, 2, 2, 4);
    let plan = Plan::new(&spec(&[], HeadMode::Mod, false).attention(), s, Dtype::F64,
                         Backend::Ref).unwrap();
    let data = inputs(&s, 8);
    ring::run_threads(p, |comm| {
        rank_main::<f64, f64>(&plan, comm, Split::Contiguous, &data).unwrap();
        comm.peak_bytes().unwrap()
    }).unwrap()
}

#[test]
fn comm_knows_its_rank_size_and_peak_bytes() {
    let comms = Comm::threads(3, ring::DEFAULT_TIMEOUT).unwrap();
    assert_eq!(comms.iter().map(|c| (c.rank(), c.size())).collect::<Vec<_>>(),
               [(0, 3), (1, 3), (2, 3)]);
    assert_eq!(comms[0].peak_bytes().unwrap(), 0, "no ring call yet");
    // Dense, not causal: a rank reads the other's K and V rows, so it holds at least one
    // received K/V chunk at once; and memory per rank is O(N/P) (SPEC 5): four times the rows
    // at most four times the bytes, twice the ranks fewer bytes.
    let (small, large, large_4) = (ring_peaks(2, 64), ring_peaks(2, 256), ring_peaks(4, 256));
    let chunk_bytes = 2 * 32 * 2 * 4 * std::mem::size_of::<f64>(); // K and V rows of a rank
    for r in 0..2 {
        assert!(small[r] >= chunk_bytes, "rank {r}: peak {} < one K/V chunk {chunk_bytes}",
                small[r]);
        assert!(large[r] > small[r] && large[r] <= 4 * small[r],
                "rank {r}: peak {} for 256 rows, {} for 64", large[r], small[r]);
        assert!(large_4[r] < large[r], "rank {r}: peak {} on 4 ranks, {} on 2", large_4[r],
                large[r]);
    }
}

#[test]
fn bad_communicator_arguments_are_named() {
    let e = Comm::threads(0, ring::DEFAULT_TIMEOUT).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("'num_ranks' = 0"), "{}", e.message());
    let e = Comm::threads(2, Duration::ZERO).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("'timeout_ms' = 0"), "{}", e.message());
    let e = Comm::threads(1 << 40, ring::DEFAULT_TIMEOUT).unwrap_err();
    assert!(e.message().contains("'num_ranks' = 1099511627776"), "{}", e.message());
    // In int32 but beyond the library's bound on ranks.
    let e = Comm::threads(i32::MAX as usize, ring::DEFAULT_TIMEOUT).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("'num_ranks' = 2147483647"), "{}", e.message());
    // A timeout under a millisecond is rounded up to one, not refused.
    assert_eq!(Comm::threads(1, Duration::from_micros(1)).unwrap().len(), 1);
}
