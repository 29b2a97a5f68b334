"""test_dropout.py - attention dropout (SPEC 11) through dilattn.forward / dilattn.backward
(dropout_p=, seed=, offset=) on the ref backend, against spec_numpy, whose keep decisions come
from its own numpy Philox4x32-10 written from SPEC 11.1 (tests/common/spec_numpy.py):
dense, causal, GQA, dilated (keys several branches hold: one decision per pair) and
block-sparse, with p = 0.1 and 0.5, forward and backward; p = 0 equals no dropout bitwise;
the same seed and offset give the same bits, another offset another mask; and the refusals."""
import numpy as np
import pytest

import dilattn
from helpers import CASES, inputs, spec_config, spec_numpy, within

TOL = 1e-12  # both sides f64; only the summation order differs

# The shared cases plus a dilated one whose branches hold some keys two and three times.
DROPOUT_CASES = CASES + [
    ("dilated_keys_held_thrice", (1, 16, 16, 2, 2, 4),
     dict(segments=[4, 4, 8], dilations=[1, 2, 4])),
]
IDS = [c[0] for c in DROPOUT_CASES]


def test_numpy_philox_known_answers():
    """SPEC 11.1's known answers (and Random123's third one, the digits of pi): the numpy
    generator the checks below rely on is Philox4x32-10."""
    f = 0xFFFFFFFF
    answers = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((f, f, f, f), (f, f), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for counter, key, want in answers:
        assert tuple(int(w) for w in spec_numpy.philox4x32_10(counter, key)) == want


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("name,sizes,options", DROPOUT_CASES, ids=IDS)
def test_ref_equals_spec_numpy(name, sizes, options, p):
    q, k, v, do = inputs(sizes, seed=11)
    seed, offset = 0x9E3779B97F4A7C15, 1234
    o, lse = dilattn.forward(q, k, v, backend="ref", dropout_p=p, seed=seed, offset=offset,
                             **options)
    dropout = (p, seed, offset)
    o_spec, lse_spec = spec_numpy.forward(q, k, v, scale=options.get("scale"), dropout=dropout,
                                          **spec_config(options))
    o_plain, _ = spec_numpy.forward(q, k, v, scale=options.get("scale"), **spec_config(options))
    assert not within(o_spec, o_plain, 1e-3, 0), "this case drops nothing that matters"
    assert within(o, o_spec, TOL, TOL), f"max |dO| {np.max(np.abs(o - o_spec))}"
    assert within(lse, lse_spec, TOL, TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", dropout_p=p, seed=seed,
                             offset=offset, **options)
    expected = spec_numpy.backward(q, k, v, do, scale=options.get("scale"), dropout=dropout,
                                   **spec_config(options))
    for got, want in zip(grads, expected):
        assert within(got, want, TOL, TOL), f"max diff {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_block_sparse_ref_equals_spec_numpy(p):
    B, N, H, D, bq = 2, 12, 3, 4, 3
    q, k, v, do = inputs((B, N, N, H, H, D), seed=12)
    mask = dilattn.mask.pattern("local:1+sink:1", N, bq)
    row_ptr, col_idx, head_ptr = mask.to_bsr()
    rows = spec_numpy.bsr_rows(H, N, bq, list(row_ptr), list(col_idx),
                               None if head_ptr is None else list(head_ptr))
    counts = spec_numpy.key_counts(N, N, H, mask=(bq, bq, rows), causal=True)
    dropout = (p, 77, 5)
    o, lse = dilattn.forward(q, k, v, mask=mask, causal=True, backend="ref", dropout_p=p,
                             seed=77, offset=5)
    o_spec, lse_spec, *grads_spec = spec_numpy.attention_numpy(q, k, v, counts, d_o=do,
                                                               dropout=dropout)
    assert within(o, o_spec, TOL, TOL) and within(lse, lse_spec, TOL, TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, mask=mask, causal=True, backend="ref",
                             dropout_p=p, seed=77, offset=5)
    for got, want in zip(grads, grads_spec):
        assert within(got, want, TOL, TOL)


def test_p_zero_is_no_dropout_bitwise():
    name, sizes, options = CASES[3]
    q, k, v, do = inputs(sizes, seed=13)
    o, lse = dilattn.forward(q, k, v, backend="ref", **options)
    o0, lse0 = dilattn.forward(q, k, v, backend="ref", dropout_p=0.0, seed=99, offset=3,
                               **options)
    assert np.array_equal(o, o0) and np.array_equal(lse, lse0)
    g = dilattn.backward(q, k, v, o, lse, do, backend="ref", **options)
    g0 = dilattn.backward(q, k, v, o, lse, do, backend="ref", dropout_p=0.0, seed=99, offset=3,
                          **options)
    for a, b in zip(g, g0):
        assert np.array_equal(a, b)


def test_seed_and_offset_select_the_mask():
    q, k, v, _ = inputs((1, 16, 16, 2, 2, 4), seed=14)
    run = lambda seed, offset: dilattn.forward(q, k, v, backend="ref", dropout_p=0.5,
                                               seed=seed, offset=offset)[0]
    base = run(5, 6)
    assert np.array_equal(base, run(5, 6))
    assert not np.array_equal(base, run(5, 7))
    assert not np.array_equal(base, run(6, 6))


def test_refusals():
    q, k, v, _ = inputs((1, 8, 8, 2, 2, 4), seed=15)
    with pytest.raises(dilattn.InvalidArgumentError, match="needs seed="):
        dilattn.forward(q, k, v, backend="ref", dropout_p=0.5)
    with pytest.raises(dilattn.InvalidArgumentError, match="'p' = 1"):
        dilattn.forward(q, k, v, backend="ref", dropout_p=1.0, seed=1)
    with pytest.raises(dilattn.InvalidArgumentError, match="dropout_offset = 4294967296"):
        dilattn.forward(q, k, v, backend="ref", dropout_p=0.5, seed=1, offset=2**32)
    with pytest.raises(dilattn.InvalidArgumentError, match="seed=-1"):
        dilattn.forward(q, k, v, backend="ref", dropout_p=0.5, seed=-1)
    with pytest.raises(dilattn.UnsupportedError, match="backend cpu does not run dropout"):
        dilattn.forward(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                        backend="cpu", dropout_p=0.5, seed=1)
