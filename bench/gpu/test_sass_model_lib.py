"""test_sass_model_lib.py - bench/gpu/sass_model.py on the library this build made with nvcc
(DILATTN_CUDA_LIB): the model must find every forward and tensor-core backward kernel's chunk
loop, match its profile, and count what the kernels' tiles imply. Registered by
bench/gpu/meson.build only when the CUDA kernels are built; it then fails, never skips, without
cuobjdump (sass_model.py says how to install it). Run by meson test (suite gpu_model) through
pytest; no GPU needed.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_model  # noqa: E402


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The model of the library, run once for the module's tests."""
    lib = os.environ["DILATTN_CUDA_LIB"]
    out = tmp_path_factory.mktemp("model") / "model.json"
    assert sass_model.main([lib, "--json", str(out)]) == 0
    return json.loads(out.read_text())["results"]


def test_every_forward_kernel_is_profiled_and_counted(rows):
    built = {"sm_" + a.strip() for a in os.environ["DILATTN_SM_ARCHS"].split(",") if a.strip()}
    modelled = built & set(sass_model.DEVICES)
    assert modelled, "none of the built archs %s has device constants" % sorted(built)
    assert modelled <= {r["arch"] for r in rows}
    for r in rows:
        if r["arch"] not in modelled:
            continue
        assert "error" not in r, r
        assert r["chunk_loop"]["profiled"], (r["kernel"], r["arch"], r["chunk_loop"])
        br, bc, D = r["tile"]["BR"], r["tile"]["BC"], r["D"]
        elem = 4 if r["dtype"] == "f32" else 2  # forward_mma_tf32: f32; the others f16, bf16
        # Each block loads the chunk's K and V once: 2 * BC * D elements.
        assert r["global_bytes_per_chunk"] == 2 * bc * D * elem, r
        assert r["flop_per_chunk"] == 4 * br * bc * D
        assert r["per_warp_per_chunk"]["BAR"] >= 1  # forward_mma: one __syncthreads a chunk


def test_mma_hmma_count_is_the_warp_products(rows):
    mma = [r for r in rows if r["family"] == "forward_mma_kernel"]
    assert mma
    for r in mma:
        # Each warp's 16 rows: S = Q K^T (16 x 64 x D) and P V (16 x D x 64) multiply-adds per
        # chunk of 64 keys, in m16n8k16 HMMAs (16 x 8 x 16 each).
        D = r["D"]
        want = (16 * 64 * D + 16 * D * 64) // (16 * 8 * 16)
        assert r["per_warp_per_chunk"]["HMMA"] == want, r["kernel"]


def test_mma_fragment_reads_are_matched_and_conflict_free(rows):
    for r in rows:
        if r["family"] != "forward_mma_kernel":
            continue
        # Per warp per chunk: D / 4 ldmatrix x4 of K (4 pairs of key blocks x D / 16) and D / 4
        # ldmatrix x4 .trans of V (4 key steps x D / 16 pairs of dim blocks); the padded rows
        # leave neither in conflict.
        D = r["D"]
        assert [(c["per_warp"], c["ways"]) for c in r["bank_conflicts"]] == [(D // 4, 1),
                                                                              (D // 4, 1)]


def test_simt_key_reads_are_free_of_bank_conflicts(rows):
    simt = [r for r in rows if r["family"] == "forward_simt_kernel"]
    assert simt
    for r in simt:
        assert [c["ways"] for c in r["bank_conflicts"]] == [1], r["bank_conflicts"]


def test_mma_tf32_hmma_count_is_three_products_per_warp_product(rows):
    tf32 = [r for r in rows if r["family"] == "forward_mma_tf32_kernel"]
    assert tf32
    for r in tf32:
        # 3xTF32: each of S = Q K^T (16 x BC x D) and P V (16 x D x BC) three times, in m16n8k8
        # HMMAs (16 x 8 x 8 each); K and V fragment loads conflict-free at rows of D + 4 floats.
        D, bc = r["D"], r["tile"]["BC"]
        assert r["per_warp_per_chunk"]["HMMA"] == 3 * (2 * 16 * bc * D) // (16 * 8 * 8), r["kernel"]
        assert [c["ways"] for c in r["bank_conflicts"]] == [1, 1], r["bank_conflicts"]


@pytest.fixture(scope="module")
def backward_rows(tmp_path_factory):
    """The model of the library's tensor-core backward kernels, run once for the module."""
    lib = os.environ["DILATTN_CUDA_LIB"]
    out = tmp_path_factory.mktemp("model") / "backward.json"
    assert sass_model.main([lib, "--kernel", r"backward_\w*mma\w*kernel", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_every_backward_kernel_is_profiled_and_its_hmma_are_the_gemms(backward_rows):
    rows = [r for r in backward_rows["results"] if r["arch"] in sass_model.DEVICES]
    families = {r["family"] for r in rows}
    assert families == {"backward_dq_mma_kernel", "backward_dkdv_mma_kernel",
                        "backward_dq_mma_tf32_kernel", "backward_dkdv_mma_tf32_kernel"}
    for r in rows:
        assert "error" not in r, r
        assert r["chunk_loop"]["profiled"], (r["kernel"], r["arch"], r["chunk_loop"])
        assert r["general_softmax_path"]["blocks"], r["kernel"]
        # SPEC 3.4's shared pairs: the dK/dV pass's path found (and left out of the dense
        # chunk).
        if "_dkdv_" in r["family"]:
            assert r["shared_pairs_path"]["blocks"], r["kernel"]
        br, bc, D = r["tile"]["BR"], r["tile"]["BC"], r["D"]
        gemms = 3 if "_dq_" in r["family"] else 4
        assert r["flop_per_chunk"] == gemms * 2 * br * bc * D
        # Each warp's 16 rows (dQ) or keys (dK/dV) through every GEMM of the chunk: 16 x BC x D
        # multiply-adds each, m16n8k16 HMMAs (f16, bf16) or 3 m16n8k8 (3xTF32).
        per_hmma, split = (16 * 8 * 8, 3) if r["dtype"] == "f32" else (16 * 8 * 16, 1)
        assert r["per_warp_per_chunk"]["HMMA"] == split * gemms * 16 * bc * D // per_hmma, r
        # The chunk's tiles by cp.async at least (K and V, or Q and dO), plus the row or key
        # scalars and the f32 copies' peeled iteration, which count once (sass_model.py: at
        # most 27% more); a copy loop at twice its trips would give 100% more.
        elem = 4 if r["dtype"] == "f32" else 2
        tiles = 2 * bc * D * elem
        assert tiles <= r["global_bytes_per_chunk"] <= tiles * 1.3, r
        assert [c["ways"] for c in r["bank_conflicts"]] == [1, 1], r["bank_conflicts"]
    both = {(b["arch"], b["dtype"], b["D"]) for b in backward_rows["backward"]}
    assert both == {(r["arch"], r["dtype"], r["D"]) for r in rows}


def test_wgmma_rows_count_the_chunks_products_and_loads(rows):
    """forward_wgmma_kernel (sm_90a, built where sm_archs holds 90): modelled as a
    warp-specialised kernel, its chunk paths found, and what they run is the tile's work."""
    built = {a.strip() for a in os.environ["DILATTN_SM_ARCHS"].split(",")}
    ws = [r for r in rows if r["family"] == "forward_wgmma_kernel"]
    if "90" not in built:
        assert not ws
        return
    assert {(r["dtype"], r["D"]) for r in ws} == {("f16", 64), ("f16", 128), ("bf16", 64),
                                                  ("bf16", 128)}
    for r in ws:
        assert "error" not in r, r
        assert r["model"] == "warp-specialised" and r["arch"] == "sm_90a"
        assert r["chunk_loop"]["profiled"], r["chunk_loop"]
        D, bc = r["D"], r["tile"]["BC"]
        # Both consumer warpgroups' HGMMAs are the chunk's two GEMMs, and a consumer warp
        # issues D/16 lines of S = Q K^T (64x128x16) and BC/16 of P V (64xDx16).
        assert r["hgmma_flop_per_chunk"] == r["flop_per_chunk"], r
        assert r["per_warp_per_chunk"]["HMMA"] == D // 16 + bc // 16
        # The producer's path loads the chunk's K and V once: a 128-row box per 64 columns.
        assert r["tma_loads_per_chunk"] == 2 * D // 64
        assert r["global_bytes_per_chunk"] == 2 * bc * D * 2
        # The softmax's 2^x: a thread holds 64 of the 64 x 128 scores, and alpha's.
        assert r["per_warp_per_chunk"]["MUFU"] >= 64
        assert r["product_waits"], "no WARPGROUP.DEPBAR on the consumer's path"
