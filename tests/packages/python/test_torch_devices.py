"""test_torch_devices.py - which device dilattn.torch runs on, without a GPU.

Real calls (this machine's torch and library): tensors on two devices are refused naming both;
a device dilattn cannot read (meta) is refused naming the tensor; CUDA tensors with a backend
that reads host memory are refused naming the backend; CUDA tensors with a library built
without CUDA raise DeviceError saying how to build one.

The CUDA dispatch (test_cuda_tensors_run_on_the_current_stream_of_their_device, and with
dropout and sinks test_cuda_dropout_and_sinks_run_on_the_current_stream) with a
recording stand-in, as this machine has no GPU and its torch no CUDA: tensors whose .device
says cuda:N (CPU memory underneath), torch.cuda.device / current_stream recorders, and the
library wrapped so that the cuda plan it is asked for runs on the emu backend (the same CUDA
kernels, run by the CPU SIMT emulator), the CUDA views handed to it as host views and the
stream as the default one. The test
checks the entry points (dilattn_*_on_stream and their _ex twins, never the plain calls), the
stream pointer, the
views' device and device_index, the current device during the calls, where outputs are
allocated, and the numbers against the f64 reference (SPEC 8). test_torch_cuda.py makes the
same calls on a real GPU.
"""
import contextlib
import ctypes as C
import functools
import types

import pytest

from helpers import CASES, TOLERANCE, import_torch, inputs, within

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402
from dilattn import _abi  # noqa: E402


@functools.lru_cache(maxsize=None)
def _fake_cuda(index):
    """A tensor subclass whose memory is on the host but whose .device is cuda:index; one class
    per index, so that torch's dispatch of an operator on several of them finds one type."""
    class FakeCudaTensor(torch.Tensor):
        @property
        def device(self):
            return torch.device("cuda", index)
    return FakeCudaTensor


def _on_fake_cuda(t, index=0):
    return t.detach().clone().as_subclass(_fake_cuda(index)).requires_grad_(t.requires_grad)


def _qkv(sizes=(1, 8, 8, 2, 1, 4), seed=31, requires_grad=False):
    return [torch.tensor(x, dtype=torch.float32, requires_grad=requires_grad)
            for x in inputs(sizes, seed)[:3]]


def _raises(cls, status_name, call, *words):
    with pytest.raises(cls) as info:
        call()
    assert info.value.status_name == status_name
    for word in words:
        assert word in info.value.message, info.value.message
    return info.value


# ---------------------------------------------------------------- real calls
def test_tensors_on_two_devices_are_refused_naming_both():
    q, k, v = _qkv()
    _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_MISMATCH",
            lambda: dt.attention(q, k.to("meta"), v), "q is on cpu", "k is on meta")
    _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_MISMATCH",
            lambda: dt.attention(_on_fake_cuda(q, 0), _on_fake_cuda(k, 0), _on_fake_cuda(v, 1)),
            "q is on cuda:0", "v is on cuda:1")


def test_a_device_dilattn_cannot_read_is_refused_naming_the_tensor():
    q, k, v = _qkv()
    _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_MISMATCH",
            lambda: dt.attention(q.to("meta"), k.to("meta"), v.to("meta")), "q is on meta",
            "CPU and CUDA")


def test_cuda_tensors_with_a_host_backend_are_refused_naming_it():
    q, k, v = (_on_fake_cuda(t) for t in _qkv())
    _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_MISMATCH",
            lambda: dt.attention(q, k, v, backend="cpu"), "backend='cpu'", "cuda:0")


def test_cuda_tensors_with_a_library_without_cuda_say_how_to_build_one():
    if dilattn.backend_available("cuda"):
        pytest.skip("this library runs CUDA tensors (test_torch_cuda.py checks them)")
    q, k, v = (_on_fake_cuda(t) for t in _qkv())
    e = _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_NOT_BUILT",
                lambda: dt.attention(q, k, v), "cuda:0", "-Csetup-args=-Dcuda=enabled")
    if "CUDA found at build: no" in dilattn.build_info():
        assert "built without CUDA" in e.message


# ---------------------------------------------------------------- dispatch, recorded
class _RecordingLibrary:
    """The real library, except: the cuda backend counts as available, a cuda plan is made on
    emu (and reported as cuda), and the *_on_stream calls get host copies of the CUDA views.
    Every call of interest is recorded with the current device of the torch.cuda recorder."""

    def __init__(self, real, devices):
        self.real, self.devices, self.calls = real, devices, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def dilattn_backend_available(self, backend):
        if backend == _abi.BACKENDS["cuda"]:
            return 1
        return self.real.dilattn_backend_available(backend)

    def dilattn_plan_create(self, plan, desc, shape, dtype, backend):
        self.calls.append(("plan_create", backend, self.devices.current))
        if backend == _abi.BACKENDS["cuda"]:
            backend = _abi.BACKENDS["emu"]
        return self.real.dilattn_plan_create(plan, desc, shape, dtype, backend)

    def dilattn_plan_backend(self, plan, out):
        status = self.real.dilattn_plan_backend(plan, out)
        if out._obj.value == _abi.BACKENDS["emu"]:
            out._obj.value = _abi.BACKENDS["cuda"]
        return status

    def _on_stream(self, name, plan, stream, views, rest):
        views = [v._obj for v in views]
        self.calls.append((name, stream, [(v.device, v.device_index) for v in views],
                           self.devices.current))
        host = []
        for v in views:
            h = _abi.Tensor.from_buffer_copy(v)
            h.device, h.device_index = _abi.DEVICE_CPU, 0
            host.append(h)
        # The stream is torch's, which emu cannot use (its streams are the emulator's own):
        # the legacy default stream stands in for it.
        return getattr(self.real, name)(plan, None, *[C.byref(h) for h in host], *rest)

    def dilattn_forward_on_stream(self, plan, stream, *args):
        return self._on_stream("dilattn_forward_on_stream", plan, stream, args[:5], args[5:])

    def dilattn_backward_on_stream(self, plan, stream, *args):
        return self._on_stream("dilattn_backward_on_stream", plan, stream, args[:9], args[9:])

    def dilattn_forward_on_stream_ex(self, plan, stream, *args):
        return self._on_stream("dilattn_forward_on_stream_ex", plan, stream, args[:5], args[5:])

    def dilattn_backward_on_stream_ex(self, plan, stream, *args):
        return self._on_stream("dilattn_backward_on_stream_ex", plan, stream, args[:9],
                               args[9:])

    def dilattn_forward(self, *args):
        self.calls.append(("dilattn_forward",))
        return self.real.dilattn_forward(*args)

    def dilattn_backward(self, *args):
        self.calls.append(("dilattn_backward",))
        return self.real.dilattn_backward(*args)


class _CudaRecorder:
    """torch.cuda.device, torch.cuda.current_stream and torch.empty on a CUDA device, recorded:
    a stream's pointer is 0x5000 + its device index; a CUDA tensor is a fake one."""

    def __init__(self):
        self.current, self.streams_asked, self.allocated = None, [], []
        self.real_empty = torch.empty

    def empty(self, *shape, device=None, **kwargs):
        if device is None or torch.device(device).type != "cuda":
            return self.real_empty(*shape, device=device, **kwargs)
        device = torch.device(device)
        self.allocated.append((device, self.current))
        return self.real_empty(*shape, **kwargs).as_subclass(_fake_cuda(device.index))

    @contextlib.contextmanager
    def device(self, device):
        previous, self.current = self.current, torch.device(device)
        try:
            yield
        finally:
            self.current = previous

    def current_stream(self, device):
        self.streams_asked.append(torch.device(device))
        return types.SimpleNamespace(cuda_stream=0x5000 + torch.device(device).index)


def _record_cuda(monkeypatch):
    """The recording library and torch.cuda stand-ins, installed for one test."""
    if not dilattn.backend_available("emu"):
        pytest.skip("the emu backend (the stand-in for the GPU) is not built")
    recorder = _CudaRecorder()
    fake = _RecordingLibrary(_abi.lib(), recorder)
    monkeypatch.setattr(_abi, "_lib", fake)
    monkeypatch.setattr(torch.cuda, "device", recorder.device)
    monkeypatch.setattr(torch.cuda, "current_stream", recorder.current_stream)
    monkeypatch.setattr(torch, "empty", recorder.empty)
    return recorder, fake


def test_cuda_tensors_run_on_the_current_stream_of_their_device(monkeypatch):
    recorder, fake = _record_cuda(monkeypatch)

    name, sizes, options = CASES[3]                  # dilated, block heads, causal, GQA
    index = 1
    device = torch.device("cuda", index)
    q, k, v, do = (torch.tensor(x, dtype=torch.float32) for x in inputs(sizes, seed=32))
    qc, kc, vc = (_on_fake_cuda(t.requires_grad_(), index) for t in (q, k, v))
    o, lse = dt.attention(qc, kc, vc, return_lse=True, **options)
    o.backward(do.as_subclass(type(qc)))

    cuda, stream = _abi.BACKENDS["cuda"], 0x5000 + index
    on_device = [(_abi.DEVICE_CUDA, index)]
    assert fake.calls == [
        ("plan_create", cuda, device),
        ("dilattn_forward_on_stream", stream, on_device * 5, device),
        ("dilattn_backward_on_stream", stream, on_device * 9, device),
    ]
    assert recorder.streams_asked == [device, device]
    # o, lse, then dq, dk, dv: allocated by torch on the tensors' device, with it current.
    assert recorder.allocated == [(device, device)] * 5
    # (the gradients come back from autograd's engine as plain tensors: the fake device is
    # the subclass, which the engine does not keep; their allocation is checked above)
    assert o.device == device and lse.device == device

    # The numbers: the cuda kernels (on emu) within SPEC 8 of the f64 reference.
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o64, lse64 = dt.attention(q64, k64, v64, backend="ref", return_lse=True, **options)
    o64.backward(do.double())
    atol, rtol = TOLERANCE["f32"]
    assert within(o.detach().as_subclass(torch.Tensor).numpy(), o64.detach().numpy(), atol, rtol)
    assert within(lse.as_subclass(torch.Tensor).numpy(), lse64.numpy(), 1e-4, 0)
    for got, want in ((qc, q64), (kc, k64), (vc, v64)):
        assert within(got.grad.as_subclass(torch.Tensor).numpy(), want.grad.numpy(), atol, rtol)


def test_cuda_dropout_and_sinks_run_on_the_current_stream(monkeypatch):
    # Dropout's seed and offset and the sink logits travel in the call options of the stream
    # calls' _ex twins (SPEC 11.2, 14.7), on the tensors' current stream.
    recorder, fake = _record_cuda(monkeypatch)
    name, sizes, options = CASES[3]
    index = 0
    device = torch.device("cuda", index)
    q, k, v, do = (torch.tensor(x, dtype=torch.float32) for x in inputs(sizes, seed=33))
    H = q.shape[2]
    sinks = torch.linspace(-0.75, 1.0, H, dtype=torch.float64)
    call = dict(options, dropout_p=0.3, seed=987, offset=5)
    qc, kc, vc = (_on_fake_cuda(t.requires_grad_(), index) for t in (q, k, v))
    s = sinks.clone().requires_grad_()
    o = dt.attention(qc, kc, vc, sinks=s, **call)
    o.backward(do.as_subclass(type(qc)))

    cuda, stream = _abi.BACKENDS["cuda"], 0x5000 + index
    on_device = [(_abi.DEVICE_CUDA, index)]
    assert fake.calls == [
        ("plan_create", cuda, device),
        ("dilattn_forward_on_stream_ex", stream, on_device * 5, device),
        ("dilattn_backward_on_stream_ex", stream, on_device * 9, device),
    ]
    # The same decisions and sinks as the f64 reference's, within SPEC 8.
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s64 = sinks.clone().requires_grad_()
    o64 = dt.attention(q64, k64, v64, sinks=s64, backend="ref", **call)
    o64.backward(do.double())
    atol, rtol = TOLERANCE["f32"]
    assert within(o.detach().as_subclass(torch.Tensor).numpy(), o64.detach().numpy(), atol, rtol)
    for got, want in ((qc, q64), (kc, k64), (vc, v64)):
        assert within(got.grad.as_subclass(torch.Tensor).numpy(), want.grad.numpy(), atol, rtol)
    assert within(s.grad.numpy(), s64.grad.numpy(), atol, rtol)

