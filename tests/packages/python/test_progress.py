"""test_progress.py - progress= of dilattn.forward and dilattn.backward (docs/spec.md section
14.11) on the ref and cpu backends: the callable is called from the calling thread with done
from 0 to total, never decreasing; it changes no bit of the results; a true return raises
dilattn.CancelledError; an exception it raises (KeyboardInterrupt from a real SIGINT included)
stops the call and is raised; progress=True draws a tqdm bar; anything else is a TypeError."""
import os
import signal
import threading

import numpy as np
import pytest

import dilattn

OPTIONS = dict(segments=[32, 64], dilations=[1, 2], causal=True)


def _inputs(seed=0, N=128, H=4, D=16):
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((2, N, H, D)).astype(np.float32) for _ in range(4))
    return q, k, v, do


class Recorder:
    def __init__(self, answer=False):
        self.calls = []
        self.threads = set()
        self.answer = answer

    def __call__(self, done, total):
        self.calls.append((done, total))
        self.threads.add(threading.get_ident())
        return self.answer

    def check_complete(self):
        assert len(self.calls) >= 2, self.calls
        total = self.calls[0][1]
        assert total >= 1 and self.calls[0][0] == 0
        assert all(t == total for _, t in self.calls)
        dones = [d for d, _ in self.calls]
        assert dones == sorted(dones) and dones[-1] == total
        assert all(d < total for d in dones[:-1])
        assert self.threads == {threading.get_ident()}


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_calls_add_up_and_change_no_bit(backend):
    q, k, v, do = _inputs()
    o, lse = dilattn.forward(q, k, v, backend=backend, **OPTIONS)
    grads = dilattn.backward(q, k, v, o, lse, do, backend=backend, **OPTIONS)
    fwd, bwd = Recorder(), Recorder()
    o2, lse2 = dilattn.forward(q, k, v, backend=backend, progress=fwd, **OPTIONS)
    grads2 = dilattn.backward(q, k, v, o, lse, do, backend=backend, progress=bwd, **OPTIONS)
    fwd.check_complete()
    bwd.check_complete()
    assert o2.tobytes() == o.tobytes() and lse2.tobytes() == lse.tobytes()
    for a, b in zip(grads2, grads):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_a_true_return_cancels(backend):
    q, k, v, do = _inputs(1)
    stop = Recorder(answer=True)
    with pytest.raises(dilattn.CancelledError) as caught:
        dilattn.forward(q, k, v, backend=backend, progress=stop, **OPTIONS)
    assert caught.value.status_name == "DILATTN_ERROR_CANCELLED"
    assert "untouched" in caught.value.message
    assert stop.calls == [(0, stop.calls[0][1])]  # nothing called after the cancel
    o, lse = dilattn.forward(q, k, v, backend=backend, **OPTIONS)
    with pytest.raises(dilattn.CancelledError):
        dilattn.backward(q, k, v, o, lse, do, backend=backend, progress=lambda d, t: True,
                         **OPTIONS)


def test_an_exception_in_the_callable_stops_the_call_and_is_raised():
    q, k, v, _ = _inputs(2)

    class Mine(Exception):
        pass

    calls = []

    def failing(done, total):
        calls.append(done)
        raise Mine("from the callback")

    with pytest.raises(Mine, match="from the callback"):
        dilattn.forward(q, k, v, backend="cpu", progress=failing, **OPTIONS)
    assert calls == [0]


def test_ctrl_c_stops_a_call():
    # A real SIGINT while the library runs: Python's handler raises KeyboardInterrupt inside the
    # callback, the call stops, and KeyboardInterrupt reaches the caller. Python installs that
    # handler only where SIGINT was not ignored when it started (a background job ignores it, as
    # CI's runner may), so the test installs it, as an interactive Python has it.
    q, k, v, _ = _inputs(3)
    calls = []

    def interrupt_once(done, total):
        calls.append(done)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return False

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            dilattn.forward(q, k, v, backend="ref", progress=interrupt_once, **OPTIONS)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(calls) <= 2, calls  # stopped at once, not at the end of the work


def test_progress_true_draws_a_tqdm_bar(capsys):
    import tqdm  # noqa: F401  (CI installs python3-tqdm: a missing tqdm is a failure)
    q, k, v, _ = _inputs(4)
    o, _ = dilattn.forward(q, k, v, backend="cpu", progress=True, **OPTIONS)
    assert "dilattn forward" in capsys.readouterr().err
    assert o.tobytes() == dilattn.forward(q, k, v, backend="cpu", **OPTIONS)[0].tobytes()


def test_a_progress_that_is_not_callable_is_a_type_error():
    q, k, v, _ = _inputs(5)
    with pytest.raises(TypeError, match="progress must be None, True or a callable"):
        dilattn.forward(q, k, v, backend="cpu", progress="yes", **OPTIONS)
