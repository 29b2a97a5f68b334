"""test_variants.py - docs/spec.md section 10.1 (sliding window, softcap, ALiBi) on the ref
backend against the independent numpy transcription (tests/common/spec_numpy.py), forward and
backward, alone and together, with every kind (dense with Nq != Nk and GQA, causal, dilated in
each head mode, block-sparse); the cpu backend against ref on the same cases, in f64 and f32;
emu (the CUDA kernels on the SIMT emulator) against ref in f32; and the refusals: every
setter's bad values, the slope count at plan creation, AUTO resolving to the first backend that
runs the options (cuda where a GPU is, else cpu).

Tolerance: both sides compute in f64 and differ only in summation order -> 1e-10 (as
tests/python/test_backward.py); cpu and emu in f32 against ref on the same f32 inputs: SPEC 8's
f32 bound (atol 1e-5, rtol 1e-4; LSE atol 1e-4)."""
import math

import numpy as np
import pytest

import dilattn
from dilattn._plan import Options, Plan
from helpers import cpu_against_ref, inputs_and_rng, spec_numpy

F64_TOL = 1e-10


def _inputs(sizes, seed):
    B, _, _, H, _, _ = sizes
    q, k, v, do, rng = inputs_and_rng(sizes, seed)
    slopes_bh = rng.uniform(0.05, 0.8, (B, H))
    return q, k, v, do, slopes_bh


def _mask_rows(mask, H):
    """spec_numpy's mask=(bq, bk, rows) from a dilattn.mask.Mask."""
    dense = mask.to_dense()
    rows = [[list(np.flatnonzero(dense[h, ib])) for ib in range(dense.shape[1])]
            for h in range(dense.shape[0])]
    return (mask.block_q, mask.block_k, rows)


# (name, sizes (B, Nq, Nk, H, Hkv, D), kind options, variant options). "slopes": "h" for H
# slopes, "bh" for B * H.
KINDS = {
    "dense_gqa_nq_lt_nk": ((2, 6, 9, 4, 2, 3), dict()),
    "dense_causal_nq_gt_nk": ((1, 9, 6, 2, 1, 3), dict(causal=True)),
    "dilated_mod_causal": ((1, 13, 13, 3, 1, 4),
                           dict(segments=[4, 8], dilations=[1, 2], heads_mode="mod", causal=True)),
    "dilated_block": ((2, 12, 12, 4, 2, 3),
                      dict(segments=[6, 12], dilations=[2, 3], heads_mode="block")),
    "dilated_groups": ((1, 16, 16, 5, 5, 2),
                       dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups")),
    "block_sparse_nq_ne_nk": ((2, 10, 13, 2, 1, 3), dict(mask="local:1+sink:1")),
    "block_sparse_causal": ((1, 12, 12, 2, 2, 3), dict(mask="strided:2+local:0", causal=True)),
}
VARIANTS = {
    "window": dict(window_size=(2, 1)),
    "window_left_only": dict(window_size=(3, -1)),
    "window_right_only": dict(window_size=(-1, 0)),
    "softcap": dict(softcap=0.4),
    "alibi_per_head": dict(alibi_slopes="h"),
    "alibi_per_batch_head": dict(alibi_slopes="bh"),
    "all_three": dict(window_size=(3, 2), softcap=0.7, alibi_slopes="bh"),
}


def _options(kind, variant, sizes, slopes_bh, scale):
    B, Nq, Nk, H = sizes[:4]
    lib, spec = dict(kind), dict(kind)
    if "mask" in kind:
        lib["mask"] = dilattn.mask.pattern(kind["mask"], Nq, 4, seqlen_k=Nk, block_k=3)
        spec["mask"] = _mask_rows(lib["mask"], H)
    if "window_size" in variant:
        lib["window_size"] = variant["window_size"]
        spec["window"] = variant["window_size"]
    if "softcap" in variant:
        lib["softcap"] = spec["softcap"] = variant["softcap"]
    if "alibi_slopes" in variant:
        slopes = slopes_bh[0] if variant["alibi_slopes"] == "h" else slopes_bh
        lib["alibi_slopes"] = slopes
        spec["alibi_slopes"] = slopes
    lib["scale"] = spec["scale"] = scale
    return lib, spec


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ref_matches_numpy_forward_and_backward(kind, variant):
    sizes, kind_options = KINDS[kind]
    q, k, v, do, slopes_bh = _inputs(sizes, len(kind) * 31 + len(variant))
    # A scale above 1 puts the softcap's tanh in its curved part, where a missing derivative
    # factor is visible.
    lib, spec = _options(kind_options, VARIANTS[variant], sizes, slopes_bh, 1.7)
    o, lse = dilattn.forward(q, k, v, backend="ref", **lib)
    o_want, lse_want = spec_numpy.forward(q, k, v, **spec)
    assert spec_numpy.within(o, o_want, F64_TOL, F64_TOL), np.max(np.abs(o - o_want))
    assert spec_numpy.within(lse, lse_want, F64_TOL, F64_TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", **lib)
    wants = spec_numpy.backward(q, k, v, do, **spec)
    for name, got, want in zip(("dq", "dk", "dv"), grads, wants):
        assert spec_numpy.within(got, want, F64_TOL, F64_TOL), \
            f"{name}: max diff {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cpu_matches_ref_forward_and_backward(kind, variant, dtype):
    if not dilattn.backend_available("cpu"):
        pytest.skip("backend cpu is not available here")
    sizes, kind_options = KINDS[kind]
    q, k, v, do, slopes_bh = _inputs(sizes, len(kind) * 31 + len(variant))
    lib, _ = _options(kind_options, VARIANTS[variant], sizes, slopes_bh, 1.7)
    cpu_against_ref(q, k, v, do, lib, dtype)


def test_variants_change_the_result():
    # Each option must do something on this problem, or the comparisons above prove little.
    sizes = (1, 8, 8, 2, 1, 4)
    q, k, v, _, slopes_bh = _inputs(sizes, 5)
    plain, _ = dilattn.forward(q, k, v, backend="ref", scale=2.0)
    for options in (dict(window_size=(1, 1)), dict(softcap=0.3), dict(alibi_slopes=slopes_bh[0])):
        o, _ = dilattn.forward(q, k, v, backend="ref", scale=2.0, **options)
        assert np.max(np.abs(o - plain)) > 1e-3, options


def test_window_empties_rows():
    # Nq = 7 > Nk = 3: row i's window (0, 0) holds the one key i - 4, absent for i < 4.
    sizes = (1, 7, 3, 1, 1, 2)
    q, k, v, _, _ = _inputs(sizes, 9)
    o, lse = dilattn.forward(q, k, v, backend="ref", window_size=(0, 0))
    assert np.all(o[0, :4] == 0) and np.all(np.isneginf(lse[0, 0, :4]))
    for i in range(4, 7):  # one key: O_i = v_{i-4}, LSE_i = S_{i,i-4}
        assert np.allclose(o[0, i, 0], v[0, i - 4, 0], rtol=0, atol=1e-15)
        s = q[0, i, 0] @ k[0, i - 4, 0] / math.sqrt(2)
        assert abs(lse[0, 0, i] - s) < 1e-15


def test_softcap_and_alibi_hand_computed():
    # One row, two keys: S_j = c tanh(scale <q, k_j> / c) - m |i + d - j|, then SPEC 2.
    q = np.array([1.0, 2.0]).reshape(1, 1, 1, 2)
    k = np.array([[0.5, 1.0], [-1.0, 0.25]]).reshape(1, 2, 1, 2)
    v = np.array([[1.0, 0.0], [0.0, 1.0]]).reshape(1, 2, 1, 2)
    c, m, scale = 0.8, 0.3, 1.5
    raw = scale * np.array([2.5, -0.5])
    s = c * np.tanh(raw / c) - m * np.array([1.0, 0.0])   # d = 1: |0 + 1 - j|
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    o, lse = dilattn.forward(q, k, v, backend="ref", scale=scale, softcap=c, alibi_slopes=[m])
    assert np.allclose(o[0, 0, 0], p, rtol=0, atol=1e-15)
    assert abs(lse[0, 0, 0] - (s.max() + np.log(np.exp(s - s.max()).sum()))) < 1e-15


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("kind", ["dense_gqa_nq_lt_nk", "dilated_block", "block_sparse_causal"])
def test_emu_matches_ref_in_f32(kind, variant):
    if not dilattn.backend_available("emu"):
        pytest.skip("backend emu is not built here")
    sizes, kind_options = KINDS[kind]
    q, k, v, do, slopes_bh = _inputs(sizes, len(kind) * 17 + len(variant))
    q, k, v, do = (x.astype(np.float32) for x in (q, k, v, do))
    lib, _ = _options(kind_options, VARIANTS[variant], sizes, slopes_bh, 1.7)
    results = {}
    for backend in ("emu", "ref"):
        o, lse = dilattn.forward(q, k, v, backend=backend, **lib)
        results[backend] = (o, lse) + tuple(dilattn.backward(q, k, v, o, lse, do,
                                                             backend=backend, **lib))
    for name, got, want in zip(("o", "lse", "dq", "dk", "dv"), results["emu"], results["ref"]):
        atol, rtol = (1e-4, 0.0) if name == "lse" else (1e-5, 1e-4)
        assert spec_numpy.within(got, want, atol, rtol), \
            f"{name}: max diff {np.max(np.abs(got.astype(np.float64) - want))}"


def test_auto_resolves_to_a_fast_backend():
    plan = Plan(Options(window_size=(2, 0), softcap=5.0), (1, 4, 4, 2, 1, 2), "f32")
    try:
        if dilattn.backend_available("cpu"):
            assert plan.backend in ("cpu", "cuda")
        else:
            assert plan.backend == "ref"
    finally:
        plan.close()
    plain = Plan(Options(), (1, 4, 4, 2, 1, 2), "f32")
    try:
        assert plain.backend != "ref" or not dilattn.backend_available("cpu")
    finally:
        plain.close()


@pytest.mark.parametrize("options,message", [
    (dict(window_size=(-2, 0)), "argument 'left' = -2"),
    (dict(window_size=(0, -5)), "argument 'right' = -5"),
    (dict(softcap=-1.0), "argument 'softcap' = -1"),
    (dict(softcap=float("nan")), "argument 'softcap' = nan"),
    (dict(softcap=float("inf")), "argument 'softcap' = inf"),
    (dict(alibi_slopes=[0.5, float("nan")]), "slopes[1] = nan"),
    (dict(alibi_slopes=[float("-inf"), 0.5]), "slopes[0] = -inf"),
    (dict(alibi_slopes=[0.5, 0.5, 0.5]), "count = 3, need heads_q = 2"),
    (dict(window_size=(2,)), "window_size=(2,): expected (left, right)"),
    (dict(window_size=3), "window_size=3: expected (left, right)"),
    (dict(softcap="big"), "softcap='big': expected a number"),
])
def test_bad_values_refused(options, message):
    q, k, v, _, _ = _inputs((2, 4, 4, 2, 1, 2), 1)
    with pytest.raises(dilattn.InvalidArgumentError) as e:
        dilattn.forward(q, k, v, backend="ref", **options)
    assert e.value.status_name == "DILATTN_ERROR_INVALID_VALUE"
    assert message in str(e.value)
