"""test_dropout.py - attention dropout (SPEC 11) through dilattn.forward / dilattn.backward
(dropout_p=, seed=, offset=) on the ref backend, against spec_numpy, whose keep decisions come
from its own numpy Philox4x32-10 written from SPEC 11.1 (tests/common/spec_numpy.py):
dense, causal, GQA, dilated (keys several branches hold: one decision per pair) and
block-sparse, with p = 0.1 and 0.5, forward and backward; p = 0 equals no dropout bitwise;
the same seed and offset give the same bits, another offset another mask; and the refusals.
The cpu backend runs the same cases against spec_numpy: f64 inputs within SPEC 12's 1e-10, f32
inputs within SPEC 8's bounds, and it drops exactly the pairs ref drops (seen through a one-hot
V); emu (the CUDA kernels), where built, gives ref's result within SPEC 8."""
import math

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


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("name,sizes,options", DROPOUT_CASES, ids=IDS)
def test_cpu_equals_spec_numpy(name, sizes, options, p):
    q, k, v, do = inputs(sizes, seed=11)
    seed, offset = 0x9E3779B97F4A7C15, 1234
    dropout = (p, seed, offset)
    o_spec, lse_spec = spec_numpy.forward(q, k, v, scale=options.get("scale"), dropout=dropout,
                                          **spec_config(options))
    grads_spec = spec_numpy.backward(q, k, v, do, scale=options.get("scale"), dropout=dropout,
                                     **spec_config(options))
    call = dict(backend="cpu", dropout_p=p, seed=seed, offset=offset, **options)
    # f64 inputs are computed in f64 on the cpu backend (SPEC 12).
    o, lse = dilattn.forward(q, k, v, **call)
    assert within(o, o_spec, 1e-10, 1e-10), f"max |dO| {np.max(np.abs(o - o_spec))}"
    assert within(lse, lse_spec, 1e-10, 1e-10)
    for got, want in zip(dilattn.backward(q, k, v, o, lse, do, **call), grads_spec):
        assert within(got, want, 1e-10, 1e-10), f"max diff {np.max(np.abs(got - want))}"
    # f32 inputs in f32, within SPEC 8 (f32: atol 1e-5, rtol 1e-4; the LSE 1e-4).
    q32, k32, v32, do32 = (x.astype(np.float32) for x in (q, k, v, do))
    o32, lse32 = dilattn.forward(q32, k32, v32, **call)
    assert within(o32, o_spec, 1e-5, 1e-4) and within(lse32, lse_spec, 1e-4, 0)
    # The backward from the f32 forward's own O and LSE differentiates that O: compare it with
    # the backward from the same O in f64 (the reference is exact for the inputs given, SPEC 6).
    ref_grads = dilattn.backward(q32, k32, v32, o32, lse32, do32, backend="ref", dropout_p=p,
                                 seed=seed, offset=offset, **options)
    for got, want in zip(dilattn.backward(q32, k32, v32, o32, lse32, do32, **call), ref_grads):
        assert within(got, want, 1e-5, 1e-4), f"max diff {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_drops_exactly_the_pairs_ref_drops(dtype):
    """q = 0 makes every probability of a row equal and v_j = e_j (D = Nk) puts P_ij M_ij in
    O[i, j]: exactly 0 where a pair is dropped. Dense, dilated with keys two branches hold, and
    causal block-sparse."""
    B, N, H = 2, 40, 3
    q = np.zeros((B, N, H, N), dtype)
    k = np.random.default_rng(3).uniform(-1, 1, (B, N, H, N)).astype(dtype)
    v = np.zeros((B, N, H, N), dtype)
    for j in range(N):
        v[:, j, :, j] = 1
    for options in (dict(), dict(segments=[8, 16, 40], dilations=[1, 2, 4]),
                    dict(segments=[10, 40], dilations=[3, 5], heads_mode="block", causal=True),
                    dict(mask=dilattn.mask.pattern("local:2+sink:1", N, 6), causal=True)):
        call = dict(dropout_p=0.5, seed=2**40 + 3, offset=11, **options)
        o_ref, _ = dilattn.forward(q, k, v, backend="ref", **call)
        o_cpu, _ = dilattn.forward(q, k, v, backend="cpu", **call)
        assert np.count_nonzero(o_ref == 0) > 0 and np.count_nonzero(o_ref) > 0
        assert np.array_equal(o_ref == 0, o_cpu == 0), f"{options}: the cpu drops other pairs"


def test_cpu_fraction_dropped_within_binomial_bounds():
    B, N, H = 2, 128, 2
    q = np.zeros((B, N, H, N), np.float32)
    v = np.zeros((B, N, H, N), np.float32)
    for j in range(N):
        v[:, j, :, j] = 1
    for p in (0.1, 0.5, 0.9):
        o, _ = dilattn.forward(q, q, v, backend="cpu", dropout_p=p, seed=8, offset=1)
        n = o.size
        dropped = np.count_nonzero(o == 0) / n
        assert abs(dropped - p) <= 5 * math.sqrt(p * (1 - p) / n), f"p={p}: dropped {dropped}"
        kept = o[o != 0]
        assert np.allclose(kept, 1 / (N * (1 - p)), rtol=1e-6, atol=0)


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
    with pytest.raises(dilattn.InvalidArgumentError, match="needs seed="):
        dilattn.forward(q, k, v, backend="cpu", dropout_p=0.5)


@pytest.mark.skipif(not dilattn.backend_available("emu"), reason="emu is not built")
def test_emu_equals_ref():
    """The CUDA kernels (run by the emulator) drop ref's pairs: f32 within SPEC 8."""
    q, k, v, _ = inputs((1, 8, 8, 2, 2, 4), seed=16)
    got, _ = dilattn.forward(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                             backend="emu", dropout_p=0.5, seed=1)
    want, _ = dilattn.forward(q, k, v, backend="ref", dropout_p=0.5, seed=1)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
