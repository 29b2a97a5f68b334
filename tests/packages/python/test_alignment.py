"""test_alignment.py - the library takes tensors whose data pointer is a multiple of the element
size only (SPEC 1; others are refused with DILATTN_ERROR_INVALID_VALUE naming the tensor). The
package copies a misaligned input (an array at an odd offset into a byte buffer) to an aligned
one first, so it gives the result of an aligned copy of the same values, on the f64 reference
and on the cpu backend, for numpy (forward, backward, ring, topk masks) and torch; every tensor
that reaches the library is aligned (watched at the library boundary, helpers.WatchedLibrary)."""
import numpy as np
import pytest

import dilattn
from dilattn import mask, ring
from dilattn import _abi
from helpers import import_torch, inputs, watch_library

SIZES = (1, 12, 12, 4, 2, 8)
OPTIONS = dict(segments=[4, 12], dilations=[1, 2], causal=True)


def misaligned(array, offset=1):
    """A copy of array whose data starts `offset` bytes past an aligned address."""
    buffer = bytearray(array.nbytes + 64)
    base = np.frombuffer(buffer, np.uint8)
    start = (-base.ctypes.data) % 64 + offset
    out = np.frombuffer(buffer, array.dtype, count=array.size, offset=start).reshape(array.shape)
    out[...] = array
    assert out.ctypes.data % array.itemsize != 0
    return out


TENSOR_FUNCTIONS = ("dilattn_forward", "dilattn_backward", "dilattn_forward_on_stream",
                    "dilattn_backward_on_stream", "dilattn_ring_forward", "dilattn_ring_backward",
                    "dilattn_mask_topk")
ITEMSIZE = {_abi.DTYPES["f32"]: 4, _abi.DTYPES["f64"]: 8, _abi.DTYPES["f16"]: 2,
            _abi.DTYPES["bf16"]: 2}


@pytest.fixture
def check_aligned(monkeypatch):
    """Watches the library; calling the result asserts that every tensor that reached it so
    far was aligned (and that some did)."""
    watched = watch_library(monkeypatch, *TENSOR_FUNCTIONS)
    return lambda: _assert_aligned(watched.calls)


def _assert_aligned(calls):
    seen = 0
    for name, args in calls:
        for arg in args:
            tensor = getattr(arg, "_obj", None)  # C.byref(view) keeps the view as _obj
            if isinstance(tensor, _abi.Tensor):
                seen += 1
                assert tensor.data % ITEMSIZE[tensor.dtype] == 0, (
                    f"{name} got a tensor at {tensor.data:#x}, not a multiple of "
                    f"{ITEMSIZE[tensor.dtype]}")
    assert seen > 0, "no tensor reached the library"


@pytest.mark.parametrize("backend,dtype", [("ref", np.float64), ("cpu", np.float32),
                                           ("cpu", np.float16)])
def test_misaligned_inputs_give_the_aligned_result(backend, dtype, check_aligned):
    q, k, v, do = inputs(SIZES, seed=21, dtype=dtype)
    o, lse = dilattn.forward(q, k, v, backend=backend, **OPTIONS)
    grads = dilattn.backward(q, k, v, o, lse, do, backend=backend, **OPTIONS)
    # Every input misaligned, by 1 byte and by half an element.
    for offset in (1, q.itemsize // 2):
        mq, mk, mv, mdo, mo = (misaligned(x, offset) for x in (q, k, v, do, o))
        mlse = misaligned(lse, offset)
        got_o, got_lse = dilattn.forward(mq, mk, mv, backend=backend, **OPTIONS)
        assert np.array_equal(got_o, o) and np.array_equal(got_lse, lse)
        got = dilattn.backward(mq, mk, mv, mo, mlse, mdo, backend=backend, **OPTIONS)
        for g, w in zip(got, grads):
            assert np.array_equal(g, w)
    check_aligned()


def test_misaligned_strided_view_is_copied_too(check_aligned):
    # A non-contiguous view (every other head) of a misaligned buffer.
    q, k, v, _ = inputs((1, 12, 12, 8, 2, 8), seed=22)
    wide = misaligned(q)
    o, lse = dilattn.forward(q[:, :, ::2], k, v, backend="ref")
    got_o, got_lse = dilattn.forward(wide[:, :, ::2], k, v, backend="ref")
    assert np.array_equal(got_o, o) and np.array_equal(got_lse, lse)
    check_aligned()


def test_misaligned_big_endian_input_is_copied_once_to_native_aligned(check_aligned):
    q, k, v, _ = inputs((1, 12, 12, 2, 2, 4), seed=25)
    o, lse = dilattn.forward(q, k, v, backend="ref")
    big_endian = misaligned(q.astype(">f8"), 3)
    got_o, got_lse = dilattn.forward(big_endian, k, v, backend="ref")
    assert np.array_equal(got_o, o) and np.array_equal(got_lse, lse)
    check_aligned()


def test_misaligned_ring_shards_and_topk_inputs(check_aligned):
    q, k, v, _ = inputs((1, 12, 12, 2, 2, 4), seed=23)
    want = mask.topk(q, k, 4, 1).to_dense()
    assert np.array_equal(mask.topk(misaligned(q), misaligned(k), 4, 1).to_dense(), want)

    def rank_main(comm):
        rows = ring.shard_rows(12, 2, comm.rank)
        aligned = ring.ring_forward(comm, q[:, rows], k[:, rows], v[:, rows], seqlen=12,
                                    backend="ref")
        shards = (misaligned(np.ascontiguousarray(x[:, rows])) for x in (q, k, v))
        return aligned, ring.ring_forward(comm, *shards, seqlen=12, backend="ref")

    for (o, lse), (got_o, got_lse) in ring.run_threads(2, rank_main):
        assert np.array_equal(got_o, o) and np.array_equal(got_lse, lse)
    check_aligned()


def test_torch_misaligned_tensors_give_the_aligned_result(check_aligned):
    torch = import_torch()
    import dilattn.torch as dt
    q, k, v, do = inputs(SIZES, seed=24)

    def leaf(x, offset):
        t = torch.frombuffer(misaligned(x, offset).data, dtype=torch.float64).reshape(x.shape)
        assert t.data_ptr() % 8 != 0
        return t.requires_grad_()

    want = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    o = dt.attention(*want, backend="ref", **OPTIONS)
    o.backward(torch.tensor(do))
    for offset in (1, 4):
        got = [leaf(x, offset) for x in (q, k, v)]
        got_o = dt.attention(*got, backend="ref", **OPTIONS)
        assert torch.equal(got_o, o)
        got_o.backward(torch.frombuffer(misaligned(do, offset).data,
                                        dtype=torch.float64).reshape(do.shape))
        for g, w in zip(got, want):
            assert torch.equal(g.grad, w.grad)
    check_aligned()
