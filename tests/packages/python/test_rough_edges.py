"""test_rough_edges.py - what a new user meets first: torch tensors given to the numpy API,
dtype mismatches named in the caller's terms, double backward refused by name, type hints on
the public API and the py.typed marker."""
import inspect
import os
import typing

import numpy as np
import pytest

import dilattn
from helpers import import_torch

torch = import_torch()
import dilattn.torch as dt  # noqa: E402


def _arrays(dtype=np.float32):
    rng = np.random.default_rng(5)
    return [rng.uniform(-1, 1, (1, 6, 2, 3)).astype(dtype) for _ in range(3)]


# ---------------------------------------------------------------- torch tensors in numpy calls
@pytest.mark.parametrize("which", [0, 1, 2])
def test_torch_tensors_in_the_numpy_api_raise_a_type_error_naming_dilattn_torch(which):
    args = _arrays()
    args[which] = torch.from_numpy(args[which])
    name = "qkv"[which]
    with pytest.raises(TypeError, match=f"^{name} is a torch.Tensor: .*dilattn.torch.attention"):
        dilattn.forward(*args)


def test_torch_tensors_in_backward_and_topk_raise_the_same_type_error():
    q, k, v = _arrays()
    o, lse = dilattn.forward(q, k, v)
    with pytest.raises(TypeError, match="^lse is a torch.Tensor"):
        dilattn.backward(q, k, v, o, torch.from_numpy(lse), o)
    with pytest.raises(TypeError, match="^do is a torch.Tensor"):
        dilattn.backward(q, k, v, o, lse, torch.from_numpy(o))
    with pytest.raises(TypeError, match="^q is a torch.Tensor"):
        dilattn.mask.topk(torch.from_numpy(q), k, 2, 1)


# ---------------------------------------------------------------- dtype messages
def test_a_list_as_q_names_the_dtypes_in_the_callers_terms():
    q, k, v = _arrays()
    with pytest.raises(dilattn.InvalidArgumentError) as raised:
        dilattn.forward(q.tolist(), k, v)
    assert raised.value.status_name == "DILATTN_ERROR_DTYPE_MISMATCH"
    assert raised.value.message.startswith("k is float32 but q is float64: q, k, v must have "
                                           "one dtype")
    assert "plan" not in raised.value.message


def test_backward_names_o_and_do_in_the_callers_terms():
    q, k, v = _arrays()
    o, lse = dilattn.forward(q, k, v)
    with pytest.raises(dilattn.InvalidArgumentError, match="o is float64 but q is float32"):
        dilattn.backward(q, k, v, o.astype(np.float64), lse, o)
    with pytest.raises(dilattn.InvalidArgumentError, match="do is float16 but q is float32"):
        dilattn.backward(q, k, v, o, lse, o.astype(np.float16))


def test_torch_dtype_mismatch_is_named_in_torch_terms():
    q, k, v = (torch.from_numpy(a) for a in _arrays())
    with pytest.raises(dilattn.InvalidArgumentError, match="^DILATTN_ERROR_DTYPE_MISMATCH: v is "
                                                           "float64 but q is float32"):
        dt.attention(q, k, v.double())


# ---------------------------------------------------------------- double backward
def test_double_backward_raises_not_implemented_saying_so():
    q, k, v = (torch.from_numpy(a).double().requires_grad_() for a in _arrays())
    o = dt.attention(q, k, v, backend="ref")
    dq, = torch.autograd.grad(o.pow(2).sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward .* is not implemented"):
        dq.sum().backward()


def test_first_backward_with_create_graph_still_equals_plain_backward():
    q, k, v = (torch.from_numpy(a).double().requires_grad_() for a in _arrays())
    o = dt.attention(q, k, v, backend="ref", segments=[2, 6], dilations=[1, 2])
    plain = torch.autograd.grad(o.pow(2).sum(), (q, k, v), retain_graph=True)
    graphed = torch.autograd.grad(o.pow(2).sum(), (q, k, v), create_graph=True)
    for a, b in zip(plain, graphed):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- type hints
PUBLIC = [
    dilattn.forward, dilattn.backward, dilattn.backend_available, dilattn.build_info,
    dilattn.info, dilattn.library_path, dilattn.library_version,
    dilattn.mask.pattern, dilattn.mask.local, dilattn.mask.sink, dilattn.mask.strided,
    dilattn.mask.random, dilattn.mask.union, dilattn.mask.hierarchical, dilattn.mask.topk,
    dilattn.mask.from_bsr, dilattn.mask.Mask.to_bsr, dilattn.mask.Mask.to_dense,
    dilattn.Pool.__init__, dilattn.Pool.stats, dilattn.Pool.alloc, dilattn.Pool.free,
    dilattn.Pool.reset, dilattn.Pool.close,
    dilattn.ring.shard_rows, dilattn.ring.ring_forward, dilattn.ring.ring_backward,
    dilattn.ring.run_threads, dilattn.ring.Comm.threads, dilattn.ring.Comm.mpi,
    dilattn.ring.Comm.close, dilattn.ring.Comm.peak_bytes,
    dt.attention, dt.create_dilated_attention, dt.create_multihead_dilated_attention,
] + [getattr(cls, method) for cls in (
    dt.DilatedAttention, dt.MultiheadDilatedAttention, dt.ImprovedDilatedAttention,
    dt.ImprovedMultiheadDilatedAttention, dt.RingDilatedAttention,
    dt.RingMultiheadDilatedAttention, dt.BlockSparseRingDilatedAttention,
    dt.BlockSparseRingMultiheadDilatedAttention) for method in ("__init__", "forward")]


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda f: f.__qualname__)
def test_public_api_has_type_hints(fn):
    hints = typing.get_type_hints(fn)  # also resolves every hint: a typo raises here
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    missing = [p for p in params if p not in hints] + ([] if "return" in hints else ["return"])
    assert not missing, f"{fn.__qualname__}: no type hint for {missing}"


def test_package_has_the_py_typed_marker():
    assert os.path.isfile(os.path.join(os.path.dirname(dilattn.__file__), "py.typed"))
