"""first_light_report.py - the reports of bench/gpu/first_light.sh.

  first_light_report.py ncu NCU_CSV SASS_MODEL_JSON OUT_JSON [HOPPER_NCU_CSV]
                        [--backward BACKWARD_NCU_CSV]
      Nsight Compute's raw CSV (ncu --csv --page raw) of the tensor-core forward
      (forward_mma_kernel), one row per launch, reduced to the last launch per head dim, beside
      sass_model.py's prediction for the same kernel (f16, the device's arch): tensor-pipe
      utilisation, achieved occupancy, DRAM throughput, L2 hit rate, duration, and the TFLOP/s
      the duration gives. HOPPER_NCU_CSV: the same for the Hopper forward
      (forward_wgmma_kernel, beside its warp-specialised model), under "hopper".
      --backward BACKWARD_NCU_CSV: the tensor-core backward's two passes (backward_dq_mma_kernel,
      backward_dkdv_mma_kernel) per head dim, under "backward": METRICS, every other metric of
      the sections the step asked for (warp stalls, shared memory, pipes) and the pair's TFLOP/s.
  first_light_report.py summary OUT_DIR TOTAL_S SUMMARY_S
      summary.txt on stdout, one screen: pass/fail and seconds per step (steps.json), the speed
      table with ratios to PyTorch's best backend per row (torch_compare.json), one line on
      bench_gpu's rows (bench_gpu.json, which says "complete": false when it was cut off), the
      ncu figures.

Pure Python; tested on the CPU by test_first_light_report.py.
"""
import csv
import io
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare_gpu  # noqa: E402  (summary_lines: one table format for both)

METRICS = {
    "tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "duration_ns": "gpu__time_duration.sum",
}


def _number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


# bench_gpu --quick's dense rows, which the ncu step profiles: their FLOP (4 D N^2 B H, as
# bench_gpu counts a dense forward) over a launch's duration give its TFLOP/s.
QUICK_DENSE = {"B": 1, "N": 2048, "H": 16}


def quick_dense_tflops(D, duration_ns):
    if not duration_ns:
        return None
    flop = 4 * D * QUICK_DENSE["N"] ** 2 * QUICK_DENSE["B"] * QUICK_DENSE["H"]
    return round(flop / duration_ns / 1e3, 1)


def ncu_launches(text):
    """The launches' rows of ncu's raw CSV, as dicts by column name: the header row starts with
    "ID", a units row follows (left out, as the program's own output and ==PROF== lines
    around the table are)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = csv.DictReader(io.StringIO("\n".join(
        line for line in lines[start:] if line.startswith('"'))))
    return [r for r in rows if str(r.get("ID", "")).isdigit()]


def parse_ncu_csv(text, family="forward_mma_kernel"):
    """{D: {metric: value}} from ncu's raw CSV (ncu_launches). D comes from the demangled name
    (forward_mma_kernel<__half, 64>, or `family`'s), else from the launch order (the
    benchmark runs D = 64 first)."""
    launches = ncu_launches(text)
    by_d = {}
    for n, r in enumerate(launches):
        m = re.search(family + r"<[^,>]*,\s*(\d+)", r.get("Kernel Name", ""))
        d = int(m.group(1)) if m else (64 if n < len(launches) / 2 else 128)
        by_d[d] = {k: _number(r.get(v)) for k, v in METRICS.items()}  # the last launch wins
        by_d[d]["kernel"] = r.get("Kernel Name", "")
        by_d[d]["tflops"] = quick_dense_tflops(d, by_d[d]["duration_ns"])
    return by_d


# The tensor-core backward's two kernels (cuda/backward_mma.cu), which the ncu step profiles
# with Nsight Compute's sections besides METRICS: the warp stall reasons and the shared-memory
# and pipe tables say where the passes lose time against the model.
BACKWARD_FAMILIES = ("backward_dq_mma_kernel", "backward_dkdv_mma_kernel")


def parse_ncu_raw(text, family):
    """{D: {metric: number}}: every numeric column of `family`'s last launch per head dim in
    ncu's raw CSV (the sections' metrics and METRICS), with its kernel name; D as
    parse_ncu_csv finds it."""
    by_d = {}
    for r in ncu_launches(text):
        m = re.search(family + r"<[^,>]*,\s*(\d+)", r.get("Kernel Name", ""))
        if not m:
            continue
        raw = {k: _number(v) for k, v in r.items()
               if k not in ("ID", "Process ID") and _number(v) is not None}
        raw["kernel"] = r.get("Kernel Name", "")
        by_d[int(m.group(1))] = raw  # the last launch wins
    return by_d


def backward_report(text):
    """The tensor-core backward at bench_gpu --quick's f16 dense shape, per head dim: each pass's
    METRICS and raw section metrics, and the pair's TFLOP/s (2.5 times the forward's FLOP over
    the two passes' durations, bench_gpu's backward formula)."""
    per_family = {f: parse_ncu_raw(text, f) for f in BACKWARD_FAMILIES}
    report = {}
    for d in (64, 128):
        passes = {}
        for f in BACKWARD_FAMILIES:
            raw = per_family[f].get(d)
            if raw is not None:
                passes[f] = {"metrics": {k: raw.get(v) for k, v in METRICS.items()}, "raw": raw}
        durations = [p["metrics"]["duration_ns"] for p in passes.values()]
        tflops = None
        if len(passes) == 2 and all(durations):
            forward = quick_dense_tflops(d, sum(durations))
            tflops = round(2.5 * forward, 1) if forward is not None else None
        report[str(d)] = {"passes": passes, "tflops": tflops}
    return report


def model_for(sass_json, D, arch, family="forward_mma_kernel"):
    """sass_model.py's row for `family`, f16, head dim D, on arch (e.g. "sm_90"; the Hopper
    kernel's rows name the arch-specific "sm_90a")."""
    for r in sass_json.get("results", []):
        if (r.get("kernel", "").find(family + "<") >= 0 and r.get("dtype") == "f16"
                and r.get("D") == D and r.get("arch") in (arch, arch + "a")):
            model = {"estimate_pct_of_f16_peak": round(100 * r["estimate"], 1)
                     if r.get("estimate") is not None else None,
                     "bound_by": r.get("bound_by"),
                     "fraction_of_dense_f16_peak": r.get("fraction_of_dense_f16_peak"),
                     "error": r.get("error")}
            if r.get("on_chip_estimate") is not None:  # the warp-specialised model's
                model["on_chip_pct_of_f16_peak"] = round(100 * r["on_chip_estimate"], 1)
                model["on_chip_bound_by"] = r.get("on_chip_bound_by")
            return model
    return None


def _by_head_dim(csv_text, sass_json, arch, family):
    measured = parse_ncu_csv(csv_text, family)
    return {str(d): {"measured": measured.get(d), "model": model_for(sass_json, d, arch, family)}
            for d in (64, 128)}


def ncu_report(csv_text, sass_json, arch, hopper_csv_text=None, backward_csv_text=None):
    shape = "dense (bench_gpu --quick: B=1, N=2048, H=16)"
    report = {"kernel": "forward_mma_kernel, f16, " + shape, "metrics": METRICS, "arch": arch,
              "by_head_dim": _by_head_dim(csv_text, sass_json, arch, "forward_mma_kernel")}
    if hopper_csv_text is not None:
        report["hopper"] = {"kernel": "forward_wgmma_kernel, f16, " + shape,
                            "by_head_dim": _by_head_dim(hopper_csv_text, sass_json, arch,
                                                        "forward_wgmma_kernel")}
    if backward_csv_text is not None:
        report["backward"] = {"kernel": " and ".join(BACKWARD_FAMILIES) + ", f16, " + shape,
                              "by_head_dim": backward_report(backward_csv_text)}
    return report


def _measured_dims(by_head_dim):
    return [d for d, r in by_head_dim.items() if r["measured"]]


def _backward_dims(by_head_dim):
    return [d for d, r in by_head_dim.items() if len(r["passes"]) == len(BACKWARD_FAMILIES)]


def ncu_lines(ncu):
    out = []
    blocks = [("forward_mma_kernel", ncu)]
    if ncu.get("hopper"):
        blocks.append(("forward_wgmma_kernel", ncu["hopper"]))
    for family, block in blocks:
        out.append(f"ncu, {family} f16 (measured | sass_model.py)")
        for d, r in sorted(block.get("by_head_dim", {}).items(), key=lambda kv: int(kv[0])):
            m, p = r.get("measured") or {}, r.get("model") or {}

            def f(key):
                v = m.get(key)
                return "n/a" if v is None else f"{v:.0f}%"
            on_chip = (f"; on chip {p['on_chip_pct_of_f16_peak']}% ({p.get('on_chip_bound_by')})"
                       if p.get("on_chip_pct_of_f16_peak") is not None else "")
            out.append(f"  D={d}: {m.get('tflops', 'n/a')} TFLOP/s, tensor pipe "
                       f"{f('tensor_pipe_pct')} | model "
                       f"{p.get('estimate_pct_of_f16_peak', 'n/a')}% ({p.get('bound_by', '?')}"
                       f"{on_chip}), occupancy {f('achieved_occupancy_pct')}, "
                       f"DRAM {f('dram_throughput_pct')}, L2 hit {f('l2_hit_rate_pct')}")
    if ncu.get("backward"):
        out.append("ncu, tensor-core backward f16 (measured; dQ pass | dK/dV pass)")
        for d, r in sorted(ncu["backward"]["by_head_dim"].items(), key=lambda kv: int(kv[0])):
            passes = [(r["passes"].get(f) or {}).get("metrics", {}) for f in BACKWARD_FAMILIES]

            def both(key, unit="%", scale=1.0):
                return " | ".join("n/a" if p.get(key) is None else f"{p[key] * scale:.0f}{unit}"
                                  for p in passes)
            out.append(f"  D={d}: {r.get('tflops') or 'n/a'} TFLOP/s, "
                       f"{both('duration_ns', ' us', 1e-3)}, tensor pipe "
                       f"{both('tensor_pipe_pct')}, occupancy {both('achieved_occupancy_pct')}")
    return out


def bench_gpu_line(bench):
    """One line on bench_gpu.json: its rows, how many failed, the samples behind the medians,
    and whether it reached its last row (bench_gpu rewrites the file after every row with
    "complete": false until the end; a file without the field was written at the end)."""
    if not bench:
        return "bench_gpu: no bench_gpu.json"
    rows = bench.get("results", [])
    failed = sum(1 for r in rows if r.get("status") != "ok")
    samples = [r[k] for r in rows if r.get("status") == "ok"
               for k in ("samples", "backward_samples") if r.get(k)]
    spread = f", {min(samples)}-{max(samples)} timed calls per median" if samples else ""
    state = ("complete" if bench.get("complete", True)
             else "PARTIAL: cut off before its last row")
    return (f"bench_gpu (C API, every dtype): {len(rows)} rows, {failed} failed{spread}; "
            f"{state}; table in timing.log")


def summary(steps, torch_compare, ncu, total_s, summary_s, made_with=None, bench=None):
    m = made_with or {}
    lines = [f"dilattn GPU first light: {m.get('device', torch_compare.get('device', '?'))}, "
             f"driver {m.get('driver', '?')}, commit {m.get('commit', '?')}, "
             f"torch {torch_compare.get('torch', '?')}, {total_s} s in all"]
    order = ["build", "kernels", "ring_py", "sanitizer", "timing", "ncu", "host_cpu"]
    for s in sorted(steps, key=lambda s: order.index(s["step"]) if s["step"] in order else 99):
        lines.append(f"  {s['step']:<10} {s['status'].upper():<4} {s['seconds']:>4} s "
                     f"(budget {s['budget_s']}) {s['detail'][:110]}")
    lines.append(f"  {'summary':<10} {'PASS':<4} {summary_s:>4} s")
    rows = torch_compare.get("rows", [])
    if rows:
        lines.append(f"TFLOP/s: {torch_compare.get('flop_formula', '')[:120]}")
        lines.append("ratio = PyTorch's best ms / dilattn ms (above 1: dilattn faster)")
        for direction in ("forward", "backward"):
            lines += torch_compare_gpu.summary_lines(rows, direction)
    else:
        lines.append("no speed table (torch_compare.json missing or empty)")
    lines.append(bench_gpu_line(bench))
    if ncu:
        lines += ncu_lines(ncu)
    return "\n".join(lines) + "\n"


def _load(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def main(argv):
    backward_path = None
    if argv[:1] == ["ncu"] and "--backward" in argv[:-1]:
        at = argv.index("--backward")
        backward_path = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    if len(argv) in (4, 5) and argv[0] == "ncu":
        csv_path, sass_path, out_path = argv[1:4]

        def text_of(path):
            try:
                with open(path) as f:
                    return f.read()
            except OSError:
                return ""
        sass = _load(sass_path, {})
        arch = next((r.get("arch") for r in sass.get("results", [])
                     if "forward_mma_kernel<" in r.get("kernel", "")), "?")
        report = ncu_report(text_of(csv_path), sass, arch,
                            text_of(argv[4]) if len(argv) == 5 else None,
                            text_of(backward_path) if backward_path is not None else None)
        with open(out_path, "w") as f:
            json.dump(report, f, indent=1)
        got = _measured_dims(report["by_head_dim"])
        print(f"ncu: forward_mma_kernel metrics for D = {', '.join(got) or 'none'}")
        ok = len(got) == 2
        if "hopper" in report:
            hopper = _measured_dims(report["hopper"]["by_head_dim"])
            print(f"ncu: forward_wgmma_kernel metrics for D = {', '.join(hopper) or 'none'}")
            ok = ok and len(hopper) == 2
        if "backward" in report:
            backward = _backward_dims(report["backward"]["by_head_dim"])
            print(f"ncu: tensor-core backward metrics (both passes) for D = "
                  f"{', '.join(backward) or 'none'}")
            ok = ok and len(backward) == 2
        return 0 if ok else 1
    if len(argv) == 4 and argv[0] == "summary":
        out_dir, total_s, summary_s = argv[1], int(argv[2]), int(argv[3])
        record = _load(os.path.join(out_dir, "steps.json"), {})
        sys.stdout.write(summary(record.get("steps", []),
                                 _load(os.path.join(out_dir, "torch_compare.json"), {}),
                                 _load(os.path.join(out_dir, "ncu.json"), {}), total_s,
                                 summary_s, record,
                                 _load(os.path.join(out_dir, "bench_gpu.json"), {})))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
