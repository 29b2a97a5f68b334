"""test_sass_model.py - bench/gpu/sass_model.py's parser, loops and counting on hand-written
SASS listings (testdata/toy_forward.sass, testdata/toy_backward.sass, and for the
warp-specialised model testdata/toy_wgmma.sass and short programs written inline), whose exact
counts are worked out below; no GPU, nvcc or cuobjdump needed. Run by meson test (suite
gpu_model) through pytest.

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


def test_voted_general_path_is_the_longer_side_of_the_vote():
    # The rule a dropout instance falls back on: the branch on VOTE.ALL (0x170 .. 0x180), its
    # sides up to the join at 0x220; the longer one (0x190 .. 0x1e0, 6 instructions against 3)
    # is the general path. On the toy it agrees with general_softmax_path, and it still finds
    # the path where a second way into the usual block hides it from that rule.
    cfg = sass_parse.Cfg(toy_backward().instrs)
    general, usual = sass_model.voted_general_path(sass_model.chunk_loop(cfg))
    assert (general, usual) == sass_model.general_softmax_path(sass_model.chunk_loop(cfg))
    k = toy_backward()
    k.instrs[3] = sass_parse.Instr(0x30, "@P0 BRA 0x1f0")
    cfg = sass_parse.Cfg(k.instrs)
    general, usual = sass_model.voted_general_path(sass_model.chunk_loop(cfg))
    assert cfg.blocks[usual][0].addr == 0x1f0
    assert block_addrs(cfg, general) == [0x190, 0x1c0, 0x1d0]
    # Blocks left out of the count (a dropout instance's per-lane draws) do not count toward a
    # side's length: with the general side's blocks all left out, the sides swap.
    general, usual = sass_model.voted_general_path(sass_model.chunk_loop(cfg), off=general)
    assert cfg.blocks[usual][0].addr == 0x190 and block_addrs(cfg, general) == [0x1f0]


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
    # 32 / 64 and kKvRows 32 (kKvRowsOptions 32 / 16), backward_mma_tf32.cu's kDqKeys 64 / 32
    # and kKvRows 32 / 16.
    want = {("backward_dq_mma_kernel", 64): (64, 32, 128),
            ("backward_dq_mma_kernel", 128): (64, 64, 128),
            ("backward_dkdv_mma_kernel", 64): (64, 32, 128),
            ("backward_dkdv_mma_kernel", 128): (64, 32, 128),
            ("backward_dq_mma_tf32_kernel", 64): (64, 64, 128),
            ("backward_dq_mma_tf32_kernel", 128): (64, 32, 128),
            ("backward_dkdv_mma_tf32_kernel", 64): (64, 32, 128),
            ("backward_dkdv_mma_tf32_kernel", 128): (64, 16, 128)}
    for (family, D), tile in want.items():
        assert sass_model.tile_of(sass_model.TILES[family], D) == tile
    options = sass_model.OPTION_TILES["backward_dkdv_mma_kernel"]
    assert [sass_model.tile_of(options, D) for D in (64, 128)] == [(64, 32, 128), (64, 16, 128)]
    assert [sass_model.gemms_of(f) for f in ("forward_mma_kernel", "backward_dq_mma_kernel",
                                             "backward_dkdv_mma_tf32_kernel")] == [2, 3, 4]
    # The dK/dV pass's prepare loop: warp 0 of 4 (R = 32 or 16 rows, one a thread); the walk's
    # five loops (SPEC 3.4's shared pairs' two among them) run when a span ends.
    assert sass_model.PROFILES["backward_dkdv_mma_kernel"](64, 64, 32, 128) == [0, 0, 0, 0, 0,
                                                                                 0.25, 2, 2]
    assert sass_model.PROFILES["backward_dq_mma_tf32_kernel"](128, 64, 32, 128) == [0, 4, 4, 0,
                                                                                    16, 16]
    # Its dropout instance walks without key_lane_weights' loop (the plain instances' alone).
    assert sass_model.OPTION_PROFILES["backward_dkdv_mma_kernel"](64, 64, 32, 128) == [
        0, 0, 0, 0, 0.25, 2, 2]
    assert sass_model.OPTION_PROFILES["backward_dkdv_mma_tf32_kernel"](128, 64, 16, 128) == [
        0, 0, 0, 0, 0.25, 2, 2, 16, 16]


# ---------------------------------------------------------------- warp-specialised kernels
# testdata/toy_wgmma.sass: a producer and a consumer chunk loop in the shape of
# cuda/forward_wgmma.cu, block by block in the listing's header. Registered as
# toy_wgmma_kernel: the tile of forward_wgmma (128 rows, 128 keys, 384 threads) and TMA boxes of
# 16 KB.
TOY_WGMMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata",
                         "toy_wgmma.sass")
WS_FAMILY = "toy_wgmma_kernel"


def toy_wgmma():
    kernels = sass_parse.parse(open(TOY_WGMMA).read())
    assert len(kernels) == 1
    return kernels[0]


@pytest.fixture
def ws_family(monkeypatch):
    monkeypatch.setitem(sass_model.TILES, WS_FAMILY, (128, 128, 384))
    monkeypatch.setitem(sass_model.WS_TMA_BOX, WS_FAMILY, lambda D: 16384)


def high(stall=1, wbar=None, rbar=None, wait=0):
    """The high word of an instruction with this scheduling control (sass_parse's layout)."""
    c = stall | (7 if wbar is None else wbar) << 5 | (7 if rbar is None else rbar) << 8
    return (c | wait << 11) << 41


def prog(*lines):
    """Instructions from (text, control keywords) pairs or texts (stall 1, no scoreboard)."""
    out = []
    for n, line in enumerate(lines):
        text, ctl = (line, {}) if isinstance(line, str) else line
        out.append(sass_parse.Instr(0x10 * n, text, high(**ctl)))
    return out


def block_at(cfg, addr):
    return next(b for b, blk in enumerate(cfg.blocks) if blk[0].addr == addr)


def block_addrs_in_order(cfg, blocks):
    return [cfg.blocks[b][0].addr for b in blocks]


def test_control_word_of_real_instructions():
    # From nvcc 13's SASS of forward_wgmma_kernel<__half, 64>: a shuffle releasing scoreboard
    # 0 (stall 2), the FMNMX that waits for it (stall 5), a MUFU.EX2 releasing scoreboard 3.
    pad = " " * 50
    text = ("    /*dc30*/   SHFL.BFLY PT, R146, R149, 0x1, 0x1f ;   /* 0x0c201f0095927f89 */\n"
            + pad + "/* 0x000e2400000e0000 */\n"
            "    /*dc40*/   FMNMX.NAN R146, R149, R146, !PT ;       /* 0x0000009295927209 */\n"
            + pad + "/* 0x001fca0007820000 */\n"
            "    /*f060*/   MUFU.EX2 R24, R24 ;                     /* 0x0000001800187308 */\n"
            + pad + "/* 0x000ee20000000800 */\n")
    k = sass_parse.parse("arch = sm_90a\n\t\tFunction : k\n" + text)[0]
    shfl, fmnmx, mufu = (i.control() for i in k.instrs)
    assert shfl == {"stall": 2, "yield": 1, "wbar": 0, "rbar": None, "wait": 0}
    assert fmnmx == {"stall": 5, "yield": 0, "wbar": None, "rbar": None, "wait": 1}
    assert (mufu["stall"], mufu["wbar"], mufu["wait"]) == (1, 3, 0)
    # An instruction without the second line: stall 1, no scoreboard.
    assert sass_parse.Instr(0, "FFMA R1, R1, R2, R3").control() == {
        "stall": 1, "yield": 0, "wbar": None, "rbar": None, "wait": 0}


def test_hopper_instructions_parse():
    ss = sass_parse.Instr(0, "HGMMA.64x128x16.F32 R24, gdesc[UR24], RZ, !UPT")
    rs = sass_parse.Instr(0, "HGMMA.64x64x16.F32 R88, R120, gdesc[UR8].tnspB, R88, gsb0")
    assert sass_model.hgmma_shape(ss.op) == (64, 128, 16)
    # One line is one warpgroup product: 2 * 64 * N * 16 FLOP, the 4 warps' lines together.
    assert sass_model.hmma_flop(ss.op) == 2 * 64 * 128 * 16
    assert sass_model.hmma_flop(rs.op) == 2 * 64 * 64 * 16
    assert not sass_model.hgmma_a_in_registers(ss) and sass_model.hgmma_a_in_registers(rs)
    assert sass_model.hgmma_accumulators(rs) == set(range(88, 88 + 32))
    assert sass_model.hgmma_smem_bytes(ss) == 64 * 32 + 128 * 32  # A and B, 32 bytes a row
    assert sass_model.hgmma_smem_bytes(rs) == 64 * 32              # B alone
    assert sass_model.depbar_pending(sass_parse.Instr(0, "WARPGROUP.DEPBAR.LE gsb0, 0x1")) == 1
    assert sass_model.depbar_pending(sass_parse.Instr(0, "WARPGROUP.DEPBAR.LE gsb0, 0x0")) == 0
    bar = sass_parse.Instr(0, "BAR.SYNC.DEFER_BLOCKING R127, 0x100")
    assert sass_model.barrier_threads(bar) == 256
    assert sass_model.barrier_threads(sass_parse.Instr(0, "BAR.ARV R147, 0x100")) == 256
    assert sass_model.barrier_threads(sass_parse.Instr(0, "BAR.SYNC.DEFER_BLOCKING 0x0")) is None
    assert sass_model.setmaxnreg(sass_parse.Instr(0, "USETMAXREG.DEALLOC.CTAPOOL 0x38")) == \
        ("DEALLOC", 56)
    assert sass_model.setmaxnreg(
        sass_parse.Instr(0, "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe0")) == ("TRY_ALLOC", 224)
    assert sass_model.hopper_ops(prog("UTMALDG.4D [UR8], [UR42]", "SYNCS.ARRIVE.TRANS64 RZ, "
                                      "[R19+URZ], R0", "WARPGROUP.ARRIVE"))["UTMALDG"] == 1


def test_consumer_and_producer_chunk_loops():
    k = toy_wgmma()
    assert k.arch == "sm_90a" and sass_model.is_warp_specialised(k)
    assert not sass_model.is_warp_specialised(toy_kernel())
    cfg = sass_parse.Cfg(k.instrs)
    # The span loop 0x40 holds the chunk loop; the NaN check (0x270) and the mbarrier retry
    # (0x340) are inside it and hold no product.
    consumer = sass_model.consumer_chunk_loop(cfg)
    assert consumer.header_addr == 0x50
    assert [l.header_addr for l in consumer.descendants()] == [0x270, 0x340]
    # The elect loops 0x3f0 and 0x450 are the innermost loops holding a UTMALDG; the producer's
    # chunk loop is the one around them.
    producer = sass_model.producer_chunk_loop(cfg)
    assert producer.header_addr == 0x380
    elect = [l for l in producer.descendants() if sass_model.is_elect_loop(l)]
    assert [l.header_addr for l in elect] == [0x3f0, 0x450]


def test_chunk_paths_take_the_fast_case_of_a_full_chunk():
    cfg = sass_parse.Cfg(toy_wgmma().instrs)
    dom = cfg.dominators()
    consumer = sass_model.consumer_chunk_loop(cfg)
    path = sass_model.chunk_path(consumer, sass_model.consumer_groups(consumer), dom)
    # Not the retry, the skip of P V, the chunk no row takes (0x2d0: shorter, but no softmax),
    # the general softmax, the skip of the stage's release, the NaN rule.
    assert block_addrs_in_order(cfg, path) == [0x50, 0x70, 0xc0, 0xe0, 0x100, 0x180, 0x1c0,
                                               0x200, 0x220, 0x230, 0x240, 0x2e0]
    acc = sass_model.hgmma_accumulators(cfg.blocks[block_at(cfg, 0xc0)][1])
    moved = sass_model.moved_max_blocks(consumer, path, acc)
    assert [(cfg.blocks[u][0].addr, cfg.blocks[b][0].addr) for u, b in moved] == [(0x1c0, 0x1e0)]
    producer = sass_model.producer_chunk_loop(cfg)
    ppath = sass_model.chunk_path(producer, sass_model.producer_groups(producer), dom)
    # The issuing lane's path, which waits for the stage (a later chunk's) and runs both elect
    # loops once.
    assert block_addrs_in_order(cfg, ppath) == [0x380, 0x3a0, 0x3b0, 0x3d0, 0x3f0, 0x440, 0x450,
                                                0x4a0]


def toy_wgmma_with_empty_commit():
    """The toy with the branch past P V turned into forward_wgmma's D = 64 form: the previous
    chunk's P V (0xc0) or, in the other branch (0x520, out of line after the trailer), the
    placeholder HGMMA ptxas issues for an empty commit, both going on to the turn at 0xe0."""
    pad = " " * 40 + "/* 0x0000000000000000 */\n"
    text = open(TOY_WGMMA).read().replace("@!P6 BRA 0xe0 ;", "@!P6 BRA 0x520 ;")
    text += "".join("        /*%04x*/   %s ;   /* 0x0000000000000000 */\n%s" % (a, t, pad)
                    for a, t in ((0x520, "WARPGROUP.ARRIVE"),
                                 (0x530, "HGMMA.64x8x16.F16 RZ, gdesc[URZ], RZ, !UPT, gsb0"),
                                 (0x540, "BRA 0xe0")))
    kernels = sass_parse.parse(text)
    assert len(kernels) == 1
    return kernels[0]


def test_chunk_path_runs_each_product_once_beside_an_empty_commit(ws_family):
    k = toy_wgmma_with_empty_commit()
    cfg = sass_parse.Cfg(k.instrs)
    consumer = sass_model.consumer_chunk_loop(cfg)
    assert consumer.header_addr == 0x50 and block_at(cfg, 0x520) in consumer.blocks
    # S and P V, not the placeholder: the path takes P V's branch, as the toy's does.
    r = sass_model.model_ws_kernel(k, 64, "f16", (128, 128, 384), WS_FAMILY)
    assert r.get("error") is None
    dummy = cfg.blocks[block_at(cfg, 0x520)][1]
    assert sass_model.is_dummy_hgmma(dummy) and sass_model.product_kind(dummy) is None
    assert r["chunk_loop"]["path_blocks"][:5] == ["0x50", "0x70", "0xc0", "0xe0", "0x100"]
    assert r["hgmma_flop_per_chunk"] == 2 * (2 * 2 * 64 * 128 * 16 + 2 * 64 * 64 * 16)
    # The placeholder counts no FLOP on the tensor pipe.
    t1 = sass_model.warp_timeline(prog("HGMMA.64x8x16.F16 RZ, gdesc[URZ], RZ, !UPT, gsb0",
                                       "WARPGROUP.DEPBAR.LE gsb0, 0x0"), 4096,
                                  wgmma_latency=0)[0]
    assert t1 == 2


def test_timeline_waits_for_each_serialised_product():
    # Two HGMMA 64x128x16 (64 clocks each at 4096 FLOP a clock) in one group, waited once: the
    # group ends at 1 + 128 and is seen done 32 clocks later, the DEPBAR issues at 161, the
    # chunk takes 162. Each waited alone: 2 x (1 + 64 + 32 + 1) = 196.
    hg = "HGMMA.64x128x16.F32 R24, gdesc[UR24], R24"
    grouped = prog("WARPGROUP.ARRIVE", hg, hg + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    alone = prog("WARPGROUP.ARRIVE", hg + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                 "WARPGROUP.ARRIVE", hg + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert sass_model.warp_timeline(grouped, 4096)[0] == 162
    assert sass_model.warp_timeline(alone, 4096)[0] == 196
    assert sass_model.warp_timeline(alone, 4096, wgmma_latency=0)[0] == 132


def test_timeline_overlaps_work_with_a_running_group():
    # Groups A and B (64 clocks each, B queued behind A); 40 FFMAs between the two waits. Waiting
    # for A alone (DEPBAR.LE 1) lets them run under B: 161 a chunk; waiting for both first, 202.
    hg = "HGMMA.64x128x16.F32 R24, gdesc[UR24], R24, gsb0"
    body = ["FFMA R1, R1, R2, R3"] * 40
    overlap = prog(hg, hg, "WARPGROUP.DEPBAR.LE gsb0, 0x1", *body, "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    serial = prog(hg, hg, "WARPGROUP.DEPBAR.LE gsb0, 0x0", *body, "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert sass_model.warp_timeline(overlap, 4096)[0] == 161
    assert sass_model.warp_timeline(serial, 4096)[0] == 202


def test_timeline_mufu_pipe_scoreboards_and_lockstep():
    # Three MUFU.EX2 (the first releases scoreboard 0, 20 clocks) and an FADD that waits for it.
    # Each MUFU holds the pipe 8 clocks: 24 a chunk, the scoreboard hidden; at twice the
    # latency the FADD waits 40 clocks after the first MUFU: 41. Two warpgroups in lockstep:
    # the pipe 16 clocks a MUFU, 48.
    p = prog(("MUFU.EX2 R1, R5", {"wbar": 0}), "MUFU.EX2 R2, R6", "MUFU.EX2 R3, R7",
             ("FADD R4, R1, R3", {"wait": 1}))
    assert sass_model.warp_timeline(p, 4096)[0] == 24
    assert sass_model.warp_timeline(p, 4096, latency_scale=2.0)[0] == 41
    assert sass_model.warp_timeline(p, 4096, share=2)[0] == 48
    # Stall counts from the SASS set the pace where no scoreboard or pipe does.
    assert sass_model.warp_timeline(prog(("IADD3 R1, R1, 0x1, RZ", {"stall": 5})), 4096)[0] == 5


def test_model_of_the_toy_warp_specialised_kernel(ws_family):
    r = sass_model.model_ws_kernel(toy_wgmma(), 64, "f16", (128, 128, 384), WS_FAMILY)
    assert r["model"] == "warp-specialised" and "error" not in r
    assert r["chunk_loop"]["profiled"] is True
    assert r["chunk_loop"]["moved_max_blocks"] == ["0x1e0"]
    assert r["setmaxnreg"] == {"try_alloc": 224, "dealloc": 56}
    # A consumer warp's path: 30 instructions, 3 HGMMA lines, two waits (DEPBAR.LE 1, 0).
    assert sum(r["per_warp_per_chunk"].values()) == 30
    assert r["per_warp_per_chunk"]["HMMA"] == 3 and r["per_warp_per_chunk"]["MUFU"] == 2
    assert r["product_waits"] == [1, 0]
    assert r["producer_loop"]["instructions"] == 21
    assert r["ping_pong"] is True and r["lockstep"] is None
    # Two consumer warpgroups, each S (2 x 64x128x16) and P V (64x64x16): 160 clocks each.
    assert r["hgmma_flop_per_chunk"] == 2 * (2 * 2 * 64 * 128 * 16 + 2 * 64 * 64 * 16)
    clk = r["clocks_per_chunk_per_sm"]
    assert clk["tensor"] == 320
    assert clk["issue"] == 2 * 30 + 21  # a warp of each consumer group and the producer's
    assert clk["sfu"] == 2 * 2 * 8
    assert r["tma_loads_per_chunk"] == 2 and r["global_bytes_per_chunk"] == 2 * 16384
    assert clk["smem"] == (2 * (2 * (2048 + 4096) + 2048) + 2 * 16384) / 128
    dev = sass_model.DEVICES["sm_90"]
    assert clk["hbm"] == 2 * 16384 / (dev["hbm_gb_s"] / dev["sms"] / dev["clock_ghz"])
    # The chain, worked by hand from the listing's controls: the wait (30) and the S issue
    # reach 40; DEPBAR.LE 1 waits for S to end at 161 + 32 (P V still runs), the softmax's
    # MUFUs 8 apart and their scoreboard (20) bring the FADD to 224, 13 more instructions: 238.
    assert clk["chain"] == 238
    assert r["chain"]["turn_clocks"] == 7 and clk["turns"] == 14  # BAR.SYNC 31, BAR.ARV 38
    flop = 4 * 128 * 128 * 64
    assert r["fraction_of_dense_f16_peak"]["chain"] == flop / 238 / 4096
    assert r["bound_by"] == "hbm" and r["on_chip_bound_by"] == "smem"


def test_warp_specialised_rows_through_main(ws_family, tmp_path):
    out_json = tmp_path / "ws.json"
    rc = sass_model.main(["toy.o", "--sass", TOY_WGMMA, "--kernel", "toy_wgmma",
                          "--json", str(out_json), "--txt", str(tmp_path / "ws.txt")])
    assert rc == 0
    import json
    data = json.loads(out_json.read_text())
    (row,) = data["results"]
    assert (row["model"], row["arch"], row["D"], row["device"]) == ("warp-specialised",
                                                                     "sm_90a", 64, "H100-SXM5")
    assert data["warp_specialised_assumptions"]["wgmma_latency_clk"] == 32
    txt = (tmp_path / "ws.txt").read_text()
    assert txt.startswith("Warp-specialised kernels") and "kernel               arch" in txt
    assert "toy_wgmma_kernel     sm_90a f16    64" in txt


# ---------------------------------------------------------------- dropout instances
TOY_DROP = "toy_drop_kernel"


def toy_drop_listing(dropout):
    """A chunk loop (0x20 .. 0x180) with two HMMAs and two barriers; the dropout instance
    (template arguments false, true) adds a branch between a quad loop (0x80 .. 0xc0: a Philox
    multiply and a butterfly shuffle, then a factor multiply) and the per-lane draws (0x100 ..
    0x130: two Philox multiplies, two factor multiplies) that join at 0x140."""
    body = ["S2R R0, SR_TID.X", "MOV R1, RZ",
            "LDG.E.128 R4, [R2.64]", "STS.128 [R0], R4", "BAR.SYNC.DEFER_BLOCKING 0x0",
            "HMMA.16816.F32 R12, R4, R6, R12"]
    if dropout:
        body += ["ISETP.NE.AND P1, PT, R20, RZ, PT", "@!P1 BRA 0x100",
                 "IMAD.WIDE.U32 R30, R31, -0x2daee0ad, RZ",
                 "SHFL.BFLY PT, R32, R30, 0x1, 0x1f", "IADD3 R33, R33, 0x1, RZ",
                 "ISETP.GE.AND P0, PT, R33, 0x4, PT", "@!P0 BRA 0x80",
                 "FMUL R12, R12, R34", "BRA 0x140", "NOP",
                 "IMAD.WIDE.U32 R40, R41, -0x326172a9, RZ",
                 "IMAD.WIDE.U32 R42, R43, -0x2daee0ad, RZ",
                 "FMUL R12, R12, R44", "FMUL R13, R13, R44"]
    body += ["HMMA.16816.F32 R14, R4, R6, R14", "BAR.SYNC.DEFER_BLOCKING 0x0",
             "IADD3 R21, R21, 0x1, RZ", "ISETP.GE.AND P2, PT, R21, R22, PT", "@!P2 BRA 0x20",
             "EXIT", "BRA 0x%x" % (0x10 * (len(body) + 6))]
    name = "_ZN7dilattn4cuda15toy_drop_kernelI6__halfLi64ELb0ELb%dEEEvv" % int(dropout)
    lines = ["arch = sm_80", "\t\tFunction : " + name]
    lines += ["        /*%04x*/                   %s ;" % (0x10 * n, t) for n, t in enumerate(body)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def toy_drop(monkeypatch):
    """toy_drop_kernel with the forward's tile (64 rows, chunks of 64 keys, 128 threads) and no
    inner loop but the dropout instance's quad loop."""
    monkeypatch.setitem(sass_model.TILES, TOY_DROP, (64, 64, 128))
    monkeypatch.setitem(sass_model.PROFILES, TOY_DROP, lambda D, br, bc, t: [])
    return [k for d in (False, True) for k in sass_parse.parse(toy_drop_listing(d))]


def test_dropout_instance_counts_the_quad_loop_and_leaves_the_lane_path_out(toy_drop):
    plain, drop = toy_drop
    assert not sass_model.is_dropout_instance(plain) and sass_model.is_dropout_instance(drop)
    assert sass_model.is_option_instance(drop)
    loop = sass_model.chunk_loop(sass_parse.Cfg(drop.instrs))
    quads = sass_model.quad_draw_loops(loop)
    assert [l.header_addr for l in quads] == [0x80]
    lane, recognised = sass_model.dropout_lane_path(loop, quads)
    assert recognised and block_addrs_in_order(loop.cfg, sorted(lane)) == [0x100]
    p = sass_model.model_kernel(plain, 64, "f16", (64, 64, 128), TOY_DROP)
    d = sass_model.model_kernel(drop, 64, "f16", (64, 64, 128), TOY_DROP)
    assert sum(p["per_warp_per_chunk"].values()) == 9
    # 0x20 .. 0x70 (6), the quad loop's 5 at BC / 16 = 4 trips, 0xd0 .. 0xe0 (2), 0x140 .. 0x180
    # (5); the per-lane draws (0x100 .. 0x130) and the NOP count nothing.
    assert sum(d["per_warp_per_chunk"].values()) == 6 + 5 * 4 + 2 + 5
    assert d["chunk_loop"]["profiled"]
    assert d["dropout"]["quad_instructions"] == 20 and d["dropout"]["lane_path_instructions"] == 4
    # run_model models the dropout instance only when asked; the summary pairs the two.
    text = toy_drop_listing(False) + toy_drop_listing(True)
    assert len(sass_model.run_model(text, TOY_DROP, sass_model.TILES, head_dims=(64,))) == 1
    rows = sass_model.run_model(text, TOY_DROP, sass_model.TILES, head_dims=(64,), dropout=True)
    (s,) = sass_model.dropout_summary(rows)
    assert (s["plain_instructions"], s["dropout_instructions"], s["profiled"]) == (9, 33, True)
    on_chip = [min(r["fraction_of_dense_f16_peak"]["issue"], r["fraction_of_dense_f16_peak"]["smem"])
               for r in rows]
    assert s["on_chip_time_ratio"] == pytest.approx(on_chip[0] / on_chip[1])
    assert s["on_chip_time_ratio"] > 1


def test_option_instances_take_their_own_tile(toy_drop, monkeypatch):
    # An option instance with an OPTION_TILES entry is modelled at that tile (backward_mma.cu's
    # kKvRowsOptions), the plain one at TILES'; a tile the caller passes (--tile) holds for both.
    monkeypatch.setitem(sass_model.OPTION_TILES, TOY_DROP, (64, 32, 128))
    text = toy_drop_listing(False) + toy_drop_listing(True)
    rows = sass_model.run_model(text, TOY_DROP, sass_model.TILES, head_dims=(64,), dropout=True)
    assert [(r["tile"]["BC"], "dropout" in r) for r in rows] == [(64, False), (32, True)]
    # The summary sets the plain instance's 9 instructions a chunk of 64 keys beside the
    # dropout instance's chunk of 32: 4.5.
    (s,) = sass_model.dropout_summary(rows)
    assert s["plain_instructions"] == pytest.approx(4.5)
    # An option instance's loops are matched against its own profile (OPTION_PROFILES), the
    # plain instance's against PROFILES'.
    asked = []
    monkeypatch.setitem(sass_model.PROFILES, TOY_DROP, lambda D, br, bc, t: asked.append(bc) or [])
    monkeypatch.setitem(sass_model.OPTION_PROFILES, TOY_DROP,
                        lambda D, br, bc, t: asked.append(-bc) or [])
    sass_model.run_model(text, TOY_DROP, sass_model.TILES, head_dims=(64,), dropout=True)
    assert asked == [64, -32]
    given = dict(sass_model.TILES, **{TOY_DROP: (64, 16, 128)})
    rows = sass_model.run_model(text, TOY_DROP, given, head_dims=(64,), dropout=True)
    assert [r["tile"]["BC"] for r in rows] == [16, 16]


def test_dropout_instance_without_the_two_ways_counts_everything(toy_drop):
    # Without its butterfly shuffle the loop at 0x80 is no quad loop: every draw is a pair's (as
    # in the 3xTF32 dK/dV pass at D = 128), so no draw is left out, and the loop, which the
    # profile does not know, makes the row unprofiled: every instruction of the chunk loop but
    # the NOP counts once.
    text = toy_drop_listing(True).replace("SHFL.BFLY PT, R32, R30, 0x1, 0x1f",
                                          "IMAD.WIDE.U32 R44, R45, -0x326172a9, RZ")
    (drop,) = sass_parse.parse(text)
    loop = sass_model.chunk_loop(sass_parse.Cfg(drop.instrs))
    assert sass_model.quad_draw_loops(loop) == []
    assert sass_model.dropout_lane_path(loop, []) == (frozenset(), True)
    d = sass_model.model_kernel(drop, 64, "f16", (64, 64, 128), TOY_DROP)
    assert not d["chunk_loop"]["profiled"]
    assert sum(d["per_warp_per_chunk"].values()) == sum(1 for i in loop.instrs()
                                                        if i.base != "NOP")
