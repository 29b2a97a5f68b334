//! Errors carry the C status and the library's message (SPEC 7); views the slices cannot hold
//! are refused in Rust before any C call.
use dilattn::{Attention, Backend, Dtype, HeadMode, Mask, Plan, Shape, Tensor, TensorMut};
use dilattn_sys as sys;

fn plan_error(attention: Attention, shape: Shape, dtype: Dtype) -> dilattn::Error {
    Plan::new(&attention, shape, dtype, Backend::Ref).unwrap_err()
}

#[test]
fn bad_dilation_names_the_value() {
    let e = plan_error(Attention::dilated(&[(4, 5)], HeadMode::Mod), Shape::self_attention(1, 8, 1, 2),
                       Dtype::F32);
    assert_eq!(e.status(), sys::DILATTN_ERROR_BAD_DILATION);
    assert_eq!(e.status_name(), "DILATTN_ERROR_BAD_DILATION");
    assert!(e.message().contains('5'), "{}", e.message());
    assert_eq!(e.to_string(), format!("DILATTN_ERROR_BAD_DILATION: {}", e.message()));
}

#[test]
fn plan_errors_have_their_own_statuses() {
    let gqa = Shape { batch: 1, seqlen_q: 8, seqlen_k: 8, heads_q: 3, heads_kv: 2, head_dim: 2 };
    assert_eq!(plan_error(Attention::dense(), gqa, Dtype::F32).status(),
               sys::DILATTN_ERROR_HEADS_NOT_DIVISIBLE);
    assert_eq!(plan_error(Attention::dense().scale(f64::NAN), Shape::self_attention(1, 4, 1, 2),
                          Dtype::F32).status(), sys::DILATTN_ERROR_BAD_SCALE);
    let cross = Shape { seqlen_k: 6, ..Shape::self_attention(1, 8, 1, 2) };
    assert_eq!(plan_error(Attention::dilated(&[(4, 1)], HeadMode::Mod), cross, Dtype::F32).status(),
               sys::DILATTN_ERROR_SEQLEN_MISMATCH);
    assert_eq!(plan_error(Attention::dilated(&[(2, 1), (4, 1), (8, 1)], HeadMode::Groups),
                          Shape::self_attention(1, 8, 2, 2), Dtype::F32).status(),
               sys::DILATTN_ERROR_GROUPS_TOO_FEW_HEADS);
}

#[test]
fn dtype_of_the_views_must_be_the_plans() {
    let s = Shape::self_attention(1, 4, 1, 2);
    let plan = Plan::new(&Attention::dense(), s, Dtype::F32, Backend::Ref).unwrap();
    let x = vec![0.5f64; 8];
    let mut o = vec![7.0f64; 8];
    let mut lse = vec![7.0f64; 4];
    let t = Tensor::new(&x, [1, 4, 1, 2]).unwrap();
    let e = plan.forward(&t, &t, &t, &mut TensorMut::new(&mut o, [1, 4, 1, 2]).unwrap(),
                         &mut TensorMut::new(&mut lse, [1, 1, 4, 1]).unwrap()).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_DTYPE_MISMATCH);
    assert!(o.iter().chain(&lse).all(|&v| v == 7.0), "outputs must stay untouched");
}

#[test]
fn bad_masks_and_patterns_are_refused() {
    let e = Mask::pattern("local:2+bogus:1", 16, 16, 4, 4).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("bogus"), "{}", e.message());
    let e = Mask::from_bsr(8, 8, 4, 4, &[0, 2, 3], &[1, 0, 1], None).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_BAD_MASK);
}

#[test]
fn views_larger_than_their_slice_are_refused_in_rust() {
    let x = vec![0f32; 10];
    let e = Tensor::new(&x, [1, 3, 2, 2]).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_SHAPE_MISMATCH);
    assert!(e.message().contains("11"), "{}", e.message()); // the last element reached
    assert!(Tensor::strided(&x, [1, 2, 1, 5], [0, 5, 0, 1]).is_ok());
    assert!(Tensor::strided(&x, [1, 2, 1, 5], [0, 6, 0, 1]).is_err());
}

#[test]
fn output_views_that_write_an_element_twice_are_refused() {
    let mut x = vec![0f32; 16];
    assert!(TensorMut::strided(&mut x, [2, 1, 1, 4], [0, 0, 0, 1]).is_err()); // batch stride 0
    assert!(TensorMut::strided(&mut x, [1, 2, 1, 4], [0, 2, 0, 1]).is_err()); // rows overlap
    assert!(TensorMut::strided(&mut x, [1, 2, 1, 4], [0, 8, 0, 2]).is_ok()); // gaps are fine
    assert!(TensorMut::strided(&mut x, [1, 4, 1, 4], [0, 1, 0, 4]).is_ok()); // transposed
    // An empty view writes nothing, whatever its strides (a ring rank may hold no rows).
    let mut none: Vec<f32> = Vec::new();
    assert!(TensorMut::new(&mut none, [1, 2, 0, 1]).is_ok());
    assert!(TensorMut::new(&mut none, [2, 0, 3, 4]).is_ok());
}
