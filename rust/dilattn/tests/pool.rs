//! dilattn::Pool (lib/dilattn_pool.h): statistics follow blocks exactly as the header states
//! (rounding to powers of two, splitting, coalescing, the peak), abuse gets its own status,
//! growth adds arenas, plans take their workspace from the pool and give it back, a plan keeps
//! its pool alive, and reset is refused while the pool is shared. The Python package's
//! test_pool.py checks the same.
mod common;

use common::{inputs, sizes, Spec};
use dilattn::{Attention, Backend, Dtype, Growth, HeadMode, Plan, Pool, Shape, Tensor, TensorMut};
use dilattn_sys as sys;

/// free_blocks as (block bytes, count) for the sizes with free blocks.
fn free(stats: &dilattn::PoolStats) -> Vec<(usize, usize)> {
    (0..64).filter(|&k| stats.free_blocks[k] != 0).map(|k| (1 << k, stats.free_blocks[k]))
        .collect()
}

#[test]
fn statistics_follow_alloc_split_free_and_coalesce() {
    let mut pool = Pool::host(4096, None, Growth::Fixed).unwrap();
    let s = pool.stats().unwrap();
    assert_eq!((s.num_arenas, s.arena_bytes_total, s.bytes_in_use, s.largest_free_block),
               (1, 4096, 0, 4096));
    assert_eq!(free(&s), [(4096, 1)]);
    {
        let a = pool.alloc(300).unwrap(); // rounded up to 512: 4096 splits down to it
        assert_eq!(a.as_ptr() as usize % 256, 0);
        let s = pool.stats().unwrap();
        assert_eq!((s.bytes_in_use, s.bytes_requested, s.internal_fragmentation, s.live_blocks,
                    s.peak_bytes_in_use), (512, 300, 212, 1, 512));
        assert_eq!(free(&s), [(512, 1), (1024, 1), (2048, 1)]);
        let _b = pool.alloc(1000).unwrap();
        let s = pool.stats().unwrap();
        assert_eq!((s.bytes_in_use, s.bytes_requested, s.live_blocks), (1536, 1300, 2));
        assert_eq!(free(&s), [(512, 1), (2048, 1)]);
    } // both blocks dropped: freed, and everything coalesces back into the arena
    let s = pool.stats().unwrap();
    assert_eq!((s.bytes_in_use, s.live_blocks, s.peak_bytes_in_use), (0, 0, 1536));
    assert_eq!(free(&s), [(4096, 1)]);
    pool.reset().unwrap();
    assert_eq!(pool.stats().unwrap().peak_bytes_in_use, 0);
}

#[test]
fn abuse_gets_its_own_status() {
    let pool = Pool::host(4096, None, Growth::Fixed).unwrap();
    assert_eq!(pool.alloc(0).unwrap_err().status(), sys::DILATTN_ERROR_POOL_ZERO_SIZE);
    assert_eq!(pool.alloc(8192).unwrap_err().status(), sys::DILATTN_ERROR_POOL_TOO_LARGE);
    let _a = pool.alloc(4096).unwrap();
    let e = pool.alloc(1).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_OUT_OF_MEMORY);
    assert_eq!(pool.stats().unwrap().live_blocks, 1);
    let e = Pool::host(3000, None, Growth::Fixed).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("3000"), "{}", e.message());
}

#[test]
fn growth_adds_arenas_up_to_the_limit() {
    let pool = Pool::host(1024, None, Growth::Grow { max_arenas: 2 }).unwrap();
    let _a = pool.alloc(1024).unwrap();
    let _b = pool.alloc(600).unwrap();
    let s = pool.stats().unwrap();
    assert_eq!((s.num_arenas, s.arena_bytes_total, s.bytes_in_use), (2, 2048, 2048));
    assert_eq!(pool.alloc(1).unwrap_err().status(), sys::DILATTN_ERROR_OUT_OF_MEMORY);
}

#[test]
fn a_cuda_pool_needs_a_usable_cuda_build() {
    // The header: DEVICE_NOT_BUILT in a build without CUDA or without the device.
    let made = Pool::cuda(0, 1 << 20, None, Growth::Fixed);
    if dilattn::backend_available(Backend::Cuda) {
        assert_eq!(made.unwrap().stats().unwrap().arena_bytes_total, 1 << 20);
    } else {
        assert_eq!(made.unwrap_err().status(), sys::DILATTN_ERROR_DEVICE_NOT_BUILT);
    }
}

fn spec() -> Spec {
    Spec { branches: vec![(8, 1), (16, 2)], mode: HeadMode::Mod, causal: true, scale: None }
}

/// dQ, dK, dV of the plan's backward (f32, after its forward; LSE f64: the ref backend).
fn backward_of(plan: &Plan, s: &Shape) -> dilattn::Result<[Vec<f32>; 3]> {
    let (qs, ks, ls) = sizes(s);
    let data = inputs(s, 7).map(|x| x.iter().map(|&v| v as f32).collect::<Vec<f32>>());
    let [q, k, v, d_o] = &data;
    let (q, k, v, d_o) = (Tensor::new(q, qs)?, Tensor::new(k, ks)?, Tensor::new(v, ks)?,
                          Tensor::new(d_o, qs)?);
    let mut o = vec![0f32; data[0].len()];
    let mut lse = vec![0f64; ls.iter().product()];
    let mut o_view = TensorMut::new(&mut o, qs)?;
    let mut l = TensorMut::new(&mut lse, ls)?;
    plan.forward(&q, &k, &v, &mut o_view, &mut l)?;
    let mut grads = [vec![0f32; data[0].len()], vec![0f32; data[1].len()],
                     vec![0f32; data[2].len()]];
    let [dq, dk, dv] = &mut grads;
    plan.backward(&q, &k, &v, &o_view.as_tensor(), &l.as_tensor(), &d_o,
                  &mut TensorMut::new(dq, qs)?, &mut TensorMut::new(dk, ks)?,
                  &mut TensorMut::new(dv, ks)?)?;
    Ok(grads)
}

fn ref_backward(attention: &Attention, s: &Shape) -> dilattn::Result<[Vec<f32>; 3]> {
    backward_of(&Plan::new(attention, *s, Dtype::F32, Backend::Ref)?, s)
}

#[test]
fn plans_take_their_workspace_from_the_pool_and_give_it_back() {
    let s = Shape::self_attention(1, 16, 2, 8);
    let want = ref_backward(&spec().attention(), &s).unwrap();
    let pool = Pool::host(1 << 20, None, Growth::Fixed).unwrap();
    let attention = spec().attention().pool(&pool);
    let (_, backward_bytes) = Plan::new(&attention, s, Dtype::F32, Backend::Ref).unwrap()
        .workspace_bytes().unwrap();
    assert!(backward_bytes > 0, "the reference backward takes a workspace");
    let got = ref_backward(&attention, &s).unwrap();
    assert_eq!(got, want);
    let stats = pool.stats().unwrap();
    assert_eq!(stats.peak_bytes_in_use, backward_bytes.next_power_of_two().max(256));
    assert_eq!((stats.bytes_in_use, stats.live_blocks), (0, 0));
}

#[test]
fn a_pool_too_small_for_the_workspace_fails_with_its_status() {
    let s = Shape::self_attention(1, 16, 2, 8);
    let pool = Pool::host(256, None, Growth::Fixed).unwrap();
    let e = ref_backward(&spec().attention().pool(&pool), &s).unwrap_err();
    assert_eq!(e.status(), sys::DILATTN_ERROR_POOL_TOO_LARGE);
}

#[test]
fn a_plan_keeps_its_pool_and_reset_waits_for_it() {
    let s = Shape::self_attention(1, 16, 2, 8);
    let mut pool = Pool::host(1 << 20, None, Growth::Fixed).unwrap();
    let plan = Plan::new(&spec().attention().pool(&pool), s, Dtype::F32, Backend::Ref).unwrap();
    let e = pool.reset().unwrap_err(); // the plan shares the pool
    assert_eq!(e.status(), sys::DILATTN_ERROR_INVALID_VALUE);
    assert!(e.message().contains("1 attention(s) or plan(s)"), "{}", e.message());
    drop(pool); // the plan still holds it: its backward takes workspace from a live pool
    let want = ref_backward(&spec().attention(), &s).unwrap();
    assert_eq!(backward_of(&plan, &s).unwrap(), want);
}
