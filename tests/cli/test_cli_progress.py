"""test_cli_progress.py - the progress line of `dilattn forward/backward` (tools/progress_line.h,
docs/spec.md section 14.11): on a terminal (a pseudo-terminal here) a call draws
"dilattn forward: NN%" on stderr once it has run --progress-after seconds (0 here, so the test
does not depend on the machine's speed) and erases it at the end, and the outputs are the bits
of a run without a terminal; a short call with the default second draws nothing; in a pipe
nothing is drawn; --no-progress draws nothing on a terminal; Ctrl-C (SIGINT) while the line is up
stops the call: exit 130, one message, no output file."""
import os
import pty
import select
import signal
import subprocess
import time

import numpy as np

from cli_support import CLI, make_inputs, qkv_flags, run

# A reference forward of about a second here (release build): dense, N = 2048, 2 heads.
N, H, D = 2048, 2, 32
NOW = ["--progress-after", "0"]


def _run_on_terminal(args, interrupt=False, timeout=300):
    """Runs the tool with stderr on a pseudo-terminal; returns (exit code, stderr bytes). With
    interrupt, sends SIGINT once the progress line has appeared."""
    leader, follower = pty.openpty()
    # SIGINT at its default, as in a terminal: a runner that started this test as a background
    # job has it ignored, and the tool rightly leaves an ignored SIGINT ignored.
    p = subprocess.Popen([CLI, *map(str, args)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=follower,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(follower)
    seen, sent, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: every writer closed the terminal
                    chunk = b""
                if not chunk:
                    break
                seen += chunk
                if interrupt and not sent and b"%" in seen:
                    p.send_signal(signal.SIGINT)
                    sent = True
            elif p.poll() is not None:
                break
        code = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
        os.close(leader)
    assert not interrupt or sent, ("no progress line appeared to interrupt", seen)
    return code, seen


def _forward_args(tmp, paths, out_name, *extra):
    return ["forward", *qkv_flags(paths), "--out", tmp / out_name, "--backend", "ref", *extra]


def test_line_on_a_terminal_erased_at_the_end_same_bits(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=N, H=H, D=D)
    code, seen = _run_on_terminal(_forward_args(tmp_path, paths, "o_tty.npy", *NOW))
    assert code == 0, seen
    assert b"\rdilattn forward: " in seen and b"%" in seen, seen
    assert seen.endswith(b"\r\x1b[K"), seen[-80:]  # erased: the terminal is left clean
    # In a pipe: nothing on stderr, and the same bits.
    piped = run(*_forward_args(tmp_path, paths, "o_pipe.npy"), expect=0)
    assert piped.stderr == ""
    assert np.load(tmp_path / "o_tty.npy").tobytes() == np.load(tmp_path / "o_pipe.npy").tobytes()


def test_no_progress_flag_draws_nothing(tmp_path):
    _, paths = make_inputs(tmp_path, Nq=N // 2, H=H, D=D)
    code, seen = _run_on_terminal(_forward_args(tmp_path, paths, "o.npy", *NOW, "--no-progress"))
    assert code == 0 and seen == b"", seen


def test_a_short_call_draws_nothing(tmp_path):
    # Well under the default second on any machine.
    _, paths = make_inputs(tmp_path, Nq=64, H=H, D=D)
    code, seen = _run_on_terminal(_forward_args(tmp_path, paths, "o.npy"))
    assert code == 0 and seen == b"", seen


def test_ctrl_c_stops_the_call_and_writes_nothing(tmp_path):
    # Backward: the reference's slowest call, so the line is up long before the end.
    _, paths = make_inputs(tmp_path, Nq=N, H=H, D=D)
    args = ["backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
            "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", "--backend", "ref", *NOW]
    code, seen = _run_on_terminal(args, interrupt=True)
    assert code == 130, seen
    assert b"interrupted (Ctrl-C)" in seen and b"DILATTN_ERROR_CANCELLED" in seen, seen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["do.npy", "k.npy", "q.npy", "v.npy"]

