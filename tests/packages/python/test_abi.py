"""test_abi.py - the ctypes declarations (dilattn/_abi.py) agree with the C headers: every
function of lib/dilattn.h, lib/dilattn_mask.h, lib/dilattn_pool.h and lib/dilattn_ring.h is declared with the
header's parameter count, the enum values match, and the struct sizes equal the sizes the
library itself writes into struct_size (so a field added to a struct fails here)."""
import ctypes as C
import os
import re

from dilattn import _abi
from helpers import REPO

HEADERS = [os.path.join(REPO, "lib", name) for name in ("dilattn.h", "dilattn_mask.h",
                                                                "dilattn_pool.h", "dilattn_ring.h")]


def _header_text():
    text = "".join(open(path).read() for path in HEADERS)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_functions():
    """name -> parameter count of every DILATTN_API function."""
    found = {}
    for name, params in re.findall(r"DILATTN_API\s+[^;(]*?\b(dilattn_\w+)\s*\(([^)]*)\)\s*;",
                                   _header_text()):
        params = params.strip()
        found[name] = 0 if params in ("", "void") else params.count(",") + 1
    return found


def header_enum_values():
    return {name: int(value) for name, value in
            re.findall(r"\b(DILATTN_[A-Z0-9_]+)\s*=\s*(\d+)", _header_text())}


def test_every_header_function_is_declared_with_its_parameter_count():
    functions = header_functions()
    assert len(functions) > 30, "the header parser found too few functions"
    assert sorted(functions) == sorted(_abi.SIGNATURES)
    for name, count in functions.items():
        assert len(_abi.SIGNATURES[name][0]) == count, name


def test_enum_values_match_the_header():
    values = header_enum_values()
    for status, name in enumerate(_abi.STATUS_NAMES):
        assert values[name] == status
    assert values["DILATTN_STATUS_COUNT_"] == len(_abi.STATUS_NAMES)
    for table, prefix in ((_abi.DTYPES, "DILATTN_"), (_abi.HEAD_MODES, "DILATTN_HEADS_"),
                          (_abi.BACKENDS, "DILATTN_BACKEND_")):
        for name, value in table.items():
            assert values[prefix + name.upper()] == value
    assert values["DILATTN_DEVICE_CPU"] == _abi.DEVICE_CPU
    assert values["DILATTN_DEVICE_CUDA"] == _abi.DEVICE_CUDA
    for name, value in _abi.POOL_GROWTH.items():
        assert values["DILATTN_POOL_" + name.upper()] == value
    assert values["DILATTN_INDEX_INT64"] == _abi.INDEX_INT64
    for name, value in _abi.RING_SPLITS.items():
        assert values["DILATTN_RING_" + name.upper()] == value


def test_struct_sizes_and_fields_match_the_library():
    L = _abi.lib()
    t = L.dilattn_tensor_contiguous(None, _abi.DTYPES["f16"], 2, 3, 4, 5)
    assert t.struct_size == C.sizeof(_abi.Tensor)
    assert t.dtype == _abi.DTYPES["f16"] and t.device == _abi.DEVICE_CPU
    assert list(t.shape) == [2, 3, 4, 5] and list(t.strides) == [60, 20, 5, 1]
    s = L.dilattn_shape_make(1, 2, 3, 4, 5, 6)
    assert s.struct_size == C.sizeof(_abi.Shape)
    assert (s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim) == (1, 2, 3, 4, 5, 6)
    from dilattn import mask
    m = mask.local(12, 4, 0, seqlen_k=8, block_k=2)
    view, nnz = m._view()
    assert view.struct_size == C.sizeof(_abi.BsrView)
    assert (view.seqlen_q, view.seqlen_k, view.block_q, view.block_k) == (12, 8, 4, 2)
    assert view.index_type == _abi.INDEX_INT64 and view.num_heads == 1 and nnz > 0
    call = L.dilattn_call_options_make()
    assert call.struct_size == C.sizeof(_abi.CallOptions)
    assert (call.dropout_seed, call.dropout_offset) == (0, 0)
    options = _abi.PoolOptions()
    assert L.dilattn_pool_options_init(C.byref(options), 4096) == _abi.SUCCESS
    assert options.struct_size == C.sizeof(_abi.PoolOptions)
    assert (options.arena_bytes, options.min_block_bytes, options.growth) == (4096, 256, 0)


def test_pool_stats_struct_has_the_header_layout():
    # The library does not report sizeof(dilattn_pool_stats); it refuses a struct_size that
    # stops before largest_free_block, so the offset of free_blocks is checked by that bound.
    L = _abi.lib()
    options = _abi.PoolOptions()
    L.dilattn_pool_options_init(C.byref(options), 4096)
    pool = C.c_void_p()
    assert L.dilattn_pool_create_host(C.byref(pool), C.byref(options)) == _abi.SUCCESS
    try:
        stats = _abi.PoolStats()
        stats.struct_size = _abi.PoolStats.free_blocks.offset - 1
        assert L.dilattn_pool_get_stats(pool, C.byref(stats)) == _abi.STATUS[
            "DILATTN_ERROR_INVALID_VALUE"]
        stats.struct_size = C.sizeof(_abi.PoolStats)
        assert L.dilattn_pool_get_stats(pool, C.byref(stats)) == _abi.SUCCESS
        assert (stats.num_arenas, stats.arena_bytes_total, stats.largest_free_block) == (1, 4096,
                                                                                         4096)
        assert list(stats.free_blocks) == [1 if k == 12 else 0 for k in range(64)]
    finally:
        L.dilattn_pool_destroy(pool)
