"""test_torch_ring.py - dilattn.torch.ring_attention over torch.distributed (SPEC 5), the ranks
being processes (torch_ring_ranks.py launches them, each test within a deadline):
  * P = 1..4 gloo ranks on CPU tensors, contiguous and zigzag splits, dense, causal GQA and
    dilated (mod, block, groups; causal and not): every rank's rows of O, LSE, dQ, dK and dV,
    put back in place, equal the single-process dilattn.torch.attention on the full tensors
    (backend ref, f64: the SPEC 8 reference) within SPEC 8 for f32 and f16 on the cpu backend,
    and within 1e-12 for f64 on the ref backend; a second run gives the same bits; ranks that
    hold no row (N < 2P) take part;
  * a ring on a group of some of the ranks (torch.distributed.new_group);
  * bad input on one rank (a row too many, another head_dim, an unknown or a different split,
    a backend that fails once the ring started) fails every rank with an error naming it, and
    a good call right after runs (the ranks stay in step); bad options fail every rank;
  * RingDilatedAttention and RingMultiheadDilatedAttention given a group of 2 ranks equal the
    single-process modules (outputs, input and parameter gradients);
  * softcap and sinks (with their gradient), alone and together, P = 1..3, both splits, f64 on
    ref: equal to dilattn.torch.attention with the same options within 1e-12, every rank's
    sinks.grad the single-process one; a window, ALiBi and dropout are refused on every rank,
    naming them;
  * CPU tensors on a group without gloo are refused, naming both;
  * NCCL: CUDA tensors, one GPU per rank (as many ranks as GPUs, at most 4; one GPU gives one
    rank, since NCCL ranks cannot share a GPU), within SPEC 8 and bitwise repeatable. Skipped
    without CUDA torch, NCCL, a GPU or a library built with CUDA (DILATTN_REQUIRE_CUDA=1 makes
    that a failure).
"""
import os

import pytest

from helpers import TOLERANCE, import_torch, within

torch = import_torch()
import dilattn  # noqa: E402
import dilattn.torch as dt  # noqa: E402
from dilattn.ring import shard_rows  # noqa: E402

if not torch.distributed.is_available():
    pytest.skip("this torch is built without torch.distributed", allow_module_level=True)
import torch_ring_ranks as ranks  # noqa: E402

# (name, sizes (B, N, H, Hkv, D), options)
CASES = [
    ("dense_causal_gqa", (2, 22, 4, 2, 5), dict(causal=True)),
    ("dense_gqa_scale", (2, 22, 4, 2, 5), dict(scale=0.3)),
    ("dilated_mod_gqa", (1, 24, 4, 2, 4), dict(segments=[6, 12], dilations=[1, 2])),
    ("dilated_block_causal_gqa", (1, 26, 4, 2, 3),
     dict(segments=[6, 13], dilations=[2, 3], heads_mode="block", causal=True)),
    ("dilated_groups_causal", (2, 16, 5, 5, 4),
     dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups", causal=True)),
    # N < 2P: some ranks hold no row (SPEC 5.1), their shards are empty
    ("dense_causal_short", (1, 3, 2, 1, 4), dict(causal=True)),
    ("dilated_short", (1, 3, 2, 2, 4), dict(segments=[2], dilations=[2])),
]
# (dtype, backend, (atol, rtol) against the f64 reference; LSE: SPEC 8's 1e-4, or 1e-12)
PATHS = [
    (torch.float32, "cpu", TOLERANCE["f32"], 1e-4),
    (torch.float64, "ref", (1e-12, 1e-12), 1e-12),
]
F16_CASES = [("dense_causal_gqa", (2, 22, 4, 2, 5), dict(causal=True)),
             ("dilated_mod_gqa", (1, 24, 4, 2, 4), dict(segments=[6, 12], dilations=[1, 2]))]


def _single_process(sizes, seed, dtype, options):
    """o, lse, dq, dk, dv of dilattn.torch.attention on the full tensors, rounded to dtype
    first, in f64 on the reference backend."""
    q, k, v, do = (t.double() for t in ranks.full_inputs(sizes, seed, dtype))
    for t in (q, k, v):
        t.requires_grad_()
    o, lse = dt.attention(q, k, v, backend="ref", return_lse=True, **options)
    o.backward(do)
    return [x.detach() for x in (o, lse, q.grad, k.grad, v.grad)]


def _assemble(sizes, results):
    """The ranks' rows of (o, lse, dq, dk, dv) put back in place, in f64."""
    B, N, H, Hkv, D = sizes
    full = [torch.zeros(B, N, H, D), torch.zeros(B, H, N), torch.zeros(B, N, H, D),
            torch.zeros(B, N, Hkv, D), torch.zeros(B, N, Hkv, D)]
    full = [t.double() for t in full]
    for r in results:
        rows = r["rows"]
        for i, (whole, part) in enumerate(zip(full, r["got"])):
            if i == 1:
                whole[:, :, rows] = part.double()
            else:
                whole[:, rows] = part.double()
    return full


def _check_case(label, sizes, seed, dtype, tolerance, lse_atol, options, per_rank):
    got = _assemble(sizes, per_rank)
    want = _single_process(sizes, seed, dtype, options)
    for name, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        atol, rtol = (lse_atol, 0.0) if name == "lse" else tolerance
        assert within(g.numpy(), w.numpy(), atol, rtol), (
            f"{label}: {name} differs from the single-process call by "
            f"{(g - w).abs().max().item():.3g}")
    assert all(r["repeat_equal"] for r in per_rank), f"{label}: a second run gave other bits"


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_ring_equals_the_single_process_call(P, tmp_path):
    cases, checks = [], []
    for name, sizes, options in CASES:
        for split in ("contiguous", "zigzag"):
            for dtype, backend, tolerance, lse_atol in PATHS:
                cases.append((sizes, 7, dtype, split, dict(options, backend=backend)))
                checks.append((f"{name} {split} {dtype} {backend}", sizes, 7, dtype, tolerance,
                               lse_atol, options))
    for name, sizes, options in F16_CASES:
        cases.append((sizes, 8, torch.float16, "zigzag", dict(options, backend="cpu")))
        checks.append((f"{name} zigzag f16 cpu", sizes, 8, torch.float16, TOLERANCE["f16"],
                       1e-4, options))
    results = ranks.launch(P, "ring_cases", (cases,), tmp_path)
    for i, check in enumerate(checks):
        _check_case(*check, [results[r][i] for r in range(P)])


OPTION_CASES = [
    ("softcap", dict(softcap=1.5, causal=True), None),
    ("sinks", dict(causal=True), [0.4, float("-inf"), -0.6, 1.2]),
    ("softcap_sinks_dilated", dict(softcap=2.0, segments=[6, 12], dilations=[1, 2]),
     [0.1, -0.2, 0.3, -1.0]),
]


@pytest.mark.parametrize("P", [1, 2, 3])
def test_ring_options_equal_the_single_process_call(P, tmp_path):
    sizes = (2, 24, 4, 2, 5)
    cases = [(sizes, 13, split, options, sinks) for _, options, sinks in OPTION_CASES
             for split in ("contiguous", "zigzag")]
    results = ranks.launch(P, "ring_option_cases", (cases,), tmp_path)
    for i, (sizes, seed, split, options, sink_values) in enumerate(cases):
        label = f"{OPTION_CASES[i // 2][0]} {split} P={P}"
        q, k, v, do = ranks.full_inputs(sizes, seed)
        for t in (q, k, v):
            t.requires_grad_()
        sinks = None
        if sink_values is not None:
            sinks = torch.tensor(sink_values, dtype=torch.float64, requires_grad=True)
        o, lse = dt.attention(q, k, v, backend="ref", return_lse=True, sinks=sinks, **options)
        o.backward(do)
        want = [x.detach() for x in (o, lse, q.grad, k.grad, v.grad)]
        got = _assemble(sizes, [results[r][i] for r in range(P)])
        for name, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
            assert within(g.numpy(), w.numpy(), 1e-12, 1e-12), (
                f"{label}: {name} differs by {(g - w).abs().max().item():.3g}")
        for r in range(P):
            d_sinks = results[r][i]["d_sinks"]
            if sinks is None:
                assert d_sinks is None
            else:
                assert torch.equal(d_sinks, results[0][i]["d_sinks"]), f"{label}: rank {r}"
                assert within(d_sinks.numpy(), sinks.grad.numpy(), 1e-12, 1e-12), (
                    f"{label}: rank {r}'s d_sinks {d_sinks} but {sinks.grad}")


def test_ring_refuses_window_alibi_and_dropout(tmp_path):
    results = ranks.launch(2, "refused_options", (), tmp_path)
    for r, outcomes in enumerate(results):
        for name, what in (("window_size", "a window"), ("alibi_slopes", "ALiBi"),
                           ("dropout_p", "dropout")):
            kind, status, message = outcomes[name]
            assert status in (dilattn._abi.STATUS["DILATTN_ERROR_UNSUPPORTED"],
                              dilattn._abi.STATUS["DILATTN_ERROR_COMM"]), (r, name, message)
            assert f"does not run {what}" in message, (r, name, message)


def test_ring_on_a_group_of_some_ranks(tmp_path):
    # Global ranks 2 and 3 of 4 form the ring: its peers are named by their global ranks.
    name, sizes, options = CASES[0]
    case = (sizes, 7, torch.float32, "zigzag", dict(options, backend="cpu"))
    results = ranks.launch(4, "ring_cases", ([case], "cpu", [2, 3]), tmp_path)
    assert results[0] is None and results[1] is None
    _check_case(f"{name} zigzag f32 cpu on ranks 2, 3", sizes, 7, torch.float32,
                TOLERANCE["f32"], 1e-4, options, [results[2][0], results[3][0]])


@pytest.mark.parametrize("P", [2, 3])
def test_bad_input_on_one_rank_fails_every_rank(P, tmp_path):
    results = ranks.launch(P, "bad_inputs", (), tmp_path)
    COMM = dilattn._abi.STATUS["DILATTN_ERROR_COMM"]
    SHAPE = dilattn._abi.STATUS["DILATTN_ERROR_SHAPE_MISMATCH"]
    N = ranks.BAD_SIZES[1]
    held = [len(shard_rows(N, P, r, "zigzag")) + (r == 1) for r in range(P)]
    want = [len(shard_rows(N + 1, P, r, "zigzag")) for r in range(P)]
    for r, outcomes in enumerate(results):
        for scenario, (_, good_after) in outcomes.items():
            assert good_after is True, f"rank {r}: the call after {scenario} failed"
        kind, status, message = outcomes["one_row_too_many"][0]
        assert status == (SHAPE if held[r] != want[r] else COMM), (r, message)
        assert f"the ranks hold {held} rows, but split='zigzag' of N={N + 1} rows over {P} " \
               f"ranks gives {want}" in message, message

        kind, status, message = outcomes["head_dim_differs"][0]
        assert status == COMM and f"rank {P - 1} called with head_dim=5 but rank 0 with " \
                                  "head_dim=4" in message, message

        kind, status, message = outcomes["unknown_split"][0]
        if r == 0:
            assert kind == "InvalidArgumentError" and "split='zig'" in message, message
        else:
            assert status == COMM and ("rank 0 failed: InvalidArgumentError: "
                                       "DILATTN_ERROR_INVALID_VALUE: split='zig'") in message, \
                message

        kind, status, message = outcomes["splits_differ"][0]
        assert status == COMM and "rank 1 called with split='contiguous' but rank 0 with " \
                                  "split='zigzag'" in message, message

        kind, status, message = outcomes["bad_dilation_everywhere"][0]
        assert status == dilattn._abi.STATUS["DILATTN_ERROR_BAD_DILATION"], message

        kind, status, message = outcomes["plan_fails_on_one_rank"][0]
        if r == 1:
            assert kind == "DeviceError" and status != COMM, message
        else:
            assert status == COMM and "rank 1 failed: DeviceError" in message, message


@pytest.mark.parametrize("split", ["zigzag", "contiguous"])
def test_ring_modules_given_a_group_equal_the_single_process_modules(split, tmp_path):
    B, N, H, D = 2, 16, 2, 3
    seed = 5
    results = ranks.launch(2, "modules", (split, (B, N, H, D), seed), tmp_path)
    q, k, v, do = ranks.full_inputs((B, N, H, H, D), seed)
    for t in (q, k, v):
        t.requires_grad_()
    single = dt.DilatedAttention([4, 8], [1, 2], heads_mode="groups", backend="ref")
    out = single(q, k, v, is_causal=True)
    out.backward(do)
    torch.manual_seed(seed)
    mha = dt.RingMultiheadDilatedAttention(H * D, H, [1, 2], [4, 8], dtype=torch.float64,
                                           backend="ref")
    x = q.detach().reshape(B, N, H * D).clone().requires_grad_()
    y, _ = mha(x, is_causal=True)
    y.backward(do.reshape(B, N, H * D))
    for r in results:
        rows = r["rows"]
        assert torch.allclose(r["single"]["out"], out.detach()[:, rows], atol=1e-12, rtol=0)
        for g, t in zip(r["single"]["grads"], (q, k, v)):
            assert torch.allclose(g, t.grad[:, rows], atol=1e-12, rtol=0)
        assert torch.allclose(r["multi"]["out"], y.detach()[:, rows], atol=1e-12, rtol=0)
        assert torch.allclose(r["multi"]["x_grad"], x.grad[:, rows], atol=1e-12, rtol=0)
    for name, p in mha.named_parameters():  # each rank holds its rows' share of the gradient
        summed = sum(r["multi"]["param_grads"][name] for r in results)
        assert torch.allclose(summed, p.grad, atol=1e-11, rtol=0), name


def test_cpu_tensors_on_a_group_without_gloo_are_refused(tmp_path, monkeypatch):
    # One rank in this process; the group claims NCCL only, which cannot move CPU tensors.
    dist = torch.distributed
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        q, k, v, _ = ranks.full_inputs((1, 4, 2, 2, 3), seed=1)
        assert dt.ring_attention(q, k, v, backend="ref").shape == q.shape
        monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
        with pytest.raises(dilattn.DeviceError, match="tensors are on cpu but the process "
                                                      "group's backend is nccl"):
            dt.ring_attention(q, k, v)
    finally:
        dist.destroy_process_group()


def _why_no_nccl():
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device"
    if not torch.distributed.is_nccl_available():
        return "this torch has no NCCL"
    if not dilattn.backend_available("cuda"):
        return "the dilattn library cannot run its cuda backend here (python -m dilattn info)"
    return None


def test_nccl_ring_on_cuda_tensors(tmp_path):
    why = _why_no_nccl()
    if why is not None:
        if os.environ.get("DILATTN_REQUIRE_CUDA") == "1":
            raise RuntimeError(f"DILATTN_REQUIRE_CUDA=1 but {why}")
        pytest.skip(why)
    P = min(torch.cuda.device_count(), 4)
    cases, checks = [], []
    for name, sizes, options in CASES:
        for dtype, key in ((torch.float32, "f32"), (torch.float16, "f16")):
            cases.append((sizes, 9, dtype, "zigzag", options))
            checks.append((f"{name} zigzag {key} cuda", sizes, 9, dtype, TOLERANCE[key], 1e-4,
                           options))
    results = ranks.launch(P, "ring_cases", (cases, "cuda"), tmp_path, backend="nccl")
    for i, check in enumerate(checks):
        _check_case(*check, [results[r][i] for r in range(P)])
