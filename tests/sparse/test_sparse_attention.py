"""test_sparse_attention.py - block-sparse forward and backward (SPEC 4, 6) through the C ABI.

Compared with sparse_lib.dense_masked_attention, a numpy softmax over a boolean mask written from
SPEC 2 and 4 alone. DILATTN_SPARSE_BACKEND picks the backend under test: 'ref' (default, f64,
must match to 1e-12) or 'cpu' (f32, SPEC 8's f32 tolerances). With 'cpu' on a build whose cpu
backend is missing, the whole run exits 77, which meson reports as SKIP (never as a pass).
"""
import os

import numpy as np
import pytest

from sparse_lib import (BACKEND_CPU, BACKEND_REF, F32, F64, HEADS_MOD, LIB, allowed_matrix, build,
                        create_mask, dense_masked_attention, dilated_plan,
                        random_rows, sparse_plan)

if os.environ.get("DILATTN_SPARSE_BACKEND", "ref") == "cpu":
    BACKENDS = [BACKEND_CPU]  # conftest.py ends the run with 77 when it is not built
else:
    BACKENDS = [BACKEND_REF]
# (B, Nq, Nk, H, Hkv, D, bq, bk): N % block != 0, Nq != Nk both ways, GQA, bq != bk.
CASES = [(1, 16, 16, 2, 2, 8, 4, 4), (2, 13, 13, 4, 2, 5, 4, 4), (1, 11, 19, 4, 1, 6, 3, 5),
         (2, 19, 11, 2, 1, 4, 5, 3), (1, 33, 33, 3, 3, 16, 8, 8)]


def inputs(rng, B, Nq, Nk, H, Hkv, D):
    return (rng.standard_normal((B, Nq, H, D)), rng.standard_normal((B, Nk, Hkv, D)),
            rng.standard_normal((B, Nk, Hkv, D)))


def tolerance(backend):
    # ref: f64 both sides, only summation order differs. cpu: SPEC 8 f32, and inputs are
    # rounded to f32 before the numpy reference sees them, so only accumulation error remains.
    return (1e-12, 1e-12) if backend == BACKEND_REF else (1e-5, 1e-4)


def compare(backend, case, rows, causal, seed):
    B, Nq, Nk, H, Hkv, D, bq, bk = case
    rng = np.random.default_rng(seed)
    q, k, v = inputs(rng, B, Nq, Nk, H, Hkv, D)
    dtype = F64 if backend == BACKEND_REF else F32
    if dtype == F32:
        q, k, v = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
    s, mask = create_mask(Nq, Nk, bq, bk, rows)
    assert s == 0
    o, lse = sparse_plan(mask, B, Nq, Nk, H, Hkv, D, dtype, backend, causal).forward(q, k, v)
    o_ref, lse_ref = dense_masked_attention(q, k, v, allowed_matrix(rows, H, Nq, Nk, bq, bk, causal))
    atol, rtol = tolerance(backend)
    np.testing.assert_allclose(o, o_ref, atol=atol, rtol=rtol)
    empty = np.isneginf(lse_ref)
    assert np.array_equal(np.isneginf(lse), empty)  # the same rows are empty
    np.testing.assert_allclose(lse[~empty], lse_ref[~empty], atol=1e-12 if backend == BACKEND_REF else 1e-4)
    return o, lse_ref


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_head", [False, True])
def test_forward_matches_dense_masked_numpy(backend, case, causal, per_head):
    B, Nq, Nk, H, Hkv, D, bq, bk = case
    rng = np.random.default_rng(hash((case, causal, per_head)) % 2**32)
    I, J = -(-Nq // bq), -(-Nk // bk)
    rows = random_rows(rng, H if per_head else 1, I, J, 0.4)
    compare(backend, case, rows, causal, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_full_masks(backend):
    case = (1, 13, 13, 2, 1, 4, 4, 4)
    o, lse = compare(backend, case, [[[], [0, 1, 2, 3], [], [3]]], False, 2)
    assert np.all(o[:, 0:4] == 0) and np.all(o[:, 8:12] == 0)  # empty rows: exactly zero
    compare(backend, case, [[list(range(4))] * 4], True, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_v_ones_gives_rows_of_exactly_one(backend, causal):
    B, Nq, Nk, H, Hkv, D, bq, bk = 2, 21, 21, 4, 2, 8, 4, 4
    rng = np.random.default_rng(9)
    rows = random_rows(rng, H, 6, 6, 0.5)
    s, mask = create_mask(Nq, Nk, bq, bk, rows)
    q, k, _ = inputs(rng, B, Nq, Nk, H, Hkv, D)
    dtype = F64 if backend == BACKEND_REF else F32
    o, _ = sparse_plan(mask, B, Nq, Nk, H, Hkv, D, dtype, backend, causal).forward(q, k, np.ones((B, Nk, Hkv, D)))
    nonempty = allowed_matrix(rows, H, Nq, Nk, bq, bk, causal).any(axis=2)  # [H, Nq]
    assert nonempty.any() and (~nonempty).any()  # both kinds of row occur
    for h in range(H):
        # One softmax over all blocks (SPEC 4): weights sum to one, so O is 1 up to the rounding
        # of exp(S - LSE) (SPEC 2's form): a few ulps. Per-block softmaxes would give 2, 3, ...
        np.testing.assert_allclose(o[:, nonempty[h], h, :], 1.0, rtol=0,
                                   atol=2e-15 if dtype == F64 else 1e-6)
        assert np.all(o[:, ~nonempty[h], h, :] == 0.0)


def dilated_rows(N, H, w, r, b):
    """Per-head block masks (block size b) giving one dilated branch (w, r), head mode mod."""
    rows = []
    for h in range(H):
        o = h % r
        hr = []
        for ib in range(-(-N // b)):
            i = ib * b  # b == 1, or r == 1 with b dividing w: the whole block shares a segment
            s0 = (i // w) * w
            s1 = min(s0 + w, N)
            if (i - s0) % r != o:
                hr.append([])
            else:
                hr.append(sorted({j // b for j in range(s0 + o, s1, r)}))
        rows.append(hr)
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("w, r, b", [(8, 1, 4), (8, 1, 8), (6, 1, 2), (8, 2, 1), (6, 3, 1), (5, 2, 1)])
def test_dilated_branch_as_per_head_masks(backend, causal, w, r, b):
    B, N, H, D = 2, 23, 4, 8
    rng = np.random.default_rng(w * 100 + r * 10 + b)
    q, k, v = inputs(rng, B, N, N, H, H, D)
    dtype = F64 if backend == BACKEND_REF else F32
    s, mask = create_mask(N, N, b, b, dilated_rows(N, H, w, r, b))
    assert s == 0
    o_s, lse_s = sparse_plan(mask, B, N, N, H, H, D, dtype, backend, causal).forward(q, k, v)
    o_d, lse_d = dilated_plan([(w, r)], HEADS_MOD, B, N, H, D, dtype, backend, causal).forward(q, k, v)
    # f32: the two online softmaxes meet the same keys in different tiles, so their running
    # maxima, and the arguments of the cpu backend's exp2 (relative error <= 3.5e-6,
    # tests/cpu/test_cpu_exp2.cpp), differ: O differs by a few 1e-6 where |V| ~ 1.
    atol = 1e-13 if dtype == F64 else 1e-5
    np.testing.assert_allclose(o_s, o_d, atol=atol, rtol=0)
    assert np.array_equal(np.isneginf(lse_s), np.isneginf(lse_d))
    fin = np.isfinite(lse_d)
    np.testing.assert_allclose(lse_s[fin], lse_d[fin], atol=atol, rtol=0)


@pytest.mark.ref_only  # finite differences need f64; the cpu run compares with ref instead
@pytest.mark.parametrize("case", [(1, 7, 7, 2, 1, 3, 3, 2), (2, 5, 8, 2, 2, 2, 2, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_central_differences(case, causal):
    B, Nq, Nk, H, Hkv, D, bq, bk = case
    rng = np.random.default_rng(17)
    I, J = -(-Nq // bq), -(-Nk // bk)
    rows = random_rows(rng, H, I, J, 0.6)
    s, mask = create_mask(Nq, Nk, bq, bk, rows)
    plan = sparse_plan(mask, B, Nq, Nk, H, Hkv, D, F64, BACKEND_REF, causal)
    q, k, v = inputs(rng, B, Nq, Nk, H, Hkv, D)
    g = rng.standard_normal((B, Nq, H, D))
    dq, dk, dv = plan.backward(q, k, v, g)
    loss = lambda q_, k_, v_: float((plan.forward(q_, k_, v_)[0] * g).sum())  # noqa: E731
    eps = 1e-6
    for which, x, grad in ((0, q, dq), (1, k, dk), (2, v, dv)):
        fd = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            xp, xm = x.copy(), x.copy()
            xp[idx] += eps
            xm[idx] -= eps
            args_p, args_m = [q, k, v], [q, k, v]
            args_p[which], args_m[which] = xp, xm
            fd[idx] = (loss(*args_p) - loss(*args_m)) / (2 * eps)
        np.testing.assert_allclose(grad, fd, atol=1e-7, rtol=1e-6)
    assert np.abs(dk).max() > 0.01  # the case exercises real gradients


@pytest.mark.cpu_only  # ref against itself would prove nothing
@pytest.mark.parametrize("case", CASES[:4])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_ref_backend(case, causal):
    B, Nq, Nk, H, Hkv, D, bq, bk = case
    rng = np.random.default_rng(23)
    rows = random_rows(rng, H, -(-Nq // bq), -(-Nk // bk), 0.5)
    s, mask = create_mask(Nq, Nk, bq, bk, rows)
    q, k, v = (x.astype(np.float32).astype(np.float64) for x in inputs(rng, B, Nq, Nk, H, Hkv, D))
    g = rng.standard_normal((B, Nq, H, D)).astype(np.float32).astype(np.float64)
    ref = sparse_plan(mask, B, Nq, Nk, H, Hkv, D, F64, BACKEND_REF, causal).backward(q, k, v, g)
    got = sparse_plan(mask, B, Nq, Nk, H, Hkv, D, F32, BACKEND_CPU, causal).backward(q, k, v, g)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.ref_only
def test_builder_masks_run_through_forward():
    # A pattern-built mask is an ordinary mask: local+sink on the ref backend vs numpy.
    B, N, H, D, bs = 1, 30, 2, 4, 4
    m = build(LIB.dilattn_mask_local, N, N, bs, bs, 1, 1)
    rows = m.rows()
    rng = np.random.default_rng(4)
    q, k, v = inputs(rng, B, N, N, H, H, D)
    o, _ = sparse_plan(m, B, N, N, H, H, D, F64, BACKEND_REF, True).forward(q, k, v)
    o_ref, _ = dense_masked_attention(q, k, v, allowed_matrix(rows, H, N, N, bs, bs, True))
    np.testing.assert_allclose(o, o_ref, atol=1e-12)
