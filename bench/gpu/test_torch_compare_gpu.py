"""The CPU-testable parts of torch_compare_gpu.py: argument parsing, FlashAttention's shapes, the
FLOP formula, the LSE merge of per-branch results (numpy, against one softmax over the union)
and the summary table. No torch needed."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare_gpu as tc  # noqa: E402


def test_parse_args_defaults_and_quick():
    a = tc.parse_args([])
    assert a.seqlens == [1024, 4096, 16384] and a.dilated_n == [32768, 131072]
    assert a.densities == [0.1, 0.5] and a.iters == 10
    q = tc.parse_args(["--quick"])
    assert q.seqlens == [4096] and q.dilated_n == [32768] and q.iters == 3


def test_parse_args_refuses_a_seqlen_that_does_not_divide_16k():
    with pytest.raises(SystemExit):
        tc.parse_args(["--seqlens", "3000"])


def test_fa_shape_is_16k_tokens_and_2048_wide():
    assert tc.fa_shape(1024, 64) == (16, 1024, 32, 64)
    assert tc.fa_shape(16384, 128) == (1, 16384, 16, 128)


def test_flops_formula():
    pairs = tc.dense_pairs(2, 3, 5, 5, causal=False)
    assert pairs == 150
    assert tc.dense_pairs(2, 3, 5, 5, causal=True) == 75
    assert tc.flops(pairs, 64, "forward") == 4 * 64 * 150
    assert tc.flops(pairs, 64, "backward") == 2.5 * 4 * 64 * 150
    assert tc.tflops(1e12 / 256, 64, "forward", 1000.0) == pytest.approx(1.0)


def test_dilated_pairs_counts_selected_rows_squared():
    # N = 10, one branch s = 4, r = 2: segments of 4, 4, 2 rows; offset 0 takes 2, 2, 1 rows,
    # offset 1 takes 2, 2, 1 rows. Two heads (offsets 0 and 1): 2 * (4 + 4 + 1).
    assert tc.dilated_pairs(1, 2, 10, [4], [2]) == 18
    # r = 1: plain segments: 16 + 16 + 4 per head.
    assert tc.dilated_pairs(3, 1, 10, [4], [1]) == 3 * 36
    # The seeds' configuration at 32k: branch r = 1 gives 16 * 32768 * 2048 alone.
    assert tc.dilated_pairs(1, 16, 32768, tc.SEGMENTS, tc.DILATIONS) > 16 * 32768 * 2048


def test_merge_lse_equals_one_softmax_over_the_union():
    rng = np.random.default_rng(0)
    n, D = 6, 4
    scores = [rng.normal(size=(n, 5)), rng.normal(size=(n, 3))]
    values = [rng.normal(size=(5, D)), rng.normal(size=(3, D))]
    outs, lses = [], []
    for s, v in zip(scores, values):
        lse = np.log(np.exp(s).sum(axis=1))
        outs.append(np.exp(s - lse[:, None]) @ v)
        lses.append(lse)
    o, lse = tc.merge_lse(outs, lses, np)
    s_all = np.concatenate(scores, axis=1)
    v_all = np.concatenate(values, axis=0)
    want_lse = np.log(np.exp(s_all).sum(axis=1))
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12)
    np.testing.assert_allclose(o, np.exp(s_all - want_lse[:, None]) @ v_all, rtol=1e-12)


def test_merge_lse_row_no_branch_reaches_is_empty():
    outs = [np.ones((2, 3)), np.ones((2, 3))]
    lses = [np.array([-np.inf, 0.0]), np.array([-np.inf, -np.inf])]
    o, lse = tc.merge_lse(outs, lses, np)
    assert np.all(o[0] == 0) and lse[0] == -np.inf
    np.testing.assert_allclose(o[1], 1.0)
    assert lse[1] == 0.0


def test_summary_ratio_is_torch_best_over_dilattn():
    rows = [{"label": "dense D=64", "direction": "forward",
             "dilattn": {"status": "ok", "ms": 2.0, "tflops": 100.0},
             "torch": {"sdpa_flash": {"status": "ok", "ms": 1.0},
                       "sdpa_cudnn": {"status": "ok", "ms": 0.8},
                       "sdpa_efficient": {"status": "error", "ms": float("nan")}}}]
    assert tc.best_torch(rows[0]) == ("sdpa_cudnn", 0.8)
    lines = tc.summary_lines(rows, "forward")
    assert len(lines) == 2 and "sdpa_cudnn" in lines[1]
    assert lines[1].split()[-1] == "0.40"
    assert len(tc.summary_lines(rows, "backward")) == 1  # the header: no backward rows


def test_random_block_mask_keeps_diagonal_and_density():
    m = tc.random_block_mask(20, 0.1, seed=1)
    assert all(i in r for i, r in enumerate(m))
    assert all(len(r) == 2 for r in m)
    assert m == tc.random_block_mask(20, 0.1, seed=1)


def test_no_torch_means_no_gpu_message(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert tc.main(["--json", os.devnull]) == 0
    assert "no GPU: nothing run" in capsys.readouterr().out
