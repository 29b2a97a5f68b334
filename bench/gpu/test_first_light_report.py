"""first_light_report.py on the CPU: Nsight Compute's raw CSV parsed per head dim, the model's
row found beside it, and summary.txt's content from step records and a speed table."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import first_light_report as fl  # noqa: E402

HEADER = ('"ID","Process ID","Kernel Name","' + '","'.join(fl.METRICS.values()) + '"')
UNITS = '"","","","%","%","%","%","nsecond"'


def launch(i, d, tensor):
    return (f'"{i}","7","void dilattn::cuda::forward_mma_kernel<__half, {d}>(ForwardParams)",'
            f'"{tensor}","45.5","12.25","80.1","1,234"')


CSV = "\n".join(["==PROF== Connected to process 7", "no GPU table line", HEADER, UNITS,
                 launch(0, 64, 10), launch(1, 64, 55.5), launch(2, 128, 61)])

SASS = {"results": [
    {"kernel": "void dilattn::cuda::forward_mma_kernel<__half, 64>(ForwardParams)",
     "arch": "sm_90", "dtype": "f16", "D": 64, "estimate": 0.5, "bound_by": "tensor",
     "fraction_of_dense_f16_peak": {"tensor": 0.5}},
    {"kernel": "void dilattn::cuda::forward_mma_kernel<__half, 64>(ForwardParams)",
     "arch": "sm_80", "dtype": "f16", "D": 64, "estimate": 0.9, "bound_by": "issue"}]}


def test_parse_ncu_csv_keeps_the_last_launch_per_head_dim():
    got = fl.parse_ncu_csv(CSV)
    assert sorted(got) == [64, 128]
    assert got[64]["tensor_pipe_pct"] == 55.5
    assert got[128]["tensor_pipe_pct"] == 61
    assert got[64]["duration_ns"] == 1234.0
    assert got[64]["l2_hit_rate_pct"] == 80.1


def test_parse_ncu_csv_without_template_names_uses_launch_order():
    text = CSV.replace("<__half, 64>", "").replace("<__half, 128>", "")
    got = fl.parse_ncu_csv(text)
    assert sorted(got) == [64, 128]
    assert got[128]["tensor_pipe_pct"] == 61


def test_parse_ncu_csv_without_a_table_is_empty():
    assert fl.parse_ncu_csv("==PROF== No kernels were profiled.") == {}


def test_model_for_picks_the_arch_dtype_and_head_dim():
    assert fl.model_for(SASS, 64, "sm_90")["estimate_pct_of_f16_peak"] == 50.0
    assert fl.model_for(SASS, 128, "sm_90") is None


def test_summary_has_each_step_and_the_ratio():
    steps = [{"step": "build", "status": "pass", "seconds": 80, "budget_s": 180, "detail": "sm_90"},
             {"step": "kernels", "status": "fail", "seconds": 20, "budget_s": 100, "detail": "9/10"}]
    tc = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11", "flop_formula": "4*D*pairs",
          "rows": [{"label": "dense D=64", "direction": "forward",
                    "dilattn": {"status": "ok", "ms": 1.0, "tflops": 300.0},
                    "torch": {"sdpa_flash": {"status": "ok", "ms": 0.5}}}]}
    ncu = fl.ncu_report(CSV, SASS, "sm_90")
    text = fl.summary(steps, tc, ncu, 400, 1)
    assert "build      PASS   80 s" in text and "kernels    FAIL   20 s" in text
    assert "0.50" in text.split("dense D=64")[1].splitlines()[0]
    assert "D=64: 13922.1 TFLOP/s, tensor pipe 56% | model 50.0% (tensor)" in text
    assert len(text.splitlines()) < 50


def hopper_launch(i, d, duration):
    return (f'"{i}","7","void dilattn::cuda::forward_wgmma_kernel<__half, {d}>(ForwardParams, '
            f'WgmmaTensorMaps)","0","12.5","1.5","95.0","{duration}"')


HOPPER_CSV = "\n".join([HEADER, UNITS, hopper_launch(0, 64, "65,536"),
                        hopper_launch(1, 128, "100,000")])
HOPPER_SASS = {"results": SASS["results"] + [
    {"kernel": "void dilattn::cuda::forward_wgmma_kernel<__half, 64>(ForwardParams, M)",
     "arch": "sm_90a", "dtype": "f16", "D": 64, "estimate": 0.433, "bound_by": "hbm",
     "on_chip_estimate": 0.488, "on_chip_bound_by": "chain"}]}


def test_the_hopper_kernel_beside_its_warp_specialised_model():
    got = fl.parse_ncu_csv(HOPPER_CSV, "forward_wgmma_kernel")
    assert sorted(got) == [64, 128]
    # 4 D N^2 B H FLOP (bench_gpu --quick: N = 2048, B = 1, H = 16) over the duration.
    assert got[64]["tflops"] == round(4 * 64 * 2048 ** 2 * 16 / 65536 / 1e3, 1) == 262.1
    model = fl.model_for(HOPPER_SASS, 64, "sm_90", "forward_wgmma_kernel")
    assert model["estimate_pct_of_f16_peak"] == 43.3 and model["on_chip_pct_of_f16_peak"] == 48.8
    assert fl.model_for(HOPPER_SASS, 64, "sm_90")["estimate_pct_of_f16_peak"] == 50.0
    ncu = fl.ncu_report(CSV, HOPPER_SASS, "sm_90", HOPPER_CSV)
    lines = fl.ncu_lines(ncu)
    at = lines.index("ncu, forward_wgmma_kernel f16 (measured | sass_model.py)")
    assert lines[at + 1].startswith("  D=64: 262.1 TFLOP/s, tensor pipe 0% | model 43.3% (hbm; "
                                    "on chip 48.8% (chain))")
    assert "model n/a% (?)" in lines[at + 2]  # no D = 128 row in this model


def test_ncu_main_fails_without_the_hopper_kernels_launches(tmp_path):
    csv_path, sass_path = tmp_path / "mma.csv", tmp_path / "sass.json"
    csv_path.write_text(CSV)
    sass_path.write_text(json.dumps(HOPPER_SASS))
    hopper_path = tmp_path / "wgmma.csv"
    hopper_path.write_text(HOPPER_CSV)
    out = tmp_path / "ncu.json"
    assert fl.main(["ncu", str(csv_path), str(sass_path), str(out)]) == 0
    assert "hopper" not in json.loads(out.read_text())
    assert fl.main(["ncu", str(csv_path), str(sass_path), str(out), str(hopper_path)]) == 0
    assert sorted(json.loads(out.read_text())["hopper"]["by_head_dim"]) == ["128", "64"]
    hopper_path.write_text("==PROF== No kernels were profiled.")
    assert fl.main(["ncu", str(csv_path), str(sass_path), str(out), str(hopper_path)]) == 1


def bench_row(status="ok", samples=5, backward_samples=2):
    return {"kind": "dense", "dtype": 0, "N": 8192, "D": 128, "status": status,
            "samples": samples, "backward_samples": backward_samples}


def test_bench_gpu_line_counts_rows_failures_and_samples():
    bench = {"complete": True, "results": [bench_row(), bench_row(samples=3, backward_samples=1),
                                           bench_row("error", 0, 0)]}
    assert fl.bench_gpu_line(bench) == (
        "bench_gpu (C API, every dtype): 3 rows, 1 failed, 1-5 timed calls per median; "
        "complete; table in timing.log")


def test_bench_gpu_line_says_a_cut_off_file_is_partial():
    text = fl.bench_gpu_line({"complete": False, "results": [bench_row()]})
    assert "1 rows" in text and "PARTIAL: cut off before its last row" in text


def test_bench_gpu_line_without_a_file_or_rows():
    assert fl.bench_gpu_line({}) == "bench_gpu: no bench_gpu.json"
    assert fl.bench_gpu_line({"complete": False, "results": []}) == (
        "bench_gpu (C API, every dtype): 0 rows, 0 failed; PARTIAL: cut off before its last "
        "row; table in timing.log")


def test_summary_main_reads_a_partial_bench_gpu_json(tmp_path, capsys):
    (tmp_path / "steps.json").write_text(json.dumps({"device": "H100", "steps": []}))
    (tmp_path / "bench_gpu.json").write_text(json.dumps(
        {"complete": False, "results": [bench_row(), bench_row()]}))
    assert fl.main(["summary", str(tmp_path), "300", "1"]) == 0
    out = capsys.readouterr().out
    assert "bench_gpu (C API, every dtype): 2 rows, 0 failed, 2-5 timed calls per median; " \
           "PARTIAL" in out
    assert "no speed table" in out


# The backward's raw page: METRICS and a section metric, the two passes per head dim; the first
# D = 64 launches are warm-up calls the last launch replaces.
BACKWARD_HEADER = ('"ID","Process ID","Kernel Name","' + '","'.join(fl.METRICS.values()) +
                   '","smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"')
BACKWARD_UNITS = '"","","","%","%","%","%","nsecond","ratio"'


def backward_launch(i, family, d, tensor, ns, stall):
    return (f'"{i}","7","void dilattn::cuda::{family}<__half, {d}, false, false>(BackwardParams)",'
            f'"{tensor}","12.5","3","90","{ns:,}","{stall}"')


BACKWARD_CSV = "\n".join(["==PROF== Connected to process 7", BACKWARD_HEADER, BACKWARD_UNITS,
                          backward_launch(0, "backward_dq_mma_kernel", 64, 1, 999999, 9),
                          backward_launch(1, "backward_dkdv_mma_kernel", 64, 2, 999999, 9),
                          backward_launch(2, "backward_dq_mma_kernel", 64, 20, 100000, 1.5),
                          backward_launch(3, "backward_dkdv_mma_kernel", 64, 30, 150000, 2.5),
                          backward_launch(4, "backward_dq_mma_kernel", 128, 25, 200000, 0.5)])


def test_backward_passes_per_head_dim_with_their_section_metrics():
    got = fl.backward_report(BACKWARD_CSV)
    d64 = got["64"]
    dq, dkdv = (d64["passes"][f] for f in fl.BACKWARD_FAMILIES)
    assert dq["metrics"]["tensor_pipe_pct"] == 20 and dkdv["metrics"]["duration_ns"] == 150000
    stall = "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"
    assert dq["raw"][stall] == 1.5 and dkdv["raw"][stall] == 2.5
    assert "backward_dkdv_mma_kernel<__half, 64" in dkdv["raw"]["kernel"]
    # 2.5 times the forward's 4 D N^2 B H FLOP (N = 2048, B = 1, H = 16) over both passes.
    assert d64["tflops"] == round(2.5 * round(4 * 64 * 2048 ** 2 * 16 / 250000 / 1e3, 1), 1)
    # D = 128 has its dQ pass only: no TFLOP/s, and it is not a measured head dim.
    assert list(got["128"]["passes"]) == ["backward_dq_mma_kernel"]
    assert got["128"]["tflops"] is None
    assert fl._backward_dims(got) == ["64"]


def test_ncu_main_with_the_backward_needs_both_passes_at_both_head_dims(tmp_path):
    csv_path, sass_path = tmp_path / "mma.csv", tmp_path / "sass.json"
    csv_path.write_text(CSV)
    sass_path.write_text(json.dumps(SASS))
    backward_path, out = tmp_path / "backward.csv", tmp_path / "ncu.json"
    backward_path.write_text(BACKWARD_CSV)
    args = ["ncu", str(csv_path), str(sass_path), str(out), "--backward", str(backward_path)]
    assert fl.main(args) == 1  # D = 128's dK/dV pass is missing
    assert sorted(json.loads(out.read_text())["backward"]["by_head_dim"]) == ["128", "64"]
    backward_path.write_text(BACKWARD_CSV + "\n" + backward_launch(
        5, "backward_dkdv_mma_kernel", 128, 35, 300000, 3))
    assert fl.main(args) == 0
    report = json.loads(out.read_text())
    lines = fl.ncu_lines(report)
    at = lines.index("ncu, tensor-core backward f16 (measured; dQ pass | dK/dV pass)")
    assert lines[at + 1].startswith("  D=64: ")
    assert "100 us | 150 us, tensor pipe 20% | 30%" in lines[at + 1]
