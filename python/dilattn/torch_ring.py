"""torch_ring.py - ring attention (SPEC 5) on torch tensors over a torch.distributed process
group, with autograd. Import it from dilattn.torch:

    # every rank of the group, holding the rows dilattn.ring.shard_rows(N, P, rank, split):
    o = dilattn.torch.ring_attention(q, k, v, group=None, split="zigzag", causal=True)
    o.backward(do)        # collective too: every rank runs its backward

q [B, rows, H, D] and k, v [B, rows, Hkv, D] are this rank's shards of a sequence of N rows
(N: the sum of the ranks' rows); o is this rank's rows of the single-device result, equal to
dilattn.torch.attention on the full tensors within SPEC 8, and the gradients are this rank's
rows of dQ, dK and dV. The group's point-to-point operations (torch.distributed.batch_isend_irecv)
move the K/V shards: gloo for CPU tensors, NCCL for CUDA tensors (one GPU per rank).

How it computes (SPEC 5.2, 5.3): at step s = 0 .. P-1 rank p computes its queries against the
K/V shard of rank (p - s) mod P while the next shard arrives. Each (own rows, received rows)
pair is cut into sub-problems the library computes with its forward and backward
(dilattn_forward / dilattn_backward, or their _on_stream forms on torch's current stream): a
dense or causal block per pair of row ranges, and for dilated attention one dense or causal
block per branch, head offset and segment over the rows that branch selects (SPEC 3.1-3.3).
The C library has no entry point that merges partials or that runs its ring over another
transport, so the partials (o_b, lse_b) merge here, in torch, by SPEC 5.2's rule (the rule of
merge_lse / merge_weight / merge_element in lib/softmax_rules.h), in step order and then in
the fixed order of the sub-problems, in f32 (f64 for f64 inputs). The backward calls the
library's backward on every sub-problem with the forward's merged O and LSE (SPEC 6: the
exact contributions of that sub-problem's pairs); dK/dV partial sums travel the ring with the
K/V shards and reach their owner after P steps, added in ring order, so the gradients are
bitwise the same on every run. Whole shards travel at every step; memory per rank is O(N/P).

Collective behaviour (SPEC 5.4): every rank calls with the same problem (batch, heads, head
dim, dtype, device type, options and split) and the rows its rank holds under the split. Before
any data moves the ranks agree on these (torch.distributed.all_gather_object): a rank with bad
input raises its own error and every other rank a dilattn.Error (DILATTN_ERROR_COMM) naming it;
a field that differs between ranks fails every rank, naming the field and the ranks. A
sub-problem that fails on one rank during the ring (e.g. out of memory) does not stop the
exchanges, so no rank is left waiting; the ranks agree again at the end and fail together.
A rank that never arrives (a dead process) is bounded by the process group's timeout
(init_process_group(timeout=...)).

Kinds: dense, causal, dilated (any head mode), with GQA; splits "contiguous" and "zigzag" (the
splits of dilattn.ring). Options (docs/spec.md sections 5.5, 10): softcap=c (every
sub-problem caps its own scores, a rule of each score alone) and sinks=, a tensor [H] of sink
logits: they join each row once, as a last partial (0, sinks[h]) merged after the last step,
and their gradient -sum exp(sinks[h] - lse) <do, o> is summed over this rank's rows, then over
the ranks in rank order (an all_gather), the same on every rank. Block-sparse masks, windows,
ALiBi and dropout are refused, naming them, on every rank: this ring cuts its sub-problems
through the public dilattn_forward, which has no way to place one at whole-sequence positions,
as those need; the library's own ring (dilattn.ring.ring_forward, dilattn_ring_forward_ex)
runs them.
The library has first derivatives only: a double backward raises.
"""
import collections
import contextlib
from typing import Any, List, Optional, Sequence, Tuple, Union

import ctypes as C

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import _abi, _cints
from ._errors import check, error_for
from ._numpy import same_dtype
from ._plan import Options, Plan
from .torch import (_TORCH_DTYPES, _aligned, _check_sinks, _dtype_name, _on_device,
                    _one_device, _plan_backend, _stream, _view)

# Tags of the two kinds of messages a step sends (gloo keeps them apart; NCCL matches messages
# in the order both ends issue them, which is the same order here).
_TAG_KV = 1
_TAG_DKV = 2
NEG_INF = float("-inf")


# ---------------------------------------------------------------- rows and sub-problems
def shard_ranges(seqlen: int, num_ranks: int, rank: int, split: str) -> List[Tuple[int, int, int]]:
    """The rows rank holds under split (SPEC 5.1, from dilattn_ring_shard_rows): a list of
    (first global row, count, first row in the shard), empty ranges left out."""
    first, count = (C.c_int64 * 2)(), (C.c_int64 * 2)()
    check(_abi.lib().dilattn_ring_shard_rows(_cints.int64(seqlen, "seqlen"),
                                             _cints.int32(num_ranks, "num_ranks"),
                                             _cints.int32(rank, "rank"),
                                             _abi.RING_SPLITS[split], first, count))
    ranges, local = [], 0
    for r in range(2):
        if count[r] > 0:
            ranges.append((first[r], count[r], local))
            local += count[r]
    return ranges


# One sub-problem: rows q (a slice of the own shard) against rows k (a slice of the received
# shard), query heads `heads` (a slice) reading kv heads `kv_heads` (a slice: the library maps
# the heads, SPEC 2's g(h); or a list, one kv head per query head), causal or dense.
_Block = collections.namedtuple("_Block", "q k heads kv_heads causal")


def _branch_heads(options, H, branch, r):
    """(query heads slice, offset) pairs of a dilated branch (SPEC 3.2)."""
    if options.heads_mode == "mod":
        return [(slice(o, H, r), o) for o in range(min(r, H))]
    if options.heads_mode == "block":
        size = -(-H // r)
        return [(slice(o * size, min((o + 1) * size, H)), o) for o in range(r) if o * size < H]
    m = len(options.segments)  # groups: head group `branch` uses this branch alone
    count = H // m + (1 if branch < H % m else 0)
    first = branch * (H // m) + min(branch, H % m)
    return [(slice(first, first + count), branch % r)] if count > 0 else []


def _selected(lo, hi, s0, offset, r, range_first, local_first):
    """The rows in [lo, hi) of the segment starting at s0 that an offset selects (SPEC 3.3), as
    a slice of the shard whose range starts at global row range_first, local row local_first."""
    first = s0 + offset + max(-(-(lo - s0 - offset) // r), 0) * r
    if first >= hi:
        return None
    shift = local_first - range_first
    return slice(first + shift, hi + shift, r)


def blocks(options, N, H, Hkv, mine, theirs):
    """The sub-problems of own rows `mine` against rows `theirs` (shard_ranges lists), in the
    fixed order their partials merge."""
    out = []
    if options.segments is None:
        if not options.causal:  # every pair of rows: one block of the whole shards
            rows_q, rows_k = sum(c for _, c, _ in mine), sum(c for _, c, _ in theirs)
            if rows_q and rows_k:
                out.append(_Block(slice(0, rows_q), slice(0, rows_k), slice(0, H),
                                  slice(0, Hkv), False))
            return out
        for gq, cq, lq in mine:
            for gk, ck, lk in theirs:
                relation = _relation(gq, cq, gk, ck)
                if relation is not None:
                    out.append(_Block(slice(lq, lq + cq), slice(lk, lk + ck), slice(0, H),
                                      slice(0, Hkv), relation))
        return out
    group = H // Hkv
    for branch, (w, r) in enumerate(zip(options.segments, options.dilations)):
        W = min(w, N)  # SPEC 3.1's clipping
        for heads, offset in _branch_heads(options, H, branch, r):
            hs = list(range(H))[heads]
            kv_heads = heads if Hkv == H else [h // group for h in hs]
            for gq, cq, lq in mine:
                for gk, ck, lk in theirs:
                    relation = (_relation(gq, cq, gk, ck) if options.causal else False)
                    if relation is None:
                        continue
                    first_seg = max(gq, gk) // W
                    last_seg = (min(gq + cq, gk + ck) - 1) // W
                    for s in range(first_seg, last_seg + 1):
                        s0, s1 = s * W, min((s + 1) * W, N)
                        q = _selected(max(gq, s0), min(gq + cq, s1), s0, offset, r, gq, lq)
                        k = _selected(max(gk, s0), min(gk + ck, s1), s0, offset, r, gk, lk)
                        if q is not None and k is not None:
                            out.append(_Block(q, k, heads, kv_heads, relation))
    return out


def _relation(gq, cq, gk, ck):
    """Causal attention of query rows [gq, gq+cq) to key rows [gk, gk+ck): False (every pair
    allowed), True (the same rows: causal within them) or None (no key allowed). Ranges of one
    split are equal or disjoint (SPEC 5.1)."""
    if gk + ck <= gq:
        return False
    if gk == gq and ck == cq:
        return True
    if gk >= gq + cq:
        return None
    raise error_for("DILATTN_ERROR_INTERNAL",
                    f"ring_attention: rows [{gq}, {gq + cq}) and [{gk}, {gk + ck}) overlap")


# ---------------------------------------------------------------- SPEC 5.2's merge
def merge_partial(o, lse, o_b, lse_b):
    """Merges a partial (o_b [B, n, h, D], lse_b [B, h, n]) into the running (o, lse), views of
    the accumulators, in place, by SPEC 5.2 (lib/softmax_rules.h: merge_lse, merge_weight,
    merge_element): a partial with lse_b = -inf leaves (o, lse) unchanged, a weight of 0
    contributes nothing even against an inf or NaN, NaN propagates."""
    o_b, lse_b = o_b.to(o.dtype), lse_b.to(lse.dtype)
    old_empty, part_empty = lse == NEG_INF, lse_b == NEG_INF
    merged = torch.maximum(lse, lse_b) + torch.log1p(torch.exp(-(lse - lse_b).abs()))
    merged = torch.where(part_empty, lse, torch.where(old_empty, lse_b, merged))
    w_old = torch.exp(lse - merged).masked_fill(old_empty, 0.0)
    w_part = torch.exp(lse_b - merged).masked_fill(part_empty, 0.0)

    def term(w, x):  # [B, h, n] weights against [B, n, h, D] rows
        w = w.transpose(1, 2).unsqueeze(-1)
        return (w * x).masked_fill(w == 0, 0.0)

    o.copy_(term(w_old, o) + term(w_part, o_b))
    lse.copy_(merged)


# ---------------------------------------------------------------- the process group
def _global_rank(group, rank):
    if group is None or group is dist.group.WORLD:
        return rank
    get = getattr(dist, "get_global_rank", None)  # torch >= 2.0
    if get is None:
        get = dist.distributed_c10d._get_global_rank  # torch 1.13
    return get(group, rank)


def _describe_error(e):
    """What the other ranks' errors say of this rank's exception."""
    return f"{type(e).__name__}: {e}"


class _Ring:
    """One ring_attention call's group, options and agreed layout; forward() and backward()
    are the two collective halves."""

    def __init__(self, group, split, options):
        if not (dist.is_available() and dist.is_initialized()):
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            "ring_attention needs an initialised torch.distributed process "
                            "group (torch.distributed.init_process_group)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.num_ranks = dist.get_world_size(group)
        if self.rank < 0:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            "ring_attention: this process is not a member of group")
        self.split = split
        self.options = options  # the keyword arguments; Options() is checked collectively
        self.sinks = None  # SPEC 10.3: the sink logits [H], set by _RingAttention.forward

    # -------------------------------------------------------- agreement (SPEC 5.4)
    def _gather(self, mine, device):
        gathered = [None] * self.num_ranks
        # NCCL moves the pickled objects through the current GPU: the tensors' one.
        cuda = isinstance(device, torch.device) and device.type == "cuda"
        with torch.cuda.device(device) if cuda else contextlib.nullcontext():
            dist.all_gather_object(gathered, mine, group=self.group)
        return gathered

    def _agree_on_errors(self, gathered, own_error):
        failed = [r for r, d in enumerate(gathered) if d["error"] is not None]
        if not failed:
            return
        if own_error is not None:
            raise own_error
        r = failed[0]
        raise error_for("DILATTN_ERROR_COMM",
                        f"ring_attention: rank {r} failed: {gathered[r]['error']}")

    def _agree(self, call, tensors, device):
        """Checks this rank's input, then agrees with the other ranks on it (one all_gather);
        raises on every rank when any rank's input is bad or differs. Sets the layout."""
        own_error, mine = None, {"call": call, "error": None}
        try:
            mine.update(self._check(tensors))
        except Exception as e:  # noqa: BLE001 - every rank learns of it below
            own_error = e
            mine["error"] = _describe_error(e)
        gathered = self._gather(mine, device)
        self._agree_on_errors(gathered, own_error)
        for field in ("call", "batch", "heads_q", "heads_kv", "head_dim", "dtype", "device",
                      "split", "options", "sinks"):
            for r in range(1, self.num_ranks):
                if gathered[r][field] != gathered[0][field]:
                    raise error_for("DILATTN_ERROR_COMM",
                                    f"ring_attention: rank {r} called with {field}="
                                    f"{gathered[r][field]!r} but rank 0 with {field}="
                                    f"{gathered[0][field]!r} (every rank must call with the "
                                    "same problem, SPEC 5.4)")
        rows = [d["rows"] for d in gathered]
        N = sum(rows)
        ranges = [shard_ranges(N, self.num_ranks, r, self.split) if N else []
                  for r in range(self.num_ranks)]
        want = [sum(c for _, c, _ in ranges[r]) for r in range(self.num_ranks)]
        if rows != want:
            # N is the sum of the rows, so which rank is wrong cannot be told: name them all.
            message = (f"ring_attention: the ranks hold {rows} rows, but split={self.split!r} "
                       f"of N={N} rows over {self.num_ranks} ranks gives {want} "
                       "(dilattn.ring.shard_rows says which rows)")
            raise error_for("DILATTN_ERROR_SHAPE_MISMATCH" if rows[self.rank] != want[self.rank]
                            else "DILATTN_ERROR_COMM", message)
        self.N, self.rows, self.ranges = N, rows, ranges
        agreed = gathered[0]
        self.B, self.H, self.Hkv, self.D = (agreed[f] for f in ("batch", "heads_q", "heads_kv",
                                                                "head_dim"))

    def _check(self, tensors):
        """This rank's input checked on its own; the fields the ranks must agree on."""
        device = _one_device(tensors)
        same_dtype([(name, str(t.dtype).replace("torch.", "")) for name, t in tensors])
        if self.split not in _abi.RING_SPLITS:
            raise error_for("DILATTN_ERROR_INVALID_VALUE",
                            f"split={self.split!r}: expected one of "
                            f"{sorted(_abi.RING_SPLITS)}")
        # A group may carry several backends ("cpu:gloo,cuda:nccl" in newer torch).
        backend = str(dist.get_backend(self.group))
        if {"cuda": "nccl", "cpu": "gloo"}[device.type] not in backend:
            raise error_for("DILATTN_ERROR_DEVICE_MISMATCH",
                            f"ring_attention: the tensors are on {device} but the process "
                            f"group's backend is {backend}: CPU tensors need a gloo group, "
                            "CUDA tensors an NCCL group")
        q, k, v = (t for _, t in tensors[:3])
        if k.shape != v.shape:
            raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                            f"k has shape {tuple(k.shape)} but v {tuple(v.shape)}")
        if (q.shape[0], q.shape[1], q.shape[3]) != (k.shape[0], k.shape[1], k.shape[3]):
            raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                            f"q has shape {tuple(q.shape)} but k {tuple(k.shape)}: a rank's "
                            "shards hold the same rows of q, k and v (B, rows and D agree)")
        for name, t in tensors[3:]:
            if t.shape != q.shape:
                raise error_for("DILATTN_ERROR_SHAPE_MISMATCH",
                                f"{name} has shape {tuple(t.shape)}, q {tuple(q.shape)}")
        opts = self.options
        for name, what in (("window_size", "a window"), ("alibi_slopes", "ALiBi"),
                           ("dropout_p", "dropout")):
            if opts[name] not in (None, 0, 0.0):
                raise error_for("DILATTN_ERROR_UNSUPPORTED",
                                f"ring_attention over torch.distributed does not run {what} "
                                f"({name}={opts[name]!r}): its sub-problems would need "
                                "whole-sequence positions; dilattn.ring.ring_forward runs it")
        self.opts = Options(opts["segments"], opts["dilations"], opts["heads_mode"],
                            opts["causal"], opts["scale"], None, opts["backend"],
                            softcap=opts["softcap"])
        self.backend = _plan_backend(device, self.opts.backend)
        sinks = self.sinks
        if sinks is not None:
            _check_sinks(sinks, q.shape[2])
        return {"batch": q.shape[0], "heads_q": q.shape[2], "heads_kv": k.shape[2],
                "head_dim": q.shape[3], "dtype": str(q.dtype).replace("torch.", ""),
                "device": device.type, "split": self.split, "rows": q.shape[1],
                "options": (self.opts.segments, self.opts.dilations,
                            self.opts.heads_mode if self.opts.segments else None,
                            self.opts.causal, self.opts.scale, self.opts.softcap),
                "sinks": None if sinks is None else tuple(sinks.detach().double().cpu().tolist())}

    def _finish(self, failure, device):
        """The closing agreement: every rank learns whether a sub-problem failed anywhere."""
        mine = {"error": None if failure is None else _describe_error(failure)}
        self._agree_on_errors(self._gather(mine, device), failure)

    # -------------------------------------------------------- exchanges
    def _shift(self, send, recv, tag):
        """Sends `send` to the next rank and receives `recv` from the previous one, both
        started; returns the requests. An empty tensor travels as no message (both ends know
        every shard's size)."""
        if self.num_ranks == 1:
            return []
        P, me = self.num_ranks, self.rank
        ops = []
        if send.numel():
            ops.append(dist.P2POp(dist.isend, send, _global_rank(self.group, (me + 1) % P),
                                  self.group, tag))
        if recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, _global_rank(self.group, (me - 1) % P),
                                  self.group, tag))
        return dist.batch_isend_irecv(ops) if ops else []

    # -------------------------------------------------------- sub-problems
    def _setup(self, q):
        self.device, self.dtype = q.device, q.dtype
        self.dtype_name = _dtype_name("q", q)
        self.plans = {}
        # The whole problem's plan: the library checks the options and sizes (segments,
        # dilations, head counts, backend limits) once, with its own messages.
        self.full_plan = Plan(self.opts, (self.B, self.N, self.N, self.H, self.Hkv, self.D),
                              self.dtype_name, self.backend)
        self.lse_dtype = _TORCH_DTYPES[self.full_plan.lse_dtype()]

    def _plan(self, nq, nk, heads, kv_heads, causal):
        key = (nq, nk, heads, kv_heads, causal)
        if key not in self.plans:
            opts = Options(causal=causal, scale=self.opts.scale, backend=self.opts.backend,
                           softcap=self.opts.softcap)
            self.plans[key] = Plan(opts, (self.B, nq, nk, heads, kv_heads, self.D),
                                   self.dtype_name, self.backend)
        return self.plans[key]

    def _block_inputs(self, blk, q, kv):
        qb = q[:, blk.q, blk.heads]
        if isinstance(blk.kv_heads, slice):
            kb, vb = kv[0][:, blk.k, blk.kv_heads], kv[1][:, blk.k, blk.kv_heads]
        else:  # one kv head per query head (dilated GQA: the heads of an offset)
            index = torch.tensor(blk.kv_heads, device=self.device)
            kb, vb = (x[:, blk.k].index_select(2, index) for x in kv)
        plan = self._plan(qb.shape[1], kb.shape[1], qb.shape[2], kb.shape[2], blk.causal)
        return qb, kb, vb, plan

    def _views(self, named):
        return [_view(name, t, self.device) for name, t in named]

    def _forward_step(self, q, kv, src, acc_o, acc_lse):
        for blk in blocks(self.opts, self.N, self.H, self.Hkv, self.ranges[self.rank],
                          self.ranges[src]):
            qb, kb, vb, plan = self._block_inputs(blk, q, kv)
            o_b = torch.empty(qb.shape, dtype=self.dtype, device=self.device)
            lse_b = torch.empty((self.B, qb.shape[2], qb.shape[1], 1), dtype=self.lse_dtype,
                                device=self.device)
            plan.forward(*self._views((("q", qb), ("k", kb), ("v", vb), ("o", o_b),
                                       ("lse", lse_b))), stream=_stream(self.device))
            merge_partial(acc_o[:, blk.q, blk.heads], acc_lse[:, blk.heads, blk.q], o_b,
                          lse_b[..., 0])

    def _backward_step(self, q, kv, o, lse, d_o, src, dq, dkv):
        for blk in blocks(self.opts, self.N, self.H, self.Hkv, self.ranges[self.rank],
                          self.ranges[src]):
            qb, kb, vb, plan = self._block_inputs(blk, q, kv)
            ob, dob = o[:, blk.q, blk.heads], d_o[:, blk.q, blk.heads]
            lseb = lse[:, blk.heads, blk.q].unsqueeze(3)
            grads = [torch.empty(t.shape, dtype=self.dtype, device=self.device)
                     for t in (qb, kb, vb)]
            plan.backward(*self._views((("q", qb), ("k", kb), ("v", vb), ("o", ob),
                                        ("lse", lseb), ("grad of o", dob), ("dq", grads[0]),
                                        ("dk", grads[1]), ("dv", grads[2]))),
                          stream=_stream(self.device))
            dq[:, blk.q, blk.heads] += grads[0]
            for x, g in zip(dkv, grads[1:]):
                if isinstance(blk.kv_heads, slice):
                    x[:, blk.k, blk.kv_heads] += g
                else:  # the query heads' terms onto their kv heads, in head order
                    for i, h in enumerate(blk.kv_heads):
                        x[:, blk.k, h] += g[:, :, i]

    def _shard_shape(self, rank):
        return (2, self.B, self.rows[rank], self.Hkv, self.D)

    # -------------------------------------------------------- the two halves
    def forward(self, q, k, v):
        """This rank's (o, lse); also returns the merged LSE in the accumulators' precision,
        which the backward reads."""
        device = q.device if isinstance(q, torch.Tensor) else None
        self._agree("forward", [("q", q), ("k", k), ("v", v)], device)
        P, me = self.num_ranks, self.rank
        q, k, v = _aligned(q), _aligned(k), _aligned(v)
        failure = None
        with _on_device(device):
            kv = torch.stack((k, v))
            acc_o = torch.zeros(q.shape, dtype=_accumulator_dtype(q), device=device)
            acc_lse = torch.full((self.B, self.H, q.shape[1]), NEG_INF, dtype=acc_o.dtype,
                                 device=device)
            try:
                self._setup(q)
            except Exception as e:  # noqa: BLE001 - the ranks agree on it after the ring
                failure = e
            for s in range(P):
                requests, received = [], None
                if s + 1 < P:
                    received = torch.empty(self._shard_shape((me - s - 1) % P),
                                           dtype=q.dtype, device=device)
                    requests = self._shift(kv, received, _TAG_KV)
                if failure is None:
                    try:
                        self._forward_step(q, kv, (me - s) % P, acc_o, acc_lse)
                    except Exception as e:  # noqa: BLE001 - the exchanges go on
                        failure = e
                for request in requests:
                    request.wait()
                if received is not None:
                    kv = received
            if failure is None and self.sinks is not None:
                try:  # SPEC 10.3: each row's sink, once, after every step's partial
                    sink_lse = self.sinks.detach().to(device=device, dtype=acc_lse.dtype)
                    merge_partial(acc_o, acc_lse, torch.zeros_like(acc_o),
                                  sink_lse.view(1, -1, 1).expand(acc_lse.shape))
                except Exception as e:  # noqa: BLE001 - the ranks agree on it below
                    failure = e
            self._finish(failure, device)
            return acc_o.to(q.dtype), acc_lse.to(self.lse_dtype), acc_lse

    def backward(self, q, k, v, o, lse, d_o):
        """This rank's (dq, dk, dv) (SPEC 6); dK/dV partial sums travel with the shards."""
        device = q.device
        self._agree("backward", [("q", q), ("k", k), ("v", v), ("grad of o", d_o)], device)
        P, me = self.num_ranks, self.rank
        d_o = _aligned(d_o.to(o.dtype))
        failure = None
        with _on_device(device):
            kv = torch.stack((k, v))
            dq = torch.zeros(q.shape, dtype=lse.dtype, device=device)
            dkv = torch.zeros(self._shard_shape(me), dtype=lse.dtype, device=device)
            try:
                self._setup(q)
            except Exception as e:  # noqa: BLE001 - the ranks agree on it after the ring
                failure = e
            for s in range(P):
                requests, received = [], None
                if s + 1 < P:
                    received = torch.empty(self._shard_shape((me - s - 1) % P), dtype=q.dtype,
                                           device=device)
                    requests = self._shift(kv, received, _TAG_KV)
                if failure is None:
                    try:
                        self._backward_step(q, kv, o, lse, d_o, (me - s) % P, dq, dkv)
                    except Exception as e:  # noqa: BLE001 - the exchanges go on
                        failure = e
                # The partial sums for the rows of rank me - s go on to rank me + 1; after the
                # last step they reach their owner.
                if P > 1:
                    dkv_received = torch.empty(self._shard_shape((me - s - 1) % P),
                                               dtype=lse.dtype, device=device)
                    requests += self._shift(dkv, dkv_received, _TAG_DKV)
                    for request in requests:
                        request.wait()
                    dkv = dkv_received
                if received is not None:
                    kv = received
            self._finish(failure, device)
            d_sinks = None if self.sinks is None else self._sink_gradient(o, lse, d_o)
            return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), d_sinks

    def _sink_gradient(self, o, lse, d_o):
        """SPEC 10.3: -sum exp(sinks[h] - lse_i) <do_i, o_i> over every rank's rows with
        lse_i != -inf, per head: this rank's rows here, then the ranks' sums added in rank order
        (all_gather), so every rank holds the same values."""
        sinks = self.sinks.detach().to(device=lse.device, dtype=lse.dtype)
        D = (d_o.to(lse.dtype) * o.to(lse.dtype)).sum(-1).transpose(1, 2)  # [B, H, rows]
        weight = torch.exp(sinks.view(1, -1, 1) - lse).masked_fill(lse == NEG_INF, 0.0)
        mine = -(weight * D).sum(dim=(0, 2))
        gathered = [torch.empty_like(mine) for _ in range(self.num_ranks)]
        dist.all_gather(gathered, mine.contiguous(), group=self.group)
        total = gathered[0].clone()
        for part in gathered[1:]:
            total += part
        return total.to(device=self.sinks.device, dtype=self.sinks.dtype)


def _accumulator_dtype(q):
    """The merge and the gradient sums run in f64 for f64 inputs, else in f32; fixed by the
    agreed dtype, so every rank's messages have the same size."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


class _RingAttention(torch.autograd.Function):
    """O, LSE = ring attention of this rank's shards; the backward is collective too."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, ring):
        ring.sinks = sinks
        o, lse, merged_lse = ring.forward(q, k, v)
        ctx.ring = ring
        ctx.save_for_backward(q, k, v, o, merged_lse)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_o, _d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        if d_o is None:
            d_o = torch.zeros_like(o)
        dq, dk, dv, d_sinks = ctx.ring.backward(q, k, v, o, lse, d_o)
        return dq, dk, dv, d_sinks, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, group: Any = None,
                   split: str = "zigzag", segments: Optional[Sequence[int]] = None,
                   dilations: Optional[Sequence[int]] = None, heads_mode: str = "mod",
                   causal: bool = False, scale: Optional[float] = None, backend: str = "auto",
                   return_lse: bool = False, softcap: float = 0.0,
                   sinks: Optional[torch.Tensor] = None,
                   window_size: Optional[Tuple[int, int]] = None,
                   alibi_slopes: Optional[Sequence[float]] = None, dropout_p: float = 0.0
                   ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Differentiable ring attention (SPEC 5) of this rank's shards q [B, rows, H, D], k, v
    [B, rows, Hkv, D] over the ranks of the torch.distributed group (default: the default
    group); see the module's text. Options as dilattn.torch.attention (dense, causal, dilated);
    split: "zigzag" (causal balance) or "contiguous", how the rows were split (the rows of
    dilattn.ring.shard_rows(N, P, rank, split)). Returns this rank's o [B, rows, H, D], or
    (o, lse) with return_lse=True (lse [B, H, rows], not differentiable). softcap and sinks (a
    floating tensor [H], the same on every rank; it gets its gradient) as dilattn.torch.attention;
    window_size, alibi_slopes and dropout_p are refused on every rank (the module's text).
    Collective, forward and backward."""
    ring = _Ring(group, split, dict(segments=segments, dilations=dilations,
                                    heads_mode=heads_mode, causal=causal, scale=scale,
                                    backend=backend, softcap=softcap, window_size=window_size,
                                    alibi_slopes=alibi_slopes, dropout_p=dropout_p))
    o, lse = _RingAttention.apply(q, k, v, sinks, ring)
    return (o, lse) if return_lse else o
