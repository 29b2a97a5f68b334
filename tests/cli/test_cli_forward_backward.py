"""test_cli_forward_backward.py - the `dilattn` command line: forward/backward outputs (O, LSE, dQ,
dK, dV) against spec_numpy for dense, causal, GQA, dilated (three head modes), block-sparse
(shared and per-head masks), f16/f64, the fast backends (or exit 3 when not built), and `info`.
Run by meson (`meson test -C build --suite cli`) with DILATTN_CLI set to the executable.
"""
import numpy as np
import pytest

from cli_support import available_backends, backward, forward, make_inputs, qkv_flags, run, write_bsr
from spec_numpy import (F32_TOL, assert_close, attention_numpy, bsr_counts, dense_counts,
                        dilated_counts)


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


@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_f64_inputs_computed_in_f64_on_the_fast_backend(tmp_path, backend):
    # SPEC 12: the cpu backend (what auto picks for f64) computes f64 inputs in f64: O, the <f8
    # LSE and the gradients within 1e-12 of numpy's f64 (an f32 computation is ~1e-7 away).
    arrs, paths = make_inputs(tmp_path, H=4, Hkv=2, dtype="<f8")
    want = attention_numpy(arrs["q"], arrs["k"], arrs["v"], dense_counts(12, 12, 4, True),
                           d_o=arrs["do"])
    flags = ["--backend", backend, "--causal"]
    out, lse_path = tmp_path / "o.npy", tmp_path / "lse.npy"
    run("forward", *qkv_flags(paths), "--out", out, "--lse", lse_path, *flags, expect=0)
    o, lse = np.load(out), np.load(lse_path)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    assert_close(o, want[0], atol=1e-12, rtol=1e-12)
    assert_close(lse, want[1], atol=1e-12, rtol=1e-12)
    grads = [tmp_path / f"{n}.npy" for n in ("dq", "dk", "dv")]
    run("backward", *qkv_flags(paths), "--do", paths["do"], "--dq", grads[0], "--dk", grads[1],
        "--dv", grads[2], *flags, expect=0)
    for path, ref in zip(grads, want[2:]):
        got = np.load(path)
        assert got.dtype == np.float64
        assert_close(got, ref, atol=1e-12, rtol=1e-12)


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


def test_info_names_version_and_ref_backend():
    out = run("info", expect=0).stdout
    assert out.startswith("dilattn 0.2.0\n")
    assert "ref: yes" in out and "CPU features:" in out
