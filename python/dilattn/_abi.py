"""_abi.py - every ctypes declaration of the dilattn C ABI (lib/dilattn.h, lib/dilattn_mask.h,
lib/dilattn_pool.h, lib/dilattn_ring.h) the package uses, in one place: enums, structs, function signatures and
loading the library. It imports nothing but the standard library, so examples/python loads this
file by path from a source checkout (no pip install) instead of declaring the ABI again.

A change of the C ABI is a change of this file only (tests/packages/python/test_abi.py compares the
declarations below with the header, so a forgotten change fails there).

The shared library is the one meson-python installed next to this file; DILATTN_LIB (a path)
overrides it, e.g. to run the package's Python code against a meson build directory, and
use_library(path) chooses one before the first call.
"""
import ctypes as C
import glob
import os

# ---------------------------------------------------------------- enums of dilattn.h
SUCCESS = 0
STATUS_NAMES = (
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
    "DILATTN_ERROR_CANCELLED",
)
STATUS = {name: value for value, name in enumerate(STATUS_NAMES)}

DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3}
DEVICE_CPU = 0
DEVICE_CUDA = 1
HEAD_MODES = {"mod": 0, "block": 1, "groups": 2}
BACKENDS = {"auto": 0, "ref": 1, "cpu": 2, "cuda": 3, "emu": 4}
BACKEND_NAMES = {value: name for name, value in BACKENDS.items()}
INDEX_INT64 = 1
POOL_GROWTH = {"fixed": 0, "grow": 1}  # dilattn_pool_growth
RING_SPLITS = {"contiguous": 0, "zigzag": 1}  # dilattn_ring_split (dilattn_ring.h)


# ---------------------------------------------------------------- structs
class Tensor(C.Structure):
    """struct dilattn_tensor. struct_size must be sizeof(dilattn_tensor): tensor() sets it."""
    _fields_ = [("struct_size", C.c_size_t), ("data", C.c_void_p), ("dtype", C.c_int),
                ("device", C.c_int), ("device_index", C.c_int32),
                ("shape", C.c_int64 * 4), ("strides", C.c_int64 * 4)]


class Shape(C.Structure):
    """struct dilattn_shape: B, Nq, Nk, H, Hkv, D by name."""
    _fields_ = [("struct_size", C.c_size_t), ("batch", C.c_int64), ("seqlen_q", C.c_int64),
                ("seqlen_k", C.c_int64), ("heads_q", C.c_int64), ("heads_kv", C.c_int64),
                ("head_dim", C.c_int64)]


class BsrView(C.Structure):
    """struct dilattn_bsr_view (dilattn_mask.h)."""
    _fields_ = [("struct_size", C.c_size_t), ("seqlen_q", C.c_int64), ("seqlen_k", C.c_int64),
                ("block_q", C.c_int64), ("block_k", C.c_int64), ("num_heads", C.c_int64),
                ("index_type", C.c_int), ("row_ptr", C.c_void_p), ("col_idx", C.c_void_p),
                ("head_ptr", C.c_void_p)]


# int (*dilattn_progress_fn)(void* user, int64_t done, int64_t total), SPEC 14.11.
PROGRESS_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int64, C.c_int64)


class CallOptions(C.Structure):
    """struct dilattn_call_options (SPEC 11.2, 10.3, 14.11); dilattn_call_options_make fills
    it."""
    _fields_ = [("struct_size", C.c_size_t), ("dropout_seed", C.c_uint64),
                ("dropout_offset", C.c_uint64), ("sinks", C.POINTER(C.c_double)),
                ("d_sinks", C.POINTER(C.c_double)), ("progress", PROGRESS_FN),
                ("progress_user", C.c_void_p)]


class PoolOptions(C.Structure):
    """struct dilattn_pool_options (dilattn_pool.h); dilattn_pool_options_init fills it."""
    _fields_ = [("struct_size", C.c_size_t), ("arena_bytes", C.c_size_t),
                ("min_block_bytes", C.c_size_t), ("growth", C.c_int32), ("max_arenas", C.c_int32)]


class PoolStats(C.Structure):
    """struct dilattn_pool_stats (dilattn_pool.h); set struct_size before the call."""
    _fields_ = [("struct_size", C.c_size_t), ("num_arenas", C.c_size_t),
                ("arena_bytes_total", C.c_size_t), ("bytes_in_use", C.c_size_t),
                ("bytes_requested", C.c_size_t), ("internal_fragmentation", C.c_size_t),
                ("peak_bytes_in_use", C.c_size_t), ("live_blocks", C.c_size_t),
                ("largest_free_block", C.c_size_t), ("free_blocks", C.c_size_t * 64)]


def tensor(data_ptr, dtype, shape, strides, device=DEVICE_CPU, device_index=0):
    """A dilattn_tensor view; shape and strides (in elements) have 4 entries. Host memory unless
    device is DEVICE_CUDA (then data_ptr is memory of CUDA device device_index)."""
    t = Tensor()
    t.struct_size = C.sizeof(Tensor)
    t.data = data_ptr
    t.dtype = DTYPES[dtype]
    t.device = device
    t.device_index = device_index
    for i in range(4):
        t.shape[i] = shape[i]
        t.strides[i] = strides[i]
    return t


def shape(B, Nq, Nk, H, Hkv, D):
    return Shape(C.sizeof(Shape), B, Nq, Nk, H, Hkv, D)


# ---------------------------------------------------------------- function signatures
_P = C.c_void_p
_PP = C.POINTER(C.c_void_p)
_T = C.POINTER(Tensor)
_I64 = C.c_int64
_PI64 = C.POINTER(C.c_int64)
_I32 = C.c_int32
_ST = C.c_int  # dilattn_status and the other enums are C ints

# name: (argument types, result type); the order and count follow the header. Every function
# of dilattn.h, dilattn_mask.h, dilattn_pool.h and dilattn_ring.h is here.
SIGNATURES = {
    "dilattn_version": ([], C.c_int),
    "dilattn_status_string": ([_ST], C.c_char_p),
    "dilattn_last_error": ([], C.c_char_p),
    "dilattn_tensor_contiguous": ([_P, C.c_int, _I64, _I64, _I64, _I64], Tensor),
    "dilattn_desc_create": ([_PP], _ST),
    "dilattn_desc_destroy": ([_P], _ST),
    "dilattn_desc_set_dense": ([_P], _ST),
    "dilattn_desc_set_dilated": ([_P, _I32, _PI64, _PI64, C.c_int], _ST),
    "dilattn_desc_set_block_sparse": ([_P, _P], _ST),
    "dilattn_desc_set_causal": ([_P, _I32], _ST),
    "dilattn_desc_set_scale": ([_P, C.c_double], _ST),
    "dilattn_desc_set_num_threads": ([_P, _I32], _ST),
    "dilattn_desc_set_pool": ([_P, _P], _ST),
    "dilattn_desc_set_dropout": ([_P, C.c_double], _ST),
    "dilattn_desc_set_window": ([_P, _I64, _I64], _ST),
    "dilattn_desc_set_softcap": ([_P, C.c_double], _ST),
    "dilattn_desc_set_alibi": ([_P, C.POINTER(C.c_double), _I64], _ST),
    "dilattn_desc_set_varlen": ([_P, _I64, C.POINTER(C.c_int64), C.POINTER(C.c_int64)], _ST),
    "dilattn_desc_set_sinks": ([_P, _I32], _ST),
    "dilattn_shape_make": ([_I64, _I64, _I64, _I64, _I64, _I64], Shape),
    "dilattn_plan_create": ([_PP, _P, C.POINTER(Shape), C.c_int, C.c_int], _ST),
    "dilattn_plan_destroy": ([_P], _ST),
    "dilattn_plan_backend": ([_P, C.POINTER(C.c_int)], _ST),
    "dilattn_plan_workspace_size": ([_P, C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)], _ST),
    "dilattn_plan_score_count": ([_P, _PI64], _ST),
    "dilattn_forward": ([_P, _T, _T, _T, _T, _T, _P, C.c_size_t], _ST),
    "dilattn_backward": ([_P, _T, _T, _T, _T, _T, _T, _T, _T, _T, _P, C.c_size_t], _ST),
    # cuda_stream: a cudaStream_t as void* (None: the legacy default stream)
    "dilattn_forward_on_stream": ([_P, _P, _T, _T, _T, _T, _T, _P, C.c_size_t], _ST),
    "dilattn_backward_on_stream": ([_P, _P, _T, _T, _T, _T, _T, _T, _T, _T, _T, _P, C.c_size_t],
                                   _ST),
    "dilattn_call_options_make": ([], CallOptions),
    "dilattn_forward_ex": ([_P, _T, _T, _T, _T, _T, C.POINTER(CallOptions), _P, C.c_size_t],
                           _ST),
    "dilattn_backward_ex": ([_P, _T, _T, _T, _T, _T, _T, _T, _T, _T, C.POINTER(CallOptions), _P,
                             C.c_size_t], _ST),
    "dilattn_forward_on_stream_ex": ([_P, _P, _T, _T, _T, _T, _T, C.POINTER(CallOptions), _P,
                                     C.c_size_t], _ST),
    "dilattn_backward_on_stream_ex": ([_P, _P, _T, _T, _T, _T, _T, _T, _T, _T, _T,
                                      C.POINTER(CallOptions), _P, C.c_size_t], _ST),
    "dilattn_reference_rows": ([_P, _T, _T, _T, _PI64, _I64, C.POINTER(C.c_double),
                                C.POINTER(C.c_double)], _ST),
    "dilattn_backend_available": ([C.c_int], C.c_int),
    "dilattn_backend_name": ([C.c_int], C.c_char_p),
    "dilattn_build_info": ([], C.c_char_p),
    "dilattn_cpu_isa": ([], C.c_char_p),
    # dilattn_mask.h
    "dilattn_mask_create": ([_PP, C.POINTER(BsrView)], _ST),
    "dilattn_mask_destroy": ([_P], _ST),
    "dilattn_mask_get": ([_P, C.POINTER(BsrView), _PI64], _ST),
    "dilattn_mask_from_pattern": ([_PP, C.c_char_p, _I64, _I64, _I64, _I64], _ST),
    "dilattn_mask_local": ([_PP, _I64, _I64, _I64, _I64, _I64, _I32], _ST),
    "dilattn_mask_sink": ([_PP, _I64, _I64, _I64, _I64, _I64, _I32], _ST),
    "dilattn_mask_strided": ([_PP, _I64, _I64, _I64, _I64, _I64, _I32], _ST),
    "dilattn_mask_random": ([_PP, _I64, _I64, _I64, _I64, _I64, C.c_double, C.c_uint64, _I32],
                            _ST),
    "dilattn_mask_union": ([_PP, _PP, _I32], _ST),
    "dilattn_mask_hierarchical": ([_PP, _I64, _I64, _I64, _I64, _I32, _PI64, _PI64, _PI64, _I32],
                                  _ST),
    "dilattn_mask_topk": ([_PP, _T, _T, _I64, _I64, _I64, _I32], _ST),
    # dilattn_pool.h
    "dilattn_pool_options_init": ([C.POINTER(PoolOptions), C.c_size_t], _ST),
    "dilattn_pool_create_host": ([_PP, C.POINTER(PoolOptions)], _ST),
    "dilattn_pool_create_cuda": ([_PP, _I32, C.POINTER(PoolOptions)], _ST),
    "dilattn_pool_create_from_memory": ([_PP, _P, C.c_size_t, C.c_size_t, C.c_int, _I32], _ST),
    "dilattn_pool_alloc": ([_P, C.c_size_t, _PP], _ST),
    "dilattn_pool_free": ([_P, _P], _ST),
    "dilattn_pool_get_stats": ([_P, C.POINTER(PoolStats)], _ST),
    "dilattn_pool_reset": ([_P], _ST),
    "dilattn_pool_destroy": ([_P], _ST),
    # dilattn_ring.h (dilattn_comm is a handle; nccl_comm and mpi_comm point to the caller's)
    "dilattn_comm_create_threads": ([_I32, _I32, _PP], _ST),
    "dilattn_comm_create_nccl": ([_P, _P, _I32, _PP], _ST),
    "dilattn_comm_create_mpi": ([_P, _I32, _PP], _ST),
    "dilattn_comm_destroy": ([_P], _ST),
    "dilattn_comm_rank": ([_P, C.POINTER(_I32), C.POINTER(_I32)], _ST),
    "dilattn_comm_peak_bytes": ([_P, C.POINTER(C.c_size_t)], _ST),
    "dilattn_ring_shard_rows": ([_I64, _I32, _I32, C.c_int, _PI64, _PI64], _ST),
    "dilattn_ring_forward": ([_P, _P, C.c_int, _T, _T, _T, _T, _T], _ST),
    "dilattn_ring_backward": ([_P, _P, C.c_int, _T, _T, _T, _T, _T, _T, _T, _T, _T], _ST),
    "dilattn_ring_forward_ex": ([_P, _P, C.c_int, _T, _T, _T, _T, _T, C.POINTER(CallOptions)],
                                _ST),
    "dilattn_ring_backward_ex": ([_P, _P, C.c_int, _T, _T, _T, _T, _T, _T, _T, _T, _T,
                                  C.POINTER(CallOptions)], _ST),
}


# ---------------------------------------------------------------- loading
def library_path() -> str:
    """DILATTN_LIB if set, else the shared library installed inside this package."""
    path = os.environ.get("DILATTN_LIB")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libdilattn.so*", "libdilattn*.dylib", "dilattn*.dll", "libdilattn*.dll"):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    raise OSError(f"dilattn: no shared library in {here} (was the package installed with "
                  "pip install .?); set DILATTN_LIB to the path of libdilattn")


def _load(path):
    lib = C.CDLL(path)
    for name, (args, result) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = result
    return lib


_lib = None


def lib():
    """The loaded library, loaded on first use."""
    global _lib
    if _lib is None:
        _lib = _load(library_path())
    return _lib


def use_library(path):
    """Loads the library at path for every later call (before any other call: a library already
    loaded stays, as ctypes cannot unload it)."""
    global _lib
    if _lib is None:
        _lib = _load(path)
    elif _lib._name != path:
        raise OSError(f"dilattn: {_lib._name} is loaded already; use_library({path!r}) "
                      "must come first")
    return _lib
