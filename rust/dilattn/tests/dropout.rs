//! Attention dropout (SPEC 11) on the ref backend through Plan::forward_dropout and
//! Plan::backward_dropout: the mask seen through O (q = 0 and v_j = e_j make element j of O_i
//! equal P_ij M_ij: 0 for a dropped pair, 1 / (Nk (1 - p)) for a kept one), the fraction dropped
//! within 5 binomial sigma, seed and offset selecting the mask, p = 0 giving the plain call's
//! bits, the cpu backend dropping exactly the pairs ref drops, and the refusals. The numbers against an independent Philox are checked by the Python
//! tests (tests/packages/python/test_dropout.py).
use dilattn::{Attention, Backend, Dtype, Plan, Shape, Tensor, TensorMut};
use dilattn_sys as sys;

const N: usize = 36; // keys = head_dim, so v_j can be the unit vector e_j

fn probe_inputs() -> (Vec<f64>, Vec<f64>, Shape) {
    let s = Shape::self_attention(2, N, 2, N);
    let q = vec![0.0; s.batch * N * s.heads_q * N];
    let mut v = vec![0.0; s.batch * N * s.heads_kv * N];
    for b in 0..s.batch {
        for j in 0..N {
            for g in 0..s.heads_kv {
                v[((b * N + j) * s.heads_kv + g) * N + j] = 1.0;
            }
        }
    }
    (q, v, s)
}

/// O of the probe (q = 0, k = 0, v_j = e_j) with dropout p, seed, offset.
fn probe(p: f64, seed: u64, offset: u64) -> Vec<f64> {
    probe_on(Backend::Ref, p, seed, offset)
}

fn probe_on(backend: Backend, p: f64, seed: u64, offset: u64) -> Vec<f64> {
    let (q, v, s) = probe_inputs();
    let plan = Plan::new(&Attention::dense().dropout(p), s, Dtype::F64, backend).unwrap();
    let shape = [s.batch, N, s.heads_q, N];
    let (qt, vt) = (Tensor::new(&q, shape).unwrap(), Tensor::new(&v, shape).unwrap());
    let mut o = vec![f64::NAN; q.len()];
    let mut lse = vec![f64::NAN; s.batch * s.heads_q * N];
    let mut ov = TensorMut::new(&mut o, shape).unwrap();
    let mut lv = TensorMut::new(&mut lse, [s.batch, s.heads_q, N, 1]).unwrap();
    plan.forward_dropout(seed, offset, &qt, &qt, &vt, &mut ov, &mut lv).unwrap();
    for l in lse {
        assert!((l - (N as f64).ln()).abs() < 1e-12, "LSE must be unaffected: {l}");
    }
    o
}

#[test]
fn fraction_dropped_and_kept_values() {
    for p in [0.1, 0.5, 0.9] {
        let o = probe(p, 0xDEADBEEF, 3);
        let kept = 1.0 / (N as f64 * (1.0 - p));
        let dropped = o.iter().filter(|&&x| x == 0.0).count();
        assert!(o.iter().all(|&x| x == 0.0 || (x - kept).abs() < 1e-14));
        let n = o.len() as f64;
        let sigma = (p * (1.0 - p) / n).sqrt();
        let fraction = dropped as f64 / n;
        assert!((fraction - p).abs() <= 5.0 * sigma, "p={p}: dropped {fraction}");
    }
}

#[test]
fn cpu_drops_the_pairs_ref_drops() {
    for p in [0.1, 0.5, 0.9] {
        let want = probe(p, 0x1234_5678_9ABC, 4);
        let got = probe_on(Backend::Cpu, p, 0x1234_5678_9ABC, 4);
        assert!(want.iter().zip(&got).all(|(w, g)| (*w == 0.0) == (*g == 0.0)), "p={p}");
        assert!(want.iter().zip(&got).all(|(w, g)| (w - g).abs() <= 1e-10 * (1.0 + w.abs())));
    }
}

#[test]
fn seed_and_offset_select_the_mask() {
    let base = probe(0.5, 7, 1);
    assert_eq!(base, probe(0.5, 7, 1));
    assert_ne!(base, probe(0.5, 7, 2));
    assert_ne!(base, probe(0.5, 8, 1));
}

#[test]
fn p_zero_equals_the_plain_call_bitwise() {
    let s = Shape::self_attention(1, 10, 2, 3);
    let n = 10 * 2 * 3;
    let data: Vec<f64> = (0..n).map(|x| ((x * 37 % 11) as f64 - 5.0) / 7.0).collect();
    let shape = [1, 10, 2, 3];
    let t = Tensor::new(&data, shape).unwrap();
    let plan = Plan::new(&Attention::dense().causal(true).dropout(0.0), s, Dtype::F64,
                         Backend::Ref).unwrap();
    let (mut o1, mut o2) = (vec![0.0; n], vec![0.0; n]);
    let (mut l1, mut l2) = (vec![0.0; 20], vec![0.0; 20]);
    plan.forward(&t, &t, &t, &mut TensorMut::new(&mut o1, shape).unwrap(),
                 &mut TensorMut::new(&mut l1, [1, 2, 10, 1]).unwrap()).unwrap();
    plan.forward_dropout(99, 5, &t, &t, &t, &mut TensorMut::new(&mut o2, shape).unwrap(),
                         &mut TensorMut::new(&mut l2, [1, 2, 10, 1]).unwrap()).unwrap();
    assert_eq!(o1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
               o2.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert_eq!(l1, l2);
}

#[test]
fn refusals() {
    let s = Shape::self_attention(1, 8, 1, 2);
    // The cpu backend runs dropout (its plan is made); the calls without a seed are refused.
    let cpu = Plan::new(&Attention::dense().dropout(0.1), s, Dtype::F64, Backend::Cpu).unwrap();
    let e = Plan::new(&Attention::dense().dropout(1.0), s, Dtype::F32, Backend::Ref).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    let plan = Plan::new(&Attention::dense().dropout(0.1), s, Dtype::F64, Backend::Ref).unwrap();
    let data = vec![0.5; 16];
    let t = Tensor::new(&data, [1, 8, 1, 2]).unwrap();
    let (mut o, mut l) = (vec![0.0; 16], vec![0.0; 8]);
    let mut ov = TensorMut::new(&mut o, [1, 8, 1, 2]).unwrap();
    let mut lv = TensorMut::new(&mut l, [1, 1, 8, 1]).unwrap();
    let e = plan.forward(&t, &t, &t, &mut ov, &mut lv).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    let e = cpu.forward(&t, &t, &t, &mut ov, &mut lv).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("dilattn_forward_ex"), "{}", e.message());
    let e = plan.forward_dropout(1, 1 << 32, &t, &t, &t, &mut ov, &mut lv).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("dropout_offset"), "{}", e.message());
}
