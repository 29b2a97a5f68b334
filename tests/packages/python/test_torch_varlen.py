"""test_torch_varlen.py - dilattn.torch.attention with cu_seqlens_q/k (docs/spec.md section 10.2):
gradcheck in f64 on the reference backend for packed batches (causal GQA with an empty sequence
and Nq != Nk per sequence, dilated with the SPEC 10.1 variants), FlashAttention's 3-d layout,
and agreement with the numpy API."""
import numpy as np
import pytest

from helpers import import_torch

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402

CASES = {
    "causal_gqa": (([0, 3, 3, 8], [0, 4, 6, 9]), (2, 1, 3), dict(causal=True)),
    "dilated_variants": (([0, 5, 11], [0, 5, 11]), (2, 2, 2),
                         dict(segments=[2, 4], dilations=[1, 2], window_size=(2, 1),
                              softcap=0.7, scale=2.0,
                              alibi_slopes=np.array([[0.3, 0.1], [0.2, 0.5]]))),
}


def _tensors(cu, heads, seed, batched):
    (cu_q, cu_k), (H, Hkv, D) = cu, heads
    rng = np.random.default_rng(seed)
    lead = (1,) if batched else ()
    return [torch.tensor(rng.uniform(-1, 1, lead + (n, h, D)), dtype=torch.float64,
                         requires_grad=True)
            for n, h in ((cu_q[-1], H), (cu_k[-1], Hkv), (cu_k[-1], Hkv))]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batched", [False, True])
def test_gradcheck_f64_packed(case, batched):
    cu, heads, options = CASES[case]
    q, k, v = _tensors(cu, heads, 31, batched)
    packed = dict(options, cu_seqlens_q=torch.tensor(cu[0]), cu_seqlens_k=cu[1], backend="ref")
    assert torch.autograd.gradcheck(lambda q, k, v: dt.attention(q, k, v, **packed), (q, k, v),
                                    eps=1e-6, atol=1e-7, rtol=1e-5)


def test_equals_the_numpy_api():
    cu, heads, options = CASES["dilated_variants"]
    q, k, v = _tensors(cu, heads, 32, batched=False)
    o, lse = dt.attention(q, k, v, cu_seqlens_q=cu[0], cu_seqlens_k=cu[1], backend="ref",
                          return_lse=True, **options)
    assert o.shape == q.shape and lse.shape == (heads[0], cu[0][-1])
    o_np, lse_np = dilattn.forward(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                                   cu_seqlens_q=cu[0], cu_seqlens_k=cu[1], backend="ref",
                                   **options)
    assert np.array_equal(o.detach().numpy(), o_np)
    assert np.array_equal(lse.numpy(), lse_np)
