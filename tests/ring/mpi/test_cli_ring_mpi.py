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
  * the flags are checked (exit 2);
  * ranks launched with other commands or flags (MPMD: another backend, split, subcommand,
    output, no --ring mpi at all) stop at the first step: exit 2, one line naming the rank and
    the flag, no file; a rank that joins MPI and never answers ends the job after
    --ring-timeout (exit 3) instead of a hang; K shorter than Q exits 2 before any shard;
    one query row on 3 and 4 ranks equals the single device bitwise.
  * with every option of docs/spec.md sections 10 and 11 at once (--window, --softcap,
    --alibi-slopes, --sinks with --d-sinks, --dropout with --seed and --offset) on ref, P = 2
    and 3: bitwise equal to --ring-threads P, d_sinks included.
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


OPTION_FLAGS = ["--backend", "ref", "--causal", "--window", "6,2", "--softcap", "1.5",
                "--alibi-slopes", "0.1,0.2,0.05,0.3", "--sinks", "0.5,-inf,-1,0.25",
                "--dropout", "0.25", "--seed", "9", "--offset", "2"]


@pytest.mark.parametrize("P", [2, 3])
def test_ring_mpi_options_equal_threads(tmp_path, P):
    _, paths = make_inputs(tmp_path, B=2, Nq=30, H=4, Hkv=2, D=4, seed=5)
    for command in ("forward", "backward"):
        got = {}
        for tag in ("threads", "mpi"):
            out = outputs(tmp_path, tag, command)
            extra = []
            if command == "backward":
                out.append(tmp_path / f"d_sinks_{tag}.npy")
                extra = ["--d-sinks", out[-1]]
            ring = ["--ring-threads", str(P)] if tag == "threads" else ["--ring", "mpi"]
            args = [*command_flags(paths, out, command), *extra, *OPTION_FLAGS, *ring]
            if tag == "threads":
                run(command, *args, expect=0)
            else:
                result = mpirun(P, command, *args)
                assert result.returncode == 0, result.stderr
            got[tag] = [np.load(p) for p in out]
        for a, b in zip(got["mpi"], got["threads"]):
            assert a.tobytes() == b.tobytes()


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


# ---------------------------------------------------------------- launches that disagree
# An MPMD launch (mpirun -n 1 A : -n 1 B) can give each rank other flags. Every rank compares
# its command and flags with rank 0's before any data moves: the first rank that differs stops
# the job, rank 0 prints one line naming that rank and the flag, exit 2, no file written. Each
# exchange has a deadline (--ring-timeout), so a rank that never answers ends the job with exit 3
# instead of a hang. The launches run under a hang guard: SIGTERM (which mpirun passes on to
# its ranks) after `timeout` seconds, then the test fails.

def mpmd(rank_args, timeout=60):
    """mpirun with one process per entry of rank_args (each a full argument list after -n 1)."""
    if not MPIRUN:
        pytest.fail("DILATTN_MPIRUN is not set (run through meson test)")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe"]
    for i, args in enumerate(rank_args):
        cmd += ([":"] if i else []) + ["-n", "1", *map(str, args)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        pytest.fail(f"mpirun still running after {timeout} s: a rank hangs")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def dilattn_lines(stderr):
    """The lines the ranks printed (mpirun adds its own about the exit code)."""
    return [l for l in stderr.splitlines() if l.startswith("dilattn ")]


def forward_cmd(paths, out, *flags):
    return [CLI, "forward", *qkv_flags(paths), "--out", out, "--ring", "mpi", *flags]


DISAGREEMENTS = {
    # name: (flags of rank 0, flags of the other ranks, the words rank 0 prints)
    "backend": (["--backend", "ref"], ["--backend", "cpu"],
                "ring rank 1: flag --backend is 'cpu' here, 'ref' on rank 0"),
    "split": ([], ["--ring-split", "zigzag"],
              "ring rank 1: flag --ring-split is given here, not on rank 0"),
    "causal": (["--causal"], [], "ring rank 1: flag --causal is missing here, given on rank 0"),
    "scale": (["--scale", "0.5"], ["--scale", ".5"],
              "ring rank 1: flag --scale is '.5' here, '0.5' on rank 0"),
}


@pytest.mark.parametrize("case", sorted(DISAGREEMENTS))
def test_ring_mpi_ranks_with_other_flags_exit_2(tmp_path, case):
    _, paths = make_inputs(tmp_path, Nq=16)
    root_flags, other_flags, words = DISAGREEMENTS[case]
    out = tmp_path / "o.npy"
    before = sorted(os.listdir(tmp_path))
    p = mpmd([forward_cmd(paths, out, *root_flags), forward_cmd(paths, out, *other_flags)])
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = dilattn_lines(p.stderr)
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert "every rank of --ring mpi needs the same command and flags" in lines[0]
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temporary


def test_ring_mpi_rank_running_backward_exits_2(tmp_path):
    # Rank 0 forward, rank 1 backward: different messages from the first step on (this hung).
    _, paths = make_inputs(tmp_path, Nq=16)
    before = sorted(os.listdir(tmp_path))
    backward = [CLI, "backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
                "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", "--ring", "mpi"]
    p = mpmd([forward_cmd(paths, tmp_path / "o.npy"), backward])
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = dilattn_lines(p.stderr)
    assert len(lines) == 1 and "ring rank 1: runs 'backward', rank 0 runs 'forward'" in lines[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_ring_mpi_third_rank_with_another_output_exits_2(tmp_path):
    # Only rank 0 writes, but a rank told to write elsewhere was launched with another command.
    _, paths = make_inputs(tmp_path, Nq=16)
    before = sorted(os.listdir(tmp_path))
    out, other = tmp_path / "o.npy", tmp_path / "elsewhere.npy"
    p = mpmd([forward_cmd(paths, out), forward_cmd(paths, out), forward_cmd(paths, other)])
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = dilattn_lines(p.stderr)
    assert len(lines) == 1 and f"ring rank 2: flag --out is '{other}' here, '{out}' on rank 0" \
        in lines[0], p.stderr
    assert sorted(os.listdir(tmp_path)) == before


def test_ring_mpi_rank_without_ring_mpi_exits_2(tmp_path):
    # Rank 1 without --ring mpi would run alone while rank 0 waited in MPI_Init (no timeout).
    _, paths = make_inputs(tmp_path, Nq=16)
    before = sorted(os.listdir(tmp_path))
    plain = [CLI, "forward", *qkv_flags(paths), "--out", tmp_path / "o.npy"]
    p = mpmd([forward_cmd(paths, tmp_path / "o.npy"), plain])
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = dilattn_lines(p.stderr)
    assert len(lines) == 1 and "flag --ring mpi is missing" in lines[0], p.stderr
    assert sorted(os.listdir(tmp_path)) == before


def libmpi_path():
    """The MPI library the tool links (ldd), for a peer that joins the job and never answers."""
    out = subprocess.run(["ldd", CLI], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libmpi.so" in line and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    pytest.fail("the tool does not link libmpi: " + out)


def test_ring_mpi_rank_that_never_answers_times_out(tmp_path):
    # Rank 1 is a process that joins the MPI job (MPI_Init) and then does nothing: rank 0 waits
    # --ring-timeout 2 seconds at its first exchange, then exits 3 with one line.
    _, paths = make_inputs(tmp_path, Nq=16)
    before = sorted(os.listdir(tmp_path))
    silent = ("import ctypes, time\n"
              f"mpi = ctypes.CDLL({libmpi_path()!r}, mode=ctypes.RTLD_GLOBAL)\n"
              "mpi.MPI_Init(None, None)\n"
              "time.sleep(120)\n")
    start = time.monotonic()
    p = mpmd([forward_cmd(paths, tmp_path / "o.npy", "--ring-timeout", "2"),
              [sys.executable, "-c", silent]])
    assert p.returncode == 3, (p.returncode, p.stderr)
    lines = dilattn_lines(p.stderr)
    assert len(lines) == 1 and "ring rank 0: waited 2 s" in lines[0] and \
        "--ring-timeout" in lines[0], p.stderr
    assert time.monotonic() - start < 60
    assert sorted(os.listdir(tmp_path)) == before


def test_ring_mpi_kv_rows_unlike_q_exit_2(tmp_path):
    # Dense cross-attention (K shorter than Q) is valid alone, not as a ring (SPEC 5): refused
    # on rank 0 before any shard is made or sent (each rank copied K's rows by Q's count).
    for Nk in (1, 5):
        _, paths = make_inputs(tmp_path, Nq=40, Nk=Nk, D=8)
        out = tmp_path / "o.npy"
        before = sorted(os.listdir(tmp_path))
        p = mpirun(2, "forward", *qkv_flags(paths), "--out", out, "--ring", "mpi", timeout=60)
        assert p.returncode == 2, (p.returncode, p.stderr)
        lines = dilattn_lines(p.stderr)
        assert len(lines) == 1 and "flag --ring mpi: ring attention needs K and V with Q's row " \
            f"count (SPEC 5); {paths['k']} has {Nk} rows" in lines[0], p.stderr
        assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("P", [3, 4])
def test_ring_mpi_one_row_on_many_ranks(tmp_path, P):
    # Nq = 1: every rank but one holds no rows; forward and backward still equal the single
    # device bitwise (the same cpu kernels over the same row), both splits.
    _, paths = make_inputs(tmp_path, B=2, Nq=1, H=2, D=4, seed=7)
    for split in ("contiguous", "zigzag"):
        for command in ("forward", "backward"):
            want = outputs(tmp_path, "single", command)
            run(command, *command_flags(paths, want, command), "--backend", "cpu", "--causal",
                expect=0)
            got = outputs(tmp_path, f"mpi_{split}", command)
            p = mpirun(P, command, *command_flags(paths, got, command), "--backend", "cpu",
                       "--causal", "--ring", "mpi", "--ring-split", split, timeout=120)
            assert p.returncode == 0, (p.stdout, p.stderr)
            for g, w in zip(got, want):
                assert np.load(g).tobytes() == np.load(w).tobytes(), (command, split, g)


def test_ring_timeout_flag_checked(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=12)
    out = ["--out", tmp_path / "o.npy"]
    p = run("forward", *qkv_flags(paths), *out, "--ring-timeout", "5", expect=2)
    assert "flag --ring-timeout needs --ring-threads or --ring mpi" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring-threads", "2", "--ring-timeout", "0",
            expect=2)
    assert "flag --ring-timeout: 0 must be >= 1" in p.stderr
    p = run("forward", *qkv_flags(paths), *out, "--ring-threads", "2", "--ring-timeout",
            "2147484", expect=2)
    assert "flag --ring-timeout: 2147484 is above 2147483 seconds" in p.stderr
    assert not (tmp_path / "o.npy").exists()
