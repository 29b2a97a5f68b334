"""test_cli_sinks.py - the command line's SPEC 10.3 flags: --sinks (a comma list, -inf allowed,
or a .npy of [H]) gives spec_numpy's forward and backward with sinks on the ref backend, and
backward --d-sinks writes d(sink) [H] (<f8), with causal keyless rows, GQA, dilated and a
packed batch, on ref and on cpu; the same cases but the packed batch on emu (the CUDA kernels
on the SIMT emulator) where it is built; AUTO runs them on a fast backend (cpu, or cuda where a
GPU is); bad values exit 2 naming the flag, before any output is written.
Tolerances: f32 inputs, f64 reference: O within F32_TOL, LSE (written <f8) 1e-12, gradients
SPEC 8 f32 (d_sinks is computed in f64 from the f32 O the forward wrote: the same bound); cpu and
emu (f32 throughout): SPEC 8 f32, LSE atol 1e-4."""
import numpy as np
import pytest

from cli_support import (available_backends, backward, cpu_within_spec8, expect_bad_input, forward,
                         forward_args, make_inputs, run)
from spec_numpy import F32_TOL, assert_close, backward as spec_backward, forward as spec_forward
from spec_numpy import varlen_attention

SINKS = [0.4, -0.3]

CASES = {
    "causal_keyless_gqa": (dict(Nq=12, Nk=9, H=2, Hkv=1), ["--causal"], dict(causal=True)),
    "dilated_npy": (dict(), ["--segments", "4,12", "--dilations", "1,2"],
                    dict(segments=[4, 12], dilations=[1, 2])),
}


def _sink_flags(tmp_path, use_npy):
    if use_npy:
        np.save(tmp_path / "sinks.npy", np.array(SINKS))
        return ["--sinks", tmp_path / "sinks.npy"]
    return ["--sinks", ",".join(map(str, SINKS))]


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_numpy_spec(tmp_path, case, backend):
    if backend == "cpu" and not available_backends().get("cpu"):
        pytest.skip("backend cpu is not available in this build")
    shape, flags, spec = CASES[case]
    arrs, paths = make_inputs(tmp_path, B=1, **shape)
    flags = flags + _sink_flags(tmp_path, case.endswith("npy"))
    o_want, lse_want = spec_forward(arrs["q"], arrs["k"], arrs["v"], sinks=SINKS, **spec)
    o, lse = forward(tmp_path, paths, *flags, backend=backend)
    if backend == "cpu":
        grads = backward(tmp_path, paths, *flags, "--d-sinks", tmp_path / "ds.npy", backend="cpu")
        wants = spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], sinks=SINKS, **spec)
        cpu_within_spec8(o, lse, grads + [np.load(tmp_path / "ds.npy")], o_want, lse_want, wants)
        return
    assert_close(o, o_want, **F32_TOL)
    assert_close(lse, lse_want, atol=1e-12, rtol=1e-12)
    grads = backward(tmp_path, paths, *flags, "--d-sinks", tmp_path / "ds.npy")
    wants = spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], sinks=SINKS, **spec)
    for got, want in zip(grads + [np.load(tmp_path / "ds.npy")], wants):
        assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_packed_batch_with_minus_inf_sink(tmp_path):
    arrs, paths = make_inputs(tmp_path, B=1, Nq=12)
    cu = [0, 5, 12]
    flags = ["--cu-seqlens-q", "0,5,12", "--cu-seqlens-k", "0,5,12", "--sinks", "0.5,-inf"]
    want = varlen_attention(arrs["q"], arrs["k"], arrs["v"], cu, cu, d_o=arrs["do"],
                            sinks=[0.5, -np.inf])
    o, lse = forward(tmp_path, paths, *flags)
    assert_close(o, want[0], **F32_TOL)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)
    grads = backward(tmp_path, paths, *flags, "--d-sinks", tmp_path / "ds.npy")
    d_sinks = np.load(tmp_path / "ds.npy")
    assert d_sinks[1] == 0  # a -inf sink takes no probability
    for got, w in zip(grads + [d_sinks], want[2:]):
        assert_close(got, w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_emu_matches_numpy_spec(tmp_path, case):
    if not available_backends().get("emu"):
        pytest.skip("backend emu is not available in this build")
    shape, flags, spec = CASES[case]
    arrs, paths = make_inputs(tmp_path, B=1, **shape)
    flags = flags + _sink_flags(tmp_path, case.endswith("npy"))
    o_want, lse_want = spec_forward(arrs["q"], arrs["k"], arrs["v"], sinks=SINKS, **spec)
    o, lse = forward(tmp_path, paths, *flags, backend="emu")
    assert_close(o, o_want, atol=1e-5, rtol=1e-4)
    assert_close(lse, lse_want, atol=1e-4, rtol=0)
    grads = backward(tmp_path, paths, *flags, "--d-sinks", tmp_path / "ds.npy", backend="emu")
    wants = spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], sinks=SINKS, **spec)
    for got, want in zip(grads + [np.load(tmp_path / "ds.npy")], wants):
        assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_auto_runs_sinks_on_a_fast_backend(tmp_path):
    # cpu and cuda write an f32 LSE (<f4), ref an f64 one: AUTO resolved the plan to cpu or cuda.
    _, paths = make_inputs(tmp_path, B=1)
    args = forward_args(tmp_path, paths, "--sinks", "0.1,0.2")
    args[args.index("--backend") + 1] = "auto"
    run(*args, expect=0)
    cpu = available_backends().get("cpu")
    assert np.load(tmp_path / "l.npy").dtype == (np.float32 if cpu else np.float64)


@pytest.mark.parametrize("flags,mentions", [
    (["--sinks", "0.1,0.2,0.3"], ["--sinks", "3 values", "heads_q = 2"]),
    (["--sinks", "0.1,x"], ["--sinks", "'x'"]),
    (["--sinks", "0.1,nan"], ["--sinks", "'nan'"]),
    (["--sinks", "inf,0.1"], ["--sinks", "'inf'"]),
    (["--sinks", "missing.npy"], ["missing.npy"]),
])
def test_bad_values_exit_2(tmp_path, flags, mentions):
    _, paths = make_inputs(tmp_path, B=1)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, *flags), *mentions)


def test_d_sinks_needs_sinks(tmp_path):
    _, paths = make_inputs(tmp_path, B=1)
    args = ["backward", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--do",
            paths["do"], "--dq", tmp_path / "dq.npy", "--dk", tmp_path / "dk.npy", "--dv",
            tmp_path / "dv.npy", "--d-sinks", tmp_path / "ds.npy", "--backend", "ref"]
    expect_bad_input(tmp_path, args, "--d-sinks needs --sinks")
