"""test_torch_dropout.py - attention dropout (docs/spec.md section 11, backends "ref" and "cpu")
through dilattn.torch: attention(..., dropout_p=, seed=, offset=) equals the numpy API's
dilattn.forward / dilattn.backward on the same backend with the same seed and offset bit for
bit (so the backward regenerates the forward's mask), and cpu drops the pairs ref drops;
gradcheck in f64 with a fixed seed (the mask is a pure
function of seed and offset, so the function gradcheck differentiates is smooth); p = 0 is no
dropout, bitwise, and draws nothing from torch's generator; seed=None draws the seed from
torch's default generator, so torch.manual_seed reproduces a run; the fraction of dropped
probabilities within binomial bounds, the kept ones scaled by 1 / (1 - p); the modules drop in
training mode only (eval mode equals p = 0 bitwise), on the cpu backend for CPU tensors ("auto");
emu (the CUDA kernels), where built, gives ref's result within SPEC 8 (CUDA tensors:
test_torch_cuda.py).

Kinds: dense GQA with Nq != Nk, causal with keyless rows, dilated with keys that several
branches hold (one decision per pair, SPEC 11), block-sparse and a packed batch. Both sides of
the bitwise comparisons run the same library call on the same f64 inputs."""
import math

import numpy as np
import pytest

from helpers import import_torch

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402

SEED, OFFSET = 0x9E3779B97F4A7C15, 1234

# (sizes (B, Nq, Nk, H, Hkv, D), options)
CASES = {
    "dense_gqa_nq_lt_nk": ((2, 5, 7, 4, 2, 3), dict(scale=1.3)),
    "dense_causal_keyless_rows": ((1, 7, 4, 2, 1, 3), dict(causal=True)),
    "dilated_keys_held_thrice": ((1, 16, 16, 2, 2, 4),
                                 dict(segments=[4, 4, 8], dilations=[1, 2, 4])),
    "dilated_groups_causal": ((1, 16, 16, 3, 3, 2),
                              dict(segments=[4, 8, 16], dilations=[1, 2, 4],
                                   heads_mode="groups", causal=True)),
    "block_sparse": ((2, 12, 12, 3, 3, 4),
                     dict(mask=dilattn.mask.pattern("local:1+sink:1", 12, 3), causal=True)),
}
PACKED = dict(cu_seqlens_q=[0, 4, 4, 9], cu_seqlens_k=[0, 5, 7, 7], causal=True)


def _arrays(sizes, seed):
    B, Nq, Nk, H, Hkv, D = sizes
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, Nq, H, D)), rng.uniform(-1, 1, (B, Nk, Hkv, D)),
            rng.uniform(-1, 1, (B, Nk, Hkv, D)), rng.uniform(-1, 1, (B, Nq, H, D)))


def _leaves(*arrays):
    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


BACKENDS = ["ref", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_equals_the_numpy_api(case, p, backend):
    sizes, options = CASES[case]
    q, k, v, _ = _arrays(sizes, len(case))
    o, lse = dt.attention(*_leaves(q, k, v), backend=backend, return_lse=True, dropout_p=p,
                          seed=SEED, offset=OFFSET, **options)
    o_np, lse_np = dilattn.forward(q, k, v, backend=backend, dropout_p=p, seed=SEED,
                                   offset=OFFSET, **options)
    assert np.array_equal(o.detach().numpy(), o_np)
    assert np.array_equal(lse.numpy(), lse_np)
    # Dropout took place: without it the output differs.
    plain = dt.attention(*_leaves(q, k, v), backend=backend, **options)
    assert not torch.equal(plain, o)
    if backend == "cpu":  # f64 on the cpu backend: within SPEC 12 of ref, the same decisions
        o_ref, lse_ref = dilattn.forward(q, k, v, backend="ref", dropout_p=p, seed=SEED,
                                         offset=OFFSET, **options)
        assert np.allclose(o_np, o_ref, rtol=1e-10, atol=1e-10)
        assert np.allclose(lse_np, lse_ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_equal_the_numpy_api(case, p, backend):
    sizes, options = CASES[case]
    q, k, v, do = _arrays(sizes, 11)
    tq, tk, tv = _leaves(q, k, v)
    o = dt.attention(tq, tk, tv, backend=backend, dropout_p=p, seed=SEED, offset=OFFSET,
                     **options)
    o.backward(torch.tensor(do))
    dropout = dict(dropout_p=p, seed=SEED, offset=OFFSET)
    o_np, lse_np = dilattn.forward(q, k, v, backend=backend, **dropout, **options)
    wants = dilattn.backward(q, k, v, o_np, lse_np, do, backend=backend, **dropout, **options)
    for name, got, want in zip(("dq", "dk", "dv"), (tq, tk, tv), wants):
        assert got.grad.shape == want.shape, name
        assert np.array_equal(got.grad.numpy(), want), name
    # The mask matters to the gradient: another offset's backward gives other gradients.
    other = dilattn.backward(q, k, v, o_np, lse_np, do, backend=backend, dropout_p=p,
                             seed=SEED, offset=OFFSET + 1, **options)
    assert not np.array_equal(tv.grad.numpy(), other[2])
    if backend == "cpu":
        refs = dilattn.backward(q, k, v, o_np, lse_np, do, backend="ref", **dropout, **options)
        for name, got, want in zip(("dq", "dk", "dv"), (tq, tk, tv), refs):
            assert np.allclose(got.grad.numpy(), want, rtol=1e-10, atol=1e-10), name


def test_packed_batch_with_dropout_equals_the_numpy_api():
    q, k, v, do = _arrays((1, 9, 7, 2, 1, 3), 5)
    options = dict(PACKED, backend="ref", dropout_p=0.3, seed=77, offset=5)
    tq, tk, tv = _leaves(q[0], k[0], v[0])
    o, lse = dt.attention(tq, tk, tv, return_lse=True, **options)
    o.backward(torch.tensor(do[0]))
    o_np, lse_np = dilattn.forward(q[0], k[0], v[0], **options)
    assert np.array_equal(o.detach().numpy(), o_np) and np.array_equal(lse.numpy(), lse_np)
    wants = dilattn.backward(q[0], k[0], v[0], o_np, lse_np, do[0], **options)
    for got, want in zip((tq, tk, tv), wants):
        assert np.array_equal(got.grad.numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck_f64_with_a_fixed_seed(case, backend):
    sizes, options = CASES[case]
    q, k, v = _leaves(*_arrays(sizes, 7)[:3])
    assert torch.autograd.gradcheck(
        lambda q, k, v: dt.attention(q, k, v, backend=backend, dropout_p=0.3, seed=5, offset=9,
                                     **options),
        (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_p_zero_is_no_dropout_bitwise_and_draws_nothing():
    sizes, options = CASES["dilated_keys_held_thrice"]
    q, k, v, do = _arrays(sizes, 13)
    plain_leaves, zero_leaves = _leaves(q, k, v), _leaves(q, k, v)
    plain, plain_lse = dt.attention(*plain_leaves, backend="ref", return_lse=True, **options)
    state = torch.get_rng_state()
    zero, zero_lse = dt.attention(*zero_leaves, backend="ref", return_lse=True, dropout_p=0.0,
                                  **options)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(plain, zero) and torch.equal(plain_lse, zero_lse)
    plain.backward(torch.tensor(do))
    zero.backward(torch.tensor(do))
    for a, b in zip(plain_leaves, zero_leaves):
        assert torch.equal(a.grad, b.grad)


def test_seed_none_draws_from_torchs_generator():
    sizes, options = CASES["dense_gqa_nq_lt_nk"]
    q, k, v, do = _arrays(sizes, 17)

    def run(torch_seed):
        torch.manual_seed(torch_seed)
        leaves = _leaves(q, k, v)
        o = dt.attention(*leaves, backend="ref", dropout_p=0.5, **options)
        o.backward(torch.tensor(do))
        return o.detach(), [t.grad for t in leaves]

    o1, g1 = run(1)
    o1_again, g1_again = run(1)
    o2, _ = run(2)
    assert torch.equal(o1, o1_again)
    assert all(torch.equal(a, b) for a, b in zip(g1, g1_again))
    assert not torch.equal(o1, o2)
    # The seed is torch.randint's draw and the offset 0, forward and backward alike.
    torch.manual_seed(1)
    drawn = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())
    o_np, lse_np = dilattn.forward(q, k, v, backend="ref", dropout_p=0.5, seed=drawn, **options)
    wants = dilattn.backward(q, k, v, o_np, lse_np, do, backend="ref", dropout_p=0.5,
                             seed=drawn, **options)
    assert np.array_equal(o1.numpy(), o_np)
    for got, want in zip(g1, wants):
        assert np.array_equal(got.numpy(), want)
    # Each call draws a new seed: two calls in a row take different masks.
    torch.manual_seed(1)
    first = dt.attention(*_leaves(q, k, v), backend="ref", dropout_p=0.5, **options)
    second = dt.attention(*_leaves(q, k, v), backend="ref", dropout_p=0.5, **options)
    assert not torch.equal(first, second)


def test_seed_and_offset_select_the_mask():
    sizes, options = CASES["dense_gqa_nq_lt_nk"]
    q, k, v = _leaves(*_arrays(sizes, 19)[:3])

    def run(seed, offset):
        return dt.attention(q, k, v, backend="ref", dropout_p=0.5, seed=seed, offset=offset,
                            **options)

    assert torch.equal(run(5, 6), run(5, 6))
    assert not torch.equal(run(5, 6), run(5, 7))
    assert not torch.equal(run(5, 6), run(6, 6))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_fraction_dropped_within_binomial_bounds(p, backend):
    # With v_j the unit vector e_j (D = Nk), o[i, j] = P_ij * M_ij: zero exactly where the pair
    # is dropped (every P_ij > 0 in dense attention), P_ij / (1 - p) where it is kept.
    B, N, H = 1, 64, 2
    rng = np.random.default_rng(23)
    q = torch.tensor(rng.uniform(-1, 1, (B, N, H, N)))
    k = torch.tensor(rng.uniform(-1, 1, (B, N, H, N)))
    v = torch.eye(N, dtype=torch.float64)[None, :, None, :].expand(B, N, H, N).contiguous()
    plain = dt.attention(q, k, v, backend=backend)
    assert torch.all(plain > 0)
    o = dt.attention(q, k, v, backend=backend, dropout_p=p, seed=SEED + int(p * 10), offset=3)
    dropped = o == 0
    n = dropped.numel()
    sd = math.sqrt(n * p * (1 - p))
    assert abs(int(dropped.sum()) - n * p) <= 6 * sd, (int(dropped.sum()), n * p, sd)
    kept = ~dropped
    scaled = plain[kept] * (1.0 / (1.0 - p))
    assert torch.allclose(o[kept], scaled, rtol=1e-14, atol=0)
    if backend == "cpu":  # the pairs ref drops, exactly
        o_ref = dt.attention(q, k, v, backend="ref", dropout_p=p, seed=SEED + int(p * 10),
                             offset=3)
        assert torch.equal(o_ref == 0, dropped)


# ---------------------------------------------------------------- modules
def _module_pairs(p):
    """(name, module with dropout p, the same module with dropout 0, inputs): the modules with
    a dropout argument, each pair with the same weights."""
    q, k, v, _ = (torch.tensor(a) for a in _arrays((1, 16, 16, 4, 4, 2), 29))
    x = torch.tensor(np.random.default_rng(31).uniform(-1, 1, (1, 16, 8)))
    sparse = dict(pattern_type="local_window", block_size=4, local_window_size=8)

    def mha(cls, *args, **kwargs):
        with_p = cls(*args, dropout=p, dtype=torch.float64, **kwargs)
        without = cls(*args, dropout=0.0, dtype=torch.float64, **kwargs)
        without.load_state_dict(with_p.state_dict())
        return with_p, without

    return [
        ("DilatedAttention", dt.DilatedAttention([4, 16], [1, 2], attention_dropout=p),
         dt.DilatedAttention([4, 16], [1, 2]), (q, k, v)),
        ("ImprovedDilatedAttention", dt.ImprovedDilatedAttention([4, 16], [1, 2], dropout=p),
         dt.ImprovedDilatedAttention([4, 16], [1, 2]), (q, k, v)),
        ("RingDilatedAttention", dt.RingDilatedAttention([4, 16], [1, 2], dropout=p),
         dt.RingDilatedAttention([4, 16], [1, 2]), (q, k, v)),
        ("BlockSparseRingDilatedAttention",
         dt.BlockSparseRingDilatedAttention([16], [1], dropout=p, **sparse),
         dt.BlockSparseRingDilatedAttention([16], [1], **sparse), (q, k, v)),
        ("MultiheadDilatedAttention",
         *mha(dt.MultiheadDilatedAttention, 8, 2, [1, 2], [4, 16]), (x, x, x)),
        ("ImprovedMultiheadDilatedAttention",
         *mha(dt.ImprovedMultiheadDilatedAttention, 8, 2, [1, 2], [4, 16]), (x,)),
        ("RingMultiheadDilatedAttention",
         *mha(dt.RingMultiheadDilatedAttention, 8, 2, [1, 2], [4, 16]), (x,)),
        ("BlockSparseRingMultiheadDilatedAttention",
         *mha(dt.BlockSparseRingMultiheadDilatedAttention, 8, 2, [16], [1], **sparse), (x,)),
    ]


def _output(result):
    return result[0] if isinstance(result, tuple) else result


@pytest.mark.parametrize("index", range(8))
def test_modules_drop_in_training_mode_only(index):
    name, module, plain, args = _module_pairs(0.5)[index]
    assert module.training  # torch's modules start in training mode
    plain_out = _output(plain(*args))
    torch.manual_seed(3)
    train_out = _output(module(*args))
    assert not torch.equal(train_out, plain_out), name
    torch.manual_seed(3)
    assert torch.equal(_output(module(*args)), train_out), name  # torch.manual_seed reproduces
    module.eval()
    state = torch.get_rng_state()
    assert torch.equal(_output(module(*args)), plain_out), name
    assert torch.equal(state, torch.get_rng_state()), name  # eval mode draws nothing
    module.train()
    assert not torch.equal(_output(module(*args)), plain_out), name


def test_module_training_equals_attention_with_the_drawn_seed():
    q, k, v, do = _arrays((1, 16, 16, 4, 4, 2), 37)
    module = dt.DilatedAttention([4, 16], [1, 2], attention_dropout=0.25, backend="ref")
    tq, tk, tv = _leaves(q, k, v)
    torch.manual_seed(8)
    out = module(tq, tk, tv, is_causal=True)
    out.backward(torch.tensor(do))
    torch.manual_seed(8)
    want_leaves = _leaves(q, k, v)
    want = dt.attention(*want_leaves, segments=[4, 16], dilations=[1, 2], heads_mode="groups",
                        causal=True, backend="ref", dropout_p=0.25)
    want.backward(torch.tensor(do))
    assert torch.equal(out, want)
    for got, expected in zip((tq, tk, tv), want_leaves):
        assert torch.equal(got.grad, expected.grad)


def test_module_on_cpu_tensors_runs_dropout_on_the_cpu_backend():
    # backend "auto" with CPU tensors: the cpu backend, bit for bit (ref's f64 sums differ in
    # the last bits, so the equality names the backend).
    q, k, v, do = _arrays((1, 16, 16, 4, 4, 2), 37)
    module = dt.DilatedAttention([4, 16], [1, 2], attention_dropout=0.25)
    tq, tk, tv = _leaves(q, k, v)
    torch.manual_seed(8)
    out = module(tq, tk, tv, is_causal=True)
    out.backward(torch.tensor(do))
    options = dict(segments=[4, 16], dilations=[1, 2], heads_mode="groups", causal=True,
                   dropout_p=0.25)
    for backend, equal in (("cpu", True), ("ref", False)):
        torch.manual_seed(8)
        want_leaves = _leaves(q, k, v)
        want = dt.attention(*want_leaves, backend=backend, **options)
        want.backward(torch.tensor(do))
        assert torch.equal(out, want) == equal, backend
        assert torch.allclose(out, want, rtol=1e-10, atol=1e-10), backend
        for got, expected in zip((tq, tk, tv), want_leaves):
            assert torch.allclose(got.grad, expected.grad, rtol=1e-10, atol=1e-10), backend
            if equal:
                assert torch.equal(got.grad, expected.grad), backend


def test_multihead_module_trains_with_dropout():
    torch.manual_seed(41)
    mha = dt.MultiheadDilatedAttention(8, 2, [1, 2], [4, 16], dropout=0.1, dtype=torch.float64)
    x = torch.randn(2, 16, 8, dtype=torch.float64)
    out, _ = mha(x, x, x, is_causal=True)
    out.square().mean().backward()
    for name, param in mha.named_parameters():
        assert param.grad is not None and torch.all(torch.isfinite(param.grad)), name
    assert float(mha.q_proj.weight.grad.abs().max()) > 0


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("nan"), "0.1", True])
def test_module_dropout_outside_0_1_is_refused_by_name(value):
    with pytest.raises(dilattn.InvalidArgumentError) as e:
        dt.DilatedAttention([4], [1], attention_dropout=value)
    assert e.value.status_name == "DILATTN_ERROR_INVALID_VALUE"
    assert f"attention_dropout={value!r}: expected a dropout probability in [0, 1)" in str(e.value)
    for make in (lambda: dt.MultiheadDilatedAttention(8, 2, [1], [4], dropout=value),
                 lambda: dt.ImprovedDilatedAttention([4], [1], dropout=value),
                 lambda: dt.RingMultiheadDilatedAttention(8, 2, [1], [4], dropout=value),
                 lambda: dt.BlockSparseRingDilatedAttention([4], [1], dropout=value),
                 lambda: dt.BlockSparseRingMultiheadDilatedAttention(8, 2, [4], [1],
                                                                     dropout=value)):
        with pytest.raises(dilattn.InvalidArgumentError,
                           match=r"dropout=.*: expected a dropout probability in \[0, 1\)"):
            make()


def test_attention_refusals():
    q, k, v = _leaves(*_arrays((1, 8, 8, 2, 2, 4), 43)[:3])
    with pytest.raises(dilattn.InvalidArgumentError, match="'p' = 1"):
        dt.attention(q, k, v, backend="ref", dropout_p=1.0, seed=1)
    with pytest.raises(dilattn.InvalidArgumentError, match="dropout_offset = 4294967296"):
        dt.attention(q, k, v, backend="ref", dropout_p=0.5, seed=1, offset=2**32)
    with pytest.raises(dilattn.InvalidArgumentError, match="seed=-1"):
        dt.attention(q, k, v, backend="ref", dropout_p=0.5, seed=-1)
    with pytest.raises(dilattn.InvalidArgumentError, match="offset=-2"):
        dt.attention(q, k, v, backend="ref", dropout_p=0.5, offset=-2)
    with pytest.raises(dilattn.InvalidArgumentError, match="dropout_p='0.5'"):
        dt.attention(q, k, v, backend="ref", dropout_p="0.5")
    with pytest.raises(dilattn.InvalidArgumentError, match="offset=-2"):
        dt.attention(q.float(), k.float(), v.float(), backend="cpu", dropout_p=0.5, offset=-2)


@pytest.mark.skipif(not dilattn.backend_available("emu"), reason="emu is not built")
def test_emu_equals_ref():
    """The CUDA kernels (run by the emulator) drop ref's pairs: f32 within SPEC 8."""
    q, k, v, _ = _arrays((1, 8, 8, 2, 2, 4), 16)
    q, k, v = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    got = dt.attention(q.float(), k.float(), v.float(), backend="emu", dropout_p=0.5, seed=1)
    want = dt.attention(q, k, v, backend="ref", dropout_p=0.5, seed=1)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-4)


def test_ring_module_over_several_ranks_refuses_dropout_in_training(monkeypatch):
    # A group of several ranks takes dilattn.torch.ring_attention, which has no dropout; the
    # group's size is faked so the refusal is reached in one process.
    from dilattn import seed_modules
    monkeypatch.setattr(seed_modules, "process_group_size", lambda group=None: 2)
    q, k, v, _ = (torch.tensor(a) for a in _arrays((1, 8, 8, 2, 2, 2), 47))
    ring = dt.RingDilatedAttention([4], [1], dropout=0.1, group=object())
    with pytest.raises(dilattn.UnsupportedError,
                       match="RingDilatedAttention: dropout=0.1 in training mode over a process "
                             "group of several ranks"):
        ring(q, k, v)
