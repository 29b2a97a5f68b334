"""test_backward.py - dilattn backward (dQ, dK, dV) against spec_numpy.backward (SPEC 6 applied
to every occurrence of a key), and against central finite differences of the library's own
forward in f64.
f64 on ref vs numpy: only summation order differs -> 1e-10 (gradients sum more terms than O).
f32: SPEC 8 f32 tolerances. Finite differences: loss = sum(dO * O), h = 1e-6; truncation
O(h^2) ~ 1e-12, rounding ~ eps |loss| / h ~ 1e-9, so 1e-6 (1 + |grad|) has a wide margin."""
import numpy as np
import pytest

import dilattn_ctypes as dilattn
import spec_numpy
from conftest import random_config, random_inputs

F64_TOL = 1e-10


def grads(q, k, v, d_o, backend, config):
    o, lse = dilattn.forward(q, k, v, backend=backend, **config)
    return dilattn.backward(q, k, v, o, lse, d_o, backend=backend, **config)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("dilated", [False, True], ids=["dense", "dilated"])
def test_random_f64_ref(seed, dilated):
    case = random_config(2000 + 1000 * dilated + seed, dilated)
    q, k, v = random_inputs(case, seed)
    d_o = np.random.default_rng(seed + 99).uniform(-1, 1, q.shape)
    got = grads(q, k, v, d_o, "ref", case["config"])
    want = spec_numpy.backward(q, k, v, d_o, **case["config"])
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert spec_numpy.within(g, w, F64_TOL, F64_TOL), f"{name}: max diff {np.max(np.abs(g - w))}"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dilated", [False, True], ids=["dense", "dilated"])
def test_random_f32(seed, dilated, backend):
    case = random_config(7000 + 1000 * dilated + seed, dilated)
    q, k, v = random_inputs(case, seed, np.float32)
    d_o = np.random.default_rng(seed + 99).uniform(-1, 1, q.shape).astype(np.float32)
    got = grads(q, k, v, d_o, backend, case["config"])
    want = spec_numpy.backward(q, k, v, d_o, **case["config"])
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert spec_numpy.within(g, w, 1e-5, 1e-4), f"{name}: max diff {np.max(np.abs(g - w))}"


FD_CASES = {
    "dense": (1, (5, 5), 2, 2, 3, {}),
    "causal_nq_ne_nk": (1, (4, 6), 2, 1, 3, dict(causal=True)),
    "gqa": (1, (5, 5), 4, 2, 2, {}),
    "dilated_mod": (1, (7, 7), 3, 1, 2, dict(segments=[4, 7], dilations=[2, 3], causal=True)),
    "dilated_block": (1, (7, 7), 3, 1, 2,
                      dict(segments=[4, 7], dilations=[2, 3], heads_mode="block")),
    "dilated_groups": (1, (7, 7), 3, 1, 2,
                       dict(segments=[4, 7], dilations=[2, 3], heads_mode="groups", causal=True)),
    "repeated_branch": (1, (6, 6), 2, 2, 2, dict(segments=[3, 3], dilations=[1, 1])),
}


@pytest.mark.parametrize("name", sorted(FD_CASES))
def test_central_differences_f64(name):
    B, (Nq, Nk), H, Hkv, D, config = FD_CASES[name]
    case = dict(B=B, Nq=Nq, Nk=Nk, H=H, Hkv=Hkv, D=D, config=config)
    q, k, v = random_inputs(case, len(name))
    d_o = np.random.default_rng(7).uniform(-1, 1, q.shape)
    analytic = grads(q, k, v, d_o, "ref", config)
    inputs = [q, k, v]

    def loss():
        o, _ = dilattn.forward(*inputs, backend="ref", **config)
        return float(np.sum(d_o * o))

    h = 1e-6
    for x, g in zip(inputs, analytic):
        for idx in np.ndindex(x.shape):
            saved = x[idx]
            x[idx] = saved + h
            plus = loss()
            x[idx] = saved - h
            minus = loss()
            x[idx] = saved
            fd = (plus - minus) / (2 * h)
            assert abs(fd - g[idx]) <= 1e-6 * (1 + abs(g[idx])), f"{idx}: fd {fd}, grad {g[idx]}"
