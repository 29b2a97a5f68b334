"""seed_modules.py - the module family of the DarcStar dilated-attention-pytorch package
(ImprovedDilatedAttention, RingDilatedAttention, BlockSparseRingDilatedAttention and their
multi-head forms) with that package's constructor and forward arguments, computing exact
attention with the dilattn library (SPEC 2-4). Import them from dilattn.torch.

What each argument means here:
- segment_lengths, dilation_rates, is_causal, softmax_scale (default 1/sqrt(D)): as in
  dilattn.torch.DilatedAttention; heads split into len(segment_lengths) groups
  (heads_mode="groups", SPEC 3) unless heads_mode says otherwise.
- dropout in [0, 1): attention dropout (SPEC 11, backend "cpu": CPU tensors) in training mode
  only, as in dilattn.torch.DilatedAttention (a seed drawn from torch's generator at every
  call; eval() turns it off). The torch.distributed ring has no dropout: a ring class with a
  group of several ranks raises NotImplementedError in training mode with dropout > 0.
- Memory-pool, profiling, caching and hardware flags of that package (NO_OP_FLAGS below) are
  accepted and change nothing: dilattn plans take their workspace from the library's pool
  (dilattn.Pool through pool=) and choose their kernels themselves, and no flag changes a
  result. Any other unknown keyword is a TypeError naming it.
- Masks as tensors (attention_mask, attn_mask, key_padding_mask) and need_weights=True are
  refused with NotImplementedError: dilattn takes causal, dilated and block-sparse structure,
  never materialises the weights, and that package ignores or approximates those masks.
- The ring classes take a torch.distributed process group (group=, e.g.
  torch.distributed.group.WORLD). Given a group of several ranks, each rank passes its rows
  of the sequence (the rows of dilattn.ring.shard_rows(N, P, rank, split), split= "zigzag" by
  default) and gets its rows of the exact single-device result through
  dilattn.torch.ring_attention (torch_ring.py); forward and backward are collective. Without
  group= they compute the single-device result on one process, and raise NotImplementedError
  when the default group has several ranks: the ranks of a data-parallel job hold different
  sequences, so splitting the sequence is asked for by naming the group. ring_size is accepted
  and changes nothing. The block-sparse classes have no ring: in a group of several ranks they
  raise NotImplementedError.
- The block-sparse classes build the mask of the sparse pattern with the library's builders
  (dilattn.mask, SPEC 4); segment_lengths are accepted and unused there, as in that package.

docs/bindings.md has the table of where the results differ from that package's (SPEC 9).
"""
import dataclasses
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import mask as _mask
from ._errors import error_for
from .torch import (DilatedAttention, MultiheadDilatedAttention, _add_input_projections,
                     _dropout_probability, _module_dropout, attention)
from .torch_ring import ring_attention

# Flags of that package that select its memory pools, caches, profiling or kernels. They have
# no counterpart that could change a dilattn result, so they are accepted and ignored.
NO_OP_FLAGS = frozenset({
    "use_tf32", "enable_memory_pool", "enable_profiling", "lightweight_pool",
    "memory_pool_threshold_mb", "use_pattern_cache", "use_memory_pool", "max_cached_buffers",
    "use_checkpointing", "use_gradient_checkpointing", "enable_buffer_manager",
    "use_flash_attention", "use_fa3", "enable_hardware_opt", "enable_packed_comm",
    "use_adaptive_sparsity", "quality_threshold", "use_fused_qkv", "block_size_ring",
    "ring_size", "device", "dtype",
})


def _accept_flags(cls_name, flags):
    unknown = sorted(set(flags) - NO_OP_FLAGS)
    if unknown:
        raise TypeError(f"{cls_name}() got unexpected keyword argument(s) {unknown}; it accepts "
                        f"that package's no-op flags {sorted(NO_OP_FLAGS)}")


def _refuse_tensor_masks(cls_name, **masks):
    for name, value in masks.items():
        if value is not None:
            raise error_for("DILATTN_ERROR_UNSUPPORTED",
                            f"{cls_name}: {name} is not supported: dilattn takes causal "
                            "(is_causal=True), dilated and block-sparse structure only")


def _refuse_weights(cls_name, need_weights):
    if need_weights:
        raise error_for("DILATTN_ERROR_UNSUPPORTED",
                        f"{cls_name}: need_weights=True is not supported: dilattn never "
                        "materialises the attention weights")


def process_group_size(group=None):
    """The number of ranks of group (default: the default group) when torch.distributed is
    initialised, else 1."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def _ring_group(cls_name, group):
    """The group a ring class splits the sequence over, or None for the single-device result;
    refuses the default group of several ranks when no group was named (see the module's
    text)."""
    ranks = process_group_size(group)
    if ranks <= 1:
        return None
    if group is None:
        raise error_for("DILATTN_ERROR_UNSUPPORTED",
                        f"{cls_name}: torch.distributed has a process group of {ranks} ranks; "
                        "pass group= (e.g. torch.distributed.group.WORLD) to split the "
                        "sequence over its ranks with dilattn.torch.ring_attention, each rank "
                        "passing its rows, or run the module in a single process")
    return group


def _refuse_ring_dropout(cls_name, p):
    """dilattn.torch.ring_attention has no dropout (its sub-problems cannot draw at
    whole-sequence positions, torch_ring.py; docs/spec.md section 5.5)."""
    if p != 0.0:
        raise error_for("DILATTN_ERROR_UNSUPPORTED",
                        f"{cls_name}: dropout={p} in training mode over a process group of "
                        "several ranks: dilattn.torch.ring_attention has no attention dropout "
                        "(docs/spec.md section 5.5); use dropout=0.0, eval(), or the module in "
                        "a single process")


def _refuse_multi_rank(cls_name, group):
    ranks = process_group_size(group)
    if ranks > 1:
        raise error_for("DILATTN_ERROR_UNSUPPORTED",
                        f"{cls_name}: torch.distributed has a process group of {ranks} ranks, "
                        "but dilattn.torch has no torch.distributed ring for block-sparse "
                        "masks (dilattn.torch.ring_attention takes dense and dilated "
                        "attention). Use the module in a single process (exact single-device "
                        "result)")


# ---------------------------------------------------------------- improved
class ImprovedDilatedAttention(DilatedAttention):
    """Dilated attention over [B, N, H, D] (SPEC 3) with the arguments of that package's
    ImprovedDilatedAttention; forward(query, key, value, is_causal=False,
    attention_mask=None) returns the output tensor."""

    def __init__(self, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                 dropout: float = 0.0, use_tf32: bool = True, enable_memory_pool: bool = False,
                 enable_profiling: bool = False, lightweight_pool: bool = True, *,
                 softmax_scale: Optional[float] = None, heads_mode: str = "groups",
                 backend: str = "auto", **flags: Any) -> None:
        _accept_flags(type(self).__name__, flags)
        super().__init__(segment_lengths, dilation_rates, softmax_scale=softmax_scale,
                         attention_dropout=dropout, heads_mode=heads_mode, backend=backend)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                is_causal: bool = False,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _refuse_tensor_masks(type(self).__name__, attention_mask=attention_mask)
        return super().forward(query, key, value, is_causal=is_causal)


class _SeedMultihead(MultiheadDilatedAttention):
    """The projections, sub-LayerNorm and initialisation of MultiheadDilatedAttention, with
    the forward arguments of that package's multi-head classes (key and value default to
    query) and a choice of the inner attention module."""

    def _attend(self, query, key, value, is_causal, key_padding_mask, need_weights,
                attn_mask):
        name = type(self).__name__
        _refuse_tensor_masks(name, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        _refuse_weights(name, need_weights)
        key = query if key is None else key
        value = query if value is None else value
        out, _ = MultiheadDilatedAttention.forward(self, query, key, value, is_causal=is_causal)
        return out


class ImprovedMultiheadDilatedAttention(_SeedMultihead):
    """Multi-head dilated attention over [B, N, embed_dim] with the arguments of that
    package's ImprovedMultiheadDilatedAttention; forward returns (out, None) as it does."""

    def __init__(self, embed_dim: int, num_heads: int, dilation_rates: Sequence[int],
                 segment_lengths: Sequence[int], dropout: float = 0.0, bias: bool = True,
                 layer_norm: bool = True, layer_norm_eps: float = 1e-5, gamma_init: float = 1.0,
                 device: Any = None, dtype: Optional[torch.dtype] = None,
                 use_tf32: bool = True, *, heads_mode: str = "groups", backend: str = "auto",
                 **flags: Any) -> None:
        _accept_flags(type(self).__name__, flags)
        super().__init__(embed_dim, num_heads, dilation_rates, segment_lengths, dropout=dropout,
                         bias=bias, layer_norm=layer_norm, layer_norm_eps=layer_norm_eps,
                         gamma_init=gamma_init, device=device, dtype=dtype,
                         heads_mode=heads_mode, backend=backend)

    def forward(self, query: torch.Tensor, key: Optional[torch.Tensor] = None,
                value: Optional[torch.Tensor] = None,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False,
                average_attn_weights: bool = True) -> Tuple[torch.Tensor, None]:
        return self._attend(query, key, value, is_causal, key_padding_mask, need_weights,
                            attn_mask), None


# ---------------------------------------------------------------- ring
class RingDilatedAttention(DilatedAttention):
    """That package's RingDilatedAttention arguments. group: a torch.distributed process group;
    given one of several ranks, forward takes this rank's rows (split: "zigzag" or
    "contiguous", as dilattn.ring.shard_rows) and computes through
    dilattn.torch.ring_attention, else the single-device dilated attention (see the module's
    text)."""

    def __init__(self, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                 dropout: float = 0.0, ring_size: Optional[int] = None, device: Any = None,
                 dtype: Optional[torch.dtype] = None, *, group: Any = None,
                 split: str = "zigzag", softmax_scale: Optional[float] = None,
                 heads_mode: str = "groups", backend: str = "auto", **flags: Any) -> None:
        _accept_flags(type(self).__name__, flags)
        super().__init__(segment_lengths, dilation_rates, softmax_scale=softmax_scale,
                         attention_dropout=dropout, heads_mode=heads_mode, backend=backend)
        self.ring_size = ring_size
        self.group = group
        self.split = split

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                is_causal: bool = False,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        _refuse_tensor_masks(type(self).__name__, attention_mask=attention_mask)
        group = _ring_group(type(self).__name__, self.group)
        if group is not None:
            _refuse_ring_dropout(type(self).__name__, _module_dropout(self))
            return ring_attention(query, key, value, group=group, split=self.split,
                                  segments=self.segment_lengths, dilations=self.dilation_rates,
                                  heads_mode=self.heads_mode, causal=is_causal,
                                  scale=self.softmax_scale, backend=self.backend)
        return super().forward(query, key, value, is_causal=is_causal)


class RingMultiheadDilatedAttention(_SeedMultihead):
    """That package's RingMultiheadDilatedAttention arguments; forward returns (out, None).
    Its attention is a RingDilatedAttention with group and split: in a group of several ranks
    query, key and value are this rank's rows [B, rows, embed_dim] and out its rows; each rank's
    parameter gradients are its rows' share (sum them over the ranks, as DistributedDataParallel
    does)."""

    def __init__(self, embed_dim: int, num_heads: int, dilation_rates: Sequence[int],
                 segment_lengths: Sequence[int], dropout: float = 0.0, bias: bool = True,
                 layer_norm: bool = True, layer_norm_eps: float = 1e-5, gamma_init: float = 1.0,
                 device: Any = None, dtype: Optional[torch.dtype] = None,
                 ring_size: Optional[int] = None, *, group: Any = None,
                 split: str = "zigzag", heads_mode: str = "groups", backend: str = "auto",
                 **flags: Any) -> None:
        _accept_flags(type(self).__name__, flags)
        super().__init__(embed_dim, num_heads, dilation_rates, segment_lengths, dropout=dropout,
                         bias=bias, layer_norm=layer_norm, layer_norm_eps=layer_norm_eps,
                         gamma_init=gamma_init, device=device, dtype=dtype,
                         heads_mode=heads_mode, backend=backend)
        self.attention = RingDilatedAttention(segment_lengths, dilation_rates, dropout=dropout,
                                              group=group, split=split, heads_mode=heads_mode,
                                              backend=backend)
        self.ring_size = ring_size
        self.group = group
        self.split = split

    def forward(self, query: torch.Tensor, key: Optional[torch.Tensor] = None,
                value: Optional[torch.Tensor] = None,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False,
                average_attn_weights: bool = True) -> Tuple[torch.Tensor, None]:
        return self._attend(query, key, value, is_causal, key_padding_mask, need_weights,
                            attn_mask), None


# ---------------------------------------------------------------- block-sparse
def _outside_the_graph(fn):
    """fn, run as plain Python under torch.compile (one graph break; torch.compiler.disable
    where torch has it): building a mask calls the library through ctypes, which dynamo
    cannot trace."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return fn if disable is None else disable(fn)


@dataclasses.dataclass
class SparsePatternConfig:
    """That package's sparse pattern settings. pattern_type: "local_window", "global_local",
    "dilated_sparse", "random", or a dilattn pattern string ("local:2+sink:1", SPEC 4.4).
    sparsity_ratio: the fraction of block pairs kept, used by "random" (its density); the
    other patterns are fixed by their sizes, as in that package. block_size, local_window_size
    and global_tokens are in tokens. seed: the random pattern's seed (dilattn's addition)."""
    pattern_type: str = "dilated_sparse"
    sparsity_ratio: float = 0.1
    block_size: int = 128
    local_window_size: int = 512
    global_tokens: int = 64
    seed: int = 0


_SPARSE_FIELDS = {f.name for f in dataclasses.fields(SparsePatternConfig)}


def _sparse_config(cls_name, sparse_config, settings):
    if isinstance(sparse_config, dict):
        sparse_config = SparsePatternConfig(**sparse_config)
    elif sparse_config is None:
        sparse_config = SparsePatternConfig()
    elif not isinstance(sparse_config, SparsePatternConfig):
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"{cls_name}: sparse_config={sparse_config!r}: expected a "
                        "SparsePatternConfig or a dict of its fields")
    return dataclasses.replace(sparse_config, **settings)


def sparse_mask(config: SparsePatternConfig, dilation_rates: Sequence[int], seqlen_q: int,
                seqlen_k: int) -> _mask.Mask:
    """The block mask of config for seqlen_q queries and seqlen_k keys, built by dilattn.mask
    (SPEC 4). The named patterns keep what that package's do, block by block: local_window the
    (local_window_size // block_size) // 2 blocks on each side of the diagonal; global_local
    that and the first global_tokens // block_size key blocks (dilattn's sink, whose first
    query blocks also see every key block); dilated_sparse the diagonal and the blocks at
    +-r for the first three dilation rates r; random each block pair with probability
    sparsity_ratio."""
    bs = config.block_size
    sizes = dict(seqlen_k=seqlen_k)
    kind = config.pattern_type
    radius = (config.local_window_size // bs) // 2
    if ":" in kind:
        return _mask.pattern(kind, seqlen_q, bs, **sizes)
    if kind == "local_window":
        return _mask.local(seqlen_q, bs, radius, **sizes)
    if kind == "global_local":
        key_blocks = -(-seqlen_k // bs)
        global_blocks = min(config.global_tokens // bs, key_blocks)
        local = _mask.local(seqlen_q, bs, radius, **sizes)
        if global_blocks == 0:
            return local
        return _mask.union(_mask.sink(seqlen_q, bs, global_blocks, **sizes), local)
    if kind == "dilated_sparse":
        rows, cols = -(-seqlen_q // bs), -(-seqlen_k // bs)
        row_ptr, col_idx = [0], []
        for i in range(rows):
            keep = {i} | {i + d * r for r in list(dilation_rates)[:3] for d in (-1, 1)}
            col_idx += sorted(j for j in keep if 0 <= j < cols)
            row_ptr.append(len(col_idx))
        return _mask.from_bsr(row_ptr, col_idx, seqlen_q, bs, **sizes)
    if kind == "random":
        return _mask.random(seqlen_q, bs, config.sparsity_ratio, seed=config.seed, **sizes)
    raise error_for("DILATTN_ERROR_INVALID_VALUE",
                    f"pattern_type={kind!r}: expected 'local_window', 'global_local', "
                    "'dilated_sparse', 'random' or a dilattn pattern string such as "
                    "'local:2+sink:1'")


class BlockSparseRingDilatedAttention(nn.Module):
    """Block-sparse attention over [B, N, H, D] (SPEC 4) with the arguments of that package's
    BlockSparseRingDilatedAttention: the mask of sparse_config (or of the pattern_type,
    sparsity_ratio, block_size, local_window_size, global_tokens keywords), built per sequence
    length and kept. forward(q, k, v, is_causal=False, return_attention_weights=False).
    One process only: in a process group of several ranks it raises NotImplementedError."""

    def __init__(self, segment_lengths: Sequence[int], dilation_rates: Sequence[int],
                 sparse_config: Union[SparsePatternConfig, Dict[str, Any], None] = None, *,
                 dropout: float = 0.0, group: Any = None, softmax_scale: Optional[float] = None,
                 backend: str = "auto", **kwargs: Any) -> None:
        super().__init__()
        name = type(self).__name__
        if "sparsity_config" in kwargs:
            sparse_config = kwargs.pop("sparsity_config")
        settings = {k: kwargs.pop(k) for k in list(kwargs) if k in _SPARSE_FIELDS}
        _accept_flags(name, kwargs)
        self.dropout_p = _dropout_probability("dropout", dropout)
        _refuse_multi_rank(name, group)
        if len(segment_lengths) != len(dilation_rates):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"len(segment_lengths) ({len(segment_lengths)}) must be equal to "
                            f"len(dilation_rates) ({len(dilation_rates)})")
        self.segment_lengths = list(segment_lengths)
        self.dilation_rates = list(dilation_rates)
        self.sparse_config = _sparse_config(name, sparse_config, settings)
        self.block_size = self.sparse_config.block_size
        self.softmax_scale = softmax_scale
        self.backend = backend
        self.group = group
        self._masks: Dict[Tuple[int, int], _mask.Mask] = {}
        # A bad pattern is refused here, not at the first forward.
        self.mask_for(self.block_size, self.block_size)

    @_outside_the_graph
    def mask_for(self, seqlen_q: int, seqlen_k: int) -> _mask.Mask:
        """The mask for these sequence lengths (built once per pair)."""
        key = (seqlen_q, seqlen_k)
        if key not in self._masks:
            self._masks[key] = sparse_mask(self.sparse_config, self.dilation_rates, seqlen_q,
                                           seqlen_k)
        return self._masks[key]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                return_attention_weights: bool = False) -> torch.Tensor:
        name = type(self).__name__
        _refuse_multi_rank(name, self.group)
        _refuse_weights(name, return_attention_weights)
        return attention(q, k, v, mask=self.mask_for(q.shape[1], k.shape[1]), causal=is_causal,
                         scale=self.softmax_scale, backend=self.backend,
                         dropout_p=_module_dropout(self))


class BlockSparseRingMultiheadDilatedAttention(nn.Module):
    """Multi-head block-sparse attention over [B, N, embed_dim] with the arguments of that
    package's BlockSparseRingMultiheadDilatedAttention: q/k/v/out projections (nn.Linear's
    default initialisation, no LayerNorm, as there) around BlockSparseRingDilatedAttention.
    batch_first=False takes [N, B, embed_dim]. forward returns the output tensor."""

    def __init__(self, embed_dim: int, num_heads: int, segment_lengths: Sequence[int],
                 dilation_rates: Sequence[int], dropout: float = 0.0, bias: bool = True,
                 sparse_config: Union[SparsePatternConfig, Dict[str, Any], None] = None,
                 batch_first: bool = True, *, device: Any = None,
                 dtype: Optional[torch.dtype] = None, **kwargs: Any) -> None:
        super().__init__()
        _dropout_probability("dropout", dropout)
        factory = dict(device=device, dtype=dtype)
        _add_input_projections(self, embed_dim, num_heads, bias, factory)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.batch_first = batch_first
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.sparse_attention = BlockSparseRingDilatedAttention(
            segment_lengths, dilation_rates, sparse_config, dropout=dropout, **kwargs)

    def forward(self, query: torch.Tensor, key: Optional[torch.Tensor] = None,
                value: Optional[torch.Tensor] = None,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False,
                average_attn_weights: bool = True) -> torch.Tensor:
        name = type(self).__name__
        _refuse_tensor_masks(name, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        _refuse_weights(name, need_weights)
        key = query if key is None else key
        value = query if value is None else value
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        H, E = self.num_heads, self.embed_dim

        def heads(x):
            return x.reshape(x.shape[0], x.shape[1], H, E // H)

        x = self.sparse_attention(heads(self.q_proj(query)), heads(self.k_proj(key)),
                                  heads(self.v_proj(value)), is_causal=is_causal)
        out = self.out_proj(x.reshape(query.shape[0], query.shape[1], E))
        return out if self.batch_first else out.transpose(0, 1)
