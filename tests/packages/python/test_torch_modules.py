"""test_torch_modules.py - the drop-in modules DilatedAttention and MultiheadDilatedAttention:
outputs and gradients against SPEC 3 in PyTorch (autograd through a softmax over the
multiset counts of tests/common/spec_numpy.py), the
difference from dilated-attention-pytorch stated in the README (SPEC 9), the constructor and
forward signatures of that package, and a dropout outside [0, 1) refused by name
(test_torch_dropout.py has the dropout itself)."""
import inspect
import math

import pytest

from helpers import import_torch, spec_numpy

torch = import_torch()
import dilattn  # noqa: E402
from dilattn.torch import DilatedAttention, MultiheadDilatedAttention  # noqa: E402


# ---------------------------------------------------------------- SPEC 3 in plain PyTorch
def key_counts(N, H, segments, dilations, heads_mode, causal):
    """count[h, i, j]: how many times key j is in A(i) for head h (SPEC 3, a multiset), from the
    one numpy transcription of the spec (tests/common/spec_numpy.py)."""
    counts = spec_numpy.key_counts(N, N, H, segments=list(segments), dilations=list(dilations),
                                   heads_mode=heads_mode, causal=causal)
    return torch.from_numpy(counts.astype("float64"))


def spec_attention(q, k, v, segments, dilations, heads_mode="groups", causal=False, scale=None):
    """O of SPEC 2-3: one softmax over the multiset A(i); rows with no keys are 0."""
    B, N, H, D = q.shape
    count = key_counts(N, H, segments, dilations, heads_mode, causal).to(q.dtype)
    k = k.repeat_interleave(H // k.shape[2], dim=2)
    v = v.repeat_interleave(H // v.shape[2], dim=2)
    s = (1 / math.sqrt(D) if scale is None else scale) * torch.einsum("bihd,bjhd->bhij", q, k)
    logits = s + torch.log(count)                       # log 0 = -inf: key not allowed
    top = logits.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp(logits - top)
    total = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(total > 0, total, torch.ones_like(total))
    return torch.einsum("bhij,bjhd->bihd", p, v)


def fkodom_style(q, k, v, segments, dilations, causal, normalise):
    """dilated-attention-pytorch's DilatedAttention algorithm in plain PyTorch (N divisible by
    every segment, H by the number of branches), with its x / x.sum normalisation optional."""
    B, N, H, D = q.shape
    m = len(segments)
    g = H // m
    out = torch.zeros_like(q)
    for i, (s, r) in enumerate(zip(segments, dilations)):
        offset = i % r
        pick = [t.reshape(B, N // s, s, H, D)[:, :, offset::r, i * g:(i + 1) * g]
                for t in (q, k, v)]
        qs, ks, vs = (t.reshape(-1, *t.shape[2:]) for t in pick)     # (b n) s' g d
        scores = torch.einsum("xahd,xchd->xhac", qs, ks) / math.sqrt(D)
        if causal:
            L = scores.shape[-1]
            scores = scores.masked_fill(torch.ones(L, L).triu(1).bool(), float("-inf"))
        x = torch.einsum("xhac,xchd->xahd", scores.softmax(dim=-1), vs)
        x = x.reshape(B, N // s, *x.shape[1:])
        if normalise:
            x = x / x.sum(dim=(1, 2), keepdim=True)
        view = out.reshape(B, N // s, s, H, D)
        view[:, :, offset::r, i * g:(i + 1) * g] += x
    return out / m


def _qkv(B, N, H, D, seed, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(B, N, H, D, generator=gen, dtype=torch.float64).mul(2).sub(1)
            .requires_grad_(requires_grad) for _ in range(3)]


# ---------------------------------------------------------------- DilatedAttention
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N,H,segments,dilations,scale", [
    (16, 4, [4, 8], [1, 2], None),
    (10, 5, [4, 8, 16], [1, 2, 4], 0.7),      # uneven groups, partial and clipped segments
])
def test_dilated_attention_equals_spec_forward_and_backward(causal, N, H, segments, dilations,
                                                             scale):
    q, k, v = _qkv(2, N, H, 3, seed=31, requires_grad=True)
    module = DilatedAttention(segments, dilations, softmax_scale=scale, backend="ref")
    out = module(q, k, v, is_causal=causal)
    want = spec_attention(q, k, v, segments, dilations, "groups", causal, scale)
    assert torch.allclose(out, want, atol=1e-12, rtol=1e-12)
    grad = torch.rand_like(out)
    got_grads = torch.autograd.grad(out, (q, k, v), grad)
    want_grads = torch.autograd.grad(want, (q, k, v), grad)
    for a, b in zip(got_grads, want_grads):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_groups_mode_is_m_times_dilated_attention_pytorch_without_its_normalisation(causal):
    # README and SPEC 9: the one difference is its x / x.sum(dim=(1, 2)) per branch.
    segments, dilations = [4, 8], [1, 2]
    q, k, v = _qkv(2, 16, 4, 8, seed=32)
    ours = DilatedAttention(segments, dilations, backend="ref")(q, k, v, is_causal=causal)
    theirs = fkodom_style(q, k, v, segments, dilations, causal, normalise=False)
    assert torch.allclose(ours, len(segments) * theirs, atol=1e-12, rtol=1e-12)
    normalised = fkodom_style(q, k, v, segments, dilations, causal, normalise=True)
    assert not torch.allclose(ours, len(segments) * normalised, atol=1e-3)


def test_float32_module_on_the_cpu_backend_within_spec8():
    q, k, v = (t.float() for t in _qkv(2, 16, 4, 8, seed=33))
    out = DilatedAttention([4, 16], [1, 4])(q, k, v, is_causal=True)
    want = spec_attention(q.double(), k.double(), v.double(), [4, 16], [1, 4], "groups", True)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), want, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- MultiheadDilatedAttention
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_equals_projections_around_spec_attention(layer_norm, causal):
    torch.manual_seed(34)
    E, H, N = 12, 3, 12
    mha = MultiheadDilatedAttention(E, H, dilation_rates=[1, 2], segment_lengths=[6, 12],
                                    layer_norm=layer_norm, dtype=torch.float64, backend="ref")
    x = torch.randn(2, N, E, dtype=torch.float64)
    y = torch.randn(2, N, E, dtype=torch.float64)
    out, weights = mha(x, y, y, is_causal=causal)
    assert weights is None and out.shape == (2, N, E)

    def heads(t):
        return t.reshape(2, N, H, E // H)

    a = spec_attention(heads(mha.q_proj(x)), heads(mha.k_proj(y)), heads(mha.v_proj(y)),
                       [6, 12], [1, 2], "groups", causal).reshape(2, N, E)
    if layer_norm:
        a = torch.nn.functional.layer_norm(a, (E,), mha.norm.weight, mha.norm.bias, 1e-5)
    assert torch.allclose(out, mha.out_proj(a), atol=1e-12, rtol=1e-10)


def test_signatures_are_those_of_dilated_attention_pytorch():
    def names(f):
        return [p for p in inspect.signature(f).parameters if p != "self"]
    assert names(DilatedAttention.__init__)[:5] == [
        "segment_lengths", "dilation_rates", "softmax_scale", "attention_dropout", "op"]
    assert names(DilatedAttention.forward) == ["query", "key", "value", "is_causal"]
    assert names(MultiheadDilatedAttention.__init__)[:12] == [
        "embed_dim", "num_heads", "dilation_rates", "segment_lengths", "dropout", "bias",
        "layer_norm", "layer_norm_eps", "gamma_init", "device", "dtype", "op"]
    assert names(MultiheadDilatedAttention.forward) == ["query", "key", "value", "is_causal"]


def test_dropout_outside_0_1_is_refused_by_name():
    with pytest.raises(ValueError, match="attention_dropout=1.0"):
        DilatedAttention([4], [1], attention_dropout=1.0)
    with pytest.raises(dilattn.InvalidArgumentError,
                       match=r"DILATTN_ERROR_INVALID_VALUE: dropout=-0.2: expected a dropout "
                             r"probability in \[0, 1\)"):
        MultiheadDilatedAttention(8, 2, [1], [4], dropout=-0.2)


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="embed_dim"):
        MultiheadDilatedAttention(10, 3, [1], [4])
    with pytest.raises(dilattn.InvalidArgumentError, match="len"):
        DilatedAttention([4, 8], [1])
