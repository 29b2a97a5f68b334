"""test_cli_variants.py - the command line's SPEC 10.1 flags: --window L,R, --softcap C and
--alibi-slopes (a comma list or a .npy of [H] or [B, H]) give spec_numpy's forward and backward
on the ref backend, on cpu and on emu (the CUDA kernels on the SIMT emulator) where it is
built, alone and together, with causal, GQA and Nq != Nk, dilated and block-sparse; AUTO runs
them on a fast backend (cpu, or cuda where a GPU is); bad values exit 2 naming the flag, before
any output is written.
Tolerances: f32 inputs, f64 reference: O within F32_TOL (only the output rounding differs), LSE
(written <f8) 1e-12, gradients SPEC 8 f32; cpu and emu (f32 throughout): SPEC 8 f32, LSE atol
1e-4."""
import numpy as np
import pytest

from cli_support import (available_backends, backward, cpu_within_spec8, expect_bad_input, forward,
                         forward_args, make_inputs, run)
from spec_numpy import F32_TOL, assert_close, backward as spec_backward, forward as spec_forward

SLOPES_BH = np.array([[0.25, 0.5], [0.125, 0.75]])  # B = 2, H = 2

CASES = {
    "window": (dict(), ["--window", "3,1"], dict(window=(3, 1))),
    "window_left_unbounded": (dict(), ["--window", "-1,0"], dict(window=(-1, 0))),
    "softcap": (dict(), ["--softcap", "0.6"], dict(softcap=0.6)),
    "alibi_list": (dict(), ["--alibi-slopes", "0.25,0.5"], dict(alibi_slopes=SLOPES_BH[0])),
    "alibi_npy_per_batch": (dict(), ["--alibi-slopes", "SLOPES_NPY"], dict(alibi_slopes=SLOPES_BH)),
    "all_causal_gqa_nq_ne_nk": (dict(Nq=9, Nk=13, H=2, Hkv=1),
                                ["--window", "4,2", "--softcap", "0.8", "--alibi-slopes",
                                 "SLOPES_NPY", "--causal"],
                                dict(window=(4, 2), softcap=0.8, alibi_slopes=SLOPES_BH,
                                     causal=True)),
    "all_dilated_block": (dict(), ["--window", "2,3", "--softcap", "0.5", "--alibi-slopes",
                                   "0.3,0.1", "--segments", "4,12", "--dilations", "1,2",
                                   "--heads-mode", "block"],
                          dict(window=(2, 3), softcap=0.5, alibi_slopes=[0.3, 0.1],
                               segments=[4, 12], dilations=[1, 2], heads_mode="block")),
    "all_block_sparse": (dict(), ["--window", "5,0", "--softcap", "0.5", "--alibi-slopes",
                                  "0.3,0.1", "--pattern", "local:0+sink:1", "--block-size", "4"],
                         dict(window=(5, 0), softcap=0.5, alibi_slopes=[0.3, 0.1],
                              mask=(4, 4, [[[0, 1, 2], [0, 1], [0, 2]]]))),
}


def _flags(tmp_path, flags):
    np.save(tmp_path / "slopes.npy", SLOPES_BH)
    return [tmp_path / "slopes.npy" if f == "SLOPES_NPY" else f for f in flags]


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_numpy_spec(tmp_path, case):
    shape, flags, spec = CASES[case]
    arrs, paths = make_inputs(tmp_path, B=2, **shape)
    flags = _flags(tmp_path, flags)
    o_want, lse_want = spec_forward(arrs["q"], arrs["k"], arrs["v"], **spec)
    o, lse = forward(tmp_path, paths, *flags)
    assert_close(o, o_want, **F32_TOL)
    assert_close(lse, lse_want, atol=1e-12, rtol=1e-12)
    grads = backward(tmp_path, paths, *flags)
    for got, want in zip(grads, spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], **spec)):
        assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_backend_matches_numpy_spec(tmp_path, case):
    if not available_backends().get("cpu"):
        pytest.skip("backend cpu is not available in this build")
    shape, flags, spec = CASES[case]
    arrs, paths = make_inputs(tmp_path, B=2, **shape)
    flags = _flags(tmp_path, flags)
    o, lse = forward(tmp_path, paths, *flags, backend="cpu")
    grads = backward(tmp_path, paths, *flags, backend="cpu")
    cpu_within_spec8(o, lse, grads, *spec_forward(arrs["q"], arrs["k"], arrs["v"], **spec),
                     spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], **spec))


@pytest.mark.parametrize("case", sorted(CASES))
def test_emu_matches_numpy_spec(tmp_path, case):
    if not available_backends().get("emu"):
        pytest.skip("backend emu is not available in this build")
    shape, flags, spec = CASES[case]
    arrs, paths = make_inputs(tmp_path, B=2, **shape)
    flags = _flags(tmp_path, flags)
    o_want, lse_want = spec_forward(arrs["q"], arrs["k"], arrs["v"], **spec)
    o, lse = forward(tmp_path, paths, *flags, backend="emu")
    assert_close(o, o_want, atol=1e-5, rtol=1e-4)
    assert_close(lse, lse_want, atol=1e-4, rtol=0)
    grads = backward(tmp_path, paths, *flags, backend="emu")
    for got, want in zip(grads, spec_backward(arrs["q"], arrs["k"], arrs["v"], arrs["do"], **spec)):
        assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_auto_runs_variants_on_a_fast_backend(tmp_path):
    # cpu and cuda write an f32 LSE (<f4), ref an f64 one: AUTO resolved the plan to cpu or cuda.
    _, paths = make_inputs(tmp_path, B=1)
    args = forward_args(tmp_path, paths, "--softcap", "2")
    args[args.index("--backend") + 1] = "auto"
    run(*args, expect=0)
    cpu = available_backends().get("cpu")
    assert np.load(tmp_path / "l.npy").dtype == (np.float32 if cpu else np.float64)


@pytest.mark.parametrize("flags,mentions", [
    (["--window", "3"], ["--window", "LEFT,RIGHT"]),
    (["--window", "3,x"], ["--window", "'3,x'"]),
    (["--window", "-2,0"], ["--window", "-2", ">= -1"]),
    (["--softcap", "-1"], ["--softcap", "-1", ">= 0"]),
    (["--softcap", "nan"], ["--softcap", "'nan'"]),
    (["--alibi-slopes", "0.5,x"], ["--alibi-slopes", "'x'"]),
    (["--alibi-slopes", "0.5,inf"], ["--alibi-slopes", "'inf'"]),
    (["--alibi-slopes", "0.5,0.5,0.5"], ["ALiBi slopes", "count = 3", "heads_q = 2"]),
    (["--alibi-slopes", "missing.npy"], ["missing.npy"]),
])
def test_bad_values_exit_2(tmp_path, flags, mentions):
    _, paths = make_inputs(tmp_path, B=1)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, *flags), *mentions)
