"""test_cli_varlen.py - the command line's SPEC 10.2 flags: --cu-seqlens-q and --cu-seqlens-k
(a comma list or a 1-D .npy of <i4/<i8 offsets) give spec_numpy's packed forward and backward on
the ref backend, with causal, GQA, Nq != Nk per sequence, an empty sequence, dilated and
block-sparse kinds and the SPEC 10.1 variants, on ref and on cpu; AUTO runs them on cpu; bad
values exit 2 naming the flag (or the library's message naming the index), before any output is
written.
Tolerances: f32 inputs, f64 reference: O within F32_TOL (only the output rounding differs), LSE
(written <f8) 1e-12, gradients SPEC 8 f32; cpu (f32 throughout): SPEC 8 f32, LSE atol 1e-4."""
import numpy as np
import pytest

from cli_support import (available_backends, backward, cpu_within_spec8, expect_bad_input, forward,
                         forward_args, make_inputs, run)
from spec_numpy import F32_TOL, assert_close, varlen_attention

# name: (input shape, flags, spec_numpy options). "CU_Q_NPY" is cu_q saved as <i4.
CASES = {
    "dense_causal_gqa": (dict(Nq=11, Nk=13, H=2, Hkv=1), [0, 4, 4, 11], [0, 6, 9, 13],
                         ["--causal"], dict(causal=True)),
    "dense_npy_offsets": (dict(Nq=11, Nk=13), "CU_NPY", [0, 6, 9, 13], [], dict()),
    "dilated_with_variants": (dict(Nq=14, Nk=14), [0, 5, 14], [0, 5, 14],
                              ["--segments", "4,8", "--dilations", "1,2", "--window", "2,1",
                               "--softcap", "0.5", "--alibi-slopes", "0.3,0.1,0.2,0.4"],
                              dict(segments=[4, 8], dilations=[1, 2], window=(2, 1),
                                   softcap=0.5, alibi_slopes=[[0.3, 0.1], [0.2, 0.4]])),
    "block_sparse_causal": (dict(Nq=12, Nk=12), [0, 7, 12], [0, 7, 12],
                            ["--pattern", "local:0+sink:1", "--block-size", "4", "--causal"],
                            dict(mask=(4, 4, [[[0, 1, 2], [0, 1], [0, 2]]]), causal=True)),
}


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_numpy_spec(tmp_path, case, backend):
    if backend == "cpu" and not available_backends().get("cpu"):
        pytest.skip("backend cpu is not available in this build")
    shape, cu_q, cu_k, flags, spec = CASES[case]
    if cu_q == "CU_NPY":
        cu_q = [0, 3, 5, 11]
        np.save(tmp_path / "cu_q.npy", np.array(cu_q, dtype="<i4"))
        np.save(tmp_path / "cu_k.npy", np.array(cu_k, dtype="<i8"))
        offsets = ["--cu-seqlens-q", tmp_path / "cu_q.npy", "--cu-seqlens-k", tmp_path / "cu_k.npy"]
    else:
        offsets = ["--cu-seqlens-q", ",".join(map(str, cu_q)),
                   "--cu-seqlens-k", ",".join(map(str, cu_k))]
    arrs, paths = make_inputs(tmp_path, B=1, **shape)
    o_want, lse_want, *grads_want = varlen_attention(arrs["q"], arrs["k"], arrs["v"], cu_q, cu_k,
                                                     d_o=arrs["do"], **spec)
    o, lse = forward(tmp_path, paths, *offsets, *flags, backend=backend)
    if backend == "cpu":
        grads = backward(tmp_path, paths, *offsets, *flags, backend="cpu")
        cpu_within_spec8(o, lse, grads, o_want, lse_want, grads_want)
        return
    assert_close(o, o_want, **F32_TOL)
    assert_close(lse, lse_want, atol=1e-12, rtol=1e-12)
    grads = backward(tmp_path, paths, *offsets, *flags)
    for got, want in zip(grads, grads_want):
        assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_auto_runs_packed_batches_on_cpu(tmp_path):
    # cpu writes an f32 LSE (<f4), ref an f64 one: AUTO resolved the plan to cpu.
    _, paths = make_inputs(tmp_path, B=1)
    args = forward_args(tmp_path, paths, "--cu-seqlens-q", "0,5,12", "--cu-seqlens-k", "0,5,12")
    args[args.index("--backend") + 1] = "auto"
    run(*args, expect=0)
    cpu = available_backends().get("cpu")
    assert np.load(tmp_path / "l.npy").dtype == (np.float32 if cpu else np.float64)


@pytest.mark.parametrize("flags,mentions", [
    (["--cu-seqlens-q", "0,5,12"], ["--cu-seqlens-q and --cu-seqlens-k go together"]),
    (["--cu-seqlens-q", "0,x,12", "--cu-seqlens-k", "0,5,12"], ["--cu-seqlens-q", "'x'"]),
    (["--cu-seqlens-q", "0", "--cu-seqlens-k", "0"], ["--cu-seqlens-q", "1 offsets"]),
    (["--cu-seqlens-q", "0,5,12", "--cu-seqlens-k", "0,12"], ["--cu-seqlens-k", "2 offsets"]),
    (["--cu-seqlens-q", "0,7,5,12", "--cu-seqlens-k", "0,5,6,12"],
     ["cu_seqlens_q[2] = 5 is below cu_seqlens_q[1] = 7"]),
    (["--cu-seqlens-q", "0,5,11", "--cu-seqlens-k", "0,5,12"],
     ["cu_seqlens_q[2] = 11", "seqlen_q = 12"]),
    (["--cu-seqlens-q", "2,5,12", "--cu-seqlens-k", "0,5,12"], ["cu_seqlens_q[0] = 2"]),
])
def test_bad_values_exit_2(tmp_path, flags, mentions):
    _, paths = make_inputs(tmp_path, B=1)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, *flags), *mentions)


def test_batch_above_one_exits_2(tmp_path):
    _, paths = make_inputs(tmp_path, B=2)
    expect_bad_input(tmp_path, forward_args(tmp_path, paths, "--cu-seqlens-q", "0,5,12",
                                            "--cu-seqlens-k", "0,5,12"),
                     "batch = 2", "needs batch = 1")
