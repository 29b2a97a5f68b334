//! F16 and Bf16: every rounding boundary of from_f32 (ties to even), exact to_f32, the special
//! values; and attention on f16/bf16 views on the cpu backend within SPEC 8 of the f64 SPEC
//! implementation on the rounded inputs, for the cases of the Python package's tests (its f16
//! tests: test_numpy_api.py, test_torch_autograd.py).
mod common;

use common::{assert_within, cases, inputs, sizes};
use dilattn::{Backend, Bf16, Dtype, Element, Plan, Tensor, TensorMut, F16};

/// Every finite non-negative value of a 16-bit type, in increasing order, as (bits, f32).
fn ladder(to_f32: fn(u16) -> f32, max_finite: u16) -> Vec<(u16, f32)> {
    (0..=max_finite).map(|b| (b, to_f32(b))).collect()
}

/// For each pair of neighbours a < b: the midpoint (exact in f32) rounds to the one with an
/// even last bit, anything above it to b and below it to a; negatives mirror.
fn check_rounding(name: &str, to_f32: fn(u16) -> f32, from_f32: fn(f32) -> u16, max_finite: u16) {
    let values = ladder(to_f32, max_finite);
    for pair in values.windows(2) {
        let ((a_bits, a), (b_bits, b)) = (pair[0], pair[1]);
        assert!(a < b, "{name}: {a_bits:#x} -> {a} is not below {b_bits:#x} -> {b}");
        assert_eq!(from_f32(a), a_bits, "{name}: {a} does not round to itself");
        let mid = ((a as f64 + b as f64) / 2.0) as f32;
        assert_eq!(mid as f64, (a as f64 + b as f64) / 2.0, "{name}: midpoint not exact");
        let even = if a_bits & 1 == 0 { a_bits } else { b_bits };
        assert_eq!(from_f32(mid), even, "{name}: tie {mid} between {a} and {b}");
        assert_eq!(from_f32(-mid), even | 0x8000, "{name}: tie -{mid}");
        let above = f32::from_bits(mid.to_bits() + 1);
        let below = f32::from_bits(mid.to_bits() - 1);
        assert_eq!(from_f32(above), b_bits, "{name}: {above} above the tie");
        assert_eq!(from_f32(below), a_bits, "{name}: {below} below the tie");
    }
}

#[test]
fn f16_rounds_to_nearest_even_at_every_boundary() {
    check_rounding("f16", |b| F16(b).to_f32(), |x| F16::from_f32(x).0, 0x7bff);
    // Beyond the largest finite value 65504 the next step would be 65536: the tie 65520
    // rounds (to even) to infinity, anything below it to 65504.
    assert_eq!(F16::from_f32(65519.996).0, 0x7bff);
    assert_eq!(F16::from_f32(65520.0).0, 0x7c00);
    assert_eq!(F16::from_f32(1e10).0, 0x7c00);
    assert_eq!(F16::from_f32(f32::NEG_INFINITY).0, 0xfc00);
    assert_eq!(F16::from_f32(2f32.powi(-25)).0, 0); // half the smallest subnormal: tie to 0
    assert_eq!(F16::from_f32(-1e-30).0, 0x8000);
    assert!(F16::from_f32(f32::NAN).to_f32().is_nan());
    assert_eq!(F16(0x3c00).to_f32(), 1.0);
    assert_eq!(F16(0x0001).to_f32(), 2f32.powi(-24));
    assert_eq!(F16(0xc000).to_f32(), -2.0);
}

#[test]
fn bf16_rounds_to_nearest_even_at_every_boundary() {
    check_rounding("bf16", |b| Bf16(b).to_f32(), |x| Bf16::from_f32(x).0, 0x7f7f);
    // The cases of tests/python/test_dtypes.py (to_bf16): ties to even.
    assert_eq!(Bf16::from_f32(1.0 + 2f32.powi(-8)).to_f32(), 1.0);
    assert_eq!(Bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).to_f32(), 1.0 + 2f32.powi(-6));
    assert_eq!(Bf16::from_f32(-2.5).to_f32(), -2.5);
    assert_eq!(Bf16::from_f32(f32::MAX).0, 0x7f80); // rounds up to infinity
    assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
    assert!(Bf16::from_f32(f32::from_bits(0x7f80_0001)).to_f32().is_nan()); // no NaN -> inf
}

/// O, LSE, dQ, dK, dV of one case on the cpu backend in the element type T.
fn run_cpu<T: Element + Into<f64>>(case: &common::Case, dtype: Dtype, data: &[Vec<T>; 4])
    -> (Vec<f64>, Vec<f64>, [Vec<f64>; 3]) {
    let s = &case.shape;
    let (qs, ks, ls) = sizes(s);
    let plan = Plan::new(&case.spec.attention(), *s, dtype, Backend::Cpu).unwrap();
    let [q, k, v, d_o] = data;
    let (q, k, v, d_o) = (Tensor::new(q, qs).unwrap(), Tensor::new(k, ks).unwrap(),
                          Tensor::new(v, ks).unwrap(), Tensor::new(d_o, qs).unwrap());
    let mut o = vec![T::default(); data[0].len()];
    let mut lse = vec![0f32; ls.iter().product()];
    let mut grads = [vec![T::default(); data[0].len()], vec![T::default(); data[1].len()],
                     vec![T::default(); data[2].len()]];
    {
        let mut o_view = TensorMut::new(&mut o, qs).unwrap();
        let mut l = TensorMut::new(&mut lse, ls).unwrap();
        plan.forward(&q, &k, &v, &mut o_view, &mut l).unwrap();
        let [dq, dk, dv] = &mut grads;
        plan.backward(&q, &k, &v, &o_view.as_tensor(), &l.as_tensor(), &d_o,
                      &mut TensorMut::new(dq, qs).unwrap(), &mut TensorMut::new(dk, ks).unwrap(),
                      &mut TensorMut::new(dv, ks).unwrap()).unwrap();
    }
    let wide = |x: &[T]| x.iter().map(|&v| v.into()).collect::<Vec<f64>>();
    (wide(&o), lse.iter().map(|&x| x as f64).collect(), grads.map(|g| wide(&g)))
}

/// Every case in T against the SPEC on the inputs rounded to T: SPEC 8 (atol = rtol = tol)
/// for O and the gradients, LSE (f32) absolute 1e-4.
fn check_cases<T: Element + Into<f64>>(dtype: Dtype, round: fn(f64) -> T, tol: f64) {
    for case in cases() {
        let data = inputs(&case.shape, 5).map(|x| x.iter().map(|&v| round(v)).collect::<Vec<T>>());
        let exact = data.clone().map(|x| x.iter().map(|&v| v.into()).collect::<Vec<f64>>());
        let (o, lse, grads) = run_cpu(&case, dtype, &data);
        let (want_o, want_lse) = common::forward(&case.spec, &case.shape, &exact[0], &exact[1],
                                                 &exact[2]);
        let label = |what: &str| format!("{} {dtype:?} {what}", case.name);
        assert_within(&label("O"), &o, &want_o, tol, tol);
        assert_within(&label("LSE"), &lse, &want_lse, 1e-4, 0.0);
        let want = common::backward(&case.spec, &case.shape, &exact[0], &exact[1], &exact[2],
                                    &exact[3]);
        for (t, what) in ["dQ", "dK", "dV"].iter().enumerate() {
            assert_within(&label(what), &grads[t], &want[t], tol, tol);
        }
    }
}

#[test]
fn cpu_f16_is_within_spec8_of_the_spec_on_rounded_inputs() {
    check_cases(Dtype::F16, |v| F16::from_f32(v as f32), 2e-3);
}

#[test]
fn cpu_bf16_is_within_spec8_of_the_spec_on_rounded_inputs() {
    check_cases(Dtype::Bf16, |v| Bf16::from_f32(v as f32), 1.6e-2);
}
