//! Strided views reach the library as they are and give the bits of contiguous copies; a plan
//! is Send + Sync and gives the same bits from several threads at once.
mod common;

use common::inputs;
use dilattn::{Attention, Backend, Dtype, HeadMode, Plan, Shape, Tensor, TensorMut};

fn attention() -> Attention {
    Attention::dilated(&[(4, 1), (8, 2)], HeadMode::Mod).causal(true)
}

fn forward(plan: &Plan, q: &Tensor<f64>, k: &Tensor<f64>, v: &Tensor<f64>, s: &Shape)
    -> (Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; s.batch * s.seqlen_q * s.heads_q * s.head_dim];
    let mut lse = vec![0.0; s.batch * s.heads_q * s.seqlen_q];
    plan.forward(q, k, v,
                 &mut TensorMut::new(&mut o, [s.batch, s.seqlen_q, s.heads_q, s.head_dim]).unwrap(),
                 &mut TensorMut::new(&mut lse, [s.batch, s.heads_q, s.seqlen_q, 1]).unwrap())
        .unwrap();
    (o, lse)
}

#[test]
fn strided_views_give_the_bits_of_contiguous_copies() {
    // Q stored [B, H, N, D] (transposed view), K inside a wider buffer (every other head),
    // V broadcast over the batch (stride 0).
    let s = Shape { batch: 2, seqlen_q: 16, seqlen_k: 16, heads_q: 3, heads_kv: 3, head_dim: 4 };
    let [q, k, v, _] = inputs(&s, 5);
    let (b, n, h, d) = (2, 16, 3, 4);
    let mut q_bhnd = vec![0.0; q.len()];
    let mut k_wide = vec![0.0; k.len() * 2];
    for bi in 0..b {
        for i in 0..n {
            for hi in 0..h {
                for x in 0..d {
                    let c = ((bi * n + i) * h + hi) * d + x;
                    q_bhnd[((bi * h + hi) * n + i) * d + x] = q[c];
                    k_wide[((bi * n + i) * 2 * h + 2 * hi) * d + x] = k[c];
                }
            }
        }
    }
    let mut v_one = v.clone();
    v_one.truncate(n * h * d);
    let v_batch: Vec<f64> = v_one.iter().chain(&v_one).copied().collect();
    let plan = Plan::new(&attention(), s, Dtype::F64, Backend::Ref).unwrap();
    let strided = forward(&plan,
                          &Tensor::strided(&q_bhnd, [b, n, h, d], [h * n * d, d, n * d, 1]).unwrap(),
                          &Tensor::strided(&k_wide, [b, n, h, d], [n * 2 * h * d, 2 * h * d, 2 * d, 1]).unwrap(),
                          &Tensor::strided(&v_one, [b, n, h, d], [0, h * d, d, 1]).unwrap(), &s);
    let contiguous = forward(&plan, &Tensor::new(&q, [b, n, h, d]).unwrap(),
                             &Tensor::new(&k, [b, n, h, d]).unwrap(),
                             &Tensor::new(&v_batch, [b, n, h, d]).unwrap(), &s);
    assert_eq!(strided, contiguous);
}

#[test]
fn one_plan_runs_from_several_threads_with_the_same_bits() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Plan>();
    assert_send_sync::<dilattn::Mask>();
    let s = Shape::self_attention(1, 16, 2, 4);
    let [q, k, v, _] = inputs(&s, 6);
    let shape = [1, 16, 2, 4];
    let plan = Plan::new(&attention(), s, Dtype::F64, Backend::Cpu).unwrap();
    let one = forward(&plan, &Tensor::new(&q, shape).unwrap(), &Tensor::new(&k, shape).unwrap(),
                      &Tensor::new(&v, shape).unwrap(), &s);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4).map(|_| scope.spawn(|| {
            forward(&plan, &Tensor::new(&q, shape).unwrap(), &Tensor::new(&k, shape).unwrap(),
                    &Tensor::new(&v, shape).unwrap(), &s)
        })).collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap(), one);
        }
    });
}
