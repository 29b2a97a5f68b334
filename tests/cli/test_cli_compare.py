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


INF, NAN = np.inf, np.nan


@pytest.mark.parametrize("a, ref, expect", [
    ([INF, 1.0], [INF, 1.0], 0),     # the same infinity matches
    ([-INF], [-INF], 0),
    ([0.0], [INF], 1),               # diff <= atol + rtol * |ref| is inf <= inf: must not pass
    ([5.0], [-INF], 1),
    ([-INF], [INF], 1),              # the other infinity
    ([INF], [6.0e4], 1),             # 6e4: finite in every float dtype
    ([NAN], [INF], 1),               # NaN matches only NaN
    ([INF], [NAN], 1),
    ([NAN], [NAN], 0),
])
@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8"])
def test_compare_infinities_match_only_themselves(tmp_path, a, ref, expect, dtype):
    np.save(tmp_path / "a.npy", np.array(a, dtype))
    np.save(tmp_path / "ref.npy", np.array(ref, dtype))
    for tol in ([], ["--rtol", "1e300", "--atol", "1e300"]):  # no tolerance excuses a mismatch
        run("compare", tmp_path / "a.npy", tmp_path / "ref.npy", *tol, expect=expect)


@pytest.mark.parametrize("dtype", ["<i4", "<i8"])
def test_compare_integers_exactly(tmp_path, dtype):
    big = 2**53 if dtype == "<i8" else 2**30  # 2^53 + 1 and 2^53 are the same double
    np.save(tmp_path / "a.npy", np.array([7, big + 1], dtype))
    np.save(tmp_path / "same.npy", np.array([7, big + 1], dtype))
    np.save(tmp_path / "ref.npy", np.array([7, big], dtype))
    run("compare", tmp_path / "a.npy", tmp_path / "same.npy", expect=0)
    out = run("compare", tmp_path / "a.npy", tmp_path / "ref.npy", "--atol", "10", expect=1).stdout
    assert "1 of 2 elements, first at [1]" in out and f"a={big + 1} b={big}" in out


def test_compare_integer_against_float_is_a_usage_error(tmp_path):
    np.save(tmp_path / "a.npy", np.array([1, 2], "<i8"))
    np.save(tmp_path / "ref.npy", np.array([1, 2], "<f8"))
    p = run("compare", tmp_path / "a.npy", tmp_path / "ref.npy", expect=2)
    assert "a.npy" in p.stderr and "<i8" in p.stderr and "<f8" in p.stderr
