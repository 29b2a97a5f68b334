"""test_seed_modules.py - the DarcStar dilated-attention-pytorch module family and factories
in dilattn.torch: outputs against SPEC 3-4 (tests/common/spec_numpy.py), the block patterns
against a transcription of that package's pattern rules, the kinds "auto" chooses, the
signatures, the no-op flags, and the refusals (dropout outside [0, 1), tensor masks, weights,
block-sparse on several ranks; test_torch_dropout.py has the dropout itself)."""
import inspect

import numpy as np
import pytest

from helpers import import_torch, spec_numpy

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402
from dilattn import factory, seed_modules  # noqa: E402


def _qkv(B, N, H, D, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(B, N, H, D, generator=gen, dtype=torch.float64).mul(2).sub(1)
            for _ in range(3)]


def _spec(q, k, v, **config):
    o, _ = spec_numpy.forward(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                              **config)
    return torch.from_numpy(o)


# ---------------------------------------------------------------- dilated classes
@pytest.mark.parametrize("cls", [dt.ImprovedDilatedAttention, dt.RingDilatedAttention])
@pytest.mark.parametrize("causal", [False, True])
def test_improved_and_ring_equal_spec_groups_attention(cls, causal):
    q, k, v = _qkv(2, 16, 4, 3, seed=41)
    module = cls([4, 8], [1, 2], enable_memory_pool=True, use_tf32=False, backend="ref")
    out = module(q, k, v, is_causal=causal)
    want = _spec(q, k, v, segments=[4, 8], dilations=[1, 2], heads_mode="groups",
                 causal=causal)
    assert torch.allclose(out, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("cls", [dt.ImprovedMultiheadDilatedAttention,
                                 dt.RingMultiheadDilatedAttention])
def test_multihead_classes_are_projections_around_spec_attention(cls):
    torch.manual_seed(42)
    E, H, N = 12, 3, 12
    mha = cls(E, H, dilation_rates=[1, 2], segment_lengths=[6, 12], dtype=torch.float64,
              backend="ref", enable_memory_pool=True)
    x = torch.randn(2, N, E, dtype=torch.float64)
    out, weights = mha(x, is_causal=True)  # key and value default to query
    assert weights is None and out.shape == (2, N, E)

    def heads(t):
        return t.reshape(2, N, H, E // H)

    a = _spec(heads(mha.q_proj(x)), heads(mha.k_proj(x)), heads(mha.v_proj(x)),
              segments=[6, 12], dilations=[1, 2], heads_mode="groups", causal=True)
    a = torch.nn.functional.layer_norm(a.reshape(2, N, E), (E,), mha.norm.weight,
                                       mha.norm.bias, 1e-5)
    assert torch.allclose(out, mha.out_proj(a), atol=1e-12, rtol=1e-10)


# ---------------------------------------------------------------- block-sparse
def seed_pattern(kind, blocks, dilation_rates, block_size=4, local_window_size=16,
                 global_tokens=8):
    """[I, J] bool: that package's _create_{local_window,dilated_sparse,global_local}_indices,
    transcribed (it needs N divisible by the block size, so I = J = blocks)."""
    keep = np.zeros((blocks, blocks), dtype=bool)
    window = local_window_size // block_size
    for i in range(blocks):
        if kind == "local_window":
            keep[i, max(0, i - window // 2):min(blocks, i + window // 2 + 1)] = True
        elif kind == "dilated_sparse":
            keep[i, i] = True
            for rate in dilation_rates[:3]:
                for j in (i - rate, i + rate):
                    if 0 <= j < blocks:
                        keep[i, j] = True
        elif kind == "global_local":
            g = min(global_tokens // block_size, blocks)
            keep[i, :g] = True
            keep[i, max(g, i - window // 2):min(blocks, i + window // 2 + 1)] = True
    return keep


@pytest.mark.parametrize("kind", ["local_window", "dilated_sparse", "global_local"])
def test_block_sparse_masks_keep_that_packages_blocks(kind):
    module = dt.BlockSparseRingDilatedAttention(
        [8, 16], [1, 3], dict(pattern_type=kind, block_size=4, local_window_size=16,
                              global_tokens=8))
    got = module.mask_for(40, 40).to_dense()[0]
    want = seed_pattern(kind, 10, [1, 3])
    if kind == "global_local":
        # dilattn's sink also lets the first global blocks see every key block (SPEC 4.4).
        want[:2, :] = True
    assert np.array_equal(got, want)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["local_window", "global_local", "random", "local:1+sink:1"])
def test_block_sparse_attention_equals_spec_over_its_mask(kind, causal):
    q, k, v = _qkv(2, 22, 2, 3, seed=43)  # 22 tokens: a partial last block of 4
    module = dt.BlockSparseRingDilatedAttention([8], [1], pattern_type=kind, block_size=4,
                                                local_window_size=8, global_tokens=4,
                                                sparsity_ratio=0.5, backend="ref")
    out = module(q, k, v, is_causal=causal)
    row_ptr, col_idx, head_ptr = module.mask_for(22, 22).to_bsr()
    rows = spec_numpy.bsr_rows(2, 22, 4, row_ptr, col_idx, head_ptr)
    want = _spec(q, k, v, mask=(4, 4, rows), causal=causal)
    assert torch.allclose(out, want, atol=1e-12, rtol=1e-12)


def test_random_pattern_keeps_the_sparsity_ratio_of_blocks():
    module = dt.BlockSparseRingDilatedAttention([8], [1], pattern_type="random",
                                                sparsity_ratio=0.25, block_size=4, seed=9)
    dense = module.mask_for(400, 400).to_dense()
    assert abs(dense.mean() - 0.25) < 0.03
    other = dt.BlockSparseRingDilatedAttention([8], [1], pattern_type="random",
                                               sparsity_ratio=0.25, block_size=4, seed=9)
    assert np.array_equal(other.mask_for(400, 400).to_dense(), dense)


def test_block_sparse_multihead_projects_around_the_sparse_attention():
    torch.manual_seed(44)
    E, H, N = 8, 2, 16
    mha = dt.BlockSparseRingMultiheadDilatedAttention(
        E, H, [8], [1], sparse_config=seed_modules.SparsePatternConfig(
            pattern_type="local_window", block_size=4, local_window_size=8),
        dtype=torch.float64, backend="ref")
    x = torch.randn(2, N, E, dtype=torch.float64)
    out = mha(x, x, x)
    inner = mha.sparse_attention(*(mha_proj(x).reshape(2, N, H, E // H) for mha_proj in
                                   (mha.q_proj, mha.k_proj, mha.v_proj)))
    assert torch.allclose(out, mha.out_proj(inner.reshape(2, N, E)), atol=1e-12)
    seq_first = dt.BlockSparseRingMultiheadDilatedAttention(
        E, H, [8], [1], batch_first=False, pattern_type="local_window", block_size=4,
        local_window_size=8, dtype=torch.float64, backend="ref")
    seq_first.load_state_dict(mha.state_dict())
    xt = x.transpose(0, 1)
    assert torch.allclose(seq_first(xt, xt, xt).transpose(0, 1), out, atol=1e-12)


def test_unknown_pattern_is_refused_at_construction():
    with pytest.raises(dilattn.InvalidArgumentError, match="pattern_type='axial'"):
        dt.BlockSparseRingDilatedAttention([8], [1], pattern_type="axial")


# ---------------------------------------------------------------- factories
@pytest.mark.parametrize("kind,single,multi", [
    ("standard", dt.DilatedAttention, dt.MultiheadDilatedAttention),
    ("improved", dt.ImprovedDilatedAttention, dt.ImprovedMultiheadDilatedAttention),
    ("ring", dt.RingDilatedAttention, dt.RingMultiheadDilatedAttention),
    ("block_sparse_ring", dt.BlockSparseRingDilatedAttention,
     dt.BlockSparseRingMultiheadDilatedAttention),
])
def test_factories_make_the_class_of_each_kind(kind, single, multi):
    a = dt.create_dilated_attention(kind, segment_lengths=[4, 8], dilation_rates=[1, 2])
    assert type(a) is single and a.segment_lengths == [4, 8]
    m = dt.create_multihead_dilated_attention(kind, embed_dim=16, num_heads=4,
                                              segment_lengths=[4, 8], dilation_rates=[1, 2])
    assert type(m) is multi and m.num_heads == 4


def test_auto_chooses_by_sequence_length_and_ranks():
    assert factory.select_kind(8192, ranks=1) == "improved"
    assert factory.select_kind(100_000, ranks=1) == "improved"
    assert factory.select_kind(100_001, ranks=1) == "ring"
    assert factory.select_kind(60_000, ranks=1) == "improved"
    assert factory.select_kind(60_000, ranks=4) == "ring"
    assert factory.select_kind(50_000, ranks=4) == "improved"
    assert type(dt.create_dilated_attention()) is dt.ImprovedDilatedAttention
    assert type(dt.create_dilated_attention("auto", [64], [1], seq_len=200_000)) is \
        dt.RingDilatedAttention
    made = dt.create_multihead_dilated_attention("auto", embed_dim=8, num_heads=2,
                                                 segment_lengths=[64], dilation_rates=[1])
    assert type(made) is dt.ImprovedMultiheadDilatedAttention


def test_auto_modules_compute_exact_attention():
    q, k, v = _qkv(1, 12, 2, 4, seed=45)
    for seq_len in (12, 200_000):
        module = dt.create_dilated_attention("auto", [4, 12], [1, 2], seq_len=seq_len,
                                             backend="ref")
        want = _spec(q, k, v, segments=[4, 12], dilations=[1, 2], heads_mode="groups")
        assert torch.allclose(module(q, k, v), want, atol=1e-12, rtol=1e-12)


def test_factory_refuses_an_unknown_kind_and_unknown_keywords():
    with pytest.raises(ValueError, match="kind='distributed'.*'block_sparse_ring'"):
        dt.create_dilated_attention("distributed")
    with pytest.raises(TypeError, match="segment_lenghts"):
        dt.create_dilated_attention("improved", segment_lenghts=[4])


def test_memory_pool_and_hardware_flags_change_nothing():
    q, k, v = _qkv(1, 16, 2, 4, seed=46)
    plain = dt.ImprovedDilatedAttention([4, 16], [1, 2], backend="ref")(q, k, v)
    flags = dict(enable_memory_pool=True, lightweight_pool=False, enable_profiling=True,
                 use_tf32=False, memory_pool_threshold_mb=1.0, use_pattern_cache=False)
    flagged = dt.ImprovedDilatedAttention([4, 16], [1, 2], backend="ref", **flags)(q, k, v)
    ring = dt.RingDilatedAttention([4, 16], [1, 2], ring_size=4, backend="ref", **flags)
    assert torch.equal(plain, flagged) and torch.equal(plain, ring(q, k, v))


# ---------------------------------------------------------------- refusals
def test_dropout_tensor_masks_and_weights_are_refused():
    with pytest.raises(ValueError, match="dropout=1.5"):
        dt.ImprovedDilatedAttention([4], [1], dropout=1.5)
    with pytest.raises(ValueError, match="dropout=1.0"):
        dt.BlockSparseRingMultiheadDilatedAttention(8, 2, [4], [1], dropout=1.0)
    q, k, v = _qkv(1, 8, 2, 4, seed=47)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        dt.ImprovedDilatedAttention([4], [1])(q, k, v, attention_mask=torch.ones(8, 8))
    mha = dt.ImprovedMultiheadDilatedAttention(8, 2, [1], [4], dtype=torch.float64)
    x = torch.randn(1, 8, 8, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="key_padding_mask"):
        mha(x, key_padding_mask=torch.zeros(1, 8, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="need_weights=True"):
        mha(x, need_weights=True)
    with pytest.raises(NotImplementedError, match="need_weights=True"):
        dt.BlockSparseRingDilatedAttention([4], [1], block_size=4)(
            q, k, v, return_attention_weights=True)


def test_ring_classes_of_several_ranks_need_a_named_group(monkeypatch):
    # Given group= of several ranks the ring classes go to dilattn.torch.ring_attention
    # (test_torch_ring.py runs it on real ranks), which here finds no initialised group.
    monkeypatch.setattr(seed_modules, "process_group_size", lambda group=None: 2)
    with pytest.raises(NotImplementedError, match="2 ranks.*no torch.distributed ring for "
                                                  "block-sparse"):
        dt.BlockSparseRingDilatedAttention([4], [1], block_size=4)
    q, k, v = _qkv(1, 8, 2, 4, seed=48)
    x = q.reshape(1, 8, 8)
    for group in (None, "a group"):
        for module, args in ((dt.RingDilatedAttention([4], [1], group=group), (q, k, v)),
                             (dt.RingMultiheadDilatedAttention(8, 2, [1], [4], group=group,
                                                               dtype=torch.float64), (x,))):
            if group is None:
                with pytest.raises(NotImplementedError, match="process group of 2 ranks; pass "
                                                              "group="):
                    module(*args)
            else:
                with pytest.raises(ValueError, match="ring_attention needs an initialised "
                                                     "torch.distributed process group"):
                    module(*args)
    monkeypatch.setattr(seed_modules, "process_group_size", lambda group=None: 1)
    assert dt.RingDilatedAttention([4], [1], backend="ref")(q, k, v).shape == q.shape


def test_process_group_size_reads_torch_distributed(tmp_path):
    # One gloo rank: a real process group, of one rank, so the ring module computes.
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not built into this torch")
    assert seed_modules.process_group_size() == 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        assert seed_modules.process_group_size() == 1
        q, k, v = _qkv(1, 8, 2, 4, seed=49)
        out = dt.RingDilatedAttention([4], [1], backend="ref")(q, k, v)
        assert torch.allclose(out, _spec(q, k, v, segments=[4], dilations=[1],
                                         heads_mode="groups"), atol=1e-12)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- signatures
def _names(f):
    return [p for p in inspect.signature(f).parameters if p != "self"]


def test_signatures_are_those_of_the_seed_package():
    assert _names(dt.ImprovedDilatedAttention.__init__)[:7] == [
        "segment_lengths", "dilation_rates", "dropout", "use_tf32", "enable_memory_pool",
        "enable_profiling", "lightweight_pool"]
    assert _names(dt.ImprovedMultiheadDilatedAttention.__init__)[:12] == [
        "embed_dim", "num_heads", "dilation_rates", "segment_lengths", "dropout", "bias",
        "layer_norm", "layer_norm_eps", "gamma_init", "device", "dtype", "use_tf32"]
    assert _names(dt.RingDilatedAttention.__init__)[:6] == [
        "segment_lengths", "dilation_rates", "dropout", "ring_size", "device", "dtype"]
    assert _names(dt.BlockSparseRingDilatedAttention.__init__)[:3] == [
        "segment_lengths", "dilation_rates", "sparse_config"]
    assert _names(dt.BlockSparseRingMultiheadDilatedAttention.__init__)[:8] == [
        "embed_dim", "num_heads", "segment_lengths", "dilation_rates", "dropout", "bias",
        "sparse_config", "batch_first"]
    multihead_forward = ["query", "key", "value", "key_padding_mask", "need_weights",
                         "attn_mask", "is_causal", "average_attn_weights"]
    for cls in (dt.ImprovedMultiheadDilatedAttention, dt.RingMultiheadDilatedAttention,
                dt.BlockSparseRingMultiheadDilatedAttention):
        assert _names(cls.forward) == multihead_forward
    assert _names(dt.ImprovedDilatedAttention.forward) == [
        "query", "key", "value", "is_causal", "attention_mask"]
    assert _names(dt.BlockSparseRingDilatedAttention.forward) == [
        "q", "k", "v", "is_causal", "return_attention_weights"]
    assert _names(dt.create_multihead_dilated_attention)[:5] == [
        "kind", "embed_dim", "num_heads", "segment_lengths", "dilation_rates"]
