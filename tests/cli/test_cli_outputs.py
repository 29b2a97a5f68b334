"""test_cli_outputs.py - the `dilattn` command line: output files: written .npy bytes, all-or-nothing
multi-output commit, aliasing between outputs and inputs, read-only and non-regular targets, long
names, cleanup on errors and signals.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import os

import numpy as np
import pytest

from cli_support import expect_bad_input, forward, forward_args, make_inputs, qkv_flags, run


def test_error_leaves_existing_output_untouched(tmp_path):
    _, paths = make_inputs(tmp_path)
    (tmp_path / "o.npy").write_bytes(b"precious")
    np.save(paths["v"], np.zeros((1, 5, 2, 4), "<f4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"])
    assert (tmp_path / "o.npy").read_bytes() == b"precious"


def test_unwritable_output_directory_fails_before_work(tmp_path):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    args[args.index("--out") + 1] = tmp_path / "no" / "such" / "dir" / "o.npy"
    expect_bad_input(tmp_path, args, "--out")
