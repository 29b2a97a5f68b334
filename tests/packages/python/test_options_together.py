"""test_options_together.py - every option of docs/spec.md sections 10 and 11 at once on the
fast cpu backend against ref: a window, a softcap, ALiBi, sinks and dropout together, with each
kind (dense GQA with Nq != Nk, causal, dilated in each head mode, block-sparse), and a packed
batch with dropout and all of them; forward (o, lse) and backward (dq, dk, dv, d_sinks).

Each option is tested alone by its own file (test_variants.py, test_sinks.py, test_varlen.py,
test_dropout.py); this one checks that they compose in the cpu backend as in the reference:
the same dropout decisions with windowed, capped and biased scores, sinks counted once per row.
float64: cpu computes it in float64, so 1e-10 as test_variants.py; float32: SPEC 8's bound.
"""
import numpy as np
import pytest

import dilattn
from helpers import TOLERANCE, inputs_and_rng

F64_TOL = 1e-10

# (name, sizes (B, Nq, Nk, H, Hkv, D), kind options).
KINDS = {
    "dense_gqa_nq_lt_nk": ((2, 9, 13, 4, 2, 8), dict()),
    "dense_causal_nq_gt_nk": ((1, 13, 9, 2, 1, 8), dict(causal=True)),
    "dilated_mod_causal": ((1, 24, 24, 3, 1, 8),
                           dict(segments=[8, 16], dilations=[1, 2], heads_mode="mod",
                                causal=True)),
    "dilated_groups": ((1, 32, 32, 6, 3, 8),
                       dict(segments=[8, 16, 32], dilations=[1, 2, 4], heads_mode="groups")),
    "block_sparse": ((2, 20, 26, 2, 1, 8), dict(mask="local:1+sink:1")),
}


def _all_options(rng, B, H):
    return dict(window_size=(5, 2), softcap=0.9,
                alibi_slopes=rng.uniform(0.05, 0.5, (B, H)).ravel().tolist(),
                sinks=rng.uniform(-1.0, 1.0, H), dropout_p=0.3, seed=1234567, offset=11)


def _kind_options(kind, sizes):
    options = dict(kind)
    if "mask" in options:
        _, Nq, Nk, _, _, _ = sizes
        options["mask"] = dilattn.mask.pattern(options["mask"], Nq, 4, seqlen_k=Nk, block_k=4)
    return options


def _run(backend, q, k, v, do, options):
    o, lse = dilattn.forward(q, k, v, backend=backend, **options)
    grads = dilattn.backward(q, k, v, o, lse, do, backend=backend, **options)
    return (o, lse) + tuple(grads)


def _close(got, want, dtype):
    atol, rtol = (F64_TOL, F64_TOL) if dtype == np.float64 else TOLERANCE["f32"]
    names = ("o", "lse", "dq", "dk", "dv", "d_sinks")
    for name, g, w in zip(names, got, want):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        assert g.shape == w.shape, name
        finite = np.isfinite(w)
        assert np.array_equal(finite, np.isfinite(g)), f"{name}: non-finite entries differ"
        err = np.abs(g[finite] - w[finite])
        bound = atol + rtol * np.abs(w[finite])
        assert np.all(err <= bound), f"{name}: max error {err.max():.3g}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(KINDS))
def test_cpu_equals_ref_with_every_option(name, dtype):
    sizes, kind = KINDS[name]
    B, _, _, H, _, _ = sizes
    q, k, v, do, rng = inputs_and_rng(sizes, seed=len(name))
    q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
    options = dict(_kind_options(kind, sizes), **_all_options(rng, B, H))
    want = _run("ref", q, k, v, do, options)
    got = _run("cpu", q, k, v, do, options)
    _close(got, want, dtype)
    # Dropout took effect: the same call without it gives another o.
    plain = dict(options, dropout_p=0.0)
    assert not np.allclose(dilattn.forward(q, k, v, backend="cpu", **plain)[0], got[0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_packed_batch_with_every_option(dtype):
    # Three sequences of 7, 0 and 12 query rows over 9, 3 and 15 keys; causal, so each aligns
    # its own bottom-right corner (SPEC 10.2).
    cu_q, cu_k = np.array([0, 7, 7, 19]), np.array([0, 9, 12, 27])
    H, Hkv, D = 4, 2, 8
    rng = np.random.default_rng(7)
    q = rng.uniform(-1, 1, (cu_q[-1], H, D)).astype(dtype)
    k = rng.uniform(-1, 1, (cu_k[-1], Hkv, D)).astype(dtype)
    v = rng.uniform(-1, 1, (cu_k[-1], Hkv, D)).astype(dtype)
    do = rng.uniform(-1, 1, (cu_q[-1], H, D)).astype(dtype)
    options = dict(_all_options(rng, 3, H), causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    want = _run("ref", q, k, v, do, options)
    got = _run("cpu", q, k, v, do, options)
    _close(got, want, dtype)
