"""test_forward.py - dilattn forward (O, LSE) against spec_numpy.forward, the independent numpy
implementation of SPEC 2-3, on random dense and dilated problems and on named corner cases.
f64 on ref: both sides are f64, only the summation order differs -> 1e-11.
f32: SPEC 8 f32 tolerances (atol 1e-5, rtol 1e-4; LSE absolute 1e-4)."""
import zlib

import numpy as np
import pytest

import dilattn_ctypes as dilattn
import spec_numpy
from conftest import random_config, random_inputs

F64_TOL = 1e-11


def run_and_compare(case, q, k, v, backend, atol, rtol, lse_atol):
    o, lse = dilattn.forward(q, k, v, backend=backend, **case["config"])
    o_ref, lse_ref = spec_numpy.forward(q, k, v, **case["config"])
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert spec_numpy.within(o, o_ref, atol, rtol), f"max |dO| {np.max(np.abs(o - o_ref))}"
    assert spec_numpy.within(lse, lse_ref, lse_atol, 0), "LSE differs"
    return o_ref, lse_ref


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("dilated", [False, True], ids=["dense", "dilated"])
def test_random_f64_ref(seed, dilated):
    case = random_config(1000 * dilated + seed, dilated)
    q, k, v = random_inputs(case, seed)
    run_and_compare(case, q, k, v, "ref", F64_TOL, F64_TOL, F64_TOL)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dilated", [False, True], ids=["dense", "dilated"])
def test_random_f32(seed, dilated, backend):
    case = random_config(5000 + 1000 * dilated + seed, dilated)
    q, k, v = random_inputs(case, seed, np.float32)
    run_and_compare(case, q, k, v, backend, 1e-5, 1e-4, 1e-4)


NAMED = {
    # name: (B, N or (Nq, Nk), H, Hkv, D, config)
    "dense_gqa_nq_lt_nk_causal": (2, (5, 17), 6, 2, 8, dict(causal=True)),
    "dense_nq_gt_nk_causal_empty_rows": (1, (19, 4), 2, 1, 3, dict(causal=True)),
    "partial_segments": (1, 23, 4, 2, 8, dict(segments=[5, 10], dilations=[1, 3])),
    "clipped_segment": (1, 9, 3, 3, 4, dict(segments=[64], dilations=[3])),
    "repeated_branches": (2, 16, 2, 1, 4, dict(segments=[8, 8, 4], dilations=[2, 2, 1])),
    "mod_unselected_rows": (1, 12, 2, 2, 4, dict(segments=[6], dilations=[3], causal=True)),
    "block_h_not_multiple_of_r": (1, 20, 5, 5, 4,
                                  dict(segments=[8, 20], dilations=[4, 3], heads_mode="block")),
    "groups_h_not_multiple_of_m": (1, 20, 7, 7, 4,
                                   dict(segments=[4, 8, 16], dilations=[1, 2, 4],
                                        heads_mode="groups", causal=True)),
    "single_token": (1, 1, 1, 1, 1, dict(segments=[1], dilations=[1])),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_case(name, backend):
    B, N, H, Hkv, D, config = NAMED[name]
    Nq, Nk = N if isinstance(N, tuple) else (N, N)
    case = dict(B=B, Nq=Nq, Nk=Nk, H=H, Hkv=Hkv, D=D, config=config)
    dtype = np.float64 if backend == "ref" else np.float32
    tol = (F64_TOL, F64_TOL, F64_TOL) if backend == "ref" else (1e-5, 1e-4, 1e-4)
    q, k, v = random_inputs(case, zlib.crc32(name.encode()) % 1000, dtype)
    run_and_compare(case, q, k, v, backend, *tol)


def test_empty_rows_are_zero_and_neg_inf():
    case = dict(B=1, Nq=12, Nk=12, H=2, Hkv=2, D=4,
                config=dict(segments=[6], dilations=[3]))
    q, k, v = random_inputs(case, 3)
    o, lse = dilattn.forward(q, k, v, backend="ref", **case["config"])
    # head 0 (offset 0) selects rows 0, 3 of each segment of 6; rows 1, 2, 4, 5 are empty
    for i in (1, 2, 4, 5, 7, 8, 10, 11):
        assert np.all(o[0, i, 0] == 0) and lse[0, 0, i] == -np.inf
    assert np.isfinite(lse[0, 0, 0]) and np.isfinite(lse[0, 0, 3])


def test_strided_views_equal_contiguous():
    case = dict(B=2, Nq=9, Nk=9, H=2, Hkv=1, D=5,
                config=dict(segments=[4], dilations=[2], causal=True))
    q, k, v = random_inputs(case, 9)
    # q as a transposed view of a [B, H, N, D] array: non-contiguous strides.
    q_strided = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    o1, lse1 = dilattn.forward(q, k, v, backend="ref", **case["config"])
    o2, lse2 = dilattn.forward(q_strided, k, v, backend="ref", **case["config"])
    assert np.array_equal(o1, o2) and np.array_equal(lse1, lse2)
