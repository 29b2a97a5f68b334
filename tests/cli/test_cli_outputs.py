"""test_cli_outputs.py - the `dilattn` command line: output files: written .npy bytes, all-or-nothing
multi-output commit, aliasing between outputs and inputs, read-only and non-regular targets, long
names, cleanup on errors and signals.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from cli_support import CLI, expect_bad_input, forward, forward_args, make_inputs, qkv_flags, run


def test_written_npy_reads_back_with_numpy_bit_exact(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    o, lse = forward(tmp_path, paths)
    # np.load parses the header strictly; check the payload is the exact array we computed.
    raw = open(tmp_path / "o.npy", "rb").read()
    assert raw[:8] == b"\x93NUMPY\x01\x00"
    header_len = int.from_bytes(raw[8:10], "little")
    assert (10 + header_len) % 64 == 0  # numpy's alignment
    assert np.array_equal(np.frombuffer(raw[10 + header_len:], "<f4").reshape(o.shape), o)
    assert o.flags.c_contiguous and o.shape == (1, 12, 2, 4)


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


# ---------------------------------------------------------------- aliasing


@pytest.mark.parametrize("alias, existing", [
    ("./o.npy", False), ("sub/../o.npy", False),  # not there yet: same directory and name
    ("./o.npy", True), ("sub/../o.npy", True), ("link.npy", True), ("hard.npy", True),  # inode
])
def test_outputs_that_are_one_file_are_refused(tmp_path, inputs, alias, existing):
    # --out and --lse naming one file: the LSE would silently replace O. Compared as resolved
    # files (same inode, or same resolved directory and name), not as strings.
    _, paths = inputs
    (tmp_path / "sub").mkdir()
    if existing or alias == "hard.npy":
        (tmp_path / "o.npy").write_bytes(b"precious")
    if alias == "link.npy":
        os.symlink("o.npy", tmp_path / "link.npy")
    if alias == "hard.npy":
        os.link(tmp_path / "o.npy", tmp_path / "hard.npy")
    args = ["forward", *qkv_flags(paths), "--out", "o.npy", "--lse", alias, "--backend", "ref"]
    expect_bad_input(tmp_path, args, "--lse", "--out", cwd=tmp_path)
    if (tmp_path / "o.npy").exists():
        assert (tmp_path / "o.npy").read_bytes() == b"precious"


@pytest.mark.parametrize("how", ["same", "relative", "hard"])
def test_output_that_is_an_input_is_refused(tmp_path, inputs, how):
    arrs, paths = inputs
    target = {"same": str(paths["k"]), "relative": "./k.npy", "hard": "hard.npy"}[how]
    if how == "hard":
        os.link(paths["k"], tmp_path / "hard.npy")
    args = ["forward", *qkv_flags(paths), "--out", "o.npy", "--lse", target, "--backend", "ref"]
    expect_bad_input(tmp_path, args, "--lse", "--k", cwd=tmp_path)
    assert np.array_equal(np.load(paths["k"]), arrs["k"])


def test_mask_output_that_is_its_input_is_refused(tmp_path):
    np.savez(tmp_path / "m.npz", row_ptr=np.array([0, 1, 2]), col_idx=np.array([0, 1]))
    before = (tmp_path / "m.npz").read_bytes()
    expect_bad_input(tmp_path, ["mask", "--mask", "m.npz", "--n", 8, "--block-size", 4, "--out",
                                "./m.npz"], "--out", "--mask", cwd=tmp_path)
    assert (tmp_path / "m.npz").read_bytes() == before


# ---------------------------------------------------------------- targets checked before any work


def test_backward_output_directory_is_refused_before_any_file_is_written(tmp_path, inputs):
    # Found when the outputs are reserved, not when the third rename fails after two succeeded.
    _, paths = inputs
    (tmp_path / "dv.npy").mkdir()
    args = ["backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
            "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", "--backend", "ref"]
    expect_bad_input(tmp_path, args, "--dv", "directory")
    assert not (tmp_path / "dq.npy").exists() and not (tmp_path / "dk.npy").exists()


def test_fifo_output_is_refused(tmp_path, inputs):
    _, paths = inputs
    os.mkfifo(tmp_path / "l.npy")
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), "--lse", "not a regular file",
                     timeout=20)
    assert not (tmp_path / "o.npy").exists()


def test_read_only_output_is_refused_and_kept(tmp_path, inputs):
    _, paths = inputs
    (tmp_path / "o.npy").write_bytes(b"precious")
    os.chmod(tmp_path / "o.npy", 0o444)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), "--out", "read-only")
    assert (tmp_path / "o.npy").read_bytes() == b"precious"
    assert os.stat(tmp_path / "o.npy").st_mode & 0o777 == 0o444


def test_replaced_output_keeps_its_mode(tmp_path, inputs):
    _, paths = inputs
    (tmp_path / "o.npy").write_bytes(b"old")
    os.chmod(tmp_path / "o.npy", 0o600)
    run(*forward_args(tmp_path, paths), expect=0)
    assert np.load(tmp_path / "o.npy").shape == (1, 12, 2, 4)
    assert os.stat(tmp_path / "o.npy").st_mode & 0o777 == 0o600


def test_output_name_of_250_characters_works(tmp_path, inputs):
    # NAME_MAX is 255: the temporary's name must not be the output's name plus a suffix.
    _, paths = inputs
    name = "o" * 246 + ".npy"
    run("forward", *qkv_flags(paths), "--out", tmp_path / name, "--backend", "ref", expect=0)
    assert np.load(tmp_path / name).shape == (1, 12, 2, 4)
    assert sorted(os.listdir(tmp_path)) == sorted(["do.npy", "k.npy", "q.npy", "v.npy", name])


# ---------------------------------------------------------------- signals


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_the_computation_removes_the_temporaries(tmp_path, sig):
    # A ref forward of [1, 4096, 4, 64] runs for seconds; the outputs' temporaries exist from the
    # start, and the signal must remove them (the process still dies of the signal).
    _, paths = make_inputs(tmp_path, Nq=4096, H=4, D=64)
    before = set(os.listdir(tmp_path))
    # The signal's default action in the child: a shell without job control starts background
    # jobs with SIGINT ignored, and the tool (rightly) leaves an ignored signal ignored.
    p = subprocess.Popen([CLI, *map(str, forward_args(tmp_path, paths))],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while set(os.listdir(tmp_path)) == before and p.poll() is None:
            assert time.monotonic() < deadline, "no temporary appeared"
            time.sleep(0.01)
        assert p.poll() is None, "finished before the signal; make the problem bigger"
        time.sleep(0.2)
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -sig
    assert set(os.listdir(tmp_path)) == before
