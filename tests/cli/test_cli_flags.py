"""test_cli_flags.py - the `dilattn` command line: flag parsing: missing, unknown, malformed and
valueless flags exit 2 naming the flag; a flag's value is a value even when it looks like a help
request.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import numpy as np
import pytest

from cli_support import expect_bad_input, forward_args, make_inputs, qkv_flags, run


@pytest.mark.parametrize("drop", ["--q", "--k", "--v", "--out"])
def test_missing_flag_is_named(tmp_path, drop):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    i = args.index(drop)
    del args[i:i + 2]
    expect_bad_input(tmp_path, args, "missing required flag " + drop)


@pytest.mark.parametrize("extra, mention", [
    (["--frobnicate"], "unknown flag --frobnicate"),
    (["--scale", "abc"], "--scale"),
    (["--scale", "inf"], "--scale"),
    (["--threads", "0"], "--threads"),
    (["--threads", "12x"], "--threads"),
    (["--segments", "4,x", "--dilations", "1,1"], "--segments"),
    (["--segments", "4,12", "--dilations", "1"], "--dilations"),
    (["--segments", "4"], "--dilations"),
    (["--heads-mode", "mod"], "--segments"),
    (["--segments", "4", "--dilations", "1", "--heads-mode", "zigzag"], "--heads-mode"),
    (["--segments", "4", "--dilations", "5"], "dilation"),  # library status BAD_DILATION
    (["--backend", "gpu"], "--backend"),
    (["--causal=yes"], "--causal"),
    (["stray"], "stray"),
])
def test_bad_flags_are_named(tmp_path, extra, mention):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    if extra == ["--backend", "gpu"]:
        args = args[:-2]
    expect_bad_input(tmp_path, args + extra, mention)


def test_flag_without_value_is_named(tmp_path):
    _, paths = make_inputs(tmp_path)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--scale"), "--scale needs a value")


def test_help_as_a_flag_value_is_a_value(tmp_path, inputs):
    # "-h" after a valued flag is that flag's value, not a request for the usage text.
    _, paths = inputs
    p = run("compare", paths["q"], paths["q"], "--atol", "-h", expect=2)
    assert "--atol" in p.stderr and "'-h'" in p.stderr and "usage" not in p.stdout
    run("forward", *qkv_flags(paths), "--out", "-h", "--backend", "ref", cwd=tmp_path, expect=0)
    assert np.load(tmp_path / "-h").shape == (1, 12, 2, 4)


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"], ["forward", "--help"],
                                  ["compare", "-h"]])
def test_help_where_a_flag_goes_prints_usage(args):
    p = run(*args, expect=0)
    assert p.stdout.startswith("usage: dilattn")


# A number flag is refused only when it is not a number or not finite: strtod reports ERANGE
# for subnormals too (1e-310), which are finite numbers like any other.
@pytest.mark.parametrize("text", ["1e-310", "4.9e-324", "-2.5e-320"])
def test_subnormal_scale_is_a_finite_number(tmp_path, text):
    arrs, paths = make_inputs(tmp_path)
    run(*forward_args(tmp_path, paths, "--scale", text), expect=0)
    # A scale this small makes every score 0: each row of O is the mean of V's rows.
    want = arrs["v"].astype(np.float64).mean(axis=1, keepdims=True)
    got = np.load(tmp_path / "o.npy").astype(np.float64)
    assert np.allclose(got, np.broadcast_to(want, got.shape), atol=1e-6, rtol=1e-5)


def test_subnormal_tolerances_are_finite_numbers(tmp_path, inputs):
    _, paths = inputs
    p = run("compare", paths["q"], paths["q"], "--rtol", "1e-320", "--atol", "1e-310", expect=0)
    assert "rtol=9.99989e-321" in p.stdout and "atol=1e-310" in p.stdout, p.stdout


@pytest.mark.parametrize("text", ["1e999", "-1e400", "nan", "-inf", "infinity"])
def test_non_finite_numbers_are_refused(tmp_path, text):
    _, paths = make_inputs(tmp_path)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, f"--scale={text}"),
                     f"flag --scale: '{text}' is not a finite number")
    expect_bad_input(tmp_path, ["compare", paths["q"], paths["q"], f"--atol={text}"],
                     f"flag --atol: '{text}' is not a finite number")
