"""conftest.py - shared pieces of the Python tests: the backends to run, random problems with
fixed seeds, and a final line naming any backend that was not available (its cases are skipped,
never counted as passes; the `ref` cases are the ones that must pass)."""
import random

import numpy as np
import pytest

import dilattn_ctypes as dilattn

BACKENDS = ["ref", "cpu"]
_unavailable = {}


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    if not dilattn.backend_available(name):
        _unavailable[name] = _unavailable.get(name, 0) + 1
        pytest.skip(f"backend {name} is not available in this build")
    return name


def pytest_terminal_summary(terminalreporter):
    for name, count in sorted(_unavailable.items()):
        terminalreporter.write_line(
            f"dilattn: backend '{name}' not available: {count} cases skipped (not passed)")


def random_config(seed, dilated):
    """A random problem: shapes, and for dilated attention branches and a head mode.
    Covers head dims 1..64, N 1..70, GQA, Nq != Nk (dense), partial and clipped segments,
    repeated branches, every head mode, causal or not."""
    rnd = random.Random(seed)
    Hkv = rnd.choice([1, 1, 2, 3])
    H = Hkv * rnd.choice([1, 2, 3])
    D = rnd.choice([1, 2, 3, 5, 8, 16, 33, 64])
    B = rnd.choice([1, 2])
    causal = rnd.random() < 0.5
    if not dilated:
        Nq, Nk = rnd.randint(1, 70), rnd.randint(1, 70)
        return dict(B=B, Nq=Nq, Nk=Nk, H=H, Hkv=Hkv, D=D, config=dict(causal=causal))
    N = rnd.randint(1, 70)
    mode = rnd.choice(["mod", "block", "groups"])
    m = rnd.randint(1, 3)
    if mode == "groups":
        m = min(m, H)
    segments, dilations = [], []
    for _ in range(m):
        w = rnd.randint(1, N + 10)                  # w > N: clipped; N % w != 0: partial
        segments.append(w)
        dilations.append(rnd.randint(1, min(w, 4)))
    if rnd.random() < 0.25:                         # a repeated branch: keys counted twice
        segments.append(segments[0])
        dilations.append(dilations[0])
        if mode == "groups" and len(segments) > H:
            segments.pop(), dilations.pop()
    config = dict(segments=segments, dilations=dilations, heads_mode=mode, causal=causal)
    return dict(B=B, Nq=N, Nk=N, H=H, Hkv=Hkv, D=D, config=config)


def random_inputs(case, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (case["B"], case["Nq"], case["H"], case["D"]))
    k = rng.uniform(-1, 1, (case["B"], case["Nk"], case["Hkv"], case["D"]))
    v = rng.uniform(-1, 1, (case["B"], case["Nk"], case["Hkv"], case["D"]))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)
