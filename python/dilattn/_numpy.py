"""_numpy.py - the numpy front end: dilattn.forward and dilattn.backward on numpy arrays.

Arrays are passed to the library as views, without copies, whenever the C ABI can describe
them (SPEC 1: strides in whole elements, >= 0, native byte order, the data pointer a multiple
of the element size): slices, transposes and broadcasts (stride 0) included. Anything else
(negative strides, byte strides that are not a multiple of the item size, non-native byte
order, an array at an odd offset into a buffer, e.g. np.frombuffer(buf, np.float32, offset=1))
is copied to a new, aligned, contiguous array first, which the library refuses otherwise.

dtypes: float32, float64 and float16; bf16 has no numpy dtype (use dilattn.torch). The
outputs are new C-contiguous arrays: O, dQ in q's dtype, dK, dV in k's and v's; LSE is
[B, H, Nq], float64 from the ref backend and for float64 inputs (computed in f64, SPEC 12),
float32 otherwise (SPEC 1). q, k, v (and o, do) must share one dtype; a mismatch is named in
those terms ("k is float32 but q is float64").

torch tensors are refused with a TypeError naming dilattn.torch.attention, the function for them:
converted here they would come back as numpy arrays, without autograd and off their device.
"""
import contextlib
import ctypes as C
import sys
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _abi, _cints, _progress
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


def _refuse_torch(name, x):
    """A torch tensor would be converted to numpy and the results handed back as numpy arrays,
    without autograd or its device: the caller means dilattn.torch.attention."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        raise TypeError(f"{name} is a torch.Tensor: dilattn's numpy functions (dilattn.forward, "
                        "dilattn.backward, dilattn.mask.topk, dilattn.ring) take numpy arrays; "
                        "use dilattn.torch.attention(q, k, v, ...) for torch tensors (autograd, "
                        "CUDA), or pass t.numpy()")


def same_dtype(named):
    """Raises DILATTN_ERROR_DTYPE_MISMATCH naming the first of the (name, dtype name) pairs
    whose dtype differs from the first's, in the caller's terms (SPEC 1: the inputs and outputs
    of one call have one dtype)."""
    first_name, first = named[0]
    for name, dtype in named[1:]:
        if dtype != first:
            names = ", ".join(n for n, _ in named)
            raise error_for("DILATTN_ERROR_DTYPE_MISMATCH",
                            f"{name} is {dtype} but {first_name} is {first}: {names} must have "
                            "one dtype (a list or Python floats become float64)")


def as_array(name, x):
    """x as a 4-d numpy array the library can view: the same memory when possible."""
    _refuse_torch(name, x)
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
    _refuse_torch("lse", lse)
    lse = np.asarray(lse)
    return lse[..., None] if lse.ndim == 3 else lse


def _dropout_call(options, seed, offset):
    """(seed, offset) for Plan.forward/backward, or None: no seed, no dropout. Dropout without
    a seed is refused here, as the library refuses it (SPEC 11.2): a default seed would repeat
    one mask at every step."""
    if seed is None:
        if options.dropout_p != 0.0:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"dropout_p={options.dropout_p!r} needs seed= (and offset=, "
                            "advanced every step)")
        return None
    return seed, offset


def _sink_array(sinks, H):
    """The H sink logits (SPEC 10.3) as a ctypes double array, or None. The count is checked
    here: the library reads exactly heads_q values."""
    if sinks is None:
        return None
    _refuse_torch("sinks", sinks)
    try:
        values = np.asarray(sinks, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"sinks={sinks!r}: expected {H} numbers (one per query head)") from None
    if values.size != H:
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"sinks has {values.size} values, need heads_q = {H} (one per query "
                        "head)")
    return (C.c_double * H)(*values)


def _packed_unbatched(options, q, max_seqlen_q, max_seqlen_k):
    """For a packed batch (SPEC 10.2): whether q comes without the batch axis, as
    FlashAttention's varlen functions take it ([total_q, H, D]); and max_seqlen_q/k, which
    FlashAttention takes as bounds, checked against the offsets. False without packing."""
    if options.cu_seqlens_q is None:
        for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if value is not None:
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                f"{name}={value!r} without cu_seqlens_q/k: it bounds the "
                                "sequences of a packed batch")
        return False
    for name, value, cu in (("max_seqlen_q", max_seqlen_q, options.cu_seqlens_q),
                            ("max_seqlen_k", max_seqlen_k, options.cu_seqlens_k)):
        if value is None:
            continue
        longest = max(b - a for a, b in zip(cu, cu[1:]))
        if _cints.int64(value, name) < longest:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"{name}={value!r}: the longest packed sequence has {longest} rows")
    return np.ndim(q) == 3


def _add_batch(x):
    """A packed tensor without its batch axis, viewed with a batch of 1."""
    _refuse_torch("tensor", x)
    return np.asarray(x)[None]


def _dtype_names(named):
    return [(name, str(array.dtype.newbyteorder("="))) for name, array in named]


def forward(q: Any, k: Any, v: Any, *, segments: Optional[Sequence[int]] = None,
            dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
            causal: bool = False, scale: Optional[float] = None, mask: Any = None,
            backend: str = "auto", pool: Any = None, dropout_p: float = 0.0,
            seed: Optional[int] = None, offset: int = 0,
            window_size: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
            alibi_slopes: Optional[Sequence[float]] = None, cu_seqlens_q: Any = None,
            cu_seqlens_k: Any = None, max_seqlen_q: Optional[int] = None,
            max_seqlen_k: Optional[int] = None,
            sinks: Any = None, progress: Any = None) -> Tuple[np.ndarray, np.ndarray]:
    """Attention of q [B, Nq, H, D] over k, v [B, Nk, Hkv, D] (SPEC 2-4).

    Returns (o, lse): o [B, Nq, H, D] in q's dtype, lse [B, H, Nq] (natural log; -inf for a row
    with no keys). Dense by default; dilated with segments=[w...], dilations=[r...] and
    heads_mode "mod" | "block" | "groups"; block-sparse with mask=dilattn.mask.pattern(...).
    pool: a dilattn.Pool (host) for the workspace. Raises dilattn.Error (a subclass per kind of failure) with the library's message.

    Dropout (SPEC 11): dropout_p in [0, 1) drops each (query, key) pair's probability with
    that chance and scales the kept ones by 1 / (1 - dropout_p); lse is unaffected. It needs
    seed (0 .. 2**64 - 1) and offset (0 .. 2**32 - 1), which fix the mask: advance the offset
    every training step and pass the same pair to backward. Backends "cpu" (what "auto" picks),
    "ref" and "emu" run dropout and drop the same pairs.

    Precision: backend "ref" computes in f64 whatever the dtype; the fast "cpu" backend (what
    "auto" picks for float64 inputs, which the GPU backends refuse) computes float64 inputs in
    float64, within 1e-10 of "ref", and returns a float64 lse (docs/spec.md section 12);
    float32 and float16 inputs are computed in float32 (SPEC 8's bounds).

    Variants (docs/spec.md section 10.1; backends "ref", "cpu", "cuda" and "emu"; "auto" on
    host arrays picks "cpu"):
    window_size=(left, right) keeps keys i + d - left <= j <= i + d + right (-1: unbounded);
    softcap=c > 0 caps scores as c * tanh(s / c); alibi_slopes (H values, or B * H as [B][H])
    add -m * |i + d - j| after the softcap (d = Nk - Nq).

    Packed batches (docs/spec.md section 10.2, backends "ref" and "cpu"), as FlashAttention's varlen
    functions: q [total_q, H, D], k, v [total_k, Hkv, D] (or the same with a leading batch of
    1), cu_seqlens_q and cu_seqlens_k the n + 1 offsets of n sequences; each sequence attends
    only within itself. o is then [total_q, H, D] and lse [H, total_q] for 3-d inputs.
    max_seqlen_q/k, when given, must be at least the longest sequence.

    Sinks (docs/spec.md section 10.3; backends "ref", "cpu", "cuda" and "emu"): sinks, H logits
    (one per query head, finite or -inf), join every row's softmax once with no value; lse
    includes them, and a row with no key gets o = 0, lse = sinks[h].

    Progress (docs/spec.md section 14.11): progress=True shows a tqdm bar when tqdm is
    installed; progress=callable is called as callable(done, total) from this thread, and a
    true return stops the call (dilattn.CancelledError, o and lse never returned). An exception
    the callable raises, KeyboardInterrupt (Ctrl-C) included, stops the call and is raised."""
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend, pool,
                      dropout_p, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, sinks=sinks is not None)
    dropout = _dropout_call(options, seed, offset)
    unbatched = _packed_unbatched(options, q, max_seqlen_q, max_seqlen_k)
    if unbatched:
        q, k, v = (_add_batch(x) for x in (q, k, v))
    q, k, v = as_array("q", q), as_array("k", k), as_array("v", v)
    same_dtype(_dtype_names((("q", q), ("k", k), ("v", v))))
    plan = Plan(options, _sizes(q, k), dtype_name("q", q))
    try:
        B, Nq, H, _ = q.shape
        o = np.empty(q.shape, dtype=q.dtype)
        lse = np.empty((B, H, Nq, 1), dtype=_NUMPY_DTYPES[plan.lse_dtype()])
        with _progress.make(progress, "forward") or contextlib.nullcontext() as reporter:
            plan.forward(view("q", q), view("k", k), view("v", v), view("o", o),
                         view("lse", lse), dropout=dropout, sinks=_sink_array(sinks, H),
                         progress=reporter)
    finally:
        plan.close()
    return (o[0], lse[0, ..., 0]) if unbatched else (o, lse[..., 0])


def backward(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, *,
             segments: Optional[Sequence[int]] = None,
             dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
             causal: bool = False, scale: Optional[float] = None, mask: Any = None,
             backend: str = "auto", pool: Any = None, dropout_p: float = 0.0,
             seed: Optional[int] = None, offset: int = 0,
             window_size: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
             alibi_slopes: Optional[Sequence[float]] = None, cu_seqlens_q: Any = None,
             cu_seqlens_k: Any = None, max_seqlen_q: Optional[int] = None,
             max_seqlen_k: Optional[int] = None, sinks: Any = None, progress: Any = None
             ) -> Tuple[np.ndarray, ...]:
    """Gradients (dq, dk, dv) of the forward with the same options, from its o and lse and
    the output gradient do (SPEC 6, and SPEC 10.1 for window_size, softcap and alibi_slopes).
    Deterministic: the same inputs give the same bits. With dropout, pass the forward's
    dropout_p, seed and offset (SPEC 11.3). A packed batch (SPEC 10.2) takes the forward's
    cu_seqlens_q/k and, with 3-d q, its 2-d lse [H, total_q]. With sinks (SPEC 10.3) it
    returns (dq, dk, dv, d_sinks), d_sinks [H] the sinks' gradient. progress as for forward."""
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend, pool,
                      dropout_p, window_size=window_size, softcap=softcap,
                      alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, sinks=sinks is not None)
    dropout = _dropout_call(options, seed, offset)
    unbatched = _packed_unbatched(options, q, max_seqlen_q, max_seqlen_k)
    if unbatched:
        q, k, v, o, do, lse = (_add_batch(x) for x in (q, k, v, o, do, lse))
    q, k, v, o, do = (as_array(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                                   ("do", do)))
    same_dtype(_dtype_names((("q", q), ("k", k), ("v", v), ("o", o), ("do", do))))
    lse = as_array("lse", _lse4(lse))
    plan = Plan(options, _sizes(q, k), dtype_name("q", q))
    try:
        dq, dk, dv = (np.empty(x.shape, dtype=x.dtype) for x in (q, k, v))
        H = q.shape[2]
        d_sinks = None if sinks is None else (C.c_double * H)()
        with _progress.make(progress, "backward") or contextlib.nullcontext() as reporter:
            plan.backward(view("q", q), view("k", k), view("v", v), view("o", o),
                          view("lse", lse), view("do", do), view("dq", dq), view("dk", dk),
                          view("dv", dv), dropout=dropout, sinks=_sink_array(sinks, H),
                          d_sinks=d_sinks, progress=reporter)
    finally:
        plan.close()
    grads = (dq[0], dk[0], dv[0]) if unbatched else (dq, dk, dv)
    return grads if sinks is None else grads + (np.array(d_sinks[:], dtype=np.float64),)
