"""test_sass_model.py - bench/gpu/sass_model.py's parser, loops and counting on hand-written
SASS listings (testdata/toy_forward.sass, testdata/toy_backward.sass), whose exact counts are
worked out below; no GPU, nvcc or cuobjdump needed. Run by meson test (suite gpu_model) through
pytest.

The listing: 0x00-0x10 prologue; the chunk loop 0x20-0x140 (LDG.E.128, STS.128, BAR, the
inner loop 0x50-0x90 of 5 instructions, HMMA.16816, BRA.DIV, SHFL, MUFU, MOV + subroutine CALL,
BAR, IADD3, ISETP, the CALL that leaves the loop, the back-edge BRA); 0x150-0x160 after the
loop; 0x170-0x180 the diverged shuffle path; 0x190-0x1a0 the subroutine; 0x1b0 the trailer.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_model  # noqa: E402
import sass_parse  # noqa: E402

TOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "toy_forward.sass")
TOY_BACKWARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                            "toy_backward.sass")


def toy_kernel():
    kernels = sass_parse.parse(open(TOY).read())
    assert len(kernels) == 1
    return kernels[0]


def test_parse_splits_kernel_arch_and_instructions():
    k = toy_kernel()
    assert k.name == "_ZN7dilattn4cuda18toy_forward_kernelI6__halfLi64EEEvv"
    assert k.arch == "sm_80"
    assert len(k.instrs) == 28
    assert [i.addr for i in k.instrs[:3]] == [0x0, 0x10, 0x20]
    bra = next(i for i in k.instrs if i.addr == 0x90)
    assert (bra.pred, bra.op, bra.branch_target()) == ("!P0", "BRA", 0x50)
    assert k.instrs[2].op == "LDG.E.128" and k.instrs[2].operands == "R4, [R2.64]"


def test_template_arguments_give_dtype_and_head_dim():
    family, dtype, ds = sass_model.kernel_variants(toy_kernel(), (64, 128))
    assert (family, dtype, ds) == ("toy_forward_kernel", "f16", [64])


def test_chunk_loop_is_the_innermost_loop_with_a_barrier():
    cfg = sass_parse.Cfg(toy_kernel().instrs)
    headers = sorted(l.header_addr for l in cfg.loops())
    assert headers == [0x20, 0x50]  # the unreachable trailer self-branch is no loop
    loop = sass_model.chunk_loop(cfg)
    assert loop.header_addr == 0x20
    assert [l.header_addr for l in loop.descendants()] == [0x50]
    addrs = sorted(i.addr for i in loop.instrs())
    # 0x20 .. 0x140: the subroutine CALL falls through, the leaving CALL ends the body, and the
    # diverged path (0x170, 0x180) is not taken by a converged warp.
    assert addrs == list(range(0x20, 0x150, 0x10))
    # The CALL at 0x130 leaves the loop (to 0x150) or falls through to the back edge.
    leave = next(b for b, blk in enumerate(cfg.blocks) if blk[-1].addr == 0x130)
    assert sorted(cfg.blocks[s][0].addr for s in cfg.succ[leave]) == [0x140, 0x150]


def test_counts_per_chunk_weight_the_inner_loop_by_its_trip_count():
    loop = sass_model.chunk_loop(sass_parse.Cfg(toy_kernel().instrs))
    counts, ldg_bytes, hmma_flop, wavefronts = sass_model.count_chunk(loop, [4])
    assert counts == {"HMMA": 1, "LDG": 1, "LDS": 4, "STS": 1, "GEN": 0, "FP32": 4, "MUFU": 1,
                      "BAR": 2, "INT": 11, "OTHER": 9}
    assert ldg_bytes == 16 * 32           # LDG.E.128: 16 bytes a lane
    assert hmma_flop == 2 * 16 * 8 * 16   # m16 n8 k16
    assert wavefronts == 4 + 4            # STS.128: 4 wavefronts; 4 x LDS.32: 1 each
    once, _, _, _ = sass_model.count_chunk(loop, None)
    assert sum(once.values()) == 19 and once["LDS"] == 1


def test_bank_conflicts_of_a_key_column():
    # lane c reads word c * pitch: pitch 64 puts all 32 lanes in one bank, an odd pitch none.
    assert sass_model.conflict_ways([c * 64 for c in range(32)], 32) == 32
    assert sass_model.conflict_ways([c * 65 for c in range(32)], 32) == 1
    assert sass_model.conflict_ways([c * 66 for c in range(32)], 32) == 2
    assert sass_model.conflict_ways([7] * 32, 32) == 1  # a broadcast
    # ldmatrix: 8 rows of 4 words at a 128-byte pitch all start in bank 0; padded by 16 bytes
    # they tile the 32 banks.
    assert sass_model.conflict_ways([r * 32 + j for r in range(8) for j in range(4)], 32) == 8
    assert sass_model.conflict_ways([r * 36 + j for r in range(8) for j in range(4)], 32) == 1


def test_simt_key_pitch_is_read_from_the_or_with_one():
    k = toy_kernel()
    assert sass_model.simt_key_pitch_rule(k) == "D"
    k.instrs.append(sass_parse.Instr(0x1c0, "LOP3.LUT R7, R6, 0x1, RZ, 0xfc, !PT"))
    assert sass_model.simt_key_pitch_rule(k) == "D|1"


def test_simt_access_uses_the_key_pitch():
    acc = sass_model.ACCESS["forward_simt_kernel"](64, 16, 32, 128, 64)[0]
    assert acc["per_warp"] == 16 * 32 // 128 * 64
    assert sass_model.conflict_ways(acc["words"], 32) == 32
    acc = sass_model.ACCESS["forward_simt_kernel"](64, 16, 32, 128, 65)[0]
    assert sass_model.conflict_ways(acc["words"], 32) == 1


def test_model_of_the_toy_kernel_without_a_profile():
    k = toy_kernel()
    r = sass_model.model_kernel(k, 64, "f16", (16, 64, 128), "toy_forward_kernel")
    assert r["chunk_loop"]["profiled"] is False  # an inner loop and no profile: bodies once
    assert r["chunk_loop"]["trip_counts"] is None
    assert r["flop_per_chunk"] == 4 * 16 * 64 * 64
    assert r["global_bytes_per_chunk"] == 16 * 32 * 4
    dev = sass_model.DEVICES["sm_80"]
    issue_clk = 19 * 4 / dev["issue_per_clk_sm"]
    tensor_clk = 4096 * 4 / dev["tensor_flop_per_clk_sm"]
    assert r["clocks_per_chunk_per_sm"]["issue"] == issue_clk
    assert r["clocks_per_chunk_per_sm"]["tensor"] == tensor_clk
    want_issue = 4 * 16 * 64 * 64 / max(issue_clk, tensor_clk) / dev["tensor_flop_per_clk_sm"]
    assert abs(r["fraction_of_dense_f16_peak"]["issue"] - want_issue) < 1e-12
    bw = 4 * 16 * 64 * 64 / (16 * 32 * 4) * dev["hbm_gb_s"] * 1e9 / (
        dev["tensor_flop_per_clk_sm"] * dev["sms"] * dev["clock_ghz"] * 1e9)
    assert abs(r["fraction_of_dense_f16_peak"]["bandwidth"] - bw) < 1e-12
    assert r["estimate"] == min(r["fraction_of_dense_f16_peak"].values())


def test_tensor_pipe_bounds_when_it_is_the_slower(monkeypatch):
    # A device whose tensor pipe does 64 FLOP per clock: the HMMA (4096 FLOP a warp, 4 warps)
    # takes 256 clocks, more than the 19 * 4 / 4 of issue, so it sets the issue bound.
    slow = dict(sass_model.DEVICES["sm_80"], tensor_flop_per_clk_sm=64)
    monkeypatch.setitem(sass_model.DEVICES, "sm_80", slow)
    r = sass_model.model_kernel(toy_kernel(), 64, "f16", (16, 64, 128), "toy_forward_kernel")
    assert r["clocks_per_chunk_per_sm"]["tensor"] == 256
    assert r["fraction_of_dense_f16_peak"]["issue"] == 4 * 16 * 64 * 64 / 256 / 64


def test_missing_cuobjdump_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(sass_model, "find_cuobjdump", lambda: None)
    assert sass_model.main(["nothing.so"]) == 2
    assert "pip install nvidia-cuda-cuobjdump" in capsys.readouterr().err


def test_table_and_json_from_a_listing(tmp_path):
    out_json = tmp_path / "toy.json"
    rc = sass_model.main(["toy.o", "--sass", TOY, "--kernel", "toy_forward",
                          "--tile", "toy_forward_kernel=16,64,128", "--json", str(out_json)])
    assert rc == 0
    import json
    data = json.loads(out_json.read_text())
    assert [r["D"] for r in data["results"]] == [64]
    assert data["results"][0]["per_warp_per_chunk"]["HMMA"] == 1


def test_mma_fragment_reads_are_conflict_free_with_padded_rows():
    # forward_mma.cu's rows of D + 8 16-bit elements: each 8x8 matrix ldmatrix reads of K (plain)
    # and V (.trans), 8 rows x 4 words, fills the 32 banks; unpadded (rows of 128 or 256 bytes,
    # all starting in bank 0) 8-way.
    for D, tile in ((64, (64, 64, 128)), (128, (64, 64, 128))):
        assert sass_model.tile_of(sass_model.TILES["forward_mma_kernel"], D) == tile
        pitch = sass_model.eval_pitch(sass_model.PITCH_RULES["forward_mma_kernel"](None), D)
        assert pitch == D + 8
        k_frag, v_frag = sass_model.ACCESS["forward_mma_kernel"](D, *tile, pitch)
        assert sass_model.conflict_ways(k_frag["words"], 32) == 1
        assert sass_model.conflict_ways(v_frag["words"], 32) == 1
        k_frag, v_frag = sass_model.ACCESS["forward_mma_kernel"](D, *tile, D)
        assert sass_model.conflict_ways(k_frag["words"], 32) == 8
        assert sass_model.conflict_ways(v_frag["words"], 32) == 8
        assert k_frag["match"](sass_parse.Instr(0, "LDSM.16.M88.4 R4, [R2+0x10]"))
        assert not k_frag["match"](sass_parse.Instr(0, "LDSM.16.MT88.4 R4, [R2]"))
        assert not k_frag["match"](sass_parse.Instr(0, "LDS R4, [R2+0x10]"))
        assert v_frag["match"](sass_parse.Instr(0, "LDSM.16.MT88.4 R4, [R2+0x90]"))
        assert not v_frag["match"](sass_parse.Instr(0, "LDS.U16 R4, [R2+0x90]"))
    # An LDSM.x4 moves 4 matrices of 128 bytes: 4 wavefronts; .x2 two.
    assert sass_model.smem_wavefronts(sass_parse.Instr(0, "LDSM.16.MT88.4 R4, [R2]")) == 4
    assert sass_model.smem_wavefronts(sass_parse.Instr(0, "LDSM.16.M88.2 R4, [R2]")) == 2


def test_mma_off_path_blocks_are_the_element_load_and_the_zero_fill():
    off = sass_model.OFF_PATH["forward_mma_kernel"]
    blk = lambda *texts: [sass_parse.Instr(0x10 * n, t) for n, t in enumerate(texts)]
    assert off(blk("IMAD R4, R2, 0x2, RZ", "LDG.E.U16 R98, [R88.64]", "STS.U16 [R97], R98"))
    assert off(blk("STS.U16 [R97+0x2400], RZ", "STS.U16 [R97], RZ", "BRA 0xd270"))
    assert not off(blk("LDS RZ, [RZ]", "LDGSTS.E.BYPASS.128 [R97], [R66.64]", "BRA 0xd270"))
    assert not off(blk("LDS.U16 R4, [R2]", "STS.64 [R67], R86"))


# ---------------------------------------------------------------- the backward's rules
# testdata/toy_backward.sass, block by block (start address: instructions):
#   0x20: ISETP, @P0 BRA 0x90 (the per-span guard) | 0x40: IMAD, MOV (per-span setup) |
#   0x60: LD, ISETP, BRA (the per-span loop) | 0x90: LDGDEPBAR, BAR | copy loop, 2 trips:
#   0xb0: ISETP, BRA | 0xd0: @!PT LDS, LDGSTS.128, BRA | 0x100: LDG.E.U16, STS.U16 (element
#   path) | 0x120: IADD3, ISETP, BRA | 0x150: LDSM, HMMA, VOTE, @P4 BRA 0x1f0 | general path
#   0x190: @!P6 MUFU.EX2 x2, BRA | 0x1c0: LD | 0x1d0: FSEL, BRA | usual path 0x1f0: FFMA,
#   MUFU.EX2 x2 | 0x220: VOTE, ISETP, BRA | 0x250: F2FP, LDSM.MT, HMMA, BRA | NaN rule 0x290:
#   SHFL.IDX, FFMA | 0x2b0: IADD3, ISETP, BRA (back edge).
TOY_FAMILY = "toy_backward_kernel"


def toy_backward():
    kernels = sass_parse.parse(open(TOY_BACKWARD).read())
    assert len(kernels) == 1
    return kernels[0]


def block_addrs(cfg, blocks):
    return sorted(cfg.blocks[b][0].addr for b in blocks)


@pytest.fixture
def toy_family(monkeypatch):
    """toy_backward_kernel registered as a dQ-like pass: tile (64, 32, 128), 3 GEMMs a chunk, its
    per-span loop 0 trips and its copy loop 2, the element path off, the backward's rules."""
    monkeypatch.setitem(sass_model.TILES, TOY_FAMILY, (64, 32, 128))
    monkeypatch.setitem(sass_model.GEMMS, TOY_FAMILY, 3)
    monkeypatch.setitem(sass_model.PROFILES, TOY_FAMILY, lambda D, br, bc, t: [0, 2])
    monkeypatch.setitem(sass_model.OFF_PATH, TOY_FAMILY, sass_model._bwd_off_path("LDG.E.U16"))
    monkeypatch.setitem(sass_model.NAN_RULE_PATH, TOY_FAMILY, sass_model._nan_rule_path)
    monkeypatch.setitem(sass_model.GENERAL_PATH, TOY_FAMILY, sass_model.general_softmax_path)
    monkeypatch.setattr(sass_model, "PER_SPAN_REGIONS", {TOY_FAMILY})


def test_general_softmax_path_is_the_other_side_of_the_usual_block():
    cfg = sass_parse.Cfg(toy_backward().instrs)
    loop = sass_model.chunk_loop(cfg)
    assert loop.header_addr == 0x20
    general, usual = sass_model.general_softmax_path(loop)
    assert cfg.blocks[usual][0].addr == 0x1f0  # two unguarded MUFU.EX2
    assert block_addrs(cfg, general) == [0x190, 0x1c0, 0x1d0]


def test_general_softmax_path_needs_one_branch_into_the_usual_block():
    # A second way into the usual block (the guarded branch at 0x30 retargeted to it): not the
    # shape the rule reads, so no general path and both sides count.
    k = toy_backward()
    k.instrs[3] = sass_parse.Instr(0x30, "@P0 BRA 0x1f0")
    loop = sass_model.chunk_loop(sass_parse.Cfg(k.instrs))
    assert sass_model.general_softmax_path(loop) == (frozenset(), None)


def test_guarded_region_of_the_per_span_loop():
    cfg = sass_parse.Cfg(toy_backward().instrs)
    loop = sass_model.chunk_loop(cfg)
    per_span, copy = list(loop.descendants())
    assert (per_span.header_addr, copy.header_addr) == (0x60, 0xb0)
    dom, pdom = cfg.dominators(), loop.post_dominators()
    g, region = loop.guarded_region(per_span.header, dom, pdom)
    assert cfg.blocks[g][0].addr == 0x20
    assert block_addrs(cfg, region) == [0x40, 0x60]  # the setup and the loop, not 0x90 on
    # The copy loop runs on every chunk: no branch above it skips it.
    assert loop.guarded_region(copy.header, dom, pdom) == (None, frozenset())
    # Every path from the guard reaches the barrier block; from the scores branch, the join.
    join = next(b for b in loop.blocks if cfg.blocks[b][0].addr == 0x220)
    scores = next(b for b in loop.blocks if cfg.blocks[b][0].addr == 0x150)
    assert join in pdom[scores]
    assert sass_model.per_span_blocks(loop, [0, 2]) == region
    assert sass_model.per_span_blocks(loop, [1, 2]) == frozenset()  # a loop that runs counts


def test_backward_counts_take_the_usual_path_and_leave_per_span_work_out(toy_family):
    r = sass_model.model_kernel(toy_backward(), 64, "f16", (64, 32, 128), TOY_FAMILY)
    assert r["chunk_loop"]["profiled"] is True
    assert r["chunk_loop"]["trip_counts"] == [0, 2]
    assert r["per_warp_per_chunk"] == {"HMMA": 2, "LDG": 2, "LDS": 4, "STS": 0, "GEN": 0,
                                       "FP32": 1, "MUFU": 2, "BAR": 1, "INT": 10, "OTHER": 15}
    assert r["general_softmax_path"] == {"blocks": ["0x190", "0x1c0", "0x1d0"],
                                         "instructions": 6, "usual_path_block": "0x1f0",
                                         "usual_path_instructions": 3}
    assert r["per_span_blocks"] == {"blocks": 2, "instructions": 5}
    assert r["flop_per_chunk"] == 3 * 2 * 64 * 32 * 64
    assert r["global_bytes_per_chunk"] == 2 * 16 * 32 * 4  # 2 trips of LDGSTS.128, 4 warps
    # Shared memory: LDGSTS.128 4 wavefronts x 2 trips, LDSM.x4 4 each; the @!PT LDS never runs.
    assert r["smem_wavefronts_per_warp"]["conflict_free"] == 4 * 2 + 4 + 4
    dev = sass_model.DEVICES["sm_90"]
    assert r["clocks_per_chunk_per_sm"]["issue"] == 37 * 4 / dev["issue_per_clk_sm"]
    assert r["clocks_per_chunk_per_sm"]["tensor"] == 2 * 4096 * 4 / dev["tensor_flop_per_clk_sm"]


def test_without_the_backward_rules_both_paths_and_the_setup_count(toy_family, monkeypatch):
    monkeypatch.setattr(sass_model, "PER_SPAN_REGIONS", set())
    monkeypatch.delitem(sass_model.GENERAL_PATH, TOY_FAMILY)
    r = sass_model.model_kernel(toy_backward(), 64, "f16", (64, 32, 128), TOY_FAMILY)
    # + the general path's 6 and the per-span setup's 2 (its loop still weighs 0 trips).
    assert sum(r["per_warp_per_chunk"].values()) == 37 + 6 + 2
    assert r["per_warp_per_chunk"]["GEN"] == 1  # the general path's LD


def test_a_fractional_trip_count_is_a_share_of_the_warps():
    loop = sass_model.chunk_loop(sass_parse.Cfg(toy_backward().instrs))
    counts, _, _, _ = sass_model.count_chunk(loop, [0, 0.25])
    once, _, _, _ = sass_model.count_chunk(loop, [0, 1])
    # The copy loop's blocks (2, 3, 2 and 3 instructions; no off path is given here, so the
    # element path's count too), run by a quarter of the warps: 0.75 of them fewer than once.
    assert sum(once.values()) - sum(counts.values()) == (2 + 3 + 2 + 3) * 0.75
    assert counts["LDG"] == 0.25 * 2  # the LDGSTS and the LDG.E.U16


def test_backward_summary_weights_the_passes_by_time():
    rows = [{"family": "backward_dq_mma_kernel", "arch": "sm_90", "dtype": "f16", "D": 64,
             "estimate": 0.25},
            {"family": "backward_dkdv_mma_kernel", "arch": "sm_90", "dtype": "f16", "D": 64,
             "estimate": 0.5},
            {"family": "forward_mma_kernel", "arch": "sm_90", "dtype": "f16", "D": 64,
             "estimate": 0.9}]
    (b,) = sass_model.backward_summary(rows)
    # Per pair: 6 D FLOP at 25% and 8 D at 50%: times 24 and 16, 14 D in 40 units.
    assert abs(b["estimate"] - 14 / 40) < 1e-12
    assert abs(b["dq_share_of_time"] - 24 / 40) < 1e-12
    assert abs(b["flash_attention_count_estimate"] - 10 / 40) < 1e-12
    assert sass_model.backward_summary(rows[:1]) == []  # one pass alone: no line


def test_backward_tiles_and_flop_per_chunk():
    # mma_backward_loop.cuh's 64-row / 64-key blocks of 128 threads; backward_mma.cu's kDqKeys
    # 32 / 64 and kKvRows 32 / 16, backward_mma_tf32.cu's kDqKeys 64 / 32 and kKvRows 32 / 16.
    want = {("backward_dq_mma_kernel", 64): (64, 32, 128),
            ("backward_dq_mma_kernel", 128): (64, 64, 128),
            ("backward_dkdv_mma_kernel", 64): (64, 32, 128),
            ("backward_dkdv_mma_kernel", 128): (64, 16, 128),
            ("backward_dq_mma_tf32_kernel", 64): (64, 64, 128),
            ("backward_dq_mma_tf32_kernel", 128): (64, 32, 128),
            ("backward_dkdv_mma_tf32_kernel", 64): (64, 32, 128),
            ("backward_dkdv_mma_tf32_kernel", 128): (64, 16, 128)}
    for (family, D), tile in want.items():
        assert sass_model.tile_of(sass_model.TILES[family], D) == tile
    assert [sass_model.gemms_of(f) for f in ("forward_mma_kernel", "backward_dq_mma_kernel",
                                             "backward_dkdv_mma_tf32_kernel")] == [2, 3, 4]
    # The dK/dV pass's prepare loop: warp 0 of 4 (R = 32 or 16 rows, one a thread).
    assert sass_model.PROFILES["backward_dkdv_mma_kernel"](64, 64, 32, 128) == [0, 0, 0, 0.25,
                                                                                 2, 2]
    assert sass_model.PROFILES["backward_dq_mma_tf32_kernel"](128, 64, 32, 128) == [0, 4, 4, 0,
                                                                                    16, 16]
