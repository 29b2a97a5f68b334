"""bench_gpu's timing rules and JSON, on the CPU: gpu_bench.cpp's main() linked against
gpu_bench_stub_runtime.cpp (a CUDA runtime and dilattn C API whose "kernels" sleep), the binary
named by DILATTN_BENCH_GPU_STUB (bench/gpu/meson.build sets it).

Checked: each direction of a row stops at --iters samples, or once its timed calls reach
--row-budget-ms, with at least one; a run killed part-way keeps the table rows it printed (stdout
is a pipe here, so this needs bench_gpu's line buffering) and a valid JSON of the same rows with
"complete": false; a failed row's message and the device name are escaped; without the cuda
backend it prints "no GPU" and exits 0; --options runs every row with one option through the
calls that option needs (the _ex calls with a new dropout offset each call, the sink logits),
and names it in the JSON and the table."""
import json
import os
import re
import subprocess
import time

QUICK_F16_DENSE = ["--quick", "--only", "dense", "--dtype", "f16"]


def stub():
    path = os.environ.get("DILATTN_BENCH_GPU_STUB")
    assert path and os.path.exists(path), (
        "DILATTN_BENCH_GPU_STUB must name the bench_gpu_stub binary (meson test sets it)")
    return path


def run(tmp_path, args, **env):
    out = tmp_path / "bench.json"
    proc = subprocess.run([stub(), "--json", str(out)] + args, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def test_each_direction_stops_at_iters_when_the_budget_allows(tmp_path):
    _, bench = run(tmp_path, QUICK_F16_DENSE + ["--iters", "4", "--row-budget-ms", "10000"],
                   STUB_BACKWARD_MS="2")
    assert bench["complete"] is True and bench["iters"] == 4
    assert [r["D"] for r in bench["results"]] == [64, 128]  # --only dense: not causal
    assert [(r["samples"], r["backward_samples"]) for r in bench["results"]] == [(4, 4)] * 2


def test_a_call_longer_than_the_budget_is_timed_once(tmp_path):
    _, bench = run(tmp_path, QUICK_F16_DENSE + ["--iters", "5", "--row-budget-ms", "1"],
                   STUB_FORWARD_MS="2", STUB_BACKWARD_MS="5")
    assert [(r["samples"], r["backward_samples"]) for r in bench["results"]] == [(1, 1)] * 2
    assert all(r["status"] == "ok" and r["backward_ms"] >= 5 for r in bench["results"])


def test_the_budget_cuts_a_row_between_one_call_and_iters(tmp_path):
    # 30 ms backward calls (D = 64) against 100 ms: 4 calls reach it, 1 cannot.
    _, bench = run(tmp_path, ["--quick", "--only", "dense", "--dtype", "bf16", "--iters", "8",
                              "--row-budget-ms", "100"], STUB_BACKWARD_MS="30")
    d64 = [r for r in bench["results"] if r["D"] == 64]
    assert d64 and all(1 < r["backward_samples"] < 8 and r["samples"] == 8 for r in d64)
    assert bench["row_budget_ms"] == 100


def test_the_json_names_the_commit_the_date_and_the_device(tmp_path):
    _, bench = run(tmp_path, QUICK_F16_DENSE + ["--iters", "1", "--no-backward"],
                   DILATTN_COMMIT="abc1234-dirty")
    assert bench["commit"] == "abc1234-dirty"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", bench["date"])
    assert bench["machine"] == 'Stub "GPU" \\ no device, sm_90'
    assert [r["backward_samples"] for r in bench["results"]] == [0] * 2


def test_a_failed_row_is_an_escaped_error_and_the_run_goes_on(tmp_path):
    stdout, bench = run(tmp_path, ["--quick", "--dtype", "f16", "--iters", "1"],
                        STUB_SPARSE_FAILS="1", STUB_BACKWARD_MS="1")
    sparse = [r for r in bench["results"] if r["kind"] == "sparse"]
    assert len(sparse) == 2 and bench["complete"] is True
    for r in sparse:
        assert r["status"] == "error" and r["samples"] == 0
        assert r["error"] == 'forward: mask "local:2" refused\n(stub)'
    assert all(r["status"] == "ok" for r in bench["results"] if r["kind"] != "sparse")
    assert "wrote" in stdout and "complete" in stdout


def test_a_killed_run_keeps_its_rows_in_the_table_and_the_json(tmp_path):
    out = tmp_path / "bench.json"
    # 100 ms backward calls (200 at D = 128), 5 timed after 2 warm-ups: 0.7 s or 1.4 s a row,
    # so about 3 rows by the kill.
    proc = subprocess.Popen([stub(), "--json", str(out), "--iters", "5"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "STUB_BACKWARD_MS": "100"})
    time.sleep(3.5)
    proc.kill()  # SIGKILL: nothing is flushed at exit, as with timeout -s KILL
    stdout = proc.communicate()[0]
    rows = [line for line in stdout.splitlines() if line.split()[:1] in (["dense"], ["dilated"],
                                                                          ["sparse"])]
    bench = json.loads(out.read_text())
    assert bench["complete"] is False
    assert 1 <= len(rows) < 20
    # Each row is printed, then the JSON rewritten: a kill between the two leaves one row more
    # in the table.
    assert len(rows) - 1 <= len(bench["results"]) <= len(rows)
    assert all(r["status"] == "ok" and r["backward_samples"] == 5 for r in bench["results"])


def test_without_the_cuda_backend_it_says_no_gpu_and_writes_nothing(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([stub(), "--json", str(out)], capture_output=True, text=True,
                          env={**os.environ, "STUB_NO_BACKEND": "1"}, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith("no GPU: the cuda backend cannot run here (backend unavailable)")
    assert not out.exists()


def test_each_option_runs_every_row_through_the_calls_it_needs(tmp_path):
    # The stub refuses what the library refuses: a plain call on a plan with dropout or sinks,
    # an _ex call without sinks on a sinks plan, a dropout offset used twice in a row.
    for option in ("plain", "dropout", "window", "softcap", "alibi", "sinks"):
        out, bench = run(tmp_path, QUICK_F16_DENSE + ["--iters", "3", "--options", option])
        assert bench["options"] == option and bench["complete"] is True, option
        assert f"options {option}:" in out
        assert [(r["status"], r["samples"], r["backward_samples"]) for r in bench["results"]] \
            == [("ok", 3, 3)] * 2, (option, bench["results"])


def test_an_unknown_option_is_a_usage_error(tmp_path):
    proc = subprocess.run([stub(), "--json", str(tmp_path / "x.json"), "--options", "bogus"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--options plain|dropout" in proc.stderr


def test_option_costs_runs_each_option_and_tables_them_against_plain(tmp_path):
    # bench/gpu/option_costs.sh with the stub as bench_gpu and an nvidia-smi that says a GPU is
    # there: one JSON per option and a table of ratios to the plain run, 7 files in all.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stub'\n")
    (fake / "nvidia-smi").chmod(0o755)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "option_costs.sh")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", script, str(out)] + QUICK_F16_DENSE + ["--iters", "2"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}",
                               "DILATTN_BENCH_GPU": stub()})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = ("plain", "dropout", "window", "softcap", "alibi", "sinks")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"options_{n}.json" for n in names] + ["option_costs.txt"])
    table = (out / "option_costs.txt").read_text().splitlines()
    assert table[1].split() == ["row"] + list(names[1:])
    rows = [line for line in table[2:] if line.startswith("dense f16")]
    assert len(rows) == 2 and all(len(re.findall(r"\d+\.\d\d /\s*\d+\.\d\d", r)) == 5
                                  for r in rows), table
