"""sparse_lib.py - ctypes access to libdilattn's block-sparse API, plus the independent pieces
the sparse tests compare against: a dense-masked numpy attention (SPEC 2 with A(i) from SPEC 4,
from tests/common/spec_numpy.py) and splitmix64 (for the random builder).

Nothing here calls the library's math: the numpy reference is written from docs/spec.md alone.
Used by test_sparse_masks.py and test_sparse_attention.py.
"""
import ctypes as C
import os
import sys

import numpy as np

LIB = C.CDLL(os.environ["DILATTN_LIB"])

SUCCESS, NULL_POINTER, BAD_MASK, INVALID_VALUE = 0, 1, 11, 14
F32, F64 = 0, 1
BACKEND_REF, BACKEND_CPU = 1, 2
INDEX_INT32, INDEX_INT64 = 0, 1
HEADS_MOD = 0


class Tensor(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("data", C.c_void_p), ("dtype", C.c_int), ("device", C.c_int),
                ("device_index", C.c_int32), ("shape", C.c_int64 * 4),
                ("strides", C.c_int64 * 4)]


class Shape(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + [
        (name, C.c_int64) for name in
        ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")]


class BsrView(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("seqlen_q", C.c_int64), ("seqlen_k", C.c_int64), ("block_q", C.c_int64),
                ("block_k", C.c_int64), ("num_heads", C.c_int64), ("index_type", C.c_int),
                ("row_ptr", C.c_void_p), ("col_idx", C.c_void_p), ("head_ptr", C.c_void_p)]


MaskP = C.c_void_p
LIB.dilattn_last_error.restype = C.c_char_p
LIB.dilattn_backend_available.argtypes = [C.c_int]
LIB.dilattn_mask_create.argtypes = [C.POINTER(MaskP), C.POINTER(BsrView)]
LIB.dilattn_mask_destroy.argtypes = [MaskP]
LIB.dilattn_mask_get.argtypes = [MaskP, C.POINTER(BsrView), C.POINTER(C.c_int64)]
I64 = C.c_int64
LIB.dilattn_mask_from_pattern.argtypes = [C.POINTER(MaskP), C.c_char_p, I64, I64, I64, I64]
LIB.dilattn_mask_local.argtypes = [C.POINTER(MaskP), I64, I64, I64, I64, I64, C.c_int32]
LIB.dilattn_mask_sink.argtypes = [C.POINTER(MaskP), I64, I64, I64, I64, I64, C.c_int32]
LIB.dilattn_mask_strided.argtypes = [C.POINTER(MaskP), I64, I64, I64, I64, I64, C.c_int32]
LIB.dilattn_mask_random.argtypes = [C.POINTER(MaskP), I64, I64, I64, I64, I64, C.c_double,
                                    C.c_uint64, C.c_int32]
LIB.dilattn_mask_union.argtypes = [C.POINTER(MaskP), C.POINTER(MaskP), C.c_int32]
LIB.dilattn_mask_hierarchical.argtypes = [C.POINTER(MaskP), I64, I64, I64, I64, C.c_int32,
                                          C.POINTER(I64), C.POINTER(I64), C.POINTER(I64),
                                          C.c_int32]
LIB.dilattn_mask_topk.argtypes = [C.POINTER(MaskP), C.POINTER(Tensor), C.POINTER(Tensor),
                                  I64, I64, I64, C.c_int32]
LIB.dilattn_desc_create.argtypes = [C.POINTER(C.c_void_p)]
LIB.dilattn_desc_destroy.argtypes = [C.c_void_p]
LIB.dilattn_desc_set_block_sparse.argtypes = [C.c_void_p, MaskP]
LIB.dilattn_desc_set_causal.argtypes = [C.c_void_p, C.c_int32]
LIB.dilattn_desc_set_dilated.argtypes = [C.c_void_p, C.c_int32, C.POINTER(I64), C.POINTER(I64),
                                         C.c_int]
LIB.dilattn_plan_create.argtypes = [C.POINTER(C.c_void_p), C.c_void_p, C.POINTER(Shape),
                                    C.c_int, C.c_int]
LIB.dilattn_plan_destroy.argtypes = [C.c_void_p]
LIB.dilattn_forward.argtypes = [C.c_void_p] + [C.POINTER(Tensor)] * 5 + [C.c_void_p, C.c_size_t]
LIB.dilattn_backward.argtypes = [C.c_void_p] + [C.POINTER(Tensor)] * 9 + [C.c_void_p, C.c_size_t]


def last_error():
    return LIB.dilattn_last_error().decode()


def check(status):
    assert status == SUCCESS, f"status {status}: {last_error()}"


def cpu_available():
    return LIB.dilattn_backend_available(BACKEND_CPU) == 1


# ---------------------------------------------------------------- masks as Python lists
# A mask here is (meta, rows): rows[h][ib] is the sorted list of key blocks of head h, row block ib.
class Mask:
    """Owns a dilattn_mask handle."""

    def __init__(self, handle):
        self.handle = MaskP(handle.value if isinstance(handle, MaskP) else handle)

    def __del__(self):
        if self.handle and self.handle.value:
            LIB.dilattn_mask_destroy(self.handle)
            self.handle = MaskP(None)

    def rows(self):
        """rows[h][ib] -> list of key blocks, read back through dilattn_mask_get."""
        v = BsrView()
        nnz = C.c_int64()
        check(LIB.dilattn_mask_get(self.handle, C.byref(v), C.byref(nnz)))
        I = -(-v.seqlen_q // v.block_q)
        rp = np.ctypeslib.as_array(C.cast(v.row_ptr, C.POINTER(C.c_int64)), (v.num_heads * (I + 1),))
        ci = (np.ctypeslib.as_array(C.cast(v.col_idx, C.POINTER(C.c_int64)), (nnz.value,))
              if nnz.value else np.zeros(0, np.int64))
        hp = ([0, nnz.value] if v.num_heads == 1 else
              list(np.ctypeslib.as_array(C.cast(v.head_ptr, C.POINTER(C.c_int64)), (v.num_heads + 1,))))
        out = []
        for h in range(v.num_heads):
            r = rp[h * (I + 1):(h + 1) * (I + 1)]
            out.append([[int(x) for x in ci[hp[h] + r[ib]:hp[h] + r[ib + 1]]] for ib in range(I)])
        return out


def build(fn, *args):
    m = MaskP()
    check(fn(C.byref(m), *args))
    return Mask(m)


def create_mask(Nq, Nk, bq, bk, rows, index_type=INDEX_INT64):
    """A mask from rows[h][ib] through dilattn_mask_create; returns (status, Mask or None)."""
    heads = len(rows)
    rp, ci, hp = [], [], [0]
    for h in range(heads):
        acc = 0
        rp.append(0)
        for r in rows[h]:
            acc += len(r)
            rp.append(acc)
            ci.extend(r)
        hp.append(hp[-1] + acc)
    return create_raw(Nq, Nk, bq, bk, heads, rp, ci, hp if heads > 1 else None, index_type)


def create_raw(Nq, Nk, bq, bk, heads, row_ptr, col_idx, head_ptr, index_type=INDEX_INT64):
    dt = np.int32 if index_type == INDEX_INT32 else np.int64
    arrays = [np.ascontiguousarray(row_ptr, dt), np.ascontiguousarray(col_idx + [0], dt)]
    if head_ptr is not None:
        arrays.append(np.ascontiguousarray(head_ptr, dt))
    v = BsrView(C.sizeof(BsrView), Nq, Nk, bq, bk, heads, index_type, arrays[0].ctypes.data, arrays[1].ctypes.data,
                arrays[2].ctypes.data if head_ptr is not None else None)
    m = MaskP()
    s = LIB.dilattn_mask_create(C.byref(m), C.byref(v))
    return s, (Mask(m) if s == SUCCESS else None)


def random_rows(rng, heads, I, J, density):
    return [[sorted(int(j) for j in np.nonzero(rng.random(J) < density)[0]) for _ in range(I)]
            for _ in range(heads)]


# ---------------------------------------------------------------- splitmix64 (independent)
M64 = (1 << 64) - 1


def splitmix64(z):
    """The output of one splitmix64 step from state z (Vigna's reference code)."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def random_uniform(seed, h, ib, jb):
    x = splitmix64(seed)
    x = splitmix64(x ^ h)
    x = splitmix64(x ^ ib)
    x = splitmix64(x ^ jb)
    return (x >> 11) * 2.0 ** -53


# ---------------------------------------------------------------- attention through the ABI
def tensor(a):
    dt = {np.dtype(np.float32): F32, np.dtype(np.float64): F64}[a.dtype]
    shape = list(a.shape) + [1] * (4 - a.ndim)
    strides = [s // a.itemsize for s in a.strides] + [1] * (4 - a.ndim)
    return Tensor(C.sizeof(Tensor), a.ctypes.data, dt, 0, 0, (C.c_int64 * 4)(*shape), (C.c_int64 * 4)(*strides))


class Plan:
    def __init__(self, setup, B, Nq, Nk, H, Hkv, D, dtype, backend, causal):
        self.desc = C.c_void_p()
        check(LIB.dilattn_desc_create(C.byref(self.desc)))
        setup(self.desc)
        check(LIB.dilattn_desc_set_causal(self.desc, 1 if causal else 0))
        self.plan = C.c_void_p()
        shape = Shape(C.sizeof(Shape), B, Nq, Nk, H, Hkv, D)
        check(LIB.dilattn_plan_create(C.byref(self.plan), self.desc, C.byref(shape), dtype,
                                      backend))
        self.shape = (B, Nq, Nk, H, Hkv, D)
        self.np_dtype = np.float64 if dtype == F64 else np.float32
        self.lse_dtype = np.float64 if backend == BACKEND_REF else np.float32

    def __del__(self):
        LIB.dilattn_plan_destroy(self.plan)
        LIB.dilattn_desc_destroy(self.desc)

    def forward(self, q, k, v):
        B, Nq, Nk, H, Hkv, D = self.shape
        q, k, v = (np.ascontiguousarray(x, self.np_dtype) for x in (q, k, v))
        o = np.full((B, Nq, H, D), np.nan, self.np_dtype)
        lse = np.full((B, H, Nq), np.nan, self.lse_dtype)
        check(LIB.dilattn_forward(self.plan, C.byref(tensor(q)), C.byref(tensor(k)),
                                  C.byref(tensor(v)), C.byref(tensor(o)), C.byref(tensor(lse)),
                                  None, 0))
        return o.astype(np.float64), lse.astype(np.float64)

    def backward(self, q, k, v, do):
        B, Nq, Nk, H, Hkv, D = self.shape
        q, k, v, do = (np.ascontiguousarray(x, self.np_dtype) for x in (q, k, v, do))
        o = np.zeros((B, Nq, H, D), self.np_dtype)
        lse = np.zeros((B, H, Nq), self.lse_dtype)
        check(LIB.dilattn_forward(self.plan, C.byref(tensor(q)), C.byref(tensor(k)),
                                  C.byref(tensor(v)), C.byref(tensor(o)), C.byref(tensor(lse)),
                                  None, 0))
        dq = np.full(q.shape, np.nan, self.np_dtype)
        dk = np.full(k.shape, np.nan, self.np_dtype)
        dv = np.full(v.shape, np.nan, self.np_dtype)
        check(LIB.dilattn_backward(self.plan, *(C.byref(tensor(x)) for x in
                                                (q, k, v, o, lse, do, dq, dk, dv)), None, 0))
        return dq.astype(np.float64), dk.astype(np.float64), dv.astype(np.float64)


def sparse_plan(mask, B, Nq, Nk, H, Hkv, D, dtype=F64, backend=BACKEND_REF, causal=False):
    return Plan(lambda d: check(LIB.dilattn_desc_set_block_sparse(d, mask.handle)),
                B, Nq, Nk, H, Hkv, D, dtype, backend, causal)


def dilated_plan(branches, mode, B, N, H, D, dtype=F64, backend=BACKEND_REF, causal=False):
    w = (C.c_int64 * len(branches))(*[b[0] for b in branches])
    r = (C.c_int64 * len(branches))(*[b[1] for b in branches])
    return Plan(lambda d: check(LIB.dilattn_desc_set_dilated(d, len(branches), w, r, mode)),
                B, N, N, H, H, D, dtype, backend, causal)


# ---------------------------------------------------------------- the numpy reference
# SPEC 2 and 4 from the one numpy transcription of the spec every Python test uses.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import spec_numpy  # noqa: E402  (after the sys.path line above)


def allowed_matrix(rows, H, Nq, Nk, bq, bk, causal):
    """allowed[h, i, j] of SPEC 4: keys of the listed blocks of row block i // bq, then causal."""
    return spec_numpy.key_counts(Nq, Nk, H, mask=(bq, bk, rows), causal=causal) > 0


def dense_masked_attention(q, k, v, allowed, scale=None):
    """O, LSE of SPEC 2 with a boolean allowed[h, i, j]; empty rows give O = 0, LSE = -inf."""
    return spec_numpy.attention_numpy(q, k, v, allowed.astype(np.int64), scale=scale)
