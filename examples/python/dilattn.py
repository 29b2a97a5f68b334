"""dilattn.py - a small ctypes binding of the dilattn C ABI (lib/dilattn.h), numpy only.

What it does: loads libdilattn (env DILATTN_LIB, else the newest build*/lib/libdilattn.so next to
this repository), wraps numpy arrays of any non-negative strides as dilattn_tensor views, and
runs forward / backward (SPEC 2-3 and 6). Every failing call raises DilattnError carrying the
status name and dilattn_last_error(). bf16 has no numpy dtype: pass uint16 arrays holding bf16
bits with dtype="bf16" (to_bf16 / from_bf16 convert, round to nearest even).

    import numpy as np, dilattn
    o, lse = dilattn.forward(q, k, v, segments=[4, 8], dilations=[1, 2], head_mode="mod")
    dq, dk, dv = dilattn.backward(q, k, v, o, lse, d_o, segments=[4, 8], dilations=[1, 2])

Used by tests/python/ (checked there against an independent numpy implementation of SPEC.md)
and by examples/python/example.py.
"""
import ctypes
import glob
import os

import numpy as np

# ---------------------------------------------------------------- enums of dilattn.h
STATUS_NAMES = [
    "DILATTN_SUCCESS", "DILATTN_ERROR_NULL_POINTER", "DILATTN_ERROR_SHAPE_MISMATCH",
    "DILATTN_ERROR_DTYPE_MISMATCH", "DILATTN_ERROR_HEADS_NOT_DIVISIBLE",
    "DILATTN_ERROR_BAD_SEGMENT", "DILATTN_ERROR_BAD_DILATION", "DILATTN_ERROR_NO_BRANCHES",
    "DILATTN_ERROR_GROUPS_TOO_FEW_HEADS", "DILATTN_ERROR_BAD_SCALE",
    "DILATTN_ERROR_SIZE_OVERFLOW", "DILATTN_ERROR_BAD_MASK", "DILATTN_ERROR_DEVICE_NOT_BUILT",
    "DILATTN_ERROR_DEVICE_MISMATCH", "DILATTN_ERROR_INVALID_VALUE",
    "DILATTN_ERROR_SEQLEN_MISMATCH", "DILATTN_ERROR_UNSUPPORTED",
    "DILATTN_ERROR_BACKEND_NOT_BUILT", "DILATTN_ERROR_OUT_OF_MEMORY",
    "DILATTN_ERROR_WORKSPACE_TOO_SMALL", "DILATTN_ERROR_CUDA", "DILATTN_ERROR_INTERNAL",
    "DILATTN_ERROR_POOL_DOUBLE_FREE", "DILATTN_ERROR_POOL_FOREIGN_POINTER",
    "DILATTN_ERROR_POOL_INTERIOR_POINTER", "DILATTN_ERROR_POOL_ZERO_SIZE",
    "DILATTN_ERROR_POOL_TOO_LARGE", "DILATTN_ERROR_POOL_DESTROYED", "DILATTN_ERROR_COMM",
]
DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3}
NUMPY_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
                np.dtype(np.float16): "f16"}
HEAD_MODES = {"mod": 0, "block": 1, "groups": 2}
BACKENDS = {"auto": 0, "ref": 1, "cpu": 2, "cuda": 3, "emu": 4}
DEVICE_CPU = 0


class DilattnError(Exception):
    """A dilattn call returned an error status; .status (int), .name, .message."""

    def __init__(self, status, message):
        self.status = status
        self.name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        self.message = message
        super().__init__(f"{self.name}: {message}")


class Tensor(ctypes.Structure):
    """struct dilattn_tensor: struct_size, data, dtype, device, device_index, shape[4], strides[4]."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                ("device_index", ctypes.c_int32), ("shape", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class Shape(ctypes.Structure):
    """struct dilattn_shape: struct_size, then B, Nq, Nk, H, Hkv, D."""
    _fields_ = [("struct_size", ctypes.c_size_t)] + [
        (name, ctypes.c_int64) for name in
        ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")]


# ---------------------------------------------------------------- loading the library
def _find_library():
    path = os.environ.get("DILATTN_LIB")
    if path:
        return path
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = glob.glob(os.path.join(repo, "build*", "lib", "libdilattn.so"))
    if not found:
        raise OSError("libdilattn.so not found: set DILATTN_LIB or build into ./build")
    return max(found, key=os.path.getmtime)


def _load():
    lib = ctypes.CDLL(_find_library())
    P = ctypes.c_void_p
    T = ctypes.POINTER(Tensor)
    i64 = ctypes.c_int64
    sigs = {
        "dilattn_version": ([], ctypes.c_int),
        "dilattn_status_string": ([ctypes.c_int], ctypes.c_char_p),
        "dilattn_last_error": ([], ctypes.c_char_p),
        "dilattn_backend_available": ([ctypes.c_int], ctypes.c_int),
        "dilattn_desc_create": ([ctypes.POINTER(P)], ctypes.c_int),
        "dilattn_desc_destroy": ([P], ctypes.c_int),
        "dilattn_desc_set_dilated": ([P, ctypes.c_int32, ctypes.POINTER(i64),
                                      ctypes.POINTER(i64), ctypes.c_int], ctypes.c_int),
        "dilattn_desc_set_causal": ([P, ctypes.c_int32], ctypes.c_int),
        "dilattn_desc_set_scale": ([P, ctypes.c_double], ctypes.c_int),
        "dilattn_plan_create": ([ctypes.POINTER(P), P, ctypes.POINTER(Shape), ctypes.c_int,
                                 ctypes.c_int], ctypes.c_int),
        "dilattn_plan_destroy": ([P], ctypes.c_int),
        "dilattn_forward": ([P, T, T, T, T, T, P, ctypes.c_size_t], ctypes.c_int),
        "dilattn_backward": ([P, T, T, T, T, T, T, T, T, T, P, ctypes.c_size_t], ctypes.c_int),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return lib


_lib = None


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = _load()
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
    t = Tensor()
    t.struct_size = ctypes.sizeof(Tensor)
    t.data = array.ctypes.data
    t.dtype = DTYPES[dtype_name(array, dtype)]
    t.device = DEVICE_CPU
    t.device_index = 0
    for i in range(4):
        t.shape[i] = array.shape[i]
        if array.strides[i] % array.itemsize:
            raise ValueError("strides must be whole elements")
        t.strides[i] = array.strides[i] // array.itemsize
    return t


# ---------------------------------------------------------------- descriptions and plans
class Plan:
    """A dilattn plan: dense (no segments) or dilated attention, on one backend."""

    def __init__(self, B, Nq, Nk, H, Hkv, D, dtype="f32", segments=None, dilations=None,
                 head_mode="mod", causal=False, scale=None, backend="ref"):
        L = lib()
        self._plan = ctypes.c_void_p()
        desc = ctypes.c_void_p()
        _check(L.dilattn_desc_create(ctypes.byref(desc)))
        try:
            if segments is not None:
                n = len(segments)
                w = (ctypes.c_int64 * max(n, 1))(*segments)
                r = (ctypes.c_int64 * max(n, 1))(*dilations)
                _check(L.dilattn_desc_set_dilated(desc, n, w, r, HEAD_MODES[head_mode]))
            _check(L.dilattn_desc_set_causal(desc, 1 if causal else 0))
            if scale is not None:
                _check(L.dilattn_desc_set_scale(desc, float(scale)))
            shape = Shape(ctypes.sizeof(Shape), B, Nq, Nk, H, Hkv, D)
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
    the ref backend, else f32). config: segments, dilations, head_mode, causal, scale, backend."""
    if lse_dtype is None:
        lse_dtype = np.float64 if config.get("backend", "ref") == "ref" else np.float32
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
