"""test_closing.py - closing a handle-owning object (Pool, Plan, Comm) while another thread's
library call uses it waits for that call: the call's result is right, close() returns only after
the call has left the library, and later use is refused with the object's own error. Objects
whose __init__ failed half-way close and are collected without raising.

The calls are watched at the library boundary (helpers.WatchedLibrary): the test closes once
the other thread is inside the C function, so the order is the same on every run, however fast
the machine."""
import gc
import sys
import threading

import numpy as np
import pytest

import dilattn
from dilattn import _numpy, _plan, ring
from helpers import inputs, watch_library


@pytest.fixture
def watch(monkeypatch):
    return lambda name: watch_library(monkeypatch, name)


def _in_thread(fn):
    """Starts fn on a thread; returns the thread and a dict that gets fn's result or error."""
    outcome = {}

    def main():
        try:
            outcome["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e

    thread = threading.Thread(target=main)
    thread.start()
    return thread, outcome


def _close_during(watched, close, fn):
    """Runs fn on a thread, calls close() once fn is inside the watched C function; returns
    (outcome of fn, whether that C call had returned when close() returned)."""
    thread, outcome = _in_thread(fn)
    assert watched.entered.wait(120), "the call never reached the library"
    close()
    call_had_returned = watched.returned.is_set()
    thread.join(120)
    assert not thread.is_alive()
    return outcome, call_had_returned


# Long enough (a few hundred ms on one core) that a close that does not wait lands inside it.
BIG = (1, 2048, 2048, 2, 2, 32)


def test_closing_a_pool_waits_for_the_forward_using_it(watch):
    q, k, v, _ = inputs(BIG, seed=1, dtype=np.float32)
    want, want_lse = dilattn.forward(q, k, v, backend="cpu")
    pool = dilattn.Pool(1 << 26)
    watched = watch("dilattn_forward")
    outcome, call_had_returned = _close_during(
        watched, pool.close, lambda: dilattn.forward(q, k, v, backend="cpu", pool=pool))
    assert call_had_returned, "close() returned while the forward was still using the pool"
    assert "error" not in outcome, outcome.get("error")
    o, lse = outcome["result"]
    assert np.array_equal(o, want) and np.array_equal(lse, want_lse)
    assert pool.closed
    with pytest.raises(dilattn.InvalidArgumentError, match="closed") as info:
        dilattn.forward(q, k, v, backend="cpu", pool=pool)
    assert info.value.status_name == "DILATTN_ERROR_POOL_DESTROYED"


def test_closing_a_pool_waits_for_the_backward_and_refuses_calls_meanwhile(watch):
    # While close() waits for the backward, the pool counts as closed: a new call is refused at
    # once (it neither waits nor reaches the library).
    q, k, v, do = inputs(BIG, seed=5, dtype=np.float32)
    o, lse = dilattn.forward(q, k, v, backend="cpu")
    want = dilattn.backward(q, k, v, o, lse, do, backend="cpu")
    pool = dilattn.Pool(1 << 26)
    refused = []

    def close_while_calling():
        closer, _ = _in_thread(pool.close)
        while not pool.closed:
            closer.join(0.001)
        for call in (pool.stats, lambda: dilattn.forward(q, k, v, backend="cpu", pool=pool)):
            with pytest.raises(dilattn.InvalidArgumentError) as info:
                call()
            refused.append(info.value.status_name)
        closer.join(120)

    watched = watch("dilattn_backward")
    outcome, call_had_returned = _close_during(
        watched, close_while_calling,
        lambda: dilattn.backward(q, k, v, o, lse, do, backend="cpu", pool=pool))
    assert call_had_returned
    assert refused == ["DILATTN_ERROR_POOL_DESTROYED"] * 2
    assert "error" not in outcome, outcome.get("error")
    for g, w in zip(outcome["result"], want):
        assert np.array_equal(g, w)


def test_closing_a_plan_waits_for_its_forward(watch):
    q, k, v, _ = inputs(BIG, seed=2, dtype=np.float32)
    want, _ = dilattn.forward(q, k, v, backend="cpu")
    plan = _plan.Plan(_plan.Options(backend="cpu"), BIG, "f32")
    o = np.zeros(q.shape, np.float32)
    lse = np.zeros((1, 2, 2048, 1), np.float32)
    views = [_numpy.view(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse))]
    watched = watch("dilattn_forward")
    outcome, call_had_returned = _close_during(watched, plan.close,
                                               lambda: plan.forward(*views))
    assert call_had_returned, "close() returned while the plan's forward was running"
    assert "error" not in outcome, outcome.get("error")
    assert np.array_equal(o, want)
    with pytest.raises(dilattn.InvalidArgumentError, match="plan was closed"):
        plan.forward(*views)


def test_closing_a_comm_waits_for_the_ring_call_waiting_on_it(watch):
    # Rank 1 never calls, so rank 0's ring_forward waits in the library for the communicator's
    # timeout; closing rank 0's end meanwhile waits for that call to give up.
    N = 16
    q, k, v, _ = inputs((1, N, N, 2, 2, 4), seed=3)
    comms = ring.Comm.threads(2, timeout_ms=300)
    rows = ring.shard_rows(N, 2, 0)
    watched = watch("dilattn_ring_forward")
    outcome, call_had_returned = _close_during(
        watched, comms[0].close,
        lambda: ring.ring_forward(comms[0], q[:, rows], k[:, rows], v[:, rows], seqlen=N,
                                  backend="ref"))
    assert call_had_returned, "close() returned while the ring call was waiting on the comm"
    error = outcome.get("error")
    assert isinstance(error, dilattn.Error), outcome
    assert error.status_name == "DILATTN_ERROR_COMM", error
    comms[1].close()
    with pytest.raises(dilattn.InvalidArgumentError, match="Comm was closed"):
        comms[0].peak_bytes()


def test_a_closed_comm_is_refused_by_ring_calls():
    q, k, v, _ = inputs((1, 8, 8, 2, 2, 4), seed=6)
    (comm,) = ring.Comm.threads(1)
    comm.close()
    with pytest.raises(dilattn.InvalidArgumentError, match="Comm was closed"):
        ring.ring_forward(comm, q, k, v, seqlen=8, backend="ref")
    with pytest.raises(dilattn.InvalidArgumentError, match="Comm was closed"):
        comm.handle()


def test_closing_from_inside_its_own_call_is_refused_not_a_deadlock():
    pool = dilattn.Pool(4096)
    with pool._use():
        with pytest.raises(dilattn.InvalidArgumentError, match="would wait for itself"):
            pool.close()
        assert not pool.closed
    pool.close()
    assert pool.closed


def test_two_closes_during_a_call_both_wait(watch):
    q, k, v, _ = inputs(BIG, seed=4, dtype=np.float32)
    pool = dilattn.Pool(1 << 26)
    watched = watch("dilattn_forward")
    second_close_saw_return = []

    def close_twice():
        closer, _ = _in_thread(lambda: (pool.close(),
                                        second_close_saw_return.append(watched.returned.is_set())))
        pool.close()
        closer.join(120)

    outcome, call_had_returned = _close_during(
        watched, close_twice, lambda: dilattn.forward(q, k, v, backend="cpu", pool=pool))
    assert call_had_returned and second_close_saw_return == [True]
    assert "error" not in outcome, outcome.get("error")


def test_a_pool_used_after_close_is_refused_by_every_method():
    pool = dilattn.Pool(4096)
    address = pool.alloc(256)
    pool.close()
    for call in (pool.stats, lambda: pool.alloc(256), lambda: pool.free(address), pool.reset,
                 pool.handle):
        with pytest.raises(dilattn.InvalidArgumentError) as info:
            call()
        assert info.value.status_name == "DILATTN_ERROR_POOL_DESTROYED", info.value
    with pytest.raises(dilattn.InvalidArgumentError, match="closed"):
        with pool:
            pass


def test_half_built_objects_close_and_collect_quietly(monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    # __init__ fails before any handle exists: a size that is not an integer, a segment the
    # library refuses (dilattn_plan_create fails), a bad growth.
    with pytest.raises(dilattn.InvalidArgumentError):
        _plan.Plan(_plan.Options(), ("8", 8, 8, 1, 1, 4), "f32")
    with pytest.raises(dilattn.InvalidArgumentError) as info:
        _plan.Plan(_plan.Options(segments=[0], dilations=[1]), (1, 8, 8, 1, 1, 4), "f32")
    assert info.value.status_name == "DILATTN_ERROR_BAD_SEGMENT", info.value
    del info
    with pytest.raises(dilattn.InvalidArgumentError):
        dilattn.Pool(4096, growth="sometimes")
    # __init__ never ran at all.
    for cls in (_plan.Plan, dilattn.Pool, ring.Comm):
        half = cls.__new__(cls)
        half.close()
        half.close()
        half.__del__()
        del half
    half_mask = dilattn.mask.Mask.__new__(dilattn.mask.Mask)
    del half_mask
    gc.collect()
    assert unraisable == [], [str(u.exc_value) for u in unraisable]
