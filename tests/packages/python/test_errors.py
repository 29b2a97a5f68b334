"""test_errors.py - every failure is a dilattn.Error subclass with the C status (SPEC 7), its
name, and the library's message naming the argument and value; checks made in Python raise
the same classes."""
import numpy as np
import pytest

import dilattn
from helpers import inputs


def _qkv(sizes=(1, 8, 8, 2, 1, 4), dtype=np.float32):
    return inputs(sizes, seed=11, dtype=dtype)[:3]


def _raises(cls, status_name, call, *words):
    with pytest.raises(cls) as info:
        call()
    e = info.value
    assert isinstance(e, dilattn.Error)
    assert e.status_name == status_name
    assert e.status == dilattn._abi.STATUS[status_name]
    assert str(e) == f"{status_name}: {e.message}"
    for word in words:
        assert word in e.message, e.message
    return e


def test_dtype_mismatch_between_q_and_k():
    q, k, v = _qkv()
    e = _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_DTYPE_MISMATCH",
                lambda: dilattn.forward(q, k.astype(np.float64), v, backend="ref"))
    assert isinstance(e, ValueError)


def test_heads_not_divisible():
    q, k, v = _qkv((1, 8, 8, 3, 2, 4))
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_HEADS_NOT_DIVISIBLE",
            lambda: dilattn.forward(q, k, v))


def test_dilation_larger_than_segment_names_the_dilation():
    q, k, v = _qkv()
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_BAD_DILATION",
            lambda: dilattn.forward(q, k, v, segments=[4], dilations=[5]), "5")


def test_nan_scale():
    q, k, v = _qkv()
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_BAD_SCALE",
            lambda: dilattn.forward(q, k, v, scale=float("nan")))


def test_dilated_needs_equal_sequence_lengths():
    q, k, v = _qkv((1, 8, 6, 2, 1, 4))
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_SEQLEN_MISMATCH",
            lambda: dilattn.forward(q, k, v, segments=[4], dilations=[1]))


def test_groups_mode_with_fewer_heads_than_branches():
    q, k, v = _qkv()
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_GROUPS_TOO_FEW_HEADS",
            lambda: dilattn.forward(q, k, v, segments=[2, 4, 8], dilations=[1, 1, 1],
                                    heads_mode="groups"))


def test_bad_pattern_term_is_named():
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.mask.pattern("local:2+bogus:1", 16, 4), "bogus")


def test_unsorted_bsr_mask_is_rejected():
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_BAD_MASK",
            lambda: dilattn.mask.from_bsr([0, 2, 3], [1, 0, 1], 8, 4))


def test_mask_of_other_size_than_the_problem():
    q, k, v = _qkv()
    mask = dilattn.mask.pattern("dense", 16, 4)
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_SHAPE_MISMATCH",
            lambda: dilattn.forward(q, k, v, mask=mask))


def test_python_side_checks_use_the_same_classes():
    q, k, v = _qkv()
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.forward(q, k, v, segments=[4]), "dilations")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.forward(q, k, v, segments=[4], dilations=[1],
                                    mask=dilattn.mask.pattern("dense", 8, 4)), "mask")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.forward(q, k, v, backend="tpu"), "tpu")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_INVALID_VALUE",
            lambda: dilattn.forward(q, k, v, segments=[4], dilations=[1], heads_mode="x"), "'x'")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_SHAPE_MISMATCH",
            lambda: dilattn.forward(q[0], k, v), "(8, 2, 4)")
    _raises(dilattn.InvalidArgumentError, "DILATTN_ERROR_DTYPE_MISMATCH",
            lambda: dilattn.forward(q.astype(np.int32), k, v), "int32")


def test_backend_this_build_lacks():
    if dilattn.backend_available("cuda"):
        pytest.skip("this build has a usable cuda backend")
    q, k, v = _qkv()
    e = _raises(dilattn.DeviceError, "DILATTN_ERROR_DEVICE_NOT_BUILT",
                lambda: dilattn.forward(q, k, v, backend="cuda"), "cuda")
    assert isinstance(e, RuntimeError)
