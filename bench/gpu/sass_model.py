#!/usr/bin/env python3
r"""sass_model.py - a static cost model of the forward and tensor-core backward kernels, from
their SASS. Modelled, not measured: no GPU runs anything here.

Usage:
  bench/gpu/sass_model.py BINARY... [--kernel REGEX] [--json FILE] [--txt FILE]
                          [--tile FAMILY=BR,BC,THREADS] [--dropout]
  e.g. bench/gpu/sass_model.py build-cuda/lib/libdilattn.so --json bench/results/x.json
       bench/gpu/sass_model.py backward_mma.o backward_mma_tf32.o --kernel 'backward_\w*mma'

What it does, per kernel whose name matches --kernel (default: forward_\w*kernel) and per arch:
  1. cuobjdump -sass of each binary, split per kernel (bench/gpu/sass_parse.py: name, arch,
     basic blocks, natural loops).
  2. The loop over chunks: the innermost loop that holds a BAR (every kernel modelled here
     synchronizes its block once per chunk at least, and no loop inside the chunk loop does).
     Forward and dQ pass: chunks of BC keys against a block of BR query rows; dK/dV pass:
     chunks of BC query rows against a block of BR keys (cuda/mma_backward_loop.cuh).
  3. Instructions issued per warp per chunk, by class (CLASSES): each instruction of the chunk
     loop counts once, times the trip counts of the inner loops around it. Trip counts come from
     the kernel's profile (PROFILES: the inner loops in header-address order, as functions of D;
     a fraction where only some warps run a loop); a kernel without one, or whose inner loops
     differ from it, counts every inner loop body once and is marked "unprofiled". Both sides
     of a data-dependent branch count once per iteration (an upper bound), except the blocks a
     kernel's OFF_PATH names: the paths a full chunk of a 16-byte-aligned view never takes, and
     the NaN rule's exact path (NAN_RULE_PATH), which finite inputs never take. The backward
     kernels count further blocks 0: the general P/dS path where the usual one applies
     (GENERAL_PATH) and the work done once a span (PER_SPAN_REGIONS). Warps are assumed
     converged (sass_parse.Cfg).
  4. Per chunk (the kernel's tile, TILES: BR, BC, threads):
       FLOP        GEMMS x 2 * BR * BC * D: the forward's 2 (S = Q K^T and P V,
                   FlashAttention's count), the dQ pass's 3, the dK/dV pass's 4;
       issue       warp instructions / 4 per clock per SM (4 sub-partitions, 1 each);
       tensor      HMMA FLOP / the device's dense f16 FLOP per clock per SM (a TF32 HMMA
                   counts twice its FLOP: the dense TF32 peak is half the f16 one on A100 and
                   H100, 156 vs 312 and 494.7 vs 989.4 TFLOPS in the whitepapers below);
       smem        shared-memory wavefronts / 1 per clock per SM (128 bytes per clock), with
                   the bank conflicts of the kernel's access pattern (ACCESS: an assumption,
                   written from the kernel source, stated in the output);
       smem also counts cp.async's shared-memory writes (LDGSTS, 16 bytes a lane: 4) and the
                   loads and stores through generic addresses (GEN: the tiles' pointers);
       bandwidth   global bytes loaded per chunk (LDG/LDGSTS widths x lanes x warps) at HBM
                   bandwidth, each block loading its own chunks (the reuse of BR rows per
                   block; no L2 reuse between blocks);
     each bound gives a fraction of the dense f16 tensor peak; the estimate is the smallest.
  5. The whole backward where both passes are modelled (backward_summary): per (query row, key)
     pair, the two passes' estimates weighted by the time each takes.
  6. A warp-specialised Hopper kernel (sm_90a: HGMMA and UTMALDG in its SASS; forward_wgmma) is
     modelled by model_ws_kernel instead: the consumer's chunk loop is the innermost loop
     holding an HGMMA, the producer's the innermost holding a TMA load (UTMALDG) but for the
     elect loops ptxas wraps around each; a chunk is the shortest path through the loop that
     runs every product or load and the chunk's mbarrier wait, arrive and 2^x, plus a moved
     row maximum's work. Bounds per chunk per SM: tensor, issue (busiest sub-partition), the
     MUFU pipe, the chain of one warpgroup (a timeline of one warp from the SASS's stall
     counts and product waits), a ping-pong's turns, shared memory, the TMA's bytes at HBM
     bandwidth; sm_90a takes sm_90's device constants. Its own table follows the others.
  7. With --dropout, the dropout instances (SPEC 11) beside the plain ones, on a dense chunk:
     their quad draw loops at BC / 16 trips, their per-lane draws counted 0 (dropout_lane_path),
     and each one's modelled time over its plain instance's (dropout_summary).
  Table on stdout, JSON with --json, the same table with --txt.

Device constants (DEVICES) and their sources are below. Checked by bench/gpu/test_sass_model.py.
"""
import argparse
import glob
import heapq
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_parse  # noqa: E402

# ---------------------------------------------------------------- devices
# A100: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, boost 1410 MHz,
#   dense FP16/BF16 tensor 312 TFLOPS = 108 SMs x 2048 FLOP/clk x 1.41 GHz; 4 SM sub-partitions
#   (one warp instruction issued per clock each); 32 banks x 4 bytes of shared memory (128 B/clk).
#   HBM2e 2039 GB/s: the A100 80GB SXM datasheet (the 40 GB part: 1555 GB/s).
# H100: NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), SXM5: 132 SMs, dense FP16/BF16
#   tensor 989.4 TFLOPS = 132 SMs x 4096 FLOP/clk x 1.83 GHz; 4 sub-partitions; 32 banks x 4 bytes;
#   HBM3 3.35 TB/s (H100 SXM datasheet). mma.sync (HMMA) is counted at this peak, which only
#   wgmma reaches on H100: an optimistic bound for an HMMA kernel there.
DEVICES = {
    "sm_80": {"name": "A100-SXM4-80GB", "sms": 108, "clock_ghz": 1.41,
              "tensor_flop_per_clk_sm": 2048, "issue_per_clk_sm": 4, "hbm_gb_s": 2039,
              "smem_banks": 32, "smem_bank_bytes": 4, "smem_wavefronts_per_clk_sm": 1},
    "sm_90": {"name": "H100-SXM5", "sms": 132, "clock_ghz": 1.83,
              "tensor_flop_per_clk_sm": 4096, "issue_per_clk_sm": 4, "hbm_gb_s": 3350,
              "smem_banks": 32, "smem_bank_bytes": 4, "smem_wavefronts_per_clk_sm": 1},
}

# ---------------------------------------------------------------- kernels
# The tiles of the library's forward kernels (cuda/forward_simt.cu's SimtProducts,
# forward_mma.cu's MmaTile: kBr, kBc, kThreads): forward_mma has 64 rows and 4 warps at both
# head dims; forward_mma_tf32's tile depends on D (a function of D here). Another kernel:
# --tile family=BR,BC,THREADS.
TILES = {
    "forward_simt_kernel": (16, 32, 128),
    "forward_mma_kernel": (64, 64, 128),
    # forward_wgmma.cu's WgmmaTile (sm_90a): 128 query rows, chunks of 128 keys, a producer and
    # two consumer warpgroups, at both head dims (modelled by model_ws_kernel).
    "forward_wgmma_kernel": (128, 128, 384),
    # forward_mma_tf32.cu's Tf32Tile: f32 tiles, so 32 keys a chunk at D = 128.
    "forward_mma_tf32_kernel": lambda D: (128, 64, 256) if D == 64 else (64, 32, 128),
    # The backward passes (cuda/mma_backward_loop.cuh: kMmaBackwardRows = kMmaBackwardKeys = 64,
    # kMmaBackwardThreads = 128). dQ: BR = 64 query rows a block, BC = the K/V chunk (kDqKeys);
    # dK/dV: BR = 64 keys a block, BC = the Q/dO chunk of query rows (kKvRows; the variant and
    # dropout instances: OPTION_TILES). f16/bf16: backward_mma.cu's MmaBackwardProducts, f32:
    # backward_mma_tf32.cu's Tf32BackwardProducts.
    "backward_dq_mma_kernel": lambda D: (64, 32 if D == 64 else 64, 128),
    "backward_dkdv_mma_kernel": lambda D: (64, 32, 128),
    "backward_dq_mma_tf32_kernel": lambda D: (64, 64 if D == 64 else 32, 128),
    "backward_dkdv_mma_tf32_kernel": lambda D: (64, 32 if D == 64 else 16, 128),
}

# The tiles of the option instances (is_option_instance) where they differ from TILES':
# backward_mma.cu's kKvRowsOptions, 16 query rows a dK/dV chunk at D = 128.
OPTION_TILES = {"backward_dkdv_mma_kernel": lambda D: (64, 32 if D == 64 else 16, 128)}

# The input dtype of a family whose template arguments do not name one (f32, as 3xTF32).
FAMILY_DTYPE = {"forward_mma_tf32_kernel": "f32", "backward_dq_mma_tf32_kernel": "f32",
                "backward_dkdv_mma_tf32_kernel": "f32"}

# The GEMMs of BR x BC x D (2 * BR * BC * D FLOP each) a chunk runs: the forward 2 (S = Q K^T,
# P V: FlashAttention's 4 * BR * BC * D); the dQ pass 3 (S = Q K^T, dP = dO V^T, dQ += dS K);
# the dK/dV pass 4 (S^T, dP^T, dV += P^T dO, dK += dS^T Q). The backward's two passes compute
# S and dP twice, 14 D FLOP a (query row, key) pair against FlashAttention-2's 10 D.
GEMMS = {"backward_dq_mma_kernel": 3, "backward_dq_mma_tf32_kernel": 3,
         "backward_dkdv_mma_kernel": 4, "backward_dkdv_mma_tf32_kernel": 4}


def gemms_of(family):
    return GEMMS.get(family, 2)


def tile_of(tile, D):
    """(BR, BC, THREADS) of a TILES entry at head dim D."""
    return tile(D) if callable(tile) else tile

# Trip counts of the chunk loop's inner loops, in header-address order (pre-order: a nested
# loop follows its parent and counts per iteration of it), per thread or per warp as the loop
# runs; t = (BR, BC, THREADS). Read off the SASS of nvcc 13 (sm_80 and sm_90 alike).
#   SIMT: gather K,V (BC*D/T) | S idx (BR*BC/T) > d unrolled x16 (D/16), x4 rest ((D%16)/4) |
#         mask (BR*BC/T) | softmax rows per warp (BR/warps) | O idx (BR*D/T) > keys x16 (BC/16),
#         x4 rest ((BC%16)/4)
#   MMA: thread 0's read_span of the next span (a loop over the BR rows' key counts): once per
#        span, not per chunk, and a dense or dilated span is all Nk / BC chunks, so 0 per chunk |
#        issue_chunk's 16-byte pieces of K and V (BC*D/8/T). The rest of the chunk (warp_chunk:
#        S = Q K^T, softmax, P V) is fully unrolled: no loop.
def _simt_trips(D, br, bc, t):
    w = t // 32
    return [bc * D // t, br * bc // t, D // 16, (D % 16) // 4, br * bc // t, br // w,
            br * D // t, bc // 16, (bc % 16) // 4]


def _mma_trips(D, br, bc, t):
    return [0, bc * D // 8 // t]


#   MMA_TF32: as MMA, with 16-byte pieces of 4 floats (BC*D/4/T); the chunk's products, split
#        in 3xTF32, are unrolled too.
def _mma_tf32_trips(D, br, bc, t):
    return [0, bc * D // 4 // t]


#   Backward (cuda/mma_backward_loop.cuh), per thread; 16-byte pieces of 8 (f16/bf16) or 4 (f32)
#   elements. A trip count may be a fraction: the average over the block's warps of a loop only
#   some warps run.
#   dQ pass: thread 0's read_span of the next span (0 per chunk, as the forward's) | copy_rows of
#        K, then V (BC*D/piece/T each) | the K rows' finiteness flags, `for c = tid; c < BC;
#        c += T`: BC <= T keys, one a thread, which ptxas runs in the remainder iterations before
#        its 4-way unrolled body, so that body runs 0 times (the remainder's blocks count once,
#        see below) | MMA_TF32 only: the k loop of each of the two scores<BC> (D/8 each; the
#        f16 products and the rest of the chunk are unrolled).
#   dK/dV pass: next_query_chunk's walk to the next span or head (its loop over heads, over
#        spans, and query_span's inside, then SPEC 3.4's shared pairs: key_tile_row_cut's loop
#        over the earlier branches and key_lane_weights' over the branches: 0 per chunk, they
#        run when a span ends) | prepare's per-row loop `for t = tid; t < R; t += T` (R = BC <=
#        32 rows: warp 0 alone, so ceil(BC/32) of the T/32 warps, a fraction) | copy_rows of Q,
#        then dO (BC*D/piece/T each) | MMA_TF32 only: the two scores<BC> k loops (D/8 each).
#        The chunk's seen-any test, `for t = lane; t < R; t += 32`, is one iteration (R <= 32):
#        no loop in the SASS.
#   MMA_TF32's copy_rows loops are unrolled by 2 (two LDGSTS.128 a trip, a first iteration
#   peeled off for an odd count: 8 a thread at both head dims, so 4 trips and the peeled
#   iteration's blocks, which count once, never run).
def _bwd_copy_trips(bc, D, piece, t):
    n = bc * D // piece // t
    return [n // 2 if piece == 4 else n] * 2


def _bwd_dq_trips(piece):
    def trips(D, br, bc, t):
        return [0] + _bwd_copy_trips(bc, D, piece, t) + [0] + ([D // 8] * 2 if piece == 4 else [])
    return trips


def _bwd_dkdv_trips(piece):
    def trips(D, br, bc, t):
        prepare = -(-bc // 32) / (t // 32)
        return ([0, 0, 0, 0, 0, prepare] + _bwd_copy_trips(bc, D, piece, t) +
                ([D // 8] * 2 if piece == 4 else []))
    return trips


# The dK/dV pass's option instances (is_option_instance: its dropout instance) walk without
# key_lane_weights, which only the plain instances compute (SPEC 3.4's shared pairs): one loop
# of the walk fewer.
def _bwd_dkdv_option_trips(piece):
    def trips(D, br, bc, t):
        return _bwd_dkdv_trips(piece)(D, br, bc, t)[1:]
    return trips


PROFILES = {"forward_simt_kernel": _simt_trips, "forward_mma_kernel": _mma_trips,
            "forward_mma_tf32_kernel": _mma_tf32_trips,
            "backward_dq_mma_kernel": _bwd_dq_trips(8),
            "backward_dq_mma_tf32_kernel": _bwd_dq_trips(4),
            "backward_dkdv_mma_kernel": _bwd_dkdv_trips(8),
            "backward_dkdv_mma_tf32_kernel": _bwd_dkdv_trips(4)}


# Where an option instance's loops differ from its plain instance's (model_kernel).
OPTION_PROFILES = {"backward_dkdv_mma_kernel": _bwd_dkdv_option_trips(8),
                   "backward_dkdv_mma_tf32_kernel": _bwd_dkdv_option_trips(4)}


# Blocks of the chunk loop a full chunk of a 16-byte-aligned K and V view never runs, counted 0.
#   MMA (issue_chunk): the element-by-element load of a view cp.async cannot copy (16-bit LDGs,
#   kv_vec16 = 0) and the zero fill of the rows past a span's last key (16-bit STS of RZ).
def _mma_off_path(block):
    return any(i.op == "LDG.E.U16" or (i.op == "STS.U16" and i.operands.endswith(", RZ"))
               for i in block)


# MMA_TF32 (issue_tf32_chunk): the same two paths with 32-bit elements (LDG.E, STS of RZ).
def _mma_tf32_off_path(block):
    return any(i.op == "LDG.E" or (i.op == "STS" and i.operands.endswith(", RZ")) for i in block)


# Backward (copy_rows): the element-by-element load of a view cp.async cannot copy, 16-bit
# (LDG.E.U16) or 32-bit (LDG.E) loads. Its zero fill of the rows past a chunk's end is a guarded
# store inside the loop's first block, which issues on every trip and counts.
def _bwd_off_path(element_load):
    return lambda block: any(i.op == element_load for i in block)


OFF_PATH = {"forward_mma_kernel": _mma_off_path, "forward_mma_tf32_kernel": _mma_tf32_off_path,
            "backward_dq_mma_kernel": _bwd_off_path("LDG.E.U16"),
            "backward_dkdv_mma_kernel": _bwd_off_path("LDG.E.U16"),
            "backward_dq_mma_tf32_kernel": _bwd_off_path("LDG.E"),
            "backward_dkdv_mma_tf32_kernel": _bwd_off_path("LDG.E")}


# The NaN rule's exact path (cuda/mma_unseen_pairs.cuh), which finite inputs never run: its
# test of V rows for values that are not finite (FSETP.GEU.OR of |x| against +INF, or-ed over
# the row; the 3xTF32 split's test for an infinity compiles to .AND) and its pair by
# pair sums (SHFL.IDX from a computed lane; the softmax's shuffles are SHFL.BFLY). Its blocks
# count 0, and so do its loops, which the profiles below leave out.
def _nan_rule_path(block):
    return any(i.op.startswith("SHFL.IDX") or
               (i.op.startswith("FSETP.GEU.OR") and "|" in i.operands and "+INF" in i.operands)
               for i in block)


NAN_RULE_PATH = {"forward_mma_kernel": _nan_rule_path, "forward_mma_tf32_kernel": _nan_rule_path,
                 "backward_dq_mma_kernel": _nan_rule_path,
                 "backward_dkdv_mma_kernel": _nan_rule_path,
                 "backward_dq_mma_tf32_kernel": _nan_rule_path,
                 "backward_dkdv_mma_tf32_kernel": _nan_rule_path}


# The backward's general P and dS (prob_and_ds: selection of the pairs a row sees, the flags of
# the NaN rule, post * (pre s - lse_s)) beside its usual path (prob_and_ds_seen: one fused
# multiply-add, 2^x, dP - D_i, a multiply). A chunk takes one or the other, the usual one when
# every pair of the warp's chunk is seen, post = 1 and lse_s is finite: every chunk of a dense
# or dilated problem but those that cross the causal diagonal or a span's end. The backward
# counts the usual path and none of the general one (unlike the forward, whose softmax paths
# count both): found in the SASS as the branch around the usual path, the block with the most
# unguarded MUFU.EX2 (all the chunk's 2^x in one block, its only predecessor ending in the
# branch), the general path being every block reachable from the branch's other side before
# the join (the usual block's successor). An empty set if the SASS is not of that shape.
def general_softmax_path(loop, off=frozenset()):
    cfg = loop.cfg

    def ex2(b):
        return sum(1 for i in cfg.blocks[b] if i.op == "MUFU.EX2" and not i.pred)

    usual = max(loop.blocks - off, key=lambda b: (ex2(b), -b))
    preds = [p for p in cfg.pred[usual] if p in loop.blocks]
    if ex2(usual) == 0 or len(preds) != 1 or len(cfg.succ[usual]) != 1:
        return frozenset(), None
    branch, join = preds[0], cfg.succ[usual][0]
    other = [s for s in cfg.succ[branch] if s != usual]
    if len(other) != 1:
        return frozenset(), None
    seen, stack = set(), [other[0]]
    while stack:
        b = stack.pop()
        if b in seen or b == join or b not in loop.blocks:
            continue
        seen.add(b)
        stack.extend(cfg.succ[b])
    if loop.header in seen or usual in seen:
        return frozenset(), None
    return frozenset(seen), usual


def voted_general_path(loop, off=frozenset()):
    """general_softmax_path for a dropout instance, whose draws split the usual path's 2^x over
    many blocks: the branch on the warp's vote (VOTE.ALL: every row of the chunk sees all the
    warp's keys, mma_backward_loop.cuh), both sides holding MUFU.EX2 up to their join, the
    general path the side with more instructions outside `off` (the per-lane draws), the usual
    one the other. On the plain instances this gives general_softmax_path's blocks; the usual
    side is the branch's target there and here (nvcc 13). (blocks, the usual side's entry)."""
    cfg = loop.cfg
    votes = [b for b in loop.blocks if len(cfg.succ[b]) == 2 and
             any(i.op.startswith("VOTE.ALL") for i in cfg.blocks[b])]
    if len(votes) != 1:
        return frozenset(), None
    pdom = loop.post_dominators()
    sides = [(loop.reach_before(s, pdom[votes[0]]), s) for s in cfg.succ[votes[0]]]
    if not all(any(i.op == "MUFU.EX2" for b in side for i in cfg.blocks[b]) for side, _ in sides):
        return frozenset(), None
    (_, usual), (general, _) = sorted(
        sides, key=lambda x: sum(len(cfg.blocks[b]) for b in x[0] if b not in off))
    return frozenset(general), usual


# SPEC 3.4's shared pairs in the dK/dV pass (cuda/mma_backward_loop.cuh, its weighted loop):
# what a launch that shares dilated pairs runs in place of the usual and general paths, behind
# a branch on share_pairs, recognised by the log2 of the pairs' weights (MUFU.LG2, the only
# ones in the chunk loop): every block the nearest branch above one sends its way
# (Loop.guarded_region). The model's cells are dense problems, which never take it: its blocks
# count 0, and the JSON gives their instructions. An empty set where a MUFU.LG2 is not behind
# such a branch. (The dQ pass reads its weighted shifts from a table it fills once a tile: no
# path of its own.)
def shared_pairs_path(loop):
    cfg = loop.cfg
    dom, pdom = cfg.dominators(), loop.post_dominators()
    out = set()
    for b in loop.blocks:
        if any(i.op == "MUFU.LG2" for i in cfg.blocks[b]):
            _, region = loop.guarded_region(b, dom, pdom)
            if not region:
                return frozenset()
            out |= region
    return frozenset(out)


SHARED_PAIRS_PATH = {f: shared_pairs_path for f in (
    "backward_dkdv_mma_kernel", "backward_dkdv_mma_tf32_kernel")}


GENERAL_PATH = {f: general_softmax_path for f in (
    "backward_dq_mma_kernel", "backward_dkdv_mma_kernel", "backward_dq_mma_tf32_kernel",
    "backward_dkdv_mma_tf32_kernel")}


# Shared-memory bank conflicts, an assumption per kernel (what its source says about its tiles):
# the warp-wide accesses whose lanes do not read consecutive words, each as the 4-byte words one
# wavefront of it touches, and how many there are per warp per chunk: a count, or the chunk
# loop's instructions it matches (times their trip counts). Everything else is taken to be
# conflict-free (consecutive words, or one word broadcast).
#   SIMT S = Q K^T: lane c reads element d of key c, word c * pitch + d, BR*BC/T * D times per
#     chunk; pitch is the K tile's row pitch: D before the padding, SimtProducts::key_pitch(D)
#     = D | 1 after, told apart by the OR it compiles to (simt_key_pitch_rule).
#   MMA fragments (forward_mma.cu, rows of MmaTile::kStride = D + 8 16-bit elements, pitch
#     the pitch argument): ldmatrix x4 (LDSM.16.M88.4) of K's B fragments for S = Q K^T and
#     ldmatrix x4 .trans (LDSM.16.MT88.4) of V's for P V. Each of its four 8x8 matrices is one
#     wavefront when conflict-free: the 8 rows the lanes 8i .. 8i + 7 address, 4 words each
#     (row stride pitch / 2 words, 4 banks mod 32 when padded); the matrices of one
#     instruction differ by whole rows or 4 words, the same bank pattern. The LDS RZ, [RZ]
#     nvcc puts before LDGSTS read no tile. cp.async's 16-byte writes: 8 lanes fill 128
#     contiguous bytes of one row, conflict-free at any pitch.
def _simt_access(D, br, bc, t, key_pitch):
    return [{"what": "S=QK^T LDS: K[c][d], lane = key c", "per_warp": br * bc // t * D,
             "words": [c * key_pitch for c in range(32)], "wavefronts": 1}]


def _mma_access(D, br, bc, t, pitch):
    matrix = [r * pitch // 2 + w for r in range(8) for w in range(4)]
    return [{"what": "S=QK^T LDSM.x4 of K: 8x8 matrices of 8 rows x 4 words, pitch %d B"
             % (2 * pitch),
             "match": lambda i: i.base == "LDSM" and ".MT" not in i.op,
             "words": matrix, "wavefronts": 4},
            {"what": "PV LDSM.x4.trans of V: 8x8 matrices of 8 rows x 4 words, pitch %d B"
             % (2 * pitch),
             "match": lambda i: i.base == "LDSM" and ".MT" in i.op,
             "words": matrix, "wavefronts": 4}]


# MMA_TF32 fragments (forward_mma_tf32.cu, rows of Tf32Tile::kStride = D + 4 floats): lane
#   (g, t) loads K's B fragment words at row g, columns t and t + 4 (D / 8 x BC / 8 x 2 LDS a
#   chunk) and V's at rows 2t and 2t + 1, column g (as many); both 32-bit LDS, counted here.
def _mma_tf32_access(D, br, bc, t, pitch):
    n = D // 8 * bc // 8 * 2
    return [{"what": "S=QK^T LDS of K: row g, column t, pitch %d B" % (4 * pitch), "per_warp": n,
             "words": [(l // 4) * pitch + l % 4 for l in range(32)], "wavefronts": 1},
            {"what": "PV LDS of V: row 2t, column g, pitch %d B" % (4 * pitch), "per_warp": n,
             "words": [2 * (l % 4) * pitch + l // 4 for l in range(32)], "wavefronts": 1}]


# Backward f16/bf16 (backward_mma.cu, rows of D + 8 elements): scores reads both operands with
#   ldmatrix x4 (LDSM.16.M88.4: A's 16 rows, B's n-major rows), accumulate its B operand with
#   ldmatrix x4 .trans (LDSM.16.MT88.4); the same 8-row x 4-word matrices as the forward.
def _bwd_mma_access(D, br, bc, t, pitch):
    matrix = [r * pitch // 2 + w for r in range(8) for w in range(4)]
    return [{"what": "scores LDSM.x4 (A and B operands): 8 rows x 4 words, pitch %d B"
             % (2 * pitch),
             "match": lambda i: i.base == "LDSM" and ".MT" not in i.op,
             "words": matrix, "wavefronts": 4},
            {"what": "accumulate LDSM.x4.trans (B operand): 8 rows x 4 words, pitch %d B"
             % (2 * pitch),
             "match": lambda i: i.base == "LDSM" and ".MT" in i.op,
             "words": matrix, "wavefronts": 4}]


# Backward f32 (backward_mma_tf32.cu, rows of D + 4 floats), 32-bit loads a lane: scores<N>
#   reads A at row g, column t (4 loads a k step of 8) and B at row 8n + g, column t (2 a k step
#   and n tile), D/8 k steps; accumulate<N> reads y at rows 8n + 2t, 8n + 2t + 1, column g (2 a
#   k block n and n tile nd). dQ: 2 scores<BC>, 1 accumulate<BC>; dK/dV: 2 of each (BC = R).
def _bwd_tf32_access(accumulates):
    def access(D, br, bc, t, pitch):
        scores = 2 * D // 8 * (4 + bc // 8 * 2)
        acc = accumulates * bc // 8 * D // 8 * 2
        return [{"what": "scores loads: row g, column t, pitch %d B" % (4 * pitch),
                 "per_warp": scores,
                 "words": [(l // 4) * pitch + l % 4 for l in range(32)], "wavefronts": 1},
                {"what": "accumulate loads: row 2t, column g, pitch %d B" % (4 * pitch),
                 "per_warp": acc,
                 "words": [2 * (l % 4) * pitch + l // 4 for l in range(32)], "wavefronts": 1}]
    return access


ACCESS = {"forward_simt_kernel": _simt_access, "forward_mma_kernel": _mma_access,
          "forward_mma_tf32_kernel": _mma_tf32_access,
          "backward_dq_mma_kernel": _bwd_mma_access,
          "backward_dkdv_mma_kernel": _bwd_mma_access,
          "backward_dq_mma_tf32_kernel": _bwd_tf32_access(1),
          "backward_dkdv_mma_tf32_kernel": _bwd_tf32_access(2)}


def simt_key_pitch_rule(kernel):
    """'D|1' or 'D': the SIMT K pitch the binary computes. key_pitch(D) = D | 1 compiles to an
    OR with 1 (LOP3.LUT Rd, Ra, 0x1, RZ, 0xfc: 0xfc is a | b), which the kernel has nowhere
    else; pitch D needs none."""
    for ins in kernel.instrs:
        if ins.base == "LOP3" and re.search(r", 0x1, RZ, 0xfc,", ins.operands):
            return "D|1"
    return "D"


def eval_pitch(rule, D):
    return {"D": D, "D|1": D | 1, "D+1": D + 1, "D+4": D + 4, "D+8": D + 8}.get(rule, D)


# The tile row pitch (in elements) each kernel's ACCESS is evaluated at: the SIMT one is read off
# its SASS (simt_key_pitch_rule); forward_mma's is MmaTile::kStride, from its source.
PITCH_RULES = {"forward_simt_kernel": simt_key_pitch_rule,
               "forward_mma_kernel": lambda kernel: "D+8",
               "forward_mma_tf32_kernel": lambda kernel: "D+4",
               "backward_dq_mma_kernel": lambda kernel: "D+8",
               "backward_dkdv_mma_kernel": lambda kernel: "D+8",
               "backward_dq_mma_tf32_kernel": lambda kernel: "D+4",
               "backward_dkdv_mma_tf32_kernel": lambda kernel: "D+4"}


# ---------------------------------------------------------------- instruction classes
# GEN: loads and stores through a generic address (LD, ST): the kernels' tile pointers, so
# shared memory in them (counted as its wavefronts too).
CLASSES = ["HMMA", "LDG", "LDS", "STS", "GEN", "FP32", "MUFU", "BAR", "INT", "OTHER"]
_INT = {"IMAD", "IADD3", "IADD", "LEA", "LEA.HI", "SHF", "LOP3", "LOP", "ISETP", "IABS", "SEL",
        "MOV", "PRMT", "IMNMX", "S2R", "S2UR", "CS2R", "ULDC", "UIADD3", "UMOV", "ULEA", "USHF",
        "ULOP3", "UISETP", "UIMAD", "USEL", "UPRMT", "IMUL", "SGXT", "BMSK", "POPC", "FLO",
        "R2UR", "IDP", "VIADD", "VIMNMX", "UMNMX"}


def classify(ins):
    b = ins.base
    if b in ("HMMA", "HGMMA", "IMMA"):
        return "HMMA"
    if b in ("LDG", "LDGSTS"):
        return "LDG"
    if b in ("LDS", "LDSM"):
        return "LDS"
    if b == "STS":
        return "STS"
    if b in ("LD", "ST"):
        return "GEN"
    if b in ("FFMA", "FMUL", "FADD"):
        return "FP32"
    if b == "MUFU":
        return "MUFU"
    if b == "BAR":
        return "BAR"
    if b in _INT:
        return "INT"
    return "OTHER"


def access_bytes(op):
    """Bytes one lane moves: LDG.E.128 16, .64 8, .U16/.S16 2, .U8/.S8 1, else 4."""
    for mod, n in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if mod in op:
            return n
    return 4


_MMA_SHAPES = {"16816": (16, 8, 16), "1688": (16, 8, 8), "884": (8, 8, 4), "8816": (8, 8, 16),
               "16832": (16, 8, 32), "8832": (8, 8, 32)}


def hmma_flop(op):
    """FLOP of one warp-wide tensor instruction from its shape: HMMA.16816 is m16 n8 k16,
    HGMMA.64x128x16 (a warpgroup's) m64 n128 k16."""
    m = re.search(r"\.(\d+)x(\d+)x(\d+)", op)
    if m:
        a, b, c = (int(x) for x in m.groups())
        return 2 * a * b * c
    parts = op.split(".")
    shape = _MMA_SHAPES.get(parts[1]) if len(parts) > 1 else None
    return 2 * shape[0] * shape[1] * shape[2] if shape else 0


def tensor_cost(op):
    """Tensor time of one HMMA in f16 FLOP: TF32 runs at half the f16 rate (DEVICES' sources)."""
    return 2 if "TF32" in op.split(".") else 1


def smem_wavefronts(ins):
    """Wavefronts of a conflict-free warp-wide shared access: 128 bytes each (LDS.64 two,
    LDS.128 four); LDSM moves 4 8x8 matrices of 16-bit elements (.4: 512 bytes, four)."""
    if ins.base == "LDSM":
        m = re.search(r"\.(\d)\b", ins.op.replace("LDSM.16", ""))
        return int(m.group(1)) if m else 1
    return max(1, access_bytes(ins.op) * 32 // 128)


# ---------------------------------------------------------------- the model
# Families whose per-span work counts 0 per chunk beyond its loops: the blocks that run only
# when the branch nearest above a 0-trip inner loop (PROFILES: a loop run when a span ends)
# sends control to it (sass_parse.Loop.guarded_region): the backward's read_span and
# next_query_chunk with their setup and the warp-wide reduction after read_span's loop. The
# forward's tables count those blocks once a chunk (a few percent of its instructions).
PER_SPAN_REGIONS = set(GENERAL_PATH)


def per_span_blocks(loop, trips):
    """The blocks of the guarded regions of loop's 0-trip inner loops; a region that holds a
    barrier or a tensor instruction (the chunk's own work) is left counted."""
    cfg = loop.cfg
    dom, pdom = cfg.dominators(), loop.post_dominators()
    out = set()
    for inner, n in zip(loop.descendants(), trips):
        if n != 0 or inner.header in out:
            continue
        _, region = loop.guarded_region(inner.header, dom, pdom)
        if any(i.base in ("BAR", "HMMA") for b in region for i in cfg.blocks[b]):
            continue
        out |= region
    return frozenset(out)


def chunk_loop(cfg):
    """The loop over key chunks: among loops holding a BAR, one with no BAR-holding loop inside
    it; if several, the one with the most barriers (then the largest)."""
    loops = cfg.loops()
    with_bar = [l for l in loops if l.count(lambda i: i.base == "BAR") > 0]
    inner = [l for l in with_bar if not any(o is not l and o.blocks < l.blocks for o in with_bar)]
    if not inner:
        return None
    return max(inner, key=lambda l: (l.count(lambda i: i.base == "BAR"), len(l.blocks)))


def weights(loop, trips, off_path=None, off_blocks=frozenset()):
    """Instruction weight per block of `loop`: the product of the trip counts of the inner loops
    that hold the block (trips in loop.descendants() order; None: every body once); 0 for a
    block off_path(instructions) marks as not run, and for the blocks (ids) in off_blocks."""
    w = {b: 1 for b in loop.blocks}
    for b in loop.blocks:
        if b in off_blocks or (off_path is not None and off_path(loop.cfg.blocks[b])):
            w[b] = 0
    if trips is None:
        return w
    for inner, n in zip(loop.descendants(), trips):
        for b in inner.blocks:
            w[b] *= n
    return w


def count_chunk(loop, trips, off_path=None, off_blocks=frozenset()):
    w = weights(loop, trips, off_path, off_blocks)
    counts = {c: 0 for c in CLASSES}
    ldg_bytes = hmma = wavefronts = 0
    for b in loop.blocks:
        for ins in loop.cfg.blocks[b]:
            if ins.base == "NOP":
                continue
            n = w[b]
            cls = classify(ins)
            counts[cls] += n
            if ins.pred == "!PT":  # never runs (ptxas's LDS RZ, [RZ] before LDGSTS): issue only
                continue
            if cls == "LDG":
                ldg_bytes += n * access_bytes(ins.op) * 32
            elif cls == "HMMA":
                hmma += n * hmma_flop(ins.op) * tensor_cost(ins.op)
            if cls in ("LDS", "STS", "GEN") or ins.base == "LDGSTS":  # cp.async writes smem
                wavefronts += n * smem_wavefronts(ins)
    return counts, ldg_bytes, hmma, wavefronts


def conflict_ways(words, banks):
    """Wavefronts one warp-wide access needs, per conflict-free one: the most distinct 4-byte
    words in one bank (a word read by several lanes is broadcast)."""
    per_bank = {}
    for word in words:
        per_bank.setdefault(word % banks, set()).add(word)
    return max(len(s) for s in per_bank.values())


# ---------------------------------------------------------------- dropout instances
# SPEC 11's dropout instances (the kernels' last template argument, Dropout, true) draw
# Philox4x32-10 calls in the chunk loop (cuda/dropout_tile.cuh). Their SASS is found by the
# generator's multipliers, which ptxas writes as immediates of the 32x32 -> 64-bit products
# (IMAD.WIDE.U32 and its uniform-datapath twin; M0 = 0xD2511F53, M1 = 0xCD9E8D57, printed as
# signed 32-bit numbers). A chunk whose keys are 1, 2 or 4 positions apart and start a run
# (every chunk of a dense problem and of dilation 1, 2 and 4 from a run's start: SPEC 11.1's
# QuadSlots) draws by quads: per row a loop over the chunk's block pairs (BC / 16 trips, one
# call a lane and two butterfly shuffles each); other chunks take the per-lane path
# (dropout_row_fragments' fallback, unrolled). The dense chunk is modelled: the quad loops at
# BC / 16 trips, the per-lane path counted 0 (dropout_lane_path), as the NaN rule's is.
PHILOX_MULTIPLIERS = ("-0x2daee0ad", "-0x326172a9", "0xd2511f53", "0xcd9e8d57")


def is_dropout_instance(kernel):
    """The instance for dropout alone: the last two template arguments (Variants, Dropout) are
    false, true."""
    _, args = kernel.family_and_args()
    return len(args) >= 2 and args[-2:] == ["false", "true"]


def is_philox_multiply(ins):
    return ins.base in ("IMAD", "UIMAD") and any(m in ins.operands.lower()
                                                 for m in PHILOX_MULTIPLIERS)


def quad_draw_loops(loop):
    """The inner loops of a chunk loop that draw by quads: a Philox multiply and a butterfly
    shuffle in the loop."""
    return [l for l in loop.descendants()
            if l.count(is_philox_multiply) > 0 and l.count(lambda i: i.op.startswith("SHFL.BFLY"))]


def dropout_lane_path(loop, quads):
    """The per-lane draws' blocks. With quad loops (the forward and the dQ pass: one branch
    between dropout_quad_fragments and the per-lane path): the side of a two-way branch of the
    chunk loop whose blocks (up to where both sides join) hold Philox multiplies outside the
    inner loops and no quad loop, while the other side leads to the quad loops (and holds the
    rest of those multiplies: the row's share of each call, which ptxas hoists out of the quad
    loops); of such sides the one with the most multiplying blocks. Without (below), the
    per-pair draws' own regions, or none where every draw is a pair's. (blocks, whether the
    SASS has one of these shapes)."""
    cfg = loop.cfg
    inner = set()
    for l in loop.descendants():
        inner |= l.blocks
    lane = {b for b in loop.blocks - inner if any(is_philox_multiply(i) for i in cfg.blocks[b])}
    heads = {l.header for l in quads}
    if not lane:
        return frozenset(), False
    pdom = loop.post_dominators()
    if not heads:
        # Quad draws unrolled (the dK/dV pass: dropout_key_rows_mask a key block, and a draw a
        # pair beside it, element by element): each per-pair draw is its own guarded region,
        # one without a butterfly shuffle (a quad's draw shares its bits by three of them).
        # Where no draw shares its bits (kQuadDraws false: the 3xTF32 dK/dV pass at D = 128),
        # the per-pair draws are the dense chunk's path: none is off it.
        dom = cfg.dominators()
        out = set()
        for b in lane:
            _, region = loop.guarded_region(b, dom, pdom)
            if region and not any(i.op.startswith("SHFL.BFLY") for r in region
                                  for i in cfg.blocks[r]):
                out |= region
        if lane <= out:
            return frozenset(), True
        return frozenset(out), bool(out)
    best, best_key = None, None
    for g in sorted(loop.blocks):
        if len(cfg.succ[g]) != 2:
            continue
        sides = [loop.reach_before(x, pdom[g]) for x in cfg.succ[g]]
        for a, b in ((sides[0], sides[1]), (sides[1], sides[0])):
            if lane <= a | b and a & lane and not (a & heads) and heads <= b:
                key = (len(a & lane), -len(a))
                if best is None or key > best_key:
                    best, best_key = a, key
    return frozenset(best or ()), best is not None


def model_kernel(kernel, D, dtype, tile, family):
    """One kernel at head dim D on its arch: counts per chunk and the four bounds."""
    dev = DEVICES.get(kernel.arch)
    cfg = sass_parse.Cfg(kernel.instrs)
    loop = chunk_loop(cfg)
    out = {"kernel": kernel.demangled, "family": family, "arch": kernel.arch, "dtype": dtype,
           "D": D}
    if loop is None:
        out["error"] = "no loop with a barrier (no chunk loop found)"
        return out
    br, bc, threads = tile
    inner = list(loop.descendants())
    nan_rule = NAN_RULE_PATH.get(family)
    cold = {l.header_addr for l in inner
            if nan_rule is not None and any(nan_rule(cfg.blocks[b]) for b in l.blocks)}
    quads = quad_draw_loops(loop) if is_dropout_instance(kernel) else []
    quad_heads = {l.header_addr for l in quads}
    hot = [l for l in inner if l.header_addr not in cold | quad_heads]
    trips, profiled = None, False
    profile = PROFILES.get(family)
    if is_option_instance(kernel):
        profile = OPTION_PROFILES.get(family, profile)
    if profile is not None:
        want = profile(D, br, bc, threads)
        if len(want) == len(hot):
            by_loop = {l.header_addr: n for l, n in zip(hot, want)}
            by_loop.update({h: bc // 16 for h in quad_heads})
            trips, profiled = [by_loop.get(l.header_addr, 0) for l in inner], True
    if not hot:
        profiled = True  # no inner loop: the body is what one chunk issues
    off_path = OFF_PATH.get(family)
    if nan_rule is not None:
        off_path = (lambda block, first=off_path:
                    nan_rule(block) or (first is not None and first(block)))
    lane_path = frozenset()
    if is_dropout_instance(kernel):
        lane_path, recognised = dropout_lane_path(loop, quads)
        if not recognised:
            profiled = False  # not the shape the dropout rule reads: both paths count
    shared = frozenset()
    if family in SHARED_PAIRS_PATH:
        shared = SHARED_PAIRS_PATH[family](loop)
    general, usual = frozenset(), None
    if family in GENERAL_PATH:
        general, usual = GENERAL_PATH[family](loop, shared)
        if not general and is_dropout_instance(kernel):
            general, usual = voted_general_path(loop, lane_path)
        if not general:
            profiled = False  # the SASS is not of the shape the rule reads: both paths count
    off_blocks = set(general) | lane_path | shared
    per_span = frozenset()
    if family in PER_SPAN_REGIONS and trips is not None:
        per_span = per_span_blocks(loop, trips)
        off_blocks |= per_span
    counts, ldg_bytes_warp, hmma_flop_warp, wavefronts = count_chunk(loop, trips, off_path,
                                                                     off_blocks)
    warps = threads // 32
    out.update({
        "chunk_loop": {"header": "0x%x" % loop.header_addr,
                       "static_instructions": sum(1 for _ in loop.instrs()),
                       "inner_loops": ["0x%x" % l.header_addr for l in inner],
                       "trip_counts": trips, "profiled": profiled},
        "tile": {"BR": br, "BC": bc, "threads": threads},
        "per_warp_per_chunk": counts,
    })
    if family in GENERAL_PATH:
        w = weights(loop, trips)
        out["general_softmax_path"] = {
            "blocks": sorted("0x%x" % cfg.blocks[b][0].addr for b in general),
            "instructions": sum(w[b] * len(cfg.blocks[b]) for b in general),
            "usual_path_block": "0x%x" % cfg.blocks[usual][0].addr if usual is not None else None,
            "usual_path_instructions": len(cfg.blocks[usual]) if usual is not None else None}
    if family in SHARED_PAIRS_PATH:
        w = weights(loop, trips)
        out["shared_pairs_path"] = {
            "blocks": len(shared),
            "instructions": sum(w[b] * len(cfg.blocks[b]) for b in shared)}
    if is_dropout_instance(kernel):
        w = weights(loop, trips)
        out["dropout"] = {
            "quad_loops": ["0x%x" % l.header_addr for l in quads],
            "quad_trips": bc // 16,
            "quad_instructions": sum(w[b] * len(cfg.blocks[b]) for l in quads for b in l.blocks),
            "lane_path_blocks": len(lane_path),
            "lane_path_instructions": sum(len(cfg.blocks[b]) for b in lane_path)}
    if family in PER_SPAN_REGIONS:
        out["per_span_blocks"] = {
            "blocks": len(per_span),
            "instructions": sum(len(cfg.blocks[b]) for b in per_span)}
    # Bank conflicts of the described accesses: extra wavefronts beyond one per access.
    conflicts = []
    extra = 0
    if family in ACCESS and dev is not None:
        pitch_rule = PITCH_RULES.get(family, lambda k: "D")(kernel)
        pitch = eval_pitch(pitch_rule, D)
        w = weights(loop, trips, off_path, off_blocks)
        for acc in ACCESS[family](D, br, bc, threads, pitch):
            ways = conflict_ways(acc["words"], dev["smem_banks"])
            n = acc.get("per_warp")
            if n is None:
                n = sum(w[b] for b in loop.blocks for i in cfg.blocks[b] if acc["match"](i))
            conflicts.append({"access": acc["what"], "ways": ways, "per_warp": n})
            extra += n * acc["wavefronts"] * (ways - 1)
        for c in conflicts:
            c.update({"pitch": pitch, "pitch_rule": pitch_rule})
    out["bank_conflicts"] = conflicts
    flop = 2 * gemms_of(family) * br * bc * D
    out["flop_per_chunk"] = flop
    out["global_bytes_per_chunk"] = ldg_bytes_warp * warps
    if dev is None:
        out["error"] = "no device constants for " + kernel.arch
        return out
    issue_clk = sum(counts.values()) * warps / dev["issue_per_clk_sm"]
    tensor_clk = hmma_flop_warp * warps / dev["tensor_flop_per_clk_sm"]
    smem_clk = (wavefronts + extra) * warps / dev["smem_wavefronts_per_clk_sm"]
    peak = dev["tensor_flop_per_clk_sm"]
    frac = {
        "issue": flop / max(issue_clk, tensor_clk, 1e-30) / peak,
        "smem": flop / max(smem_clk, 1e-30) / peak,
    }
    gbytes = out["global_bytes_per_chunk"]
    if gbytes > 0:
        flop_per_s = flop / gbytes * dev["hbm_gb_s"] * 1e9
        frac["bandwidth"] = flop_per_s / (peak * dev["sms"] * dev["clock_ghz"] * 1e9)
    out["clocks_per_chunk_per_sm"] = {"issue": issue_clk, "tensor": tensor_clk, "smem": smem_clk}
    out["smem_wavefronts_per_warp"] = {"conflict_free": wavefronts, "conflict_extra": extra}
    out["fraction_of_dense_f16_peak"] = frac
    out["estimate"] = min(frac.values())
    out["bound_by"] = min(frac, key=frac.get)
    out["device"] = dev["name"]
    return out


# ---------------------------------------------------------------- warp-specialised kernels
# A Hopper kernel whose warps have roles (cuda/forward_wgmma.cu, sm_90a): a producer warpgroup,
# one thread of which issues each chunk's TMA loads (UTMALDG) of K and V into a ring of stages
# guarded by mbarriers (SYNCS), and consumer warpgroups that multiply with wgmma (HGMMA), wait
# for their products (WARPGROUP.DEPBAR) and release the stage. No block-wide barrier runs per
# chunk, the roles run different loops, and a warpgroup's products run while its warps issue
# other work, so the model above (one loop, every warp alike, HMMA at issue) does not fit; these
# kernels are modelled here instead (model_ws_kernel), found by their SASS: a kernel holding
# both HGMMA and UTMALDG (is_warp_specialised).
#
# What the SASS does not say, from the kernel source: the tile (TILES: BR query rows, BC keys a
# chunk, threads: one producer warpgroup and the rest consumers, 64 rows each) and the bytes
# one TMA load brings (WS_TMA_BOX: the box is in the tensor map, a kernel parameter).
# forward_wgmma.cu: boxes of 64 columns (128 bytes of f16/bf16) x BC = 128 rows, one K and one V
# box per 64 columns of D.
WS_TMA_BOX = {"forward_wgmma_kernel": lambda D: 64 * 2 * 128}

# The special-function pipe (MUFU: 2^x, reciprocals) does 16 results a clock an SM on compute
# capability 9.0 (CUDA C++ Programming Guide, throughput of arithmetic instructions; the
# FlashAttention-3 paper's 3.9 TFLOPS of special functions on H100 SXM5 is the same rate): a
# warp's MUFU holds its sub-partition's quarter of the pipe 32 / 4 = 8 clocks.
SFU_PER_CLK_SM = {"sm_90": 16}

# The timeline of one warp (warp_timeline) takes the stall counts ptxas encoded (fixed-latency
# results) from the SASS; what the SASS leaves to scoreboards it does not time. Assumed round
# figures, not measured and not from a source (the JSON gives the chain with them halved and
# doubled): the clocks until a variable-latency instruction's result is written,
VARIABLE_LATENCY_CLK = {"MUFU": 20, "SHFL": 30, "LDS": 30, "LDSM": 30, "LDC": 15, "S2R": 20,
                        "S2UR": 20, "SYNCS": 30, "I2F": 15, "F2I": 15, "F2F": 15, "LDG": 500,
                        "LD": 500}
DEFAULT_VARIABLE_LATENCY_CLK = 30
# until its source registers are read (a read scoreboard),
READ_RELEASE_CLK = 4
# and from the tensor pipe finishing an HGMMA to WARPGROUP.DEPBAR seeing it done (the pipe's
# fill and drain; the order of mma.sync's latency; the JSON gives the chain at 0 and twice it).
WGMMA_LATENCY_CLK = 32


def device_of(arch):
    """DEVICES' constants of an arch; sm_90a (the arch-specific features wgmma, TMA and
    setmaxnreg need) runs on the same H100 as sm_90."""
    return DEVICES.get(arch) or DEVICES.get(arch.rstrip("a"))


def is_warp_specialised(kernel):
    ops = {i.base for i in kernel.instrs}
    return "HGMMA" in ops and "UTMALDG" in ops


def hgmma_shape(op):
    """(m, n, k) of HGMMA.64x128x16.F32, or None."""
    m = re.match(r"HGMMA\.(\d+)x(\d+)x(\d+)", op)
    return tuple(int(x) for x in m.groups()) if m else None


def hgmma_a_in_registers(ins):
    """Whether an HGMMA's A operand comes from registers (R24, gdesc[UR24].tnspB: wgmma's .rs
    form, P in the forward) rather than from shared memory (gdesc[UR24] alone names A's and B's
    descriptors: .ss)."""
    ops = [x.strip() for x in ins.operands.split(",")]
    return len(ops) > 1 and re.fullmatch(r"R\d+", ops[1]) is not None


def is_dummy_hgmma(ins):
    """Whether an HGMMA is the placeholder ptxas issues for a commit with no product since the
    previous one (HGMMA.64x8x16.F16 RZ, gdesc[URZ], RZ, !UPT, gsb0): it writes no register and
    reads no operand, so it only closes a group and counts no FLOP."""
    return ins.base == "HGMMA" and re.match(r"RZ\b", ins.operands) is not None


def product_kind(ins):
    """What product an HGMMA is a step of: its shape and whether A is in registers (S = Q K^T
    from shared memory, P V from registers in the forward); None for the placeholder."""
    if ins.base != "HGMMA" or is_dummy_hgmma(ins):
        return None
    return hgmma_shape(ins.op), hgmma_a_in_registers(ins)


def hgmma_accumulators(ins):
    """The registers an HGMMA accumulates into: from its first operand, m * n / 128 f32 a thread
    (a warpgroup's 128 threads hold the m x n tile)."""
    m, n, _ = hgmma_shape(ins.op)
    first = int(re.match(r"R(\d+)", ins.operands).group(1))
    return set(range(first, first + m * n // 128))


def hgmma_smem_bytes(ins):
    """Shared-memory bytes one HGMMA (one warpgroup's) reads: B, n rows of k elements, and A,
    m rows, unless A is in registers. A k of 16 (f16, bf16), 8 (tf32) or 32 (8-bit) elements is
    32 bytes a row; each operand is read once for the warpgroup (assumed)."""
    m, n, _ = hgmma_shape(ins.op)
    return n * 32 + (0 if hgmma_a_in_registers(ins) else m * 32)


def depbar_pending(ins):
    """N of WARPGROUP.DEPBAR.LE gsb0, N: the warp waits until at most N committed groups of its
    warpgroup's products are still running (wgmma.wait_group N)."""
    m = re.search(r",\s*0x([0-9a-f]+)\s*$", ins.operands)
    return int(m.group(1), 16) if m else 0


def barrier_threads(ins):
    """Threads a BAR.SYNC / BAR.ARV waits for: the count operand of a named barrier
    (BAR.SYNC.DEFER_BLOCKING R8, 0x80: 128), None for the whole block (BAR.SYNC 0x0)."""
    ops = [x.strip() for x in ins.operands.split(",")]
    return int(ops[1], 16) if len(ops) == 2 and ops[1].startswith("0x") else None


def setmaxnreg(ins):
    """('DEALLOC', 56) of USETMAXREG.DEALLOC.CTAPOOL 0x38; ('TRY_ALLOC', 224) of
    USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe0: the registers a thread keeps or asks for."""
    m = re.search(r"0x([0-9a-f]+)\s*$", ins.operands)
    return ins.op.split(".")[1], int(m.group(1), 16) if m else None


def dest_register(ins):
    """The index of the register an instruction writes first (FMUL R88, ...: 88), or None."""
    m = re.match(r"R(\d+)\b", ins.operands)
    return int(m.group(1)) if m else None


def is_elect_loop(loop):
    """ptxas's loop around a uniform-datapath instruction whose register operands may differ
    between lanes (UTMALDG): ELECT a lane, issue for it, BRA.U.ANY back while a lane is left.
    One block; it runs once per active lane, and the kernel issues its TMA loads from one."""
    if len(loop.blocks) != 1:
        return False
    blk = loop.cfg.blocks[loop.header]
    return any(i.base == "ELECT" for i in blk) and blk[-1].op.startswith("BRA.U.ANY")


def innermost_loop_holding(cfg, has, skip=lambda loop: False):
    """The innermost loop holding an instruction `has` marks (no other such loop inside it),
    leaving out the loops `skip` marks; if several, the one with the most such instructions."""
    loops = [l for l in cfg.loops() if not skip(l) and l.count(has) > 0]
    inner = [l for l in loops if not any(o is not l and o.blocks < l.blocks for o in loops)]
    if not inner:
        return None
    return max(inner, key=lambda l: (l.count(has), len(l.blocks)))


def consumer_chunk_loop(cfg):
    """A consumer's loop over chunks: the innermost loop holding an HGMMA. Its products are the
    chunk's (S = Q K^T, P V); the loops around it walk spans, and the loops inside it (an
    mbarrier wait's retry, the NaN rule's checks) hold no product."""
    return innermost_loop_holding(cfg, lambda i: i.base == "HGMMA")


def producer_chunk_loop(cfg):
    """The producer's loop over chunks: the innermost loop holding a TMA load (UTMALDG), not
    counting the elect loops ptxas wraps around each load (is_elect_loop)."""
    return innermost_loop_holding(cfg, lambda i: i.base == "UTMALDG", skip=is_elect_loop)


def _forward_edges(loop, dom):
    """succ within the loop without back edges (to a block dominating the source): the DAG one
    iteration runs on; an inner loop's body can be passed once, not repeated."""
    cfg = loop.cfg
    return {b: [s for s in cfg.succ[b] if s in loop.blocks and s not in dom[b]]
            for b in loop.blocks}


def chunk_path(loop, groups, dom, once=()):
    """The blocks one chunk runs, in order: the shortest path (fewest instructions) from the
    loop's header to a block that jumps back to it that runs a block of each of `groups` (sets
    of blocks: a block holding a product or a TMA load alone; the blocks that wait on an
    mbarrier, or arrive on one, or hold the chunk's 2^x, one of each). Shortest, because the
    other branches of a chunk loop are cases a full chunk of a dense problem does not take: the
    mask of a row that stops inside the chunk, a scale <= 0, the general softmax, the NaN rule's
    check and exact product, an mbarrier wait that retries, a chunk no row of the group takes, a
    64-bit division of a dilated span; and the groups, because a first chunk takes branches a
    later one does not (no product of the previous chunk to finish, no stage to wait for).
    Inner loops' back edges are not taken: a loop on the path runs once. `once`: the indices of
    groups the path may enter only once (a product: run once a chunk, so a path may not take
    one copy of it and then another, as the previous chunk's P V and the last chunk's); blocks
    of such a group in a row are one entry. None if no path runs every group."""
    cfg = loop.cfg
    edges = _forward_edges(loop, dom)
    member = {b: sum(1 << n for n, g in enumerate(groups) if b in g) for b in loop.blocks}
    full = (1 << len(groups)) - 1
    once_mask = sum(1 << n for n in once)
    ends = {b for b in loop.blocks if loop.header in cfg.succ[b]}
    start = (loop.header, member[loop.header])
    dist, prev = {start: len(cfg.blocks[loop.header])}, {}
    heap = [(dist[start], loop.header, member[loop.header])]
    while heap:
        d, b, mask = heapq.heappop(heap)
        if d > dist[(b, mask)]:
            continue
        if b in ends and mask == full:
            path, state = [b], (b, mask)
            while state != start:
                state = prev[state]
                path.append(state[0])
            return path[::-1]
        for s in edges[b]:
            again = member[s] & mask & ~member[b] & once_mask
            if again:
                continue
            state = (s, mask | member[s])
            nd = d + len(cfg.blocks[s])
            if nd < dist.get(state, float("inf")):
                dist[state], prev[state] = nd, (b, mask)
                heapq.heappush(heap, (nd, s, state[1]))
    return None


def _blocks_holding(loop, has):
    cfg = loop.cfg
    return {b for b in loop.blocks if any(has(i) for i in cfg.blocks[b])}


def consumer_groups(loop):
    """What a consumer's chunk runs (chunk_path's groups): each product, S = Q K^T and P V (the
    blocks holding an HGMMA of its kind, product_kind: the kernel may issue one product in
    either of two branches, as the previous chunk's P V beside the next S, or after the softmax
    at the first chunk), the placeholder HGMMA of an empty commit aside, which sits in the other
    branch of a P V that may be skipped; one of the blocks that wait on an mbarrier (the
    stage's K and V arrived) and one of those that arrive on one (the stage released); one of
    the blocks holding the chunk's 2^x (the most MUFU.EX2 of any block: the softmax's fast and
    general forms), without which a path could start products and skip the softmax as a chunk
    no row of the group takes does."""
    cfg = loop.cfg
    kinds = sorted({product_kind(i) for b in loop.blocks for i in cfg.blocks[b]} - {None})
    groups = [_blocks_holding(loop, lambda i, k=k: product_kind(i) == k) for k in kinds]
    groups.append(_blocks_holding(loop, lambda i: i.op.startswith("SYNCS.PHASECHK")))
    groups.append(_blocks_holding(loop, lambda i: i.op.startswith("SYNCS.ARRIVE")))
    ex2 = {b: sum(1 for i in cfg.blocks[b] if i.op.startswith("MUFU.EX2")) for b in loop.blocks}
    most = max(ex2.values(), default=0)
    if most > 0:
        groups.append({b for b, n in ex2.items() if n == most})
    return [g for g in groups if g]


def producer_groups(loop):
    """What the producer's chunk runs: each block holding a TMA load; one of the blocks that
    wait on an mbarrier (the stage is free) and one of those that arrive on one (the bytes to
    expect)."""
    groups = [{b} for b in _blocks_holding(loop, lambda i: i.base == "UTMALDG")]
    groups.append(_blocks_holding(loop, lambda i: i.op.startswith("SYNCS.PHASECHK")))
    groups.append(_blocks_holding(loop, lambda i: i.op.startswith("SYNCS.ARRIVE")))
    return [g for g in groups if g]


def moved_max_blocks(loop, path, accumulators):
    """The work of a chunk in which some row's maximum moved, which the shortest path skips: a
    block b off the path between consecutive path blocks u and w (u -> b -> w, u also jumping
    straight to w) that computes 2^x (alpha = 2^(m_old - m_new)) or multiplies the accumulators
    of the P V products (O's rescale). Counted, as every chunk early in a row takes it. Returns
    (u, b) pairs: b runs after u."""
    cfg, on = loop.cfg, set(path)
    out = []
    for u, w in zip(path, path[1:]):
        for b in cfg.succ[u]:
            if b in on or cfg.succ[b] != [w] or w not in cfg.succ[u]:
                continue
            blk = cfg.blocks[b]
            ex2 = any(i.op.startswith("MUFU.EX2") for i in blk)
            rescale = sum(1 for i in blk if i.base == "FMUL" and dest_register(i) in accumulators)
            if ex2 or (accumulators and 2 * rescale >= len(blk)):
                out.append((u, b))
    return out


def warp_timeline(instrs, flop_per_clk_sm, share=1, iterations=6, latency_scale=1.0,
                  wgmma_latency=WGMMA_LATENCY_CLK, sfu_clk=8):
    """Clocks one consumer warp takes per chunk running `instrs` (the chunk's path) over and
    over, in order: an instruction issues after the previous one's stall count, once the
    scoreboards it waits for are released (VARIABLE_LATENCY_CLK, READ_RELEASE_CLK) and, for a
    MUFU, once its sub-partition's MUFU pipe is free (sfu_clk a warp instruction). An HGMMA goes
    to the SM's tensor pipe, which runs the warpgroup's products one after the other at the full
    rate (one warpgroup's wgmma drives the four sub-partitions' tensor cores); a WARPGROUP.DEPBAR
    waits until no more than its N of the committed groups (an HGMMA marked gsb0 closes one)
    are running, each done wgmma_latency after the pipe finished it. share > 1: `share`
    warpgroups in lockstep (each instruction issues `share` times, each product and MUFU takes
    `share` times as long). The 4 warps of the warpgroup are taken to run alike. Returns
    (clocks per chunk, where the last chunk's went: {'tensor', 'sfu', 'scoreboard', 'issue'},
    the clocks spent waiting on each or issuing, and 'barriers': (op, clock from the chunk's
    start) of each BAR it issued)."""
    t = 0.0
    board = [0.0] * 6
    sfu_free = tensor_free = 0.0
    groups = []
    starts = []
    spent = {}
    for _ in range(iterations):
        starts.append(t)
        spent = {"tensor": 0.0, "sfu": 0.0, "scoreboard": 0.0, "issue": 0.0}
        bars = []
        for ins in instrs:
            c = ins.control()
            ready = t
            for b in range(6):
                if c["wait"] >> b & 1:
                    ready = max(ready, board[b])
            spent["scoreboard"] += ready - t
            if ins.base == "WARPGROUP" and ".DEPBAR" in ins.op:
                n = depbar_pending(ins)
                running = sorted(g for g in groups if g > ready)
                if len(running) > n:
                    spent["tensor"] += running[len(running) - n - 1] - ready
                    ready = running[len(running) - n - 1]
                groups = [g for g in groups if g > ready]
            if ins.base == "MUFU":
                if sfu_free > ready:
                    spent["sfu"] += sfu_free - ready
                    ready = sfu_free
                sfu_free = ready + sfu_clk * share
            if ins.base == "HGMMA":
                start = max(ready, tensor_free)
                if not is_dummy_hgmma(ins):
                    tensor_free = start + hmma_flop(ins.op) * tensor_cost(ins.op) * share / \
                        flop_per_clk_sm
                else:
                    tensor_free = start
                if "gsb0" in ins.operands:
                    groups.append(tensor_free + wgmma_latency)
            if c["wbar"] is not None:
                lat = VARIABLE_LATENCY_CLK.get(ins.base, DEFAULT_VARIABLE_LATENCY_CLK)
                board[c["wbar"]] = max(board[c["wbar"]], ready + lat * latency_scale)
            if c["rbar"] is not None:
                board[c["rbar"]] = max(board[c["rbar"]], ready + READ_RELEASE_CLK)
            if ins.base == "BAR":
                bars.append((ins.op, ready - starts[-1]))
            step = max(c["stall"], share, 1)
            spent["issue"] += step
            t = ready + step
    starts.append(t)
    spent["barriers"] = bars
    return (starts[-1] - starts[-3]) / 2, spent


def turn_clocks(barriers):
    """How long a warpgroup holds its turn (ping-pong): from its BAR.SYNC, the wait for the
    turn, to its BAR.ARV, which hands the turn on; None without both."""
    sync = [c for op, c in barriers if op.startswith("BAR.SYNC")]
    arv = [c for op, c in barriers if op.startswith("BAR.ARV")]
    if not sync or not arv or arv[0] < sync[0]:
        return None
    return arv[0] - sync[0]


HOPPER_OPS = ("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "SYNCS", "UTMALDG", "BAR.SYNC",
              "BAR.ARV", "ELECT", "R2UR")


def hopper_ops(instrs):
    """Counts of the instructions that run a warp-specialised chunk, by HOPPER_OPS name."""
    out = {k: 0 for k in HOPPER_OPS}
    for i in instrs:
        for k in HOPPER_OPS:
            if i.op == k or i.op.startswith(k + "."):
                out[k] += 1
    return out


def model_ws_kernel(kernel, D, dtype, tile, family):
    """A warp-specialised kernel at head dim D on its arch: the consumer's and the producer's
    chunk paths, and per chunk per SM (one block an SM) the bounds:
      tensor  every HGMMA of the consumer warpgroups at the dense f16 rate;
      issue   the busiest sub-partition's instructions at 1 a clock: warp w issues on
              sub-partition w % 4, so each holds one warp of each consumer warpgroup, and the
              first also the producer's issuing warp;
      sfu     the same sub-partition's MUFU at 8 clocks each (SFU_PER_CLK_SM);
      chain   one consumer warpgroup's chunk alone (warp_timeline): the products it waits for
              (WARPGROUP.DEPBAR) and the work between the waits, which cannot overlap its own
              waited-for products;
      smem    shared-memory bytes at 128 a clock: the HGMMAs' shared operands and the TMA's
              writes of K and V;
      hbm     the TMA's K and V bytes of the chunk at the SM's share of HBM bandwidth (no L2
              reuse between blocks, as the model above);
      turns   with ping-pong (a BAR.SYNC and a BAR.ARV of all consumer threads on the path),
              each group's time from its BAR.SYNC to its BAR.ARV, one group after the other.
    The SM's time per chunk is the largest: the consumer warpgroups are taken to alternate, one
    group's softmax while the other's products run, which FlashAttention-3's ping-pong
    enforces (ping_pong in the JSON) and which is otherwise the best case; a group's chain
    cannot be shorter, nor the products of all groups on the one tensor pipe. Without turns the
    groups may also run in lockstep, their softmaxes at once: lockstep in the JSON, the chain
    with all groups' work on the same pipes, the worst case. The estimate is the smallest
    fraction of the dense f16 peak the bounds allow; on_chip_estimate leaves out hbm, which L2
    reuse between blocks (measured at 95% hits for forward_mma) makes pessimistic."""
    dev = device_of(kernel.arch)
    cfg = sass_parse.Cfg(kernel.instrs)
    out = {"kernel": kernel.demangled, "family": family, "arch": kernel.arch, "dtype": dtype,
           "D": D, "model": "warp-specialised"}
    consumer, producer = consumer_chunk_loop(cfg), producer_chunk_loop(cfg)
    if consumer is None or producer is None:
        out["error"] = "no consumer (HGMMA) or producer (UTMALDG) chunk loop found"
        return out
    dom = cfg.dominators()
    # The products come first in consumer_groups: each runs once a chunk.
    cgroups = consumer_groups(consumer)
    products = len({product_kind(i) for i in consumer.instrs()} - {None})
    cpath = chunk_path(consumer, cgroups, dom, once=range(products))
    ppath = chunk_path(producer, producer_groups(producer), dom)
    if cpath is None or ppath is None:
        out["error"] = "no path through the chunk loop runs every product or TMA load"
        return out
    hg = [i for b in cpath for i in cfg.blocks[b] if product_kind(i) is not None]
    accumulators = set().union(*[hgmma_accumulators(i) for i in hg if hgmma_a_in_registers(i)])
    moved = moved_max_blocks(consumer, cpath, accumulators)
    order = []
    for b in cpath:
        order.append(b)
        order += [m for u, m in moved if u == b]
    cinstrs = [i for b in order for i in cfg.blocks[b] if i.base != "NOP"]
    pinstrs = [i for b in ppath for i in cfg.blocks[b] if i.base != "NOP"]
    # Inner loops the paths pass (once): the producer's elect loops run once, one lane issuing;
    # any other is a loop the rules here have no trip count for.
    inner = [l for loop, path in ((consumer, cpath), (producer, ppath))
             for l in loop.descendants() if l.header in path]
    profiled = all(is_elect_loop(l) for l in inner)
    br, bc, threads = tile
    groups = threads // 128 - 1  # one producer warpgroup, the rest consumers
    counts = {c: 0 for c in CLASSES}
    for i in cinstrs:
        counts[classify(i)] += 1
    pcounts = {c: 0 for c in CLASSES}
    for i in pinstrs:
        pcounts[classify(i)] += 1
    regs = {}
    for i in kernel.instrs:
        if i.base == "USETMAXREG":
            kind, n = setmaxnreg(i)
            regs[kind.lower()] = n
    bars = [{"op": i.op, "threads": barrier_threads(i)} for i in cinstrs if i.base == "BAR"]
    ping_pong = (any(b["op"].startswith("BAR.SYNC") and b["threads"] == 128 * groups
                     for b in bars) and
                 any(b["op"].startswith("BAR.ARV") and b["threads"] == 128 * groups
                     for b in bars))
    waits = [depbar_pending(i) for i in cinstrs if i.base == "WARPGROUP" and ".DEPBAR" in i.op]
    flop = 2 * gemms_of(family) * br * bc * D
    hgmma_flop = groups * sum(hmma_flop(i.op) * tensor_cost(i.op) for i in hg)
    tma = sum(1 for i in pinstrs if i.base == "UTMALDG")
    box = WS_TMA_BOX.get(family)
    tma_bytes = tma * box(D) if box is not None else None
    out.update({
        "chunk_loop": {"header": "0x%x" % consumer.header_addr,
                       "static_instructions": sum(1 for _ in consumer.instrs()),
                       "rule": "consumer: the innermost loop holding an HGMMA; a chunk: the "
                               "shortest path through every HGMMA block, an mbarrier wait, an "
                               "mbarrier arrive and the chunk's 2^x, plus the work of a moved "
                               "row maximum",
                       "path_blocks": ["0x%x" % cfg.blocks[b][0].addr for b in order],
                       "moved_max_blocks": ["0x%x" % cfg.blocks[m][0].addr for _, m in moved],
                       "inner_loops": ["0x%x" % l.header_addr for l in consumer.descendants()],
                       "profiled": profiled},
        "producer_loop": {"header": "0x%x" % producer.header_addr,
                          "static_instructions": sum(1 for _ in producer.instrs()),
                          "rule": "the innermost loop holding a UTMALDG, elect loops aside; a "
                                  "chunk: the shortest path through every UTMALDG block, an "
                                  "mbarrier wait and an mbarrier arrive",
                          "path_blocks": ["0x%x" % cfg.blocks[b][0].addr for b in ppath],
                          "instructions": len(pinstrs), "per_chunk": pcounts},
        "tile": {"BR": br, "BC": bc, "threads": threads, "consumer_warpgroups": groups},
        "setmaxnreg": regs,
        "per_warp_per_chunk": counts,
        "hopper_ops_per_warp_per_chunk": hopper_ops(cinstrs),
        "producer_hopper_ops_per_chunk": hopper_ops(pinstrs),
        "product_waits": waits,
        "named_barriers": bars,
        "ping_pong": ping_pong,
        "bank_conflicts": [],
        "flop_per_chunk": flop,
        "hgmma_flop_per_chunk": hgmma_flop,
        "tma_loads_per_chunk": tma,
        "global_bytes_per_chunk": tma_bytes,
    })
    if dev is None:
        out["error"] = "no device constants for " + kernel.arch
        return out
    if tma_bytes is None:
        out["error"] = "TMA box unknown for %s (WS_TMA_BOX)" % family
        return out
    sfu = SFU_PER_CLK_SM.get(kernel.arch.rstrip("a"))
    if sfu is None:
        out["error"] = "no MUFU rate for " + kernel.arch + " (SFU_PER_CLK_SM)"
        return out
    peak = dev["tensor_flop_per_clk_sm"]
    sub = dev["issue_per_clk_sm"]  # sub-partitions, one warp instruction a clock each
    sfu_clk = 32 / (sfu / sub)
    mufu_c = sum(1 for i in cinstrs if i.base == "MUFU")
    mufu_p = sum(1 for i in pinstrs if i.base == "MUFU")
    per_sub = groups * 4 // sub  # consumer warps on each sub-partition
    smem_bytes = groups * sum(hgmma_smem_bytes(i) for i in hg) + tma_bytes
    smem_rate = dev["smem_banks"] * dev["smem_bank_bytes"] * dev["smem_wavefronts_per_clk_sm"]
    hbm_rate = dev["hbm_gb_s"] / dev["sms"] / dev["clock_ghz"]  # bytes a clock an SM
    chain, spent = warp_timeline(cinstrs, peak, sfu_clk=sfu_clk)
    clk = {"tensor": hgmma_flop / peak,
           "issue": per_sub * len(cinstrs) + len(pinstrs),
           "sfu": (per_sub * mufu_c + mufu_p) * sfu_clk,
           "chain": chain,
           "smem": smem_bytes / smem_rate,
           "hbm": tma_bytes / hbm_rate}
    # Turns: while a group holds the turn the others cannot start their products, so each
    # chunk takes every group's turn one after the other.
    turn = turn_clocks(spent["barriers"]) if ping_pong else None
    if turn is not None:
        clk["turns"] = groups * turn
    frac = {k: flop / v / peak for k, v in clk.items()}
    on_chip = {k: v for k, v in frac.items() if k != "hbm"}
    sens = {}
    for name, kw in (("latencies_x0.5", {"latency_scale": 0.5}),
                     ("latencies_x2", {"latency_scale": 2.0}),
                     ("wgmma_latency_0", {"wgmma_latency": 0}),
                     ("wgmma_latency_x2", {"wgmma_latency": 2 * WGMMA_LATENCY_CLK})):
        clocks = warp_timeline(cinstrs, peak, sfu_clk=sfu_clk, **kw)[0]
        sens[name] = {"clocks": clocks, "fraction": flop / clocks / peak}
    # Lockstep: without turns the groups may run their softmaxes and products at the same time;
    # the timeline with every group's work on the same pipes. With turns it cannot happen.
    lockstep = None
    if not ping_pong:
        both = max(warp_timeline(cinstrs, peak, share=groups, sfu_clk=sfu_clk)[0], clk["issue"],
                   clk["sfu"], clk["smem"])
        lockstep = {"clocks": both, "fraction": flop / both / peak}
    out.update({
        "device": dev["name"],
        "clocks_per_chunk_per_sm": clk,
        "chain": {"clocks": chain, "waiting_on": spent, "sensitivity": sens,
                  "gemm_clocks_one_warpgroup": hgmma_flop / groups / peak,
                  "turn_clocks": turn},
        "lockstep": lockstep,
        "smem_bytes_per_chunk": smem_bytes,
        "fraction_of_dense_f16_peak": frac,
        "estimate": min(frac.values()),
        "bound_by": min(frac, key=frac.get),
        "on_chip_estimate": min(on_chip.values()),
        "on_chip_bound_by": min(on_chip, key=on_chip.get),
    })
    return out


# ---------------------------------------------------------------- driver
def find_cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for d in ("/usr/local/cuda/bin",):
        if os.access(os.path.join(d, "cuobjdump"), os.X_OK):
            return os.path.join(d, "cuobjdump")
    try:
        import nvidia  # the PyPI nvidia-cuda-cuobjdump package
        for p in nvidia.__path__:
            for c in sorted(glob.glob(os.path.join(p, "*", "bin", "cuobjdump")), reverse=True):
                if os.access(c, os.X_OK):
                    return c
    except ImportError:
        pass
    return None


_DTYPES = {"__half": "f16", "__nv_bfloat16": "bf16", "float": "f32"}


def kernel_variants(kernel, head_dims):
    """(family, dtype, [D...]) of a kernel: dtype and D from its template arguments; a kernel
    without a D argument takes D at run time, modelled at every D of head_dims."""
    family, args = kernel.family_and_args()
    dtype = next((_DTYPES[a] for a in args if a in _DTYPES), FAMILY_DTYPE.get(family, "?"))
    ds = [int(a) for a in args if re.fullmatch(r"\d+", a)]
    return family, dtype, (ds[:1] if ds else list(head_dims))


def is_option_instance(kernel):
    """The kernels' instances for the options of docs/spec.md sections 10 and 11 (window,
    softcap, ALiBi, sinks: the Variants template argument; dropout: the Dropout one; every
    kernel family has them, a template argument true): a problem without options never runs
    these, so the model of the chunk loops leaves them out and models the plain instances."""
    _, args = kernel.family_and_args()
    return "true" in args


def run_model(sass_text, kernel_re, tiles, head_dims=(64, 128),
              dtypes=("f16", "bf16"), dropout=False):
    """Rows of the plain instances; with dropout, of the dropout instances too (their rows'
    "dropout" entry says so)."""
    rows = []
    wanted = re.compile(kernel_re)
    for k in sass_parse.parse(sass_text, keep=lambda name: wanted.search(name) is not None):
        if is_option_instance(k) and not (dropout and is_dropout_instance(k)):
            continue
        family, dtype, ds = kernel_variants(k, head_dims)
        if dtype not in dtypes and family not in FAMILY_DTYPE:
            continue
        tile = tiles.get(family)
        if is_option_instance(k) and tile is TILES.get(family):  # not a --tile of the caller's
            tile = OPTION_TILES.get(family, tile)
        for D in ds:
            if D not in head_dims:
                continue
            if tile is None:
                rows.append({"kernel": k.demangled, "family": family, "arch": k.arch,
                             "dtype": dtype, "D": D,
                             "error": "tile unknown: pass --tile %s=BR,BC,THREADS" % family})
                continue
            if is_warp_specialised(k):
                rows.append(model_ws_kernel(k, D, dtype, tile_of(tile, D), family))
            else:
                rows.append(model_kernel(k, D, dtype, tile_of(tile, D), family))
    rows.sort(key=lambda r: (r["family"], r["arch"], r["dtype"], r["D"], "dropout" in r))
    return rows


def dropout_summary(rows):
    """Per (family, arch, dtype, D) with both instances modelled: the dropout instance's
    instructions a chunk beside the plain one's (scaled to the dropout instance's chunk where
    OPTION_TILES gives the two chunks of different sizes: instructions a FLOP alike), and its
    modelled time over the plain one's on
    chip (the issue and shared-memory bounds: a dropout instance reads the same bytes, so the
    HBM bound, which both share, would hide what the draws cost) and with every bound."""
    plain, drop = {}, {}
    for r in rows:
        if r.get("estimate") is None:
            continue
        key = (r["family"], r["arch"], r["dtype"], r["D"])
        (drop if "dropout" in r else plain)[key] = r
    out = []
    for key in sorted(set(plain) & set(drop)):
        p, d = plain[key], drop[key]

        def on_chip(r):
            f = r["fraction_of_dense_f16_peak"]
            return min(f["issue"], f["smem"])
        out.append({"family": key[0], "arch": key[1], "dtype": key[2], "D": key[3],
                    "plain_instructions": sum(p["per_warp_per_chunk"].values())
                    * d["flop_per_chunk"] / p["flop_per_chunk"],
                    "dropout_instructions": sum(d["per_warp_per_chunk"].values()),
                    "quad_instructions": d["dropout"]["quad_instructions"],
                    "profiled": p["chunk_loop"]["profiled"] and d["chunk_loop"]["profiled"],
                    "on_chip_time_ratio": on_chip(p) / on_chip(d),
                    "time_ratio": p["estimate"] / d["estimate"]})
    # The whole backward: both passes, weighted as backward_summary weights them (6 D FLOP a
    # pair in the dQ pass, 8 D in the dK/dV pass, each at its estimate).
    passes = {}
    for r in out:
        if r["family"] in GEMMS:
            which = "dq" if "_dq_" in r["family"] else "dkdv"
            passes.setdefault((r["arch"], r["dtype"], r["D"]), {})[which] = r
    for (arch, dtype, D), two in sorted(passes.items()):
        if len(two) != 2:
            continue
        plain_time = sum(w / plain[(two[k]["family"], arch, dtype, D)]["estimate"]
                         for k, w in (("dq", 6), ("dkdv", 8)))
        drop_time = sum(w / drop[(two[k]["family"], arch, dtype, D)]["estimate"]
                        for k, w in (("dq", 6), ("dkdv", 8)))
        out.append({"family": "backward (both passes)", "arch": arch, "dtype": dtype, "D": D,
                    "plain_instructions": None, "dropout_instructions": None,
                    "quad_instructions": None,
                    "profiled": two["dq"]["profiled"] and two["dkdv"]["profiled"],
                    "on_chip_time_ratio": None, "time_ratio": drop_time / plain_time})
    return out


def dropout_table(summary):
    lines = ["Dropout instances (SPEC 11), modelled, not measured: a dense chunk (its keys take "
             "QuadSlots), per warp; time over the plain instance's.",
             "%-24s %-5s %-4s %4s %7s %7s %8s %8s" % (
                 "kernel", "arch", "type", "D", "plain", "dropout", "on chip", "all")]
    for r in summary:
        if r["plain_instructions"] is None:  # a whole backward: time alone
            lines.append("%-24s %-5s %-4s %4s %7s %7s %8s %7.2fx%s" % (
                r["family"][:24], r["arch"], r["dtype"], r["D"], "-", "-", "-", r["time_ratio"],
                "" if r["profiled"] else " (unprofiled: an upper bound)"))
            continue
        lines.append("%-24s %-5s %-4s %4s %7s %7s %7.2fx %7.2fx%s" % (
            r["family"][:24], r["arch"], r["dtype"], r["D"], _n(r["plain_instructions"]),
            _n(r["dropout_instructions"]), r["on_chip_time_ratio"], r["time_ratio"],
            "" if r["profiled"] else " (unprofiled: an upper bound)"))
    lines += ["plain, dropout: instructions a warp issues a chunk (the per-lane draws off the "
              "dense chunk's path count 0);",
              "on chip: time with dropout over time without from the issue and shared-memory "
              "bounds; all: from every bound (HBM too, which the draws do not change);",
              "backward (both passes): the two passes' times weighted as the whole backward "
              "above weights them."]
    return lines


def backward_summary(rows):
    """The whole backward per (arch, dtype, D) with both passes modelled: per (query row, key)
    pair the dQ pass runs 6 D FLOP and the dK/dV pass 8 D, each at its estimate, one pass after
    the other on every SM, so the time-weighted fraction of the peak is
    14 / (6 / dq + 8 / dkdv); FlashAttention-2 counts 10 D a pair (2.5 forwards), the
    fraction it would report is 10/14 of that."""
    passes = {}
    for r in rows:
        if r.get("estimate") is None or r["family"] not in GEMMS or "dropout" in r:
            continue
        which = "dq" if "_dq_" in r["family"] else "dkdv"
        tf32 = "tf32" in r["family"]
        passes.setdefault((r["arch"], r["dtype"], r["D"], tf32), {})[which] = r
    out = []
    for (arch, dtype, D, _), p in sorted(passes.items()):
        if len(p) != 2:
            continue
        dq, kv = p["dq"]["estimate"], p["dkdv"]["estimate"]
        both = 14 / (6 / dq + 8 / kv)
        out.append({"arch": arch, "dtype": dtype, "D": D, "dq_estimate": dq,
                    "dkdv_estimate": kv, "estimate": both,
                    "dq_share_of_time": 6 / dq / (6 / dq + 8 / kv),
                    "flash_attention_count_estimate": both * 10 / 14})
    return out


def _n(x):
    """A count as the table prints it: whole, or to one decimal where a loop some warps skip
    makes it a fraction."""
    return "%d" % x if x == int(x) else "%.1f" % x


_ROW = "%-20s %-5s %-4s %4s %7s %7s %5s %4s %5s %5s %5s %6s %7s %7s %7s  %s"


def plain_table(rows):
    """The rows of model_kernel as table lines."""
    lines = ["Modelled, not measured (bench/gpu/sass_model.py). Per chunk of BC keys for a block "
             "of BR query rows (dK/dV pass: of BC query rows for a block of BR keys); counts per "
             "warp.",
             _ROW % ("kernel", "arch", "type", "D", "FLOP", "instr", "HMMA", "LDG", "LDS", "FP32",
                     "INT", "banks", "issue%", "smem%", "hbm%", "bound")]
    for r in rows:
        if "error" in r:
            lines.append("%-20s %-5s %-4s %4s  %s" % (r["family"][:20], r["arch"], r["dtype"],
                                                      r["D"], r["error"]))
            continue
        c, f = r["per_warp_per_chunk"], r["fraction_of_dense_f16_peak"]
        ways = [x["ways"] for x in r["bank_conflicts"] if x["per_warp"] > 0]
        bound = r["bound_by"] + ("" if r["chunk_loop"]["profiled"] else " (unprofiled)")
        if "dropout" in r:
            bound += " (dropout instance)"
        lines.append(_ROW % (
            r["family"][:20], r["arch"], r["dtype"], r["D"], r["flop_per_chunk"],
            _n(sum(c.values())), _n(c["HMMA"]), _n(c["LDG"]), _n(c["LDS"]), _n(c["FP32"]),
            _n(c["INT"]),
            "%d-way" % max(ways) if ways else "-", "%.2f%%" % (100 * f["issue"]),
            "%.2f%%" % (100 * f["smem"]), "%.2f%%" % (100 * f.get("bandwidth", 0)), bound))
    lines += [
        "instr: warp instructions issued per warp per chunk (HMMA .. INT: by class); banks: the",
        "worst bank conflict of the accesses the model describes (-: none described); issue%,",
        "smem%, hbm%: the fraction of the dense f16 tensor peak each bound allows (issue: the",
        "instructions at 4 per clock per SM, or the HMMAs at the tensor rate if slower; smem:",
        "shared-memory wavefronts at 1 per clock per SM; hbm: each block's K and V bytes at HBM",
        "bandwidth; the dK/dV pass: its Q, dO and row scalars); bound: the smallest, the",
        "estimate. FLOP: 2 GEMMs of BR x BC x D a chunk (forward), 3 (dQ pass), 4 (dK/dV pass).",
        "Backward: the usual P and dS path counts, the general one not (general_softmax_path in",
        "the JSON); its per-span work counts 0 a chunk."]
    summary = backward_summary(rows)
    if summary:
        lines.append("Whole backward (both passes), per (query row, key) pair, time-weighted: "
                     "14 D FLOP a pair")
        for b in summary:
            lines.append("  %-5s %-4s D=%-3d dQ %.2f%% dK/dV %.2f%% -> %.2f%% of the dense f16 "
                         "peak (dQ %.0f%% of the time; %.2f%% counting FlashAttention-2's 10 D)"
                         % (b["arch"], b["dtype"], b["D"], 100 * b["dq_estimate"],
                            100 * b["dkdv_estimate"], 100 * b["estimate"],
                            100 * b["dq_share_of_time"],
                            100 * b["flash_attention_count_estimate"]))
    for a in sorted({r["arch"] for r in rows if r["arch"] in DEVICES}):
        d = DEVICES[a]
        lines.append("%s = %s: %d SMs, %.2f GHz, %d FLOP/clk/SM dense f16, %d warp instr/clk/SM, "
                     "%d GB/s HBM, %d x %d-byte smem banks" % (
                         a, d["name"], d["sms"], d["clock_ghz"], d["tensor_flop_per_clk_sm"],
                         d["issue_per_clk_sm"], d["hbm_gb_s"], d["smem_banks"],
                         d["smem_bank_bytes"]))
    return lines




_WS_ROW = "%-20s %-6s %-4s %4s %7s %5s %5s %5s %4s %7s %7s %7s %7s %7s %7s %7s %9s  %s"


def ws_table(rows):
    """The rows of model_ws_kernel as table lines."""
    lines = ["Warp-specialised kernels, modelled, not measured (bench/gpu/sass_model.py, "
             "model_ws_kernel). Per chunk of BC keys for a block of BR query rows, one block an "
             "SM; counts per consumer warp.",
             _WS_ROW % ("kernel", "arch", "type", "D", "FLOP", "instr", "HGMMA", "waits", "MUFU",
                        "tensor%", "issue%", "sfu%", "chain%", "turns%", "smem%", "hbm%",
                        "lockstep%", "bound (on chip)")]
    for r in rows:
        if "error" in r:
            lines.append("%-20s %-6s %-4s %4s  %s" % (r["family"][:20], r["arch"], r["dtype"],
                                                      r["D"], r["error"]))
            continue
        c, f = r["per_warp_per_chunk"], r["fraction_of_dense_f16_peak"]
        bound = "%s (%s %.2f%%)" % (r["bound_by"], r["on_chip_bound_by"],
                                    100 * r["on_chip_estimate"])
        if not r["chunk_loop"]["profiled"]:
            bound += " (unprofiled)"
        lock = ("%.2f%%" % (100 * r["lockstep"]["fraction"]) if r["lockstep"]
                else "ping-pong")
        lines.append(_WS_ROW % (
            r["family"][:20], r["arch"], r["dtype"], r["D"], r["flop_per_chunk"],
            _n(sum(c.values())), _n(c["HMMA"]), len(r["product_waits"]), _n(c["MUFU"]),
            *("%.2f%%" % (100 * f[k]) if k in f else "-"
              for k in ("tensor", "issue", "sfu", "chain", "turns", "smem", "hbm")),
            lock, bound))
    lines += [
        "instr, HGMMA, MUFU: a consumer warp's instructions a chunk (a warpgroup's 4 warps each",
        "issue its HGMMA lines; one line is a 64xNx16 product of the warpgroup); waits: its",
        "WARPGROUP.DEPBARs (product waits) a chunk. Bounds as fractions of the dense f16 peak:",
        "tensor, every HGMMA at the peak; issue, the busiest sub-partition (one warp of each",
        "consumer warpgroup and the producer's) at 1 a clock; sfu, its MUFUs at 16 a clock an SM;",
        "chain, one warpgroup's chunk alone, its products, the waits for them and the work",
        "between (stall counts from the SASS, assumed latencies); turns, a ping-pong's turns",
        "one after the other (-: no ping-pong); smem, wgmma's shared operands and the TMA's",
        "writes at 128 bytes a clock; hbm, the TMA's K and V bytes at the SM's share of HBM",
        "bandwidth (no L2 reuse). lockstep%: the warpgroups' softmaxes at once, possible without",
        "ping-pong. bound: the smallest, the estimate; in brackets the smallest but hbm."]
    for a in sorted({r["arch"] for r in rows}):
        d = device_of(a)
        if d is None:
            continue
        lines.append("%s = %s (%s's constants): %d FLOP/clk/SM dense f16, %d sub-partitions, "
                     "%d MUFU results/clk/SM, %d GB/s HBM over %d SMs at %.2f GHz" % (
                         a, d["name"], a.rstrip("a"), d["tensor_flop_per_clk_sm"],
                         d["issue_per_clk_sm"], SFU_PER_CLK_SM.get(a.rstrip("a"), 0),
                         d["hbm_gb_s"], d["sms"], d["clock_ghz"]))
    return lines


def table(rows):
    """The results as a table a person reads: one row per kernel, arch, dtype and D; the
    warp-specialised kernels' rows in a table of their own."""
    ws = [r for r in rows if r.get("model") == "warp-specialised"]
    plain = [r for r in rows if r.get("model") != "warp-specialised"]
    lines = plain_table(plain) if plain or not ws else []
    if ws:
        lines += ws_table(ws)
    return "\n".join(lines) + "\n"


_LISTINGS = {}  # (tool, binary, size, mtime) -> cuobjdump -sass text, for callers that model twice


def sass_listing(tool, binary):
    """cuobjdump -sass of binary, or None (and a message) when it fails. A library's listing
    takes cuobjdump most of a minute, so one process asking twice (test_sass_model_lib.py models
    the forward and the backward) runs it once."""
    st = os.stat(binary)
    key = (tool, os.path.abspath(binary), st.st_size, st.st_mtime_ns)
    if key not in _LISTINGS:
        run = subprocess.run([tool, "-sass", binary], capture_output=True, text=True)
        if run.returncode != 0:
            sys.stderr.write("sass_model.py: %s -sass %s failed:\n%s" % (tool, binary, run.stderr))
            return None
        _LISTINGS[key] = run.stdout
    return _LISTINGS[key]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="+",
                    help="libdilattn.so, .o or .cubin files built with the CUDA kernels")
    ap.add_argument("--kernel", default=r"forward_\w*kernel", help="regex on the demangled name")
    ap.add_argument("--tile", action="append", default=[], help="FAMILY=BR,BC,THREADS")
    ap.add_argument("--sass", help="read this cuobjdump -sass listing instead of running cuobjdump")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--txt", help="write the table here too")
    ap.add_argument("--label", default="", help="what the binary is (commit, compiler), printed")
    ap.add_argument("--dropout", action="store_true",
                    help="model the dropout instances too, beside the plain ones")
    args = ap.parse_args(argv)
    if args.sass:
        with open(args.sass) as f:
            text = f.read()
    else:
        tool = find_cuobjdump()
        if tool is None:
            sys.stderr.write("sass_model.py: cuobjdump not found (PATH, /usr/local/cuda/bin, the "
                             "nvidia PyPI packages). Install the CUDA toolkit, or "
                             "`pip install nvidia-cuda-cuobjdump`.\n")
            return 2
        text = ""
        for binary in args.binary:
            listing = sass_listing(tool, binary)
            if listing is None:
                return 2
            text += listing
    tiles = dict(TILES)
    for t in args.tile:
        fam, _, nums = t.partition("=")
        br, bc, th = (int(x) for x in nums.split(","))
        tiles[fam] = (br, bc, th)
    rows = run_model(text, args.kernel, tiles, dropout=args.dropout)
    if not rows:
        sys.stderr.write("sass_model.py: no kernel matches %r\n" % args.kernel)
        return 1
    out = ("Binary: %s\n" % args.label if args.label else "") + table(rows)
    if args.dropout:
        out += "\n".join(dropout_table(dropout_summary(rows))) + "\n"
    sys.stdout.write(out)
    if args.txt:
        with open(args.txt, "w") as f:
            f.write(out)
    if args.json:
        with open(args.json, "w") as f:
            doc = {"model": "bench/gpu/sass_model.py (modelled, not measured)",
                   "binary": " ".join(os.path.basename(b) for b in args.binary),
                   "label": args.label, "devices": DEVICES,
                   "results": rows, "backward": backward_summary(rows)}
            if args.dropout:
                doc["dropout"] = dropout_summary(rows)
            if any(r.get("model") == "warp-specialised" for r in rows):
                doc["warp_specialised_assumptions"] = {
                    "sfu_per_clk_sm": SFU_PER_CLK_SM,
                    "variable_latency_clk": VARIABLE_LATENCY_CLK,
                    "default_variable_latency_clk": DEFAULT_VARIABLE_LATENCY_CLK,
                    "read_release_clk": READ_RELEASE_CLK,
                    "wgmma_latency_clk": WGMMA_LATENCY_CLK,
                    "tma_box_bytes": {f: b(64) for f, b in WS_TMA_BOX.items()}}
            json.dump(doc, f, indent=1, default=lambda o: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
