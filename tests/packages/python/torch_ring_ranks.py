"""torch_ring_ranks.py - what the ranks of test_torch_ring.py run: launch() starts P processes
(torch.multiprocessing, spawn) that join one gloo (CPU) or NCCL (one GPU per rank) process
group through a file:// store and run one function of this module each; each rank's return
value comes back to the test through a file. A rank that does not finish within the deadline
fails the test (the processes are terminated), so a ring that hangs is a failure, never a
stuck CI job. The functions here only compute; the tests assert."""
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GROUP_TIMEOUT_S = 60  # the process group's own bound on every collective and exchange


def launch(world, fn_name, args, tmp_path, backend="gloo", deadline_s=240):
    """Runs fn_name(rank, world, *args) on world ranks; returns the results in rank order."""
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir(exist_ok=True)
    context = mp.start_processes(_rank_main, args=(world, str(store), backend, fn_name, args,
                                                   str(out)),
                                 nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + deadline_s
    try:
        # join() returns when some rank exits (False while others run), raises when one failed.
        while not context.join(timeout=max(deadline - time.monotonic(), 0)):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{fn_name} on {world} ranks: still running after "
                                     f"{deadline_s} s (a rank hangs)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
    return [torch.load(out / f"rank{r}.pt") for r in range(world)]


def _rank_main(rank, world, store, backend, fn_name, args, out):
    torch.set_num_threads(1)  # the test machine's cores are shared by the ranks
    os.environ.setdefault("DILATTN_NUM_THREADS", "1")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    try:
        result = globals()[fn_name](rank, world, *args)
        # Every rank done with its last exchange before any closes its connections: a rank that
        # tears the group down while a peer still reads from it makes gloo abort the peer.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))


# ---------------------------------------------------------------- inputs
def full_inputs(sizes, seed, dtype=torch.float64):
    """q, k, v, do of the whole problem, the same on every rank and in the test."""
    B, N, H, Hkv, D = sizes
    gen = torch.Generator().manual_seed(seed)

    def uniform(*shape):
        return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)

    return uniform(B, N, H, D), uniform(B, N, Hkv, D), uniform(B, N, Hkv, D), uniform(B, N, H, D)


def shard(rank, world, split, tensors, device="cpu"):
    """This rank's rows (a tensor) and its shards of tensors (leaves needing grad but the last)."""
    from dilattn.ring import shard_rows
    rows = torch.from_numpy(shard_rows(tensors[0].shape[1], world, rank, split))
    shards = [t[:, rows].contiguous().to(device) for t in tensors]
    for t in shards[:-1]:
        t.requires_grad_()
    return rows, shards


def _ring_once(q, k, v, do, **kw):
    import dilattn.torch as dt
    for t in (q, k, v):
        t.grad = None
    o, lse = dt.ring_attention(q, k, v, return_lse=True, **kw)
    o.backward(do)
    return [x.detach().cpu() for x in (o, lse, q.grad, k.grad, v.grad)]


# ---------------------------------------------------------------- rank functions
def ring_cases(rank, world, cases, device="cpu", group_ranks=None):
    """For each (sizes, seed, dtype, split, options): this rank's rows and its (o, lse, dq, dk,
    dv) of ring_attention, and whether a second run gave the same bits. With group_ranks, the
    ring runs on the group of those global ranks (dist.new_group) and the others return None."""
    group = None
    if group_ranks is not None:
        group = dist.new_group(group_ranks)  # every rank of the world takes part
        if rank not in group_ranks:
            return None
        rank, world = dist.get_rank(group), len(group_ranks)
    if device == "cuda":
        device = torch.device("cuda", rank)
    results = []
    for sizes, seed, dtype, split, options in cases:
        rows, (q, k, v, do) = shard(rank, world, split, full_inputs(sizes, seed, dtype), device)
        first = _ring_once(q, k, v, do, split=split, group=group, **options)
        second = _ring_once(q, k, v, do, split=split, group=group, **options)
        results.append(dict(rows=rows, got=first,
                            repeat_equal=all(torch.equal(a, b) for a, b in zip(first, second))))
    return results


def ring_option_cases(rank, world, cases):
    """For each (sizes, seed, split, options, sink values or None): this rank's rows, its (o,
    lse, dq, dk, dv) of ring_attention in f64 on ref, and the sinks' gradient (None without)."""
    import dilattn.torch as dt
    results = []
    for sizes, seed, split, options, sink_values in cases:
        rows, (q, k, v, do) = shard(rank, world, split, full_inputs(sizes, seed))
        sinks = None
        if sink_values is not None:
            sinks = torch.tensor(sink_values, dtype=torch.float64, requires_grad=True)
        o, lse = dt.ring_attention(q, k, v, split=split, return_lse=True, backend="ref",
                                   sinks=sinks, **options)
        o.backward(do)
        results.append(dict(rows=rows, got=[x.detach() for x in (o, lse, q.grad, k.grad, v.grad)],
                            d_sinks=None if sinks is None else sinks.grad.detach()))
    return results


def refused_options(rank, world):
    """The outcome of ring_attention with each option it refuses (on every rank alike)."""
    import dilattn.torch as dt
    rows, (q, k, v, do) = shard(rank, world, "zigzag", full_inputs(BAD_SIZES, seed=3))
    out = {}
    for name, value in (("window_size", (2, 1)), ("alibi_slopes", [0.5, 0.25]),
                        ("dropout_p", 0.1)):
        out[name] = _outcome(lambda: dt.ring_attention(q, k, v, backend="ref", **{name: value}))
    return out


def _outcome(call):
    """("ok", None) or (exception class name, status, message) of call()."""
    try:
        call()
        return ("ok", None, "")
    except Exception as e:  # noqa: BLE001 - the test compares what each rank raised
        return (type(e).__name__, getattr(e, "status", None), str(e))


BAD_SIZES = (1, 12, 2, 1, 4)


def bad_inputs(rank, world):
    """Each scenario's outcome on this rank, and whether a good ring call right after it ran
    (the group is still in step)."""
    import dilattn.torch as dt
    rows, (q, k, v, do) = shard(rank, world, "zigzag", full_inputs(BAD_SIZES, seed=3))

    def good():
        _ring_once(q, k, v, do, causal=True)
        return True

    def one_row_too_many():
        extra = (lambda t: torch.cat([t, t[:, :1]], 1)) if rank == 1 else (lambda t: t)
        dt.ring_attention(extra(q), extra(k), extra(v), causal=True)

    def head_dim_differs():
        wide = (lambda t: torch.cat([t, t[..., :1]], 3)) if rank == world - 1 else (lambda t: t)
        dt.ring_attention(wide(q), wide(k), wide(v))

    def unknown_split():
        dt.ring_attention(q, k, v, split="zig" if rank == 0 else "zigzag")

    def splits_differ():
        dt.ring_attention(q, k, v, split="contiguous" if rank == 1 else "zigzag")

    def bad_dilation_everywhere():
        dt.ring_attention(q, k, v, segments=[4], dilations=[7])

    def plan_fails_on_one_rank():  # passes the agreement, fails when the ring starts
        dt.ring_attention(q, k, v, backend="cuda" if rank == 1 else "cpu")

    scenarios = [one_row_too_many, head_dim_differs, unknown_split, splits_differ,
                 bad_dilation_everywhere, plan_fails_on_one_rank]
    return {s.__name__: (_outcome(s), good()) for s in scenarios}


def modules(rank, world, split, sizes, seed):
    """RingDilatedAttention and RingMultiheadDilatedAttention given the group: this rank's
    rows of their outputs and input gradients, and the multi-head module's parameter
    gradients."""
    import dilattn.torch as dt
    B, N, H, D = sizes
    rows, (q, k, v, do) = shard(rank, world, split, full_inputs((B, N, H, H, D), seed))
    attn = dt.RingDilatedAttention([4, 8], [1, 2], group=dist.group.WORLD, split=split,
                                   backend="ref")
    out = attn(q, k, v, is_causal=True)
    out.backward(do)
    single = dict(out=out.detach(), grads=[t.grad for t in (q, k, v)])

    torch.manual_seed(seed)  # the same parameters on every rank and in the test
    mha = dt.RingMultiheadDilatedAttention(H * D, H, [1, 2], [4, 8], group=dist.group.WORLD,
                                           split=split, dtype=torch.float64, backend="ref")
    x = q.detach().reshape(B, -1, H * D).clone().requires_grad_()
    y, _ = mha(x, is_causal=True)
    y.backward(do.reshape(B, -1, H * D))
    multi = dict(out=y.detach(), x_grad=x.grad,
                 param_grads={n: p.grad for n, p in mha.named_parameters()})
    return dict(rows=rows, single=single, multi=multi)
