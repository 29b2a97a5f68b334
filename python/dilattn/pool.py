"""pool.py - dilattn.Pool: the library's buddy-allocator memory pool (lib/dilattn_pool.h) for
plan workspaces, and its statistics.

    with dilattn.Pool(1 << 20) as pool:               # a 1 MiB host arena
        o, lse = dilattn.forward(q, k, v, pool=pool)   # the workspace comes from the pool
        print(pool.stats().peak_bytes_in_use)

Without a pool a plan takes its workspace from the library's default pool of its device, as
before. A pool is destroyed when its with-block ends (or by close()); using it afterwards, for a
call or in a plan, raises dilattn.Error with DILATTN_ERROR_POOL_DESTROYED. A plan keeps its pool
object alive, so a pool without a with-block lives as long as the plans that use it.

The header's rules hold as they are: a request is rounded up to a power of two (at least the
minimum block), blocks are 256-aligned, a fixed pool refuses a request over its arena
(POOL_TOO_LARGE) and fails when full (OUT_OF_MEMORY), a growing one adds arenas.
"""
import ctypes as C
from dataclasses import dataclass
from typing import Optional

from . import _abi, _cints
from ._errors import check, error_for
from ._owned_handle import HandleOwner, OwnedHandle

_DEVICES = {"cpu": _abi.DEVICE_CPU, "cuda": _abi.DEVICE_CUDA}


@dataclass(frozen=True)
class PoolStats:
    """dilattn_pool_stats, exact at the moment of Pool.stats(). free_blocks maps a block size
    in bytes to the number of free blocks of that size (after coalescing), sizes with none left
    out."""
    num_arenas: int
    arena_bytes_total: int
    bytes_in_use: int
    bytes_requested: int
    internal_fragmentation: int
    peak_bytes_in_use: int
    live_blocks: int
    largest_free_block: int
    free_blocks: dict


class Pool(HandleOwner):
    """A memory pool of arena_bytes (a power of two >= min_block_bytes) on the host
    (device="cpu") or on CUDA device device_index (device="cuda", cudaMalloc). growth="grow"
    adds an arena when one is full, at most max_arenas of them (0: no limit); "fixed" keeps one.
    Thread-safe (one mutex per pool in the library); close() waits for calls in flight.
    Sizes and counts are integers (not floats or bools) within their C types (_cints.py)."""

    @staticmethod
    def _closed_error():  # HandleOwner's "closed" error: this module's
        return _closed_error()

    def __init__(self, arena_bytes: int, *, min_block_bytes: Optional[int] = None,
                 growth: str = "fixed", max_arenas: int = 0, device: str = "cpu",
                 device_index: int = 0) -> None:
        if growth not in _abi.POOL_GROWTH:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"growth={growth!r}: expected one of {sorted(_abi.POOL_GROWTH)}")
        if device not in _DEVICES:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"device={device!r}: expected one of {sorted(_DEVICES)}")
        arena_bytes = _cints.size_t(arena_bytes, "arena_bytes")
        if min_block_bytes is not None:  # else the header's default, 256
            min_block_bytes = _cints.size_t(min_block_bytes, "min_block_bytes")
        max_arenas = _cints.int32(max_arenas, "max_arenas")
        self.device = device
        self.device_index = _cints.int32(device_index, "device_index")
        L = _abi.lib()
        options = _abi.PoolOptions()
        check(L.dilattn_pool_options_init(C.byref(options), arena_bytes))
        if min_block_bytes is not None:
            options.min_block_bytes = min_block_bytes
        options.growth = _abi.POOL_GROWTH[growth]
        options.max_arenas = max_arenas
        handle = C.c_void_p()
        if device == "cpu":
            check(L.dilattn_pool_create_host(C.byref(handle), C.byref(options)))
        else:
            check(L.dilattn_pool_create_cuda(C.byref(handle), self.device_index,
                                             C.byref(options)))
        self._owned = OwnedHandle(handle, L.dilattn_pool_destroy, _closed_error)

    # ------------------------------------------------------------ lifetime
    @property
    def closed(self) -> bool:
        owned = getattr(self, "_owned", None)
        return owned is None or owned.closed

    def handle(self) -> int:
        """The dilattn_pool handle; POOL_DESTROYED once the pool is closed. For a library call
        use _use() instead, which keeps close() waiting until the call has returned."""
        return self._owned_handle().handle()

    def close(self) -> None:
        """Destroys the pool and frees its arenas; a closed pool stays closed. A forward,
        backward or other call using the pool on another thread is waited for: close() returns
        after it (calls begun after close() raise POOL_DESTROYED)."""
        owned = getattr(self, "_owned", None)
        if owned is not None:
            status = owned.close()
            if status is not None:
                check(status)

    def __enter__(self):
        self.handle()
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # No check(): an exception from __del__ would only be printed. Nothing can be using a
        # pool nobody references, so this does not wait.
        owned = getattr(self, "_owned", None)
        if owned is not None:
            owned.close()

    # ------------------------------------------------------------ use
    def stats(self) -> "PoolStats":
        raw = _abi.PoolStats()
        raw.struct_size = C.sizeof(_abi.PoolStats)
        with self._use() as handle:
            check(_abi.lib().dilattn_pool_get_stats(handle, C.byref(raw)))
        return PoolStats(raw.num_arenas, raw.arena_bytes_total, raw.bytes_in_use,
                         raw.bytes_requested, raw.internal_fragmentation, raw.peak_bytes_in_use,
                         raw.live_blocks, raw.largest_free_block,
                         {1 << k: n for k, n in enumerate(raw.free_blocks) if n})

    def alloc(self, nbytes: int) -> int:
        """The address (an int) of a block of at least nbytes, 256-aligned, on the pool's
        device; give it back with free(address)."""
        nbytes = _cints.size_t(nbytes, "nbytes")
        ptr = C.c_void_p()
        with self._use() as handle:
            check(_abi.lib().dilattn_pool_alloc(handle, nbytes, C.byref(ptr)))
        return ptr.value

    def free(self, address: int) -> None:
        """Returns a block from alloc(); a double free or a foreign or interior pointer raises
        (POOL_DOUBLE_FREE, POOL_FOREIGN_POINTER, POOL_INTERIOR_POINTER) and changes nothing."""
        address = _cints.address(address, "address")
        with self._use() as handle:
            check(_abi.lib().dilattn_pool_free(handle, address))

    def reset(self) -> None:
        """Frees every block at once and zeroes the peak; addresses handed out before are
        invalid afterwards. Not while a forward or backward is using the pool."""
        with self._use() as handle:
            check(_abi.lib().dilattn_pool_reset(handle))

    def __repr__(self):
        where = "cpu" if self.device == "cpu" else f"cuda:{self.device_index}"
        return f"dilattn.Pool({where}, {'closed' if self.closed else 'open'})"


def _closed_error():
    return error_for("DILATTN_ERROR_POOL_DESTROYED",
                     "the pool was closed (its with-block ended or close() was called)")
