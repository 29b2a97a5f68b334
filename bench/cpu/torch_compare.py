#!/usr/bin/python3
"""torch_compare.py - the same dilated attention in plain PyTorch CPU ops, side by side with
dilattn's cpu backend (bench/cpu/cpu_bench.cpp), printing ratios.

What it computes: SPEC 3 (LongNet dilated attention, head mode `groups`, branches combined by
their LSE) for dilated-attention-pytorch's main configuration (B=1, N=8192, H=8, D=64, segments
2048, 4096, 8192, dilations 1, 2, 4), written the way a PyTorch user would: per branch, view
the sequence as segments, take every r-th row with a strided slice, softmax(Q K^T) V with
matmul, scatter back, combine branches with logsumexp. Forward and backward (autograd) seconds
are the median of repeats; peak memory is the child process's peak RSS, as cpu_bench reports it.

Run with Debian's torch (python3-torch, OpenBLAS):
    build-cpu-native/bench/cpu/cpu_bench --json cpu_bench.json
    /usr/bin/python3 bench/cpu/torch_compare.py --bench-json cpu_bench.json [--quick]
Targets: dilattn forward >= 4x faster than this, with <= 1/10 of its peak memory.
--check also compares this implementation's output with dilattn's reference on a small case
through the shared library's C ABI (ctypes), so the two sides compute the same thing.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def dilated_attention(q, k, v, segments, dilations, mode="groups"):
    """q, k, v: [B, N, H, D]. Returns O [B, N, H, D] and LSE [B, H, N] (SPEC 3)."""
    B, N, H, D = q.shape
    m = len(segments)
    scale = 1.0 / math.sqrt(D)
    lse_parts, o_parts = [], []
    for b, (w, r) in enumerate(zip(segments, dilations)):
        w = min(w, N)
        assert N % w == 0, "this plain version needs N divisible by every (clipped) segment"
        if mode == "groups":  # group g: floor(H/m) heads plus one when g < H mod m
            first = b * (H // m) + min(b, H % m)
            heads = list(range(first, first + H // m + (1 if b < H % m else 0)))
            offsets = [b % r] * len(heads)
        else:  # mod: every head, offset h mod r
            heads = list(range(H))
            offsets = [h % r for h in heads]
        o_full = q.new_zeros(B, N, H, D)
        lse_full = q.new_full((B, H, N), -math.inf)
        for off in sorted(set(offsets)):
            hs = [h for h, o in zip(heads, offsets) if o == off]
            idx = torch.tensor(hs)
            # [B, N/w, w, h, D] -> the selected rows of every segment: [B, N/w, w/r, h, D]
            qs = q[:, :, idx].reshape(B, N // w, w, len(hs), D)[:, :, off::r]
            ks = k[:, :, idx].reshape(B, N // w, w, len(hs), D)[:, :, off::r]
            vs = v[:, :, idx].reshape(B, N // w, w, len(hs), D)[:, :, off::r]
            qs, ks, vs = (t.permute(0, 1, 3, 2, 4) for t in (qs, ks, vs))  # [B, S, h, n, D]
            scores = torch.matmul(qs, ks.transpose(-1, -2)) * scale
            lse = torch.logsumexp(scores, dim=-1)  # [B, S, h, n]
            o = torch.matmul(torch.softmax(scores, dim=-1), vs)
            rows = torch.arange(N).reshape(N // w, w)[:, off::r].reshape(-1)
            o = o.permute(0, 1, 3, 2, 4).reshape(B, -1, len(hs), D)  # [B, S*n, h, D]
            lse = lse.permute(0, 2, 1, 3).reshape(B, len(hs), -1)     # [B, h, S*n]
            o_full = _scatter_rows(o_full, rows, idx, o)
            lse_full = _scatter_lse(lse_full, rows, idx, lse)
        o_parts.append(o_full)
        lse_parts.append(lse_full)
    lse_all = torch.logsumexp(torch.stack(lse_parts), dim=0)  # [B, H, N]
    safe = torch.where(torch.isinf(lse_all), torch.zeros_like(lse_all), lse_all)
    out = 0
    for o_b, lse_b in zip(o_parts, lse_parts):
        weight = torch.exp(lse_b - safe).permute(0, 2, 1).unsqueeze(-1)  # [B, N, H, 1]
        out = out + weight * o_b
    return out, lse_all


def _scatter_rows(o_full, rows, heads, o):
    o_full = o_full.clone()
    o_full[:, rows[:, None], heads[None, :]] = o
    return o_full


def _scatter_lse(lse_full, rows, heads, lse):
    lse_full = lse_full.clone()
    lse_full[:, heads[:, None], rows[None, :]] = lse
    return lse_full


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_child(N, repeats, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, H, D = 1, 8, 64
    q, k, v = (torch.rand(B, N, H, D) * 2 - 1 for _ in range(3))
    segments, dilations = [2048, 4096, 8192], [1, 2, 4]
    fwd, bwd = [], []
    for rep in range(repeats + 1):  # rep 0 warms up
        t0 = time.perf_counter()
        with torch.no_grad():
            dilated_attention(q, k, v, segments, dilations)
        if rep:
            fwd.append(time.perf_counter() - t0)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    d_o = torch.rand(B, N, H, D)
    for rep in range(repeats + 1):
        t0 = time.perf_counter()
        o, _ = dilated_attention(qg, kg, vg, segments, dilations)
        (o * d_o).sum().backward()
        if rep:
            bwd.append(time.perf_counter() - t0)
        qg.grad = kg.grad = vg.grad = None
    # autograd times forward + backward; report the backward part alone
    bwd_only = max(statistics.median(bwd) - statistics.median(fwd), 0.0)
    print(json.dumps({"forward_s": statistics.median(fwd), "backward_s": bwd_only,
                      "peak_rss_bytes": peak_rss_bytes()}))


def check_against_dilattn(lib_path):
    """Small case: this plain version against dilattn's f64 reference through ctypes."""
    import ctypes
    lib = ctypes.CDLL(os.path.abspath(lib_path))

    class Tensor(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_size_t), ("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                    ("device_index", ctypes.c_int32), ("shape", ctypes.c_int64 * 4),
                    ("strides", ctypes.c_int64 * 4)]

    lib.dilattn_tensor_contiguous.restype = Tensor
    lib.dilattn_tensor_contiguous.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_int64] * 4
    B, N, H, D = 1, 64, 4, 8
    segments, dilations = [16, 32, 64], [1, 2, 4]
    torch.manual_seed(1)
    q, k, v = (torch.rand(B, N, H, D, dtype=torch.float64) * 2 - 1 for _ in range(3))
    want, _ = dilated_attention(q, k, v, segments, dilations)
    o = torch.zeros(B, N, H, D, dtype=torch.float64)
    views = [lib.dilattn_tensor_contiguous(t.data_ptr(), 1, B, N, H, D) for t in (q, k, v, o)]
    desc, plan = ctypes.c_void_p(), ctypes.c_void_p()
    seg = (ctypes.c_int64 * 3)(*segments)
    dil = (ctypes.c_int64 * 3)(*dilations)
    assert lib.dilattn_desc_create(ctypes.byref(desc)) == 0
    assert lib.dilattn_desc_set_dilated(desc, 3, seg, dil, 2) == 0
    class Shape(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_size_t)] + [(f, ctypes.c_int64) for f in "bnmhgd"]

    shape = Shape(ctypes.sizeof(Shape), B, N, N, H, H, D)
    assert lib.dilattn_plan_create(ctypes.byref(plan), desc, ctypes.byref(shape), 1, 1) == 0
    assert lib.dilattn_forward(plan, *(ctypes.byref(t) for t in views), None, None,
                               ctypes.c_size_t(0)) == 0
    lib.dilattn_plan_destroy(plan)
    lib.dilattn_desc_destroy(desc)
    err = (o - want).abs().max().item()
    print(f"check: plain PyTorch vs dilattn reference (groups, N={N}): max |diff| = {err:.3g}")
    return err < 1e-10


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-json", help="cpu_bench --json output to compare with")
    ap.add_argument("--quick", action="store_true", help="N = 1024 (matches cpu_bench --quick)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("DILATTN_NUM_THREADS", 0)) or os.cpu_count())
    ap.add_argument("--check", metavar="LIBDILATTN_SO", help="also check correctness via ctypes")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_child(args.child, args.repeats, args.threads)
        return 0
    if args.check and not check_against_dilattn(args.check):
        print("check FAILED")
        return 1
    N = 1024 if args.quick else 8192
    out = subprocess.run([sys.executable, __file__, "--child", str(N), "--repeats",
                          str(args.repeats), "--threads", str(args.threads)],
                         capture_output=True, text=True, check=True)
    t = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"torch {torch.__version__}, {args.threads} threads, main configuration N={N}")
    print(f"{'':22} {'fwd s':>9} {'bwd s':>9} {'peak RSS MiB':>13}")
    print(f"{'plain PyTorch':22} {t['forward_s']:9.4f} {t['backward_s']:9.4f} "
          f"{t['peak_rss_bytes'] / 2**20:13.1f}")
    if not args.bench_json:
        return 0
    with open(args.bench_json) as f:
        bench = json.load(f)
    main_case = next((c for c in bench["cases"] if c["name"].startswith("main_")), None)
    if main_case is None or main_case["N"] != N:
        print(f"no main case with N={N} in {args.bench_json} (use --quick to match cpu_bench --quick)")
        return 1
    d = main_case
    print(f"{'dilattn cpu':22} {d['forward_s']:9.4f} {d['backward_s']:9.4f} "
          f"{d['peak_rss_bytes'] / 2**20:13.1f}")
    fwd_x = t["forward_s"] / d["forward_s"]
    bwd_x = t["backward_s"] / d["backward_s"] if d["backward_s"] > 0 else float("nan")
    mem = d["peak_rss_bytes"] / t["peak_rss_bytes"]
    print(f"\nforward speedup {fwd_x:.2f}x (target >= 4), backward speedup {bwd_x:.2f}x, "
          f"memory dilattn/torch {mem:.3f} (target <= 0.1)")
    print(f"targets: speed {'met' if fwd_x >= 4 else 'NOT met'}, "
          f"memory {'met' if mem <= 0.1 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
