"""dilattn_ctypes.py - a small ctypes binding of the dilattn C ABI (lib/dilattn.h), numpy only, that
runs from a source checkout without pip install.

What it does: loads libdilattn (env DILATTN_LIB, else the newest build*/lib/libdilattn.so next to
this repository), wraps numpy arrays of any non-negative strides as dilattn_tensor views, and
runs forward / backward (SPEC 2-3 and 6). Every failing call raises DilattnError carrying the
status name and dilattn_last_error(). bf16 has no numpy dtype: pass uint16 arrays holding bf16
bits with dtype="bf16" (to_bf16 / from_bf16 convert, round to nearest even).

    import numpy as np, dilattn_ctypes
    o, lse = dilattn_ctypes.forward(q, k, v, segments=[4, 8], dilations=[1, 2], heads_mode="mod")
    dq, dk, dv = dilattn_ctypes.backward(q, k, v, o, lse, d_o, segments=[4, 8], dilations=[1, 2])

Its name is not the Python package's (python/dilattn, `pip install .`), so the two never shadow
each other; its keywords are the package's (segments, dilations, heads_mode, causal, scale,
backend).

The ABI's declarations (enums, structs, function signatures) are not repeated here: they are the
Python package's python/dilattn/_abi.py, loaded by its path (it needs nothing but the standard
library), so a change of the C ABI is made, and checked against the headers, in one file.

Used by tests/python/ (checked there against an independent numpy implementation of docs/spec.md, tests/common/spec_numpy.py)
and by examples/python/example.py.
"""
import ctypes
import glob
import importlib.util
import os

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_abi():
    path = os.path.join(_REPO, "python", "dilattn", "_abi.py")
    spec = importlib.util.spec_from_file_location("dilattn_abi", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_abi = _load_abi()
STATUS_NAMES = _abi.STATUS_NAMES
DTYPES = _abi.DTYPES
HEAD_MODES = _abi.HEAD_MODES
BACKENDS = _abi.BACKENDS
NUMPY_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
                np.dtype(np.float16): "f16"}


class DilattnError(Exception):
    """A dilattn call returned an error status; .status (int), .name, .message."""

    def __init__(self, status, message):
        self.status = status
        self.name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        self.message = message
        super().__init__(f"{self.name}: {message}")


# ---------------------------------------------------------------- loading the library
def _find_library():
    path = os.environ.get("DILATTN_LIB")
    if path:
        return path
    found = glob.glob(os.path.join(_REPO, "build*", "lib", "libdilattn.so"))
    if not found:
        raise OSError("libdilattn.so not found: set DILATTN_LIB or build into ./build")
    return max(found, key=os.path.getmtime)


_lib = None


def lib():
    """The loaded library (loaded on first use), declared by _abi.SIGNATURES."""
    global _lib
    if _lib is None:
        _lib = _abi.use_library(_find_library())
    return _lib


def _check(status):
    if status != 0:
        raise DilattnError(status, lib().dilattn_last_error().decode())


def backend_available(backend):
    return bool(lib().dilattn_backend_available(BACKENDS[backend]))


# ---------------------------------------------------------------- bf16 helpers
def to_bf16(x):
    """float array -> uint16 bf16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    """uint16 bf16 bits -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------- tensors
def dtype_name(array, dtype=None):
    if dtype is not None:
        return dtype
    try:
        return NUMPY_DTYPES[array.dtype]
    except KeyError:
        raise TypeError(f"array dtype {array.dtype}: pass dtype='bf16' for uint16 bf16 bits")


def tensor(array, dtype=None):
    """A dilattn_tensor view of a 4-d numpy array (strides in elements, any order)."""
    if array.ndim != 4:
        raise ValueError(f"dilattn tensors are 4-d, got shape {array.shape}")
    if any(s % array.itemsize for s in array.strides):
        raise ValueError("strides must be whole elements")
    return _abi.tensor(array.ctypes.data, dtype_name(array, dtype), array.shape,
                       [s // array.itemsize for s in array.strides])


# ---------------------------------------------------------------- descriptions and plans
class Plan:
    """A dilattn plan: dense (no segments) or dilated attention, on one backend."""

    def __init__(self, B, Nq, Nk, H, Hkv, D, dtype="f32", segments=None, dilations=None,
                 heads_mode="mod", causal=False, scale=None, backend="ref"):
        L = lib()
        self._plan = ctypes.c_void_p()
        desc = ctypes.c_void_p()
        _check(L.dilattn_desc_create(ctypes.byref(desc)))
        try:
            if segments is not None:
                n = len(segments)
                w = (ctypes.c_int64 * max(n, 1))(*segments)
                r = (ctypes.c_int64 * max(n, 1))(*dilations)
                _check(L.dilattn_desc_set_dilated(desc, n, w, r, HEAD_MODES[heads_mode]))
            _check(L.dilattn_desc_set_causal(desc, 1 if causal else 0))
            if scale is not None:
                _check(L.dilattn_desc_set_scale(desc, float(scale)))
            shape = _abi.shape(B, Nq, Nk, H, Hkv, D)
            _check(L.dilattn_plan_create(ctypes.byref(self._plan), desc, ctypes.byref(shape),
                                         DTYPES[dtype], BACKENDS[backend]))
        finally:
            L.dilattn_desc_destroy(desc)
        self.dtype = dtype

    def close(self):
        if self._plan:
            lib().dilattn_plan_destroy(self._plan)
            self._plan = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def forward(self, q, k, v, o, lse=None):
        t = [tensor(x, self.dtype) for x in (q, k, v, o)]
        tl = None if lse is None else ctypes.byref(tensor(lse))
        _check(lib().dilattn_forward(self._plan, *[ctypes.byref(x) for x in t], tl, None, 0))

    def backward(self, q, k, v, o, lse, d_o, dq, dk, dv):
        t = [tensor(x, self.dtype) for x in (q, k, v, o)] + [tensor(lse)]
        t += [tensor(x, self.dtype) for x in (d_o, dq, dk, dv)]
        _check(lib().dilattn_backward(self._plan, *[ctypes.byref(x) for x in t], None, 0))


def _plan_for(q, k, dtype, **config):
    B, Nq, H, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    return Plan(B, Nq, Nk, H, Hkv, D, dtype=dtype_name(q, dtype), **config)


def forward(q, k, v, dtype=None, lse_dtype=None, **config):
    """O [B, Nq, H, D] (q's dtype) and LSE [B, H, Nq] (lse_dtype: f32 or f64; default f64 on
    the ref backend and for f64 inputs, which every backend computes in f64, else f32).
    config: segments, dilations, heads_mode, causal, scale, backend."""
    if lse_dtype is None:
        f64 = config.get("backend", "ref") == "ref" or dtype_name(q, dtype) == "f64"
        lse_dtype = np.float64 if f64 else np.float32
    plan = _plan_for(q, k, dtype, **config)
    B, Nq, H, D = q.shape
    o = np.zeros(q.shape, dtype=q.dtype)
    lse = np.zeros((B, H, Nq, 1), dtype=lse_dtype)
    plan.forward(q, k, v, o, lse)
    plan.close()
    return o, lse[..., 0]


def backward(q, k, v, o, lse, d_o, dtype=None, **config):
    """dQ, dK, dV (q's dtype) from the forward's O and LSE [B, H, Nq] (SPEC 6)."""
    plan = _plan_for(q, k, dtype, **config)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    plan.backward(q, k, v, o, np.asarray(lse)[..., None], d_o, dq, dk, dv)
    plan.close()
    return dq, dk, dv
