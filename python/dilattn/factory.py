"""factory.py - create_dilated_attention and create_multihead_dilated_attention, the factories
of the DarcStar dilated-attention-pytorch package, over dilattn's modules (dilattn.torch and
seed_modules.py). Import them from dilattn.torch.

Kinds: "standard" (DilatedAttention / MultiheadDilatedAttention), "improved", "ring",
"block_sparse_ring" (the classes of seed_modules.py) and "auto". "auto" chooses as that
package's factory guide describes, from the sequence length and the process group: "ring"
above 100_000 tokens, or above 50_000 tokens when torch.distributed has a process group of
several ranks (the guide's "distributed" kind; dilattn has one ring kind), else "improved".
It never chooses the block-sparse kind, so "auto" always computes exact attention. A ring
module given group= of several ranks takes each rank's rows of the sequence and runs
dilattn.torch.ring_attention; without group= it raises NotImplementedError in a process group
of several ranks (seed_modules.py).
The sequence length is the seq_len keyword (dilattn's addition) when given, else
max(segment_lengths), the length that package's factory also takes as the sequence length.

Keywords go to the class of the kind: unknown ones raise TypeError there, memory-pool and
hardware flags are accepted as no-ops (seed_modules.NO_OP_FLAGS).
"""
from typing import Any, Optional, Sequence

from torch import nn

from . import seed_modules as _seed
from ._errors import error_for
from .torch import DilatedAttention, MultiheadDilatedAttention

KINDS = ("auto", "standard", "improved", "ring", "block_sparse_ring")
# That package's defaults for both factories.
DEFAULT_SEGMENT_LENGTHS = (2048, 4096, 8192)
DEFAULT_DILATION_RATES = (1, 2, 4)
RING_ABOVE_TOKENS = 100_000
DISTRIBUTED_ABOVE_TOKENS = 50_000

_ATTENTION = {
    "standard": DilatedAttention,
    "improved": _seed.ImprovedDilatedAttention,
    "ring": _seed.RingDilatedAttention,
    "block_sparse_ring": _seed.BlockSparseRingDilatedAttention,
}
_MULTIHEAD = {
    "standard": MultiheadDilatedAttention,
    "improved": _seed.ImprovedMultiheadDilatedAttention,
    "ring": _seed.RingMultiheadDilatedAttention,
    "block_sparse_ring": _seed.BlockSparseRingMultiheadDilatedAttention,
}


def select_kind(seq_len: int, ranks: Optional[int] = None) -> str:
    """The kind "auto" chooses for seq_len tokens and a process group of ranks ranks
    (default: the size of torch.distributed's default group, 1 when it is not initialised)."""
    if ranks is None:
        ranks = _seed.process_group_size()
    if seq_len > RING_ABOVE_TOKENS or (ranks > 1 and seq_len > DISTRIBUTED_ABOVE_TOKENS):
        return "ring"
    return "improved"


def _resolve(kind, segment_lengths, dilation_rates, seq_len):
    if kind not in KINDS:
        raise error_for("DILATTN_ERROR_INVALID_VALUE",
                        f"kind={kind!r}: unknown attention type; available: {list(KINDS)}")
    segments = list(DEFAULT_SEGMENT_LENGTHS if segment_lengths is None else segment_lengths)
    dilations = list(DEFAULT_DILATION_RATES if dilation_rates is None else dilation_rates)
    if kind == "auto":
        kind = select_kind(max(segments) if seq_len is None else seq_len)
    return kind, segments, dilations


def create_dilated_attention(kind: str = "auto",
                             segment_lengths: Optional[Sequence[int]] = None,
                             dilation_rates: Optional[Sequence[int]] = None, *,
                             seq_len: Optional[int] = None, **kwargs: Any) -> nn.Module:
    """A dilated attention module over [B, N, H, D] of the kind (see the module's text);
    segment_lengths and dilation_rates default to [2048, 4096, 8192] and [1, 2, 4]."""
    kind, segments, dilations = _resolve(kind, segment_lengths, dilation_rates, seq_len)
    return _ATTENTION[kind](segments, dilations, **kwargs)


def create_multihead_dilated_attention(kind: str = "auto", embed_dim: int = 768,
                                       num_heads: int = 12,
                                       segment_lengths: Optional[Sequence[int]] = None,
                                       dilation_rates: Optional[Sequence[int]] = None, *,
                                       seq_len: Optional[int] = None,
                                       **kwargs: Any) -> nn.Module:
    """A multi-head dilated attention module over [B, N, embed_dim] of the kind (see the
    module's text), with that package's defaults (embed_dim 768, 12 heads)."""
    kind, segments, dilations = _resolve(kind, segment_lengths, dilation_rates, seq_len)
    return _MULTIHEAD[kind](embed_dim=embed_dim, num_heads=num_heads, segment_lengths=segments,
                            dilation_rates=dilations, **kwargs)
