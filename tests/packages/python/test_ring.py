"""test_ring.py - dilattn.ring (SPEC 5 on numpy shards, ranks on Python threads):
  * ring_forward / ring_backward on P = 1..4 ranks, contiguous and zigzag splits, dense causal
    GQA and dilated attention: every rank's rows of O, LSE, dQ, dK and dV, put back in place,
    equal the numpy SPEC implementation within SPEC 8 (f32) and within 1e-12 on the f64
    reference backend;
  * the options of docs/spec.md sections 10 and 11 (window_size, softcap, alibi_slopes, sinks
    with their gradient, dropout with seed and offset), each alone and together, on the ref
    backend, P = 1..3, both splits: equal to dilattn.forward / dilattn.backward on ref with the
    same options within 1e-12, d_sinks the same on every rank;
  * shard_rows gives the rows dilattn_ring_shard_rows defines (contiguous and zigzag by hand);
  * a bad shard on one rank (a row too many) fails every rank: that rank with its own
    SHAPE_MISMATCH, the others with DILATTN_ERROR_COMM naming it.
"""
import numpy as np
import pytest

import dilattn
from dilattn import ring
from helpers import TOLERANCE, spec_numpy, within

CASES = {
    "dense_causal_gqa": ((2, 22, 4, 2, 5), dict(causal=True)),
    "dilated_mod": ((1, 24, 3, 3, 4), dict(segments=[6, 12], dilations=[1, 2])),
}


def inputs(B, N, H, Hkv, D, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, N, H, D)), rng.uniform(-1, 1, (B, N, Hkv, D)),
            rng.uniform(-1, 1, (B, N, Hkv, D)), rng.uniform(-1, 1, (B, N, H, D)))


def run_ring(P, split, options, q, k, v, do, backend):
    """Every rank's forward then backward on its own rows; the results put back in place."""
    N = q.shape[1]

    def rank_main(comm):
        rows = ring.shard_rows(N, P, comm.rank, split)
        kw = dict(seqlen=N, split=split, backend=backend, **options)
        o, lse = ring.ring_forward(comm, q[:, rows], k[:, rows], v[:, rows], **kw)
        grads = ring.ring_backward(comm, q[:, rows], k[:, rows], v[:, rows], o, lse, do[:, rows],
                                   **kw)
        return rows, o, lse, grads

    o, lse = np.zeros(q.shape, q.dtype), np.zeros((q.shape[0], q.shape[2], N))
    grads = [np.zeros(x.shape, x.dtype) for x in (q, k, v)]
    d_sinks = []
    for rows, o_r, lse_r, grads_r in ring.run_threads(P, rank_main):
        o[:, rows], lse[:, :, rows] = o_r, lse_r
        for g, g_r in zip(grads, grads_r[:3]):
            g[:, rows] = g_r
        d_sinks += grads_r[3:]  # with sinks: this rank's d_sinks
    return (o, lse, grads) if not d_sinks else (o, lse, grads, d_sinks)


OPTIONS = {
    "window": dict(window_size=(5, 3)),
    "softcap": dict(softcap=1.5),
    "alibi": dict(alibi_slopes=[0.1, 0.05, 0.2, 0.15]),
    "sinks": dict(sinks=[0.3, -np.inf, -0.5, 1.0]),
    "dropout": dict(dropout_p=0.25, seed=99, offset=4),
}
OPTIONS["all"] = {key: val for opts in OPTIONS.values() for key, val in opts.items()}


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("split", ["contiguous", "zigzag"])
@pytest.mark.parametrize("P", [1, 2, 3])
def test_ring_options_equal_single_process(name, causal, split, P):
    q, k, v, do = inputs(2, 21, 4, 2, 5, seed=3)
    options = dict(OPTIONS[name], causal=causal)
    o_want, lse_want = dilattn.forward(q, k, v, backend="ref", **options)
    grads_want = dilattn.backward(q, k, v, o_want, lse_want, do, backend="ref", **options)
    got = run_ring(P, split, options, q, k, v, do, backend="ref")
    o, lse, grads = got[:3]
    assert within(o, o_want, 1e-12, 1e-12)
    assert within(lse, lse_want, 1e-12, 1e-12)
    for g, want in zip(grads, grads_want[:3]):
        assert within(g, want, 1e-11, 1e-11)
    if "sinks" in options:
        for d_sinks in got[3]:
            assert np.array_equal(d_sinks, got[3][0])
            assert within(d_sinks, grads_want[3], 1e-11, 1e-11)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("split", ["contiguous", "zigzag"])
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_ring_equals_spec(case, split, P):
    sizes, options = CASES[case]
    q, k, v, do = inputs(*sizes)
    config = {key: val for key, val in options.items()}
    o_spec, lse_spec = spec_numpy.forward(q, k, v, **config)
    grads_spec = spec_numpy.backward(q, k, v, do, **config)

    o, lse, grads = run_ring(P, split, options, *(x.astype(np.float32) for x in (q, k, v, do)),
                             backend="cpu")
    atol, rtol = TOLERANCE["f32"]
    assert within(o, o_spec, atol, rtol)
    assert within(lse, lse_spec, 1e-4, 0.0)
    for g, want in zip(grads, grads_spec):
        assert within(g, want, atol, rtol)

    o, lse, grads = run_ring(P, split, options, q, k, v, do, backend="ref")
    assert within(o, o_spec, 1e-12, 1e-12)
    assert within(lse, lse_spec, 1e-12, 1e-12)
    for g, want in zip(grads, grads_spec):
        assert within(g, want, 1e-12, 1e-12)


def test_shard_rows_by_hand():
    assert ring.shard_rows(10, 3, 0).tolist() == [0, 1, 2]
    assert ring.shard_rows(10, 3, 2).tolist() == [6, 7, 8, 9]
    # zigzag: 2P = 4 chunks of 10 rows (2, 3, 2, 3); rank 0 holds chunks 0 and 3
    assert ring.shard_rows(10, 2, 0, "zigzag").tolist() == [0, 1, 7, 8, 9]
    assert ring.shard_rows(10, 2, 1, "zigzag").tolist() == [2, 3, 4, 5, 6]
    with pytest.raises(dilattn.InvalidArgumentError, match="split='diagonal'"):
        ring.shard_rows(10, 2, 0, "diagonal")


def test_bad_shard_on_one_rank_fails_every_rank():
    q, k, v, _ = inputs(1, 12, 2, 2, 4)
    P, bad = 3, 1

    def rank_main(comm):
        rows = ring.shard_rows(12, P, comm.rank)
        q_shard = q[:, rows]
        if comm.rank == bad:  # one row too many
            q_shard = q[:, np.append(rows, rows[-1])]
        return ring.ring_forward(comm, q_shard, k[:, rows], v[:, rows], seqlen=12, backend="ref")

    with pytest.raises(ring.RingError) as info:
        ring.run_threads(P, rank_main)
    errors = info.value.errors
    assert all(isinstance(e, dilattn.Error) for e in errors), errors
    assert errors[bad].status_name == "DILATTN_ERROR_SHAPE_MISMATCH", errors[bad]
    assert "'q'" in errors[bad].message
    for r in range(P):
        if r != bad:
            assert errors[r].status_name == "DILATTN_ERROR_COMM", errors[r]
            assert f"rank {bad} failed" in errors[r].message
