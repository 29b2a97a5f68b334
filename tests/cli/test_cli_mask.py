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


# ---------------------------------------------------------------- block counts near 2^63
# I = ceil(N / b) must not be computed as (N + b - 1) / b, which overflows int64 for these.

BIG = 2**63 - 1


@pytest.mark.parametrize("block", [2**62, BIG - 1, BIG])
def test_mask_file_with_block_size_near_2_63_is_one_dense_block(tmp_path, block):
    # Nq = Nk = 12 in one query block and one key block: the mask [[0]] is dense attention.
    arrs, paths = make_inputs(tmp_path)
    write_bsr(tmp_path / "m.npz", [0, 1], [0])
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], bsr_counts(12, 12, 2, 12, 12, [0, 1],
                                                                     [0], None, False))
    o, lse = forward(tmp_path, paths, "--mask", tmp_path / "m.npz", "--block-size", block)
    assert_close(o, want[0], **F32_TOL)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("n, block, row_ptr, blocks", [
    (BIG, 1, [0, 1], BIG),  # I + 1 is not representable: no file can match
    (12, BIG, [], 1),       # the overflowing formula gave I = 0
    (BIG, BIG, [0], 1),     # ... here too, and the library then read row_ptr[1] out of bounds
])
def test_mask_file_row_ptr_length_is_checked_near_2_63(tmp_path, n, block, row_ptr, blocks):
    write_bsr(tmp_path / "m.npz", row_ptr, [] if not row_ptr else [0])
    expect_bad_input(tmp_path, ["mask", "--mask", tmp_path / "m.npz", "--n", n, "--block-size",
                                block, "--out", tmp_path / "o.npz"],
                     f"m.npz:row_ptr: length {len(row_ptr)}, expected 1 head(s) x ({blocks} query "
                     "blocks + 1)")


@pytest.mark.parametrize("n, block, row_ptr, col_idx", [
    (BIG, BIG, [0, 1], [0]),                       # I = J = 1
    (BIG - 7, 2**62 - 1, [0, 2, 4], [0, 1, 0, 1]),  # I = J = 2: 2^63 - 8 = 2 (2^62 - 1) - 6
])
def test_mask_command_writes_well_formed_masks_near_2_63(tmp_path, n, block, row_ptr, col_idx):
    run("mask", "--pattern", "local:1", "--n", n, "--block-size", block, "--out",
        tmp_path / "m.npz", expect=0)
    got = np.load(tmp_path / "m.npz")
    assert got["row_ptr"].tolist() == row_ptr and got["col_idx"].tolist() == col_idx
    # The written file reads back through --mask with the same sizes.
    run("mask", "--mask", tmp_path / "m.npz", "--n", n, "--block-size", block, "--out",
        tmp_path / "again.npz", expect=0)
    again = np.load(tmp_path / "again.npz")
    assert again["row_ptr"].tolist() == row_ptr and again["col_idx"].tolist() == col_idx


def test_dense_pattern_near_2_63_is_one_full_block(tmp_path):
    run("mask", "--pattern", "dense", "--n", BIG, "--block-size", BIG, "--out", tmp_path / "m.npz",
        expect=0)
    got = np.load(tmp_path / "m.npz")
    assert got["row_ptr"].tolist() == [0, 1] and got["col_idx"].tolist() == [0]
