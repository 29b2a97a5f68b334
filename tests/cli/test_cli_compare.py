"""test_cli_compare.py - the `dilattn` command line: `dilattn compare`: exit 0 within tolerance, 1
outside (NaN only matches NaN, infinities only the same infinity, integers compared exactly), 2 on
shape mismatch.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import numpy as np
import pytest

from cli_support import run


def test_compare_exit_codes(tmp_path):
    a = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    np.save(tmp_path / "a.npy", a)
    b = a.copy()
    b[1, 2, 3] += 5e-5  # within atol 1e-5 + rtol 1e-4 * |1|
    np.save(tmp_path / "near.npy", b)
    b[0, 1, 2] += 1e-2
    np.save(tmp_path / "far.npy", b)
    c = a.copy()
    c[0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", c)
    np.save(tmp_path / "short.npy", a[:1])
    assert run("compare", tmp_path / "a.npy", tmp_path / "a.npy", expect=0).stdout.startswith(
        "max_abs_err=0 max_rel_err=0 (atol=1e-05 rtol=0.0001)")
    run("compare", tmp_path / "near.npy", tmp_path / "a.npy", expect=0)
    far = run("compare", tmp_path / "far.npy", tmp_path / "a.npy", expect=1).stdout
    assert abs(float(far.split()[0].split("=")[1]) - 1e-2) < 1e-6  # the f32 step of +1e-2
    assert "1 of 24 elements, first at [0, 1, 2]" in far
    run("compare", tmp_path / "far.npy", tmp_path / "a.npy", "--atol", "0.02", expect=0)
    run("compare", tmp_path / "nan.npy", tmp_path / "a.npy", expect=1)
    run("compare", tmp_path / "nan.npy", tmp_path / "nan.npy", expect=0)
    p = run("compare", tmp_path / "short.npy", tmp_path / "a.npy", expect=2)
    assert "short.npy" in p.stderr and "shape" in p.stderr
