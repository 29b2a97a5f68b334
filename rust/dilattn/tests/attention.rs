//! Plans on the reference backend against the independent SPEC implementation (tests/common),
//! the cpu backend against the reference within SPEC 8, and block-sparse masks against a
//! masked SPEC 2; the same cases as the Python package's tests.
mod common;

use common::{assert_within, cases, inputs, sizes};
use dilattn::{Attention, Backend, Dtype, Mask, Plan, Shape, Tensor, TensorMut};

struct Run<T> {
    o: Vec<T>,
    lse: Vec<f64>,
    grads: [Vec<T>; 3],
}

/// Forward, then backward with dO, on one backend, in T.
fn run<T: dilattn::Element + Into<f64>>(attention: &Attention, s: &Shape, backend: Backend,
                                        dtype: Dtype, data: &[Vec<T>; 4]) -> Run<T> {
    let (qs, ks, ls) = sizes(s);
    let plan = Plan::new(attention, *s, dtype, backend).unwrap();
    let [q, k, v, d_o] = data;
    let (q, k, v, d_o) = (Tensor::new(q, qs).unwrap(), Tensor::new(k, ks).unwrap(),
                          Tensor::new(v, ks).unwrap(), Tensor::new(d_o, qs).unwrap());
    let mut o = vec![T::default(); data[0].len()];
    let mut lse = vec![0f64; ls.iter().product()];
    let mut lse32 = vec![0f32; ls.iter().product()];
    let mut o_view = TensorMut::new(&mut o, qs).unwrap();
    let mut grads = [vec![T::default(); data[0].len()], vec![T::default(); data[1].len()],
                     vec![T::default(); data[2].len()]];
    let [dq, dk, dv] = &mut grads;
    let (mut dq, mut dk, mut dv) = (TensorMut::new(dq, qs).unwrap(), TensorMut::new(dk, ks).unwrap(),
                                    TensorMut::new(dv, ks).unwrap());
    if plan.backend() == Backend::Ref {
        let mut l = TensorMut::new(&mut lse, ls).unwrap();
        plan.forward(&q, &k, &v, &mut o_view, &mut l).unwrap();
        plan.backward(&q, &k, &v, &o_view.as_tensor(), &l.as_tensor(), &d_o, &mut dq, &mut dk,
                      &mut dv).unwrap();
    } else {
        let mut l = TensorMut::new(&mut lse32, ls).unwrap();
        plan.forward(&q, &k, &v, &mut o_view, &mut l).unwrap();
        plan.backward(&q, &k, &v, &o_view.as_tensor(), &l.as_tensor(), &d_o, &mut dq, &mut dk,
                      &mut dv).unwrap();
        lse = lse32.iter().map(|&x| x as f64).collect();
    }
    Run { o, lse, grads }
}

fn as_f64<T: Into<f64> + Copy>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&v| v.into()).collect()
}

#[test]
fn ref_forward_and_backward_equal_the_spec() {
    for case in cases() {
        let data = inputs(&case.shape, 1);
        let got = run(&case.spec.attention(), &case.shape, Backend::Ref, Dtype::F64, &data);
        let (o, lse) = common::forward(&case.spec, &case.shape, &data[0], &data[1], &data[2]);
        assert_within(&format!("{} O", case.name), &got.o, &o, 1e-12, 1e-12);
        assert_within(&format!("{} LSE", case.name), &got.lse, &lse, 1e-12, 1e-12);
        let want = common::backward(&case.spec, &case.shape, &data[0], &data[1], &data[2], &data[3]);
        for (t, name) in ["dQ", "dK", "dV"].iter().enumerate() {
            assert_within(&format!("{} {name}", case.name), &got.grads[t], &want[t], 1e-12, 1e-12);
        }
    }
}

#[test]
fn cpu_f32_is_within_spec8_of_the_spec() {
    for case in cases() {
        let data = inputs(&case.shape, 2);
        let data32 = data.clone().map(|x| x.iter().map(|&v| v as f32).collect::<Vec<f32>>());
        let rounded = data32.clone().map(|x| as_f64(&x));
        let got = run(&case.spec.attention(), &case.shape, Backend::Cpu, Dtype::F32, &data32);
        let (o, lse) = common::forward(&case.spec, &case.shape, &rounded[0], &rounded[1],
                                       &rounded[2]);
        assert_within(&format!("{} O", case.name), &as_f64(&got.o), &o, 1e-5, 1e-4);
        assert_within(&format!("{} LSE", case.name), &got.lse, &lse, 1e-4, 0.0);
        let want = common::backward(&case.spec, &case.shape, &rounded[0], &rounded[1],
                                    &rounded[2], &rounded[3]);
        for (t, name) in ["dQ", "dK", "dV"].iter().enumerate() {
            assert_within(&format!("{} {name}", case.name), &as_f64(&got.grads[t]), &want[t],
                          1e-5, 1e-4);
        }
    }
}

#[test]
fn rows_no_branch_selects_get_zero_and_minus_infinity() {
    let s = Shape::self_attention(1, 8, 1, 2);
    let data = inputs(&s, 3);
    let attention = Attention::dilated(&[(4, 2)], dilattn::HeadMode::Mod);
    let got = run(&attention, &s, Backend::Ref, Dtype::F64, &data);
    for i in [1, 3, 5, 7] {
        assert_eq!(got.lse[i], f64::NEG_INFINITY);
        assert_eq!(&got.o[i * 2..i * 2 + 2], &[0.0, 0.0]);
    }
    assert!(got.lse.iter().step_by(2).all(|x| x.is_finite()));
}

#[test]
fn block_sparse_pattern_equals_masked_spec() {
    let (n, bq) = (20, 4);
    let s = Shape::self_attention(2, n, 2, 4);
    let data = inputs(&s, 4);
    let mask = Mask::pattern("local:1+sink:1", n, n, bq, bq).unwrap();
    let bsr = mask.bsr();
    for causal in [false, true] {
        let got = run(&Attention::block_sparse(&mask).causal(causal), &s, Backend::Ref, Dtype::F64,
                      &data);
        // The same problem as dense attention whose A(i) is the listed blocks' keys (SPEC 4):
        // computed here by a one-head-at-a-time masked softmax.
        let (qs, ks, _) = sizes(&s);
        let scale = 0.5; // 1 / sqrt(4)
        for b in 0..2 {
            for h in 0..2 {
                for i in 0..n {
                    let keys: Vec<usize> = bsr.row(0, i / bq).iter()
                        .flat_map(|&jb| (jb as usize * bq)..((jb as usize + 1) * bq).min(n))
                        .filter(|&j| !causal || j <= i).collect();
                    let idx = |sh: [usize; 4], n_: usize, x: usize| ((b * sh[1] + n_) * sh[2] + h) * sh[3] + x;
                    let sc: Vec<f64> = keys.iter().map(|&j| scale * (0..4)
                        .map(|x| data[0][idx(qs, i, x)] * data[1][idx(ks, j, x)]).sum::<f64>()).collect();
                    let top = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let l = top + sc.iter().map(|x| (x - top).exp()).sum::<f64>().ln();
                    assert!((got.lse[(b * 2 + h) * n + i] - l).abs() < 1e-12);
                    for x in 0..4 {
                        let want: f64 = keys.iter().zip(&sc)
                            .map(|(&j, &v)| (v - l).exp() * data[2][idx(ks, j, x)]).sum();
                        assert!((got.o[idx(qs, i, x)] - want).abs() < 1e-12);
                    }
                }
            }
        }
    }
}

#[test]
fn auto_resolves_to_a_backend_that_runs_here() {
    let plan = Plan::new(&Attention::dense(), Shape::self_attention(1, 4, 1, 2), Dtype::F32,
                         Backend::Auto).unwrap();
    let expected = if dilattn::backend_available(Backend::Cuda) { Backend::Cuda } else { Backend::Cpu };
    assert_eq!(plan.backend(), expected);
}
