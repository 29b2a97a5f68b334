//! What the crate's tests share: the problem cases (those of tests/packages/python/helpers.py),
//! seeded inputs, an independent implementation of SPEC 2, 3 and 6 written from the SPEC text,
//! and the SPEC 8 comparison.
#![allow(dead_code)]

use dilattn::{Attention, HeadMode, Shape};

pub struct Case {
    pub name: &'static str,
    pub shape: Shape,
    pub spec: Spec,
}

/// The attention of a case, in the terms of SPEC 2-3.
#[derive(Clone)]
pub struct Spec {
    pub branches: Vec<(usize, usize)>, // empty: dense
    pub mode: HeadMode,
    pub causal: bool,
    pub scale: Option<f64>,
}

impl Spec {
    pub fn attention(&self) -> Attention {
        let mut a = if self.branches.is_empty() {
            Attention::dense()
        } else {
            Attention::dilated(&self.branches, self.mode)
        };
        a = a.causal(self.causal);
        if let Some(s) = self.scale {
            a = a.scale(s);
        }
        a
    }
}

fn shape(b: usize, nq: usize, nk: usize, h: usize, hkv: usize, d: usize) -> Shape {
    Shape { batch: b, seqlen_q: nq, seqlen_k: nk, heads_q: h, heads_kv: hkv, head_dim: d }
}

fn spec(branches: &[(usize, usize)], mode: HeadMode, causal: bool, scale: Option<f64>) -> Spec {
    Spec { branches: branches.to_vec(), mode, causal, scale }
}

pub fn cases() -> Vec<Case> {
    use HeadMode::*;
    vec![
        Case { name: "dense_gqa", shape: shape(2, 7, 9, 4, 2, 5), spec: spec(&[], Mod, false, None) },
        Case { name: "dense_causal_bottom_right", shape: shape(2, 7, 9, 4, 2, 5),
               spec: spec(&[], Mod, true, None) },
        Case { name: "dilated_mod_partial_segment", shape: shape(1, 13, 13, 3, 1, 4),
               spec: spec(&[(4, 1), (8, 2)], Mod, false, None) },
        Case { name: "dilated_block_causal", shape: shape(1, 12, 12, 4, 2, 3),
               spec: spec(&[(6, 2), (12, 3)], Block, true, None) },
        Case { name: "dilated_groups_uneven", shape: shape(2, 16, 16, 5, 5, 4),
               spec: spec(&[(4, 1), (8, 2), (16, 4)], Groups, false, None) },
        Case { name: "dilated_repeated_branch_scale", shape: shape(1, 10, 10, 2, 1, 3),
               spec: spec(&[(5, 1), (5, 1)], Mod, false, Some(0.3)) },
    ]
}

/// Uniform values in [-1, 1) from a 64-bit LCG (Knuth's MMIX constants).
pub fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

pub fn sizes(s: &Shape) -> ([usize; 4], [usize; 4], [usize; 4]) {
    ([s.batch, s.seqlen_q, s.heads_q, s.head_dim], [s.batch, s.seqlen_k, s.heads_kv, s.head_dim],
     [s.batch, s.heads_q, s.seqlen_q, 1])
}

/// q, k, v, dO for a shape.
pub fn inputs(s: &Shape, seed: u64) -> [Vec<f64>; 4] {
    let nq = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
    let nk = s.batch * s.seqlen_k * s.heads_kv * s.head_dim;
    [uniform(nq, seed), uniform(nk, seed + 1), uniform(nk, seed + 2), uniform(nq, seed + 3)]
}

// ---------------------------------------------------------------- SPEC 2, 3, 6
/// A(i) of head h as a list with repeats (SPEC 3: a key reached by two branches counts twice).
pub fn allowed_keys(sp: &Spec, s: &Shape, h: usize, i: usize) -> Vec<usize> {
    let (nq, nk, heads) = (s.seqlen_q, s.seqlen_k, s.heads_q);
    if sp.branches.is_empty() {
        let limit = if sp.causal { i as i64 + nk as i64 - nq as i64 } else { nk as i64 - 1 };
        return (0..nk).filter(|&j| j as i64 <= limit).collect();
    }
    let m = sp.branches.len();
    let group = {
        let sizes: Vec<usize> = (0..m).map(|g| heads / m + usize::from(g < heads % m)).collect();
        let mut first = 0;
        (0..m).find(|&g| { first += sizes[g]; h < first }).unwrap()
    };
    let mut keys = Vec::new();
    for (b, &(w, r)) in sp.branches.iter().enumerate() {
        if sp.mode == HeadMode::Groups && group != b {
            continue;
        }
        let w = w.min(nq);
        let offset = match sp.mode {
            HeadMode::Mod => h % r,
            HeadMode::Block => h / ((heads + r - 1) / r),
            HeadMode::Groups => b % r,
        };
        let s0 = i / w * w;
        let s1 = (s0 + w).min(nq);
        if (i - s0) % r != offset {
            continue;
        }
        keys.extend((s0..s1).filter(|&j| (j - s0) % r == offset && (!sp.causal || j <= i)));
    }
    keys
}

fn at(shape: [usize; 4], b: usize, n: usize, h: usize, d: usize) -> usize {
    ((b * shape[1] + n) * shape[2] + h) * shape[3] + d
}

/// O and LSE ([B, H, Nq]) in f64.
pub fn forward(sp: &Spec, s: &Shape, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (qs, ks, _) = sizes(s);
    let d = s.head_dim;
    let scale = sp.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut o = vec![0.0; q.len()];
    let mut lse = vec![f64::NEG_INFINITY; s.batch * s.heads_q * s.seqlen_q];
    for b in 0..s.batch {
        for h in 0..s.heads_q {
            let g = h / (s.heads_q / s.heads_kv);
            for i in 0..s.seqlen_q {
                let keys = allowed_keys(sp, s, h, i);
                if keys.is_empty() {
                    continue;
                }
                let scores: Vec<f64> = keys.iter().map(|&j| {
                    scale * (0..d).map(|x| q[at(qs, b, i, h, x)] * k[at(ks, b, j, g, x)]).sum::<f64>()
                }).collect();
                let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let l = top + scores.iter().map(|x| (x - top).exp()).sum::<f64>().ln();
                for (t, &j) in keys.iter().enumerate() {
                    let p = (scores[t] - l).exp();
                    for x in 0..d {
                        o[at(qs, b, i, h, x)] += p * v[at(ks, b, j, g, x)];
                    }
                }
                lse[(b * s.heads_q + h) * s.seqlen_q + i] = l;
            }
        }
    }
    (o, lse)
}

/// dQ, dK, dV in f64 by SPEC 6.
pub fn backward(sp: &Spec, s: &Shape, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64])
    -> [Vec<f64>; 3] {
    let (o, lse) = forward(sp, s, q, k, v);
    let (qs, ks, _) = sizes(s);
    let d = s.head_dim;
    let scale = sp.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for b in 0..s.batch {
        for h in 0..s.heads_q {
            let g = h / (s.heads_q / s.heads_kv);
            for i in 0..s.seqlen_q {
                let l = lse[(b * s.heads_q + h) * s.seqlen_q + i];
                let di: f64 = (0..d).map(|x| d_o[at(qs, b, i, h, x)] * o[at(qs, b, i, h, x)]).sum();
                for j in allowed_keys(sp, s, h, i) {
                    let dot = |a: &[f64], sa, bb: &[f64], sb| -> f64 {
                        (0..d).map(|x| a[at(sa, b, i, h, x)] * bb[at(sb, b, j, g, x)]).sum()
                    };
                    let p = (scale * dot(q, qs, k, ks) - l).exp();
                    let ds = p * (dot(d_o, qs, v, ks) - di);
                    for x in 0..d {
                        dv[at(ks, b, j, g, x)] += p * d_o[at(qs, b, i, h, x)];
                        dq[at(qs, b, i, h, x)] += scale * ds * k[at(ks, b, j, g, x)];
                        dk[at(ks, b, j, g, x)] += scale * ds * q[at(qs, b, i, h, x)];
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

/// SPEC 8: |x - ref| <= atol + rtol |ref| elementwise; equal infinities pass.
pub fn assert_within(what: &str, x: &[f64], reference: &[f64], atol: f64, rtol: f64) {
    assert_eq!(x.len(), reference.len(), "{what}: lengths");
    for (t, (&a, &r)) in x.iter().zip(reference).enumerate() {
        let ok = (a == r) || (a - r).abs() <= atol + rtol * r.abs();
        assert!(ok, "{what}[{t}]: {a} vs reference {r}");
    }
}
