#!/usr/bin/env python3
"""torch_sdpa_compare.py - dilattn's cpu backend against PyTorch 2's fused CPU flash attention
(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu), side by side in one run.

Cases (B=1, H=8, D=64, forward and backward; f32, or --dtype bf16 / f64: both sides get the
same tensors of that dtype, the LSE in f32 (f64 for f64 inputs), and the table says which):
  dilated N=8192 and N=32768: head mode mod, segments 2048, 4096, 8192, dilations 1, 2, 4
      (SPEC 3). PyTorch: per branch and per offset group of heads, the selected rows of every
      segment as a batch of flash-attention calls, scattered back, branches merged by their LSE
      (what a PyTorch user would write with the fused kernel); its backward calls the fused
      backward op per part (autograd alone would drop the merge's gradient: the op's LSE
      output is not differentiable).
  dense N=4096, dense causal N=4096: one flash-attention call.
  packed: 64 causal documents of 128 .. 4096 tokens (cpu_bench's packed case: the same
      lengths from the same generator), dilattn's packed batch (SPEC 10.2, no padding) against
      the fused op on the batch padded to the longest document (what a PyTorch user without
      varlen kernels runs; the inputs are padded before the timing, so the copy is not timed).
      Causal rows never see the padding keys, so the rows of the documents agree; the
      comparison covers those rows.
Both sides run in the same child process, one after the other, with the same thread count;
torch's OpenMP threads are passive (OMP_WAIT_POLICY) so they do not spin while dilattn runs.
Per case: median seconds of repeats (wall) and process CPU-seconds; useful GFLOP/s from the
index rules (4 D per (query, key) pair, backward 2.5x, as cpu_bench counts); the efficiency
from the pairs dilattn executes (distinct ones, see distinct_pairs); the FMA peak of the ISA
dilattn uses, measured in the same run by cpu_bench --peak; and the targets:
dilattn >= 1.5x PyTorch, forward >= 70% of FMA peak, backward >= 0.8x forward GFLOP/s.
On a machine shared with other work wall time is disturbed; the CPU-second figures less so,
and the table gives both. The outputs of both sides are compared (max |diff|), so they compute
the same thing.

PyTorch comes from PyPI into a virtual environment this script creates (default
~/.cache/dilattn/torch-venv): `pip install torch>=2.1`. The PyPI wheel pulls the CUDA libraries
(about 5 GB installed); with too little disk, or no network, the script says so and exits 0.

--sweep: time against N instead of the cases above: dense and dense causal at N = 1024 .. 16384,
dilated (the configuration above; the library clips a segment longer than N to N, SPEC 3.1, and
the PyTorch side does the same) at N = 2048 .. 65536, each doubling; --max-n caps both lists,
--max-n-dilated the dilated one alone, and --quick divides them by 8. Large N get fewer repeats (SWEEP_REPEAT_GFLOP). The JSON then also
records the commit of the build's source tree, the date and the command, so a plot drawn from it
(bench/plot_results.py) can name them.

Run (after `meson setup build && ninja -C build`):
    python3 bench/cpu/torch_sdpa_compare.py --build build [--json out.json] [--quick]
        [--dtype f32|bf16|f64] [--only NAME] [--sweep [--max-n N] [--max-n-dilated N]]
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_DEFAULT = os.path.join(os.path.expanduser("~"), ".cache", "dilattn", "torch-venv")
NEEDED_FREE_BYTES = 8 << 30  # the wheel, its CUDA dependencies, pip's cache

SEGMENTS, DILATIONS = [2048, 4096, 8192], [1, 2, 4]
B, H, D = 1, 8, 64


# The sweep's sequence lengths (before --quick and --max-n), and the forward GFLOP above which a
# case gets 2 and then 1 timed repeat (after the warm-up), so one sweep per dtype stays within
# about 12 minutes on 2 cores.
SWEEP_DENSE_N = [1024, 2048, 4096, 8192, 16384]
SWEEP_DILATED_N = [2048, 4096, 8192, 16384, 32768, 65536]
SWEEP_REPEAT_GFLOP = (20.0, 80.0)


def sweep_cases(quick, max_n, max_n_dilated=0):
    s = 8 if quick else 1
    out = []
    for kind, causal, lengths in (("dense", False, SWEEP_DENSE_N), ("dense", True, SWEEP_DENSE_N),
                                  ("dilated_mod", False, SWEEP_DILATED_N)):
        cap = (max_n_dilated or max_n) if kind == "dilated_mod" else max_n
        for n in (n // s for n in lengths):
            if cap and n > cap:
                continue
            out.append({"name": f"{kind}_N{n}" + ("_causal" if causal else ""), "N": n,
                        "dilated": kind != "dense", "causal": causal})
    return out


def sweep_repeats(case, repeats):
    gflop = 4.0 * D * pairs(case) / 1e9
    if gflop > SWEEP_REPEAT_GFLOP[1]:
        return 1
    return min(repeats, 2) if gflop > SWEEP_REPEAT_GFLOP[0] else repeats


def cases(quick):
    s = 8 if quick else 1
    return [
        {"name": f"dilated_mod_N{8192 // s}", "N": 8192 // s, "dilated": True, "causal": False},
        {"name": f"dilated_mod_N{32768 // s}", "N": 32768 // s, "dilated": True, "causal": False},
        {"name": f"dense_N{4096 // s}", "N": 4096 // s, "dilated": False, "causal": False},
        {"name": f"dense_N{4096 // s}_causal", "N": 4096 // s, "dilated": False, "causal": True},
        packed_case(s),
    ]


def packed_case(scale):
    """cpu_bench's packed case (bench/cpu/cpu_bench.cpp): 64 lengths of 128..4096 from its LCG,
    divided by scale."""
    state, docs = 12345, []
    for _ in range(64):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        docs.append((128 + (state >> 33) % (4096 - 128 + 1)) // scale)
    return {"name": f"packed_64docs_N{sum(docs)}", "N": sum(docs), "dilated": False,
            "causal": True, "docs": docs}


def clipped(w, n):
    return min(w, n)


def pairs(case):
    """(query, key) pairs of A(i), summed over heads and rows (SPEC 3, mod mode)."""
    n = case["N"]
    if "docs" in case:  # causal within each document (SPEC 10.2)
        return H * sum(m * (m + 1) / 2 for m in case["docs"])
    if not case["dilated"]:
        return H * (n * (n + 1) / 2 if case["causal"] else n * n)
    total = 0
    for w, r in zip(SEGMENTS, DILATIONS):
        w = clipped(w, n)
        for h in range(H):
            o = h % r
            for s0 in range(0, n, w):
                size = min(w, n - s0)
                sel = max(0, (size - o + r - 1) // r)
                total += sel * sel
    return B * total


def distinct_pairs(case):
    """Distinct (query, key) pairs: what the cpu backend computes, since a pair several branches
    hold is computed once with its multiplicity as a weight (cpu/cpu_pair_weights.h).
    Counted over one period of the largest segment (the branch pattern repeats there)."""
    n = case["N"]
    if not case["dilated"]:
        return pairs(case)
    import numpy as np
    segs = [clipped(w, n) for w in SEGMENTS]
    period = max(segs)
    assert n % period == 0 and all(period % w == 0 for w in segs), "periodic configs only"
    pos = np.arange(period)
    total = 0
    for h in range(H):
        held = np.zeros((period, period), dtype=bool)
        for w, r in zip(segs, DILATIONS):
            sel = (pos % w) % r == h % r
            same = (pos[:, None] // w) == (pos[None, :] // w)
            held |= same & sel[:, None] & sel[None, :]
        total += int(held.sum())
    return B * total * (n // period)


# ---------------------------------------------------------------- venv and torch
def ensure_torch(venv):
    """The venv's python with torch importable, or None (and a message) when it cannot be had."""
    py = os.path.join(venv, "bin", "python")
    probe = "import torch; print(torch.__version__)"
    if os.path.exists(py) and subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
        return py
    parent = os.path.dirname(venv.rstrip("/")) or "."
    os.makedirs(parent, exist_ok=True)
    free = shutil.disk_usage(parent).free
    if free < NEEDED_FREE_BYTES:
        print(f"skipped: torch from PyPI needs about {NEEDED_FREE_BYTES >> 30} GiB free "
              f"(the wheel pulls the CUDA libraries); {free >> 30} GiB free at {parent}")
        return None
    print(f"installing torch>=2.1 from PyPI into {venv} (about 5 GB with its CUDA libraries)...",
          flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", "torch>=2.1", "numpy"], check=True,
                       timeout=3600)
    except (subprocess.SubprocessError, OSError) as e:
        print(f"skipped: could not install torch from PyPI ({e})")
        return None
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        print("skipped: torch installed but does not import")
        return None
    return py


# ---------------------------------------------------------------- dilattn through ctypes
class Tensor(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                ("device_index", ctypes.c_int32), ("shape", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class Shape(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(f, ctypes.c_int64) for f in
                                                      ("b", "nq", "nk", "h", "hkv", "d")]


class Dilattn:
    CPU, HEADS_MOD = 2, 0
    DTYPES = {"f32": 0, "f64": 1, "bf16": 3}  # lib/dilattn.h dilattn_dtype

    def __init__(self, path, threads, dtype="f32"):
        self.dtype = dtype
        self.lib = ctypes.CDLL(path)
        self.lib.dilattn_tensor_contiguous.restype = Tensor
        self.lib.dilattn_tensor_contiguous.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_int64] * 4
        self.lib.dilattn_cpu_isa.restype = ctypes.c_char_p
        self.lib.dilattn_last_error.restype = ctypes.c_char_p
        self.threads = threads

    def isa(self):
        return self.lib.dilattn_cpu_isa().decode()

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.dilattn_last_error().decode()}")

    def plan(self, case):
        desc, plan = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.dilattn_desc_create(ctypes.byref(desc)), "desc_create")
        if case["dilated"]:
            seg = (ctypes.c_int64 * 3)(*SEGMENTS)
            dil = (ctypes.c_int64 * 3)(*DILATIONS)
            self.check(self.lib.dilattn_desc_set_dilated(desc, 3, seg, dil, self.HEADS_MOD), "set_dilated")
        self.check(self.lib.dilattn_desc_set_causal(desc, int(case["causal"])), "set_causal")
        if "docs" in case:
            offsets = [0]
            for m in case["docs"]:
                offsets.append(offsets[-1] + m)
            cu = (ctypes.c_int64 * len(offsets))(*offsets)
            self.check(self.lib.dilattn_desc_set_varlen(desc, ctypes.c_int64(len(case["docs"])),
                                                        cu, cu), "set_varlen")
        self.check(self.lib.dilattn_desc_set_num_threads(desc, self.threads), "set_num_threads")
        n = case["N"]
        shape = Shape(ctypes.sizeof(Shape), B, n, n, H, H, D)
        self.check(self.lib.dilattn_plan_create(ctypes.byref(plan), desc, ctypes.byref(shape),
                                                self.DTYPES[self.dtype], self.CPU), "plan_create")
        self.lib.dilattn_desc_destroy(desc)
        return plan

    def view(self, t):  # a contiguous torch tensor [B, N, H, D] or [B, H, N, 1]
        import torch
        code = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 3}[t.dtype]
        return self.lib.dilattn_tensor_contiguous(t.data_ptr(), code, *t.shape)


# ---------------------------------------------------------------- PyTorch side
def torch_dilated_parts(torch, q, k, v):
    """q, k, v: [B, H, N, D]. SPEC 3 mod mode with the fused op: per branch and offset group,
    the selected rows of every segment as a batch [B*S, h, m, D]. Returns O, LSE and the parts
    (what the backward needs)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    n = q.shape[2]
    o_parts, lse_parts, parts = [], [], []
    for w, r in zip(SEGMENTS, DILATIONS):
        w = clipped(w, n)
        assert n % w == 0 and w % r == 0
        s, m = n // w, w // r
        o_full = q.new_zeros(B, H, n, D)
        lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32  # the op's LSE
        lse_full = q.new_full((B, H, n), -math.inf, dtype=lse_dtype)
        for off in range(r):
            hs = [h for h in range(H) if h % r == off]
            if not hs:
                continue
            idx = torch.tensor(hs)
            rows = (torch.arange(s)[:, None] * w + off + torch.arange(m)[None, :] * r).reshape(-1)
            at = (torch.arange(B)[:, None, None], idx[None, :, None], rows[None, None, :])

            def pick(t, hs=hs, at=at, s=s, m=m):  # [B, H, N, D] -> [B*S, h, m, D]
                t = t[at].reshape(B, len(hs), s, m, -1)
                return t.permute(0, 2, 1, 3, 4).reshape(B * s, len(hs), m, t.shape[-1])

            def unpick(t, hs=hs, s=s, m=m):  # [B*S, h, m, D] -> [B, h, S*m, D]
                return t.reshape(B, s, len(hs), m, -1).permute(0, 2, 1, 3, 4).reshape(
                    B, len(hs), s * m, t.shape[-1])

            qs, ks, vs = pick(q), pick(k), pick(v)
            o, lse = flash(qs, ks, vs)[:2]
            o_full = o_full.index_put(at, unpick(o))
            lse_full = lse_full.index_put(at, unpick(lse[..., None])[..., 0])
            parts.append(dict(at=at, pick=pick, unpick=unpick, q=qs, k=ks, v=vs, lse=lse))
        o_parts.append(o_full)
        lse_parts.append(lse_full)
    lse_all = torch.logsumexp(torch.stack(lse_parts), dim=0)
    out = 0
    for o_b, lse_b in zip(o_parts, lse_parts):
        out = out + torch.exp(lse_b - lse_all).unsqueeze(-1) * o_b
    return out.to(q.dtype), lse_all, parts


def torch_dilated_function(torch):
    """autograd.Function: the fused op's LSE output is not differentiable, so autograd through
    the LSE merge would drop the merge's gradient (wrong dQ, dK). Backward per part with the
    fused backward op instead: upstream gradient w dO (w = exp(LSE_b - LSE)) and the merged O
    as `out`, so the op's D_i = w <dO, O> and dS = w P (dP - <dO, O>), the exact gradient."""
    flash_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

    class DilatedFlash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse_all, parts = torch_dilated_parts(torch, q, k, v)
            ctx.parts, ctx.out, ctx.lse_all = parts, out, lse_all
            return out

        @staticmethod
        def backward(ctx, d_out):
            dq, dk, dv = (ctx.out.new_zeros(B, H, ctx.out.shape[2], D) for _ in range(3))
            for part in ctx.parts:
                pick = part["pick"]
                weight = torch.exp(part["lse"] - pick(ctx.lse_all[..., None])[..., 0])
                dt = part["q"].dtype
                g = flash_bwd((pick(d_out) * weight[..., None]).to(dt), part["q"], part["k"],
                              part["v"], pick(ctx.out).to(dt), part["lse"], 0.0, False)
                for grad, acc in zip(g, (dq, dk, dv)):
                    acc.index_put_(part["at"], part["unpick"](grad), accumulate=True)
            return dq, dk, dv

    return DilatedFlash


def padded(torch, case, t):
    """[1, H, N, D] of packed documents -> [docs, H, longest, D], zero-padded at each end."""
    docs, longest = case["docs"], max(case["docs"])
    out = t.new_zeros(len(docs), t.shape[1], longest, t.shape[3])
    at = 0
    for b, m in enumerate(docs):
        out[b, :, :m] = t[0, :, at:at + m]
        at += m
    return out


def unpadded(torch, case, t):
    """[docs, H, longest, ...] -> [1, H, N, ...]: the documents' rows, end to end."""
    return torch.cat([t[b:b + 1, :, :m] for b, m in enumerate(case["docs"])], dim=2)


def torch_case(torch, case, q, k, v):
    """O and LSE; with inputs that require grad, O carries the exact gradient. A packed case's
    inputs are the padded batch (padded())."""
    if case["dilated"]:
        if q.requires_grad:
            return torch_dilated_function(torch).apply(q, k, v), None
        return torch_dilated_parts(torch, q, k, v)[:2]
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, is_causal=case["causal"])[:2]
    return o, lse


def timed(fn, repeats):
    """Median wall and CPU seconds of fn() over repeats (after one warm-up call)."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def run_child(args):
    import torch
    torch.set_num_threads(args.threads)
    lib = Dilattn(args.lib, args.threads, args.dtype)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64}[args.dtype]
    lse_dt = torch.float64 if args.dtype == "f64" else torch.float32
    results = []
    for case in (sweep_cases(args.quick, args.max_n, args.max_n_dilated) if args.sweep
                 else cases(args.quick)):
        if args.only and args.only not in case["name"]:
            continue
        n = case["N"]
        repeats = args.repeats if n <= 8192 else max(1, args.repeats - 1)
        if args.sweep:
            repeats = sweep_repeats(case, args.repeats)
        torch.manual_seed(0)
        # dilattn's layout [B, N, H, D]; torch's [B, H, N, D] views of the same numbers.
        q, k, v, d_o = ((torch.rand(B, n, H, D) * 2 - 1).to(dt) for _ in range(4))
        o = torch.zeros(B, n, H, D, dtype=dt)
        lse = torch.zeros(B, H, n, 1, dtype=lse_dt)
        dq, dk, dv = (torch.zeros(B, n, H, D, dtype=dt) for _ in range(3))
        views = {name: lib.view(t) for name, t in
                 dict(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=dq, dk=dk, dv=dv).items()}
        ref = ctypes.byref
        plan = lib.plan(case)

        def d_forward():
            lib.check(lib.lib.dilattn_forward(plan, ref(views["q"]), ref(views["k"]), ref(views["v"]),
                                              ref(views["o"]), ref(views["lse"]), None, ctypes.c_size_t(0)), "forward")

        def d_backward():
            lib.check(lib.lib.dilattn_backward(plan, ref(views["q"]), ref(views["k"]), ref(views["v"]),
                                               ref(views["o"]), ref(views["lse"]), ref(views["d_o"]),
                                               ref(views["dq"]), ref(views["dk"]), ref(views["dv"]),
                                               None, ctypes.c_size_t(0)), "backward")

        d_fwd = timed(d_forward, repeats)
        d_bwd = timed(d_backward, repeats)
        lib.lib.dilattn_plan_destroy(plan)

        tq, tk, tv, tdo = (t.permute(0, 2, 1, 3).contiguous() for t in (q, k, v, d_o))
        if "docs" in case:  # the padded batch, built before any timing
            tq, tk, tv, tdo = (padded(torch, case, t) for t in (tq, tk, tv, tdo))
        back = (lambda t: unpadded(torch, case, t)) if "docs" in case else (lambda t: t)
        with torch.no_grad():
            t_fwd = timed(lambda: torch_case(torch, case, tq, tk, tv), repeats)
            t_o, t_lse = torch_case(torch, case, tq, tk, tv)
        gq, gk, gv = (t.clone().requires_grad_() for t in (tq, tk, tv))
        state = {}

        def t_forward_graph():
            state["o"] = torch_case(torch, case, gq, gk, gv)[0]

        def t_backward():
            gq.grad = gk.grad = gv.grad = None
            state["o"].backward(tdo, retain_graph=True)

        t_forward_graph()
        t_bwd = timed(t_backward, repeats)
        def gap(x, y):
            return (x.double() - y.double()).abs().max().item()

        diff = {
            "O": gap(back(t_o), o.permute(0, 2, 1, 3)),
            "LSE": gap(back(t_lse[..., None])[..., 0], lse[..., 0]),
            "dQ": gap(back(gq.grad), dq.permute(0, 2, 1, 3)),
            "dK": gap(back(gk.grad), dk.permute(0, 2, 1, 3)),
            "dV": gap(back(gv.grad), dv.permute(0, 2, 1, 3)),
        }
        flops = 4.0 * D * pairs(case)
        results.append({
            "name": case["name"], "N": n, "B": B, "H": H, "D": D, "dilated": case["dilated"],
            "causal": case["causal"], "docs": case.get("docs"), "pairs": pairs(case),
            "distinct_pairs": distinct_pairs(case), "repeats": repeats,
            "dilattn": {"forward_s": d_fwd[0], "forward_cpu_s": d_fwd[1],
                        "backward_s": d_bwd[0], "backward_cpu_s": d_bwd[1]},
            "torch": {"forward_s": t_fwd[0], "forward_cpu_s": t_fwd[1],
                      "backward_s": t_bwd[0], "backward_cpu_s": t_bwd[1]},
            "forward_gflop": flops / 1e9, "backward_gflop": 2.5 * flops / 1e9,
            "max_abs_diff": diff,
        })
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"torch": torch.__version__, "isa": lib.isa(), "dtype": args.dtype,
                      "cases": results}))


# ---------------------------------------------------------------- table
def report(meta, peak, child, out_json, provenance=None):
    pk, pk_cpu = peak["fma_peak_gflops"], peak["fma_peak_gflops_per_cpu_second"]
    if provenance:
        print(f"commit: {provenance['commit']} ({provenance['commit_note']}), "
              f"date: {provenance['date']}")
    print(f"machine: {meta['cpu']}, {meta['cores']} logical cores; {meta['threads']} threads")
    print(f"dilattn cpu backend ISA: {child['isa']}; torch {child['torch']}; "
          f"dtype {child.get('dtype', 'f32')} (both sides)")
    print(f"FMA peak ({child['isa']}): {pk:.1f} GFLOP/s wall, {pk_cpu:.1f} GFLOP per CPU-second")
    print("GF/s: useful GFLOP per second (wall), every pair of SPEC 3's multiset counted as "
          "PyTorch computes it; /cpu-s: per CPU-second of the process;\n"
          "eff: GFLOP dilattn executes (a pair several branches hold once) per CPU-second / peak "
          "per CPU-second (the f32 FMA peak, whatever the dtype: f64's is half of it)\n")
    head = (f"{'case':24} {'pass':4} {'dilattn s':>10} {'torch s':>10} {'x wall':>7} "
            f"{'x cpu-s':>8} {'dl GF/s':>8} {'dl /cpu-s':>10} {'eff':>6}")
    print(head)
    rows = []
    for c in child["cases"]:
        for part in ("forward", "backward"):
            d, t = c["dilattn"], c["torch"]
            gf = c[f"{part}_gflop"]
            x_wall = t[f"{part}_s"] / d[f"{part}_s"]
            x_cpu = t[f"{part}_cpu_s"] / d[f"{part}_cpu_s"]
            executed = gf * c.get("distinct_pairs", c["pairs"]) / c["pairs"]
            eff = executed / d[f"{part}_cpu_s"] / pk_cpu
            print(f"{c['name']:24} {part[:3]:4} {d[part + '_s']:10.4f} {t[part + '_s']:10.4f} "
                  f"{x_wall:7.2f} {x_cpu:8.2f} {gf / d[part + '_s']:8.1f} "
                  f"{gf / d[part + '_cpu_s']:10.1f} {100 * eff:5.1f}%")
            rows.append((c, part, x_wall, x_cpu, eff))
    print("\nmax |dilattn - torch|: " + "; ".join(
        f"{c['name']} " + ", ".join(f"{k} {v:.1e}" for k, v in c["max_abs_diff"].items())
        for c in child["cases"]))
    print("\ntargets (CPU-second figures; the packed case is the SPEC 10.2 comparison, no target):")
    for c in child["cases"]:
        fwd = [r for r in rows if r[0] is c and r[1] == "forward"][0]
        bwd = [r for r in rows if r[0] is c and r[1] == "backward"][0]
        bwd_over_fwd = bwd[4] / fwd[4] * 1.0  # per-CPU-second GF/s ratio (the peak cancels)
        print(f"  {c['name']:24} vs torch fwd {fwd[3]:.2f}x bwd {bwd[3]:.2f}x (>= 1.5: "
              f"{'met' if min(fwd[3], bwd[3]) >= 1.5 else 'NOT met'}); forward {100 * fwd[4]:.1f}% "
              f"of peak (>= 70%: {'met' if fwd[4] >= 0.7 else 'NOT met'}); backward/forward "
              f"GF/s {bwd_over_fwd:.2f} (>= 0.8: {'met' if bwd_over_fwd >= 0.8 else 'NOT met'})")
        c["speedup_cpu"] = {"forward": fwd[3], "backward": bwd[3]}
        c["speedup_wall"] = {"forward": fwd[2], "backward": bwd[2]}
        c["forward_efficiency_cpu"] = fwd[4]
        c["backward_over_forward_gflops_cpu"] = bwd_over_fwd
    if out_json:
        with open(out_json, "w") as f:
            json.dump({**(provenance or {}), "machine": meta, "peak": peak, **child}, f, indent=1)
        print(f"\nwrote {out_json}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def git_out(where, *cmd):
    try:
        return subprocess.run(["git", "-C", where, *cmd], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None


def provenance(build):
    """commit, commit_note, date (UTC) and command for a sweep's JSON: the commit is the HEAD of the
    source tree the build directory was configured from (meson-info), so a plot names the code
    that ran; the note says whether that tree or this script's had local changes."""
    source = None
    try:
        with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
            source = json.load(f)["directories"]["source"]
    except (OSError, KeyError, ValueError):
        pass
    commit = git_out(source, "rev-parse", "--short", "HEAD") if source else None
    changed = git_out(source, "status", "--porcelain", "--untracked-files=no") if source else None
    note = (f"the library built at {commit}, "
            + ("its tree with local changes" if changed else "its tree clean")) if commit else \
        "the build's source tree is not a git checkout"
    here = git_out(HERE, "status", "--porcelain", "--untracked-files=no", "--", ".")
    if here:
        note += f"; {os.path.basename(__file__)} with local changes"
    return {"commit": commit or "unknown", "commit_note": note,
            "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
            "command": " ".join([os.path.relpath(__file__)] + sys.argv[1:]), "sweep": True,
            "dilated_config": {"segments": SEGMENTS, "dilations": DILATIONS, "head_mode": "mod"}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="meson build directory (libdilattn.so, cpu_bench)")
    ap.add_argument("--venv", default=VENV_DEFAULT, help="virtual environment for torch")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="every N divided by 8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", help="cases whose name contains this")
    ap.add_argument("--dtype", choices=["f32", "bf16", "f64"], default="f32",
                    help="the inputs' dtype on both sides (default f32)")
    ap.add_argument("--threads", type=int,
                    default=int(os.environ.get("DILATTN_NUM_THREADS", 0)) or os.cpu_count())
    ap.add_argument("--sweep", action="store_true",
                    help="dense, causal and dilated over a range of N (see the docstring)")
    ap.add_argument("--max-n", type=int, default=0, help="with --sweep: no N above this")
    ap.add_argument("--max-n-dilated", type=int, default=0,
                    help="with --sweep: no dilated N above this (default: --max-n)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_child(args)
        return 0
    lib = os.path.join(args.build, "lib", "libdilattn.so")
    bench = os.path.join(args.build, "bench", "cpu", "cpu_bench")
    for p in (lib, bench):
        if not os.path.exists(p):
            print(f"missing {p}: build first (meson setup {args.build} && ninja -C {args.build})")
            return 1
    py = ensure_torch(args.venv)
    if py is None:
        return 0
    env = dict(os.environ, DILATTN_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="PASSIVE")
    peak = json.loads(subprocess.run([bench, "--peak"], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    prov = provenance(args.build) if args.sweep else None  # the date the run starts
    started = time.time()
    cmd = [py, os.path.abspath(__file__), "--child", "--lib", os.path.abspath(lib),
           "--repeats", str(args.repeats), "--threads", str(args.threads)]
    if args.quick:
        cmd.append("--quick")
    if args.only:
        cmd += ["--only", args.only]
    cmd += ["--dtype", args.dtype]
    if args.sweep:
        cmd += ["--sweep", "--max-n", str(args.max_n), "--max-n-dilated", str(args.max_n_dilated)]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    child = json.loads(out.stdout.strip().splitlines()[-1])
    meta = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads}
    if prov:
        prov["seconds"] = round(time.time() - started)
    report(meta, peak, child, args.json, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
