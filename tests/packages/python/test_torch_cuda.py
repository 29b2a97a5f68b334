"""test_torch_cuda.py - dilattn.torch on a real GPU: CUDA tensors through the cuda backend on
torch's current stream (the calls test_torch_devices.py records without a GPU).

Checks: forward and backward of every case in f32, f16 and bf16 within SPEC 8 of the f64
reference on the CPU (inputs rounded to the dtype first), outputs and gradients on the inputs'
device; a side stream gives bitwise the result of the default stream; dropout and sinks on
CUDA tensors (through dilattn_forward_on_stream_ex on the current stream) within SPEC 8 of the
reference with the same seed, offset and sink logits, on a side stream too, and a module with
attention_dropout trains; packed batches (FlashAttention's varlen layout, one sequence at a
time on the GPU, a block-sparse mask read at each sequence's rows) with D = 64 on the
tensor-core kernels in f16 and f32, a sequence without keys and one without rows among them,
within SPEC 8 of the reference; tensors on a second GPU run
there; f64 CUDA tensors get the library's error.

Needs torch with CUDA, a GPU and a library built with CUDA (pip install .
-Csetup-args=-Dcuda=enabled). Without them every test here is skipped, and says so; with
DILATTN_REQUIRE_CUDA=1 (a GPU CI) they fail instead.
"""
import os

import pytest

from helpers import (CASES, DENSE_DILATED_IDS, TOLERANCE, dropout_ds_widening, import_torch,
                     inputs, within)

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402


def _why_not():
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device"
    if not dilattn.backend_available("cuda"):
        return "the dilattn library cannot run its cuda backend here (python -m dilattn info)"
    return None


_WHY_NOT = _why_not()
if _WHY_NOT is not None:
    if os.environ.get("DILATTN_REQUIRE_CUDA") == "1":
        raise RuntimeError(f"DILATTN_REQUIRE_CUDA=1 but {_WHY_NOT}")
    pytest.skip(_WHY_NOT, allow_module_level=True)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _run(q, k, v, do, **options):
    """o, lse and the gradients of (o * do).sum() for leaf copies of q, k, v."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, lse = dt.attention(q, k, v, return_lse=True, **options)
    o.backward(do)
    return o.detach(), lse, q.grad, k.grad, v.grad


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name,sizes,options", CASES, ids=DENSE_DILATED_IDS)
def test_cuda_forward_and_backward_within_spec8(name, sizes, options, dtype):
    device = torch.device("cuda", 0)
    host = [torch.tensor(x).to(DTYPES[dtype]) for x in inputs(sizes, seed=51)]
    got = _run(*(t.to(device) for t in host), **options)
    for t in got:
        assert t.device == device
    want = _run(*(t.double() for t in host), backend="ref", **options)  # rounded inputs, f64
    atol, rtol = TOLERANCE[dtype]
    for label, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        tol = (1e-4, 0.0) if label == "lse" else (atol, rtol)
        assert within(g.double().cpu().numpy(), w.numpy(), *tol), f"{name} {dtype} {label}"


def test_a_side_stream_gives_the_default_streams_bits():
    name, sizes, options = CASES[4]
    q, k, v, do = (torch.tensor(x, dtype=torch.float32, device="cuda") for x in
                   inputs(sizes, seed=52))
    want = _run(q, k, v, do, **options)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = _run(q, k, v, do, **options)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("side_stream", [False, True], ids=["current", "side"])
def test_dropout_and_sinks_on_cuda_tensors_match_the_reference(side_stream):
    # The same seed and offset give the same decisions on every backend (SPEC 11.1), so the
    # GPU's result is the f64 reference's with that mask, within SPEC 8.
    name, sizes, options = CASES[4]
    host = [torch.tensor(x, dtype=torch.float32) for x in inputs(sizes, seed=55)]
    H = host[0].shape[2]
    sinks = torch.linspace(-1.0, 1.5, H, dtype=torch.float64)
    call = dict(options, dropout_p=0.3, seed=12345, offset=7)

    def run(q, k, v, do, s, **extra):
        q, k, v, s = (t.detach().clone().requires_grad_() for t in (q, k, v, s))
        o = dt.attention(q, k, v, sinks=s, **call, **extra)
        o.backward(do)
        return o.detach(), q.grad, k.grad, v.grad, s.grad

    device = torch.device("cuda", 0)
    args = [t.to(device) for t in host] + [sinks]
    if side_stream:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            got = run(*args)
        torch.cuda.current_stream().wait_stream(stream)
    else:
        got = run(*args)
    torch.cuda.synchronize()
    want = run(*(t.double() for t in host), sinks, backend="ref")
    atol, rtol = TOLERANCE["f32"]
    for label, g, w in zip(("o", "dq", "dk", "dv", "d_sinks"), got, want):
        assert within(g.double().cpu().numpy(), w.numpy(), atol, rtol), f"{name} {label}"
    dropped = run(*args[:4], torch.full((H,), -float("inf"), dtype=torch.float64))[0]
    assert not torch.equal(dropped, got[0])  # the sinks count


def test_a_module_with_attention_dropout_trains_on_cuda():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 16, 4, 8, device="cuda", requires_grad=True) for _ in range(3))
    module = dt.DilatedAttention([8, 16], [1, 2], attention_dropout=0.1)
    first = module(q, k, v)
    second = module(q, k, v)
    assert not torch.equal(first, second)  # a new mask each call in training mode
    second.sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))
    module.eval()
    assert torch.equal(module(q, k, v), module(q, k, v))


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("extra", [dict(), dict(dropout_p=0.2, seed=4, offset=3),
                                   dict(window_size=(20, 3)), dict(mask="local:1+sink:1")],
                         ids=["plain", "dropout", "window", "block_sparse"])
def test_packed_batches_on_cuda_tensors_match_the_reference(dtype, extra):
    cu_q, cu_k = [0, 37, 50, 100, 100], [0, 45, 45, 100, 120]
    if "mask" in extra:  # the packed tensor's 16-row blocks: sequences start inside them
        extra = dict(extra, mask=dilattn.mask.pattern(extra["mask"], cu_q[-1], 16,
                                                      seqlen_k=cu_k[-1], block_k=16))
    gen = torch.Generator().manual_seed(61)
    q, k, v, do = (torch.rand(n, h, 64, generator=gen, dtype=torch.float64) * 2 - 1
                   for n, h in ((100, 2), (120, 1), (120, 1), (100, 2)))
    q, k, v, do = (t.to(DTYPES[dtype]) for t in (q, k, v, do))
    call = dict(extra, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)

    def run(q, k, v, do, **more):
        q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o, lse = dt.attention(q, k, v, return_lse=True, **call, **more)
        o.backward(do)
        return o.detach(), lse, q.grad, k.grad, v.grad

    got = run(*(t.cuda() for t in (q, k, v, do)))
    want = run(*(t.double() for t in (q, k, v, do)), backend="ref")
    atol, rtol = TOLERANCE[dtype]
    # SPEC 12: f32 dQ and dK on tensor cores (3xTF32 on a GPU) within 2e-5, and with dropout
    # dQ and dK within the bound times 1.25 / (1 - p).
    widen = dropout_ds_widening(extra.get("dropout_p", 0.0))
    for label, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        a = 1e-4 if label == "lse" else 2e-5 if dtype == "f32" and label in ("dq", "dk") else atol
        a *= widen if label in ("dq", "dk") else 1.0
        assert within(g.double().cpu().numpy(), w.numpy(), a, 0.0 if label == "lse" else rtol), \
            f"{dtype} {label}"
    o, lse, dq, dk, dv = (t.cpu() for t in got)
    assert torch.all(o[37:50] == 0) and torch.all(torch.isneginf(lse[:, 37:50]))
    assert torch.all(dq[37:50] == 0) and torch.all(dk[100:] == 0) and torch.all(dv[100:] == 0)


def test_tensors_on_a_second_gpu_run_there():
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU only")
    name, sizes, options = CASES[0]
    host = [torch.tensor(x, dtype=torch.float32) for x in inputs(sizes, seed=53)]
    got = _run(*(t.to("cuda:1") for t in host), **options)
    want = _run(*(t.to("cuda:0") for t in host), **options)
    for g, w in zip(got, want):
        assert g.device == torch.device("cuda", 1) and torch.equal(g.cpu(), w.cpu())
    with pytest.raises(dilattn.DeviceError) as info:
        dt.attention(host[0].to("cuda:0"), host[1].to("cuda:1"), host[2].to("cuda:1"))
    assert "q is on cuda:0 but k is on cuda:1" in info.value.message


def test_f64_cuda_tensors_get_the_librarys_error():
    q, k, v = (torch.tensor(x, device="cuda") for x in inputs(CASES[0][1], seed=54)[:3])
    with pytest.raises(dilattn.Error) as info:
        dt.attention(q, k, v)
    assert "f64" in str(info.value) or "float64" in str(info.value)
