"""test_torch_sinks.py - dilattn.torch.attention with sinks= (docs/spec.md section 10.3, backend
"ref"): the forward equals the numpy API's bit for bit and the independent numpy transcription
(tests/common/spec_numpy.py) within 1e-10; gradcheck in f64 over q, k, v and the sinks
together; the sinks' gradient equals the numpy API's d_sinks bit for bit; a very negative sink
is no sink; the cpu backend against ref (O and every gradient); the refusals (a sinks tensor
that is not [H]). CUDA tensors: test_torch_cuda.py.

Kinds: dense GQA with Nq != Nk, causal with keyless rows (Nq > Nk, bottom-right), dilated in
each head mode (one sink per row after the merge of the branches, SPEC 10.3), a packed batch.
Both sides of the bitwise comparisons run the same library call on the same f64 inputs."""
import numpy as np
import pytest

from helpers import import_torch, spec_numpy

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402

F64_TOL = 1e-10

# (sizes (B, Nq, Nk, H, Hkv, D), options)
CASES = {
    "dense_gqa_nq_lt_nk": ((2, 5, 7, 4, 2, 3), dict(scale=1.3)),
    "dense_causal_keyless_rows": ((1, 7, 4, 2, 1, 3), dict(causal=True)),
    "dilated_mod_causal": ((1, 11, 11, 3, 1, 2),
                           dict(segments=[4, 8], dilations=[1, 2], heads_mode="mod",
                                causal=True)),
    "dilated_block": ((1, 12, 12, 4, 2, 2),
                      dict(segments=[6, 12], dilations=[2, 3], heads_mode="block")),
    "dilated_groups": ((1, 16, 16, 3, 3, 2),
                       dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups")),
}


def _arrays(sizes, seed):
    B, Nq, Nk, H, Hkv, D = sizes
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, Nq, H, D)), rng.uniform(-1, 1, (B, Nk, Hkv, D)),
            rng.uniform(-1, 1, (B, Nk, Hkv, D)), rng.uniform(-1, 1, (B, Nq, H, D)),
            rng.uniform(-0.5, 1.5, H))


def _leaves(*arrays):
    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_equals_the_numpy_api_and_the_spec(case):
    sizes, options = CASES[case]
    q, k, v, _, sinks = _arrays(sizes, len(case))
    o, lse = dt.attention(*_leaves(q, k, v), sinks=torch.tensor(sinks), backend="ref",
                          return_lse=True, **options)
    o_np, lse_np = dilattn.forward(q, k, v, sinks=sinks, backend="ref", **options)
    assert np.array_equal(o.detach().numpy(), o_np)
    assert np.array_equal(lse.numpy(), lse_np)
    spec_options = {key: value for key, value in options.items() if key != "scale"}
    o_want, lse_want = spec_numpy.forward(q, k, v, scale=options.get("scale"), sinks=sinks,
                                          **spec_options)
    assert spec_numpy.within(o_np, o_want, F64_TOL, F64_TOL)
    assert spec_numpy.within(lse_np, lse_want, F64_TOL, F64_TOL)
    # The sinks take part: without them the result differs in every row.
    plain = dt.attention(*_leaves(q, k, v), backend="ref", **options)
    assert not torch.equal(plain, o)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck_f64_over_q_k_v_and_sinks(case):
    sizes, options = CASES[case]
    q, k, v, sinks = _leaves(*(a for i, a in enumerate(_arrays(sizes, 7)) if i != 3))
    assert torch.autograd.gradcheck(
        lambda q, k, v, s: dt.attention(q, k, v, sinks=s, backend="ref", **options),
        (q, k, v, sinks), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_equal_the_numpy_api(case):
    sizes, options = CASES[case]
    q, k, v, do, sinks = _arrays(sizes, 11)
    tq, tk, tv, ts = _leaves(q, k, v, sinks)
    o = dt.attention(tq, tk, tv, sinks=ts, backend="ref", **options)
    o.backward(torch.tensor(do))
    o_np, lse_np = dilattn.forward(q, k, v, sinks=sinks, backend="ref", **options)
    wants = dilattn.backward(q, k, v, o_np, lse_np, do, sinks=sinks, backend="ref", **options)
    for name, got, want in zip(("dq", "dk", "dv", "d_sinks"), (tq, tk, tv, ts), wants):
        assert got.grad.shape == want.shape, name
        assert np.array_equal(got.grad.numpy(), want), name
    assert np.all(np.abs(wants[3]) > 1e-6)  # a gradient that could not be mistaken for none


def test_packed_batch_with_sinks_equals_the_numpy_api():
    cu_q, cu_k = [0, 4, 4, 9], [0, 5, 7, 7]   # sequence 2 has rows and no key: lse = sink
    q, k, v, do, sinks = _arrays((1, 9, 7, 2, 1, 3), 5)
    packed = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, backend="ref")
    tq, tk, tv, ts = _leaves(q[0], k[0], v[0], sinks)
    o, lse = dt.attention(tq, tk, tv, sinks=ts, return_lse=True, **packed)
    o.backward(torch.tensor(do[0]))
    o_np, lse_np = dilattn.forward(q[0], k[0], v[0], sinks=sinks, **packed)
    assert np.array_equal(o.detach().numpy(), o_np) and np.array_equal(lse.numpy(), lse_np)
    assert np.array_equal(lse_np[:, 4:], np.repeat(sinks[:, None], 5, axis=1))
    wants = dilattn.backward(q[0], k[0], v[0], o_np, lse_np, do[0], sinks=sinks, **packed)
    for got, want in zip((tq, tk, tv, ts), wants):
        assert np.array_equal(got.grad.numpy(), want)


def test_a_very_negative_sink_is_no_sink():
    sizes, options = CASES["dilated_mod_causal"]
    q, k, v, do, _ = _arrays(sizes, 3)
    tq, tk, tv = _leaves(q, k, v)
    plain, plain_lse = dt.attention(tq, tk, tv, backend="ref", return_lse=True, **options)
    sinks = torch.full((sizes[3],), -1e4, dtype=torch.float64, requires_grad=True)
    o, lse = dt.attention(*_leaves(q, k, v), sinks=sinks, backend="ref", return_lse=True,
                          **options)
    assert spec_numpy.within(o.detach().numpy(), plain.detach().numpy(), 1e-14, 1e-14)
    assert spec_numpy.within(lse.numpy(), plain_lse.numpy(), 1e-14, 1e-14)
    o.backward(torch.tensor(do))
    assert np.all(np.abs(sinks.grad.numpy()) < 1e-300)


def test_sinks_gradient_in_their_dtype_and_only_when_required():
    sizes, options = CASES["dense_gqa_nq_lt_nk"]
    q, k, v, do, sinks = _arrays(sizes, 13)
    tq, tk, tv = _leaves(q, k, v)
    s32 = torch.tensor(sinks, dtype=torch.float32, requires_grad=True)
    dt.attention(tq, tk, tv, sinks=s32, backend="ref", **options).backward(torch.tensor(do))
    assert s32.grad.dtype == torch.float32 and s32.grad.shape == (sizes[3],)
    s32_as_f64 = s32.detach().double().numpy()
    o_np, lse_np = dilattn.forward(q, k, v, sinks=s32_as_f64, backend="ref", **options)
    d_sinks = dilattn.backward(q, k, v, o_np, lse_np, do, sinks=s32_as_f64, backend="ref",
                               **options)[3]
    assert np.array_equal(s32.grad.numpy(), d_sinks.astype(np.float32))
    fixed = torch.tensor(sinks)  # no requires_grad: q still gets its gradient
    tq, tk, tv = _leaves(q, k, v)
    dt.attention(tq, tk, tv, sinks=fixed, backend="ref", **options).backward(torch.tensor(do))
    assert fixed.grad is None and tq.grad is not None


@pytest.mark.parametrize("sinks,message", [
    (torch.zeros(3, dtype=torch.float64), "sinks has shape (3,): expected [2]"),
    (torch.zeros(1, 2, dtype=torch.float64), "sinks has shape (1, 2): expected [2]"),
    (torch.tensor(0.5, dtype=torch.float64), "sinks has shape (): expected [2]"),
    ([0.5, 0.5], "sinks is a list: expected a torch.Tensor of shape [2]"),
])
def test_sinks_that_are_not_h_values_are_refused(sinks, message):
    q, k, v, _, _ = _arrays((1, 4, 4, 2, 1, 2), 1)
    with pytest.raises(dilattn.InvalidArgumentError) as e:
        dt.attention(*_leaves(q, k, v), sinks=sinks, backend="ref")
    assert e.value.status_name == "DILATTN_ERROR_INVALID_VALUE"
    assert message in str(e.value)


def test_integer_sinks_are_refused_naming_sinks():
    q, k, v, _, _ = _arrays((1, 4, 4, 2, 1, 2), 1)
    with pytest.raises(dilattn.Error) as e:
        dt.attention(*_leaves(q, k, v), sinks=torch.zeros(2, dtype=torch.int64), backend="ref")
    assert e.value.status_name == "DILATTN_ERROR_DTYPE_MISMATCH"
    assert "sinks has dtype torch.int64: expected a floating tensor" in str(e.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cpu_backend_computes_sinks_as_ref(case):
    # The whole chain on each backend (its own forward's O and LSE into its backward): O and
    # every gradient, the sinks' included, within SPEC 12's f64 bound of ref's.
    sizes, options = CASES[case]
    q, k, v, do, sinks = _arrays(sizes, 5)
    results = {}
    for backend in ("ref", "cpu"):
        tq, tk, tv, ts = _leaves(q, k, v, sinks)
        o = dt.attention(tq, tk, tv, sinks=ts, backend=backend, **options)
        o.backward(torch.tensor(do))
        results[backend] = [x.detach().numpy() for x in (o, tq.grad, tk.grad, tv.grad, ts.grad)]
    for name, got, want in zip(("o", "dq", "dk", "dv", "d_sinks"), results["cpu"],
                               results["ref"]):
        assert spec_numpy.within(got, want, F64_TOL, F64_TOL), \
            f"{name}: max diff {np.max(np.abs(got - want))}"
