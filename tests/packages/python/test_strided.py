"""test_strided.py - numpy views reach the library without copies when the C ABI can describe
them (strides in elements, >= 0; SPEC 1), and give the same bits as contiguous copies; other
arrays (negative strides, byte-swapped) are copied and still give the right answer."""
import numpy as np

import dilattn
from dilattn import _numpy
from helpers import inputs

OPTIONS = dict(segments=[4, 8], dilations=[1, 2], causal=True, backend="ref")


def _contiguous_result(q, k, v):
    return dilattn.forward(*(np.ascontiguousarray(x) for x in (q, k, v)), **OPTIONS)


def test_views_are_passed_without_copies():
    big = np.random.default_rng(0).uniform(-1, 1, (2, 8, 6, 10))
    q = big[:, :, ::2, 1:5]                        # every other head, a window of D
    layout = np.random.default_rng(1).uniform(-1, 1, (2, 3, 8, 4))
    k = layout.transpose(0, 2, 1, 3)               # stored [B, H, N, D], viewed [B, N, H, D]
    for array in (q, k):
        assert _numpy.as_array("x", array) is array
        t = _numpy.view("x", array)
        assert t.data == array.ctypes.data
        assert list(t.strides) == [s // 8 for s in array.strides]
    assert list(_numpy.view("q", q).strides) == [480, 60, 20, 1]


def test_strided_views_give_the_bits_of_contiguous_copies():
    base_q, base_k, base_v, _ = inputs((2, 16, 16, 6, 3, 8), seed=12)
    q = base_q[:, :, ::2, 2:6]                                       # [2, 16, 3, 4]
    k = base_k.transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3)[:, :, :, :4]
    v = np.broadcast_to(base_v[:1, :, :, :4], (2, 16, 3, 4))        # batch stride 0
    o, lse = dilattn.forward(q, k, v, **OPTIONS)
    o_c, lse_c = _contiguous_result(q, k, v)
    assert np.array_equal(o, o_c) and np.array_equal(lse, lse_c)
    do = np.ones_like(o)
    got = dilattn.backward(q, k, v, o, lse, do, **OPTIONS)
    want = dilattn.backward(*(np.ascontiguousarray(x) for x in (q, k, v, o, lse, do)),
                            **OPTIONS)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def test_arrays_the_abi_cannot_view_are_copied():
    q, k, v, _ = inputs((1, 16, 16, 2, 1, 4), seed=13)
    reversed_q = q[:, ::-1]                                          # negative stride
    swapped_k = k.astype(k.dtype.newbyteorder(">"))                 # big-endian bytes
    assert _numpy.as_array("q", reversed_q) is not reversed_q
    o, lse = dilattn.forward(reversed_q, swapped_k, v, **OPTIONS)
    o_c, lse_c = _contiguous_result(reversed_q.copy(), k, v)
    assert np.array_equal(o, o_c) and np.array_equal(lse, lse_c)
