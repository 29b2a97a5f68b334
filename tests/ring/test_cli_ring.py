"""test_cli_ring.py - `dilattn forward|backward --ring-threads P [--ring-split S]` (SPEC 5 on P
threads of one process) equals the single-device run of the same command: on the f32
reference up to the ring's f32 accumulators (atol 1e-6, rtol 1e-5), on the cpu backend within
SPEC 8's f32 tolerances of the reference; for dense, causal GQA, dilated and block-sparse attention, uneven splits and both splits; and its
flags are checked (exit 2), a mask block cut by a shard boundary exits 3 naming it; with `--backend emu` each rank's shards go through the
tool's device copies (upload, ring on the emu backend, download), equal within SPEC 8 to the
single-device emu run and to the reference; `--ring mpi`
outside mpirun is one rank (MPI singleton) equal to the single-device run, or, in a build
without MPI, refused (exit 3). tests/ring/mpi/test_cli_ring_mpi.py runs it under mpirun.
K or V with another row count than Q exits 2 before any rank's rows are copied; a ring thread
that cannot start (an address-space limit) exits 3 with one line and no file, and the cpu
backend's pool under the same limit gives its usual result.
With the options of docs/spec.md sections 10 and 11 (--window, --softcap, --alibi-slopes,
--sinks with --d-sinks, --dropout with --seed and --offset), each alone and together, the
ring on ref equals the single-device ref run of the same flags (atol 1e-6, rtol 1e-5).
Run by meson (suite 'ring') with DILATTN_CLI set to the executable.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from cli_support import (address_sanitized, available_backends, make_inputs,  # noqa: E402
                         qkv_flags, run)
from spec_numpy import SPEC8_F32, assert_close  # noqa: E402


CASES = {
    "dense": [],
    "causal_gqa": ["--causal"],
    "dilated_groups_causal": ["--segments", "4,8,30", "--dilations", "1,2,3", "--heads-mode",
                              "groups", "--causal"],
    "sparse_local": ["--pattern", "local:1", "--block-size", "5"],
}


def forward(tmp, paths, tag, *flags):
    o, l = tmp / f"o_{tag}.npy", tmp / f"lse_{tag}.npy"
    run("forward", *qkv_flags(paths), "--out", o, "--lse", l, *flags, expect=0)
    return np.load(o), np.load(l)


def backward(tmp, paths, tag, *flags):
    out = [tmp / f"{n}_{tag}.npy" for n in ("dq", "dk", "dv")]
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", out[0], "--dk", out[1],
        "--dv", out[2], *flags, expect=0)
    return [np.load(p) for p in out]


OPTIONS = {
    "window": ["--window", "6,2"],
    "softcap": ["--softcap", "1.5"],
    "alibi": ["--alibi-slopes", "0.1,0.2,0.05,0.3"],
    "sinks": ["--sinks", "0.5,-inf,-1,0.25"],
    "dropout": ["--dropout", "0.25", "--seed", "9", "--offset", "2"],
}
OPTIONS["all"] = [flag for flags in OPTIONS.values() for flag in flags]


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("ring", [["3"], ["2", "--ring-split", "zigzag"]])
def test_ring_threads_options_equal_single_device(tmp_path, name, ring):
    _, paths = make_inputs(tmp_path, B=2, Nq=30, H=4, Hkv=2, D=4, seed=5)
    flags = ["--backend", "ref", "--causal", *OPTIONS[name]]
    ring_flags = ["--ring-threads", *ring]
    want = forward(tmp_path, paths, "ref", *flags)
    got = forward(tmp_path, paths, "ring", *flags, *ring_flags)
    for g, w in zip(got, want):
        assert_close(g, w, 1e-6, 1e-5)
    sinks = "--sinks" in flags
    extra = {}
    for tag, more in (("ref", []), ("ring", ring_flags)):
        d_sinks = tmp_path / f"d_sinks_{tag}.npy"
        out = [tmp_path / f"{n}_{tag}.npy" for n in ("dq", "dk", "dv")]
        run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", out[0], "--dk", out[1],
            "--dv", out[2], *flags, *more, *(["--d-sinks", d_sinks] if sinks else []), expect=0)
        extra[tag] = [np.load(p) for p in out] + ([np.load(d_sinks)] if sinks else [])
    for g, w in zip(extra["ring"], extra["ref"]):
        assert_close(g, w, 1e-6, 1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("ring", [["2"], ["3"], ["2", "--ring-split", "zigzag"]])
def test_ring_threads_equal_single_device(tmp_path, case, ring):
    H, Hkv = (3, 3) if case.startswith("dilated") else (4, 2)
    _, paths = make_inputs(tmp_path, B=2, Nq=40, H=H, Hkv=Hkv, D=4, seed=3)
    flags = CASES[case]
    if case == "sparse_local" and ring[0] == "3":
        pytest.skip("3 shards of 40 rows cut the 5-row mask blocks (UNSUPPORTED, tested below)")
    ring_flags = ["--ring-threads", *ring]
    want = forward(tmp_path, paths, "ref", "--backend", "ref", *flags)
    want_grads = backward(tmp_path, paths, "ref", "--backend", "ref", *flags)
    got = forward(tmp_path, paths, "ring_ref", "--backend", "ref", *flags, *ring_flags)
    got_grads = backward(tmp_path, paths, "ring_ref", "--backend", "ref", *flags, *ring_flags)
    for g, w in zip([*got, *got_grads], [*want, *want_grads]):
        # The ring merges partials into f32 accumulators: a few f32 roundings, not one.
        assert_close(g, w, atol=1e-6, rtol=1e-5)
    got = forward(tmp_path, paths, "ring_cpu", "--backend", "cpu", *flags, *ring_flags)
    got_grads = backward(tmp_path, paths, "ring_cpu", "--backend", "cpu", *flags, *ring_flags)
    assert_close(got[0], want[0], **SPEC8_F32)
    assert_close(got[1], want[1], atol=1e-4, rtol=0)
    for g, w in zip(got_grads, want_grads):
        assert_close(g, w, **SPEC8_F32)


EMU_CASES = {"causal_gqa": ["--causal"],
             "dilated_mod": ["--segments", "4,8", "--dilations", "1,2"]}


@pytest.mark.skipif(not available_backends().get("emu", False), reason="emu is not built")
@pytest.mark.parametrize("case", sorted(EMU_CASES))
@pytest.mark.parametrize("ring", [["2"], ["3"], ["2", "--ring-split", "zigzag"],
                                  ["3", "--ring-split", "zigzag"]])
def test_ring_threads_on_emu_device_equal_single_device(tmp_path, case, ring):
    # Small: the emulator runs a fiber per CUDA thread.
    H, Hkv = (4, 2) if case == "causal_gqa" else (2, 2)
    _, paths = make_inputs(tmp_path, B=1, Nq=22, H=H, Hkv=Hkv, D=4, seed=5)
    flags = EMU_CASES[case]
    ring_flags = ["--ring-threads", *ring]
    want = forward(tmp_path, paths, "ref", "--backend", "ref", *flags)
    want_grads = backward(tmp_path, paths, "ref", "--backend", "ref", *flags)
    single = forward(tmp_path, paths, "emu", "--backend", "emu", *flags)
    single_grads = backward(tmp_path, paths, "emu", "--backend", "emu", *flags)
    got = forward(tmp_path, paths, "ring_emu", "--backend", "emu", *flags, *ring_flags)
    got_grads = backward(tmp_path, paths, "ring_emu", "--backend", "emu", *flags, *ring_flags)
    for g, s, w in zip([got[0], *got_grads], [single[0], *single_grads], [want[0], *want_grads]):
        assert_close(g, s, **SPEC8_F32)
        assert_close(g, w, **SPEC8_F32)
    assert_close(got[1], single[1], atol=1e-4, rtol=0)  # LSE: SPEC 8's absolute bound
    assert_close(got[1], want[1], atol=1e-4, rtol=0)


def test_ring_flags_checked(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=12)
    out = ["--out", tmp_path / "o.npy"]
    p = run("forward", *qkv_flags(paths), *out, "--ring-split", "zigzag", expect=2)
    assert "--ring-split needs --ring-threads" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring-threads", "0", expect=2)
    assert "--ring-threads" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring-threads", "2", "--ring-split", "diagonal",
            expect=2)
    assert "'diagonal' is not one of contiguous, zigzag" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring-threads", "5", "--pattern", "local:1",
            "--block-size", "4", "--backend", "ref", expect=3)
    assert "cut a mask block" in p.stderr and "UNSUPPORTED" in p.stderr
    assert not (tmp_path / "o.npy").exists()


def test_ring_mpi_outside_mpirun(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=12)
    built_with_mpi = "MPI found at build: yes" in run("info", expect=0).stdout
    out = tmp_path / "o_mpi.npy"
    if not built_with_mpi:
        p = run("forward", *qkv_flags(paths), "--out", out, "--ring", "mpi", expect=3)
        assert "built without MPI" in p.stderr
        assert not out.exists()
        return
    run("forward", *qkv_flags(paths), "--out", out, "--ring", "mpi", "--backend", "ref", expect=0)
    run("forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--backend", "ref", expect=0)
    assert np.load(out).tobytes() == np.load(tmp_path / "o.npy").tobytes()


# Ring attention holds rows [p*N/P, (p+1)*N/P) of Q, K and V on rank p (SPEC 5): one N for all
# three. Dense cross-attention (K, V shorter or longer than Q) is valid without a ring and must
# be refused before any rank's rows are copied: exit 2 naming both lengths, nothing written.
# (20000, 1): each rank copying K's rows with Q's count read far past K (a crash, not a message).
@pytest.mark.parametrize("Nq,Nk", [(40, 5), (40, 41), (20000, 1)])
@pytest.mark.parametrize("command", ["forward", "backward"])
def test_ring_threads_refuse_kv_rows_unlike_q(tmp_path, Nq, Nk, command):
    _, paths = make_inputs(tmp_path, B=1, Nq=Nq, Nk=Nk, H=2, D=8)
    names = ("o", "lse") if command == "forward" else ("dq", "dk", "dv")
    outs = {n: tmp_path / f"{n}_out.npy" for n in names}
    flags = ["--out", outs["o"], "--lse", outs["lse"]] if command == "forward" else \
        ["--do", paths["do"], "--dq", outs["dq"], "--dk", outs["dk"], "--dv", outs["dv"]]
    before = sorted(os.listdir(tmp_path))
    p = run(command, *qkv_flags(paths), *flags, "--ring-threads", "2", "--backend", "ref")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.count("\n") == 1, p.stderr
    assert "--ring-threads" in p.stderr and str(Nq) in p.stderr and str(Nk) in p.stderr, p.stderr
    assert str(paths["k"]) in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == before  # no output, no stray temporary


def test_ring_threads_refuse_v_rows_unlike_k(tmp_path):
    _, paths = make_inputs(tmp_path, B=1, Nq=40, H=2, D=8)
    np.save(paths["v"], np.zeros((1, 4, 2, 8), np.float32))
    before = sorted(os.listdir(tmp_path))
    p = run("forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--ring-threads", "3",
            "--ring-split", "zigzag")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert str(paths["v"]) in p.stderr and "K's shape" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == before


# The limit on the address space a container (or ulimit -v) sets: 4096 ring threads of 8 MiB
# stacks cannot all start under 1 GB, so std::thread's constructor throws part way, while the
# ranks already started wait in their ring call. A real limit, no test hook: RLIMIT_NPROC would
# do the same for a user, but is not enforced for root (CI). Under ASan the limit cannot be
# set (it reserves terabytes of shadow memory).
THREAD_LIMIT_BYTES = 1 << 30


def test_ring_thread_that_cannot_start_exits_3(tmp_path):
    if address_sanitized():
        pytest.skip("ASan maps terabytes of shadow memory: RLIMIT_AS cannot be used")
    _, paths = make_inputs(tmp_path, B=1, Nq=4096, H=1, D=4)
    before = sorted(os.listdir(tmp_path))
    for command, flags in (("forward", ["--out", tmp_path / "o.npy"]),
                           ("backward", ["--do", paths["do"], "--dq", tmp_path / "dq.npy", "--dk",
                                         tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy"])):
        p = run(command, *qkv_flags(paths), *flags, "--ring-threads", "4096", "--backend", "ref",
                memory_limit=THREAD_LIMIT_BYTES, timeout=60)
        assert p.returncode == 3, (p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert "--ring-threads 4096: could not start the thread of ring rank" in lines[0], lines
        assert sorted(os.listdir(tmp_path)) == before  # no output, no stray temporary


def test_cpu_pool_threads_that_cannot_start_leave_fewer_workers(tmp_path):
    # The cpu backend's pool under the same limit: helpers that cannot start are not there,
    # and the result is the same (bitwise, cpu_thread_pool.h) as with 2 threads.
    if address_sanitized():
        pytest.skip("ASan maps terabytes of shadow memory: RLIMIT_AS cannot be used")
    # 16 batches x 16 heads: at least 256 work items, for more helpers (up to 511) than the
    # ~100 whose 8 MiB stacks fit under the limit.
    _, paths = make_inputs(tmp_path, B=16, Nq=256, H=16, D=4)
    want = tmp_path / "o_2.npy"
    run("forward", *qkv_flags(paths), "--out", want, "--backend", "cpu", "--threads", "2",
        expect=0)
    got = tmp_path / "o_512.npy"
    p = run("forward", *qkv_flags(paths), "--out", got, "--backend", "cpu", "--threads", "512",
            memory_limit=THREAD_LIMIT_BYTES, timeout=60)
    assert p.returncode == 0, p.stderr
    assert np.load(got).tobytes() == np.load(want).tobytes()


@pytest.mark.parametrize("split", ["contiguous", "zigzag"])
def test_ring_threads_one_row_on_many_ranks(tmp_path, split):
    # Nq = 1 on 7 ranks: six hold no rows (an empty shard, never a NULL pointer); the result is
    # the single device's, bitwise (the same cpu kernels over the same row), with a short
    # --ring-timeout that the ranks never come near.
    _, paths = make_inputs(tmp_path, B=2, Nq=1, H=2, D=4, seed=11)
    want = forward(tmp_path, paths, "single", "--backend", "cpu", "--causal")
    want_grads = backward(tmp_path, paths, "single", "--backend", "cpu", "--causal")
    ring = ["--ring-threads", "7", "--ring-split", split, "--ring-timeout", "5"]
    got = forward(tmp_path, paths, "ring", "--backend", "cpu", "--causal", *ring)
    got_grads = backward(tmp_path, paths, "ring", "--backend", "cpu", "--causal", *ring)
    for g, w in zip([*got, *got_grads], [*want, *want_grads]):
        assert g.tobytes() == w.tobytes()
