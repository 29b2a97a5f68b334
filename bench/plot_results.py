#!/usr/bin/env python3
"""plot_results.py - figures of the benchmark results in bench/results/, for docs/performance.md.

Reads every bench/results/*.json and writes one PNG per figure into docs/img/, named after the
file it is drawn from (<file stem>.<what>.png). Run by hand; nothing in the build or the tests
needs it, and it needs matplotlib only to draw (the Agg backend, no display):

    python3 bench/plot_results.py [--results bench/results] [--out docs/img] [--list]

--list prints the figures and their series without drawing (no matplotlib needed).

What it draws, each from one results file (never from a number no results file holds):
  <stem>.time.png    files of bench/cpu/torch_sdpa_compare.py (torch_sdpa_compare*,
                     torch_sdpa_sweep*): forward and backward process CPU-seconds against N,
                     dilattn's cpu backend and PyTorch's fused CPU flash attention, dense, causal
                     and dilated (CPU-seconds, the tables' main figure: the benchmark machines
                     are shared and wall time is disturbed).
  <stem>.peak.png    the same files, and cpu_bench*: GFLOP executed per CPU-second over the FMA
                     peak per CPU-second measured in the same run, against N.
  <stem>.memory.png  cpu_bench*: peak RSS against N beside the bytes of Q, K, V, O and LSE.
  <stem>.png         ring_bench*: forward time and the busiest rank's peak ring memory against P;
                     sparse_bench*: time against the block density.
  <stem>.d<D>.png    gpu_torch_compare*, gpu_bench*: TFLOP/s against N, dilattn's CUDA kernels
                     beside PyTorch's SDPA backends, forward and backward, per head dimension D.
A figure against N or P is drawn only where one of its series has MIN_POINTS distinct values (a
single N is a table, not a line). Every caption names the machine, commit and date the file
records, and says "not recorded" where the file lacks one.

The functions above the drawing code turn JSON into figure descriptions (plain dicts and lists)
and need no matplotlib; bench/test_plot_results.py tests them.
"""
import argparse
import glob
import json
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MIN_POINTS = 3
KINDS = ("dense", "causal", "dilated")


# ---------------------------------------------------------------- reading
def load_results(results_dir):
    """[(file name, parsed JSON)] for every *.json in results_dir that parses, sorted by name."""
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue  # a file that is not JSON draws nothing
        if isinstance(data, dict):
            out.append((os.path.basename(path), data))
    return out


def stem(name):
    return name[:-len(".json")] if name.endswith(".json") else name


def machine_name(data):
    """The machine as the file names it: the CPU with its ISA and threads, or the GPU."""
    m = data.get("machine")
    if isinstance(m, dict):
        isa = data.get("isa") or m.get("cpu_isa") or (data.get("peak") or {}).get("cpu_isa")
        threads = m.get("threads", data.get("threads"))
        parts = [m.get("cpu", "CPU not recorded")] + ([isa] if isa else []) + \
            ([f"{threads} threads"] if threads else [])
        return ", ".join(str(p) for p in parts)
    if isinstance(m, str):
        return m + (f", {data['isa']}" if data.get("isa") else "")
    return data.get("device", "machine not recorded")


def caption(name, data, note=""):
    """Machine, commit and date from the file, and the file itself."""
    commit = data.get("commit", "not recorded")
    date = data.get("date", "not recorded")
    text = f"{machine_name(data)}; commit {commit}, date {date}; bench/results/{name}"
    return text + (f"\n{note}" if note else "")


def series(label, points, style=None):
    """A line: (x, y) points sorted by x; a point without a number is left out."""
    pts = sorted((float(x), float(y)) for x, y in points if x is not None and y is not None)
    return {"label": label, "points": pts, "style": style or {"marker": "o"}}


def enough(panels):
    """Whether some series of the panels has MIN_POINTS distinct x values."""
    return any(len({x for x, _ in s["points"]}) >= MIN_POINTS for p in panels for s in p["series"])


def figure(name, what, title, data, panels, note=""):
    return {"file": f"{stem(name)}.{what}.png" if what else f"{stem(name)}.png",
            "source": name, "title": title, "caption": caption(name, data, note),
            "panels": [p for p in panels if p["series"]]}


def panel(title, xlabel, ylabel, lines, xlog=True, ylog=True):
    return {"title": title, "xlabel": xlabel, "ylabel": ylabel, "xlog": xlog, "ylog": ylog,
            "series": [s for s in lines if s["points"]]}


# ---------------------------------------------------------------- CPU against PyTorch
def sdpa_kind(case):
    """dense, causal or dilated; None for a packed (documents) case, which has no N trend."""
    if case.get("docs"):
        return None
    return "dilated" if case.get("dilated") else ("causal" if case.get("causal") else "dense")


def sdpa_cases(data):
    """The cases of a torch_sdpa_compare-format file that carry both sides' CPU-seconds."""
    out = []
    for c in data.get("cases", []):
        if isinstance(c, dict) and sdpa_kind(c) and isinstance(c.get("dilattn"), dict) \
                and isinstance(c.get("torch"), dict) and "N" in c:
            out.append(c)
    return out


STYLE_SIDE = {"dilattn": {"linestyle": "-", "marker": "o"},
              "torch": {"linestyle": "--", "marker": "s"}}
COLOR_KIND = {"dense": "C0", "causal": "C1", "dilated": "C2"}
SIDE_NAME = {"dilattn": "dilattn", "torch": "PyTorch"}


def sdpa_time_figures(results):
    figs = []
    for name, data in results:
        cases = sdpa_cases(data)
        if not cases:
            continue
        panels = []
        for part in ("forward", "backward"):
            lines = []
            for kind in KINDS:
                for side in ("dilattn", "torch"):
                    pts = [(c["N"], c[side].get(f"{part}_cpu_s")) for c in cases
                           if sdpa_kind(c) == kind]
                    lines.append(series(f"{SIDE_NAME[side]} {kind}", pts,
                                        dict(STYLE_SIDE[side], color=COLOR_KIND[kind])))
            panels.append(panel(part, "N (tokens)", "CPU-seconds", lines))
        if enough(panels):
            dtype = data.get("dtype", "f32")
            figs.append(figure(name, "time", f"dilattn vs PyTorch fused CPU attention, {dtype}",
                               data, panels, "process CPU-seconds, median of repeats (less "
                               "disturbed than wall time on a shared machine); "
                               + sdpa_shape(cases[0], data)))
    return figs


def sdpa_shape(case, data):
    """The problem's shape as the file records it: B, H, D, and the dilated configuration."""
    text = " ".join(f"{k}={case[k]}" for k in ("B", "H", "D") if k in case)
    cfg = data.get("dilated_config")
    if isinstance(cfg, dict) and cfg.get("segments") and cfg.get("dilations"):
        text += (f"; dilated: segments {','.join(map(str, cfg['segments']))}, dilations "
                 f"{','.join(map(str, cfg['dilations']))}, heads {cfg.get('head_mode', '?')}")
    return text


def sdpa_peak_fraction(case, side, part, peak_per_cpu_s):
    """GFLOP the side executes per CPU-second over the peak per CPU-second: dilattn computes a
    pair several dilated branches hold once (distinct_pairs), PyTorch every pair of the multiset."""
    secs = case[side].get(f"{part}_cpu_s")
    gflop = case.get(f"{part}_gflop")
    if not secs or gflop is None or not peak_per_cpu_s:
        return None
    if side == "dilattn" and case.get("distinct_pairs") and case.get("pairs"):
        gflop = gflop * case["distinct_pairs"] / case["pairs"]
    return gflop / secs / peak_per_cpu_s


def cpu_peak_figures(results):
    figs = []
    for name, data in results:
        cases = sdpa_cases(data)
        peak = (data.get("peak") or {}).get("fma_peak_gflops_per_cpu_second")
        if cases and peak:
            panels = []
            for part in ("forward", "backward"):
                lines = []
                for kind in KINDS:
                    for side in ("dilattn", "torch"):
                        pts = [(c["N"], sdpa_peak_fraction(c, side, part, peak)) for c in cases
                               if sdpa_kind(c) == kind]
                        lines.append(series(f"{SIDE_NAME[side]} {kind}", pts,
                                            dict(STYLE_SIDE[side], color=COLOR_KIND[kind])))
                panels.append(panel(part, "N (tokens)", "fraction of FMA peak", lines,
                                    ylog=False))
            note = (f"GFLOP executed per CPU-second / measured f32 FMA peak per CPU-second "
                    f"({peak:.1f})")
            title = f"Share of the FMA peak, {data.get('dtype', 'f32')} inputs"
        elif data.get("fma_peak_gflops_per_cpu_second") and isinstance(data.get("cases"), list):
            # cpu_bench: its forward_cpu_efficiency, 4 D pairs (the pairs it counts) per
            # CPU-second over the peak per CPU-second; dilattn alone
            lines = [series(case_stem(c["name"]), pts)
                     for c, pts in bench_groups(data, "forward_cpu_efficiency")]
            panels = [panel("forward", "N (tokens)", "fraction of FMA peak", lines, ylog=False)]
            note = (f"dilattn forward, 4 D pairs per CPU-second / measured FMA peak per CPU-second "
                    f"({data['fma_peak_gflops_per_cpu_second']:.1f})")
            title = "Share of the FMA peak (cpu_bench)"
        else:
            continue
        if enough(panels):
            figs.append(figure(name, "peak", title, data, panels, note))
    return figs


# ---------------------------------------------------------------- cpu_bench: memory
def case_stem(case_name):
    """A case's name without its _N<n> part: the cases of one sweep share it."""
    return re.sub(r"_N\d+", "", case_name)


def bench_groups(data, field):
    """cpu_bench cases holding `field`, grouped by case_stem: [(first case, [(N, value)])]."""
    groups = {}
    for c in data.get("cases", []):
        if isinstance(c, dict) and "N" in c and "name" in c and c.get(field) is not None \
                and c.get("Nq", c["N"]) == c["N"]:  # a decode row (Nq 1) is no point of a sweep
            groups.setdefault(case_stem(c["name"]), (c, []))[1].append((c["N"], c[field]))
    return list(groups.values())


def memory_figures(results):
    figs = []
    for name, data in results:
        if not isinstance(data.get("cases"), list):
            continue
        lines = []
        io = dict((case_stem(c["name"]), pts) for c, pts in bench_groups(data, "qkvo_lse_bytes"))
        for i, (c, pts) in enumerate(bench_groups(data, "peak_rss_bytes")):
            key = case_stem(c["name"])
            color = f"C{i % 10}"
            lines.append(series(f"{key}: peak RSS", [(n, b / 2**30) for n, b in pts],
                                {"color": color, "marker": "o", "linestyle": "-"}))
            lines.append(series(f"{key}: Q,K,V,O,LSE bytes",
                                [(n, b / 2**30) for n, b in io.get(key, [])],
                                {"color": color, "marker": "x", "linestyle": ":"}))
        panels = [panel("peak RSS and Q, K, V, O, LSE bytes", "N (tokens)", "GiB", lines)]
        if enough(panels):
            figs.append(figure(name, "memory", "Peak memory against the I/O bytes", data, panels,
                               "peak RSS: the child process that ran the case (one per case)"))
    return figs


# ---------------------------------------------------------------- cpu_bench: time to 1M tokens
def bench_config_groups(data, field):
    """cpu_bench cases with a positive `field`, grouped by what they compute (kind, causal, head
    mode, B, H, D), so that a sweep and the 1M-token case of one configuration form one line;
    [(label, [(N, value)])], the first case of an N kept."""
    groups = {}
    for c in data.get("cases", []):
        if not (isinstance(c, dict) and c.get("kind") and "N" in c
                and c.get("Nq", c["N"]) == c["N"]):
            continue
        value = c.get(field)
        if not isinstance(value, (int, float)) or value <= 0:  # 0: not measured (1M backward)
            continue
        key = (c["kind"], bool(c.get("causal")), c.get("head_mode") if c["kind"] == "dilated"
               else None, c.get("B"), c.get("H"), c.get("D"))
        points = groups.setdefault(key, {})
        points.setdefault(c["N"], value)
    out = []
    for (kind, causal, mode, b, h, d), points in groups.items():
        label = kind + (" causal" if causal else "") + (f" ({mode})" if mode else "")
        out.append((f"{label}, B={b} H={h} D={d}", sorted(points.items())))
    return out


def bench_time_figures(results):
    figs = []
    for name, data in results:
        if not data.get("fma_peak_gflops_per_cpu_second") or not isinstance(data.get("cases"),
                                                                               list):
            continue
        panels = [panel(part, "N (tokens)", "seconds (wall)",
                        [series(label, pts) for label, pts in
                         bench_config_groups(data, f"{part}_s")])
                  for part in ("forward", "backward")]
        if enough(panels):
            figs.append(figure(name, "time", "dilattn cpu backend: time against N", data, panels,
                               f"median wall seconds, {data.get('threads', '?')} threads; "
                               "a missing point was not measured"))
    return figs


# ---------------------------------------------------------------- ring, block-sparse
def ring_figures(results):
    figs = []
    for name, data in results:
        rows = [r for r in data.get("rows", []) if isinstance(r, dict) and "P" in r
                and "peak_ring_bytes" in r and r.get("status", "ok") == "ok"]
        if not rows:
            continue
        keys = sorted({(r.get("transport", "?"), r.get("case", "?"), r.get("N")) for r in rows},
                      key=str)
        times, mems = [], []
        for i, (transport, case, n) in enumerate(keys):
            mine = [r for r in rows if (r.get("transport", "?"), r.get("case", "?"), r.get("N"))
                    == (transport, case, n)]
            style = {"color": f"C{i % 10}", "marker": "o",
                     "linestyle": "-" if transport == "threads" else "--"}
            label = f"{transport}, {case} N={n}"
            times.append(series(label, [(r["P"], r.get("forward_s")) for r in mine], style))
            mems.append(series(label, [(r["P"], r["peak_ring_bytes"] / 2**20) for r in mine],
                               style))
        panels = [panel("forward time", "P (ranks)", "seconds (wall)", times, xlog=False,
                        ylog=False),
                  panel("busiest rank's ring memory", "P (ranks)", "MiB beyond its shards",
                        mems, xlog=False, ylog=False)]
        if enough(panels):
            figs.append(figure(name, "", "Ring attention against the number of ranks", data,
                               panels, "forward wall seconds; memory: the most any rank's "
                               "ring held beyond its own shards (peak_ring_bytes)"))
    return figs


def sparse_figures(results):
    figs = []
    for name, data in results:
        rows = [r for r in data.get("rows", []) if isinstance(r, dict)
                and r.get("density") is not None and r.get("seconds") is not None]
        if not rows:
            continue
        lines = [series("dilattn block-sparse", [(r["density"], r["seconds"]) for r in rows],
                        {"marker": "o", "color": "C0"})]
        full = [r["seconds"] for r in rows if r["density"] == 1]
        if full:  # the dense row times density: where exact proportionality would put each row
            lines.append(series("dense time x density", [(r["density"], full[0] * r["density"])
                                                          for r in rows],
                                {"linestyle": ":", "color": "grey"}))
        shape = " ".join(f"{k}={data[k]}" for k in ("B", "N", "H", "D", "block") if k in data)
        panels = [panel(data.get("pass", "forward"), "density of kept blocks", "seconds (wall)",
                        lines, xlog=False, ylog=False)]
        if enough(panels):
            figs.append(figure(name, "", "Block-sparse time against density", data, panels,
                               shape))
    return figs


# ---------------------------------------------------------------- GPU
def gpu_compare_rows(data):
    """gpu_torch_compare rows as (kind, D, direction, N, {implementation: TFLOP/s})."""
    out = []
    for r in data.get("rows", []):
        if not isinstance(r, dict) or r.get("kind") not in KINDS:
            continue
        m = re.search(r"\bN=(\d+)", r.get("label", ""))
        if not m:
            continue
        impls = {}
        if (r.get("dilattn") or {}).get("status") == "ok":
            impls["dilattn"] = r["dilattn"].get("tflops")
        for k, v in (r.get("torch") or {}).items():
            if isinstance(v, dict) and v.get("status") == "ok":
                impls[f"torch {k}"] = v.get("tflops")
        out.append((r["kind"], r.get("D"), r.get("direction"), int(m.group(1)), impls))
    return out


GPU_DTYPE = {0: "f32", 2: "f16", 3: "bf16"}  # gpu_bench's dilattn_dtype codes


def gpu_bench_rows(data):
    """gpu_bench results as (kind, D, direction, N, {implementation: TFLOP/s})."""
    out = []
    for r in data.get("results", []):
        if not isinstance(r, dict) or r.get("status") != "ok" or r.get("kind") not in KINDS:
            continue
        kind = "causal" if r["kind"] == "dense" and r.get("causal") else r["kind"]
        dtype = GPU_DTYPE.get(r.get("dtype"), str(r.get("dtype")))
        for direction, field in (("forward", "tflops"), ("backward", "backward_tflops")):
            if r.get(field) is not None:
                out.append((kind, r.get("D"), direction, r["N"], {f"dilattn {dtype}": r[field]}))
    return out


def gpu_figures(results):
    figs = []
    for name, data in results:
        rows = gpu_compare_rows(data) + gpu_bench_rows(data)
        for d in sorted({r[1] for r in rows if r[1] is not None}):
            impls = sorted({i for r in rows if r[1] == d for i in r[4]})
            panels = []
            for direction in ("forward", "backward"):
                lines = []
                for kind in KINDS:
                    for j, impl in enumerate(impls):
                        pts = [(r[3], r[4][impl]) for r in rows if r[1] == d and r[0] == kind
                               and r[2] == direction and impl in r[4]]
                        lines.append(series(f"{impl} {kind}", pts, {
                            "color": f"C{j % 10}", "marker": "o",
                            "linestyle": {"dense": "-", "causal": "--", "dilated": ":"}[kind]}))
                panels.append(panel(direction, "N (tokens)", "TFLOP/s", lines))
            if enough(panels):
                dtype = data.get("dtype", "")
                figs.append(figure(name, f"d{d}", f"GPU TFLOP/s against N, D={d} {dtype}".strip(),
                                   data, panels, "useful FLOP (FlashAttention's count) per second; "
                                   "each point one row of the file (its label gives B and H)"))
    return figs


EXTRACTORS = (sdpa_time_figures, cpu_peak_figures, bench_time_figures, memory_figures,
              ring_figures, sparse_figures, gpu_figures)


def all_figures(results):
    return [f for extract in EXTRACTORS for f in extract(results)]


# ---------------------------------------------------------------- drawing
def tokens(v, _pos=None):
    """Axis label of a count: 1024 -> 1K, 1048576 -> 1M."""
    for div, unit in ((2**20, "M"), (2**10, "K")):
        if v >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"


def draw(fig_desc, out_dir):
    """One PNG (6.4 x 4.8 in at 100 dpi, well under 200 KB): the panels side by side, one legend
    and the caption below them. Returns its path and size in bytes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    panels = fig_desc["panels"]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4, 4.8), dpi=100, squeeze=False)
    handles, labels = [], []
    for ax, p in zip(axes[0], panels):
        for s in p["series"]:
            xs, ys = zip(*s["points"])
            (h,) = ax.plot(xs, ys, label=s["label"], markersize=3, linewidth=1, **s["style"])
            if s["label"] not in labels:  # the panels share their series: one legend entry
                handles.append(h)
                labels.append(s["label"])
        if p["xlog"]:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(tokens))
        elif all(x == int(x) for s in p["series"] for x, _ in s["points"]):
            ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))  # ranks
        if p["ylog"]:
            ax.set_yscale("log")
            # ticks at 1, 2, 5 times powers of ten, written plainly (0.2, not 2x10^-1)
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        elif p["ylabel"].startswith("fraction"):
            ax.set_ylim(0, 1.05)
        ax.set_title(p["title"], fontsize=9)
        ax.set_xlabel(p["xlabel"], fontsize=8)
        ax.set_ylabel(p["ylabel"], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", linewidth=0.3)
    ncol = 3 if len(labels) > 4 else 2
    rows = -(-len(labels) // ncol)
    # about 140 characters of 6-point text fit across 6.4 inches
    text = "\n".join(textwrap.fill(line, 140) for line in fig_desc["caption"].split("\n"))
    lines = text.count("\n") + 1
    legend_h = 0.03 * rows + 0.025 * lines + 0.02  # fractions of the figure's height
    fig.legend(handles, labels, fontsize=6, ncol=ncol, loc="lower center",
               bbox_to_anchor=(0.5, 0.025 * lines + 0.01), frameon=False)
    fig.suptitle(fig_desc["title"], fontsize=10)
    fig.text(0.01, 0.01, text, fontsize=6, va="bottom", ha="left")
    fig.tight_layout(rect=(0, legend_h, 1, 0.97))
    path = os.path.join(out_dir, fig_desc["file"])
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path, os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--list", action="store_true", help="print the figures, draw nothing")
    args = ap.parse_args()
    figs = all_figures(load_results(args.results))
    if args.list:
        for f in figs:
            print(f"{f['file']}: {f['title']} ({f['caption']})")
            for p in f["panels"]:
                for s in p["series"]:
                    print(f"  {p['title']}: {s['label']}: {s['points']}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    for f in figs:
        path, size = draw(f, args.out)
        big = "  (over 200 KB: too big for the docs)" if size > 200_000 else ""
        print(f"{os.path.relpath(path)}: {size // 1024} KB{big}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
