//! A dilated causal forward on the cpu backend (f32) against the f64 reference backend, within
//! SPEC 8 (atol 1e-5, rtol 1e-4); exits non-zero (a panic) when it is not.
use dilattn::{Attention, Backend, Dtype, HeadMode, Plan, Shape, Tensor, TensorMut};

fn forward<T: dilattn::Element, L: dilattn::Element>(
    backend: Backend, dtype: Dtype, q: &[T], k: &[T], v: &[T], s: Shape,
) -> (Vec<T>, Vec<L>) {
    let attention = Attention::dilated(&[(8, 1), (16, 2)], HeadMode::Mod).causal(true);
    let plan = Plan::new(&attention, s, dtype, backend).expect("plan");
    let qs = [s.batch, s.seqlen_q, s.heads_q, s.head_dim];
    let ks = [s.batch, s.seqlen_k, s.heads_kv, s.head_dim];
    let ls = [s.batch, s.heads_q, s.seqlen_q, 1];
    let mut o = vec![T::default(); q.len()];
    let mut lse = vec![L::default(); ls.iter().product()];
    plan.forward(&Tensor::new(q, qs).unwrap(), &Tensor::new(k, ks).unwrap(),
                 &Tensor::new(v, ks).unwrap(), &mut TensorMut::new(&mut o, qs).unwrap(),
                 &mut TensorMut::new(&mut lse, ls).unwrap())
        .expect("forward");
    (o, lse)
}

fn main() {
    let s = Shape::self_attention(2, 40, 4, 8);
    let n = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
    // A fixed, platform-independent pseudo-random fill in [-1, 1).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let data: Vec<Vec<f64>> = (0..3).map(|_| (0..n).map(|_| next()).collect()).collect();
    let as_f32: Vec<Vec<f32>> = data.iter().map(|x| x.iter().map(|&y| y as f32).collect()).collect();
    // The f32 inputs, widened back: the reference sees exactly what the cpu backend sees.
    let exact: Vec<Vec<f64>> = as_f32.iter().map(|x| x.iter().map(|&y| y as f64).collect()).collect();
    let (want, _) = forward::<f64, f64>(Backend::Ref, Dtype::F64, &exact[0], &exact[1], &exact[2], s);
    let (got, _) = forward::<f32, f32>(Backend::Cpu, Dtype::F32, &as_f32[0], &as_f32[1], &as_f32[2], s);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (g as f64 - w).abs() - (1e-5 + 1e-4 * w.abs()))
        .fold(f64::NEG_INFINITY, f64::max);
    println!("dilattn {}: cpu f32 against ref f64, {} values, worst excess over SPEC 8 {:.3e}",
             dilattn::version(), got.len(), worst);
    assert!(worst <= 0.0, "the cpu backend is outside SPEC 8 against the reference");
    println!("ok");
}
