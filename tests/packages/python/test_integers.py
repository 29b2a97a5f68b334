"""test_integers.py - every integer a public function hands to the C library is checked against
the range of its C type before the call, never wrapped: a value outside it raises
dilattn.InvalidArgumentError that is also an OverflowError, a float, a bool or a string where an
integer belongs raises one that is also a TypeError, both with status DILATTN_ERROR_INVALID_VALUE
and a message naming the argument and its value. numpy integers are integers."""
import numpy as np
import pytest

import dilattn
from dilattn import mask, ring
from helpers import import_torch, inputs

SIZES = (1, 8, 8, 2, 1, 4)
Q, K, V, DO = inputs(SIZES, seed=5)
DILATED = dict(segments=[4], dilations=[1], backend="ref")
O, LSE = dilattn.forward(Q, K, V, **DILATED)
POOL = dilattn.Pool(4096)

# Values outside each C type (SPEC 1 sizes are int64_t; counts of ranks and timeouts int32_t;
# bytes size_t; a seed uint64_t; an address uintptr_t).
OUT_OF_RANGE = {
    "int64": [2**63, -2**63 - 1, 2**64 + 4],
    "int32": [2**31, -2**31 - 1, 2**32 + 2, 2**63, 2**64 + 4],
    "uint64": [-1, 2**64, 2**64 + 4],
}
OUT_OF_RANGE["size_t"] = OUT_OF_RANGE["uint64"]
OUT_OF_RANGE["address"] = OUT_OF_RANGE["uint64"]
NOT_INTEGERS = [4.0, 4.5, np.float64(4.0), True, np.True_, "4"]


def _threads_ring_forward(seqlen):
    (comm,) = ring.Comm.threads(1)
    with comm:
        return ring.ring_forward(comm, Q, K, V, seqlen=seqlen, backend="ref")


def _threads_ring_backward(seqlen):
    (comm,) = ring.Comm.threads(1)
    with comm:
        return ring.ring_backward(comm, Q, K, V, O, LSE, DO, seqlen=seqlen, backend="ref")


# (the name the message gives, the C type, a call that is valid with a good value)
ARGUMENTS = {
    "forward segments": ("segments[1]", "int64",
                         lambda x: dilattn.forward(Q, K, V, segments=[4, x], dilations=[1, 1],
                                                   backend="ref")),
    "forward dilations": ("dilations[0]", "int64",
                          lambda x: dilattn.forward(Q, K, V, segments=[4], dilations=[x],
                                                    backend="ref")),
    "forward segments scalar": ("segments[0]", "int64",
                                lambda x: dilattn.forward(Q, K, V, segments=x, dilations=1,
                                                          backend="ref")),
    "backward segments": ("segments[0]", "int64",
                          lambda x: dilattn.backward(Q, K, V, O, LSE, DO, segments=[x],
                                                     dilations=[1], backend="ref")),
    "Pool arena_bytes": ("arena_bytes", "size_t", lambda x: dilattn.Pool(x)),
    "Pool min_block_bytes": ("min_block_bytes", "size_t",
                             lambda x: dilattn.Pool(4096, min_block_bytes=x)),
    "Pool max_arenas": ("max_arenas", "int32",
                        lambda x: dilattn.Pool(4096, growth="grow", max_arenas=x)),
    "Pool device_index": ("device_index", "int32",
                          lambda x: dilattn.Pool(4096, device="cuda", device_index=x)),
    "Pool.alloc": ("nbytes", "size_t", lambda x: POOL.alloc(x)),
    "Pool.free": ("address", "address", lambda x: POOL.free(x)),
    "from_bsr seqlen_q": ("seqlen_q", "int64", lambda x: mask.from_bsr([0, 1], [0], x, 4)),
    "from_bsr block_q": ("block_q", "int64", lambda x: mask.from_bsr([0, 1], [0], 4, x)),
    "from_bsr seqlen_k": ("seqlen_k", "int64",
                          lambda x: mask.from_bsr([0, 1], [0], 4, 4, seqlen_k=x)),
    "from_bsr block_k": ("block_k", "int64",
                         lambda x: mask.from_bsr([0, 1], [0], 4, 4, block_k=x)),
    "from_bsr row_ptr": ("row_ptr[1]", "int64", lambda x: mask.from_bsr([0, x], [0], 4, 4)),
    "from_bsr col_idx": ("col_idx[0]", "int64", lambda x: mask.from_bsr([0, 1], [x], 4, 4)),
    "from_bsr head_ptr": ("head_ptr[1]", "int64",
                          lambda x: mask.from_bsr([0, 1], [0], 4, 4, head_ptr=[0, x])),
    "pattern seqlen_q": ("seqlen_q", "int64", lambda x: mask.pattern("local:1", x, 4)),
    "pattern block_q": ("block_q", "int64", lambda x: mask.pattern("local:1", 8, x)),
    "pattern seqlen_k": ("seqlen_k", "int64",
                         lambda x: mask.pattern("local:1", 8, 4, seqlen_k=x)),
    "pattern block_k": ("block_k", "int64", lambda x: mask.pattern("local:1", 8, 4, block_k=x)),
    "local window_blocks": ("window_blocks", "int64", lambda x: mask.local(8, 4, x)),
    "sink global_blocks": ("global_blocks", "int64", lambda x: mask.sink(8, 4, x)),
    "strided stride": ("stride", "int64", lambda x: mask.strided(8, 4, x)),
    "random num_heads": ("num_heads", "int64", lambda x: mask.random(8, 4, 0.5, num_heads=x)),
    "random seed": ("seed", "uint64", lambda x: mask.random(8, 4, 0.5, seed=x)),
    "hierarchical stride": ("levels[0][0]", "int64",
                            lambda x: mask.hierarchical(8, 4, [(x, 4, 4)])),
    "hierarchical block_size": ("levels[1][2]", "int64",
                                lambda x: mask.hierarchical(8, 4, [(1, 4, 4), (2, -1, x)])),
    "topk block_q": ("block_q", "int64", lambda x: mask.topk(Q, K, x, 1)),
    "topk k_keep": ("k_keep", "int64", lambda x: mask.topk(Q, K, 4, x)),
    "topk block_k": ("block_k", "int64", lambda x: mask.topk(Q, K, 4, 1, block_k=x)),
    "Comm.threads num_ranks": ("num_ranks", "int32", lambda x: ring.Comm.threads(x)),
    "Comm.threads timeout_ms": ("timeout_ms", "int32",
                                lambda x: ring.Comm.threads(2, timeout_ms=x)),
    "Comm.mpi timeout_ms": ("timeout_ms", "int32", lambda x: ring.Comm.mpi(timeout_ms=x)),
    "shard_rows seqlen": ("seqlen", "int64", lambda x: ring.shard_rows(x, 2, 0)),
    "shard_rows num_ranks": ("num_ranks", "int32", lambda x: ring.shard_rows(10, x, 0)),
    "shard_rows rank": ("rank", "int32", lambda x: ring.shard_rows(10, 2, x)),
    "ring_forward seqlen": ("seqlen", "int64", _threads_ring_forward),
    "ring_backward seqlen": ("seqlen", "int64", _threads_ring_backward),
    "ring_forward segments": ("segments[0]", "int64",
                              lambda x: ring.ring_forward(None, Q, K, V, seqlen=8, segments=[x],
                                                          dilations=[1])),
    "run_threads num_ranks": ("num_ranks", "int32", lambda x: ring.run_threads(x, lambda c: 0)),
    "run_threads timeout_ms": ("timeout_ms", "int32",
                               lambda x: ring.run_threads(1, lambda c: 0, timeout_ms=x)),
}


def _raises(kind, name, call, value):
    with pytest.raises(dilattn.InvalidArgumentError) as info:
        call(value)
    e = info.value
    assert isinstance(e, kind), (type(e).__mro__, e)
    assert e.status_name == "DILATTN_ERROR_INVALID_VALUE", e
    assert f"{name}={value!r}" in e.message, e.message


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
def test_out_of_range_integers_raise_overflow_naming_the_argument(argument):
    name, ctype, call = ARGUMENTS[argument]
    for value in OUT_OF_RANGE[ctype]:
        _raises(OverflowError, name, call, value)
    if ctype in ("int64", "int32"):                 # a numpy integer past the type too
        _raises(OverflowError, name, call, np.uint64(2**64 - 1))


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
def test_floats_bools_and_strings_are_not_integers(argument):
    name, _, call = ARGUMENTS[argument]
    for value in NOT_INTEGERS:
        _raises(TypeError, name, call, value)


def test_the_reported_cases_are_refused_not_wrapped():
    # Each of these used to run with the value modulo 2**64 or 2**32.
    _raises(OverflowError, "segments[0]",
            lambda x: dilattn.forward(Q, K, V, segments=[x], dilations=[1]), 2**64 + 4)
    _raises(OverflowError, "num_ranks", lambda x: ring.shard_rows(10, x, 1), 2**32 + 2)
    _raises(OverflowError, "timeout_ms", lambda x: ring.Comm.threads(2, timeout_ms=x), 2**32 + 1)
    _raises(OverflowError, "arena_bytes", dilattn.Pool, 2**64 + 4096)
    _raises(OverflowError, "nbytes", POOL.alloc, 2**64 + 256)
    assert POOL.stats().live_blocks == 0


def test_numpy_integers_are_integers():
    want = dilattn.forward(Q, K, V, **DILATED)
    got = dilattn.forward(Q, K, V, segments=[np.int16(4)], dilations=np.array([1], np.uint8),
                          backend="ref")
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert ring.shard_rows(np.int64(10), np.uint32(3), np.int8(2)).tolist() == [6, 7, 8, 9]
    with dilattn.Pool(np.uint64(4096)) as pool:
        address = pool.alloc(np.int32(300))
        assert pool.stats().bytes_in_use == 512
        pool.free(np.uint64(address))
    m = mask.from_bsr(np.array([0, 1, 2], np.uint16), np.array([0, 1], np.int8), np.int64(8),
                      np.uint8(4))
    assert m.to_dense().tolist() == [[[True, False], [False, True]]]


def test_a_wrapped_address_does_not_free_the_block_it_wraps_to():
    with dilattn.Pool(4096) as pool:
        address = pool.alloc(256)
        _raises(OverflowError, "address", pool.free, address + 2**64)
        assert pool.stats().live_blocks == 1
        pool.free(address)
        assert pool.stats().live_blocks == 0


def test_in_range_values_reach_the_library_unchanged():
    # The largest values that fit go through to the library, which answers for them.
    with pytest.raises(dilattn.Error) as info:
        POOL.alloc(2**64 - 1)
    assert info.value.status_name == "DILATTN_ERROR_POOL_TOO_LARGE", info.value
    seeded = mask.random(64, 4, 0.5, seed=2**64 - 1).to_dense()
    assert np.array_equal(seeded, mask.random(64, 4, 0.5, seed=np.uint64(2**64 - 1)).to_dense())
    assert not np.array_equal(seeded, mask.random(64, 4, 0.5, seed=2**63 - 1).to_dense())
    for comm in ring.Comm.threads(2, timeout_ms=2**31 - 1):
        comm.close()


def test_bsr_arrays_of_unsigned_and_float_dtypes():
    # uint64 entries past int64 would turn negative in a cast; float entries would truncate.
    _raises(OverflowError, "row_ptr[1]",
            lambda x: mask.from_bsr(np.array([0, x], np.uint64), [0], 4, 4), 2**63)
    with pytest.raises(TypeError, match=r"col_idx has dtype float64"):
        mask.from_bsr([0, 1], np.array([0.0]), 4, 4)
    with pytest.raises(TypeError, match=r"row_ptr has dtype bool"):
        mask.from_bsr(np.array([False, True]), [0], 4, 4)


def test_torch_attention_checks_its_integers():
    torch = import_torch()
    import dilattn.torch as dt
    q, k, v = (torch.tensor(x) for x in (Q, K, V))
    _raises(OverflowError, "segments[0]",
            lambda x: dt.attention(q, k, v, segments=[x], dilations=[1]), 2**64 + 4)
    _raises(TypeError, "dilations[0]",
            lambda x: dt.attention(q, k, v, segments=[4], dilations=[x]), 1.0)
    _raises(OverflowError, "segments[1]",
            lambda x: dt.DilatedAttention([4, x], [1, 1]), 2**63)
    # A 0-d integer tensor is an integer; a 0-d bool tensor is not.
    o = dt.attention(q, k, v, segments=[torch.tensor(4)], dilations=[1], backend="ref")
    assert torch.equal(o, torch.tensor(O))
    _raises(TypeError, "segments[0]",
            lambda x: dt.attention(q, k, v, segments=[x], dilations=[1]), torch.tensor(True))
