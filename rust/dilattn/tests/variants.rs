//! The variants of SPEC 10 through the safe crate, on the ref backend: sliding windows, softcap,
//! ALiBi, packed (varlen) batches and sinks, each checked against an independent computation
//! (the dense softmax of SPEC 2 written out below, or the same problem run another way); the
//! cpu backend against ref on each; their refusals with the library's status and message.
use dilattn::{Attention, Backend, CallOptions, Dtype, Plan, Shape, Tensor, TensorMut};
use dilattn_sys as sys;

/// Seeded values in [-amplitude, amplitude).
fn values(count: usize, seed: u64, amplitude: f64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * amplitude
        })
        .collect()
}

fn bits(x: &[f64]) -> Vec<u64> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn max_difference(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Self-attention inputs Q, K, V [1, n, h, d].
struct Problem {
    n: usize,
    h: usize,
    d: usize,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

impl Problem {
    fn new(n: usize, h: usize, d: usize, amplitude: f64, seed: u64) -> Problem {
        let count = n * h * d;
        Problem { n, h, d, q: values(count, seed, amplitude), k: values(count, seed + 1, amplitude),
                  v: values(count, seed + 2, 1.0) }
    }

    fn shape(&self) -> Shape {
        Shape::self_attention(1, self.n, self.h, self.d)
    }

    fn plan(&self, attention: &Attention) -> Plan {
        Plan::new(attention, self.shape(), Dtype::F64, Backend::Ref).unwrap()
    }

    /// (O, LSE) of the plan with these call options.
    fn forward(&self, plan: &Plan, options: &CallOptions) -> (Vec<f64>, Vec<f64>) {
        let dims = [1, self.n, self.h, self.d];
        let mut o = vec![f64::NAN; self.q.len()];
        let mut lse = vec![f64::NAN; self.h * self.n];
        plan.forward_ex(options, &Tensor::new(&self.q, dims).unwrap(),
                        &Tensor::new(&self.k, dims).unwrap(), &Tensor::new(&self.v, dims).unwrap(),
                        &mut TensorMut::new(&mut o, dims).unwrap(),
                        &mut TensorMut::new(&mut lse, [1, self.h, self.n, 1]).unwrap())
            .unwrap();
        (o, lse)
    }

    /// The dense softmax of SPEC 2 with the scores of SPEC 10.1 and the sink of SPEC 10.3
    /// (scale 1/sqrt(d), no causal rule): row i of head h attends keys j with
    /// |i - j| inside the window, S = softcap(scale <q, k>) - slope_h |i - j|.
    fn reference(&self, window: usize, softcap: f64, slopes: &[f64], sinks: &[f64])
        -> (Vec<f64>, Vec<f64>) {
        let (n, h, d) = (self.n, self.h, self.d);
        let scale = 1.0 / (d as f64).sqrt();
        let mut o = vec![0.0; n * h * d];
        let mut lse = vec![0.0; h * n];
        for head in 0..h {
            for i in 0..n {
                let at = |x: &[f64], row: usize| x[(row * h + head) * d..][..d].to_vec();
                let qi = at(&self.q, i);
                let mut terms = Vec::new(); // (score, key)
                for j in 0..n {
                    if i.abs_diff(j) > window {
                        continue;
                    }
                    let raw = scale * qi.iter().zip(at(&self.k, j)).map(|(a, b)| a * b)
                        .sum::<f64>();
                    let capped = if softcap > 0.0 { softcap * (raw / softcap).tanh() } else { raw };
                    let slope = slopes.get(head).copied().unwrap_or(0.0);
                    terms.push((capped - slope * i.abs_diff(j) as f64, j));
                }
                let sink = sinks.get(head).copied().unwrap_or(f64::NEG_INFINITY);
                let max = terms.iter().map(|t| t.0).fold(sink, f64::max);
                let z = terms.iter().map(|t| (t.0 - max).exp()).sum::<f64>() + (sink - max).exp();
                for (s, j) in &terms {
                    let p = (s - max).exp() / z;
                    for (c, vj) in at(&self.v, *j).iter().enumerate() {
                        o[(i * h + head) * d + c] += p * vj;
                    }
                }
                lse[head * n + i] = max + z.ln();
            }
        }
        (o, lse)
    }
}

const NO_OPTIONS: CallOptions = CallOptions { dropout_seed: 0, dropout_offset: 0, sinks: None,
                                              progress: None };

#[test]
fn a_window_covering_every_key_equals_no_window_bitwise() {
    let p = Problem::new(9, 2, 4, 1.0, 11);
    for causal in [false, true] {
        let plain = p.forward(&p.plan(&Attention::dense().causal(causal)), &NO_OPTIONS);
        let wide = p.plan(&Attention::dense().causal(causal).window(Some(8), Some(8)));
        assert_eq!(wide.backend(), Backend::Ref);
        let windowed = p.forward(&wide, &NO_OPTIONS);
        assert_eq!(bits(&plain.0), bits(&windowed.0));
        assert_eq!(bits(&plain.1), bits(&windowed.1));
        let unbounded = p.forward(&p.plan(&Attention::dense().causal(causal).window(None, None)),
                                  &NO_OPTIONS);
        assert_eq!(bits(&plain.0), bits(&unbounded.0));
    }
}

#[test]
fn a_window_of_two_matches_the_reference() {
    let p = Problem::new(11, 2, 3, 1.0, 12);
    let (o, lse) = p.forward(&p.plan(&Attention::dense().window(Some(2), Some(2))), &NO_OPTIONS);
    let (o_ref, lse_ref) = p.reference(2, 0.0, &[], &[]);
    assert!(max_difference(&o, &o_ref) < 1e-13, "{}", max_difference(&o, &o_ref));
    assert!(max_difference(&lse, &lse_ref) < 1e-13);
    // A one-sided window differs from it.
    let (left_only, _) = p.forward(&p.plan(&Attention::dense().window(Some(2), Some(0))),
                                   &NO_OPTIONS);
    assert!(max_difference(&left_only, &o_ref) > 1e-3);
}

#[test]
fn softcap_on_tiny_scores_is_almost_none_and_on_large_ones_matches_the_reference() {
    let tiny = Problem::new(8, 2, 4, 1e-3, 21);
    let (plain, _) = tiny.forward(&tiny.plan(&Attention::dense()), &NO_OPTIONS);
    let (capped, _) = tiny.forward(&tiny.plan(&Attention::dense().softcap(1.0)), &NO_OPTIONS);
    // tanh(x) = x - x^3/3: scores near 1e-6 move by about 1e-19.
    assert!(max_difference(&plain, &capped) < 1e-15, "{}", max_difference(&plain, &capped));

    let large = Problem::new(8, 2, 4, 3.0, 22);
    let (plain, _) = large.forward(&large.plan(&Attention::dense()), &NO_OPTIONS);
    let (capped, lse) = large.forward(&large.plan(&Attention::dense().softcap(0.5)), &NO_OPTIONS);
    let (o_ref, lse_ref) = large.reference(usize::MAX, 0.5, &[], &[]);
    assert!(max_difference(&capped, &o_ref) < 1e-13, "{}", max_difference(&capped, &o_ref));
    assert!(max_difference(&lse, &lse_ref) < 1e-13);
    assert!(max_difference(&plain, &capped) > 1e-2, "{}", max_difference(&plain, &capped));
}

#[test]
fn alibi_matches_the_reference() {
    let p = Problem::new(10, 2, 4, 1.0, 31);
    let slopes = [0.5, 0.125];
    let (o, lse) = p.forward(&p.plan(&Attention::dense().alibi(&slopes)), &NO_OPTIONS);
    let (o_ref, lse_ref) = p.reference(usize::MAX, 0.0, &slopes, &[]);
    assert!(max_difference(&o, &o_ref) < 1e-13, "{}", max_difference(&o, &o_ref));
    assert!(max_difference(&lse, &lse_ref) < 1e-13);
    let (plain, _) = p.reference(usize::MAX, 0.0, &[], &[]);
    assert!(max_difference(&o, &plain) > 1e-2);
}

/// (O, LSE, dQ, dK, dV) of one forward and backward with dO = `d_o`.
fn forward_backward(attention: &Attention, shape: Shape, q: &[f64], k: &[f64], v: &[f64],
                    d_o: &[f64]) -> [Vec<f64>; 5] {
    let plan = Plan::new(attention, shape, Dtype::F64, Backend::Ref).unwrap();
    let qd = [shape.batch, shape.seqlen_q, shape.heads_q, shape.head_dim];
    let kd = [shape.batch, shape.seqlen_k, shape.heads_kv, shape.head_dim];
    let ld = [shape.batch, shape.heads_q, shape.seqlen_q, 1];
    let (qt, kt, vt) = (Tensor::new(q, qd).unwrap(), Tensor::new(k, kd).unwrap(),
                        Tensor::new(v, kd).unwrap());
    let mut o = vec![f64::NAN; q.len()];
    let mut lse = vec![f64::NAN; ld.iter().product()];
    plan.forward(&qt, &kt, &vt, &mut TensorMut::new(&mut o, qd).unwrap(),
                 &mut TensorMut::new(&mut lse, ld).unwrap()).unwrap();
    let (mut dq, mut dk, mut dv) = (vec![f64::NAN; q.len()], vec![f64::NAN; k.len()],
                                    vec![f64::NAN; v.len()]);
    plan.backward(&qt, &kt, &vt, &Tensor::new(&o, qd).unwrap(), &Tensor::new(&lse, ld).unwrap(),
                  &Tensor::new(d_o, qd).unwrap(), &mut TensorMut::new(&mut dq, qd).unwrap(),
                  &mut TensorMut::new(&mut dk, kd).unwrap(),
                  &mut TensorMut::new(&mut dv, kd).unwrap()).unwrap();
    [o, lse, dq, dk, dv]
}

#[test]
fn a_packed_batch_equals_its_sequences_run_alone_bitwise() {
    // Two sequences: 5 query rows over 7 keys, then 6 over 6 (causal, bottom-right per sequence).
    let (h, hkv, d) = (4, 2, 3);
    let (lengths_q, lengths_k) = ([5, 6], [7, 6]);
    let (total_q, total_k) = (11, 13);
    let q = values(total_q * h * d, 41, 1.0);
    let k = values(total_k * hkv * d, 42, 1.0);
    let v = values(total_k * hkv * d, 43, 1.0);
    let d_o = values(total_q * h * d, 44, 1.0);
    let packed_shape = Shape { batch: 1, seqlen_q: total_q, seqlen_k: total_k, heads_q: h,
                               heads_kv: hkv, head_dim: d };
    let packed_attention = Attention::dense().causal(true).varlen(&[0, 5, 11], &[0, 7, 13]);
    let packed = forward_backward(&packed_attention, packed_shape, &q, &k, &v, &d_o);

    let (mut q0, mut k0) = (0, 0);
    for b in 0..2 {
        let (nq, nk) = (lengths_q[b], lengths_k[b]);
        let shape = Shape { batch: 1, seqlen_q: nq, seqlen_k: nk, heads_q: h, heads_kv: hkv,
                            head_dim: d };
        let rows_q = q0 * h * d..(q0 + nq) * h * d;
        let rows_k = k0 * hkv * d..(k0 + nk) * hkv * d;
        let alone = forward_backward(&Attention::dense().causal(true), shape, &q[rows_q.clone()],
                                     &k[rows_k.clone()], &v[rows_k.clone()], &d_o[rows_q.clone()]);
        assert_eq!(bits(&packed[0][rows_q.clone()]), bits(&alone[0]), "O of sequence {b}");
        for head in 0..h {
            let packed_lse = &packed[1][head * total_q + q0..][..nq];
            assert_eq!(bits(packed_lse), bits(&alone[1][head * nq..][..nq]), "LSE of {b}");
        }
        assert_eq!(bits(&packed[2][rows_q.clone()]), bits(&alone[2]), "dQ of sequence {b}");
        assert_eq!(bits(&packed[3][rows_k.clone()]), bits(&alone[3]), "dK of sequence {b}");
        assert_eq!(bits(&packed[4][rows_k.clone()]), bits(&alone[4]), "dV of sequence {b}");
        q0 += nq;
        k0 += nk;
    }
}

#[test]
fn a_very_negative_sink_is_almost_none_and_a_finite_one_matches_the_reference() {
    let p = Problem::new(7, 3, 4, 1.0, 51);
    let plan = p.plan(&Attention::dense().sinks(true));
    let far = [-1e3; 3];
    let (o_far, lse_far) = p.forward(&plan, &CallOptions { sinks: Some(&far), ..NO_OPTIONS });
    let (plain, plain_lse) = p.forward(&p.plan(&Attention::dense()), &NO_OPTIONS);
    assert!(max_difference(&o_far, &plain) < 1e-15);
    assert!(max_difference(&lse_far, &plain_lse) < 1e-15);

    let sinks = [0.7, -0.4, 1.5];
    let (o, lse) = p.forward(&plan, &CallOptions { sinks: Some(&sinks), ..NO_OPTIONS });
    let (o_ref, lse_ref) = p.reference(usize::MAX, 0.0, &[], &sinks);
    assert!(max_difference(&o, &o_ref) < 1e-13, "{}", max_difference(&o, &o_ref));
    assert!(max_difference(&lse, &lse_ref) < 1e-13);
    assert!(max_difference(&o, &plain) > 1e-2);
}

#[test]
fn the_sinks_gradient_matches_a_finite_difference() {
    let p = Problem::new(6, 2, 3, 1.0, 61);
    let plan = p.plan(&Attention::dense().causal(true).sinks(true));
    let d_o = values(p.q.len(), 62, 1.0);
    let loss = |sinks: &[f64]| -> f64 {
        let (o, _) = p.forward(&plan, &CallOptions { sinks: Some(sinks), ..NO_OPTIONS });
        o.iter().zip(&d_o).map(|(a, b)| a * b).sum()
    };
    let sinks = [0.3, -0.8];
    let options = CallOptions { sinks: Some(&sinks), ..NO_OPTIONS };
    let (o, lse) = p.forward(&plan, &options);
    let dims = [1, p.n, p.h, p.d];
    let (mut dq, mut dk, mut dv) = (vec![0.0; p.q.len()], vec![0.0; p.k.len()],
                                    vec![0.0; p.v.len()]);
    let d_sinks = plan.backward_ex(&options, &Tensor::new(&p.q, dims).unwrap(),
                                   &Tensor::new(&p.k, dims).unwrap(),
                                   &Tensor::new(&p.v, dims).unwrap(),
                                   &Tensor::new(&o, dims).unwrap(),
                                   &Tensor::new(&lse, [1, p.h, p.n, 1]).unwrap(),
                                   &Tensor::new(&d_o, dims).unwrap(),
                                   &mut TensorMut::new(&mut dq, dims).unwrap(),
                                   &mut TensorMut::new(&mut dk, dims).unwrap(),
                                   &mut TensorMut::new(&mut dv, dims).unwrap())
        .unwrap()
        .expect("d_sinks for a call with sinks");
    assert_eq!(d_sinks.len(), 2);
    let epsilon = 1e-5;
    for head in 0..2 {
        let (mut up, mut down) = (sinks, sinks);
        up[head] += epsilon;
        down[head] -= epsilon;
        let numeric = (loss(&up) - loss(&down)) / (2.0 * epsilon);
        assert!((d_sinks[head] - numeric).abs() < 1e-8,
                "head {head}: d_sinks {} vs finite difference {numeric}", d_sinks[head]);
        assert!(numeric.abs() > 1e-3, "the check needs a gradient that is not ~0: {numeric}");
    }
}

#[test]
fn dropout_through_call_options() {
    let p = Problem::new(9, 2, 4, 1.0, 81);
    let (plain, plain_lse) = p.forward(&p.plan(&Attention::dense()), &NO_OPTIONS);
    let options = |seed, offset| CallOptions { dropout_seed: seed, dropout_offset: offset,
                                               ..NO_OPTIONS };
    let (none, none_lse) = p.forward(&p.plan(&Attention::dense().dropout(0.0)), &options(3, 4));
    assert_eq!(bits(&plain), bits(&none));
    assert_eq!(bits(&plain_lse), bits(&none_lse));
    let plan = p.plan(&Attention::dense().dropout(0.5));
    let (first, lse) = p.forward(&plan, &options(3, 4));
    assert_eq!(bits(&first), bits(&p.forward(&plan, &options(3, 4)).0));
    assert_eq!(bits(&lse), bits(&plain_lse), "dropout leaves the LSE alone (SPEC 11)");
    assert!(max_difference(&first, &plain) > 1e-2);
    assert!(max_difference(&first, &p.forward(&plan, &options(5, 4)).0) > 1e-2);
    assert!(max_difference(&first, &p.forward(&plan, &options(3, 5)).0) > 1e-2);
}

#[test]
fn refusals_carry_the_library_status_and_message() {
    let s = Shape::self_attention(1, 8, 2, 4);
    let plan_error = |a: Attention, backend: Backend| {
        Plan::new(&a, s, Dtype::F64, backend).unwrap_err()
    };
    // The cpu backend runs every option (f64 computed in f64: SPEC 12's 1e-10 of ref), and
    // AUTO takes a fast backend for them.
    let p = Problem::new(8, 2, 4, 1.0, 21);
    let sinks = [0.3, -0.2];
    for (attention, option) in [(Attention::dense().window(Some(1), None), "window"),
                                (Attention::dense().softcap(0.5), "softcap"),
                                (Attention::dense().alibi(&[0.1, 0.2]), "ALiBi"),
                                (Attention::dense().sinks(true), "sinks"),
                                (Attention::dense().varlen(&[0, 3, 8], &[0, 3, 8]), "varlen")] {
        let options = CallOptions { sinks: (option == "sinks").then_some(&sinks[..]), ..NO_OPTIONS };
        let cpu = Plan::new(&attention, s, Dtype::F64, Backend::Cpu).unwrap();
        let (o_cpu, lse_cpu) = p.forward(&cpu, &options);
        let (o_ref, lse_ref) = p.forward(&p.plan(&attention), &options);
        assert!(max_difference(&o_cpu, &o_ref) < 1e-10, "{option}");
        assert!(max_difference(&lse_cpu, &lse_ref) < 1e-10, "{option}");
        let auto = Plan::new(&attention, s, Dtype::F64, Backend::Auto).unwrap();
        assert_ne!(auto.backend(), Backend::Ref, "{option}");
    }

    let e = plan_error(Attention::dense().softcap(-1.0), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("softcap"), "{}", e.message());
    let e = plan_error(Attention::dense().alibi(&[0.1, f64::NAN]), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("slopes[1] = nan"), "{}", e.message());
    let e = plan_error(Attention::dense().alibi(&[0.1, 0.2, 0.3]), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);

    let e = plan_error(Attention::dense().varlen(&[0, 5, 3, 8], &[0, 5, 6, 8]), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("cu_seqlens_q[2] = 3 is below cu_seqlens_q[1] = 5"),
            "{}", e.message());
    let e = plan_error(Attention::dense().varlen(&[0, 3, 7], &[0, 3, 8]), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_SHAPE_MISMATCH);
    assert!(e.message().contains("seqlen_q"), "{}", e.message());
    let e = plan_error(Attention::dense().varlen(&[0, 8], &[0, 3, 8]), Backend::Ref);
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("cu_seqlens_q has 2 offsets but cu_seqlens_k has 3"),
            "{}", e.message());

    // Sinks: the plain call, a wrong count and a NaN value are refused; outputs stay untouched.
    let p = Problem::new(8, 2, 4, 1.0, 71);
    let plan = p.plan(&Attention::dense().sinks(true));
    let dims = [1, 8, 2, 4];
    let (q, k, v) = (Tensor::new(&p.q, dims).unwrap(), Tensor::new(&p.k, dims).unwrap(),
                     Tensor::new(&p.v, dims).unwrap());
    let mut o = vec![-7.0; p.q.len()];
    let mut lse = vec![-7.0; 16];
    {
        let mut ov = TensorMut::new(&mut o, dims).unwrap();
        let mut lv = TensorMut::new(&mut lse, [1, 2, 8, 1]).unwrap();
        let e = plan.forward(&q, &k, &v, &mut ov, &mut lv).unwrap_err();
        assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
        assert!(e.message().contains("sinks"), "{}", e.message());
        let e = plan.forward_ex(&CallOptions { sinks: Some(&[0.0]), ..NO_OPTIONS }, &q, &k, &v,
                                &mut ov, &mut lv).unwrap_err();
        assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
        assert!(e.message().contains("sinks has 1 values but the plan's heads_q is 2"),
                "{}", e.message());
        let nan = CallOptions { sinks: Some(&[0.0, f64::NAN]), ..NO_OPTIONS };
        let e = plan.forward_ex(&nan, &q, &k, &v, &mut ov, &mut lv).unwrap_err();
        assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
        assert!(e.message().contains("sinks[1] = nan"), "{}", e.message());
    }
    assert!(o.iter().chain(&lse).all(|&x| x == -7.0));
}

/// SPEC 14.11 through CallOptions::progress: the calls add up (0 first, total last, never
/// decreasing) and change no bit; a true return stops the call with DILATTN_ERROR_CANCELLED and
/// the outputs as they were; a panic in the callback stops the call and resumes after it.
#[test]
fn progress_callback_reports_cancels_and_resumes_a_panic() {
    use std::cell::RefCell;
    let p = Problem::new(24, 2, 4, 1.0, 91);
    let plan = p.plan(&Attention::dense().causal(true));
    let (plain, plain_lse) = p.forward(&plan, &NO_OPTIONS);

    let calls = RefCell::new(Vec::new());
    let record = |done: i64, total: i64| {
        calls.borrow_mut().push((done, total));
        false
    };
    let (watched, watched_lse) =
        p.forward(&plan, &CallOptions { progress: Some(&record), ..NO_OPTIONS });
    assert_eq!(bits(&plain), bits(&watched));
    assert_eq!(bits(&plain_lse), bits(&watched_lse));
    let calls = calls.into_inner();
    let total = calls[0].1;
    assert!(calls.len() >= 2 && total >= 1 && calls[0].0 == 0, "{calls:?}");
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0 && w[1].1 == total), "{calls:?}");
    assert_eq!(calls.last().unwrap().0, total);

    let dims = [1, p.n, p.h, p.d];
    let mut o = vec![7.0; p.q.len()];
    let mut lse = vec![7.0; p.h * p.n];
    let stop = |_: i64, _: i64| true;
    let e = plan.forward_ex(&CallOptions { progress: Some(&stop), ..NO_OPTIONS },
                            &Tensor::new(&p.q, dims).unwrap(), &Tensor::new(&p.k, dims).unwrap(),
                            &Tensor::new(&p.v, dims).unwrap(),
                            &mut TensorMut::new(&mut o, dims).unwrap(),
                            &mut TensorMut::new(&mut lse, [1, p.h, p.n, 1]).unwrap())
        .unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_CANCELLED, "{e}");
    assert!(o.iter().chain(&lse).all(|&x| x == 7.0), "a cancelled call wrote its outputs");

    let fail = |_: i64, _: i64| -> bool { panic!("from the callback") };
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.forward(&plan, &CallOptions { progress: Some(&fail), ..NO_OPTIONS })
    }));
    let payload = caught.expect_err("the callback's panic resumes after the call");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"from the callback"));
}
