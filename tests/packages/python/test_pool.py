"""test_pool.py - dilattn.Pool (lib/dilattn_pool.h): statistics follow allocations exactly as
the header states (rounding to powers of two, splitting, coalescing, the peak), abuse gets its
own status and leaves the pool unchanged, growth adds arenas, plans take their workspace from
the pool and give it back, and a closed pool is refused everywhere."""
import numpy as np
import pytest

import dilattn
from dilattn import _plan
from helpers import import_torch, inputs


def _raises(cls, status_name, call, *words):
    with pytest.raises(cls) as info:
        call()
    assert info.value.status_name == status_name
    for word in words:
        assert word in info.value.message, info.value.message
    return info.value


def _pow2_at_least(n):
    p = 256
    while p < n:
        p *= 2
    return p


def test_statistics_follow_alloc_split_free_and_coalesce():
    with dilattn.Pool(4096) as pool:
        s = pool.stats()
        assert (s.num_arenas, s.arena_bytes_total, s.bytes_in_use, s.live_blocks,
                s.largest_free_block, s.free_blocks) == (1, 4096, 0, 0, 4096, {4096: 1})
        a = pool.alloc(300)                       # rounded up to 512: 4096 splits down to it
        assert a % 256 == 0
        s = pool.stats()
        assert (s.bytes_in_use, s.bytes_requested, s.internal_fragmentation, s.live_blocks,
                s.peak_bytes_in_use) == (512, 300, 212, 1, 512)
        assert s.free_blocks == {512: 1, 1024: 1, 2048: 1} and s.largest_free_block == 2048
        b = pool.alloc(1000)                      # the free 1024 block
        s = pool.stats()
        assert (s.bytes_in_use, s.bytes_requested, s.live_blocks) == (1536, 1300, 2)
        assert s.free_blocks == {512: 1, 2048: 1}
        pool.free(a)
        pool.free(b)                              # everything coalesces back into the arena
        s = pool.stats()
        assert (s.bytes_in_use, s.live_blocks, s.peak_bytes_in_use, s.free_blocks) == (
            0, 0, 1536, {4096: 1})
        pool.alloc(256)
        pool.reset()                              # frees every block and zeroes the peak
        s = pool.stats()
        assert (s.bytes_in_use, s.live_blocks, s.peak_bytes_in_use, s.free_blocks) == (
            0, 0, 0, {4096: 1})


def test_abuse_gets_its_own_status_and_leaves_the_pool_unchanged():
    with dilattn.Pool(4096) as pool:
        a = pool.alloc(512)
        pool.alloc(1024)
        before = pool.stats()
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_INTERIOR_POINTER",
                lambda: pool.free(a + 256))
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_FOREIGN_POINTER",
                lambda: pool.free(a + (1 << 20)))
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_ZERO_SIZE",
                lambda: pool.alloc(0))
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_TOO_LARGE",
                lambda: pool.alloc(8192))
        assert pool.stats() == before
        pool.free(a)
        after_free = pool.stats()
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_DOUBLE_FREE",
                lambda: pool.free(a))
        assert pool.stats() == after_free
        pool.alloc(2048)
        pool.alloc(512)
        _raises(dilattn.OutOfMemoryError, "DILATTN_ERROR_OUT_OF_MEMORY",
                lambda: pool.alloc(1024))


def test_growth_adds_arenas_up_to_the_limit():
    with dilattn.Pool(1024, growth="grow", max_arenas=2) as pool:
        pool.alloc(1024)
        pool.alloc(600)
        s = pool.stats()
        assert (s.num_arenas, s.arena_bytes_total, s.bytes_in_use) == (2, 2048, 2048)
        _raises(dilattn.OutOfMemoryError, "DILATTN_ERROR_OUT_OF_MEMORY", lambda: pool.alloc(1))


def test_bad_options_are_named():
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.Pool(3000), "3000")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.Pool(4096, growth="sometimes"), "growth='sometimes'")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.Pool(4096, device="tpu"), "device='tpu'")


def test_a_cuda_pool_in_a_build_without_cuda():
    if dilattn.backend_available("cuda"):
        pytest.skip("this library has a usable cuda backend")
    _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_NOT_BUILT",
            lambda: dilattn.Pool(1 << 20, device="cuda"), "CUDA")


SIZES = (1, 16, 16, 2, 2, 8)
OPTIONS = dict(segments=[8, 16], dilations=[1, 2], causal=True, backend="ref")


def test_plans_take_their_workspace_from_the_pool_and_give_it_back():
    q, k, v, do = inputs(SIZES, seed=41, dtype=np.float32)
    o, lse = dilattn.forward(q, k, v, **OPTIONS)
    want = dilattn.backward(q, k, v, o, lse, do, **OPTIONS)
    with dilattn.Pool(1 << 20) as pool:
        plan = _plan.Plan(_plan.Options(**OPTIONS, pool=pool), SIZES, "f32")
        _, backward_bytes = plan.workspace_bytes()
        plan.close()
        assert backward_bytes > 0, "the reference backward takes a workspace"
        got = dilattn.backward(q, k, v, o, lse, do, pool=pool, **OPTIONS)
        s = pool.stats()
        assert s.peak_bytes_in_use == _pow2_at_least(backward_bytes)
        assert (s.bytes_in_use, s.live_blocks) == (0, 0)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_a_pool_too_small_for_the_workspace_fails_with_its_status():
    q, k, v, do = inputs(SIZES, seed=42, dtype=np.float32)
    o, lse = dilattn.forward(q, k, v, **OPTIONS)
    with dilattn.Pool(256) as pool:
        _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_TOO_LARGE",
                lambda: dilattn.backward(q, k, v, o, lse, do, pool=pool, **OPTIONS))
        assert pool.stats().peak_bytes_in_use == 0


def test_a_closed_pool_is_refused_for_calls_and_plans():
    q, k, v, _ = inputs(SIZES, seed=43, dtype=np.float32)
    with dilattn.Pool(1 << 20) as pool:
        pass
    assert pool.closed
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_DESTROYED", pool.stats)
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_DESTROYED",
            lambda: dilattn.forward(q, k, v, pool=pool, **OPTIONS))
    pool.close()                                 # closing twice is harmless


def test_a_plan_whose_pool_was_closed_is_refused():
    torch = import_torch()
    import dilattn.torch as dt
    q, k, v = (torch.tensor(x, requires_grad=True) for x in inputs(SIZES, seed=44)[:3])
    with dilattn.Pool(1 << 20) as pool:
        o = dt.attention(q, k, v, pool=pool, **OPTIONS)   # the plan lives on in o's graph
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_POOL_DESTROYED",
            lambda: o.sum().backward())
