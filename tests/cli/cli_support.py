"""cli_support.py - running the `dilattn` executable (DILATTN_CLI, set by meson) as a user would,
making input files, and the common assertion that bad input exits 2 with one line and no file."""
import os
import resource
import subprocess

import numpy as np
import pytest

CLI = os.path.abspath(os.environ["DILATTN_CLI"]) if os.environ.get("DILATTN_CLI") else ""


def address_sanitized():
    """Whether the executable was built with -fsanitize=address (it then imports __asan_init)."""
    with open(CLI, "rb") as f:
        return b"__asan_init" in f.read()


def run(*args, expect=None, cwd=None, timeout=120, memory_limit=None):
    """Runs the tool; memory_limit (bytes of address space) turns unbounded growth into a failure
    instead of a swamped test machine; a hang past `timeout` raises subprocess.TimeoutExpired."""
    if not CLI:
        pytest.fail("DILATTN_CLI is not set (run through meson test)")

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    # AddressSanitizer reserves terabytes of shadow address space at start, so under it the
    # limit is left off (the timeout still guards against a hang).
    limit = memory_limit and not address_sanitized()
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       cwd=cwd, preexec_fn=limit_memory if limit else None)
    if expect is not None:
        assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def make_inputs(tmp, B=1, Nq=12, Nk=None, H=2, Hkv=None, D=4, dtype="<f4", seed=0):
    Nk = Nq if Nk is None else Nk
    Hkv = H if Hkv is None else Hkv
    rng = np.random.default_rng(seed)
    arrs = {"q": rng.standard_normal((B, Nq, H, D)), "k": rng.standard_normal((B, Nk, Hkv, D)),
            "v": rng.standard_normal((B, Nk, Hkv, D)), "do": rng.standard_normal((B, Nq, H, D))}
    paths = {}
    for name, a in arrs.items():
        arrs[name] = a.astype(dtype)
        paths[name] = tmp / f"{name}.npy"
        np.save(paths[name], arrs[name])
    return arrs, paths


def qkv_flags(paths):
    return ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"]]


def forward(tmp, paths, *flags, backend="ref"):
    run("forward", *qkv_flags(paths), "--out", tmp / "o.npy", "--lse", tmp / "lse.npy",
        "--backend", backend, *flags, expect=0)
    return np.load(tmp / "o.npy"), np.load(tmp / "lse.npy")


def backward(tmp, paths, *flags, backend="ref"):
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp / "dq.npy",
        "--dk", tmp / "dk.npy", "--dv", tmp / "dv.npy", "--backend", backend, *flags, expect=0)
    return [np.load(tmp / f"{n}.npy") for n in ("dq", "dk", "dv")]


def write_bsr(path, row_ptr, col_idx, head_ptr=None, dtype=np.int64):
    arrays = dict(row_ptr=np.asarray(row_ptr, dtype), col_idx=np.asarray(col_idx, dtype))
    if head_ptr is not None:
        arrays["head_ptr"] = np.asarray(head_ptr, dtype)
    np.savez(path, **arrays)


def available_backends():
    info = run("info", expect=0).stdout
    line = [l for l in info.splitlines() if l.startswith("backends available:")][0]
    return {name: state == "yes" for name, state in
            (part.strip().split(": ") for part in line.split(":", 1)[1].split(","))}


def expect_bad_input(tmp_path, args, *must_mention, **run_options):
    """Exit 2, one stderr line mentioning each string, no new file in tmp_path."""
    before = set(os.listdir(tmp_path))
    p = run(*args, **run_options)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for word in must_mention:
        assert str(word) in lines[0], (word, lines[0])
    assert set(os.listdir(tmp_path)) == before, set(os.listdir(tmp_path)) - before


def forward_args(tmp_path, paths, *extra):
    return ["forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy",
            "--backend", "ref", *extra]
