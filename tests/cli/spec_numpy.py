"""spec_numpy.py - SPEC 2 (dense, causal bottom-right), 3 (dilated, three head modes, multiset
union of branches), 4 (block-sparse) and 6 (backward) as literal numpy transcriptions in f64, the
reference every CLI output is checked against, and the comparison the tests use."""
import numpy as np


def dilated_counts(N, H, branches, head_mode, causal):
    """counts[h, i, j]: how many branches give query i key j (SPEC 3)."""
    m = len(branches)
    counts = np.zeros((H, N, N), dtype=np.int64)
    group_sizes = [H // m + (1 if g < H % m else 0) for g in range(m)]
    group_of = np.repeat(np.arange(m), group_sizes)
    for h in range(H):
        for b, (w, r) in enumerate(branches):
            w = min(w, N)
            if head_mode == "mod":
                o = h % r
            elif head_mode == "block":
                o = h // -(-H // r)
            else:  # groups
                if group_of[h] != b:
                    continue
                o = b % r
            for s0 in range(0, N, w):
                sel = [p for p in range(s0, min(s0 + w, N)) if (p - s0) % r == o]
                for i in sel:
                    for j in sel:
                        if not causal or j <= i:
                            counts[h, i, j] += 1
    return counts


def dense_counts(Nq, Nk, H, causal):
    c = np.ones((H, Nq, Nk), dtype=np.int64)
    if causal:
        i = np.arange(Nq)[:, None]
        j = np.arange(Nk)[None, :]
        c[:, j > i + (Nk - Nq)] = 0
    return c


def bsr_counts(Nq, Nk, H, bq, bk, row_ptr, col_idx, head_ptr, causal):
    """SPEC 4: every key of every listed block of the row block, then the causal rule."""
    c = np.zeros((H, Nq, Nk), dtype=np.int64)
    I = -(-Nq // bq)
    for h in range(H):
        mh = 0 if head_ptr is None else h
        rp = row_ptr[mh * (I + 1):(mh + 1) * (I + 1)]
        ci = col_idx if head_ptr is None else col_idx[head_ptr[mh]:head_ptr[mh + 1]]
        for ib in range(I):
            for cb in ci[rp[ib]:rp[ib + 1]]:
                c[h, ib * bq:(ib + 1) * bq, cb * bk:(cb + 1) * bk] = 1
    if causal:
        c = c * dense_counts(Nq, Nk, H, True)
    return c


def attention_numpy(q, k, v, counts, scale=None, d_o=None):
    """SPEC 2 forward and SPEC 6 backward in f64. Returns O, LSE[B,H,Nq] and, with d_o, dQ, dK, dV."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, Nq, H, D = q.shape
    Hkv = k.shape[2]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    o = np.zeros_like(q)
    lse = np.full((B, H, Nq), -np.inf)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            c = counts[h]
            s = scale * q[b, :, h] @ k[b, :, hk].T
            smax = np.where(c > 0, s, -np.inf).max(axis=1, keepdims=True)
            smax = np.where(np.isfinite(smax), smax, 0.0)
            total = (c * np.exp(s - smax)).sum(axis=1)
            rows = total > 0
            lse[b, h, rows] = np.log(total[rows]) + smax[rows, 0]
            p = np.zeros_like(s)
            p[rows] = c[rows] * np.exp(s[rows] - lse[b, h, rows][:, None])
            o[b, :, h] = p @ v[b, :, hk]
            if d_o is not None:
                g = d_o[b, :, h].astype(np.float64)
                dv[b, :, hk] += p.T @ g
                d_i = (g * o[b, :, h]).sum(axis=1)
                ds = p * (g @ v[b, :, hk].T - d_i[:, None])
                dq[b, :, h] = scale * ds @ k[b, :, hk]
                dk[b, :, hk] += scale * ds.T @ q[b, :, h]
    return (o, lse) if d_o is None else (o, lse, dq, dk, dv)


def assert_close(got, want, atol, rtol):
    assert got.shape == want.shape
    ok = np.isclose(got.astype(np.float64), want, atol=atol, rtol=rtol)
    both_neg_inf = np.isneginf(got) & np.isneginf(want)
    assert np.all(ok | both_neg_inf), f"max abs err {np.nanmax(np.abs(got - want))}"


SPEC8_F32 = dict(atol=1e-5, rtol=1e-4)  # SPEC 8: an f32 backend (cpu) against the f64 reference
F32_TOL = dict(atol=1e-6, rtol=1e-5)  # ref computes in f64; only the f32 output rounding differs
