"""dilattn.torch - PyTorch front end: an autograd function and drop-in attention modules.

    o = dilattn.torch.attention(q, k, v, segments=[8, 16], dilations=[1, 2], causal=True)

attention() is a torch.autograd.Function: the forward saves O and LSE, the backward calls the
library's backward (SPEC 6). Tensors are passed as views (torch strides are in elements and
never negative, as the C ABI wants), in float32, float64, float16 or bfloat16.

CPU tensors only for now: the C ABI has no CUDA stream argument yet, so the library cannot run
on the stream PyTorch uses; a CUDA tensor raises dilattn.DeviceError saying so.

DilatedAttention and MultiheadDilatedAttention take the constructor and forward arguments of
fkodom's dilated-attention-pytorch, with heads_mode="groups" (its head split), and compute
exact softmax attention; README ("Drop-in for dilated-attention-pytorch") states how the
outputs differ from that package's (SPEC 9).
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from . import _abi
from ._errors import error_for
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
    if t.device.type != "cpu":
        raise error_for("DILATTN_ERROR_DEVICE_MISMATCH",
                        f"{name} is on {t.device}: dilattn.torch takes CPU tensors only, until "
                        "the C ABI takes a CUDA stream; move the tensors to the CPU "
                        "(tensor.cpu())")
    if t.dim() != 4:
        raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                        f"{name} has shape {tuple(t.shape)}: expected 4 dimensions "
                        "(q: [B, N, H, D]; k, v: [B, N, Hkv, D])")
    _dtype_name(name, t)


def _view(name, t):
    """The dilattn_tensor view of a CPU tensor's memory (the tensor must outlive it)."""
    return _abi.tensor(t.data_ptr(), _dtype_name(name, t), tuple(t.shape), t.stride())


class _Attention(torch.autograd.Function):
    """O, LSE = attention(Q, K, V); the backward reads the saved O and LSE (SPEC 6)."""

    @staticmethod
    def forward(ctx, q, k, v, options):
        for name, t in (("q", q), ("k", k), ("v", v)):
            _check_tensor(name, t)
        B, Nq, H, D = q.shape
        plan = Plan(options, (B, Nq, k.shape[1], H, k.shape[2], D), _dtype_name("q", q))
        o = torch.empty(q.shape, dtype=q.dtype)
        lse = torch.empty((B, H, Nq, 1), dtype=_TORCH_DTYPES[plan.lse_dtype()])
        plan.forward(_view("q", q), _view("k", k), _view("v", v), _view("o", o),
                     _view("lse", lse))
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, o, lse)
        lse3 = lse.squeeze(3)
        ctx.mark_non_differentiable(lse3)
        return o, lse3

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o, _d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        if d_o is None:
            d_o = torch.zeros_like(o)
        _check_tensor("grad of o", d_o)
        dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype) for t in (q, k, v))
        ctx.plan.backward(_view("q", q), _view("k", k), _view("v", v), _view("o", o),
                          _view("lse", lse), _view("grad of o", d_o.to(o.dtype)),
                          _view("dq", dq), _view("dk", dk), _view("dv", dv))
        return dq, dk, dv, None


def attention(q, k, v, *, segments=None, dilations=None, heads_mode="mod", causal=False,
              scale=None, mask=None, backend="auto", return_lse=False):
    """Differentiable attention of q [B, Nq, H, D] over k, v [B, Nk, Hkv, D] (SPEC 2-4, 6).

    Options as dilattn.forward. Returns o [B, Nq, H, D] in q's dtype, or (o, lse) with
    return_lse=True (lse [B, H, Nq], not differentiable)."""
    options = Options(segments, dilations, heads_mode, causal, scale, mask, backend)
    o, lse = _Attention.apply(q, k, v, options)
    return (o, lse) if return_lse else o


def _no_dropout(name, p):
    if p != 0.0:
        raise error_for("DILATTN_ERROR_UNSUPPORTED",
                        f"{name}={p}: dilattn has no attention dropout; pass {name}=0.0 "
                        "(or add dropout outside the attention)")


class DilatedAttention(nn.Module):
    """Dilated attention over [B, N, H, D] tensors, as dilated-attention-pytorch's
    DilatedAttention: branch b has segment length segment_lengths[b] and dilation
    dilation_rates[b]; with heads_mode="groups" head group b uses branch b (SPEC 3).

    softmax_scale: default 1/sqrt(D). attention_dropout must be 0. op (an xformers operator in
    that package) chooses a kernel there and is ignored here. heads_mode and backend are
    dilattn's additions."""

    def __init__(self, segment_lengths, dilation_rates, softmax_scale=None,
                 attention_dropout=0.0, op=None, *, heads_mode="groups", backend="auto"):
        super().__init__()
        if len(segment_lengths) != len(dilation_rates):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"len(segment_lengths) ({len(segment_lengths)}) must be equal to "
                            f"len(dilation_rates) ({len(dilation_rates)})")
        _no_dropout("attention_dropout", attention_dropout)
        self.segment_lengths = list(segment_lengths)
        self.dilation_rates = list(dilation_rates)
        self.softmax_scale = softmax_scale
        self.dropout_p = attention_dropout
        self.op = op
        self.heads_mode = heads_mode
        self.backend = backend
        Options(self.segment_lengths, self.dilation_rates, heads_mode, backend=backend)

    def forward(self, query, key, value, is_causal=False):
        return attention(query, key, value, segments=self.segment_lengths,
                         dilations=self.dilation_rates, heads_mode=self.heads_mode,
                         causal=is_causal, scale=self.softmax_scale, backend=self.backend)


class MultiheadDilatedAttention(nn.Module):
    """Multi-head dilated attention over [B, N, embed_dim], as dilated-attention-pytorch's
    MultiheadDilatedAttention: q/k/v projections, DilatedAttention, the LongNet (MAGNETO)
    sub-LayerNorm before the output projection when layer_norm is True, and its
    initialisation (xavier normal, gain gamma_init on the value and output projections).
    forward(query, key, value, is_causal=False) returns (out, None) as that package does.
    dropout must be 0."""

    def __init__(self, embed_dim, num_heads, dilation_rates, segment_lengths, dropout=0.0,
                 bias=True, layer_norm=True, layer_norm_eps=1e-5, gamma_init=1.0, device=None,
                 dtype=None, op=None, *, heads_mode="groups", backend="auto"):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"embed_dim ({embed_dim}) must be divisible by num_heads "
                            f"({num_heads})")
        _no_dropout("dropout", dropout)
        self.num_heads = num_heads
        self.layer_norm = layer_norm
        self.gamma_init = gamma_init
        factory = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
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

    def forward(self, query, key, value, is_causal=False):
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
