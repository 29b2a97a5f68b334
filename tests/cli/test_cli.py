"""test_cli.py - the `dilattn` command line (tools/), run as a user would run it.

Checks, each test named for its property:
  * forward/backward outputs (O, LSE, dQ, dK, dV) against `attention_numpy`, a literal numpy
    transcription of SPEC 2 (dense, causal bottom-right), 3 (dilated, three head modes, multiset
    union of branches), 4 (block-sparse) and 6 (backward), in f64;
  * .npy and .npz I/O against numpy's own reader and writer (format versions 1, 2, 3);
  * `compare` exit codes (0 within tolerance, 1 outside or NaN mismatch, 2 shape mismatch);
  * every malformed input exits 2 with one line on stderr naming the file or flag, and writes
    no output file (nor any temporary), leaving an existing output untouched.
Run by meson (`meson test -C build cli`) with DILATTN_CLI set to the executable.
The ref backend is exact but slow, so every shape here is tiny.
"""
import os
import subprocess
import zipfile

import numpy as np
import pytest

CLI = os.environ.get("DILATTN_CLI", "")

# ---------------------------------------------------------------- SPEC 2-4 and 6 in numpy


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


# ---------------------------------------------------------------- running the tool


def run(*args, expect=None):
    if not CLI:
        pytest.fail("DILATTN_CLI is not set (run through meson test)")
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    if expect is not None:
        assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def make_inputs(tmp, B=1, Nq=12, Nk=None, H=2, Hkv=None, D=4, dtype="<f4", seed=0):
    Nk = Nq if Nk is None else Nk
    Hkv = H if Hkv is None else Hkv
    rng = np.random.default_rng(seed)
    arrs = {"q": rng.standard_normal((B, Nq, H, D)), "k": rng.standard_normal((B, Nk, Hkv, D)),
            "v": rng.standard_normal((B, Nk, Hkv, D)), "do": rng.standard_normal((B, Nq, H, D))}
    paths = {}
    for name, a in arrs.items():
        arrs[name] = a.astype(dtype)
        paths[name] = tmp / f"{name}.npy"
        np.save(paths[name], arrs[name])
    return arrs, paths


def qkv_flags(paths):
    return ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"]]


def forward(tmp, paths, *flags):
    run("forward", *qkv_flags(paths), "--out", tmp / "o.npy", "--lse", tmp / "lse.npy",
        "--backend", "ref", *flags, expect=0)
    return np.load(tmp / "o.npy"), np.load(tmp / "lse.npy")


def backward(tmp, paths, *flags):
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp / "dq.npy",
        "--dk", tmp / "dk.npy", "--dv", tmp / "dv.npy", "--backend", "ref", *flags, expect=0)
    return [np.load(tmp / f"{n}.npy") for n in ("dq", "dk", "dv")]


def assert_close(got, want, atol, rtol):
    assert got.shape == want.shape
    ok = np.isclose(got.astype(np.float64), want, atol=atol, rtol=rtol)
    both_neg_inf = np.isneginf(got) & np.isneginf(want)
    assert np.all(ok | both_neg_inf), f"max abs err {np.nanmax(np.abs(got - want))}"


F32_TOL = dict(atol=1e-6, rtol=1e-5)  # ref computes in f64; only the f32 output rounding differs


# ---------------------------------------------------------------- forward and backward values

CASES = {
    "dense": dict(shape={}, flags=[], counts=lambda s: dense_counts(s["Nq"], s["Nk"], s["H"], False)),
    "dense_causal_nq_ne_nk": dict(shape=dict(Nq=6, Nk=10), flags=["--causal"],
                                  counts=lambda s: dense_counts(6, 10, s["H"], True)),
    "gqa_scale": dict(shape=dict(H=4, Hkv=2), flags=["--scale", "0.3"],
                      counts=lambda s: dense_counts(12, 12, 4, False), scale=0.3),
    "dilated_mod": dict(shape=dict(H=3), flags=["--segments", "4,12", "--dilations", "2,3",
                                                "--heads-mode", "mod"],
                        counts=lambda s: dilated_counts(12, 3, [(4, 2), (12, 3)], "mod", False)),
    "dilated_block_causal": dict(shape=dict(H=3), flags=["--segments", "5,12", "--dilations", "1,2",
                                                         "--heads-mode", "block", "--causal"],
                                 counts=lambda s: dilated_counts(12, 3, [(5, 1), (12, 2)], "block", True)),
    "dilated_groups": dict(shape=dict(H=3), flags=["--segments", "4,8", "--dilations", "2,4",
                                                   "--heads-mode", "groups"],
                           counts=lambda s: dilated_counts(12, 3, [(4, 2), (8, 4)], "groups", False)),
}


def case_shape(case):
    s = dict(B=1, Nq=12, Nk=None, H=2, Hkv=None, D=4)
    s.update(CASES[case]["shape"])
    s["Nk"] = s["Nq"] if s["Nk"] is None else s["Nk"]
    return s


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_numpy_spec(tmp_path, case):
    s = case_shape(case)
    arrs, paths = make_inputs(tmp_path, B=2, Nq=s["Nq"], Nk=s["Nk"], H=s["H"], Hkv=s["Hkv"], D=s["D"])
    counts = CASES[case]["counts"](s)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts, CASES[case].get("scale"),
                           d_o=arrs["do"])
    o, lse = forward(tmp_path, paths, *CASES[case]["flags"])
    assert o.dtype == np.float32 and lse.dtype == np.float64  # ref writes its f64 LSE
    assert lse.shape == (2, s["H"], s["Nq"])
    assert_close(o, want[0], **F32_TOL)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)
    # Backward twice: recomputing O and LSE itself, and from the forward's files.
    for extra in ([], ["--o", tmp_path / "o.npy", "--lse", tmp_path / "lse.npy"]):
        dq, dk, dv = backward(tmp_path, paths, *CASES[case]["flags"], *extra)
        assert dq.dtype == dk.dtype == dv.dtype == np.float32
        for got, ref in zip((dq, dk, dv), want[2:]):
            assert_close(got, ref, atol=1e-5, rtol=1e-4)


def test_backward_uses_the_given_lse(tmp_path):
    # LSE + 1 scales every P_ij by 1/e (SPEC 6), so dV from that file is dV / e: the file is read.
    arrs, paths = make_inputs(tmp_path)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], dense_counts(12, 12, 2, False),
                           d_o=arrs["do"])
    forward(tmp_path, paths)
    np.save(tmp_path / "lse1.npy", np.load(tmp_path / "lse.npy") + 1.0)
    _, _, dv = backward(tmp_path, paths, "--o", tmp_path / "o.npy", "--lse", tmp_path / "lse1.npy")
    assert_close(dv, want[4] / np.e, atol=1e-5, rtol=1e-4)


def test_rows_no_branch_selects_get_zero_and_neg_inf(tmp_path):
    # One branch (12, 3), mod mode: head 0 selects rows 0, 3, 6, 9 only (SPEC 3).
    arrs, paths = make_inputs(tmp_path, H=1)
    o, lse = forward(tmp_path, paths, "--segments", "12", "--dilations", "3")
    unselected = [i for i in range(12) if i % 3 != 0]
    assert np.all(o[0, unselected] == 0) and np.all(np.isneginf(lse[0, 0, unselected]))
    assert np.all(np.isfinite(lse[0, 0, ::3]))


def test_f16_inputs_give_f16_output(tmp_path):
    arrs, paths = make_inputs(tmp_path, H=2, Hkv=1, dtype="<f2")
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], dense_counts(12, 12, 2, True), d_o=arrs["do"])
    o, lse = forward(tmp_path, paths, "--causal")
    assert o.dtype == np.float16
    assert_close(o, want[0], atol=2e-3, rtol=2e-3)  # SPEC 8 f16
    assert_close(lse, want[1], atol=1e-9, rtol=1e-9)
    dq, dk, dv = backward(tmp_path, paths, "--causal")
    assert dq.dtype == np.float16
    for got, ref in zip((dq, dk, dv), want[2:]):
        assert_close(got, ref, atol=2e-3, rtol=2e-3)


def test_f64_inputs_give_f64_output(tmp_path):
    arrs, paths = make_inputs(tmp_path, dtype="<f8")
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], dense_counts(12, 12, 2, False))
    o, _ = forward(tmp_path, paths)
    assert o.dtype == np.float64
    assert_close(o, want[0], atol=1e-12, rtol=1e-12)


def write_bsr(path, row_ptr, col_idx, head_ptr=None, dtype=np.int64):
    arrays = dict(row_ptr=np.asarray(row_ptr, dtype), col_idx=np.asarray(col_idx, dtype))
    if head_ptr is not None:
        arrays["head_ptr"] = np.asarray(head_ptr, dtype)
    np.savez(path, **arrays)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_block_sparse_mask_matches_numpy(tmp_path, index_dtype):
    # Nq = 10, Nk = 12, bq = 4, bk = 3: I = 3 row blocks, J = 4 key blocks; row block 1 is empty.
    arrs, paths = make_inputs(tmp_path, Nq=10, Nk=12, H=2)
    row_ptr, col_idx = [0, 2, 2, 5], [0, 3, 0, 1, 2]
    write_bsr(tmp_path / "m.npz", row_ptr, col_idx, dtype=index_dtype)
    counts = bsr_counts(10, 12, 2, 4, 3, row_ptr, col_idx, None, False)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts)
    o, lse = forward(tmp_path, paths, "--mask", tmp_path / "m.npz", "--block-size", "4",
                     "--block-size-k", "3")
    assert_close(o, want[0], **F32_TOL)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)
    assert np.all(np.isneginf(lse[:, :, 4:8]))  # the empty row block


def test_per_head_block_sparse_mask_matches_numpy(tmp_path):
    arrs, paths = make_inputs(tmp_path, Nq=8, H=2)
    # Blocks of 4: I = J = 2. Head 0: diagonal; head 1: everything, causal on top.
    row_ptr, col_idx, head_ptr = [0, 1, 2, 0, 2, 4], [0, 1, 0, 1, 0, 1], [0, 2, 6]
    write_bsr(tmp_path / "m.npz", row_ptr, col_idx, head_ptr)
    counts = bsr_counts(8, 8, 2, 4, 4, row_ptr, col_idx, head_ptr, True)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts, d_o=arrs["do"])
    flags = ["--mask", tmp_path / "m.npz", "--block-size", "4", "--causal"]
    o, lse = forward(tmp_path, paths, *flags)
    assert_close(o, want[0], **F32_TOL)
    dq, dk, dv = backward(tmp_path, paths, *flags)
    for got, ref in zip((dq, dk, dv), want[2:]):
        assert_close(got, ref, atol=1e-5, rtol=1e-4)


def available_backends():
    info = run("info", expect=0).stdout
    line = [l for l in info.splitlines() if l.startswith("backends available:")][0]
    return {name: state == "yes" for name, state in
            (part.strip().split(": ") for part in line.split(":", 1)[1].split(","))}


@pytest.mark.parametrize("backend", ["cpu", "emu", "cuda"])
def test_fast_backend_writes_f32_lse_or_exits_3(tmp_path, backend):
    """A built backend matches SPEC 8's f32 tolerances with an <f4 LSE; one not built (or no GPU)
    exits 3 with the library's message and no output."""
    arrs, paths = make_inputs(tmp_path, H=4, Hkv=2, D=8)
    out, lse_path = tmp_path / "o.npy", tmp_path / "lse.npy"
    p = run("forward", *qkv_flags(paths), "--out", out, "--lse", lse_path, "--backend", backend,
            "--causal")
    if available_backends()[backend]:
        assert p.returncode == 0, p.stderr
        want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], dense_counts(12, 12, 4, True))
        lse = np.load(lse_path)
        assert lse.dtype == np.float32
        assert_close(np.load(out), want[0], atol=1e-5, rtol=1e-4)
        assert_close(lse, want[1], atol=1e-4, rtol=0)
    else:
        assert p.returncode == 3, (p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "NOT_BUILT" in p.stderr
        assert not out.exists() and not lse_path.exists()


# ---------------------------------------------------------------- .npy / .npz I/O


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_reads_every_npy_format_version(tmp_path, version):
    arrs, paths = make_inputs(tmp_path)
    o_v1, _ = forward(tmp_path, paths)
    for name in ("q", "k", "v"):
        with open(paths[name], "wb") as f:
            np.lib.format.write_array(f, arrs[name], version=version)
    o_vn, _ = forward(tmp_path, paths)
    assert np.array_equal(o_v1, o_vn)
    with open(tmp_path / "x.npy", "wb") as f:
        np.lib.format.write_array(f, arrs["q"], version=version)
    assert run("compare", tmp_path / "x.npy", paths["q"], expect=0).stdout.startswith("max_abs_err=0 ")


def test_written_npy_reads_back_with_numpy_bit_exact(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    o, lse = forward(tmp_path, paths)
    # np.load parses the header strictly; check the payload is the exact array we computed.
    raw = open(tmp_path / "o.npy", "rb").read()
    assert raw[:8] == b"\x93NUMPY\x01\x00"
    header_len = int.from_bytes(raw[8:10], "little")
    assert (10 + header_len) % 64 == 0  # numpy's alignment
    assert np.array_equal(np.frombuffer(raw[10 + header_len:], "<f4").reshape(o.shape), o)
    assert o.flags.c_contiguous and o.shape == (1, 12, 2, 4)


def test_npz_round_trip_through_numpy(tmp_path):
    # Our reader takes np.savez's archive (zip64 extras, int32), our writer is read by np.load.
    row_ptr, col_idx, head_ptr = [0, 2, 3, 0, 1, 3], [0, 1, 1, 0, 0, 1], [0, 3, 6]
    write_bsr(tmp_path / "in.npz", row_ptr, col_idx, head_ptr, dtype=np.int32)
    run("mask", "--mask", tmp_path / "in.npz", "--n", 8, "--block-size", 4, "--out",
        tmp_path / "out.npz", expect=0)
    raw = (tmp_path / "out.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "out.npz") as z:
        assert z.testzip() is None  # every CRC-32 in the central directory checks
        for i in z.infolist():
            assert i.compress_type == zipfile.ZIP_STORED
            local = raw[i.header_offset:i.header_offset + 30]  # zipfile ignores the local copy
            assert local[:4] == b"PK\x03\x04"
            assert int.from_bytes(local[14:18], "little") == i.CRC == zipfile.crc32(z.read(i))
    got = np.load(tmp_path / "out.npz")
    assert sorted(got.files) == ["col_idx", "head_ptr", "row_ptr"]
    for name, want in (("row_ptr", row_ptr), ("col_idx", col_idx), ("head_ptr", head_ptr)):
        assert got[name].dtype == np.int64 and got[name].tolist() == want


# ---------------------------------------------------------------- patterns (dilattn_mask_from_pattern)


def test_mask_command_writes_local_plus_sink(tmp_path):
    # N = 16, blocks of 4: I = J = 4, diag(ib) = ib. local:1 keeps |jb - ib| <= 1, sink:1 keeps
    # jb < 1 or ib < 1 (dilattn_mask.h); the union per row, ascending.
    run("mask", "--pattern", "local:1+sink:1", "--n", 16, "--block-size", 4, "--out",
        tmp_path / "m.npz", expect=0)
    rows = [sorted({jb for jb in range(4) if abs(jb - ib) <= 1 or jb < 1 or ib < 1}) for ib in range(4)]
    got = np.load(tmp_path / "m.npz")
    assert sorted(got.files) == ["col_idx", "row_ptr"]
    assert got["row_ptr"].tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()
    assert got["col_idx"].tolist() == sum(rows, [])


def test_forward_with_pattern_equals_its_mask_file(tmp_path):
    pattern = "local:2+sink:1+strided:4+random:0.05:seed=7"
    arrs, paths = make_inputs(tmp_path, Nq=24, H=2)
    run("mask", "--pattern", pattern, "--n", 24, "--block-size", 2, "--out", tmp_path / "m.npz",
        expect=0)
    m = np.load(tmp_path / "m.npz")
    counts = bsr_counts(24, 24, 2, 2, 2, m["row_ptr"], m["col_idx"], None, True)
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], counts)
    o_mask, _ = forward(tmp_path, paths, "--mask", tmp_path / "m.npz", "--block-size", 2, "--causal")
    o_pattern, _ = forward(tmp_path, paths, "--pattern", pattern, "--block-size", 2, "--causal")
    assert np.array_equal(o_mask, o_pattern)
    assert_close(o_pattern, want[0], **F32_TOL)


def test_bad_pattern_is_named(tmp_path):
    _, paths = make_inputs(tmp_path)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--pattern", "local:1+bogus:3"),
                     "--pattern", "bogus")
    expect_bad_input(tmp_path, ["mask", "--pattern", "local:x", "--n", 16, "--out",
                                tmp_path / "m.npz"], "--pattern", "local:x")
    expect_bad_input(tmp_path, ["mask", "--n", 16, "--out", tmp_path / "m.npz"], "--pattern")


# ---------------------------------------------------------------- compare


def test_compare_exit_codes(tmp_path):
    a = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    np.save(tmp_path / "a.npy", a)
    b = a.copy()
    b[1, 2, 3] += 5e-5  # within atol 1e-5 + rtol 1e-4 * |1|
    np.save(tmp_path / "near.npy", b)
    b[0, 1, 2] += 1e-2
    np.save(tmp_path / "far.npy", b)
    c = a.copy()
    c[0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", c)
    np.save(tmp_path / "short.npy", a[:1])
    assert run("compare", tmp_path / "a.npy", tmp_path / "a.npy", expect=0).stdout.startswith(
        "max_abs_err=0 max_rel_err=0 (atol=1e-05 rtol=0.0001)")
    run("compare", tmp_path / "near.npy", tmp_path / "a.npy", expect=0)
    far = run("compare", tmp_path / "far.npy", tmp_path / "a.npy", expect=1).stdout
    assert abs(float(far.split()[0].split("=")[1]) - 1e-2) < 1e-6  # the f32 step of +1e-2
    assert "1 of 24 elements, first at [0, 1, 2]" in far
    run("compare", tmp_path / "far.npy", tmp_path / "a.npy", "--atol", "0.02", expect=0)
    run("compare", tmp_path / "nan.npy", tmp_path / "a.npy", expect=1)
    run("compare", tmp_path / "nan.npy", tmp_path / "nan.npy", expect=0)
    p = run("compare", tmp_path / "short.npy", tmp_path / "a.npy", expect=2)
    assert "short.npy" in p.stderr and "shape" in p.stderr


def test_info_names_version_and_ref_backend():
    out = run("info", expect=0).stdout
    assert out.startswith("dilattn 0.2.0\n")
    assert "ref: yes" in out and "CPU features:" in out


# ---------------------------------------------------------------- malformed input: exit 2


def expect_bad_input(tmp_path, args, *must_mention):
    """Exit 2, one stderr line mentioning each string, no new file in tmp_path."""
    before = set(os.listdir(tmp_path))
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for word in must_mention:
        assert str(word) in lines[0], (word, lines[0])
    assert set(os.listdir(tmp_path)) == before, set(os.listdir(tmp_path)) - before


def forward_args(tmp_path, paths, *extra):
    return ["forward", *qkv_flags(paths), "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy",
            "--backend", "ref", *extra]


def test_bad_magic_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["k"].write_bytes(b"PK\x03\x04 not an npy file at all")
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "magic")


def test_truncated_header_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["q"].write_bytes(paths["q"].read_bytes()[:40])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "truncated")


def test_truncated_payload_names_the_file(tmp_path):
    _, paths = make_inputs(tmp_path)
    paths["v"].write_bytes(paths["v"].read_bytes()[:-4])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "payload")


def test_int32_input_is_a_dtype_error(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.zeros((1, 12, 2, 4), "<i4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "<i4")


def test_big_endian_input_is_a_dtype_error(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.zeros((1, 12, 2, 4), ">f4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], ">f4")


def test_mixed_dtypes_name_the_odd_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["v"], arrs["v"].astype("<f8"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "<f8")


def test_fortran_order_is_rejected(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["q"], np.asfortranarray(arrs["q"]))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["q"], "fortran_order")


def test_shape_mismatches_name_the_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["v"], arrs["v"][:, :10])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"], "shape")
    np.save(paths["v"], arrs["v"])
    np.save(paths["k"], arrs["k"][..., :3])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "shape")
    np.save(paths["k"], arrs["k"][0])
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["k"], "dimensions")


def test_backward_shape_mismatches_name_the_file(tmp_path):
    arrs, paths = make_inputs(tmp_path)
    np.save(paths["do"], arrs["do"][:, :5])
    args = ["backward", *qkv_flags(paths), "--do", paths["do"], "--dq", tmp_path / "dq.npy",
            "--dk", tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy", "--backend", "ref"]
    expect_bad_input(tmp_path, args, paths["do"], "shape")
    np.save(paths["do"], arrs["do"])
    np.save(tmp_path / "lse.npy", np.zeros((1, 2, 11)))
    expect_bad_input(tmp_path, args + ["--o", paths["q"], "--lse", tmp_path / "lse.npy"],
                     tmp_path / "lse.npy", "shape")
    expect_bad_input(tmp_path, args + ["--o", paths["q"]], "--o", "--lse")


@pytest.mark.parametrize("drop", ["--q", "--k", "--v", "--out"])
def test_missing_flag_is_named(tmp_path, drop):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    i = args.index(drop)
    del args[i:i + 2]
    expect_bad_input(tmp_path, args, "missing required flag " + drop)


@pytest.mark.parametrize("extra, mention", [
    (["--frobnicate"], "unknown flag --frobnicate"),
    (["--scale", "abc"], "--scale"),
    (["--scale", "inf"], "--scale"),
    (["--threads", "0"], "--threads"),
    (["--threads", "12x"], "--threads"),
    (["--segments", "4,x", "--dilations", "1,1"], "--segments"),
    (["--segments", "4,12", "--dilations", "1"], "--dilations"),
    (["--segments", "4"], "--dilations"),
    (["--heads-mode", "mod"], "--segments"),
    (["--segments", "4", "--dilations", "1", "--heads-mode", "zigzag"], "--heads-mode"),
    (["--segments", "4", "--dilations", "5"], "dilation"),  # library status BAD_DILATION
    (["--backend", "gpu"], "--backend"),
    (["--causal=yes"], "--causal"),
    (["stray"], "stray"),
])
def test_bad_flags_are_named(tmp_path, extra, mention):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    if extra == ["--backend", "gpu"]:
        args = args[:-2]
    expect_bad_input(tmp_path, args + extra, mention)


def test_flag_without_value_is_named(tmp_path):
    _, paths = make_inputs(tmp_path)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--scale"), "--scale needs a value")


@pytest.mark.parametrize("arrays, mention", [
    (dict(row_ptr=[0, 2, 1], col_idx=[0, 1]), "row_ptr"),          # wrong length (I + 1 = 4)
    (dict(row_ptr=[0, 1, 2, 3], col_idx=[0, 1]), "col_idx"),       # row_ptr says 3 entries
    (dict(row_ptr=[0, 2, 3, 4], col_idx=[1, 0, 0, 0]), "row block 0"),  # not ascending
    (dict(row_ptr=[0, 1, 2, 3], col_idx=[0, 0, 9]), "col_idx = 9"),  # out of range
    (dict(row_ptr=[0, 1, 1, 1]), "col_idx"),                         # missing array
    (dict(row_ptr=[0.0, 1, 1, 1], col_idx=[0]), "<f8"),             # not an index dtype
    (dict(row_ptr=[0, 1, 1, 1], col_idx=[0], extra=[1]), "extra"),   # unknown member
])
def test_bad_mask_arrays_are_named(tmp_path, arrays, mention):
    _, paths = make_inputs(tmp_path)
    np.savez(tmp_path / "m.npz", **{k: np.asarray(v) for k, v in arrays.items()})
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", mention)


def test_compressed_npz_suggests_savez(tmp_path):
    _, paths = make_inputs(tmp_path)
    np.savez_compressed(tmp_path / "m.npz", row_ptr=np.array([0, 1, 2, 3]), col_idx=np.array([0, 1, 2]))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", "np.savez")


def test_corrupt_npz_fails_its_crc(tmp_path):
    _, paths = make_inputs(tmp_path)
    write_bsr(tmp_path / "m.npz", [0, 1, 2, 3], [0, 1, 2])
    raw = bytearray((tmp_path / "m.npz").read_bytes())
    raw[raw.index(b"\x93NUMPY") + 100] ^= 0xFF  # flip a byte of the first member's payload
    (tmp_path / "m.npz").write_bytes(bytes(raw))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--mask", tmp_path / "m.npz",
                                            "--block-size", "4"), "m.npz", "CRC")


def test_error_leaves_existing_output_untouched(tmp_path):
    _, paths = make_inputs(tmp_path)
    (tmp_path / "o.npy").write_bytes(b"precious")
    np.save(paths["v"], np.zeros((1, 5, 2, 4), "<f4"))
    expect_bad_input(tmp_path, forward_args(tmp_path, paths), paths["v"])
    assert (tmp_path / "o.npy").read_bytes() == b"precious"


def test_unwritable_output_directory_fails_before_work(tmp_path):
    _, paths = make_inputs(tmp_path)
    args = forward_args(tmp_path, paths)
    args[args.index("--out") + 1] = tmp_path / "no" / "such" / "dir" / "o.npy"
    expect_bad_input(tmp_path, args, "--out")
