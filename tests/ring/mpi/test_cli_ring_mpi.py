"""test_cli_ring_mpi.py - `mpirun -n P dilattn forward|backward ... --ring mpi` (SPEC 5, one rank
per MPI process; rank 0 reads the inputs, scatters the rows, gathers and writes the outputs):
  * bitwise equal to `--ring-threads P` (the same ring algorithm on the threads transport), and
    within SPEC 8's f32 tolerances of the single-device reference, for dense, causal GQA,
    dilated and block-sparse attention (a pattern, and a --mask file that rank 0 alone reads),
    P = 2 and 3, both splits, forward and backward;
  * a bad input file on rank 0 stops every rank: exit 2, its message printed once (by rank 0;
    the other ranks exit 0 silently), no output;
  * a ring failure on every rank (a mask block cut by a shard) exits 3 naming it, no output;
  * rank 1 alone running out of memory before the ring (ulimit -d on that rank only) stops
    every rank at once: exit 3 (out of memory), rank 0 prints rank 1's message once, no
    output, and mpirun returns long before the ring's 600 s timeout;
  * the flags are checked (exit 2).
Run by meson (suite 'ring', tests/ring/mpi/meson.build) with DILATTN_CLI and DILATTN_MPIRUN set.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cli"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from cli_support import CLI, address_sanitized, make_inputs, qkv_flags, run, write_bsr  # noqa: E402
from spec_numpy import SPEC8_F32, assert_close  # noqa: E402

MPIRUN = os.environ.get("DILATTN_MPIRUN", "")

CASES = {
    "dense": [],
    "causal_gqa": ["--causal"],
    "dilated_groups_causal": ["--segments", "4,8,30", "--dilations", "1,2,3", "--heads-mode",
                              "groups", "--causal"],
    "sparse_local": ["--pattern", "local:1", "--block-size", "5"],
    "sparse_mask_file": ["--mask", "MASK", "--block-size", "5"],  # rank 0 reads it
}
# 3 shards of 40 rows cut the 5-row mask blocks: that combination is the error test below.
RINGS = [(P, split) for P in (2, 3) for split in ("contiguous", "zigzag")]
PARAMS = [(case, P, split) for case in sorted(CASES) for P, split in RINGS
          if not (case.startswith("sparse") and P == 3)]


def mpirun(P, *args, timeout=300):
    if not MPIRUN:
        pytest.fail("DILATTN_MPIRUN is not set (run through meson test)")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-n", str(P), CLI, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def outputs(tmp, tag, command):
    names = ("o", "lse") if command == "forward" else ("dq", "dk", "dv")
    return [tmp / f"{n}_{tag}.npy" for n in names]


def command_flags(paths, out, command):
    if command == "forward":
        return [*qkv_flags(paths), "--out", out[0], "--lse", out[1]]
    return [*qkv_flags(paths), "--do", paths["do"], "--dq", out[0], "--dk", out[1], "--dv", out[2]]


@pytest.mark.parametrize("case,P,split", PARAMS)
def test_ring_mpi_equals_threads_and_single_device(tmp_path, case, P, split):
    H, Hkv = (3, 3) if case.startswith("dilated") else (4, 2)
    _, paths = make_inputs(tmp_path, B=2, Nq=40, H=H, Hkv=Hkv, D=4, seed=3)
    case_flags = list(CASES[case])
    if "MASK" in case_flags:  # 8 blocks of 5 rows: each row block sees itself and block 0
        mask = tmp_path / "mask.npz"
        write_bsr(mask, [0, 1, 3, 5, 7, 9, 11, 13, 15], [0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7])
        case_flags[case_flags.index("MASK")] = mask
    flags = [*case_flags, "--backend", "cpu", "--ring-split", split]
    for command in ("forward", "backward"):
        want = outputs(tmp_path, "ref", command)
        run(command, *command_flags(paths, want, command), *case_flags, "--backend", "ref",
            expect=0)
        threads = outputs(tmp_path, "threads", command)
        run(command, *command_flags(paths, threads, command), *flags, "--ring-threads", P,
            expect=0)
        got = outputs(tmp_path, "mpi", command)
        p = mpirun(P, command, *command_flags(paths, got, command), *flags, "--ring", "mpi")
        assert p.returncode == 0, (p.stdout, p.stderr)
        for g, t, w in zip(got, threads, want):
            g, t, w = np.load(g), np.load(t), np.load(w)
            assert g.dtype == t.dtype and g.shape == t.shape
            assert g.tobytes() == t.tobytes(), f"{command}: MPI ring differs in bits from threads"
            if w.ndim == 3:  # LSE: SPEC 8's absolute bound
                assert_close(g, w, atol=1e-4, rtol=0)
            else:
                assert_close(g, w, **SPEC8_F32)


def test_ring_mpi_bad_input_on_rank_0_stops_every_rank(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=12)
    out = tmp_path / "o.npy"
    p = mpirun(3, "forward", "--q", tmp_path / "missing.npy", "--k", paths["k"], "--v", paths["v"],
               "--out", out, "--ring", "mpi")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.count("missing.npy") == 1, p.stderr  # rank 0 alone reports it
    assert not out.exists()


def test_ring_mpi_failure_on_every_rank_exits_3(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=40)
    out = tmp_path / "o.npy"
    p = mpirun(3, "forward", *qkv_flags(paths), "--out", out, "--ring", "mpi", "--pattern",
               "local:1", "--block-size", "5", "--backend", "ref")
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "cut a mask block" in p.stderr and "UNSUPPORTED" in p.stderr
    assert not out.exists()


def test_ring_mpi_out_of_memory_on_rank_1_alone_stops_every_rank(tmp_path):
    if address_sanitized():
        pytest.skip("ASan maps terabytes of shadow memory: ulimit -d cannot be used")
    if not MPIRUN:
        pytest.fail("DILATTN_MPIRUN is not set (run through meson test)")
    # Rank 1's shards of Q, K, V and O are 4 x 64 MiB; 100 MB of private data (ulimit -d:
    # heap and private mappings, not MPI's shared-memory segments, which ulimit -v starved into
    # a crash at MPI_Init on a loaded machine) is enough for MPI to start and too little for
    # them. No test hook: the tool meets a real allocation failure on one rank.
    rng = np.random.default_rng(0)
    paths = {}
    for name in ("q", "k", "v"):
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], rng.standard_normal((1, 32768, 8, 64), dtype=np.float32))
    out = tmp_path / "o.npy"
    rank_1_small = ('[ "$OMPI_COMM_WORLD_RANK" = 1 ] && ulimit -d 100000; exec "$0" "$@"')
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-n", "2", "sh", "-c", rank_1_small,
           CLI, "forward", *map(str, qkv_flags(paths)), "--out", str(out), "--ring", "mpi",
           "--backend", "cpu"]
    start = time.monotonic()
    # 60 s: a hang detector (before every rank agreed, rank 0 waited for the ring's 600 s
    # timeout), not a speed test.
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert p.stderr.count("ring rank 1: out of memory") == 1, p.stderr
    assert elapsed < 60
    assert not out.exists()


def test_ring_mpi_flags_checked(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=12)
    out = ["--out", tmp_path / "o.npy"]
    p = run("forward", *qkv_flags(paths), *out, "--ring", "nccl", expect=2)
    assert "flag --ring: 'nccl' is not one of mpi" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring", "mpi", "--ring-threads", "2", expect=2)
    assert "exclude each other" in p.stderr
    assert not (tmp_path / "o.npy").exists()
