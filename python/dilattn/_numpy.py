"""_numpy.py - the numpy front end: dilattn.forward and dilattn.backward on numpy arrays.

Arrays are passed to the library as views, without copies, whenever the C ABI can describe
them (SPEC 1: strides in whole elements, >= 0, native byte order, the data pointer a multiple
of the element size): slices, transposes and broadcasts (stride 0) included. Anything else
(negative strides, byte strides that are not a multiple of the item size, non-native byte
order, an array at an odd offset into a buffer, e.g. np.frombuffer(buf, np.float32, offset=1))
is copied to a new, aligned, contiguous array first, which the library refuses otherwise.

dtypes: float32, float64 and float16; bf16 has no numpy dtype (use dilattn.torch). The
outputs are new C-contiguous arrays: O, dQ in q's dtype, dK, dV in k's and v's; LSE is
[B, H, Nq], float64 from the ref backend and float32 from the others (SPEC 1).
"""
import numpy as np

from . import _abi
from ._errors import error_for
from ._plan import Options, Plan

_DTYPE_NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
                np.dtype(np.float16): "f16"}
_NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64}


def dtype_name(name, array):
    try:
        return _DTYPE_NAMES[array.dtype.newbyteorder("=")]
    except KeyError:
        raise error_for("DILATTN_ERROR_DTYPE_MISMATCH",
                        f"{name} has dtype {array.dtype}: dilattn takes float32, float64 and "
                        "float16 numpy arrays (bf16 through dilattn.torch)") from None


def _viewable(array):
    """True when the C ABI can describe the array as it is (SPEC 1)."""
    return (array.dtype.isnative and array.ctypes.data % array.itemsize == 0
            and all(s >= 0 and s % array.itemsize == 0 for s in array.strides))


def as_array(name, x):
    """x as a 4-d numpy array the library can view: the same memory when possible."""
    array = np.asarray(x)
    if array.ndim != 4:
        raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                        f"{name} has shape {array.shape}: expected 4 dimensions "
                        "(q, o: [B, N, H, D]; k, v: [B, N, Hkv, D]; lse: [B, H, N, 1])")
    dtype_name(name, array)
    if not _viewable(array):
        # A new array: ascontiguousarray would hand back a contiguous misaligned one as it is.
        array = np.array(array, dtype=array.dtype.newbyteorder("="), order="C", copy=True)
    return array


def view(name, array):
    """The dilattn_tensor view of a 4-d array from as_array (the array must outlive it)."""
    strides = [s // array.itemsize for s in array.strides]
    return _abi.tensor(array.ctypes.data, dtype_name(name, array), array.shape, strides)


def _sizes(q, k):
    B, Nq, H, D = q.shape
    return B, Nq, k.shape[1], H, k.shape[2], D


def _lse4(lse):
    """LSE as the library's [B, H, Nq, 1] view of a [B, H, Nq] (or already 4-d) array."""
    lse = np.asarray(lse)
    return lse[..., None] if lse.ndim == 3 else lse


def forward(q, k, v, *, segments=None, dilations=None, heads_mode="mod", causal=False,
            scale=None, mask=None, backend="auto", pool=None):
    """Attention of q [B, Nq, H, D] over k, v [B, Nk, Hkv, D] (SPEC 2-4).

    Returns (o, lse): o [B, Nq, H, D] in q's dtype, lse [B, H, Nq] (natural log; -inf for a row
    with no keys). Dense by default; dilated with segments=[w...], dilations=[r...] and
    heads_mode "mod" | "block" | "groups"; block-sparse with mask=dilattn.mask.pattern(...).
    pool: a dilattn.Pool (host) for the workspace. Raises dilattn.Error (a subclass per kind of failure) with the library's message."""
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend, pool)
    q, k, v = as_array("q", q), as_array("k", k), as_array("v", v)
    plan = Plan(options, _sizes(q, k), dtype_name("q", q))
    try:
        B, Nq, H, _ = q.shape
        o = np.empty(q.shape, dtype=q.dtype)
        lse = np.empty((B, H, Nq, 1), dtype=_NUMPY_DTYPES[plan.lse_dtype()])
        plan.forward(view("q", q), view("k", k), view("v", v), view("o", o), view("lse", lse))
    finally:
        plan.close()
    return o, lse[..., 0]


def backward(q, k, v, o, lse, do, *, segments=None, dilations=None, heads_mode="mod",
             causal=False, scale=None, mask=None, backend="auto", pool=None):
    """Gradients (dq, dk, dv) of the forward with the same options, from its o and lse and
    the output gradient do (SPEC 6). Deterministic: the same inputs give the same bits."""
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend, pool)
    q, k, v, o, do = (as_array(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                                   ("do", do)))
    lse = as_array("lse", _lse4(lse))
    plan = Plan(options, _sizes(q, k), dtype_name("q", q))
    try:
        dq, dk, dv = (np.empty(x.shape, dtype=x.dtype) for x in (q, k, v))
        plan.backward(view("q", q), view("k", k), view("v", v), view("o", o),
                      view("lse", lse), view("do", do), view("dq", dq), view("dk", dk),
                      view("dv", dv))
    finally:
        plan.close()
    return dq, dk, dv
