"""test_sinks.py - docs/spec.md section 10.3 (attention sinks) on the ref backend against the
independent numpy transcription (tests/common/spec_numpy.py), forward, backward and d_sinks,
with every kind (dense GQA with Nq != Nk, causal with keyless rows, dilated in each head mode,
block-sparse), with windows, softcap, ALiBi, a packed batch and dropout; the cpu backend
against ref on the same cases (f64 and f32, d_sinks included); keyless rows (LSE = sink); a
-inf sink equal to no sink; d_sinks against central differences; emu (the CUDA kernels on the
SIMT emulator) against ref in f32; and AUTO resolving to cuda where a GPU is, else cpu.

Tolerance: both sides compute in f64 and differ only in summation order -> 1e-10 (as
test_variants.py); central differences with h = 1e-6: 1e-6 (1 + |grad|) as
tests/reference/test_gradients_finite_difference.cpp argues; emu in f32: SPEC 8's f32 bound
(1e-5 + 1e-4 |ref|; LSE 1e-4), d_sinks included."""
import numpy as np
import pytest

import dilattn
from dilattn._plan import Options, Plan
from helpers import cpu_against_ref, inputs_and_rng, spec_numpy

F64_TOL = 1e-10


def _inputs(sizes, seed):
    B, _, _, H, _, _ = sizes
    q, k, v, do, rng = inputs_and_rng(sizes, seed)
    sinks = rng.uniform(-0.5, 1.0, H)
    return q, k, v, do, sinks


def _mask_rows(mask):
    dense = mask.to_dense()
    return (mask.block_q, mask.block_k,
            [[list(np.flatnonzero(dense[h, ib])) for ib in range(dense.shape[1])]
             for h in range(dense.shape[0])])


CASES = {
    "dense_gqa_nq_lt_nk": ((2, 6, 9, 4, 2, 3), dict()),
    "dense_causal_keyless_rows": ((1, 9, 6, 2, 1, 3), dict(causal=True)),
    "dilated_mod_causal": ((1, 13, 13, 3, 1, 4),
                           dict(segments=[4, 8], dilations=[1, 2], heads_mode="mod",
                                causal=True)),
    "dilated_block": ((2, 12, 12, 4, 2, 3),
                      dict(segments=[6, 12], dilations=[2, 3], heads_mode="block")),
    "dilated_groups": ((1, 16, 16, 5, 5, 2),
                       dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups")),
    "block_sparse": ((2, 10, 13, 2, 1, 3), dict(mask="local:1+sink:1")),
    "variants": ((2, 7, 9, 2, 1, 3),
                 dict(window_size=(2, 1), softcap=0.6, alibi_slopes=[0.3, 0.1], causal=True)),
}


def _split(sizes, kind):
    lib, spec = dict(kind), dict(kind)
    if "mask" in kind:
        lib["mask"] = dilattn.mask.pattern(kind["mask"], sizes[1], 4, seqlen_k=sizes[2],
                                           block_k=3)
        spec["mask"] = _mask_rows(lib["mask"])
    if "window_size" in kind:
        spec["window"] = spec.pop("window_size")
    return lib, spec


@pytest.mark.parametrize("case", sorted(CASES))
def test_ref_matches_numpy_forward_backward_and_d_sinks(case):
    sizes, kind = CASES[case]
    q, k, v, do, sinks = _inputs(sizes, len(case) * 13)
    lib, spec = _split(sizes, kind)
    o, lse = dilattn.forward(q, k, v, backend="ref", scale=1.7, sinks=sinks, **lib)
    o_want, lse_want = spec_numpy.forward(q, k, v, scale=1.7, sinks=sinks, **spec)
    assert spec_numpy.within(o, o_want, F64_TOL, F64_TOL), np.max(np.abs(o - o_want))
    assert spec_numpy.within(lse, lse_want, F64_TOL, F64_TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", scale=1.7, sinks=sinks, **lib)
    wants = spec_numpy.backward(q, k, v, do, scale=1.7, sinks=sinks, **spec)
    assert len(grads) == 4
    for name, got, want in zip(("dq", "dk", "dv", "d_sinks"), grads, wants):
        assert spec_numpy.within(got, want, F64_TOL, F64_TOL), \
            f"{name}: max diff {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_matches_ref_forward_backward_and_d_sinks(case, dtype):
    if not dilattn.backend_available("cpu"):
        pytest.skip("backend cpu is not available here")
    sizes, kind = CASES[case]
    q, k, v, do, sinks = _inputs(sizes, len(case) * 13)
    sinks[0] = -np.inf  # a head without a sink beside heads with one
    lib, _ = _split(sizes, kind)
    cpu_against_ref(q, k, v, do, dict(lib, scale=1.7, sinks=sinks), dtype, extra_grads=1)


def test_cpu_packed_batch_with_keyless_rows():
    if not dilattn.backend_available("cpu"):
        pytest.skip("backend cpu is not available here")
    cu_q, cu_k = [0, 4, 4, 9], [0, 5, 7, 7]   # sequence 2 has rows and no key: LSE = sink
    q, k, v, do, sinks = _inputs((1, 9, 7, 2, 1, 3), 4)
    o, lse = dilattn.forward(q, k, v, backend="cpu", sinks=sinks, causal=True,
                             cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    # LSE = sigma, up to the rounding of the base-2 domain the cpu backend keeps it in.
    assert np.allclose(lse[0, :, 4:], np.repeat(sinks[:, None], 5, axis=1), rtol=0, atol=1e-14)
    assert np.all(o[0, 4:] == 0)
    cpu_against_ref(q, k, v, do, dict(sinks=sinks, causal=True, cu_seqlens_q=cu_q,
                                      cu_seqlens_k=cu_k), "f64", extra_grads=1)


def test_packed_batch_with_dropout():
    cu_q, cu_k = [0, 4, 4, 9], [0, 5, 7, 7]   # sequence 2 has rows and no key: LSE = sink
    q, k, v, do, sinks = _inputs((1, 9, 7, 2, 1, 3), 4)
    options = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_p=0.25, seed=9, offset=3,
                   causal=True)
    o, lse = dilattn.forward(q, k, v, backend="ref", sinks=sinks, **options)
    want = spec_numpy.varlen_attention(q, k, v, cu_q, cu_k, d_o=do, dropout=(0.25, 9, 3),
                                       causal=True, sinks=sinks)
    assert spec_numpy.within(o, want[0], F64_TOL, F64_TOL)
    assert spec_numpy.within(lse, want[1], F64_TOL, F64_TOL)
    assert np.array_equal(lse[0, :, 4:], np.repeat(sinks[:, None], 5, axis=1))
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", sinks=sinks, **options)
    for got, w in zip(grads, want[2:]):
        assert spec_numpy.within(got, w, F64_TOL, F64_TOL)


def test_sinks_change_the_result_and_minus_inf_is_none():
    q, k, v, do, sinks = _inputs((1, 6, 6, 2, 1, 3), 7)
    plain, plain_lse = dilattn.forward(q, k, v, backend="ref")
    o, lse = dilattn.forward(q, k, v, backend="ref", sinks=sinks)
    assert np.all(np.abs(o - plain).max(axis=-1) > 1e-3) and np.all(lse > plain_lse)
    o_none, lse_none = dilattn.forward(q, k, v, backend="ref", sinks=[-np.inf, -np.inf])
    assert np.array_equal(o_none, plain) and np.array_equal(lse_none, plain_lse)


def test_d_sinks_central_differences():
    sizes, kind = CASES["dilated_block"]
    q, k, v, do, sinks = _inputs(sizes, 17)

    def loss(s):
        return float(np.sum(do * dilattn.forward(q, k, v, backend="ref", sinks=s, **kind)[0]))

    o, lse = dilattn.forward(q, k, v, backend="ref", sinks=sinks, **kind)
    d_sinks = dilattn.backward(q, k, v, o, lse, do, backend="ref", sinks=sinks, **kind)[3]
    h = 1e-6
    for head in range(len(sinks)):
        plus, minus = sinks.copy(), sinks.copy()
        plus[head] += h
        minus[head] -= h
        fd = (loss(plus) - loss(minus)) / (2 * h)
        assert abs(d_sinks[head] - fd) <= 1e-6 * (1 + abs(fd)), (head, d_sinks[head], fd)
        assert abs(fd) > 1e-3


@pytest.mark.parametrize("case", sorted(CASES))
def test_emu_matches_ref_in_f32(case):
    if not dilattn.backend_available("emu"):
        pytest.skip("backend emu is not built here")
    sizes, kind = CASES[case]
    q, k, v, do, sinks = _inputs(sizes, len(case) * 13)
    q, k, v, do = (x.astype(np.float32) for x in (q, k, v, do))
    sinks[-1] = -np.inf  # a head without a sink
    lib, _ = _split(sizes, kind)
    results = {}
    for backend in ("emu", "ref"):
        o, lse = dilattn.forward(q, k, v, backend=backend, sinks=sinks, **lib)
        results[backend] = (o, lse) + tuple(dilattn.backward(q, k, v, o, lse, do,
                                                             backend=backend, sinks=sinks, **lib))
    names = ("o", "lse", "dq", "dk", "dv", "d_sinks")
    for name, got, want in zip(names, results["emu"], results["ref"]):
        atol, rtol = (1e-4, 0.0) if name == "lse" else (1e-5, 1e-4)
        assert spec_numpy.within(np.asarray(got), np.asarray(want), atol, rtol), \
            f"{name}: max diff {np.max(np.abs(np.asarray(got, np.float64) - want))}"


def test_auto_resolves_to_a_fast_backend():
    plan = Plan(Options(sinks=True), (1, 4, 4, 2, 1, 2), "f32")
    try:
        if dilattn.backend_available("cpu"):
            assert plan.backend in ("cpu", "cuda")
        else:
            assert plan.backend == "ref"
    finally:
        plan.close()


@pytest.mark.parametrize("sinks,message", [
    ([0.5, 0.5, 0.5], "sinks has 3 values, need heads_q = 2"),
    ([0.5, np.nan], "sinks[1] = nan: a sink is finite or -inf"),
    ([np.inf, 0.5], "sinks[0] = inf"),
    ("big", "sinks='big': expected 2 numbers"),
])
def test_bad_sinks_refused(sinks, message):
    q, k, v, _, _ = _inputs((1, 4, 4, 2, 1, 2), 1)
    with pytest.raises(dilattn.InvalidArgumentError) as e:
        dilattn.forward(q, k, v, backend="ref", sinks=sinks)
    assert e.value.status_name == "DILATTN_ERROR_INVALID_VALUE"
    assert message in str(e.value)
