"""spec_numpy.py - an independent numpy implementation of SPEC.md sections 2, 3 and 6, written
from the SPEC text (not from the C++ code), used as the oracle of the Python tests.

Algorithm. For each (b, h, i) build A(i) as an explicit list of key indices, duplicates kept
(a multiset): dense keys 0..Nk-1 cut at the causal limit j <= i + (Nk - Nq); dilated keys the
concatenation over branches of the selected keys of i's own segment. The C++ reference instead
computes one softmax per branch and combines them by LSE (SPEC 3); here a single softmax runs
over the whole multiset, which is the same quantity reached by a different route:
    LSE_i = log sum_{j in A(i)} exp(S_ij),  O_i = sum_{j in A(i)} exp(S_ij - LSE_i) v_j.
The backward applies the SPEC 6 formulas to every occurrence of j in A(i).
"""
import math

import numpy as np


def head_offset(mode, h, b, r, H):
    """o_b(h) of SPEC 3."""
    if mode == "mod":
        return h % r
    if mode == "block":
        return h // -(-H // r)          # floor(h / ceil(H / r))
    return b % r                        # groups: head of group g uses branch g, offset g mod r_g


def head_group(h, H, m):
    """groups mode: m contiguous groups, group g holding floor(H/m) heads plus one if g < H mod m."""
    sizes = [H // m + (1 if g < H % m else 0) for g in range(m)]
    first = 0
    for g, size in enumerate(sizes):
        if first <= h < first + size:
            return g
        first += size
    raise AssertionError("head outside every group")


def allowed_keys(i, h, Nq, Nk, H, segments=None, dilations=None, head_mode="mod", causal=False):
    """A(i) for query row i of head h, a list with repeats."""
    if segments is None:                                     # SPEC 2, dense
        last = i + (Nk - Nq) if causal else Nk - 1
        return list(range(0, min(Nk, last + 1)))
    N = Nq
    assert Nq == Nk, "dilated attention needs Nq == Nk"
    keys = []
    m = len(segments)
    for b, (w, r) in enumerate(zip(segments, dilations)):
        if head_mode == "groups" and head_group(h, H, m) != b:
            continue
        w = min(w, N)                                        # a segment longer than N is clipped
        s0 = (i // w) * w
        s1 = min(s0 + w, N)                                  # the last segment may be partial
        o = head_offset(head_mode, h, b, r, H)
        if (i - s0) % r != o:                                # row i not selected by this branch
            continue
        keys += [j for j in range(s0, s1) if (j - s0) % r == o and (not causal or j <= i)]
    return keys


def _scale(D, scale):
    return 1.0 / math.sqrt(D) if scale is None else scale


def forward(q, k, v, scale=None, **config):
    """O [B, Nq, H, D] and LSE [B, H, Nq] in f64. config: segments, dilations, head_mode, causal."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Nq, H, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    sc = _scale(D, scale)
    o = np.zeros((B, Nq, H, D))
    lse = np.full((B, H, Nq), -np.inf)
    for h in range(H):
        g = h // (H // Hkv)                                  # GQA: kv head of query head h
        for i in range(Nq):
            keys = allowed_keys(i, h, Nq, Nk, H, **config)
            if not keys:
                continue                                     # O = 0, LSE = -inf
            kk, vv = k[:, keys, g, :], v[:, keys, g, :]      # [B, |A|, D]
            s = sc * np.einsum("bd,bjd->bj", q[:, i, h, :], kk)
            mx = s.max(axis=1, keepdims=True)
            l = mx[:, 0] + np.log(np.exp(s - mx).sum(axis=1))
            p = np.exp(s - l[:, None])
            o[:, i, h, :] = np.einsum("bj,bjd->bd", p, vv)
            lse[:, h, i] = l
    return o, lse


def backward(q, k, v, d_o, scale=None, **config):
    """dQ, dK, dV in f64 by SPEC 6, from a fresh forward of the same inputs."""
    q, k, v, d_o = (np.asarray(x, dtype=np.float64) for x in (q, k, v, d_o))
    o, lse = forward(q, k, v, scale=scale, **config)
    B, Nq, H, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    sc = _scale(D, scale)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for h in range(H):
        g = h // (H // Hkv)
        for i in range(Nq):
            keys = allowed_keys(i, h, Nq, Nk, H, **config)
            if not keys:
                continue
            Di = np.einsum("bd,bd->b", d_o[:, i, h, :], o[:, i, h, :])       # D_i = <dO_i, O_i>
            kk, vv = k[:, keys, g, :], v[:, keys, g, :]
            P = np.exp(sc * np.einsum("bd,bjd->bj", q[:, i, h, :], kk) - lse[:, h, i][:, None])
            dS = P * (np.einsum("bd,bjd->bj", d_o[:, i, h, :], vv) - Di[:, None])
            dq[:, i, h, :] += sc * np.einsum("bj,bjd->bd", dS, kk)
            # np.add.at: a key occurring twice in A(i) receives both terms
            np.add.at(dv, (slice(None), keys, g), P[:, :, None] * d_o[:, i, h, None, :])
            np.add.at(dk, (slice(None), keys, g), sc * dS[:, :, None] * q[:, i, h, None, :])
    return dq, dk, dv


def within(x, ref, atol, rtol):
    """SPEC 8: |x - ref| <= atol + rtol |ref| elementwise; equal infinities pass."""
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    same_inf = np.isinf(ref) & (x == ref)
    with np.errstate(invalid="ignore"):
        ok = np.abs(x - ref) <= atol + rtol * np.abs(ref)
    return bool(np.all(ok | same_inf))
