"""dilattn.torch - PyTorch front end: an autograd function and drop-in attention modules.

    o = dilattn.torch.attention(q, k, v, segments=[8, 16], dilations=[1, 2], causal=True)

attention() is differentiable: the forward saves O and LSE, the backward calls the library's
backward (SPEC 6). With torch >= 2.4 it runs the custom operators of _torch_ops.py, which
torch.compile keeps in one graph; with an older torch, or with a pool, a packed batch, sinks
or dropout, the torch.autograd.Function _Attention below. The library has first derivatives
only: a double backward (the gradient of a gradient) raises NotImplementedError saying so.
Tensors are passed as views (torch strides are in elements and never negative, as the C ABI
wants), in float32, float64, float16 or bfloat16. A tensor whose data pointer is not a
multiple of its element size (torch.frombuffer at an odd offset), which the library refuses
(SPEC 1), is cloned to an aligned one first.

Devices: q, k, v (and the incoming gradient) must be on one device, else DeviceError naming
two of them. CPU tensors run on options.backend. CUDA tensors run on the library's cuda
backend (backend "auto" or "cuda"; another is refused) through dilattn_forward_on_stream /
dilattn_backward_on_stream (their _ex twins with dropout or sinks) on
torch.cuda.current_stream(device), with the tensors' device current: the call orders with the
other work PyTorch queued there and returns without waiting (with sinks, the backward waits
for the sinks' gradient, which it returns as a tensor).
O, LSE and the gradients are allocated by torch on that device; nothing is copied to the host.
A library built without CUDA (the default pip install .) raises DeviceError saying how to build
one: pip install . -Csetup-args=-Dcuda=enabled.

DilatedAttention and MultiheadDilatedAttention take the constructor and forward arguments of
fkodom's dilated-attention-pytorch, with heads_mode="groups" (its head split), and compute
exact softmax attention; docs/bindings.md ("PyTorch") states how the
outputs differ from that package's (SPEC 9). Their dropout applies in training mode only, as
torch's modules do, with a seed drawn from torch's default generator at every call (SPEC 11).
"""
import contextlib
import ctypes as C
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import _abi, _cints
from ._errors import error_for
from ._info import backend_available, build_info
from ._numpy import _sink_array, same_dtype
from ._plan import Options, Plan

_DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16"}
_TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64}


def _dtype_name(name, t):
    try:
        return _DTYPE_NAMES[t.dtype]
    except KeyError:
        raise error_for("DILATTN_ERROR_DTYPE_MISMATCH",
                        f"{name} has dtype {t.dtype}: dilattn takes float32, float64, float16 "
                        "and bfloat16") from None


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"{name} is a {type(t).__name__}, expected a torch.Tensor")
    if t.device.type not in ("cpu", "cuda"):
        raise error_for("DILATTN_ERROR_DEVICE_MISMATCH",
                        f"{name} is on {t.device}: dilattn.torch takes CPU and CUDA tensors")
    if t.dim() != 4:
        raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                        f"{name} has shape {tuple(t.shape)}: expected 4 dimensions "
                        "(q: [B, N, H, D]; k, v: [B, N, Hkv, D])")
    _dtype_name(name, t)


def _view(name, t, device):
    """The dilattn_tensor view of the memory of a tensor on device, host or CUDA (the tensor
    must outlive it)."""
    if device.type == "cuda":
        return _abi.tensor(t.data_ptr(), _dtype_name(name, t), tuple(t.shape), t.stride(),
                           _abi.DEVICE_CUDA, device.index)
    return _abi.tensor(t.data_ptr(), _dtype_name(name, t), tuple(t.shape), t.stride())


def _aligned(t):
    """t, or an aligned copy of it when its data pointer is not a multiple of its element size
    (the library refuses those, SPEC 1)."""
    if t.data_ptr() % t.element_size() == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


# ---------------------------------------------------------------- devices
def _one_device(named):
    """The device of the (name, tensor) pairs, all checked first; DEVICE_MISMATCH names the
    first two that differ."""
    first_name, first = named[0]
    for name, t in named:
        if not isinstance(t, torch.Tensor) or not isinstance(first, torch.Tensor):
            break  # _check_tensor below names it
        if t.device != first.device:
            raise error_for("DILATTN_ERROR_DEVICE_MISMATCH",
                            f"{first_name} is on {first.device} but {name} is on {t.device}: "
                            "dilattn.torch needs all tensors on one device")
    for name, t in named:
        _check_tensor(name, t)
    return first.device


def _plan_backend(device, backend):
    """The backend a plan for tensors on device asks for: backend (the option's) on the CPU,
    cuda for CUDA tensors (the only backend that reads device memory, SPEC 1)."""
    if device.type != "cuda":
        return backend
    if backend not in ("auto", "cuda"):
        raise error_for("DILATTN_ERROR_DEVICE_MISMATCH",
                        f"backend={backend!r} runs on host memory but the tensors are "
                        f"on {device}: use backend='auto' or 'cuda', or move them to the CPU")
    if not backend_available("cuda"):
        facts = dict(line.split(": ", 1) for line in build_info().splitlines() if ": " in line)
        if facts.get("CUDA found at build") == "yes":
            why = f"its cuda backend cannot run here (GPU present: {facts.get('GPU present')})"
        else:
            why = ("it was built without CUDA; build it with CUDA: pip install . "
                   "-Csetup-args=-Dcuda=enabled (needs nvcc)")
        raise error_for("DILATTN_ERROR_DEVICE_NOT_BUILT",
                        f"the tensors are on {device} but the dilattn library "
                        f"{_abi.library_path()} cannot run CUDA tensors: {why}")
    return "cuda"


def _on_device(device):
    """The tensors' GPU as the current device while a CUDA call is planned and enqueued."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _stream(device):
    """torch's current stream of the device as the int the C ABI takes, None on the CPU."""
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


DOUBLE_BACKWARD_MESSAGE = (
    "dilattn.torch.attention: double backward (the gradient of a gradient, e.g. "
    "torch.autograd.grad(..., create_graph=True) then backward, or gradgradcheck) is "
    "not implemented; the library computes first derivatives only (SPEC 6)")


def _check_sinks(sinks, H):
    """sinks (SPEC 10.3): a floating tensor of shape [H], one logit per query head, on any
    device; refused naming sinks otherwise (DTYPE_MISMATCH for a dtype, else INVALID_VALUE)."""
    if not isinstance(sinks, torch.Tensor):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"sinks is a {type(sinks).__name__}: expected a torch.Tensor of "
                        f"shape [{H}] (one logit per query head)")
    if not sinks.is_floating_point():
        raise error_for("DILATTN_ERROR_DTYPE_MISMATCH",
                        f"sinks has dtype {sinks.dtype}: expected a floating tensor")
    if tuple(sinks.shape) != (H,):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"sinks has shape {tuple(sinks.shape)}: expected [{H}] (heads_q = {H}, "
                        "one logit per query head)")


def _dropout_call(dropout_p, seed, offset):
    """(seed, offset) for the plan's calls, or None for no dropout. seed=None draws a seed from
    torch's default CPU generator, so torch.manual_seed makes the masks reproducible; nothing
    is drawn for dropout_p = 0, so a run without dropout leaves torch's generator untouched."""
    if seed is not None:
        seed = _cints.uint64(seed, "seed")
    offset = _cints.uint64(offset, "offset")  # its bound (< 2**32) is the library's (SPEC 11.1)
    if dropout_p == 0.0:
        return None
    if seed is None:
        seed = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())
    return seed, offset


class _Attention(torch.autograd.Function):
    """O, LSE = attention(Q, K, V) with optional sink logits and dropout = (seed, offset); the
    backward reads the saved O and LSE (SPEC 6), regenerates the forward's dropout mask from
    the same seed and offset (SPEC 11.3) and gives the sinks their gradient (SPEC 10.3)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, options, dropout):
        device = _one_device([("q", q), ("k", k), ("v", v)])
        same_dtype([(name, str(t.dtype).replace("torch.", "")) for name, t in
                    (("q", q), ("k", k), ("v", v))])
        sink_values = None
        if sinks is not None:
            _check_sinks(sinks, q.shape[2])
            # The library reads the logits as host f64 (dilattn_call_options.sinks).
            sink_values = _sink_array(sinks.detach().to("cpu", torch.float64).numpy(),
                                      q.shape[2])
        backend = _plan_backend(device, options.backend)
        q, k, v = _aligned(q), _aligned(k), _aligned(v)
        B, Nq, H, D = q.shape
        with _on_device(device):
            plan = Plan(options, (B, Nq, k.shape[1], H, k.shape[2], D), _dtype_name("q", q),
                        backend)
            o = torch.empty(q.shape, dtype=q.dtype, device=device)
            lse = torch.empty((B, H, Nq, 1), dtype=_TORCH_DTYPES[plan.lse_dtype()],
                              device=device)
            plan.forward(_view("q", q, device), _view("k", k, device), _view("v", v, device),
                         _view("o", o, device), _view("lse", lse, device),
                         stream=_stream(device), dropout=dropout, sinks=sink_values)
        ctx.plan = plan
        ctx.dropout = dropout
        ctx.sink_values = sink_values
        ctx.sinks_like = None if sinks is None else (sinks.dtype, sinks.device)
        ctx.save_for_backward(q, k, v, o, lse)
        lse3 = lse.squeeze(3)
        ctx.mark_non_differentiable(lse3)
        return o, lse3

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        if d_o is None:
            d_o = torch.zeros_like(o)
        # The gradients come from _AttentionBackward, so that differentiating them again (a
        # double backward) reaches its backward, which says that it is not implemented.
        grads = _AttentionBackward.apply(q, k, v, o, lse, d_o, ctx.plan, ctx.dropout,
                                         ctx.sink_values)
        d_sinks = None
        if ctx.sinks_like is not None and ctx.needs_input_grad[3]:
            dtype, device = ctx.sinks_like
            d_sinks = grads[3].to(device=device, dtype=dtype)
        return grads[0], grads[1], grads[2], d_sinks, None, None


class _AttentionBackward(torch.autograd.Function):
    """dQ, dK, dV = the library's backward (SPEC 6) of the forward that made o and lse, with
    the forward's dropout = (seed, offset) or None (SPEC 11.3); with sink_values (the
    forward's host f64 sinks) also dSinks, [H] f64 on the CPU (SPEC 10.3)."""

    @staticmethod
    def forward(ctx, q, k, v, o, lse, d_o, plan, dropout, sink_values):
        # o and lse are the forward's, made on q's device; autograd may hand d_o elsewhere.
        device = _one_device([("q", q), ("k", k), ("v", v), ("grad of o", d_o)])
        d_o = _aligned(d_o.to(o.dtype))
        with _on_device(device):
            dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=device) for t in (q, k, v))
            named = (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("grad of o", d_o),
                     ("dq", dq), ("dk", dk), ("dv", dv))
            d_sinks = None if sink_values is None else (C.c_double * len(sink_values))()
            plan.backward(*(_view(name, t, device) for name, t in named),
                          stream=_stream(device), dropout=dropout, sinks=sink_values,
                          d_sinks=d_sinks)
        if d_sinks is None:
            return dq, dk, dv
        return dq, dk, dv, torch.tensor(d_sinks[:], dtype=torch.float64)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(DOUBLE_BACKWARD_MESSAGE)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
              segments: Optional[Sequence[int]] = None,
              dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
              causal: bool = False, scale: Optional[float] = None, mask: Any = None,
              backend: str = "auto", pool: Any = None, return_lse: bool = False,
              window_size: Optional[Tuple[int, int]] = None, softcap: float = 0.0,
              alibi_slopes: Optional[Sequence[float]] = None, cu_seqlens_q: Any = None,
              cu_seqlens_k: Any = None, sinks: Optional[torch.Tensor] = None,
              dropout_p: float = 0.0, seed: Optional[int] = None, offset: int = 0
              ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Differentiable attention of q [B, Nq, H, D] over k, v [B, Nk, Hkv, D] (SPEC 2-4, 6),
    on the tensors' device (CPU or CUDA, see the module's text).

    Options as dilattn.forward (pool: a dilattn.Pool on the tensors' device). Returns
    o [B, Nq, H, D] in q's dtype, or (o, lse) with return_lse=True (lse [B, H, Nq], not
    differentiable). window_size, softcap and alibi_slopes (a sequence or a CPU tensor of H or
    B * H slopes) are docs/spec.md section 10.1's variants, computed by every backend; the
    slopes get no gradient. cu_seqlens_q/k (n + 1 offsets each, a sequence or a tensor) make it
    a packed batch (section 10.2; the cuda backend runs it one sequence at a time), as
    FlashAttention's varlen functions: q [total_q, H, D] gives o [total_q, H, D] and lse
    [H, total_q] (4-d tensors with a batch of 1 work too).

    sinks: a floating tensor [H] of attention-sink logits (section 10.3, as gpt-oss's learnable
    sinks), on any device, finite or -inf: each joins every row's softmax of its head once,
    with no value, and lse includes it; with dilated attention a row has one sink after the
    merge of its branches. Its values are copied to the host as f64 for the call; it gets a
    gradient (in its own dtype and device) when it requires grad. Backends "ref" and "cpu": CPU
    tensors ("auto" picks "cpu"); CUDA q, k, v with sinks raise dilattn.UnsupportedError (the
    cuda backend does not compute them, and nothing is copied to the host behind the caller's
    back). Calls with sinks run the torch.autograd.Function on every torch, so torch.compile
    breaks the graph there.

    dropout_p: attention dropout (section 11) in [0, 1): each (query, key) probability is
    dropped with that chance and the kept ones are scaled by 1 / (1 - dropout_p); lse is
    unaffected. It applies whenever dropout_p > 0 (this function has no training mode; the
    modules below pass 0 in eval mode). The mask is a pure function of seed (0 .. 2**64 - 1)
    and offset (0 .. 2**32 - 1); the backward regenerates the same mask. seed=None draws one
    from torch's default CPU generator at each call (torch.randint), so torch.manual_seed
    makes a run reproducible and every call gets a new mask; nothing is drawn when
    dropout_p = 0, which is no dropout, bitwise. Every backend takes the same decisions: CPU
    tensors ("auto" picks cpu), and CUDA tensors on the cuda backend, on the current stream
    (dilattn_forward_on_stream_ex). Calls with dropout run the torch.autograd.Function on
    every torch."""
    if alibi_slopes is not None and hasattr(alibi_slopes, "detach"):
        alibi_slopes = alibi_slopes.detach().cpu().numpy()
    cu_seqlens_q, cu_seqlens_k = (x.tolist() if hasattr(x, "tolist") else x
                                  for x in (cu_seqlens_q, cu_seqlens_k))
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend, pool,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                      sinks=sinks is not None, dropout_p=dropout_p)
    dropout = _dropout_call(options.dropout_p, seed, offset)
    unbatched = options.cu_seqlens_q is not None and q.dim() == 3
    if unbatched:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    # The custom operators (torch >= 2.4) carry the plan's parameters as arguments; a pool (an
    # object), a packed batch's offsets, the sinks (a tensor with its own gradient, carried
    # per call) and dropout's seed and offset (per call) are not among them, so those calls
    # take the Function.
    if (_torch_ops.AVAILABLE and pool is None and options.cu_seqlens_q is None
            and sinks is None and dropout is None):
        o, lse = _torch_ops.attention(q, k, v, options)
    else:
        o, lse = _Attention.apply(q, k, v, sinks, options, dropout)
    if unbatched:
        o, lse = o.squeeze(0), lse.squeeze(0)
    return (o, lse) if return_lse else o


def _dropout_probability(name, p):
    """p as a float in [0, 1), the modules' dropout probability (SPEC 11.2), or
    InvalidArgumentError naming the constructor argument."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"{name}={p!r}: expected a dropout probability in [0, 1)")
    return float(p)


def _module_dropout(module):
    """The dropout probability a module's call uses: its own in training mode, 0 in eval mode
    (as torch's modules apply dropout)."""
    return module.dropout_p if module.training else 0.0


class DilatedAttention(nn.Module):
    """Dilated attention over [B, N, H, D] tensors, as dilated-attention-pytorch's
    DilatedAttention: branch b has segment length segment_lengths[b] and dilation
    dilation_rates[b]; with heads_mode="groups" head group b uses branch b (SPEC 3).

    softmax_scale: default 1/sqrt(D). attention_dropout in [0, 1) drops attention probabilities
    in training mode only (SPEC 11, backend "cpu": CPU tensors), with a seed drawn from torch's
    generator at every call, so torch.manual_seed makes a run reproducible; eval() turns it
    off. op (an xformers operator in that package) chooses a kernel there and is ignored here.
    heads_mode and backend are dilattn's additions."""

    def __init__(self, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                 softmax_scale: Optional[float] = None, attention_dropout: float = 0.0,
                 op: Any = None, *, heads_mode: str = "groups", backend: str = "auto") -> None:
        super().__init__()
        if len(segment_lengths) != len(dilation_rates):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"len(segment_lengths) ({len(segment_lengths)}) must be equal to "
                            f"len(dilation_rates) ({len(dilation_rates)})")
        self.segment_lengths = list(segment_lengths)
        self.dilation_rates = list(dilation_rates)
        self.softmax_scale = softmax_scale
        self.dropout_p = _dropout_probability("attention_dropout", attention_dropout)
        self.op = op
        self.heads_mode = heads_mode
        self.backend = backend
        Options(self.segment_lengths, self.dilation_rates, heads_mode, backend=backend)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                is_causal: bool = False) -> torch.Tensor:
        return attention(query, key, value, segments=self.segment_lengths,
                         dilations=self.dilation_rates, heads_mode=self.heads_mode,
                         causal=is_causal, scale=self.softmax_scale, backend=self.backend,
                         dropout_p=_module_dropout(self))


def _add_input_projections(module, embed_dim, num_heads, bias, factory):
    """module.q_proj, k_proj, v_proj: embed_dim x embed_dim linear maps, made in that order,
    after checking that embed_dim splits into num_heads heads. Shared by the multi-head modules
    (each then adds its out_proj where its parameter order has it)."""
    if embed_dim % num_heads != 0:
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(module, name, nn.Linear(embed_dim, embed_dim, bias=bias, **factory))


class MultiheadDilatedAttention(nn.Module):
    """Multi-head dilated attention over [B, N, embed_dim], as dilated-attention-pytorch's
    MultiheadDilatedAttention: q/k/v projections, DilatedAttention, the LongNet (MAGNETO)
    sub-LayerNorm before the output projection when layer_norm is True, and its
    initialisation (xavier normal, gain gamma_init on the value and output projections).
    forward(query, key, value, is_causal=False) returns (out, None) as that package does.
    dropout is the attention dropout of its DilatedAttention (training mode only)."""

    def __init__(self, embed_dim: int, num_heads: int, dilation_rates: Sequence[int],
                 segment_lengths: Sequence[int], dropout: float = 0.0, bias: bool = True,
                 layer_norm: bool = True, layer_norm_eps: float = 1e-5, gamma_init: float = 1.0,
                 device: Any = None, dtype: Optional[torch.dtype] = None, op: Any = None, *,
                 heads_mode: str = "groups", backend: str = "auto") -> None:
        super().__init__()
        _dropout_probability("dropout", dropout)
        factory = dict(device=device, dtype=dtype)
        _add_input_projections(self, embed_dim, num_heads, bias, factory)
        self.num_heads = num_heads
        self.layer_norm = layer_norm
        self.gamma_init = gamma_init
        self.attention = DilatedAttention(segment_lengths, dilation_rates,
                                          attention_dropout=dropout, op=op,
                                          heads_mode=heads_mode, backend=backend)
        self.norm = (nn.LayerNorm(embed_dim, eps=layer_norm_eps, **factory) if layer_norm
                     else None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self):
        # MAGNETO's initialisation, as in dilated-attention-pytorch, so a swapped-in module
        # starts from the same distribution of weights.
        for proj, gain in ((self.q_proj, 1.0), (self.k_proj, 1.0),
                           (self.v_proj, self.gamma_init), (self.out_proj, self.gamma_init)):
            nn.init.xavier_normal_(proj.weight, gain=gain)
            if proj.bias is not None:
                nn.init.constant_(proj.bias, 0)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                is_causal: bool = False) -> Tuple[torch.Tensor, None]:
        B, N, E = query.shape
        H = self.num_heads

        def heads(x):
            return x.reshape(x.shape[0], x.shape[1], H, E // H)

        q = heads(self.q_proj(query))
        k = heads(self.k_proj(key))
        v = heads(self.v_proj(value))
        x = self.attention(q, k, v, is_causal=is_causal).reshape(B, N, E)
        if self.norm is not None:
            x = self.norm(x)
        return self.out_proj(x), None


# The custom operators (torch >= 2.4) and the seed package's module family and factories
# (seed_modules.py, factory.py), imported last: they build on the helpers and modules above.
from . import _torch_ops  # noqa: E402
from .seed_modules import (  # noqa: E402
    BlockSparseRingDilatedAttention, BlockSparseRingMultiheadDilatedAttention,
    ImprovedDilatedAttention, ImprovedMultiheadDilatedAttention, RingDilatedAttention,
    RingMultiheadDilatedAttention, SparsePatternConfig)
from .factory import create_dilated_attention, create_multihead_dilated_attention  # noqa: E402
from .torch_ring import ring_attention  # noqa: E402  (torch.distributed ring, torch_ring.py)
