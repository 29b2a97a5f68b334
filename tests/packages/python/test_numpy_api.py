"""test_numpy_api.py - dilattn.forward / dilattn.backward on numpy arrays: the ref backend
against the independent numpy SPEC implementation (spec_numpy), the cpu backend against ref
within SPEC 8 (f32) and within 1e-12 with an f64 LSE (f64 inputs, SPEC 12), block-sparse
masks against a numpy oracle, and the SPEC 2 empty-row rule."""
import numpy as np
import pytest

import dilattn
from helpers import (CASES, DENSE_DILATED_IDS, TOLERANCE, block_sparse_numpy, inputs,
                     spec_config, spec_numpy, within)


@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_ref_forward_equals_spec_numpy(name, sizes, options):
    q, k, v, _ = inputs(sizes, seed=1)
    o, lse = dilattn.forward(q, k, v, backend="ref", **options)
    o_spec, lse_spec = spec_numpy.forward(q, k, v, scale=options.get("scale"),
                                          **spec_config(options))
    assert o.dtype == np.float64 and o.shape == q.shape
    assert lse.dtype == np.float64 and lse.shape == (sizes[0], sizes[3], sizes[1])
    assert within(o, o_spec, 1e-12, 1e-12)
    assert within(lse, lse_spec, 1e-12, 1e-12)


@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_ref_backward_equals_spec_numpy(name, sizes, options):
    q, k, v, do = inputs(sizes, seed=2)
    o, lse = dilattn.forward(q, k, v, backend="ref", **options)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", **options)
    expected = spec_numpy.backward(q, k, v, do, scale=options.get("scale"),
                                   **spec_config(options))
    for got, want in zip(grads, expected):
        assert got.shape == want.shape
        assert within(got, want, 1e-12, 1e-12)


@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_cpu_f32_within_spec8_of_ref(name, sizes, options):
    q, k, v, do = inputs(sizes, seed=3, dtype=np.float32)
    o_ref, lse_ref = dilattn.forward(*(x.astype(np.float64) for x in (q, k, v)), backend="ref",
                                     **options)
    o, lse = dilattn.forward(q, k, v, backend="cpu", **options)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    atol, rtol = TOLERANCE["f32"]
    assert within(o, o_ref, atol, rtol)
    assert within(lse, lse_ref, 1e-4, 0.0)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="cpu", **options)
    grads_ref = spec_numpy.backward(q, k, v, do, scale=options.get("scale"),
                                    **spec_config(options))
    for got, want in zip(grads, grads_ref):
        assert got.dtype == np.float32
        assert within(got, want, atol, rtol)


@pytest.mark.parametrize("backend", ["auto", "cpu"])
@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_f64_inputs_computed_in_f64_on_the_fast_backend(name, sizes, options, backend):
    # SPEC 12: float64 inputs on the default backend (cpu: the GPU backends refuse f64) are
    # computed in f64, and the LSE comes back in float64. A float32 computation would be
    # ~1e-7 away; f64's is ~1e-15, so 1e-12 leaves room for summation order only.
    q, k, v, do = inputs(sizes, seed=9)
    o_ref, lse_ref = dilattn.forward(q, k, v, backend="ref", **options)
    o, lse = dilattn.forward(q, k, v, backend=backend, **options)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    assert within(o, o_ref, 1e-12, 1e-12), np.max(np.abs(o - o_ref))
    assert within(lse, lse_ref, 1e-12, 1e-12), np.max(np.abs(lse - lse_ref))
    grads_ref = dilattn.backward(q, k, v, o_ref, lse_ref, do, backend="ref", **options)
    grads = dilattn.backward(q, k, v, o, lse, do, backend=backend, **options)
    for got, want in zip(grads, grads_ref):
        assert got.dtype == np.float64
        assert within(got, want, 1e-12, 1e-12), np.max(np.abs(got - want))


def test_auto_backend_is_cpu_where_no_gpu_runs():
    if dilattn.backend_available("cuda"):
        pytest.skip("a GPU is present: auto picks cuda (tested by the CUDA suites)")
    q, k, v, _ = inputs((1, 6, 6, 2, 1, 4), seed=4, dtype=np.float32)
    o_auto, lse_auto = dilattn.forward(q, k, v, causal=True)
    o_cpu, lse_cpu = dilattn.forward(q, k, v, causal=True, backend="cpu")
    assert np.array_equal(o_auto, o_cpu) and np.array_equal(lse_auto, lse_cpu)


def test_cpu_f16_within_spec8_of_ref_on_rounded_inputs():
    sizes, options = CASES[2][1], CASES[2][2]
    q, k, v, _ = inputs(sizes, seed=5, dtype=np.float16)
    o, _ = dilattn.forward(q, k, v, backend="cpu", **options)
    o_ref, _ = dilattn.forward(*(x.astype(np.float64) for x in (q, k, v)), backend="ref",
                               **options)
    assert o.dtype == np.float16
    assert within(o, o_ref, *TOLERANCE["f16"])


def test_rows_no_branch_selects_get_zero_and_minus_inf():
    # One branch (w=4, r=2), mod mode: head 0 selects rows 0, 2 of each segment only (SPEC 3).
    q, k, v, _ = inputs((1, 8, 8, 1, 1, 2), seed=6)
    o, lse = dilattn.forward(q, k, v, segments=[4], dilations=[2], backend="ref")
    odd = [1, 3, 5, 7]
    assert np.all(o[0, odd] == 0.0)
    assert np.all(lse[0, 0, odd] == -np.inf)
    assert np.all(np.isfinite(lse[0, 0, [0, 2, 4, 6]]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_block_sparse_pattern_equals_numpy_oracle(causal, backend):
    B, N, H, D, bq = 2, 20, 2, 4, 4
    dtype = np.float64 if backend == "ref" else np.float32
    q, k, v, do = inputs((B, N, N, H, H, D), seed=7, dtype=dtype)
    mask = dilattn.mask.pattern("local:1+sink:1", N, bq)
    o, lse = dilattn.forward(q, k, v, mask=mask, causal=causal, backend=backend)
    o_want, lse_want = block_sparse_numpy(q, k, v, mask.to_dense(), bq, bq, causal)
    tol = (1e-12, 1e-12) if backend == "ref" else TOLERANCE["f32"]
    assert within(o, o_want, *tol)
    assert within(lse, lse_want, 1e-4 if backend == "cpu" else 1e-12, tol[1])


def test_block_sparse_backward_ref_equals_dense_masked_by_the_same_keys():
    # A mask listing every block is dense attention: the backward must agree with SPEC 6.
    q, k, v, do = inputs((1, 9, 9, 2, 1, 3), seed=8)
    mask = dilattn.mask.pattern("dense", 9, 4)
    o, lse = dilattn.forward(q, k, v, mask=mask, causal=True, backend="ref")
    grads = dilattn.backward(q, k, v, o, lse, do, mask=mask, causal=True, backend="ref")
    for got, want in zip(grads, spec_numpy.backward(q, k, v, do, causal=True)):
        assert within(got, want, 1e-12, 1e-12)


def test_mask_builders_and_bsr_round_trip():
    m = dilattn.mask.local(16, 4, 1, causal=True)
    dense = m.to_dense()[0]
    assert dense.tolist() == [[True, False, False, False], [True, True, False, False],
                              [False, True, True, False], [False, False, True, True]]
    row_ptr, col_idx, head_ptr = m.to_bsr()
    again = dilattn.mask.from_bsr(row_ptr, col_idx, 16, 4)
    assert np.array_equal(again.to_dense(), m.to_dense()) and head_ptr is None
    u = dilattn.mask.union(dilattn.mask.sink(16, 4, 1), dilattn.mask.strided(16, 4, 2))
    assert u.to_dense()[0, 3].tolist() == [True, True, False, True]
    assert dilattn.mask.random(16, 4, 1.0, seed=3).nnz == 16
    assert dilattn.mask.hierarchical(16, 4, [(1, -1, 1)]).nnz == 16
    q, k, _, _ = inputs((1, 16, 16, 2, 1, 4), seed=9)
    top = dilattn.mask.topk(q, k, 4, 1)
    assert top.num_heads == 2 and np.all(top.to_dense().sum(axis=2) <= 2)
