"""ring.py - ring attention (SPEC 5, lib/dilattn_ring.h) on numpy shards: P ranks each hold
some rows of Q, K and V; K/V chunks travel the ring and each rank gets its own rows of O and
LSE (ring_forward) or of dQ, dK and dV (ring_backward), equal to the single-device result
within SPEC 8.

    comms = dilattn.ring.Comm.threads(P)                 # P ranks in this process
    rows = dilattn.ring.shard_rows(N, P, rank, "zigzag")  # the rows rank `rank` holds
    o, lse = dilattn.ring.ring_forward(comms[rank], q[:, rows], k[:, rows], v[:, rows],
                                       seqlen=N, split="zigzag", causal=True)
    results = dilattn.ring.run_threads(P, lambda comm: ...)  # one Python thread per rank

A call is collective: every rank of a communicator calls the same function with the same
options. A rank with bad input raises its own error; every other rank raises a dilattn.Error
with status DILATTN_ERROR_COMM naming it. ctypes releases the GIL during the library call, so
ranks on Python threads compute in parallel. Comm.mpi (one rank per MPI process) needs mpi4py
and a library built with MPI (the pip wheel is built without: DILATTN_ERROR_UNSUPPORTED).
Tested by tests/packages/python/test_ring.py against the numpy SPEC implementation.
"""
import ctypes as C
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _abi, _cints
from ._errors import check, error_for
from ._numpy import as_array, dtype_name, view, _NUMPY_DTYPES, _dropout_call, _sink_array
from ._owned_handle import HandleOwner, OwnedHandle
from ._plan import Options, Plan

DEFAULT_TIMEOUT_MS = 60000


def _split(split):
    if split not in _abi.RING_SPLITS:
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"split={split!r}: expected one of {sorted(_abi.RING_SPLITS)}")
    return _abi.RING_SPLITS[split]


class Comm(HandleOwner):
    """One rank's end of a communicator (dilattn_comm). close() it (or use `with`) when every
    rank is done; a ring call of this end running on another thread is waited for (close()
    returns after it; a rank waiting for a peer that never comes gives up after the timeout).
    An end that is no longer referenced is closed when it is collected."""

    @staticmethod
    def _closed_error():  # HandleOwner's "closed" error: this module's
        return _closed_error()

    def __init__(self, handle):
        L = _abi.lib()
        self._owned = OwnedHandle(handle, L.dilattn_comm_destroy, _closed_error)
        rank, size = C.c_int32(), C.c_int32()
        with self._use() as comm:
            check(L.dilattn_comm_rank(comm, C.byref(rank), C.byref(size)))
        self.rank, self.size = rank.value, size.value

    @staticmethod
    def threads(num_ranks: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> List["Comm"]:
        """num_ranks ends of one in-process communicator, rank p first; each is used from its
        own thread. A rank that does not arrive within timeout_ms fails the others."""
        num_ranks = _cints.int32(num_ranks, "num_ranks")
        timeout_ms = _cints.int32(timeout_ms, "timeout_ms")
        handles = (C.c_void_p * max(num_ranks, 1))()
        check(_abi.lib().dilattn_comm_create_threads(num_ranks, timeout_ms, handles))
        return [Comm(C.c_void_p(h)) for h in handles[:num_ranks]]

    @staticmethod
    def mpi(comm: Any = None, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> "Comm":
        """This process's end over an mpi4py communicator (default MPI.COMM_WORLD). Collective."""
        timeout_ms = _cints.int32(timeout_ms, "timeout_ms")
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise error_for("DILATTN_ERROR_UNSUPPORTED",
                            f"Comm.mpi needs mpi4py, which cannot be imported: {e}") from None
        comm = MPI.COMM_WORLD if comm is None else comm
        handle = C.c_void_p()
        check(_abi.lib().dilattn_comm_create_mpi(C.c_void_p(MPI._addressof(comm)),
                                                 timeout_ms, C.byref(handle)))
        return Comm(handle)

    def handle(self) -> int:
        """The dilattn_comm handle (raises once closed); a library call uses _use()."""
        return self._owned_handle().handle()

    def peak_bytes(self) -> int:
        """The most bytes the ring held at once on this rank in its last call."""
        n = C.c_size_t()
        with self._use() as comm:
            check(_abi.lib().dilattn_comm_peak_bytes(comm, C.byref(n)))
        return n.value

    def close(self) -> None:
        owned = getattr(self, "_owned", None)
        if owned is not None:
            owned.close()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _closed_error():
    return error_for("DILATTN_ERROR_INVALID_VALUE", "comm: this Comm was closed")


def shard_rows(seqlen: int, num_ranks: int, rank: int, split: str = "contiguous") -> np.ndarray:
    """The rows of the full sequence rank `rank` holds, in shard order (an int64 array)."""
    first, count = (C.c_int64 * 2)(), (C.c_int64 * 2)()
    check(_abi.lib().dilattn_ring_shard_rows(_cints.int64(seqlen, "seqlen"),
                                             _cints.int32(num_ranks, "num_ranks"),
                                             _cints.int32(rank, "rank"), _split(split), first,
                                             count))
    return np.concatenate([np.arange(first[r], first[r] + count[r], dtype=np.int64)
                           for r in range(2)])


def _plan(options, seqlen, q, k):
    B, _, H, D = q.shape
    seqlen = _cints.int64(seqlen, "seqlen")
    return Plan(options, (B, seqlen, seqlen, H, k.shape[2], D), dtype_name("q", q))


def _options(segments, dilations, heads_mode, causal, scale, mask, backend, dropout_p,
             window_size, softcap, alibi_slopes, sinks):
    """The plan's Options of a ring call: dilattn.forward's, without a pool or packing (the
    ring refuses a packed batch, SPEC 5)."""
    return Options(segments, dilations, heads_mode, causal, scale, mask, backend, None,
                   dropout_p, window_size=window_size, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks is not None)


def _call(function, plan, comm, split, views, options):
    """function (dilattn_ring_forward or _backward) on the views, through its _ex twin with
    dilattn_call_options when there are any (dropout, sinks)."""
    L = _abi.lib()
    with plan._use() as plan_handle, comm._use() as comm_handle:
        args = [plan_handle, comm_handle, _split(split)] + [C.byref(t) for t in views]
        if options is None:
            check(getattr(L, function)(*args))
        else:
            check(getattr(L, function + "_ex")(*args, C.byref(options)))


def ring_forward(comm: "Comm", q: Any, k: Any, v: Any, *, seqlen: int, split: str = "contiguous",
                 segments: Optional[Sequence[int]] = None,
                 dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
                 causal: bool = False, scale: Optional[float] = None, mask: Any = None,
                 backend: str = "cpu", dropout_p: float = 0.0, seed: Optional[int] = None,
                 offset: int = 0, window_size: Optional[Tuple[int, int]] = None,
                 softcap: float = 0.0, alibi_slopes: Optional[Sequence[float]] = None,
                 sinks: Any = None) -> Tuple[np.ndarray, np.ndarray]:
    """This rank's (o, lse) for its shards q [B, rows, H, D], k, v [B, rows, Hkv, D] of a
    sequence of seqlen rows (dilattn.forward's options describe the full problem: dropout_p
    with seed and offset, window_size, softcap, alibi_slopes and sinks as there; the dropout
    decisions are those of dilattn.forward at the same global positions). o has q's dtype, lse
    is [B, H, rows]. Every rank passes the same options and values. Collective."""
    options = _options(segments, dilations, heads_mode, causal, scale, mask, backend, dropout_p,
                       window_size, softcap, alibi_slopes, sinks)
    dropout = _dropout_call(options, seed, offset)
    q, k, v = as_array("q", q), as_array("k", k), as_array("v", v)
    plan = _plan(options, seqlen, q, k)
    try:
        B, rows, H, _ = q.shape
        o = np.empty(q.shape, dtype=q.dtype)
        lse = np.empty((B, H, rows, 1), dtype=_NUMPY_DTYPES[plan.lse_dtype()])
        views = [view(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse))]
        sink_values = _sink_array(sinks, H)
        _call("dilattn_ring_forward", plan, comm, split, views,
              Plan._call_options(dropout, sink_values, None))
    finally:
        plan.close()
    return o, lse[..., 0]


def ring_backward(comm: "Comm", q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, *,
                  seqlen: int, split: str = "contiguous",
                  segments: Optional[Sequence[int]] = None,
                  dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
                  causal: bool = False, scale: Optional[float] = None, mask: Any = None,
                  backend: str = "cpu", dropout_p: float = 0.0, seed: Optional[int] = None,
                  offset: int = 0, window_size: Optional[Tuple[int, int]] = None,
                  softcap: float = 0.0, alibi_slopes: Optional[Sequence[float]] = None,
                  sinks: Any = None) -> Tuple[np.ndarray, ...]:
    """This rank's (dq, dk, dv) from its shards of q, k, v, of the forward's o and lse
    ([B, H, rows]) and of do (SPEC 6), with the forward's options (and its seed and offset).
    With sinks it returns (dq, dk, dv, d_sinks), d_sinks [H] the sinks' gradient summed over
    every rank's rows, the same on every rank. Bitwise the same on every run. Collective."""
    options = _options(segments, dilations, heads_mode, causal, scale, mask, backend, dropout_p,
                       window_size, softcap, alibi_slopes, sinks)
    dropout = _dropout_call(options, seed, offset)
    q, k, v, o, do = (as_array(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                                   ("do", do)))
    lse = np.asarray(lse)
    lse = as_array("lse", lse[..., None] if lse.ndim == 3 else lse)
    plan = _plan(options, seqlen, q, k)
    try:
        dq, dk, dv = (np.empty(x.shape, dtype=x.dtype) for x in (q, k, v))
        views = [view(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse),
                                         ("do", do), ("dq", dq), ("dk", dk), ("dv", dv))]
        H = q.shape[2]
        d_sinks = None if sinks is None else (C.c_double * H)()
        _call("dilattn_ring_backward", plan, comm, split, views,
              Plan._call_options(dropout, _sink_array(sinks, H), d_sinks))
    finally:
        plan.close()
    return (dq, dk, dv) if sinks is None else (dq, dk, dv, np.array(d_sinks[:], dtype=np.float64))


class RingError(Exception):
    """Raised by run_threads when a rank failed: .errors[r] is rank r's exception or None."""

    def __init__(self, errors):
        self.errors = errors
        first = next(e for e in errors if e is not None)
        super().__init__(f"{sum(e is not None for e in errors)} of {len(errors)} ranks failed; "
                         f"first: {first}")


def run_threads(num_ranks: int, fn: Callable[["Comm"], Any],
                timeout_ms: int = DEFAULT_TIMEOUT_MS) -> List[Any]:
    """Runs fn(comm) for every rank of a new threads communicator, each on its own Python
    thread, and returns the P results in rank order; raises RingError when any rank raised."""
    comms = Comm.threads(num_ranks, timeout_ms)
    num_ranks = len(comms)
    results, errors = [None] * num_ranks, [None] * num_ranks

    def rank_main(r):
        try:
            results[r] = fn(comms[r])
        except Exception as e:  # noqa: BLE001 - handed to the caller in RingError
            errors[r] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(num_ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in comms:
        c.close()
    if any(e is not None for e in errors):
        raise RingError(errors)
    return results
