"""mask.py - block-sparse masks (SPEC 4) for dilattn.forward(..., mask=...) and
dilattn.torch.attention(..., mask=...).

A Mask owns a validated dilattn_mask: built from a pattern string, by a builder, or from BSR
arrays; the plan keeps its own reference, so a Mask may be dropped after use. Every builder is
the C builder of the same name (lib/dilattn_mask.h states each rule); sizes are in tokens,
windows and strides in blocks. seqlen_k and block_k default to seqlen_q and block_q.

    m = dilattn.mask.pattern("local:2+sink:1", n, 64)
    o, lse = dilattn.forward(q, k, v, mask=m, causal=True)
"""
import ctypes as C
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _abi, _cints
from ._errors import check, error_for


class Mask:
    """A validated block-sparse mask. Attributes: seqlen_q, seqlen_k, block_q, block_k,
    num_heads (1 = one mask for all heads, else H), nnz (stored blocks, all heads)."""

    def __init__(self, handle):
        self._handle = handle
        view, nnz = self._view()
        self.seqlen_q, self.seqlen_k = view.seqlen_q, view.seqlen_k
        self.block_q, self.block_k = view.block_q, view.block_k
        self.num_heads = view.num_heads
        self.nnz = nnz

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _abi.lib().dilattn_mask_destroy(handle)
            self._handle = None

    def __repr__(self):
        return (f"dilattn.mask.Mask(seqlen_q={self.seqlen_q}, seqlen_k={self.seqlen_k}, "
                f"block_q={self.block_q}, block_k={self.block_k}, num_heads={self.num_heads}, "
                f"nnz={self.nnz})")

    def _view(self):
        view = _abi.BsrView()
        nnz = C.c_int64()
        check(_abi.lib().dilattn_mask_get(self._handle, C.byref(view), C.byref(nnz)))
        return view, nnz.value

    def to_bsr(self) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
        """(row_ptr, col_idx, head_ptr) as int64 numpy copies, in the layout of
        dilattn_mask.h; head_ptr is None for a one-head mask."""
        view, nnz = self._view()
        rows = -(-view.seqlen_q // view.block_q)

        def copy(ptr, count):
            if count == 0:
                return np.zeros(0, np.int64)
            return np.ctypeslib.as_array(C.cast(ptr, C.POINTER(C.c_int64)), (count,)).copy()

        row_ptr = copy(view.row_ptr, view.num_heads * (rows + 1))
        col_idx = copy(view.col_idx, nnz)
        head_ptr = None if view.num_heads == 1 else copy(view.head_ptr, view.num_heads + 1)
        return row_ptr, col_idx, head_ptr

    def to_dense(self) -> np.ndarray:
        """A bool array [num_heads, I, J]: True where key block j is listed for row block i."""
        row_ptr, col_idx, head_ptr = self.to_bsr()
        I = -(-self.seqlen_q // self.block_q)
        J = -(-self.seqlen_k // self.block_k)
        dense = np.zeros((self.num_heads, I, J), dtype=bool)
        for h in range(self.num_heads):
            base = 0 if head_ptr is None else head_ptr[h]
            rp = row_ptr[h * (I + 1):(h + 1) * (I + 1)]
            for i in range(I):
                dense[h, i, col_idx[base + rp[i]:base + rp[i + 1]]] = True
        return dense


def _build(fn, *args):
    handle = C.c_void_p()
    check(fn(C.byref(handle), *args))
    return Mask(handle)


def _sizes(seqlen_q, block_q, seqlen_k, block_k):
    """(seqlen_q, seqlen_k, block_q, block_k) as checked int64_t values (_cints.py)."""
    seqlen_q, block_q = _cints.int64(seqlen_q, "seqlen_q"), _cints.int64(block_q, "block_q")
    return (seqlen_q, seqlen_q if seqlen_k is None else _cints.int64(seqlen_k, "seqlen_k"),
            block_q, block_q if block_k is None else _cints.int64(block_k, "block_k"))


def from_bsr(row_ptr: Any, col_idx: Any, seqlen_q: int, block_q: int, *, head_ptr: Any = None,
             seqlen_k: Optional[int] = None, block_k: Optional[int] = None) -> Mask:
    """A mask from BSR arrays (any integer dtype; copied and validated). A bad mask raises
    dilattn.InvalidArgumentError (DILATTN_ERROR_BAD_MASK) naming the first bad entry; entries
    that do not fit int64_t, floats and bools are refused before (_cints.int64_array)."""
    nq, nk, bq, bk = _sizes(seqlen_q, block_q, seqlen_k, block_k)
    arrays = [_cints.int64_array(row_ptr, "row_ptr"), _cints.int64_array(col_idx, "col_idx")]
    arrays[1] = np.concatenate([arrays[1], [0]])  # a valid pointer even when nnz is 0
    num_heads = 1
    if head_ptr is not None:
        arrays.append(_cints.int64_array(head_ptr, "head_ptr"))
        num_heads = len(arrays[2]) - 1
    view = _abi.BsrView(C.sizeof(_abi.BsrView), nq, nk, bq, bk, num_heads, _abi.INDEX_INT64,
                        arrays[0].ctypes.data, arrays[1].ctypes.data,
                        arrays[2].ctypes.data if head_ptr is not None else None)
    return _build(_abi.lib().dilattn_mask_create, C.byref(view))


def pattern(spec: str, seqlen_q: int, block_q: int, *, seqlen_k: Optional[int] = None,
            block_k: Optional[int] = None) -> Mask:
    """The mask a pattern string describes: a '+'-separated union of terms such as
    "local:2+sink:1+strided:4+random:0.05:seed=7" (SPEC 4.4; docs/cli.md, "Block-sparse patterns")."""
    if not isinstance(spec, str):
        raise error_for("DILATTN_ERROR_INVALID_VALUE", f"pattern={spec!r}: expected a string")
    return _build(_abi.lib().dilattn_mask_from_pattern, spec.encode(),
                  *_sizes(seqlen_q, block_q, seqlen_k, block_k))


def local(seqlen_q: int, block_q: int, window_blocks: int, *, causal: bool = False,
          seqlen_k: Optional[int] = None, block_k: Optional[int] = None) -> Mask:
    """The diagonal block and window_blocks blocks on each side (only before it when causal)."""
    return _build(_abi.lib().dilattn_mask_local, *_sizes(seqlen_q, block_q, seqlen_k, block_k),
                  _cints.int64(window_blocks, "window_blocks"), int(bool(causal)))


def sink(seqlen_q: int, block_q: int, global_blocks: int, *, causal: bool = False,
         seqlen_k: Optional[int] = None, block_k: Optional[int] = None) -> Mask:
    """Every row sees the first global_blocks key blocks, which see every key block."""
    return _build(_abi.lib().dilattn_mask_sink, *_sizes(seqlen_q, block_q, seqlen_k, block_k),
                  _cints.int64(global_blocks, "global_blocks"), int(bool(causal)))


def strided(seqlen_q: int, block_q: int, stride: int, *, causal: bool = False,
            seqlen_k: Optional[int] = None, block_k: Optional[int] = None) -> Mask:
    """The diagonal and every stride-th key block from it, both ways."""
    return _build(_abi.lib().dilattn_mask_strided,
                  *_sizes(seqlen_q, block_q, seqlen_k, block_k), _cints.int64(stride, "stride"),
                  int(bool(causal)))


def random(seqlen_q: int, block_q: int, density: float, *, seed: int = 0, num_heads: int = 1,
           causal: bool = False, seqlen_k: Optional[int] = None,
           block_k: Optional[int] = None) -> Mask:
    """Each block pair kept with probability density, drawn by seeded splitmix64: the same
    mask on every platform."""
    return _build(_abi.lib().dilattn_mask_random, *_sizes(seqlen_q, block_q, seqlen_k, block_k),
                  _cints.int64(num_heads, "num_heads"), float(density),
                  _cints.uint64(seed, "seed"), int(bool(causal)))


def union(*masks: Mask) -> Mask:
    """Per (head, row block) the union of the masks' key blocks."""
    if not masks or not all(isinstance(m, Mask) for m in masks):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"union({masks!r}): expected one or more dilattn.mask.Mask")
    handles = (C.c_void_p * len(masks))(*[m._handle.value for m in masks])
    return _build(_abi.lib().dilattn_mask_union, handles, _cints.int32(len(masks), "len(masks)"))


def hierarchical(seqlen_q: int, block_q: int, levels: Sequence[Sequence[int]], *,
                 causal: bool = False, seqlen_k: Optional[int] = None,
                 block_k: Optional[int] = None) -> Mask:
    """levels: (stride, window, block_size) triples in tokens, window -1 = every key."""
    levels = [tuple(_cints.int64(x, f"levels[{i}][{c}]") for c, x in enumerate(level))
              for i, level in enumerate(levels)]
    if any(len(level) != 3 for level in levels):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"levels={levels!r}: expected (stride, window, block_size) triples")
    n = len(levels)
    cols = [(C.c_int64 * max(n, 1))(*[level[c] for level in levels]) for c in range(3)]
    return _build(_abi.lib().dilattn_mask_hierarchical,
                  *_sizes(seqlen_q, block_q, seqlen_k, block_k), _cints.int32(n, "len(levels)"),
                  *cols, int(bool(causal)))


def topk(q: Any, k: Any, block_q: int, k_keep: int, *, causal: bool = False,
         block_k: Optional[int] = None) -> Mask:
    """Content-adaptive: per head and row block the k_keep key blocks of highest mean-pooled
    q . k score, plus the diagonal. q [B, Nq, H, D], k [B, Nk, Hkv, D] numpy arrays."""
    from ._numpy import as_array, view
    block_q = _cints.int64(block_q, "block_q")
    block_k = block_q if block_k is None else _cints.int64(block_k, "block_k")
    k_keep = _cints.int64(k_keep, "k_keep")
    q, k = as_array("q", q), as_array("k", k)
    return _build(_abi.lib().dilattn_mask_topk, C.byref(view("q", q)), C.byref(view("k", k)),
                  block_q, block_k, k_keep, int(bool(causal)))
