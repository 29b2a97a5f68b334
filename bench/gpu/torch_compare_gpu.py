"""torch_compare_gpu.py - dilattn's cuda backend against PyTorch's own attention kernels on one GPU,
forward and backward, in one run.

    python3 bench/gpu/torch_compare_gpu.py --lib build/lib/libdilattn.so --json out.json
                                          [--quick] [--iters N] [--warmup N]

What is timed (each row: dilattn, then every PyTorch way that runs there):
  dense / causal, f16, head dims 64 and 128, FlashAttention's benchmark shapes: batch x seqlen =
    16384 tokens, 2048 / D heads (--seqlens picks the seqlens, default 1024, 4096, 16384);
    PyTorch: scaled_dot_product_attention under each SDPA backend (flash, cudnn, efficient);
  dilated, the seeds' configuration: segments 2048, 4096, 8192, dilations 1, 2, 4, heads mode
    "mod" (head h takes offset h mod r), N = 32768 and 131072, B = 1, H = 16, D = 64;
    PyTorch: each branch's segments through the flash kernel with its log-sum-exp
    (aten._scaled_dot_product_flash_attention), the branches merged by their LSE (SPEC 3);
  block-sparse at 10% and 50% of 128 x 128 blocks (a seeded random mask; every row block keeps
    its diagonal block), N = 16384, B = 1, H = 16, D = 64; PyTorch: FlexAttention with a
    BlockMask when it compiles within --flex-compile-limit seconds, else SDPA with the boolean
    mask expanded to elements.

TFLOP/s, one formula for every row (FLOP_FORMULA): forward 4 * D * pairs, backward 2.5 times
that (FlashAttention's accounting), where pairs = the (query, key) score terms the problem
defines: B * H * Nq * Nk for dense, half of it for causal, the selected rows squared per
segment for dilated, kept blocks * 128 * 128 * B * H for block-sparse. Time: the median of
--iters calls after --warmup calls, each timed by CUDA events on the current stream.

The pure parts (argument parsing, shapes, the FLOP formula, the LSE merge, the table) import
without torch and are tested on the CPU (test_torch_compare_gpu.py). Without a GPU the script
prints "no GPU: nothing run" and exits 0.
"""
import argparse
import json
import os
import statistics
import sys
import time

FLOP_FORMULA = ("forward 4*D*pairs, backward 2.5x forward; pairs = B*H*Nq*Nk (causal: half), "
                "dilated: sum over branches and segments of (rows selected)^2 * B*H, "
                "block-sparse: kept blocks*bq*bk*B*H")
SEGMENTS = (2048, 4096, 8192)
DILATIONS = (1, 2, 4)
TORCH_BACKENDS = ("flash", "cudnn", "efficient")
SPARSE_BLOCK = 128


# ---------------------------------------------------------------- pure parts (no torch)
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.environ.get("DILATTN_LIB", ""),
                    help="libdilattn.so built with CUDA (default: $DILATTN_LIB)")
    ap.add_argument("--json", default="torch_compare_gpu.json", help="write results here")
    ap.add_argument("--iters", type=int, default=10, help="timed calls per row (median)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    ap.add_argument("--seqlens", default="1024,4096,16384",
                    help="dense/causal seqlens, comma-separated (batch = 16384 / seqlen)")
    ap.add_argument("--dilated-n", default="32768,131072", help="dilated sequence lengths")
    ap.add_argument("--densities", default="0.1,0.5", help="block-sparse densities")
    ap.add_argument("--flex-compile-limit", type=float, default=60.0,
                    help="seconds FlexAttention may take to compile before masked SDPA is used")
    ap.add_argument("--quick", action="store_true",
                    help="one seqlen (4096), N = 32768 only, 3 timed calls: a smoke run")
    ap.add_argument("--only", default="dense,causal,dilated,sparse", help="kinds to run")
    a = ap.parse_args(argv)
    a.seqlens = [int(x) for x in a.seqlens.split(",") if x]
    a.dilated_n = [int(x) for x in a.dilated_n.split(",") if x]
    a.densities = [float(x) for x in a.densities.split(",") if x]
    a.only = [x for x in a.only.split(",") if x]
    if a.quick:
        a.seqlens, a.dilated_n, a.iters = [4096], [32768], 3
    for s in a.seqlens:
        if s <= 0 or 16384 % s:
            ap.error(f"--seqlens: {s} does not divide 16384 tokens")
    if a.iters < 1 or a.warmup < 0:
        ap.error(f"--iters {a.iters} must be >= 1 and --warmup {a.warmup} >= 0")
    return a


def fa_shape(seqlen, head_dim, tokens=16384, width=2048):
    """FlashAttention's benchmark shape: (batch, seqlen, heads, head_dim)."""
    return tokens // seqlen, seqlen, width // head_dim, head_dim


def dense_pairs(B, H, Nq, Nk, causal):
    """Score terms of dense attention; causal counts half, as FlashAttention's benchmark does."""
    return B * H * Nq * Nk / (2 if causal else 1)


def dilated_pairs(B, H, N, segments, dilations):
    """Score terms of dilated attention (SPEC 3, heads mode mod): per branch (s, r), each segment
    of length L (the last may be partial) selects ceil((L - o) / r) rows for head offset o =
    h mod r, which attend to each other."""
    total = 0
    for s, r in zip(segments, dilations):
        for h in range(H):
            o = h % r
            for start in range(0, N, s):
                L = min(s, N - start)
                rows = max(0, -(-(L - o) // r))
                total += rows * rows
    return B * total


def flops(pairs, head_dim, direction):
    """FLOP_FORMULA."""
    f = 4.0 * head_dim * pairs
    return f * 2.5 if direction == "backward" else f


def tflops(pairs, head_dim, direction, ms):
    return flops(pairs, head_dim, direction) / (ms * 1e-3) / 1e12 if ms and ms > 0 else 0.0


def median_ms(times):
    return statistics.median(times) if times else float("nan")


def merge_lse(outs, lses, xp):
    """Merges attention results over disjoint key sets (SPEC 3): outs [.., n, D], lses [.., n].
    O = sum_i w_i O_i, w_i = exp(lse_i - lse), lse = log sum_i exp(lse_i); a row no branch
    reaches (every lse_i = -inf) gives O = 0, lse = -inf. xp: numpy or torch."""
    m = lses[0]
    for x in lses[1:]:
        m = xp.maximum(m, x)
    finite = xp.isfinite(m)
    safe_m = xp.where(finite, m, xp.zeros_like(m))
    weights = [xp.where(finite, xp.exp(x - safe_m), xp.zeros_like(x)) for x in lses]
    total = weights[0]
    for w in weights[1:]:
        total = total + w
    denom = xp.where(total > 0, total, xp.ones_like(total))
    o = outs[0] * (weights[0] / denom)[..., None]
    for out, w in zip(outs[1:], weights[1:]):
        o = o + out * (w / denom)[..., None]
    lse = xp.where(total > 0, safe_m + xp.log(denom), m)
    return o, lse


def best_torch(row):
    """The fastest PyTorch way of a row (name, ms) for the direction, or (None, nan)."""
    best = (None, float("nan"))
    for name, r in row["torch"].items():
        if r.get("status") == "ok" and (best[0] is None or r["ms"] < best[1]):
            best = (name, r["ms"])
    return best


def summary_lines(rows, direction):
    """The speed table of one direction: dilattn ms and TFLOP/s, PyTorch's best, the ratio
    (PyTorch best ms / dilattn ms: above 1 means dilattn is faster)."""
    out = [f"{direction}: {'row':<34} {'dilattn ms':>10} {'TF/s':>6} {'torch best':>16} "
           f"{'ms':>8} {'ratio':>6}"]
    for row in rows:
        if row["direction"] != direction:
            continue
        d = row["dilattn"]
        name, ms = best_torch(row)
        ratio = ms / d["ms"] if d.get("status") == "ok" and name else float("nan")
        d_ms = f"{d['ms']:.3f}" if d.get("status") == "ok" else d.get("status", "?")[:10]
        out.append(f"  {row['label']:<40} {d_ms:>10} {d.get('tflops', 0):>6.1f} "
                   f"{(name or 'none'):>16} {ms:>8.3f} {ratio:>6.2f}")
    return out


def random_block_mask(n_blocks, density, seed):
    """A seeded block mask (list of lists of kept key blocks per row block): each row block
    keeps its diagonal block and round(density * n_blocks) blocks in all."""
    import random
    rng = random.Random(seed)
    keep = max(1, round(density * n_blocks))
    rows = []
    for i in range(n_blocks):
        others = [j for j in range(n_blocks) if j != i]
        rng.shuffle(others)
        rows.append(sorted([i] + others[:keep - 1]))
    return rows


# ---------------------------------------------------------------- GPU parts
def _time(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return median_ms(times)


def _measure(torch, make_fwd, pairs, D, args):
    """{forward: result, backward: result} for a callable returning (output, inputs)."""
    res = {}
    try:
        with torch.no_grad():
            res["forward"] = {"ms": _time(torch, lambda: make_fwd(False), args.warmup,
                                          args.iters)}
        grad = torch.randn_like(make_fwd(True)[0])

        def step():
            o, ins = make_fwd(True)
            torch.autograd.grad(o, ins, grad)
        fwd_ms = res["forward"]["ms"]
        both = _time(torch, step, args.warmup, args.iters)
        res["backward"] = {"ms": max(both - fwd_ms, 1e-6), "forward_plus_backward_ms": both}
        for direction, r in res.items():
            r["status"] = "ok"
            r["tflops"] = tflops(pairs, D, direction, r["ms"])
    except Exception as e:  # a way PyTorch does not offer here is a row entry, not a crash
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        for direction in ("forward", "backward"):
            res.setdefault(direction, {})
            res[direction].update({"status": "error", "error": msg, "ms": float("nan")})
    torch.cuda.empty_cache()
    return res


def _rows_for(label, kind, pairs, D, dl, tw):
    return [{"label": label, "kind": kind, "direction": d, "pairs": pairs, "D": D,
             "dilattn": dl[d], "torch": {k: v[d] for k, v in tw.items()}}
            for d in ("forward", "backward")]


def run_gpu(args, save):
    """Every row; save(rows) after each group, so a run stopped by its time limit keeps what it
    measured."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import dilattn.torch as dt
    import dilattn.mask as dmask

    dev = torch.device("cuda")
    f16 = torch.float16
    sdpa_backends = {"flash": SDPBackend.FLASH_ATTENTION,
                     "cudnn": SDPBackend.CUDNN_ATTENTION,
                     "efficient": SDPBackend.EFFICIENT_ATTENTION}
    rows = []

    def inputs(B, N, H, D, layout_bhnd, grad):
        shape = (B, H, N, D) if layout_bhnd else (B, N, H, D)
        return [torch.randn(shape, device=dev, dtype=f16, requires_grad=grad) for _ in range(3)]

    for causal in (False, True):
        kind = "causal" if causal else "dense"
        if kind not in args.only:
            continue
        for D in (64, 128):
            for seqlen in args.seqlens:
                B, N, H, _ = fa_shape(seqlen, D)
                pairs = dense_pairs(B, H, N, N, causal)
                qkv = inputs(B, N, H, D, False, True)
                dl = _measure(torch, lambda g: (dt.attention(*qkv, causal=causal), qkv),
                              pairs, D, args)
                del qkv
                tw = {}
                tq = inputs(B, N, H, D, True, True)
                for name, be in sdpa_backends.items():
                    def call(g, be=be):
                        with sdpa_kernel([be]):
                            return F.scaled_dot_product_attention(*tq, is_causal=causal), tq
                    tw["sdpa_" + name] = _measure(torch, call, pairs, D, args)
                del tq
                rows += _rows_for(f"{kind} D={D} B={B} N={N} H={H}", kind, pairs, D, dl, tw)
                save(rows)

    if "dilated" in args.only:
        B, H, D = 1, 16, 64
        for N in args.dilated_n:
            pairs = dilated_pairs(B, H, N, SEGMENTS, DILATIONS)
            qkv = inputs(B, N, H, D, False, True)
            dl = _measure(torch, lambda g: (dt.attention(*qkv, segments=list(SEGMENTS),
                                                         dilations=list(DILATIONS)), qkv),
                          pairs, D, args)
            tw = {"flash_per_branch_lse_merge": _measure(
                torch, lambda g: (_torch_dilated(torch, *qkv), qkv), pairs, D, args)}
            del qkv
            rows += _rows_for(f"dilated D={D} B={B} N={N} H={H}", "dilated", pairs, D, dl, tw)
            save(rows)

    if "sparse" in args.only:
        B, N, H, D = 1, 16384, 16, 64
        nb = N // SPARSE_BLOCK
        for density in args.densities:
            table = random_block_mask(nb, density, seed=1)
            pairs = sum(len(r) for r in table) * SPARSE_BLOCK * SPARSE_BLOCK * B * H
            row_ptr = [0]
            for r in table:
                row_ptr.append(row_ptr[-1] + len(r))
            col_idx = [j for r in table for j in r]
            mask = dmask.from_bsr(row_ptr, col_idx, N, SPARSE_BLOCK)
            qkv = inputs(B, N, H, D, False, True)
            dl = _measure(torch, lambda g: (dt.attention(*qkv, mask=mask), qkv), pairs, D, args)
            del qkv
            tq = inputs(B, N, H, D, True, True)
            tw = {}
            blocks = torch.zeros(nb, nb, dtype=torch.bool, device=dev)
            for i, r in enumerate(table):
                blocks[i, r] = True
            flex, compile_s, why = _flex(torch, blocks, B, H, N, args.flex_compile_limit, tq)
            if flex is not None:
                tw["flex_blockmask"] = _measure(torch, lambda g: (flex(*tq), tq), pairs, D, args)
                tw["flex_blockmask"]["forward"]["compile_s"] = compile_s
            else:
                dense_mask = blocks.repeat_interleave(SPARSE_BLOCK, 0).repeat_interleave(
                    SPARSE_BLOCK, 1)

                def masked(g):
                    return F.scaled_dot_product_attention(*tq, attn_mask=dense_mask), tq
                tw["sdpa_masked"] = _measure(torch, masked, pairs, D, args)
                tw["sdpa_masked"]["forward"]["why_not_flex"] = why
                del dense_mask
            del tq
            rows += _rows_for(f"sparse {int(density * 100)}% D={D} B={B} N={N} H={H}",
                              "sparse", pairs, D, dl, tw)
            save(rows)
    return rows


def _torch_dilated(torch, q, k, v):
    """Dilated attention in PyTorch (SPEC 3, heads mode mod): per branch (s, r) and head offset
    o, the rows o, o + r, ... of each segment attend to each other through the flash kernel,
    which also returns each row's LSE; the branches are merged by their LSE (merge_lse). The
    LSE is the kernel's own (not differentiable): the backward flows through the branch
    outputs with the merge weights taken as constants."""
    B, N, H, D = q.shape
    outs, lses = [], []
    for s, r in zip(SEGMENTS, DILATIONS):
        o_full = torch.zeros_like(q)
        lse_full = torch.full((B, H, N), float("-inf"), device=q.device, dtype=torch.float32)
        pad = (-N) % s
        for off in range(r):
            heads = list(range(off, H, r))
            if not heads:
                continue

            def seg(x):
                x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)) if pad else x
                x = x.view(B, -1, s, H, D)[:, :, off::r][:, :, :, heads]
                return x.reshape(-1, x.shape[2], len(heads), D).transpose(1, 2)
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
                seg(q), seg(k), seg(v), 0.0, False, False)[:2]
            n_seg = (N + pad) // s
            out = out.transpose(1, 2).reshape(B, n_seg, -1, len(heads), D)
            lse = lse.reshape(B, n_seg, len(heads), -1)
            rows = torch.arange(off, s, r, device=q.device)
            idx = (torch.arange(n_seg, device=q.device)[:, None] * s + rows[None, :]).reshape(-1)
            keep = idx < N
            idx = idx[keep]
            h_idx = torch.tensor(heads, device=q.device)
            o_full[:, idx[:, None], h_idx[None, :]] = out.reshape(B, -1, len(heads), D)[:, keep]
            lse_full[:, h_idx[:, None], idx[None, :]] = (
                lse.permute(0, 2, 1, 3).reshape(B, len(heads), -1)[:, :, keep])
        outs.append(o_full)
        lses.append(lse_full.transpose(1, 2).detach())
    o, _ = merge_lse(outs, lses, torch)
    return o


def _flex(torch, blocks, B, H, N, limit_s, tq):
    """FlexAttention compiled with a BlockMask of `blocks`, if that works within limit_s
    seconds; else (None, seconds, why)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:
        return None, 0.0, f"no FlexAttention: {e}"
    t0 = time.time()
    try:
        def mask_mod(b, h, q_idx, kv_idx):
            return blocks[q_idx // SPARSE_BLOCK, kv_idx // SPARSE_BLOCK]
        block_mask = create_block_mask(mask_mod, None, None, N, N, device="cuda",
                                       BLOCK_SIZE=SPARSE_BLOCK)
        compiled = torch.compile(flex_attention)

        def call(q, k, v):
            return compiled(q, k, v, block_mask=block_mask)
        out = call(*tq)
        out.sum().backward()
        torch.cuda.synchronize()
    except Exception as e:
        return None, time.time() - t0, f"FlexAttention failed: {type(e).__name__}: {e}"[:300]
    elapsed = time.time() - t0
    if elapsed > limit_s:
        return None, elapsed, f"FlexAttention took {elapsed:.0f} s to compile (limit {limit_s})"
    return call, elapsed, ""


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.lib:
        os.environ["DILATTN_LIB"] = args.lib
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        print("no GPU: nothing run (torch with CUDA and a GPU are needed)")
        return 0
    props = torch.cuda.get_device_properties(0)
    t0 = time.time()

    def save(rows, complete=False):
        # The commit and date the figures belong to (bench/plot_results.py puts them in the
        # captions): DILATTN_COMMIT as first_light.sh sets it, else "not recorded".
        result = {"device": props.name, "commit": os.environ.get("DILATTN_COMMIT", "not recorded"),
                  "date": time.strftime("%Y-%m-%d", time.gmtime(t0)), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                  "flop_formula": FLOP_FORMULA, "timing": f"median of {args.iters} "
                  f"CUDA-event-timed calls after {args.warmup} warm-up calls; backward = "
                  "(forward+backward) - forward", "dtype": "f16", "complete": complete,
                  "seconds": round(time.time() - t0, 1), "rows": rows}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    rows = run_gpu(args, save)
    save(rows, complete=True)
    print(f"{props.name}, torch {torch.__version__}; TFLOP/s: {FLOP_FORMULA}")
    for direction in ("forward", "backward"):
        print("\n".join(summary_lines(rows, direction)))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
