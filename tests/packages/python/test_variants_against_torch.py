"""test_variants_against_torch.py - docs/spec.md section 10 checked against code no one here
wrote: PyTorch's scaled_dot_product_attention with an explicit float mask built from the
definitions (window, causal aligned bottom-right when Nq != Nk, ALiBi, a packed batch as a
block-diagonal mask, a sink as one extra key of value 0 whose score the mask sets to the sink
logit), forward and backward through torch's autograd (d_sinks as the gradient of that mask
column); and FlexAttention (torch.nn.attention.flex_attention, unfused on CPU) with a
score_mod for the softcap and ALiBi and a mask_mod for the window, forward (o and the LSE:
FlexAttention runs no backward on the CPU).

Every comparison is in float64 on the CPU, for dilattn's ref and cpu backends, to 1e-10.
SDPA needs torch >= 2.0 and FlexAttention >= 2.5: with an older torch (Debian's 1.13 in CI)
this file is skipped and says so; DILATTN_REQUIRE_TORCH_COMPILE=1 (the GPU first-light run,
torch 2.11) makes that a failure, as in test_torch_compile.py.
"""
import os

import numpy as np
import pytest

from helpers import import_torch, inputs_and_rng

torch = import_torch()
import dilattn  # noqa: E402

_HAS_SDPA = hasattr(torch.nn.functional, "scaled_dot_product_attention")
try:
    from torch.nn.attention.flex_attention import flex_attention  # noqa: E402
except ImportError:
    flex_attention = None
if not _HAS_SDPA or flex_attention is None:
    _WHY = f"torch {torch.__version__} has no scaled_dot_product_attention or flex_attention"
    if os.environ.get("DILATTN_REQUIRE_TORCH_COMPILE") == "1":
        raise RuntimeError(f"DILATTN_REQUIRE_TORCH_COMPILE=1 but {_WHY}")
    pytest.skip(_WHY, allow_module_level=True)

TOL = 1e-10
BACKENDS = ["ref", "cpu"]


def _bias(Nq, Nk, H, window=None, causal=False, slopes=None, seqs=None):
    """[H, Nq, Nk] additive float mask from SPEC 10: -inf outside the allowed keys, -m|i+d-j|
    inside (d = Nk - Nq per sequence). seqs: [(q0, nq, k0, nk)], default the whole tensors."""
    bias = np.full((H, Nq, Nk), -np.inf)
    for q0, nq, k0, nk in seqs or [(0, Nq, 0, Nk)]:
        d = nk - nq
        for i in range(nq):
            for j in range(nk):
                rel = i + d - j  # how far key j lies before row i's diagonal
                if causal and rel < 0:
                    continue
                if window is not None:
                    left, right = window
                    if (left >= 0 and rel > left) or (right >= 0 and -rel > right):
                        continue
                for h in range(H):
                    m = 0.0 if slopes is None else slopes[h]
                    bias[h, q0 + i, k0 + j] = -m * abs(rel)
    return bias


def _sdpa(q, k, v, bias, scale, sinks=None):
    """SDPA on [B, N, H, D] numpy f64 tensors with GQA by repeated kv heads. With sinks, one
    extra key and value of zeros whose mask entry is the head's sink logit. Returns torch
    tensors o [B, Nq, H, D] and the leaves (q, k, v, mask) for autograd."""
    H, Hkv = q.shape[2], k.shape[2]
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    kk = tk.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    vv = tv.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    mask = torch.tensor(bias)
    if sinks is not None:
        B, _, _, D = kk.shape
        zeros = torch.zeros(B, H, 1, D, dtype=torch.float64)
        kk, vv = torch.cat([kk, zeros], dim=2), torch.cat([vv, zeros], dim=2)
        sink_col = torch.tensor(sinks).view(H, 1, 1).expand(H, bias.shape[1], 1)
        mask = torch.cat([mask, sink_col], dim=2)
    mask.requires_grad_(True)
    o = torch.nn.functional.scaled_dot_product_attention(
        tq.transpose(1, 2), kk, vv, attn_mask=mask, scale=scale).transpose(1, 2)
    return o, (tq, tk, tv, mask)


def _close(name, got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, name
    err = np.max(np.abs(got - want)) if got.size else 0.0
    assert err <= TOL * (1 + np.max(np.abs(want))), f"{name}: max error {err:.3g}"


# (name, sizes (B, Nq, Nk, H, Hkv, D), window, causal, ALiBi, sinks)
SDPA_CASES = [
    ("window_gqa_nq_lt_nk", (2, 7, 11, 4, 2, 8), (3, 2), False, False, False),
    ("window_causal_nq_gt_nk", (1, 11, 7, 2, 1, 8), (4, -1), True, False, False),
    ("alibi_causal", (2, 9, 9, 3, 3, 8), None, True, True, False),
    ("window_alibi_sinks", (1, 10, 12, 4, 2, 8), (2, 3), False, True, True),
    ("sinks_causal_gqa", (2, 8, 8, 4, 1, 8), None, True, False, True),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", SDPA_CASES, ids=[c[0] for c in SDPA_CASES])
def test_forward_and_backward_equal_sdpa(case, backend):
    _, sizes, window, causal, alibi, with_sinks = case
    B, Nq, Nk, H, Hkv, D = sizes
    q, k, v, do, rng = inputs_and_rng(sizes, seed=Nq * 31 + H)
    slopes = rng.uniform(0.1, 0.9, H) if alibi else None
    sinks = rng.uniform(-1.0, 1.5, H) if with_sinks else None
    scale = 0.8 / np.sqrt(D)
    options = dict(scale=scale, causal=causal, backend=backend)
    if window is not None:
        options["window_size"] = window
    if alibi:
        options["alibi_slopes"] = slopes.tolist()
    if with_sinks:
        options["sinks"] = sinks
    o, lse = dilattn.forward(q, k, v, **options)
    grads = dilattn.backward(q, k, v, o, lse, do, **options)

    want, leaves = _sdpa(q, k, v, _bias(Nq, Nk, H, window, causal, slopes), scale, sinks)
    (want * torch.tensor(do)).sum().backward()
    _close("o", o, want.detach().numpy())
    for name, got, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        _close(name, got, leaf.grad.numpy())
    if with_sinks:
        # The sink's logit is the mask's last column: its gradient summed over b and rows.
        _close("d_sinks", grads[3], leaves[3].grad[:, :, -1].sum(dim=1).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_batch_equals_sdpa_with_a_block_diagonal_mask(backend):
    # Sequences of 5, 0, 9 and 4 query rows over 7, 2, 9 and 6 keys, causal and windowed per
    # sequence: one SDPA call over the whole packed tensors with a block-diagonal mask.
    cu_q, cu_k = [0, 5, 5, 14, 18], [0, 7, 9, 18, 24]
    H, Hkv, D = 4, 2, 8
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, (1, cu_q[-1], H, D))
    k = rng.uniform(-1, 1, (1, cu_k[-1], Hkv, D))
    v = rng.uniform(-1, 1, (1, cu_k[-1], Hkv, D))
    do = rng.uniform(-1, 1, (1, cu_q[-1], H, D))
    slopes = rng.uniform(0.1, 0.9, H)
    seqs = [(cu_q[s], cu_q[s + 1] - cu_q[s], cu_k[s], cu_k[s + 1] - cu_k[s]) for s in range(4)]
    options = dict(causal=True, window_size=(3, -1), alibi_slopes=slopes.tolist(),
                   cu_seqlens_q=np.array(cu_q), cu_seqlens_k=np.array(cu_k), backend=backend)
    o, lse = dilattn.forward(q, k, v, **options)
    grads = dilattn.backward(q, k, v, o, lse, do, **options)
    bias = _bias(cu_q[-1], cu_k[-1], H, (3, -1), True, slopes, seqs)
    want, leaves = _sdpa(q, k, v, bias, 1 / np.sqrt(D))
    (want * torch.tensor(do)).sum().backward()
    # Rows with no key at all (none here: every sequence with rows has keys) would be NaN in
    # SDPA and 0 in dilattn (SPEC 13); the case keeps them out.
    _close("o", o, want.detach().numpy())
    for name, got, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        _close(name, got, leaf.grad.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_softcap_alibi_window_forward_equals_flex_attention(backend):
    # FlexAttention: score_mod gets scale * <q, k> and returns the softcapped score plus ALiBi;
    # mask_mod keeps the window (aligned bottom-right: d = Nk - Nq).
    B, Nq, Nk, H, D = 2, 12, 16, 4, 8
    q, k, v, _, rng = inputs_and_rng((B, Nq, Nk, H, H, D), seed=17)
    slopes = torch.tensor(rng.uniform(0.1, 0.9, H))
    cap, left, right, d = 0.7, 4, 1, Nk - Nq

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap) - slopes[h] * torch.abs(q_idx + d - kv_idx)

    def mask_mod(b, h, q_idx, kv_idx):
        rel = q_idx + d - kv_idx
        return (rel <= left) & (-rel <= right)

    from torch.nn.attention.flex_attention import create_block_mask
    block_mask = create_block_mask(mask_mod, B, H, Nq, Nk, device="cpu")
    tq, tk, tv = (torch.tensor(x).transpose(1, 2) for x in (q, k, v))
    want, want_lse = flex_attention(tq, tk, tv, score_mod=score_mod, block_mask=block_mask,
                                    scale=1 / np.sqrt(D), return_lse=True)
    options = dict(softcap=cap, alibi_slopes=slopes.tolist(), window_size=(left, right),
                   backend=backend)
    o, lse = dilattn.forward(q, k, v, **options)
    _close("o", o, want.transpose(1, 2).numpy())
    _close("lse", lse, want_lse.numpy())
