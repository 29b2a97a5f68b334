"""Tests of bench/plot_results.py's reading of results files: the figure descriptions it builds
from JSON, without matplotlib (which CI does not have). Synthetic results files in a temporary
folder; every plotted number must come from a file (or, for a ratio, from the file's numbers by
the documented formula), series run in order of N, captions carry the file's machine, commit
and date, and files without the needed fields draw nothing.

Run: python3 -m pytest -q -p no:cacheprovider bench/test_plot_results.py
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_results as pr  # noqa: E402


def case(name, n, kind, d_fwd, d_bwd, t_fwd, t_bwd, pairs=1000.0, distinct=None):
    return {"name": name, "N": n, "dilated": kind == "dilated", "causal": kind == "causal",
            "docs": None, "pairs": pairs, "distinct_pairs": distinct or pairs,
            "dilattn": {"forward_s": 9.0, "forward_cpu_s": d_fwd, "backward_s": 9.0,
                        "backward_cpu_s": d_bwd},
            "torch": {"forward_s": 9.0, "forward_cpu_s": t_fwd, "backward_s": 9.0,
                      "backward_cpu_s": t_bwd},
            "forward_gflop": 4.0, "backward_gflop": 10.0}


SWEEP = {
    "commit": "abc1234", "date": "2026-01-02T03:04Z",
    "machine": {"cpu": "Test CPU", "cores": 2, "threads": 2},
    "peak": {"cpu_isa": "avx2", "fma_peak_gflops": 50.0, "fma_peak_gflops_per_cpu_second": 25.0},
    "torch": "2.0", "isa": "avx2", "dtype": "bf16",
    # deliberately out of order: the series must come out sorted by N
    "cases": [case("dense_N4096", 4096, "dense", 0.4, 1.2, 0.8, 2.0),
              case("dense_N1024", 1024, "dense", 0.1, 0.3, 0.2, 0.5),
              case("dense_N2048", 2048, "dense", 0.2, 0.6, 0.4, 1.1),
              case("dilated_mod_N2048", 2048, "dilated", 0.05, 0.15, 0.3, 0.7, 1000.0, 750.0),
              case("packed_N9999", 9999, "causal", 1.0, 1.0, 1.0, 1.0)],
}
SWEEP["cases"][-1]["docs"] = [5000, 4999]  # a packed case: no point of any N series


def write(folder, name, data):
    with open(os.path.join(folder, name), "w") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))


def numbers(obj):
    """Every number anywhere in a parsed JSON value."""
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, (int, float)):
        return {float(obj)}
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list):
        return set().union(*(numbers(v) for v in obj)) if obj else set()
    return set()


def by_label(panel):
    return {s["label"]: s["points"] for s in panel["series"]}


@pytest.fixture
def results(tmp_path):
    write(tmp_path, "torch_sdpa_sweep_bf16.test-box.json", SWEEP)
    return pr.load_results(str(tmp_path))


def test_time_series_sorted_from_file(results):
    (fig,) = pr.sdpa_time_figures(results)
    assert fig["file"] == "torch_sdpa_sweep_bf16.test-box.time.png"
    fwd, bwd = fig["panels"]
    assert by_label(fwd)["dilattn dense"] == [(1024.0, 0.1), (2048.0, 0.2), (4096.0, 0.4)]
    assert by_label(fwd)["PyTorch dense"] == [(1024.0, 0.2), (2048.0, 0.4), (4096.0, 0.8)]
    assert by_label(bwd)["dilattn dense"] == [(1024.0, 0.3), (2048.0, 0.6), (4096.0, 1.2)]
    assert by_label(fwd)["dilattn dilated"] == [(2048.0, 0.05)]
    assert "dilattn causal" not in by_label(fwd)  # only the packed case was causal
    assert "bf16" in fig["title"]
    in_file = numbers(SWEEP)
    for p in fig["panels"]:
        for s in p["series"]:
            assert all(x in in_file and y in in_file for x, y in s["points"]), s


def test_caption_names_machine_commit_date_file(results):
    (fig,) = pr.sdpa_time_figures(results)
    cap = fig["caption"]
    for part in ("Test CPU", "avx2", "abc1234", "2026-01-02T03:04Z",
                 "bench/results/torch_sdpa_sweep_bf16.test-box.json"):
        assert part in cap


def test_peak_fraction_formula(results):
    (fig,) = pr.cpu_peak_figures(results)
    fwd, bwd = fig["panels"]
    # dilattn: GFLOP it executes (distinct pairs) per CPU-second over the peak per CPU-second
    assert by_label(fwd)["dilattn dense"][0] == (1024.0, pytest.approx(4.0 / 0.1 / 25.0))
    assert by_label(fwd)["dilattn dilated"] == [(2048.0, pytest.approx(4.0 * 0.75 / 0.05 / 25.0))]
    # PyTorch: every pair of the multiset
    assert by_label(fwd)["PyTorch dilated"] == [(2048.0, pytest.approx(4.0 / 0.3 / 25.0))]
    assert by_label(bwd)["dilattn dense"][2] == (4096.0, pytest.approx(10.0 / 1.2 / 25.0))


def test_files_without_the_fields_draw_nothing(tmp_path):
    two_n = dict(SWEEP, cases=SWEEP["cases"][1:3])  # two N: a table, not a line
    no_torch = dict(SWEEP, cases=[{k: v for k, v in c.items() if k != "torch"}
                                  for c in SWEEP["cases"]])
    no_peak = {k: v for k, v in SWEEP.items() if k != "peak"}
    write(tmp_path, "torch_sdpa_compare.two.json", two_n)
    write(tmp_path, "torch_sdpa_compare.notorch.json", no_torch)
    write(tmp_path, "torch_sdpa_compare.nopeak.json", no_peak)
    write(tmp_path, "broken.json", "{ not json")
    write(tmp_path, "list.json", [1, 2, 3])
    write(tmp_path, "notes.txt", "ignored")
    results = pr.load_results(str(tmp_path))
    assert sorted(n for n, _ in results) == ["torch_sdpa_compare.nopeak.json",
                                             "torch_sdpa_compare.notorch.json",
                                             "torch_sdpa_compare.two.json"]
    figs = pr.all_figures(results)
    # only nopeak has three N on both sides: its time figure, and no share-of-peak figure
    assert [f["file"] for f in figs] == ["torch_sdpa_compare.nopeak.time.png"]
    assert "commit abc1234" in figs[0]["caption"]


def test_missing_commit_and_date_say_so(tmp_path):
    write(tmp_path, "torch_sdpa_compare.x.json",
          {k: v for k, v in SWEEP.items() if k not in ("commit", "date")})
    (fig,) = pr.sdpa_time_figures(pr.load_results(str(tmp_path)))
    assert "commit not recorded, date not recorded" in fig["caption"]


def test_memory_ring_sparse_gpu(tmp_path):
    bench = {"commit": "c0ffee0", "date": "2026-02-03",
             "machine": {"cpu": "Box", "cpu_isa": "avx512"}, "threads": 2,
             "fma_peak_gflops_per_cpu_second": 100.0,
             "cases": [{"name": f"sweep_dilated_N{n}", "N": n, "peak_rss_bytes": 3 * n * 2**20,
                        "qkvo_lse_bytes": n * 2**20, "forward_cpu_efficiency": 0.5 + n / 1e6,
                        "kind": "dilated", "head_mode": "groups", "B": 1, "H": 8, "D": 64,
                        "forward_s": n / 1e4, "backward_s": n / 4e3}
                       for n in (16384, 4096, 8192)]
             + [{"name": "long_dilated_N1048576", "N": 1048576, "kind": "dilated",
                 "head_mode": "groups", "B": 1, "H": 8, "D": 64, "forward_s": 104.8576,
                 "backward_s": 0}]
             + [{"name": "decode_Nq1_Nk4096", "N": 4096, "Nq": 1, "peak_rss_bytes": 7,
                 "qkvo_lse_bytes": 7, "forward_cpu_efficiency": 0.01}]}
    ring = {"commit": "r1", "date": "d1", "machine": "Box", "isa": "avx2",
            "rows": [{"transport": "threads", "case": "dense", "N": 4096, "P": p,
                      "forward_s": 1.0 / p, "peak_ring_bytes": p * 2**20, "status": "ok"}
                     for p in (3, 1, 2)]
            + [{"transport": "threads", "case": "dense", "N": 4096, "P": 4,
                "forward_s": 0.1, "peak_ring_bytes": 1, "status": "skipped"}]}
    sparse = {"commit": "s1", "date": "d2", "machine": "Box", "N": 8192, "block": 64,
              "rows": [{"density": d, "seconds": 2 * d} for d in (0.5, 0.1, 1.0)]}
    gpu = {"device": "GPU X", "commit": "g1", "date": "d3", "dtype": "f16",
           "rows": [{"label": f"dense D=64 B=1 N={n} H=8", "kind": "dense",
                     "direction": "forward", "D": 64,
                     "dilattn": {"status": "ok", "tflops": n / 100.0},
                     "torch": {"sdpa_flash": {"status": "ok", "tflops": n / 50.0},
                               "sdpa_cudnn": {"status": "unsupported"}}}
                    for n in (1024, 4096, 2048)]}
    for name, data in (("cpu_bench.box.json", bench), ("ring_bench.box.json", ring),
                       ("sparse_bench.box.json", sparse), ("gpu_torch_compare.gx.json", gpu)):
        write(tmp_path, name, data)
    figs = {f["file"]: f for f in pr.all_figures(pr.load_results(str(tmp_path)))}
    assert sorted(figs) == ["cpu_bench.box.memory.png", "cpu_bench.box.peak.png",
                            "cpu_bench.box.time.png", "gpu_torch_compare.gx.d64.png",
                            "ring_bench.box.png", "sparse_bench.box.png"]
    fwd, bwd = figs["cpu_bench.box.time.png"]["panels"]
    # the sweep and the long case of one configuration are one line; backward 0 is not measured
    assert by_label(fwd)["dilated (groups), B=1 H=8 D=64"] == [
        (4096.0, 0.4096), (8192.0, 0.8192), (16384.0, 1.6384), (1048576.0, 104.8576)]
    assert by_label(bwd)["dilated (groups), B=1 H=8 D=64"] == [
        (4096.0, 1.024), (8192.0, 2.048), (16384.0, 4.096)]
    mem = by_label(figs["cpu_bench.box.memory.png"]["panels"][0])
    # 3 N MiB of peak RSS is 3 N / 1024 GiB
    assert mem["sweep_dilated: peak RSS"] == [(4096.0, 12.0), (8192.0, 24.0), (16384.0, 48.0)]
    assert mem["sweep_dilated: Q,K,V,O,LSE bytes"] == [(4096.0, 4.0), (8192.0, 8.0),
                                                       (16384.0, 16.0)]
    assert "decode" not in " ".join(mem)
    peak = by_label(figs["cpu_bench.box.peak.png"]["panels"][0])
    assert peak["sweep_dilated"] == [(4096.0, 0.504096), (8192.0, 0.508192), (16384.0, 0.516384)]
    time_p, mem_p = figs["ring_bench.box.png"]["panels"]
    assert by_label(time_p)["threads, dense N=4096"] == [(1.0, 1.0), (2.0, 0.5), (3.0, 1 / 3)]
    assert by_label(mem_p)["threads, dense N=4096"] == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]
    sp = by_label(figs["sparse_bench.box.png"]["panels"][0])
    assert sp["dilattn block-sparse"] == [(0.1, 0.2), (0.5, 1.0), (1.0, 2.0)]
    g = by_label(figs["gpu_torch_compare.gx.d64.png"]["panels"][0])
    assert g["dilattn dense"] == [(1024.0, 10.24), (2048.0, 20.48), (4096.0, 40.96)]
    assert g["torch sdpa_flash dense"] == [(1024.0, 20.48), (2048.0, 40.96), (4096.0, 81.92)]
    assert not any("cudnn" in k for k in g)  # a backend that did not run draws nothing
    assert "GPU X; commit g1, date d3" in figs["gpu_torch_compare.gx.d64.png"]["caption"]
    assert len(figs["gpu_torch_compare.gx.d64.png"]["panels"]) == 1  # no backward rows


def test_gpu_bench_rows(tmp_path):
    rows = [{"kind": "dense", "dtype": 2, "N": n, "D": 128, "causal": c, "status": "ok",
             "tflops": n / 64.0 + c, "backward_tflops": n / 128.0}
            for n in (8192, 2048, 4096) for c in (False, True)]
    rows.append({"kind": "dense", "dtype": 2, "N": 1024, "D": 128, "causal": False,
                 "status": "skipped", "tflops": 1.0})
    write(tmp_path, "gpu_bench.gx.json", {"machine": "GPU Y, sm_90", "commit": "b1",
                                          "date": "d4", "results": rows})
    (fig,) = pr.gpu_figures(pr.load_results(str(tmp_path)))
    fwd, bwd = fig["panels"]
    assert fig["file"] == "gpu_bench.gx.d128.png"
    assert by_label(fwd)["dilattn f16 dense"] == [(2048.0, 32.0), (4096.0, 64.0), (8192.0, 128.0)]
    assert by_label(fwd)["dilattn f16 causal"] == [(2048.0, 33.0), (4096.0, 65.0), (8192.0, 129.0)]
    assert by_label(bwd)["dilattn f16 dense"] == [(2048.0, 16.0), (4096.0, 32.0), (8192.0, 64.0)]
    assert "GPU Y, sm_90; commit b1, date d4" in fig["caption"]


def test_real_results_read_without_matplotlib():
    """The committed results files: every figure names its file; nothing imports matplotlib."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    results = dict(pr.load_results(folder))
    for fig in pr.all_figures(list(results.items())):
        assert fig["source"] in results and f"bench/results/{fig['source']}" in fig["caption"]
        assert fig["panels"] and all(p["series"] for p in fig["panels"])
    assert "matplotlib" not in sys.modules
