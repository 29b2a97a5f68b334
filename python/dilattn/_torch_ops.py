"""_torch_ops.py - dilattn's attention as torch.library custom operators (torch >= 2.4), which
torch.compile keeps whole in its graph: dilattn::attention_forward and
dilattn::attention_backward.

    dilattn::attention_forward(Tensor q, Tensor k, Tensor v, <options>) -> (Tensor o, Tensor lse)
    dilattn::attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse,
                                Tensor grad_o, <options>) -> (Tensor dq, Tensor dk, Tensor dv)

<options> are the plan's parameters as plain arguments (_op_args.OP_ARGS). Both run on CPU
and CUDA tensors as dilattn.torch's torch.autograd.Function does (its helpers in torch.py:
views, alignment, the backend for the device, the current stream), with a plan from a cache
keyed by those arguments, the sizes, the dtype, the backend and the device (_plan_cache.py):
the backward finds the forward's plan. o has q's shape and dtype, lse is [B, H, Nq] in the
dtype _op_args.lse_dtype_name gives; both are new contiguous tensors. The fake (meta)
functions give those shapes and dtypes without running anything. The forward's autograd
calls the backward operator (SPEC 6); lse is not differentiable; the backward operator's
own autograd raises the double-backward NotImplementedError of dilattn.torch.

Older torch has no torch.library.custom_op: AVAILABLE is then False and nothing is
registered; dilattn.torch keeps to its torch.autograd.Function."""
import torch

from . import _abi
from . import torch as _dt
from ._op_args import (OpArgs, cache_key, lse_dtype_name, op_args, options_from_op_args,
                       schema_arguments)
from ._plan import Plan
from ._plan_cache import PlanCache

AVAILABLE = all(hasattr(torch.library, name)
                for name in ("custom_op", "register_fake", "register_autograd"))

_PLANS = PlanCache()

FORWARD_SCHEMA = f"(Tensor q, Tensor k, Tensor v, {schema_arguments()}) -> (Tensor, Tensor)"
BACKWARD_SCHEMA = (f"(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor grad_o, "
                   f"{schema_arguments()}) -> (Tensor, Tensor, Tensor)")


def _check_inputs(named):
    """The device of the (name, tensor) pairs; the errors of dilattn.torch.attention for two
    devices, a device or dtype dilattn cannot take, and dtypes that differ."""
    device = _dt._one_device(named)
    first = named[0][1]
    if any(t.dtype != first.dtype for _, t in named):
        _dt.same_dtype([(name, str(t.dtype).replace("torch.", "")) for name, t in named])
    return device


def _plan(args, q, k, backend, device):
    """The cached plan for these arguments and tensors. The library object is part of the key:
    a plan belongs to the library that made it."""
    B, Nq, H, D = q.shape
    sizes = (B, Nq, k.shape[1], H, k.shape[2], D)
    dtype = _dt._dtype_name("q", q)
    key = (cache_key(args), sizes, dtype, backend, str(device), _abi.lib())
    return _PLANS.get(key, lambda: Plan(options_from_op_args(args), sizes, dtype, backend))


def _forward(q, k, v, *params):
    args = OpArgs(*params)
    device = _check_inputs([("q", q), ("k", k), ("v", v)])
    backend = _dt._plan_backend(device, args.backend)
    q, k, v = _dt._aligned(q), _dt._aligned(k), _dt._aligned(v)
    B, Nq, H, _ = q.shape
    with _dt._on_device(device):
        plan = _plan(args, q, k, backend, device)
        o = torch.empty(q.shape, dtype=q.dtype, device=device)
        lse_dtype = _dt._TORCH_DTYPES[lse_dtype_name(args, _dt._dtype_name("q", q))]
        lse = torch.empty((B, H, Nq), dtype=lse_dtype, device=device)
        plan.forward(_dt._view("q", q, device), _dt._view("k", k, device),
                     _dt._view("v", v, device), _dt._view("o", o, device),
                     _dt._view("lse", lse.unsqueeze(3), device), stream=_dt._stream(device))
    return o, lse


def _forward_fake(q, k, v, *params):
    B, Nq, H, _ = q.shape
    o = q.new_empty(q.shape)
    lse_dtype = lse_dtype_name(OpArgs(*params), _dt._dtype_name("q", q))
    lse = q.new_empty((B, H, Nq), dtype=_dt._TORCH_DTYPES[lse_dtype])
    return o, lse


def _backward(q, k, v, o, lse, grad_o, *params):
    args = OpArgs(*params)
    # o and lse are the forward's, made on q's device; autograd may hand grad_o elsewhere.
    device = _dt._one_device([("q", q), ("k", k), ("v", v), ("grad of o", grad_o)])
    backend = _dt._plan_backend(device, args.backend)
    q, k, v = _dt._aligned(q), _dt._aligned(k), _dt._aligned(v)
    grad_o = _dt._aligned(grad_o.to(o.dtype))
    with _dt._on_device(device):
        plan = _plan(args, q, k, backend, device)
        dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=device) for t in (q, k, v))
        named = (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse.unsqueeze(3)),
                 ("grad of o", grad_o), ("dq", dq), ("dk", dk), ("dv", dv))
        plan.backward(*(_dt._view(name, t, device) for name, t in named),
                      stream=_dt._stream(device))
    return dq, dk, dv


def _backward_fake(q, k, v, o, lse, grad_o, *params):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.params = tuple(inputs[3:])
    ctx.mark_non_differentiable(lse)


def _gradients(ctx, grad_o, _grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    dq, dk, dv = torch.ops.dilattn.attention_backward(q, k, v, o, lse, grad_o, *ctx.params)
    return (dq, dk, dv) + (None,) * len(ctx.params)


def _no_context(ctx, inputs, output):
    pass


def _no_double_backward(ctx, *grads):
    raise NotImplementedError(_dt.DOUBLE_BACKWARD_MESSAGE)


if AVAILABLE:
    attention_forward = torch.library.custom_op(
        "dilattn::attention_forward", _forward, mutates_args=(),
        device_types=("cpu", "cuda"), schema=FORWARD_SCHEMA)
    attention_forward.register_fake(_forward_fake)
    attention_forward.register_autograd(_gradients, setup_context=_setup_context)

    attention_backward = torch.library.custom_op(
        "dilattn::attention_backward", _backward, mutates_args=(),
        device_types=("cpu", "cuda"), schema=BACKWARD_SCHEMA)
    attention_backward.register_fake(_backward_fake)
    attention_backward.register_autograd(_no_double_backward, setup_context=_no_context)


def attention(q, k, v, options):
    """(o, lse) of dilattn::attention_forward for validated options (no pool); the device and
    dtype errors of the torch.autograd.Function path come first, from the tensors alone."""
    _check_inputs([("q", q), ("k", k), ("v", v)])
    args = op_args(options) if options.mask is None else _op_args_outside_the_graph(options)
    return torch.ops.dilattn.attention_forward(q, k, v, *args)


def _op_args_outside_the_graph(options):
    """op_args of options with a mask, whose BSR arrays are read through ctypes and numpy: under
    torch.compile one graph break, and the call runs as plain Python."""
    return op_args(options)


if AVAILABLE:
    _op_args_outside_the_graph = torch.compiler.disable(_op_args_outside_the_graph)
