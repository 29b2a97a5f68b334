"""_plan.py - attention options and plans, independent of numpy and torch: both front ends
(_numpy.py, torch.py) turn their arrays into dilattn_tensor views and call Plan.forward /
Plan.backward here.

Options (SPEC 2-4): dense attention by default; dilated with segments and dilations (one entry
per branch) and a heads_mode; block-sparse with a dilattn.mask.Mask; causal; scale (default
1/sqrt(D)); backend "auto" (cuda when a GPU can run the problem, else cpu, else the f64
reference for f64 inputs), "ref", "cpu", "cuda" or "emu"; pool, a dilattn.Pool for the
workspace (default: the library's default pool of the device); dropout_p, attention dropout
(SPEC 11, default 0: none).

A call with dropout (Plan.forward/backward given `dropout=(seed, offset)`) or sinks goes through
dilattn_forward_ex / dilattn_backward_ex, which carry them (SPEC 10.3, 11.2), or with a stream
through dilattn_forward_on_stream_ex / dilattn_backward_on_stream_ex.

Variants (SPEC 10.1, every backend): window_size=(left, right), each >= 0 or -1 for unbounded;
softcap=c (0 off); alibi_slopes, H slopes (one per head) or B * H ([B][H], one per batch
element and head). Sinks (SPEC 10.3, every backend): Options(sinks=True) makes a plan whose
calls carry H sink logits (Plan.forward/backward's sinks=), the backward also their gradient
(d_sinks=). Packed batches (SPEC 10.2, every backend, with every kind):
cu_seqlens_q and cu_seqlens_k, n + 1 offsets each (from 0, never decreasing, ending at the
packed seqlens), with batch 1; ALiBi may then give n * H slopes ([n][H]).

A call runs on a CUDA stream when Plan.forward/backward get one (stream: a cudaStream_t as an
int, 0 the legacy default stream): dilattn_forward_on_stream / dilattn_backward_on_stream (their
_ex twins with dropout or sinks). Without one (stream=None) it is dilattn_forward /
dilattn_backward.
"""
import contextlib
import ctypes as C

from . import _abi, _cints
from ._errors import check, error_for
from ._owned_handle import HandleOwner, OwnedHandle


class Options:
    """Validated attention options; the same for forward and backward."""

    def __init__(self, segments=None, dilations=None, heads_mode="mod", causal=False,
                 scale=None, mask=None, backend="auto", pool=None, dropout_p=0.0, *,
                 window_size=None, softcap=0.0, alibi_slopes=None, cu_seqlens_q=None,
                 cu_seqlens_k=None, sinks=False):
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
        if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"dropout_p={dropout_p!r}: expected a float in [0, 1)")
        self.dropout_p = float(dropout_p)  # its range is the library's to check (SPEC 11.2)
        self.window_size = None
        if window_size is not None:
            if not hasattr(window_size, "__len__") or len(window_size) != 2:
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                f"window_size={window_size!r}: expected (left, right)")
            self.window_size = (_cints.int64(window_size[0], "window_size[0]"),
                                _cints.int64(window_size[1], "window_size[1]"))
        try:
            self.softcap = float(softcap)
        except (TypeError, ValueError):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"softcap={softcap!r}: expected a number (0 turns it off)") from None
        self.alibi_slopes = None
        if alibi_slopes is not None:
            self.alibi_slopes = [float(m) for m in _flat(alibi_slopes)]
        if (cu_seqlens_q is None) != (cu_seqlens_k is None):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            "cu_seqlens_q and cu_seqlens_k: a packed batch needs both "
                            "(n + 1 offsets each), an unpacked one neither")
        self.cu_seqlens_q = self.cu_seqlens_k = None
        if cu_seqlens_q is not None:
            self.cu_seqlens_q = _cints.int64_list(_flat(cu_seqlens_q), "cu_seqlens_q")
            self.cu_seqlens_k = _cints.int64_list(_flat(cu_seqlens_k), "cu_seqlens_k")
            if len(self.cu_seqlens_q) != len(self.cu_seqlens_k) or not self.cu_seqlens_q:
                raise error_for("DILATTN_ERROR_INVALID_VALUE",
                                f"cu_seqlens_q has {len(self.cu_seqlens_q)} entries, "
                                f"cu_seqlens_k {len(self.cu_seqlens_k)}: both need n + 1 >= 2 "
                                "(one more than the number of sequences)")
        self.sinks = bool(sinks)  # SPEC 10.3: the values come with each call
        self.heads_mode = heads_mode
        self.causal = bool(causal)
        self.scale = None if scale is None else float(scale)
        self.mask = mask
        self.backend = backend
        self.pool = pool


def _flat(values):
    """A sequence of slopes, or a numpy array of any shape ([H] or [B, H]) as a flat list."""
    ravel = getattr(values, "ravel", None)
    return list(ravel()) if ravel is not None else list(values)


_SIZE_NAMES = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")


class Plan(HandleOwner):
    """A dilattn plan: options, sizes (B, Nq, Nk, H, Hkv, D), a dtype name and a backend
    (options.backend unless backend names another: dilattn.torch asks for "cuda" for CUDA
    tensors). Immutable; may be used from several threads at once (dilattn.h), and closed from
    one while the others' calls run: close() waits for them (_owned_handle.py)."""

    @staticmethod
    def _closed_error():  # HandleOwner's "closed" error: this module's
        return _closed_error()

    def __init__(self, options, sizes, dtype, backend=None):
        L = _abi.lib()
        self.options = options
        self.sizes = tuple(_cints.int64(s, name) for s, name in zip(sizes, _SIZE_NAMES))
        self.dtype = dtype
        handle = C.c_void_p()
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
            if options.dropout_p != 0.0:
                check(L.dilattn_desc_set_dropout(desc, options.dropout_p))
            if options.window_size is not None:
                check(L.dilattn_desc_set_window(desc, *options.window_size))
            if options.softcap != 0:
                check(L.dilattn_desc_set_softcap(desc, options.softcap))
            if options.alibi_slopes:
                n = len(options.alibi_slopes)
                slopes = (C.c_double * n)(*options.alibi_slopes)
                check(L.dilattn_desc_set_alibi(desc, slopes, n))
            if options.sinks:
                check(L.dilattn_desc_set_sinks(desc, 1))
            if options.cu_seqlens_q is not None:
                n = len(options.cu_seqlens_q)
                cu_q = (C.c_int64 * n)(*options.cu_seqlens_q)
                cu_k = (C.c_int64 * n)(*options.cu_seqlens_k)
                check(L.dilattn_desc_set_varlen(desc, n - 1, cu_q, cu_k))
            with contextlib.ExitStack() as uses:
                if options.pool is not None:
                    check(L.dilattn_desc_set_pool(desc, uses.enter_context(options.pool._use())))
                shape = _abi.shape(*self.sizes)
                # A Plan's tensors are in host memory unless the caller names cuda (the torch
                # path does for CUDA tensors), so "auto" is AUTO over the host backends, in
                # AUTO's order (SPEC 14): the library's AUTO would take a GPU where one can run
                # the problem, and a cuda plan refuses host pointers.
                requested = backend or options.backend
                names = ("cpu", "ref") if requested == "auto" else (requested,)
                for name in names:
                    status = L.dilattn_plan_create(C.byref(handle), desc, C.byref(shape),
                                                   _abi.DTYPES[dtype], _abi.BACKENDS[name])
                    if status in (_abi.SUCCESS, _abi.STATUS["DILATTN_ERROR_INVALID_VALUE"]):
                        break
                check(status)
        finally:
            L.dilattn_desc_destroy(desc)
        self._owned = OwnedHandle(handle, L.dilattn_plan_destroy, _closed_error)
        chosen = C.c_int()
        with self._use() as plan:
            check(L.dilattn_plan_backend(plan, C.byref(chosen)))
        self.backend = _abi.BACKEND_NAMES[chosen.value]

    def lse_dtype(self):
        """LSE is f64 from the reference and for f64 inputs (computed in f64, SPEC 12), f32
        otherwise (SPEC 1)."""
        return "f64" if self.backend == "ref" or self.dtype == "f64" else "f32"

    def close(self):
        """Destroys the plan once no call on another thread uses it; later calls raise.
        Safe on a plan whose __init__ failed."""
        owned = getattr(self, "_owned", None)
        if owned is not None:
            owned.close()

    def __del__(self):
        self.close()

    def workspace_bytes(self):
        """(forward, backward) bytes of workspace the plan takes from its pool per call."""
        forward, backward = C.c_size_t(), C.c_size_t()
        with self._use() as plan:
            check(_abi.lib().dilattn_plan_workspace_size(plan, C.byref(forward),
                                                         C.byref(backward)))
        return forward.value, backward.value

    def _uses(self):
        """The with-blocks a call holds: the plan's and its pool's (the library's own check of
        a destroyed pool is best effort, dilattn_pool.h; the Python object knows for sure and
        keeps the pool alive until the call returns)."""
        uses = contextlib.ExitStack()
        try:
            if self.options.pool is not None:
                uses.enter_context(self.options.pool._use())
            plan = uses.enter_context(self._use())
        except BaseException:
            uses.close()
            raise
        return uses, plan

    @staticmethod
    def _call_options(dropout, sinks, d_sinks, progress=None):
        """dilattn_call_options for dropout = (seed, offset) and sink logits (a ctypes double
        array of H values, SPEC 10.3) with d_sinks (one to write the gradient into) and a
        _progress.Progress (SPEC 14.11), or None when there is nothing to carry. The caller
        keeps the arrays and the Progress alive through the call."""
        if dropout is None and sinks is None and progress is None:
            return None
        options = _abi.lib().dilattn_call_options_make()
        if progress is not None:
            progress.fill(options)
        if dropout is not None:
            seed, offset = dropout
            options.dropout_seed = _cints.uint64(seed, "seed")
            options.dropout_offset = _cints.uint64(offset, "offset")
        as_pointer = C.POINTER(C.c_double)
        if sinks is not None:
            options.sinks = C.cast(sinks, as_pointer)
        if d_sinks is not None:
            options.d_sinks = C.cast(d_sinks, as_pointer)
        return options

    def forward(self, q, k, v, o, lse, stream=None, dropout=None, sinks=None, progress=None):
        """Views (dilattn_tensor) in, results written into the views o and lse; on the CUDA
        stream `stream` when it is not None; with dropout = (seed, offset), sinks (a ctypes
        array of H doubles) or progress (a _progress.Progress) through dilattn_forward_ex, or
        dilattn_forward_on_stream_ex with a stream."""
        views = [C.byref(t) for t in (q, k, v, o, lse)]
        L = _abi.lib()
        call_options = self._call_options(dropout, sinks, None, progress)
        uses, plan = self._uses()
        with uses:
            if call_options is not None and stream is not None:
                check(L.dilattn_forward_on_stream_ex(plan, stream, *views, C.byref(call_options),
                                                     None, 0))
            elif call_options is not None:
                check(L.dilattn_forward_ex(plan, *views, C.byref(call_options), None, 0))
            elif stream is None:
                check(L.dilattn_forward(plan, *views, None, 0))
            else:
                check(L.dilattn_forward_on_stream(plan, stream, *views, None, 0))

    def backward(self, q, k, v, o, lse, d_o, dq, dk, dv, stream=None, dropout=None, sinks=None,
                 d_sinks=None, progress=None):
        """As forward; d_sinks (a ctypes array of H doubles) receives the sinks' gradient."""
        views = [C.byref(t) for t in (q, k, v, o, lse, d_o, dq, dk, dv)]
        L = _abi.lib()
        call_options = self._call_options(dropout, sinks, d_sinks, progress)
        uses, plan = self._uses()
        with uses:
            if call_options is not None and stream is not None:
                check(L.dilattn_backward_on_stream_ex(plan, stream, *views,
                                                      C.byref(call_options), None, 0))
            elif call_options is not None:
                check(L.dilattn_backward_ex(plan, *views, C.byref(call_options), None, 0))
            elif stream is None:
                check(L.dilattn_backward(plan, *views, None, 0))
            else:
                check(L.dilattn_backward_on_stream(plan, stream, *views, None, 0))


def _closed_error():
    return error_for("DILATTN_ERROR_INVALID_VALUE", "the plan was closed")
