"""_plan.py - attention options and plans, independent of numpy and torch: both front ends
(_numpy.py, torch.py) turn their arrays into dilattn_tensor views and call Plan.forward /
Plan.backward here.

Options (SPEC 2-4): dense attention by default; dilated with segments and dilations (one entry
per branch) and a heads_mode; block-sparse with a dilattn.mask.Mask; causal; scale (default
1/sqrt(D)); backend "auto" (cuda when a GPU can run the problem, else cpu, else the f64
reference for f64 inputs), "ref", "cpu", "cuda" or "emu"; pool, a dilattn.Pool for the
workspace (default: the library's default pool of the device).

A call runs on a CUDA stream when Plan.forward/backward get one (stream: a cudaStream_t as an
int, 0 the legacy default stream): dilattn_forward_on_stream / dilattn_backward_on_stream.
Without one (stream=None) it is dilattn_forward / dilattn_backward.
"""
import ctypes as C

from . import _abi, _cints
from ._errors import check, error_for


class Options:
    """Validated attention options; the same for forward and backward."""

    def __init__(self, segments=None, dilations=None, heads_mode="mod", causal=False,
                 scale=None, mask=None, backend="auto", pool=None):
        def as_list(name, value):
            return None if value is None else _cints.int64_list(value, name)

        self.segments = as_list("segments", segments)
        self.dilations = as_list("dilations", dilations)
        if (self.segments is None) != (self.dilations is None):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"segments={segments!r}, dilations={dilations!r}: dilated attention "
                            "needs both (one entry per branch), dense attention neither")
        if self.segments is not None and len(self.segments) != len(self.dilations):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"segments has {len(self.segments)} entries, dilations "
                            f"{len(self.dilations)}: one (segment, dilation) pair per branch")
        if heads_mode not in _abi.HEAD_MODES:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"heads_mode={heads_mode!r}: expected one of "
                            f"{sorted(_abi.HEAD_MODES)}")
        if backend not in _abi.BACKENDS:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"backend={backend!r}: expected one of {sorted(_abi.BACKENDS)}")
        if mask is not None:
            from .mask import Mask
            if not isinstance(mask, Mask):
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                f"mask={mask!r}: expected a dilattn.mask.Mask "
                                "(dilattn.mask.pattern, local, ...)")
            if self.segments is not None:
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                "mask and segments/dilations given together: attention is "
                                "either block-sparse or dilated")
        if pool is not None:
            from .pool import Pool
            if not isinstance(pool, Pool):
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                f"pool={pool!r}: expected a dilattn.Pool")
            pool.handle()  # a closed pool is refused here, before any plan is made
        self.heads_mode = heads_mode
        self.causal = bool(causal)
        self.scale = None if scale is None else float(scale)
        self.mask = mask
        self.backend = backend
        self.pool = pool


_SIZE_NAMES = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")


class Plan:
    """A dilattn plan: options, sizes (B, Nq, Nk, H, Hkv, D), a dtype name and a backend
    (options.backend unless backend names another: dilattn.torch asks for "cuda" for CUDA
    tensors). Immutable; may be used from several threads at once (dilattn.h)."""

    def __init__(self, options, sizes, dtype, backend=None):
        L = _abi.lib()
        self.options = options
        self.sizes = tuple(_cints.int64(s, name) for s, name in zip(sizes, _SIZE_NAMES))
        self.dtype = dtype
        self._plan = C.c_void_p()
        desc = C.c_void_p()
        check(L.dilattn_desc_create(C.byref(desc)))
        try:
            if options.segments is not None:
                n = len(options.segments)
                w = (C.c_int64 * max(n, 1))(*options.segments)
                r = (C.c_int64 * max(n, 1))(*options.dilations)
                check(L.dilattn_desc_set_dilated(desc, _cints.int32(n, "len(segments)"), w, r,
                                                 _abi.HEAD_MODES[options.heads_mode]))
            if options.mask is not None:
                check(L.dilattn_desc_set_block_sparse(desc, options.mask._handle))
            check(L.dilattn_desc_set_causal(desc, 1 if options.causal else 0))
            if options.scale is not None:
                check(L.dilattn_desc_set_scale(desc, options.scale))
            if options.pool is not None:
                check(L.dilattn_desc_set_pool(desc, options.pool.handle()))
            shape = _abi.shape(*self.sizes)
            check(L.dilattn_plan_create(C.byref(self._plan), desc, C.byref(shape),
                                        _abi.DTYPES[dtype],
                                        _abi.BACKENDS[backend or options.backend]))
        finally:
            L.dilattn_desc_destroy(desc)
        chosen = C.c_int()
        check(L.dilattn_plan_backend(self._plan, C.byref(chosen)))
        self.backend = _abi.BACKEND_NAMES[chosen.value]

    def lse_dtype(self):
        """SPEC 1: LSE is f64 in the reference, f32 elsewhere."""
        return "f64" if self.backend == "ref" else "f32"

    def close(self):
        if self._plan:
            _abi.lib().dilattn_plan_destroy(self._plan)
            self._plan = C.c_void_p()

    def __del__(self):
        self.close()

    def workspace_bytes(self):
        """(forward, backward) bytes of workspace the plan takes from its pool per call."""
        forward, backward = C.c_size_t(), C.c_size_t()
        check(_abi.lib().dilattn_plan_workspace_size(self._plan, C.byref(forward),
                                                     C.byref(backward)))
        return forward.value, backward.value

    def _check_pool(self):
        # The library's own check of a destroyed pool is best effort (dilattn_pool.h: a new pool
        # may reuse the address); the Python object knows for sure.
        if self.options.pool is not None:
            self.options.pool.handle()

    def forward(self, q, k, v, o, lse, stream=None):
        """Views (dilattn_tensor) in, results written into the views o and lse; on the CUDA
        stream `stream` when it is not None."""
        self._check_pool()
        views = [C.byref(t) for t in (q, k, v, o, lse)]
        L = _abi.lib()
        if stream is None:
            check(L.dilattn_forward(self._plan, *views, None, 0))
        else:
            check(L.dilattn_forward_on_stream(self._plan, stream, *views, None, 0))

    def backward(self, q, k, v, o, lse, d_o, dq, dk, dv, stream=None):
        self._check_pool()
        views = [C.byref(t) for t in (q, k, v, o, lse, d_o, dq, dk, dv)]
        L = _abi.lib()
        if stream is None:
            check(L.dilattn_backward(self._plan, *views, None, 0))
        else:
            check(L.dilattn_backward_on_stream(self._plan, stream, *views, None, 0))
