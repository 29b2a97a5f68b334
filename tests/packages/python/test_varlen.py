"""test_varlen.py - docs/spec.md section 10.2 (packed variable-length batches) on the ref backend:
against the independent numpy transcription (tests/common/spec_numpy.py varlen_attention),
forward and backward, with every kind (dense with GQA and Nq != Nk per sequence, causal
bottom-right per sequence, dilated in each head mode, block-sparse over the packed tensor),
with windows, softcap, ALiBi per sequence and dropout; the cpu backend against ref on the same
cases (f64 and f32); the identity "a packed batch equals its sequences run one by one"; empty
sequences; FlashAttention's 3-d layout; the emu backend (the CUDA kernels, one sequence at a
time, a block-sparse mask read at each sequence's rows and keys of the packed tensor) against ref
on every case, in f32 (SIMT kernels) and, at D = 64, in f16 and f32 on the tensor-core kernels
with dropout, sinks, a window, ALiBi and a block-sparse mask whose blocks sequences start and end
inside, sequences with no rows or no keys among them; and the refusals (bad offsets naming the
index, batch != 1, last offsets, dilated sequences that are not square, AUTO resolving to
cpu).

Tolerance: both sides compute in f64 and differ only in summation order -> 1e-10 (as
test_variants.py)."""
import numpy as np
import pytest

import dilattn
from dilattn._plan import Options, Plan
from helpers import cpu_against_ref, dropout_ds_widening, spec_numpy

F64_TOL = 1e-10


def _inputs(total_q, total_k, H, Hkv, D, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (1, total_q, H, D))
    k = rng.uniform(-1, 1, (1, total_k, Hkv, D))
    v = rng.uniform(-1, 1, (1, total_k, Hkv, D))
    do = rng.uniform(-1, 1, (1, total_q, H, D))
    return q, k, v, do


def _mask_rows(mask):
    dense = mask.to_dense()
    rows = [[list(np.flatnonzero(dense[h, ib])) for ib in range(dense.shape[1])]
            for h in range(dense.shape[0])]
    return (mask.block_q, mask.block_k, rows)


# name: (cu_seqlens_q, cu_seqlens_k, H, Hkv, D, kind options). Lengths are mixed, a sequence
# may be empty (q and k, or k alone), and Nq != Nk per sequence where the kind allows it.
CASES = {
    "dense_gqa": ([0, 3, 3, 8, 12], [0, 5, 5, 9, 16], 4, 2, 3, dict()),
    "dense_causal_bottom_right": ([0, 4, 6, 11], [0, 2, 7, 11], 2, 1, 3, dict(causal=True)),
    "dense_empty_keys": ([0, 3, 5, 9], [0, 4, 4, 7], 2, 2, 2, dict(causal=True)),
    "dilated_mod_causal": ([0, 7, 7, 20], [0, 7, 7, 20], 3, 1, 4,
                           dict(segments=[4, 8], dilations=[1, 2], heads_mode="mod",
                                causal=True)),
    "dilated_block": ([0, 12, 17], [0, 12, 17], 4, 2, 3,
                      dict(segments=[6, 12], dilations=[2, 3], heads_mode="block")),
    "dilated_groups": ([0, 9, 25], [0, 9, 25], 5, 5, 2,
                       dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups")),
    "block_sparse": ([0, 5, 13], [0, 7, 15], 2, 1, 3, dict(mask="local:1+sink:1")),
    "block_sparse_causal": ([0, 6, 7, 14], [0, 6, 7, 14], 2, 2, 3,
                            dict(mask="strided:2+local:0", causal=True)),
}
VARIANTS = {
    "plain": dict(),
    "window": dict(window_size=(2, 1)),
    "all_three_per_sequence_slopes": dict(window_size=(3, 0), softcap=0.7, alibi_slopes="nh"),
    "alibi_per_head": dict(alibi_slopes="h"),
}


def _options(case, variant, seed):
    cu_q, cu_k, H, _, _, kind = case
    n = len(cu_q) - 1
    lib = dict(kind, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, scale=1.7)
    spec = dict(kind, scale=1.7)
    if "mask" in kind:
        lib["mask"] = dilattn.mask.pattern(kind["mask"], cu_q[-1], 4, seqlen_k=cu_k[-1],
                                           block_k=3)
        spec["mask"] = _mask_rows(lib["mask"])
    if "window_size" in variant:
        lib["window_size"] = spec["window"] = variant["window_size"]
    if "softcap" in variant:
        lib["softcap"] = spec["softcap"] = variant["softcap"]
    if "alibi_slopes" in variant:
        rng = np.random.default_rng(seed)
        slopes = rng.uniform(0.05, 0.8, (n, H) if variant["alibi_slopes"] == "nh" else H)
        lib["alibi_slopes"] = spec["alibi_slopes"] = slopes
    return lib, spec


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_ref_matches_numpy_forward_and_backward(case, variant):
    cu_q, cu_k, H, Hkv, D, _ = CASES[case]
    seed = len(case) * 37 + len(variant)
    q, k, v, do = _inputs(cu_q[-1], cu_k[-1], H, Hkv, D, seed)
    lib, spec = _options(CASES[case], VARIANTS[variant], seed)
    o, lse = dilattn.forward(q, k, v, backend="ref", **lib)
    o_want, lse_want, *grads_want = spec_numpy.varlen_attention(q, k, v, cu_q, cu_k, d_o=do,
                                                                 **spec)
    assert spec_numpy.within(o, o_want, F64_TOL, F64_TOL), np.max(np.abs(o - o_want))
    assert spec_numpy.within(lse, lse_want, F64_TOL, F64_TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", **lib)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads_want):
        assert spec_numpy.within(got, want, F64_TOL, F64_TOL), \
            f"{name}: max diff {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_matches_ref_forward_and_backward(case, variant, dtype):
    if not dilattn.backend_available("cpu"):
        pytest.skip("backend cpu is not available here")
    cu_q, cu_k, H, Hkv, D, _ = CASES[case]
    seed = len(case) * 37 + len(variant)
    q, k, v, do = _inputs(cu_q[-1], cu_k[-1], H, Hkv, D, seed)
    lib, _ = _options(CASES[case], VARIANTS[variant], seed)
    cpu_against_ref(q, k, v, do, lib, dtype)


def test_dropout_draws_per_sequence():
    # SPEC 10.2 and 11.1: the draw's batch word is the sequence and i, j its positions.
    cu_q, cu_k = [0, 5, 11], [0, 6, 11]
    q, k, v, do = _inputs(11, 11, 2, 1, 3, 3)
    options = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_p=0.3, seed=77, offset=5)
    o, lse = dilattn.forward(q, k, v, backend="ref", **options)
    o_want, lse_want, *grads_want = spec_numpy.varlen_attention(q, k, v, cu_q, cu_k, d_o=do,
                                                                 dropout=(0.3, 77, 5))
    assert spec_numpy.within(o, o_want, F64_TOL, F64_TOL)
    assert spec_numpy.within(lse, lse_want, F64_TOL, F64_TOL)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", **options)
    for got, want in zip(grads, grads_want):
        assert spec_numpy.within(got, want, F64_TOL, F64_TOL)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_cpu_dropout_tiles_across_sequences(dtype):
    # A packed block-sparse batch runs whole, not a sequence at a time, so a tile of query rows
    # holds rows of several sequences, each drawing in its own frame (SPEC 10.2, 11.1). The cpu
    # backend's tiles share call vectors only between rows of one frame; sequences of 37 and
    # 63 rows put a boundary inside a register block of rows and inside a 16-row mask block.
    if not dilattn.backend_available("cpu"):
        pytest.skip("backend cpu is not available here")
    cu = [0, 37, 100, 150]
    q, k, v, do = _inputs(150, 150, 2, 1, 32, 13)
    mask = dilattn.mask.pattern("local:1+sink:1", 150, 16, seqlen_k=150, block_k=16)
    lib = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, mask=mask, dropout_p=0.3, seed=5, offset=2)
    cpu_against_ref(q, k, v, do, lib, dtype)


@pytest.mark.parametrize("kind", [dict(causal=True),
                                  dict(segments=[3, 6], dilations=[1, 2], heads_mode="block"),
                                  dict(window_size=(2, 0), softcap=0.5)])
def test_packed_equals_sequences_one_by_one(kind):
    # The identity of SPEC 10.2, through dilattn itself: each sequence as its own plan.
    cu = [0, 4, 4, 13, 20]
    q, k, v, do = _inputs(20, 20, 2, 1, 3, 11)
    o, lse = dilattn.forward(q, k, v, backend="ref", cu_seqlens_q=cu, cu_seqlens_k=cu, **kind)
    grads = dilattn.backward(q, k, v, o, lse, do, backend="ref", cu_seqlens_q=cu,
                             cu_seqlens_k=cu, **kind)
    for b in range(len(cu) - 1):
        s = slice(cu[b], cu[b + 1])
        if cu[b] == cu[b + 1]:
            continue
        o_b, lse_b = dilattn.forward(q[:, s], k[:, s], v[:, s], backend="ref", **kind)
        assert np.array_equal(o[:, s], o_b) and np.array_equal(lse[:, :, s], lse_b)
        g_b = dilattn.backward(q[:, s], k[:, s], v[:, s], o_b, lse_b, do[:, s], backend="ref",
                               **kind)
        for got, want in zip(grads, g_b):
            assert np.array_equal(got[:, s], want)


def test_packing_changes_the_result():
    # Without the offsets every row would see every key; the comparisons above would prove
    # little if packing did nothing here.
    q, k, v, _ = _inputs(8, 8, 1, 1, 2, 4)
    plain, _ = dilattn.forward(q, k, v, backend="ref")
    packed, _ = dilattn.forward(q, k, v, backend="ref", cu_seqlens_q=[0, 3, 8],
                                cu_seqlens_k=[0, 3, 8])
    assert np.all(np.max(np.abs(packed - plain), axis=-1) > 1e-3)


def test_empty_sequences_and_rows_without_keys():
    # Sequence 1 has 3 rows and no key; sequence 2 has no row; causal with Nq = 4 > Nk = 2
    # empties sequence 3's first two rows.
    cu_q, cu_k = [0, 2, 5, 5, 9], [0, 2, 2, 6, 8]
    q, k, v, do = _inputs(9, 8, 1, 1, 2, 8)
    o, lse = dilattn.forward(q, k, v, backend="ref", causal=True, cu_seqlens_q=cu_q,
                             cu_seqlens_k=cu_k)
    for empty in (2, 3, 4, 5, 6):
        assert np.all(o[0, empty] == 0) and np.isneginf(lse[0, 0, empty]), empty
    # Row 7 (position 2 of sequence 3, d = -2) sees key 6 alone: O = v_6, LSE = S.
    assert np.allclose(o[0, 7, 0], v[0, 6, 0], rtol=0, atol=1e-15)
    assert abs(lse[0, 0, 7] - q[0, 7, 0] @ k[0, 6, 0] / np.sqrt(2)) < 1e-15
    dq, dk, dv = dilattn.backward(q, k, v, o, lse, do, backend="ref", causal=True,
                                  cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert np.all(dq[0, 2:7] == 0)
    assert np.all(dk[0, 2:6] == 0) and np.all(dv[0, 2:6] == 0)  # keys of sequence 2: no row


def test_flash_attention_layout():
    # q [total_q, H, D], lse [H, total_q], max_seqlen bounds, as flash_attn_varlen_func.
    cu_q, cu_k = [0, 3, 7], [0, 5, 9]
    q, k, v, do = _inputs(7, 9, 2, 1, 3, 2)
    o4, lse4 = dilattn.forward(q, k, v, backend="ref", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    o, lse = dilattn.forward(q[0], k[0], v[0], backend="ref", cu_seqlens_q=np.array(cu_q),
                             cu_seqlens_k=np.array(cu_k), max_seqlen_q=4, max_seqlen_k=5)
    assert o.shape == (7, 2, 3) and lse.shape == (2, 7)
    assert np.array_equal(o, o4[0]) and np.array_equal(lse, lse4[0])
    grads = dilattn.backward(q[0], k[0], v[0], o, lse, do[0], backend="ref",
                             cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    grads4 = dilattn.backward(q, k, v, o4, lse4, do, backend="ref", cu_seqlens_q=cu_q,
                              cu_seqlens_k=cu_k)
    for got, want in zip(grads, grads4):
        assert np.array_equal(got, want[0])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_emu_matches_ref_forward_and_backward(case, variant):
    if not dilattn.backend_available("emu"):
        pytest.skip("backend emu is not built here")
    cu_q, cu_k, H, Hkv, D, _ = CASES[case]
    seed = len(case) * 37 + len(variant)
    q, k, v, do = _inputs(cu_q[-1], cu_k[-1], H, Hkv, D, seed)
    lib, _ = _options(CASES[case], VARIANTS[variant], seed)
    cpu_against_ref(q, k, v, do, lib, "f32", backend="emu")


# D = 64: the tensor-core kernels (mma for f16, 3xTF32 for f32) on sequences of mixed lengths,
# one with rows but no keys (1) and one with keys but no rows (3); each option set picks one of
# their instances (plain, dropout, variant). The block-sparse mask's 16-row blocks are the
# packed tensor's: sequences start and end inside them.
TC_CU_Q, TC_CU_K = [0, 37, 50, 100, 100], [0, 45, 45, 100, 120]
TC_OPTIONS = {
    "causal": dict(causal=True),
    "causal_dropout": dict(causal=True, dropout_p=0.2, seed=31, offset=9),
    "window_alibi_per_sequence": dict(window_size=(20, 3), alibi_slopes="nh"),
    "block_sparse_causal": dict(causal=True, mask="local:1+sink:1"),
    "block_sparse_dropout": dict(mask="strided:2+local:0", dropout_p=0.2, seed=3, offset=1),
}


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("name", sorted(TC_OPTIONS))
def test_emu_tensor_core_kernels_run_packed_sequences(name, dtype):
    if not dilattn.backend_available("emu"):
        pytest.skip("backend emu is not built here")
    H, Hkv, D = 2, 1, 64
    q, k, v, do = (x.astype(np.float16 if dtype == "f16" else np.float32)
                   for x in _inputs(TC_CU_Q[-1], TC_CU_K[-1], H, Hkv, D, 5))
    lib = dict(TC_OPTIONS[name], cu_seqlens_q=TC_CU_Q, cu_seqlens_k=TC_CU_K)
    if lib.get("alibi_slopes") == "nh":
        lib["alibi_slopes"] = np.random.default_rng(6).uniform(0.05, 0.3, (4, H))
    if "mask" in lib:
        lib["mask"] = dilattn.mask.pattern(lib["mask"], TC_CU_Q[-1], 16, seqlen_k=TC_CU_K[-1],
                                           block_k=16)
    wide = [x.astype(np.float64) for x in (q, k, v, do)]
    o_ref, lse_ref = dilattn.forward(*wide[:3], backend="ref", **lib)
    o, lse = dilattn.forward(q, k, v, backend="emu", **lib)
    # SPEC 8 and 12: f16 operands with P and dS rounded to f16; dQ and dK with dropout times
    # 1.25 / (1 - p); f32 on 3xTF32 within f32's bound on emu.
    atol, rtol = (2e-3, 2e-3) if dtype == "f16" else (1e-5, 1e-4)
    assert spec_numpy.within(o.astype(np.float64), o_ref, atol, rtol), np.max(np.abs(o - o_ref))
    assert spec_numpy.within(lse.astype(np.float64), lse_ref, 1e-4, 0)
    assert np.all(o[0, 37:50] == 0) and np.all(np.isneginf(lse[0, :, 37:50]))  # no keys
    wants = dilattn.backward(*wide[:3], o_ref, lse_ref, wide[3], backend="ref", **lib)
    grads = dilattn.backward(q, k, v, o_ref.astype(q.dtype), lse_ref.astype(np.float32), do,
                             backend="emu", **lib)
    widen = dropout_ds_widening(lib.get("dropout_p", 0.0))
    for label, got, want in zip(("dq", "dk", "dv"), grads, wants):
        a = atol * (widen if label != "dv" else 1.0)
        assert spec_numpy.within(got.astype(np.float64), want, a, rtol), \
            f"{label}: max diff {np.max(np.abs(got - want))}"
    assert np.all(grads[1][0, 100:] == 0) and np.all(grads[2][0, 100:] == 0)  # no rows
    assert np.all(grads[0][0, 37:50] == 0)


def test_emu_sinks_per_packed_batch():
    # The sinks' gradient sums every sequence's rows (SPEC 10.3), one sequence at a time.
    if not dilattn.backend_available("emu"):
        pytest.skip("backend emu is not built here")
    cu_q, cu_k = [0, 5, 5, 12], [0, 6, 9, 12]
    q, k, v, do = (x.astype(np.float32) for x in _inputs(12, 12, 2, 1, 4, 21))
    sinks = np.array([0.3, -1.2])
    lib = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, sinks=sinks)
    cpu_against_ref(q, k, v, do, lib, "f32", extra_grads=1, backend="emu")


def test_auto_resolves_to_cpu():
    plan = Plan(Options(cu_seqlens_q=[0, 1, 4], cu_seqlens_k=[0, 2, 4]), (1, 4, 4, 2, 1, 2),
                "f32")
    try:
        if dilattn.backend_available("cpu"):
            assert plan.backend in ("cpu", "cuda")
        else:
            assert plan.backend == "ref"
    finally:
        plan.close()


@pytest.mark.parametrize("sizes,options,status,message", [
    ((1, 6, 6), dict(cu_seqlens_q=[1, 2, 6], cu_seqlens_k=[0, 2, 6]),
     "DILATTN_ERROR_INVALID_VALUE", "cu_seqlens_q[0] = 1: the first offset must be 0"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 4, 3, 6], cu_seqlens_k=[0, 2, 4, 6]),
     "DILATTN_ERROR_INVALID_VALUE", "cu_seqlens_q[2] = 3 is below cu_seqlens_q[1] = 4"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 5, 4]),
     "DILATTN_ERROR_INVALID_VALUE", "cu_seqlens_k[2] = 4 is below cu_seqlens_k[1] = 5"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 7], cu_seqlens_k=[0, 2, 6]),
     "DILATTN_ERROR_SHAPE_MISMATCH",
     "cu_seqlens_q[2] = 7: the last offset must equal seqlen_q = 6"),
    ((1, 6, 8), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 2, 6]),
     "DILATTN_ERROR_SHAPE_MISMATCH",
     "cu_seqlens_k[2] = 6: the last offset must equal seqlen_k = 8"),
    ((2, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 2, 6]),
     "DILATTN_ERROR_SHAPE_MISMATCH", "batch = 2: a packed batch (dilattn_desc_set_varlen) "
     "needs batch = 1"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 3, 6], segments=[2],
                     dilations=[1]),
     "DILATTN_ERROR_SEQLEN_MISMATCH", "packed sequence 0: dilated attention needs seqlen_q == "
     "seqlen_k per sequence, got 2 and 3"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 2, 6], alibi_slopes=[0.1] * 6),
     "DILATTN_ERROR_INVALID_VALUE", "count = 6, need heads_q = 2 (one per head) or "
     "num_seqs * heads_q = 4"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6]),
     "DILATTN_ERROR_INVALID_VALUE", "a packed batch needs both"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 6]),
     "DILATTN_ERROR_INVALID_VALUE", "cu_seqlens_q has 3 entries, cu_seqlens_k 2"),
    ((1, 6, 6), dict(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 2, 6], max_seqlen_q=3),
     "DILATTN_ERROR_INVALID_VALUE", "max_seqlen_q=3: the longest packed sequence has 4 rows"),
])
def test_bad_values_refused(sizes, options, status, message):
    B, Nq, Nk = sizes
    rng = np.random.default_rng(0)
    q, k, v = (rng.uniform(-1, 1, (B, n, 2, 2)) for n in (Nq, Nk, Nk))
    with pytest.raises(dilattn.Error) as e:
        dilattn.forward(q, k, v, backend="ref", **options)
    assert e.value.status_name == status
    assert message in str(e.value)
