"""test_torch_autograd.py - dilattn.torch.attention's autograd (its custom operators with
torch >= 2.4, its torch.autograd.Function before): gradcheck in f64 on the reference backend
(dense, dilated in every head mode, block-sparse) and on the default backend (cpu, which
computes f64 in f64), agreement with the numpy API, bf16/f16 on
the cpu backend within SPEC 8. Devices: test_torch_devices.py and test_torch_cuda.py."""
import numpy as np
import pytest

from helpers import CASES, DENSE_DILATED_IDS, TOLERANCE, import_torch, inputs, within

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402


def _tensors(sizes, seed, dtype=torch.float64, requires_grad=True):
    return [torch.tensor(x, dtype=dtype, requires_grad=requires_grad)
            for x in inputs(sizes, seed)[:3]]


@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_gradcheck_f64_reference(name, sizes, options):
    q, k, v = _tensors(sizes, seed=21)
    assert torch.autograd.gradcheck(lambda q, k, v: dt.attention(q, k, v, backend="ref",
                                                                 **options),
                                    (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_gradcheck_f64_default_backend(name, sizes, options):
    # The default backend (cpu for these host tensors) computes f64 inputs in f64 (SPEC 12).
    q, k, v = _tensors(sizes, seed=25)
    assert torch.autograd.gradcheck(lambda q, k, v: dt.attention(q, k, v, **options),
                                    (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_f64_block_sparse():
    q, k, v = _tensors((1, 12, 12, 2, 1, 3), seed=22)
    mask = dilattn.mask.pattern("local:1+sink:1", 12, 4)
    assert torch.autograd.gradcheck(lambda q, k, v: dt.attention(q, k, v, mask=mask,
                                                                 causal=True, backend="ref"),
                                    (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("name,sizes,options", CASES[:4], ids=DENSE_DILATED_IDS[:4])
def test_gradcheck_f64_reference_window_softcap_alibi(name, sizes, options):
    # docs/spec.md section 10.1, all three together; scale 2 puts tanh in its curved part.
    q, k, v = _tensors(sizes, seed=24)
    B, H = sizes[0], sizes[3]
    slopes = torch.linspace(0.1, 0.9, B * H, dtype=torch.float64).reshape(B, H)
    variants = dict(window_size=(3, 1), softcap=0.7, alibi_slopes=slopes, scale=2.0)
    options = {**options, **variants}
    assert torch.autograd.gradcheck(lambda q, k, v: dt.attention(q, k, v, backend="ref",
                                                                 **options),
                                    (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_forward_and_backward_equal_the_numpy_api():
    sizes, options = CASES[3][1], CASES[3][2]
    q, k, v = _tensors(sizes, seed=23, dtype=torch.float32)
    o, lse = dt.attention(q, k, v, backend="cpu", return_lse=True, **options)
    qn, kn, vn = (x.detach().numpy() for x in (q, k, v))
    o_np, lse_np = dilattn.forward(qn, kn, vn, backend="cpu", **options)
    assert np.array_equal(o.detach().numpy(), o_np) and np.array_equal(lse.numpy(), lse_np)
    assert not lse.requires_grad
    o.sum().backward()                       # the gradient arrives expanded: stride 0
    grads = dilattn.backward(qn, kn, vn, o_np, lse_np, np.ones_like(o_np), backend="cpu",
                             **options)
    for t, g in zip((q, k, v), grads):
        assert np.array_equal(t.grad.numpy(), g)


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bf16"), (torch.float16, "f16")])
def test_half_precision_on_cpu_within_spec8(dtype, name):
    sizes, options = CASES[4][1], CASES[4][2]
    q, k, v = _tensors(sizes, seed=24, dtype=dtype, requires_grad=False)
    o = dt.attention(q, k, v, backend="cpu", **options)
    assert o.dtype == dtype
    o_ref = dt.attention(*(x.double() for x in (q, k, v)), backend="ref", **options)
    assert within(o.double().numpy(), o_ref.numpy(), *TOLERANCE[name])


def test_integer_tensor_is_refused():
    q, k, v = _tensors((1, 4, 4, 1, 1, 2), seed=26, dtype=torch.float32)
    with pytest.raises(dilattn.InvalidArgumentError) as info:
        dt.attention(q, k.int(), v)
    assert info.value.status_name == "DILATTN_ERROR_DTYPE_MISMATCH" and "int32" in str(info.value)
