"""test_cli_mask.py - the `dilattn` command line: block-sparse masks: `dilattn mask` for patterns and
mask files, --pattern equal to its mask file, bad patterns and bad BSR arrays named, block counts
near 2^63.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import numpy as np
import pytest

from cli_support import expect_bad_input, forward, forward_args, make_inputs, run, write_bsr
from spec_numpy import F32_TOL, assert_close, attention_numpy, bsr_counts


def test_mask_command_writes_local_plus_sink(tmp_path):
    # N = 16, blocks of 4: I = J = 4, diag(ib) = ib. local:1 keeps |jb - ib| <= 1, sink:1 keeps
    # jb < 1 or ib < 1 (dilattn_mask.h); the union per row, ascending.
    run("mask", "--pattern", "local:1+sink:1", "--n", 16, "--block-size", 4, "--out",
        tmp_path / "m.npz", expect=0)
    rows = [sorted({jb for jb in range(4) if abs(jb - ib) <= 1 or jb < 1 or ib < 1}) for ib in range(4)]
    got = np.load(tmp_path / "m.npz")
    assert sorted(got.files) == ["col_idx", "row_ptr"]
    assert got["row_ptr"].tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()
    assert got["col_idx"].tolist() == sum(rows, [])


def test_forward_with_pattern_equals_its_mask_file(tmp_path):
    pattern = "local:2+sink:1+strided:4+random:0.05:seed=7"
    arrs, paths = make_inputs(tmp_path, Nq=24, H=2)
    run("mask", "--pattern", pattern, "--n", 24, "--block-size", 2, "--out", tmp_path / "m.npz",
        expect=0)
    m = np.load(tmp_path / "m.npz")
    counts = bsr_counts(24, 24, 2, 2, 2, m["row_ptr"], m["col_idx"], None, True)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts)
    o_mask, _ = forward(tmp_path, paths, "--mask", tmp_path / "m.npz", "--block-size", 2, "--causal")
    o_pattern, _ = forward(tmp_path, paths, "--pattern", pattern, "--block-size", 2, "--causal")
    assert np.array_equal(o_mask, o_pattern)
    assert_close(o_pattern, want[0], **F32_TOL)


def test_bad_pattern_is_named(tmp_path):
    _, paths = make_inputs(tmp_path)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--pattern", "local:1+bogus:3"),
                     "--pattern", "bogus")
    expect_bad_input(tmp_path, ["mask", "--pattern", "local:x", "--n", 16, "--out",
                                tmp_path / "m.npz"], "--pattern", "local:x")
    expect_bad_input(tmp_path, ["mask", "--n", 16, "--out", tmp_path / "m.npz"], "--pattern")


@pytest.mark.parametrize("arrays, mention", [
    (dict(row_ptr=[0, 2, 1], col_idx=[0, 1]), "row_ptr"),          # wrong length (I + 1 = 4)
    (dict(row_ptr=[0, 1, 2, 3], col_idx=[0, 1]), "col_idx"),       # row_ptr says 3 entries
    (dict(row_ptr=[0, 2, 3, 4], col_idx=[1, 0, 0, 0]), "row block 0"),  # not ascending
    (dict(row_ptr=[0, 1, 2, 3], col_idx=[0, 0, 9]), "col_idx = 9"),  # out of range
    (dict(row_ptr=[0, 1, 1, 1]), "col_idx"),                         # missing array
    (dict(row_ptr=[0.0, 1, 1, 1], col_idx=[0]), "<f8"),             # not an index dtype
    (dict(row_ptr=[0, 1, 1, 1], col_idx=[0], extra=[1]), "extra"),   # unknown member
])
def test_bad_mask_arrays_are_named(tmp_path, arrays, mention):
    _, paths = make_inputs(tmp_path)
    np.savez(tmp_path / "m.npz", **{k: np.asarray(v) for k, v in arrays.items()})
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", mention)
