"""test_torch_cuda.py - dilattn.torch on a real GPU: CUDA tensors through the cuda backend on
torch's current stream (the calls test_torch_devices.py records without a GPU).

Checks: forward and backward of every case in f32, f16 and bf16 within SPEC 8 of the f64
reference on the CPU (inputs rounded to the dtype first), outputs and gradients on the inputs'
device; a side stream gives bitwise the result of the default stream; tensors on a second GPU
run there; f64 CUDA tensors get the library's error.

Needs torch with CUDA, a GPU and a library built with CUDA (pip install .
-Csetup-args=-Dcuda=enabled). Without them every test here is skipped, and says so; with
DILATTN_REQUIRE_CUDA=1 (a GPU CI) they fail instead.
"""
import os

import pytest

from helpers import CASES, DENSE_DILATED_IDS, TOLERANCE, import_torch, inputs, within

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
