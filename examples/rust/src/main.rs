//! Calls dilattn's C ABI from Rust: a dilated forward on the best backend, compared with the f64
//! reference backend. Run: `cargo run --release` in examples/rust after building the library.
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

#[repr(C)]
#[derive(Clone, Copy)]
struct Tensor {
    struct_size: usize,
    data: *mut c_void,
    dtype: c_int,
    device: c_int,
    device_index: i32,
    shape: [i64; 4],
    strides: [i64; 4],
}

#[repr(C)]
struct Shape {
    struct_size: usize,
    batch: i64,
    seqlen_q: i64,
    seqlen_k: i64,
    heads_q: i64,
    heads_kv: i64,
    head_dim: i64,
}

type Status = c_int;
const F32: c_int = 0;
const BACKEND_AUTO: c_int = 0;
const BACKEND_REF: c_int = 1;
const HEADS_MOD: c_int = 0;

extern "C" {
    fn dilattn_last_error() -> *const c_char;
    fn dilattn_status_string(s: Status) -> *const c_char;
    fn dilattn_desc_create(desc: *mut *mut c_void) -> Status;
    fn dilattn_desc_destroy(desc: *mut c_void) -> Status;
    fn dilattn_desc_set_dilated(desc: *mut c_void, n: i32, seg: *const i64, dil: *const i64, mode: c_int) -> Status;
    fn dilattn_plan_create(plan: *mut *mut c_void, desc: *mut c_void, shape: *const Shape, dtype: c_int,
                           backend: c_int) -> Status;
    fn dilattn_plan_destroy(plan: *mut c_void) -> Status;
    fn dilattn_plan_backend(plan: *mut c_void, backend: *mut c_int) -> Status;
    fn dilattn_backend_name(backend: c_int) -> *const c_char;
    fn dilattn_forward(plan: *mut c_void, q: *const Tensor, k: *const Tensor, v: *const Tensor,
                       o: *const Tensor, lse: *const Tensor, ws: *mut c_void, ws_bytes: usize) -> Status;
    fn dilattn_tensor_contiguous(data: *mut c_void, dtype: c_int, d0: i64, d1: i64, d2: i64, d3: i64) -> Tensor;
}

fn check(s: Status) {
    if s != 0 {
        unsafe {
            panic!("{}: {}", CStr::from_ptr(dilattn_status_string(s)).to_string_lossy(),
                   CStr::from_ptr(dilattn_last_error()).to_string_lossy());
        }
    }
}

fn forward(desc: *mut c_void, backend: c_int, n: i64, h: i64, d: i64, q: &mut [f32], k: &mut [f32],
           v: &mut [f32]) -> (Vec<f32>, String) {
    let mut o = vec![0f32; q.len()];
    unsafe {
        let mut plan = std::ptr::null_mut();
        let shape = Shape { struct_size: std::mem::size_of::<Shape>(), batch: 1, seqlen_q: n, seqlen_k: n,
                            heads_q: h, heads_kv: h, head_dim: d };
        check(dilattn_plan_create(&mut plan, desc, &shape, F32, backend));
        let t = |p: *mut f32| dilattn_tensor_contiguous(p as *mut c_void, F32, 1, n, h, d);
        let (tq, tk, tv, to) = (t(q.as_mut_ptr()), t(k.as_mut_ptr()), t(v.as_mut_ptr()), t(o.as_mut_ptr()));
        check(dilattn_forward(plan, &tq, &tk, &tv, &to, std::ptr::null(), std::ptr::null_mut(), 0));
        let mut ran = 0;
        check(dilattn_plan_backend(plan, &mut ran));
        let name = CStr::from_ptr(dilattn_backend_name(ran)).to_string_lossy().into_owned();
        check(dilattn_plan_destroy(plan));
        (o, name)
    }
}

fn main() {
    let (n, h, d) = (256i64, 4i64, 32i64);
    let len = (n * h * d) as usize;
    let mut seed = 42u64;
    let mut rand = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 40) as f32) / ((1u64 << 24) as f32) - 0.5
    };
    let mut q: Vec<f32> = (0..len).map(|_| rand()).collect();
    let mut k: Vec<f32> = (0..len).map(|_| rand()).collect();
    let mut v: Vec<f32> = (0..len).map(|_| rand()).collect();
    let (segments, dilations) = ([64i64, 128, 256], [1i64, 2, 4]);
    unsafe {
        let mut desc = std::ptr::null_mut();
        check(dilattn_desc_create(&mut desc));
        check(dilattn_desc_set_dilated(desc, 3, segments.as_ptr(), dilations.as_ptr(), HEADS_MOD));
        let (fast, name) = forward(desc, BACKEND_AUTO, n, h, d, &mut q, &mut k, &mut v);
        let (reference, _) = forward(desc, BACKEND_REF, n, h, d, &mut q, &mut k, &mut v);
        let max_err = fast.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("dilated forward N={n} H={h} D={d} on backend {name}: max |O - ref| = {max_err:.2e}");
        check(dilattn_desc_destroy(desc));
    }
}
