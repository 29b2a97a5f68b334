"""test_cli_dropout.py - `dilattn forward/backward --dropout P --seed S [--offset O]` (SPEC 11)
on backends ref and cpu against spec_numpy (its own numpy Philox4x32-10), dense and dilated,
backward both recomputing the forward and from the forward's files (cpu: f64 within SPEC 12's
1e-10, f32 within SPEC 8), and on emu (the CUDA kernels) where built (f32 within SPEC 8); the
flag rules (exit 2)."""
import numpy as np
import pytest

from cli_support import (available_backends, backward, expect_bad_input, forward, forward_args,
                         make_inputs, qkv_flags, run)
from spec_numpy import assert_close, attention_numpy, dense_counts, dilated_counts

SEED = 2**64 - 3  # the whole 64-bit range reaches the library


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("kind", ["dense_causal", "dilated"])
def test_dropout_matches_numpy_spec(tmp_path, kind, p):
    arrs, paths = make_inputs(tmp_path, B=2, Nq=12, H=2, D=4, dtype="<f8")
    if kind == "dilated":
        flags = ["--segments", "4,12", "--dilations", "2,3"]
        counts = dilated_counts(12, 2, [(4, 2), (12, 3)], "mod", False)
    else:
        flags = ["--causal"]
        counts = dense_counts(12, 12, 2, True)
    flags += ["--dropout", str(p), "--seed", str(SEED), "--offset", "41"]
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts, d_o=arrs["do"],
                           dropout=(p, SEED, 41))
    plain = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts)
    assert not np.allclose(want[0], plain[0], atol=1e-3), "the case must drop something"
    o, lse = forward(tmp_path, paths, *flags)
    assert_close(o, want[0], atol=1e-12, rtol=1e-12)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)
    for extra in ([], ["--o", tmp_path / "o.npy", "--lse", tmp_path / "lse.npy"]):
        for got, ref in zip(backward(tmp_path, paths, *flags, *extra), want[2:]):
            assert_close(got, ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype,tol", [("<f8", (1e-10, 1e-10)), ("<f4", (1e-5, 1e-4))])
@pytest.mark.parametrize("kind", ["dense_causal", "dilated"])
def test_cpu_dropout_matches_numpy_spec(tmp_path, kind, dtype, tol):
    arrs, paths = make_inputs(tmp_path, B=2, Nq=12, H=2, D=4, dtype=dtype)
    if kind == "dilated":
        flags = ["--segments", "4,12", "--dilations", "1,3"]
        counts = dilated_counts(12, 2, [(4, 1), (12, 3)], "mod", False)
    else:
        flags = ["--causal"]
        counts = dense_counts(12, 12, 2, True)
    flags += ["--dropout", "0.4", "--seed", str(SEED), "--offset", "7", "--backend", "cpu"]
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts, d_o=arrs["do"],
                           dropout=(0.4, SEED, 7))
    run("forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--lse", tmp_path / "lse.npy",
        *flags, expect=0)
    o, lse = np.load(tmp_path / "o.npy"), np.load(tmp_path / "lse.npy")
    assert_close(o, want[0], atol=tol[0], rtol=tol[1])
    assert_close(lse, want[1], atol=max(tol[0], 1e-10 if dtype == "<f8" else 1e-4), rtol=0)
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
        "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", *flags, expect=0)
    for name, ref in zip(("dq", "dk", "dv"), want[2:]):
        assert_close(np.load(tmp_path / f"{name}.npy"), ref, atol=tol[0], rtol=tol[1])


def test_offset_changes_the_mask(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=16, dtype="<f8")
    o1, _ = forward(tmp_path, paths, "--dropout", "0.5", "--seed", "3", "--offset", "1")
    o1b, _ = forward(tmp_path, paths, "--dropout", "0.5", "--seed", "3", "--offset", "1")
    o2, _ = forward(tmp_path, paths, "--dropout", "0.5", "--seed", "3", "--offset", "2")
    assert np.array_equal(o1, o1b) and not np.array_equal(o1, o2)


@pytest.mark.parametrize("extra,mentions", [
    (["--dropout", "0.1"], ["--dropout needs --seed"]),
    (["--seed", "1"], ["--seed needs --dropout"]),
    (["--offset", "1"], ["--offset needs --dropout"]),
    (["--dropout", "0.1", "--seed", "-1"], ["--seed", "'-1'"]),
    (["--dropout", "0.1", "--seed", "18446744073709551616"], ["--seed", "2^64"]),
    (["--dropout", "-0.1", "--seed", "1"], ["--dropout", "must be >= 0"]),
    (["--dropout", "1", "--seed", "1"], ["--dropout", "'p' = 1"]),
    (["--dropout", "0.1", "--seed", "1", "--offset", "4294967296"],
     ["dropout_offset = 4294967296"]),
])
def test_bad_dropout_flags_exit_2(tmp_path, extra, mentions):
    _, paths = make_inputs(tmp_path, dtype="<f8")
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, *extra), *mentions)


@pytest.mark.skipif(not available_backends().get("emu", False), reason="emu is not built")
@pytest.mark.parametrize("kind", ["dense_causal", "dilated"])
def test_emu_dropout_matches_numpy_spec(tmp_path, kind):
    """The CUDA kernels (run by the emulator) draw the same pairs: f32 within SPEC 8."""
    arrs, paths = make_inputs(tmp_path, B=2, Nq=12, H=2, D=4, dtype="<f4")
    if kind == "dilated":
        flags = ["--segments", "4,12", "--dilations", "1,3"]
        counts = dilated_counts(12, 2, [(4, 1), (12, 3)], "mod", False)
    else:
        flags = ["--causal"]
        counts = dense_counts(12, 12, 2, True)
    flags += ["--dropout", "0.4", "--seed", str(SEED), "--offset", "7", "--backend", "emu"]
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts, d_o=arrs["do"],
                           dropout=(0.4, SEED, 7))
    run("forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--lse", tmp_path / "lse.npy",
        *flags, expect=0)
    assert_close(np.load(tmp_path / "o.npy"), want[0], atol=1e-5, rtol=1e-4)
    assert_close(np.load(tmp_path / "lse.npy"), want[1], atol=1e-4, rtol=0)
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
        "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", *flags, expect=0)
    for name, ref in zip(("dq", "dk", "dv"), want[2:]):
        assert_close(np.load(tmp_path / f"{name}.npy"), ref, atol=1e-5, rtol=1e-4)
