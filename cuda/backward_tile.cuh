// backward_tile.cuh - what a backward kernel's tiles are made of (SPEC 6): the launch
// parameters, and, for the dK/dV pass, which keys a key tile holds and which query rows meet
// them. The dQ pass walks query tiles exactly as the forward does (attention_tile.cuh's
// tile_row, read_span, row_keys). The loops are backward_tile_loop.cuh; the kernels
// backward_simt.cu and backward_mma.cu (its own loops).
//
// SPEC 2-4 through lib/index_rules.h, the transpose of attention_tile.cuh's view:
//   Dense (SPEC 2)    key tile t holds keys t*BC ..; every query row meets them (causal: from
//                     causal_first_query of the tile's first key on).
//   Dilated (SPEC 3)  one launch per (branch, query head of the kv head); key tile t holds BC
//                     consecutive *selected* positions of one segment for that head's offset;
//                     the rows meeting them are the segment's selected rows (causal: from the
//                     tile's first key on), the same dense sub-problem the forward sees.
//   Sparse (SPEC 4)   key tile t holds BC keys of one key block jb; query block ib meets them
//                     when its BSR row lists jb (one "query span" per query block). One sequence
//                     of a packed batch (SPEC 10.2) reads the batch's mask at its own rows and
//                     keys, as attention_tile.cuh's tiles do.
// A row's keys are a progression (first, step, count) whose terms include the tile's keys as
// consecutive terms, so the keys of the tile a row sees are a prefix of it: tile_keys_seen.
//
// Checked by tests/kernels/test_backward_kernels.cpp against the reference.
#ifndef DILATTN_BACKWARD_TILE_CUH
#define DILATTN_BACKWARD_TILE_CUH

#include "attention_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// Everything a backward kernel launch needs; passed by value.
struct BackwardParams {
  // The index part and Q, K, V, as the forward's launches have them (o_acc, lse_acc unused).
  ForwardParams ix;
  const void* d_o;
  int64_t d_o_stride[4];
  const float* di;     // [B, H, Nq] D_i = <dO_i, O_i> (the pre-pass)
  const float* lse_s;  // [B, H, Nq] the forward's LSE in the score domain (lse_in_score_domain)
  float* dq_acc;       // [B, H, Nq, D]   sum of dS K over this and earlier launches
  float* dk_acc;       // [B, Hkv, Nk, D] sum of dS^T Q (scale applied when stored)
  float* dv_acc;       // [B, Hkv, Nk, D] sum of P^T dO
  // The pre-pass's marks of rows holding a value that is not finite, 1 or 0 (the tensor-core
  // kernels' NaN rule, backward_mma.cu): query rows whose Q or dO does, key rows whose K does.
  const int32_t* row_bad;  // [B, H, Nq]
  const int32_t* key_bad;  // [B, Hkv, Nk]
  // Q and dO rows may be copied 16 bytes at a time (as ix.kv_vec16 for K and V).
  int32_t qdo_vec16;
  int64_t head_in_group;        // dK/dV pass: query head g * (H / Hkv) + head_in_group; < 0:
                                // every head of g, in order (BackwardKernels::dkdv_all_heads)
  int64_t key_tiles_per_group;  // dK/dV pass: key tiles per segment (dilated) or key block
  // Dilated dK/dV pass with head_in_group < 0: the key tiles of one head; grid.x is H / Hkv
  // times as many, block x holding tile x % key_tiles_per_head of head x / key_tiles_per_head
  // and the heads whose key tiles are the same rows (same_key_rows).
  int64_t key_tiles_per_head;
};

// ---------------------------------------------------------------- which keys a key tile holds
// Block-sparse: the mask's key block of a key tile; the launch's key tiles are the blocks that
// meet the problem's keys, key_tiles_per_group each (launch_backward.cu, prepare_key_launch).
__device__ __forceinline__ int64_t key_tile_block(const BackwardParams& bp, int64_t tile) {
  return first_block_at(bp.ix.mask_k0, bp.ix.bk) + tile / bp.key_tiles_per_group;
}

// Key of tile-local column c (0 <= c < bc) of key tile `tile` for query head h, or -1 for none.
__device__ __forceinline__ int64_t key_tile_key(const BackwardParams& bp, int64_t h, int64_t tile,
                                                int64_t c, int64_t bc) {
  const ForwardParams& p = bp.ix;
  if (p.kind == kKindDense) {
    const int64_t j = tile * bc + c;
    return j < p.Nk ? j : -1;
  }
  if (p.kind == kKindDilated) {
    if (!head_uses_branch(p.head_mode, h, p.branch, p.H, p.num_branches)) return -1;
    const int64_t wc = clipped_segment(p.w, p.Nk);
    const int64_t s0 = (tile / bp.key_tiles_per_group) * wc;
    const int64_t s1 = segment_end(s0, wc, p.Nk);
    const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
    const int64_t sel = (tile % bp.key_tiles_per_group) * bc + c;  // index among selected keys
    return sel < selected_count(s0, s1, p.r, o) ? selected_position(s0, p.r, o, sel) : -1;
  }
  // The block's keys are a range of the problem's (a sequence of a packed batch may start or
  // end inside the block); its tiles cover it from its start, so a tile's keys are a prefix.
  const KeyProgression keys = block_range_at(key_tile_block(bp, tile), p.bk, p.mask_k0, p.Nk);
  const int64_t at = (tile % bp.key_tiles_per_group) * bc + c;
  return at < keys.count ? keys.first + at : -1;
}

// ---------------------------------------------------------------- the heads of a key tile
// Dilated, every query head of a kv head in one launch: query heads h and `leader` of one kv
// head have the same key tiles (the same rows) when both use the launch's branch with the same
// offset (SPEC 3.2-3.3). Heads of different offsets select disjoint rows, so the blocks of
// different leaders write disjoint dK/dV rows, and one block sums its heads in head order.
__device__ __forceinline__ bool same_key_rows(const ForwardParams& p, int64_t h, int64_t leader) {
  return head_uses_branch(p.head_mode, h, p.branch, p.H, p.num_branches) &&
         head_offset(p.head_mode, h, p.branch, p.r, p.H) ==
             head_offset(p.head_mode, leader, p.branch, p.r, p.H);
}
// Whether head `first + hg` (hg of the kv head's heads from `first`) is the first of its key
// rows' heads: the one whose block walks them all.
__device__ __forceinline__ bool leads_key_rows(const ForwardParams& p, int64_t first,
                                               int64_t hg) {
  const int64_t h = first + hg;
  if (!head_uses_branch(p.head_mode, h, p.branch, p.H, p.num_branches)) return false;
  for (int64_t before = 0; before < hg; ++before)
    if (same_key_rows(p, first + before, h)) return false;
  return true;
}

// ---------------------------------------------------------------- which rows meet a key tile
// Does the BSR row of query block ib (head h's mask) list key block jb? Columns ascend
// (SPEC 4), so a binary search.
__device__ __forceinline__ bool block_listed(const ForwardParams& p, int64_t h, int64_t ib,
                                             int64_t jb) {
  const int64_t hm = p.mask_heads == 1 ? 0 : h;
  const int64_t* rp = p.row_ptr + hm * (p.I + 1);
  const int64_t* cols = p.col_idx + p.head_ptr[hm];
  int64_t lo = rp[ib], hi = rp[ib + 1];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cols[mid] == jb) return true;
    if (cols[mid] < jb) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

// Number of query spans a key tile walks: one (dense, dilated) or one per query block that
// meets the problem's rows; two on a dilated launch with shared pairs (key_tile_row_cut).
__device__ __forceinline__ int64_t query_span_count(const BackwardParams& bp) {
  const ForwardParams& p = bp.ix;
  if (p.kind == kKindDilated) return p.share_pairs ? 2 : 1;
  return p.kind == kKindSparse ? blocks_meeting(p.mask_q0, p.Nq, p.bq) : 1;
}

// SPEC 3.4's shared pairs in the dK/dV pass (the tensor-core plain instances; the launcher sets
// share_pairs for no other): the rows of the key tile's segment whose pairs with the tile's
// keys an earlier branch holds whole, as the positions [*from, *to) (from = to: none), which the
// tile's query spans leave out (query_span: span 0 the rows before them, span 1 those after).
// The rule is symmetric, so they are the forward's cut (lib/pair_sharing.h
// shared_skip_range_as) read at the tile's first key: under branches_share_pairs the same for
// every key of a 64-key tile. 32-bit arithmetic, as the forward's (kNarrowPositions).
__device__ __forceinline__ void key_tile_row_cut(const ForwardParams& p, int64_t h,
                                                 int64_t first_key, int64_t* from, int64_t* to) {
  int64_t lo = 0, hi = 0;
  shared_skip_range_as<int32_t>(HeadBranches{p, h}, p.branch, p.Nq, first_key, &lo, &hi);
  const int64_t wc = clipped_segment(p.w, p.Nq);
  const int64_t first = segment_start(first_key, wc) + head_offset(p.head_mode, h, p.branch,
                                                                   p.r, p.H);
  *from = first + lo * p.r;
  *to = first + hi * p.r;
}

// The query rows of span `span` that may meet the key tile whose first key is `first_key`
// (>= 0): a progression, cut before the first row the causal rule lets see first_key (and,
// with shared pairs, around key_tile_row_cut's rows).
__device__ __forceinline__ KeyProgression query_span(const BackwardParams& bp, int64_t h,
                                                     int64_t tile, int64_t span,
                                                     int64_t first_key) {
  const ForwardParams& p = bp.ix;
  const int64_t lo = p.causal ? max_i64(0, causal_first_query(first_key, p.Nq, p.Nk)) : 0;
  if (p.kind == kKindDense) return KeyProgression{lo, 1, max_i64(0, p.Nq - lo)};
  if (p.kind == kKindDilated) {
    const int64_t wc = clipped_segment(p.w, p.Nq);
    const int64_t s0 = segment_start(first_key, wc), s1 = segment_end(s0, wc, p.Nq);
    const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
    if (!p.share_pairs) return selected_in_range(s0, s1, p.r, o, lo, p.Nq);
    int64_t from = 0, to = 0;  // shared pairs: the rows around the cut
    key_tile_row_cut(p, h, first_key, &from, &to);
    if (from == to) from = to = s1;  // none cut: every row in span 0
    return span == 0 ? selected_in_range(s0, s1, p.r, o, lo, from)
                     : selected_in_range(s0, s1, p.r, o, max_i64(lo, to), p.Nq);
  }
  const int64_t ib = first_block_at(p.mask_q0, p.bq) + span;
  if (!block_listed(p, h, ib, key_tile_block(bp, tile))) return KeyProgression{0, 1, 0};
  const KeyProgression rows = block_range_at(ib, p.bq, p.mask_q0, p.Nq);
  const int64_t skip = first_term_at_least(rows, lo);
  return KeyProgression{rows.first + skip, 1, rows.count - skip};
}

// The keys query row i (>= 0) sees among the keys' progression the tile belongs to.
__device__ __forceinline__ KeyProgression query_row_keys(const BackwardParams& bp, int64_t h,
                                                         int64_t tile, int64_t i) {
  const ForwardParams& p = bp.ix;
  const bool causal = p.causal != 0;
  if (p.kind == kKindDense) return dense_keys(i, p.Nq, p.Nk, causal);
  if (p.kind == kKindDilated)
    return dilated_keys(i, p.Nq, p.w, p.r, head_offset(p.head_mode, h, p.branch, p.r, p.H),
                        causal);
  return block_keys_at(i, key_tile_block(bp, tile), p.bk, p.mask_k0, p.Nq, p.Nk, causal);
}

// How many of the tile's keys keys[0 .. n) (consecutive terms of kp, ascending) row kp sees:
// a prefix, since a row's keys are the first kp.count terms.
__device__ __forceinline__ int64_t tile_keys_seen(const KeyProgression& kp, const int64_t* keys,
                                                  int64_t n) {
  if (n == 0) return 0;
  return max_i64(0, terms_at_most(kp, keys[n - 1]) - first_term_at_least(kp, keys[0]));
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_BACKWARD_TILE_CUH
