"""spec_numpy.py - docs/spec.md sections 2 (dense, causal bottom-right), 3 (dilated: three head
modes, multiset union of branches), 4 (block-sparse), 6 (backward) and 11 (dropout, with its own
numpy Philox4x32-10) as a literal numpy
transcription in f64, written from the spec's text (not from the C++ code). Every Python test
(tests/cli, tests/python, tests/ring, tests/sparse, tests/packages/python) checks the library
against this one module.

Algorithm. allowed_keys(i, h, ...) builds A(i) of one query row as an explicit list of key
indices with repeats (a key two dilated branches hold appears twice: the multiset of SPEC 3).
key_counts turns those lists into counts[h, i, j], how many times key j occurs in A(i), and
attention_numpy runs one softmax per row over the multiset, each occurrence adding its own term:
    LSE_i = log sum_j counts_ij exp(S_ij),  O_i = sum_j counts_ij exp(S_ij - LSE_i) v_j,
and SPEC 6's backward with P_ij = counts_ij exp(S_ij - LSE_i). The C++ reference instead runs one
softmax per branch and combines them by LSE; the two routes reach the same numbers.

SPEC 10.1 variants: window=(left, right) filters A(i) by i + d - left <= j <= i + d + right
(-1 unbounded) on positions before dilation; softcap c > 0 replaces the scaled score s by
c tanh(s / c); alibi_slopes (shape [H] or [B, H]) adds -m |i + d - j| after the softcap. The
backward multiplies dS by 1 - tanh^2(s / c) under a softcap; ALiBi adds no gradient.

SPEC 10.2 packed batches: varlen_attention cuts the packed tensors into their sequences and runs
each as the independent problem the spec makes it (its own Nq, Nk, d, segments, window, ALiBi
row of [n, H] slopes, dropout batch word), except that a block-sparse mask indexes the packed
tensor: varlen_mask_counts keeps the mask's keys inside the row's sequence, then applies causal
and the window in the sequence's positions.

SPEC 10.3 sinks: sinks [H] add exp(sinks[h]) to every row's sum (in its maximum too) with no
value, so LSE includes it and a row with no key gets O = 0, LSE = sinks[h]; the backward adds
d_sinks[h] = -sum_i exp(sinks[h] - LSE_i) <dO_i, O_i>.
"""
import math

import numpy as np

# ---------------------------------------------------------------- index rules (SPEC 2-4)


def head_offset(heads_mode, h, branch, r, H):
    """o_b(h) of SPEC 3 for head h in branch `branch` of dilation r."""
    if heads_mode == "mod":
        return h % r
    if heads_mode == "block":
        return h // -(-H // r)          # floor(h / ceil(H / r))
    return branch % r                   # groups: head of group g uses branch g, offset g mod r_g


def head_group(h, H, m):
    """groups mode: m contiguous groups, group g holding floor(H/m) heads plus one if g < H mod m."""
    first = 0
    for g in range(m):
        size = H // m + (1 if g < H % m else 0)
        if first <= h < first + size:
            return g
        first += size
    raise AssertionError("head outside every group")


def allowed_keys(i, h, Nq, Nk, H, segments=None, dilations=None, heads_mode="mod", causal=False,
                 mask=None, window=None):
    """A(i), then cut to the SPEC 10.1 window (left, right) when one is given."""
    keys = _kind_keys(i, h, Nq, Nk, H, segments, dilations, heads_mode, causal, mask)
    if window is None:
        return keys
    left, right = window
    a = i + (Nk - Nq)
    return [j for j in keys if (left < 0 or j >= a - left) and (right < 0 or j <= a + right)]


def _kind_keys(i, h, Nq, Nk, H, segments, dilations, heads_mode, causal, mask):
    """A(i) for query row i of head h, a list with repeats.

    Dense without segments and mask; dilated with segments/dilations (SPEC 3); block-sparse with
    mask = (bq, bk, rows), rows[h][ib] the key blocks row block ib lists (one list of rows for all
    heads when len(rows) == 1) (SPEC 4). Causal keeps j <= i + (Nk - Nq) everywhere (SPEC 2)."""
    last = i + (Nk - Nq) if causal else Nk - 1
    if mask is not None:
        bq, bk, rows = mask
        head_rows = rows[h if len(rows) > 1 else 0]
        keys = [j for jb in head_rows[i // bq] for j in range(jb * bk, min((jb + 1) * bk, Nk))]
        return [j for j in keys if j <= last]
    if segments is None:
        return list(range(0, min(Nk, last + 1)))
    assert Nq == Nk, "dilated attention needs Nq == Nk"
    N = Nq
    keys = []
    m = len(segments)
    for branch, (w, r) in enumerate(zip(segments, dilations)):
        if heads_mode == "groups" and head_group(h, H, m) != branch:
            continue
        w = min(w, N)                                        # a segment longer than N is clipped
        s0 = (i // w) * w
        s1 = min(s0 + w, N)                                  # the last segment may be partial
        o = head_offset(heads_mode, h, branch, r, H)
        if (i - s0) % r != o:                                # row i not selected by this branch
            continue
        keys += [j for j in range(s0, s1) if (j - s0) % r == o and j <= last]
    return keys


def key_counts(Nq, Nk, H, **config):
    """counts[h, i, j]: how many times key j occurs in A(i) of head h (config: allowed_keys')."""
    counts = np.zeros((H, Nq, Nk), dtype=np.int64)
    for h in range(H):
        for i in range(Nq):
            np.add.at(counts[h, i], allowed_keys(i, h, Nq, Nk, H, **config), 1)
    return counts


def dense_counts(Nq, Nk, H, causal):
    return key_counts(Nq, Nk, H, causal=causal)


def dilated_counts(N, H, branches, heads_mode, causal):
    segments, dilations = zip(*branches)
    return key_counts(N, N, H, segments=list(segments), dilations=list(dilations),
                      heads_mode=heads_mode, causal=causal)


def bsr_rows(H, Nq, bq, row_ptr, col_idx, head_ptr=None):
    """rows[h][ib] (the key blocks of row block ib) from BSR arrays, one mask or one per head."""
    I = -(-Nq // bq)
    masks = 1 if head_ptr is None else H
    rows = []
    for mh in range(masks):
        rp = row_ptr[mh * (I + 1):(mh + 1) * (I + 1)]
        ci = col_idx if head_ptr is None else col_idx[head_ptr[mh]:head_ptr[mh + 1]]
        rows.append([list(ci[rp[ib]:rp[ib + 1]]) for ib in range(I)])
    return rows


def bsr_counts(Nq, Nk, H, bq, bk, row_ptr, col_idx, head_ptr, causal):
    rows = bsr_rows(H, Nq, bq, row_ptr, col_idx, head_ptr)
    return key_counts(Nq, Nk, H, mask=(bq, bk, rows), causal=causal)


# ---------------------------------------------------------------- dropout draws (SPEC 11.1)

_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key):
    """Philox4x32-10 of SPEC 11.1 on arrays: counter (c0, c1, c2, c3) and key (k0, k1), each an
    array (or int) of 32-bit words; returns the four result words as uint64 arrays."""
    c0, c1, c2, c3 = (np.asarray(x, dtype=np.uint64) & _MASK32 for x in counter)
    k0, k1 = (np.asarray(x, dtype=np.uint64) & _MASK32 for x in key)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0  # < 2^64: exact in uint64
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(0x9E3779B9)) & _MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _MASK32
    return c0, c1, c2, c3


def dropout_keep(p, seed, offset, b, h, H, Nq, Nk):
    """keep[i, j] of SPEC 11.1 for batch element b, query head h: word (j // 4) mod 4 of
    philox((offset, i, b * H + h, 4 (j // 16) + j mod 4), (seed mod 2^32, seed // 2^32))
    >= ceil(p * 2^32)."""
    i = np.arange(Nq, dtype=np.uint64)[:, None]
    j = np.arange(Nk, dtype=np.uint64)[None, :]
    shape = (Nq, Nk)
    call = np.uint64(4) * (j // np.uint64(16)) + j % np.uint64(4)
    counter = (np.full(shape, offset, dtype=np.uint64), np.broadcast_to(i, shape),
               np.full(shape, b * H + h, dtype=np.uint64), np.broadcast_to(call, shape))
    words = philox4x32_10(counter, (seed % 2**32, seed // 2**32))
    word = ((j // np.uint64(4)) % np.uint64(4)).astype(np.int64)
    u = np.choose(word + np.zeros(shape, dtype=np.int64), words)
    return u >= math.ceil(p * 2**32)


def dropout_factors(p, seed, offset, b, h, H, Nq, Nk):
    """M[i, j] = keep_ij / (1 - p) (SPEC 11)."""
    return np.where(dropout_keep(p, seed, offset, b, h, H, Nq, Nk), 1.0 / (1.0 - p), 0.0)


# ---------------------------------------------------------------- attention (SPEC 2, 6, 11)


def attention_numpy(q, k, v, counts, scale=None, d_o=None, dropout=None, softcap=0.0,
                    alibi_slopes=None, dropout_batch=None, sinks=None):
    """SPEC 2 forward and SPEC 6 backward in f64 over the multiset counts[h, i, j], with the
    SPEC 10.1 softcap and ALiBi slopes ([H] or [B, H]) when given.
    Returns O [B, Nq, H, D], LSE [B, H, Nq] and, with d_o, dQ, dK, dV. A row with no key gets
    O = 0 and LSE = -inf; GQA: query head h reads kv head h // (H // Hkv).
    dropout = (p, seed, offset): SPEC 11, the pair's whole probability P_ij (all its
    occurrences) times M_ij in O, and SPEC 11.3's backward; LSE unchanged. dropout_batch, when
    given, is the batch word of the draw (a packed sequence's index, SPEC 10.2) for B == 1.
    sinks ([H], SPEC 10.3): one more term exp(sinks[h]) in every row's sum, with no value; with
    d_o the result gains d_sinks [H] = -sum_{b, i} exp(sinks[h] - LSE_i) <dO_i, O_i> over the
    rows whose LSE is not -inf."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Nq, H, D = q.shape
    Hkv, Nk = k.shape[2], k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    slopes = None
    if alibi_slopes is not None and len(np.ravel(alibi_slopes)) > 0:
        slopes = np.broadcast_to(np.asarray(alibi_slopes, dtype=np.float64).reshape(-1, H), (B, H))
    distance = np.abs(np.arange(Nq)[:, None] + (Nk - Nq) - np.arange(Nk)[None, :])
    o = np.zeros_like(q)
    lse = np.full((B, H, Nq), -np.inf)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    sink = np.full(H, -np.inf) if sinks is None else np.asarray(sinks, dtype=np.float64)
    d_sinks = np.zeros(H)
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            c = counts[h]
            raw = scale * q[b, :, h] @ k[b, :, hk].T
            s = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
            if slopes is not None:
                s = s - slopes[b, h] * distance
            smax = np.where(c > 0, s, -np.inf).max(axis=1, keepdims=True)
            smax = np.maximum(smax, sink[h])                 # the sink is in the row's maximum
            smax = np.where(np.isfinite(smax), smax, 0.0)
            with np.errstate(over="ignore", invalid="ignore"):
                total = np.where(c > 0, c * np.exp(s - smax), 0.0).sum(axis=1)
                total = total + np.exp(sink[h] - smax[:, 0])
            rows = total > 0
            lse[b, h, rows] = np.log(total[rows]) + smax[rows, 0]
            p = np.zeros_like(s)
            p[rows] = np.where(c[rows] > 0, c[rows] * np.exp(s[rows] - lse[b, h, rows][:, None]), 0.0)
            m = np.ones_like(p)
            if dropout is not None and dropout[0] > 0:
                word = b if dropout_batch is None else dropout_batch
                m = dropout_factors(dropout[0], dropout[1], dropout[2], word, h, H, Nq, k.shape[1])
            o[b, :, h] = (p * m) @ v[b, :, hk]
            if d_o is not None:
                g = np.asarray(d_o[b, :, h], dtype=np.float64)
                dv[b, :, hk] += (p * m).T @ g
                d_i = (g * o[b, :, h]).sum(axis=1)
                d_sinks[h] -= (np.exp(sink[h] - lse[b, h, rows]) * d_i[rows]).sum()
                ds = p * (m * (g @ v[b, :, hk].T) - d_i[:, None])
                if softcap > 0:
                    ds = ds * (1 - np.tanh(raw / softcap) ** 2)
                dq[b, :, h] = scale * ds @ k[b, :, hk]
                dk[b, :, hk] += scale * ds.T @ q[b, :, h]
    if d_o is None:
        return o, lse
    return (o, lse, dq, dk, dv) if sinks is None else (o, lse, dq, dk, dv, d_sinks)


def _counts_of(q, k, config):
    Nq, H = q.shape[1], q.shape[2]
    return key_counts(Nq, k.shape[1], H, **config)


def forward(q, k, v, scale=None, dropout=None, softcap=0.0, alibi_slopes=None, sinks=None,
            **config):
    """O [B, Nq, H, D] and LSE [B, H, Nq] in f64. config: allowed_keys' keywords; dropout:
    (p, seed, offset) or None; sinks: [H] or None."""
    return attention_numpy(q, k, v, _counts_of(q, k, config), scale=scale, dropout=dropout,
                           softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)


def backward(q, k, v, d_o, scale=None, dropout=None, softcap=0.0, alibi_slopes=None,
             sinks=None, **config):
    """dQ, dK, dV (and d_sinks with sinks) in f64 by SPEC 6 (SPEC 11.3 with dropout, 10.3 with
    sinks), from a fresh forward of the same inputs."""
    return attention_numpy(q, k, v, _counts_of(q, k, config), scale=scale, d_o=d_o,
                           dropout=dropout, softcap=softcap, alibi_slopes=alibi_slopes,
                           sinks=sinks)[2:]


# ---------------------------------------------------------------- packed batches (SPEC 10.2)


def varlen_mask_counts(i0, nq, k0, nk, H, Nq_total, Nk_total, mask, causal, window):
    """counts[h, i', j'] of one packed sequence (rows [i0, i0 + nq), keys [k0, k0 + nk)) under a
    block-sparse mask over the packed tensor: the mask's keys of packed row i0 + i' that lie in
    the sequence, then causal (j' <= i' + d) and the window in the sequence's positions."""
    counts = np.zeros((H, nq, nk), dtype=np.int64)
    d = nk - nq
    for h in range(H):
        for li in range(nq):
            keys = _kind_keys(i0 + li, h, Nq_total, Nk_total, H, None, None, "mod", False, mask)
            for j in keys:
                lj = j - k0
                if not 0 <= lj < nk or (causal and lj > li + d):
                    continue
                if window is not None:
                    left, right = window
                    if (left >= 0 and lj < li + d - left) or (right >= 0 and lj > li + d + right):
                        continue
                counts[h, li, lj] += 1
    return counts


def varlen_attention(q, k, v, cu_q, cu_k, scale=None, d_o=None, dropout=None, softcap=0.0,
                     alibi_slopes=None, sinks=None, **config):
    """SPEC 10.2: packed q [1, total_q, H, D], k, v [1, total_k, Hkv, D] and offsets cu_q, cu_k
    (n + 1 each). Each sequence b is run alone: rows [cu_q[b], cu_q[b+1]) against keys
    [cu_k[b], cu_k[b+1]), with config (allowed_keys' keywords) in its own positions, ALiBi slopes
    [H] or [n, H] (row b), dropout's batch word b. A sequence with no key leaves its rows at
    O = 0, LSE = -inf (LSE = sinks[h] with sinks, SPEC 10.3). Returns what attention_numpy
    returns for the packed tensors; d_sinks sums over the sequences."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    _, Nq, H, _ = q.shape
    Nk = k.shape[1]
    n = len(cu_q) - 1
    slopes = None
    if alibi_slopes is not None and len(np.ravel(alibi_slopes)) > 0:
        slopes = np.broadcast_to(np.asarray(alibi_slopes, dtype=np.float64).reshape(-1, H), (n, H))
    o = np.zeros_like(q)
    lse = np.full((1, H, Nq), -np.inf)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    d_sinks = np.zeros(H)
    if sinks is not None:   # a row with no key: O = 0, LSE = its head's sink
        lse[:] = np.asarray(sinks, dtype=np.float64)[None, :, None]
    for b in range(n):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue                     # no row, or rows with no key: O = 0, LSE as above
        nq, nk = q1 - q0, k1 - k0
        if config.get("mask") is not None:
            counts = varlen_mask_counts(q0, nq, k0, nk, H, Nq, Nk, config["mask"],
                                        config.get("causal", False), config.get("window"))
        else:
            counts = key_counts(nq, nk, H, **config)
        out = attention_numpy(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], counts, scale=scale,
                              d_o=None if d_o is None else np.asarray(d_o)[:, q0:q1],
                              dropout=dropout, softcap=softcap,
                              alibi_slopes=None if slopes is None else slopes[b],
                              dropout_batch=b, sinks=sinks)
        o[:, q0:q1], lse[:, :, q0:q1] = out[0], out[1]
        if d_o is not None:
            dq[:, q0:q1], dk[:, k0:k1], dv[:, k0:k1] = out[2], out[3], out[4]
            if sinks is not None:
                d_sinks += out[5]
    if d_o is None:
        return o, lse
    return (o, lse, dq, dk, dv) if sinks is None else (o, lse, dq, dk, dv, d_sinks)


# ---------------------------------------------------------------- comparison (SPEC 8)


def within(x, ref, atol, rtol):
    """SPEC 8: |x - ref| <= atol + rtol |ref| elementwise; equal infinities pass."""
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    same_inf = np.isinf(ref) & (x == ref)
    with np.errstate(invalid="ignore"):
        ok = np.abs(x - ref) <= atol + rtol * np.abs(ref)
    return bool(np.all(ok | same_inf))


def assert_close(got, want, atol, rtol):
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert within(got, want, atol, rtol), \
        f"max abs err {np.nanmax(np.abs(np.asarray(got, dtype=np.float64) - want))}"


SPEC8_F32 = dict(atol=1e-5, rtol=1e-4)  # SPEC 8: an f32 backend (cpu) against the f64 reference
F32_TOL = dict(atol=1e-6, rtol=1e-5)  # ref computes in f64; only the f32 output rounding differs
