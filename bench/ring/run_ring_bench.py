#!/usr/bin/env python3
"""run_ring_bench.py - the ring benchmark on both transports: bench_ring (threads, P = 1..4 in
one process) and bench_ring_mpi under `mpirun -n P` for P = 1..4; merges their rows into one
JSON and one table (forward time, speed against P = 1 of the same transport, shift time
exposed and bare, the fraction hidden behind compute, peak ring memory over shard bytes).

Usage: python3 bench/ring/run_ring_bench.py BUILD_DIR [--out PREFIX] [--repeats R] [--quick]
       [--note TEXT]
Writes PREFIX.json and PREFIX.txt (default bench/results/ring_bench.<host tag>); the note (the
machine's state: other jobs running, ...) goes into both.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--out", default="bench/results/ring_bench.epyc-2core-avx512")
    ap.add_argument("--repeats", default="3")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default="")
    ap.add_argument("--ranks", default="1,2,3,4", help="P values to run (threads and MPI)")
    args = ap.parse_args()
    bench = os.path.join(args.build, "bench", "ring")
    extra = ["--repeats", args.repeats] + (["--quick"] if args.quick else [])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        threads_json = os.path.join(tmp, "threads.json")
        run([os.path.join(bench, "bench_ring"), "--json", threads_json, "--ranks", args.ranks,
             *extra])
        runs.append(json.load(open(threads_json)))
        mpi_exe = os.path.join(bench, "bench_ring_mpi")
        mpirun = shutil.which("mpirun")
        if os.path.exists(mpi_exe) and mpirun:
            for P in (int(p) for p in args.ranks.split(",")):
                out = os.path.join(tmp, f"mpi{P}.json")
                run([mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(P), mpi_exe,
                     "--json", out, *extra])
                runs.append(json.load(open(out)))
        else:
            print("no bench_ring_mpi or mpirun: threads rows only", file=sys.stderr)
    rows = [r for run_ in runs for r in run_["rows"]]
    first = runs[0]
    merged = {"machine": first["machine"], "logical_cores": first["logical_cores"],
              "isa": first["isa"], "repeats": int(args.repeats), "note": args.note,
              "load_average_at_start": [r["load_average_at_start"] for r in runs],
              "method": "shift_exposed_s: time inside exchange_begin + exchange_end during the "
                        "ring call, summed over ranks; shift_bare_s: the same exchanges with no "
                        "compute between begin and end; hidden = 1 - exposed / bare "
                        "(lib/ring/ring_stats.h); sent_bytes_per_rank: the bytes each rank sent "
                        "in the call; all_rows_bytes_per_rank: (P-1) x the rank's K/V shard, "
                        "what a ring sending every row to every rank sends",
              "rows": rows}
    base = {}
    for r in rows:
        if r["P"] == 1:
            base[(r["transport"], r["case"])] = r["forward_s"]
    lines = [f"# python3 bench/ring/run_ring_bench.py {args.build} --repeats {args.repeats}"
             + (" --quick" if args.quick else ""),
             f"# {args.note}" if args.note else "#",
             f"machine: {first['machine']}, {first['logical_cores']} logical cores, cpu backend "
             f"ISA {first['isa']}, 1 worker per rank; B=1 H=8 D=64 f32; load average at the start "
             f"of each run: {', '.join(str(x) for x in merged['load_average_at_start'])}",
             f"{'transport':<9} {'case':<20} {'N':>6} {'P':>2} {'fwd s':>9} {'vs P=1':>7} "
             f"{'exposed s':>10} {'bare s':>9} {'hidden':>7} {'peak/shards':>11} "
             f"{'sent MB per rank':>24} {'of all rows':>11}"]
    for r in rows:
        speed = base.get((r["transport"], r["case"]), 0) / r["forward_s"] if r["forward_s"] else 0
        hidden = "-" if r["shift_hidden_fraction"] is None else f"{100 * r['shift_hidden_fraction']:.0f}%"
        sent = "/".join(f"{b / 1e6:.2f}" for b in r.get("sent_bytes_per_rank", [])) or "-"
        all_rows = sum(r.get("all_rows_bytes_per_rank", []))
        share = f"{100 * sum(r['sent_bytes_per_rank']) / all_rows:.1f}%" if all_rows else "-"
        lines.append(f"{r['transport']:<9} {r['case']:<20} {r['N']:>6} {r['P']:>2} "
                     f"{r['forward_s']:>9.4f} {speed:>6.2f}x {r['shift_exposed_s']:>10.5f} "
                     f"{r['shift_bare_s']:>9.5f} {hidden:>7} {r['peak_over_shards']:>10.2f}x "
                     f"{sent:>24} {share:>11}"
                     + ("" if r["status"] == "ok" else " " + r["status"]))
    table = "\n".join(lines) + "\n"
    with open(args.out + ".json", "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    with open(args.out + ".txt", "w") as f:
        f.write(table)
    print(table, end="")
    print(f"wrote {args.out}.json and {args.out}.txt")


if __name__ == "__main__":
    main()
