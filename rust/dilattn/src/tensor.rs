//! Tensor views over Rust slices (SPEC 1): a shape and strides in elements, checked in Rust so
//! that the library never reads or writes outside the slice.
//!
//! Tensor (read-only) may have any strides >= 0, repeats included (stride 0 broadcasts).
//! TensorMut (written by the library) must not reach one element twice: its strides, sorted,
//! each step over everything the smaller ones span.
use dilattn_sys as sys;

use crate::error::{Error, Result};
use crate::half::{Bf16, F16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for crate::half::F16 {}
    impl Sealed for crate::half::Bf16 {}
}

/// The element types of the C ABI (SPEC 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
    F16,
    Bf16,
}

impl Dtype {
    pub(crate) fn raw(self) -> sys::dilattn_dtype {
        match self {
            Dtype::F32 => sys::DILATTN_F32,
            Dtype::F64 => sys::DILATTN_F64,
            Dtype::F16 => sys::DILATTN_F16,
            Dtype::Bf16 => sys::DILATTN_BF16,
        }
    }
}

/// An element type the library takes from Rust slices: f32, f64, and F16 and Bf16 (u16 bits in
/// newtypes: std has no stable f16 or bf16).
pub trait Element: Copy + Default + sealed::Sealed + Send + Sync + 'static {
    const DTYPE: Dtype;
}
impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
}
impl Element for f64 {
    const DTYPE: Dtype = Dtype::F64;
}
impl Element for F16 {
    const DTYPE: Dtype = Dtype::F16;
}
impl Element for Bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
}

fn contiguous_strides(shape: [usize; 4]) -> [usize; 4] {
    [shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1]
}

/// Checks that every element of the view lies in a slice of `len` elements.
fn check_bounds(name: &str, len: usize, shape: [usize; 4], strides: [usize; 4]) -> Result<()> {
    if shape.iter().any(|&s| s == 0) {
        return Ok(());
    }
    let mut last: usize = 0;
    for d in 0..4 {
        let reach = (shape[d] - 1).checked_mul(strides[d]);
        last = match reach.and_then(|r| last.checked_add(r)) {
            Some(x) => x,
            None => {
                return Err(Error::new(sys::DILATTN_ERROR_SIZE_OVERFLOW,
                                      format!("{name}: shape {shape:?} with strides {strides:?} \
                                               overflows")))
            }
        };
    }
    if last >= len {
        return Err(Error::new(sys::DILATTN_ERROR_SHAPE_MISMATCH,
                              format!("{name}: shape {shape:?} with strides {strides:?} reaches \
                                       element {last}, but the slice has {len} elements")));
    }
    Ok(())
}

/// Checks that no two indices of the view reach the same element (outputs only). An empty view
/// writes nothing (a ring rank may hold no rows, SPEC 5), whatever its strides.
fn check_no_overlap(shape: [usize; 4], strides: [usize; 4]) -> Result<()> {
    if shape.contains(&0) {
        return Ok(());
    }
    let mut dims: Vec<usize> = (0..4).filter(|&d| shape[d] > 1).collect();
    dims.sort_by_key(|&d| strides[d]);
    let mut span = 1; // elements spanned by the dims before this one
    for d in dims {
        if strides[d] < span {
            return Err(Error::new(sys::DILATTN_ERROR_INVALID_VALUE,
                                  format!("output view with shape {shape:?} and strides \
                                           {strides:?} writes some elements twice")));
        }
        span = strides[d] * (shape[d] - 1) + span;
    }
    Ok(())
}

fn raw_view(data: *mut std::ffi::c_void, dtype: sys::dilattn_dtype, shape: [usize; 4],
            strides: [usize; 4]) -> sys::dilattn_tensor {
    sys::dilattn_tensor {
        struct_size: std::mem::size_of::<sys::dilattn_tensor>(),
        data,
        dtype,
        device: sys::DILATTN_DEVICE_CPU,
        device_index: 0,
        shape: shape.map(|s| s as i64),
        strides: strides.map(|s| s as i64),
    }
}

/// A read-only view: Q, K, V, O, LSE or dO. Q, O: [B, Nq, H, D]; K, V: [B, Nk, Hkv, D];
/// LSE: [B, H, Nq, 1].
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a, T: Element> {
    data: &'a [T],
    shape: [usize; 4],
    strides: [usize; 4],
}

impl<'a, T: Element> Tensor<'a, T> {
    /// A C-order (row-major) view of the whole shape.
    pub fn new(data: &'a [T], shape: [usize; 4]) -> Result<Self> {
        Self::strided(data, shape, contiguous_strides(shape))
    }

    /// A view with strides in elements (any order; 0 repeats an element).
    pub fn strided(data: &'a [T], shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        check_bounds("tensor", data.len(), shape, strides)?;
        Ok(Tensor { data, shape, strides })
    }

    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }

    pub(crate) fn raw(&self) -> sys::dilattn_tensor {
        raw_view(self.data.as_ptr() as *mut _, T::DTYPE.raw(), self.shape, self.strides)
    }
}

/// A view the library writes: O, LSE, dQ, dK or dV.
#[derive(Debug)]
pub struct TensorMut<'a, T: Element> {
    data: &'a mut [T],
    shape: [usize; 4],
    strides: [usize; 4],
}

impl<'a, T: Element> TensorMut<'a, T> {
    pub fn new(data: &'a mut [T], shape: [usize; 4]) -> Result<Self> {
        Self::strided(data, shape, contiguous_strides(shape))
    }

    /// A strided output view; refused when two indices reach the same element.
    pub fn strided(data: &'a mut [T], shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        check_bounds("output tensor", data.len(), shape, strides)?;
        check_no_overlap(shape, strides)?;
        Ok(TensorMut { data, shape, strides })
    }

    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// The same memory as a read-only view (e.g. O from the forward into the backward).
    pub fn as_tensor(&self) -> Tensor<'_, T> {
        Tensor { data: self.data, shape: self.shape, strides: self.strides }
    }

    pub(crate) fn raw(&mut self) -> sys::dilattn_tensor {
        raw_view(self.data.as_mut_ptr() as *mut _, T::DTYPE.raw(), self.shape, self.strides)
    }
}
