// attention_tile.cuh - what a forward kernel's tile is made of: the launch parameters, which
// query rows a tile holds, which keys each row sees, and element loads and conversions. The
// loop that walks a tile's keys is forward_tile_loop.cuh (forward_simt.cu) or the kernel's own
// (forward_mma.cu).
//
// SPEC 2-4 through lib/index_rules.h: a tile never re-derives a segment, offset or causal limit.
//   Dense (SPEC 2)    tile t holds rows t*BR ..; keys dense_keys(i) (0, 1, 2, ..., causal cut).
//   Dilated (SPEC 3)  one launch per branch; tile t holds BR consecutive *selected* rows of one
//                     segment (selected_position), keys dilated_keys(i): the selected rows of a
//                     segment form a dense sub-problem, causal among themselves.
//   Sparse (SPEC 4)   tile t holds BR rows of one query block; its keys are the listed key blocks
//                     of the BSR row (one "span" per block), cut by block_keys_at(i, jb). One
//                     sequence of a packed batch (SPEC 10.2) reads the batch's mask at its rows
//                     and keys (mask_q0, mask_k0): its blocks may start before its first row.
// Every row's keys are an arithmetic progression (first, step, count); rows of one tile share
// first and step and differ only in count (the causal cut), so a tile gathers key chunks once.
//
// Checked by tests/kernels/test_forward_kernels.cpp against the reference.
#ifndef DILATTN_ATTENTION_TILE_CUH
#define DILATTN_ATTENTION_TILE_CUH

#include <math.h>
#include <stdint.h>

#include "cuda_compat.cuh"
#include "index_rules.h"
#include "pair_sharing.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

enum KernelKind : int32_t { kKindDense = 0, kKindDilated = 1, kKindSparse = 2 };

// Everything a forward kernel launch needs; passed by value.
struct ForwardParams {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_stride[4], k_stride[4], v_stride[4];  // elements, [B, N, H, D] order
  float* o_acc;     // [B, H, Nq, D] f32 running output
  double* lse_acc;  // [B, H, Nq] running LSE, f64: scale * <q, k> may exceed f32's range
  // One-branch calls (dense, block-sparse, one dilated branch) write the caller's O and LSE
  // directly (forward_outputs.cuh) instead of merging into o_acc / lse_acc: o != null.
  void* o;
  int64_t o_stride[4];  // elements, [B, N, H, D] order
  void* lse;            // null: not wanted
  int32_t lse_is_f64;
  int64_t lse_stride[3];  // [B, H, N]
  // K and V rows may be copied 16 bytes at a time (forward_mma.cu): contiguous D, 16-byte
  // aligned base and strides.
  int32_t kv_vec16;
  int64_t B, Nq, Nk, H, Hkv, D;
  // lib/softmax_rules.h's score_scale(scale): s = pre * <q, k>, p = 2^(post * (s - m)).
  float score_pre, score_post;
  int32_t causal;
  int32_t kind;
  // Dilated: this launch's branch.
  int64_t w, r, branch, num_branches;
  int32_t head_mode;
  // Query tiles per segment (dilated) or per query block (sparse).
  int64_t tiles_per_group;
  // Block-sparse: device copies of the BsrMask arrays.
  const int64_t* row_ptr;
  const int64_t* col_idx;
  const int64_t* head_ptr;
  int64_t mask_heads, bq, bk, I;
  // SPEC 10.2: one sequence of a packed batch, whose rows i and keys j are the batch's rows
  // mask_q0 + i and keys mask_k0 + j, and the mask the batch's (lib/index_rules.h
  // block_range_at); 0 for every other problem.
  int64_t mask_q0, mask_k0;
  // SPEC 10.1 and 10.3, read by the kernels' variant instances only (variant_tile.cuh,
  // mma_variants.cuh; the launchers run them for every problem with one of these options).
  int64_t window_left, window_right;  // -1: unbounded
  float softcap_s;                    // c * log2(e): the softcap in the score domain; 0: off
  const double* alibi;                // device slopes, [H] or [B][H] (alibi_per_batch); null: off
  int32_t alibi_per_batch;
  double alibi_to_score;              // log2(e) / post: a natural score into the score domain
  const double* sinks;                // device [H], the call's sink logits; null: none
  // SPEC 11, read by the SIMT kernels' dropout instances only (dropout_tile.cuh; kernel_choice.h
  // sends every problem with p > 0 to them): the call's seed and offset, the smallest draw
  // that keeps a score (ceil(p 2^32), up to 2^32), and 1 / (1 - p) computed in f64.
  uint64_t dropout_seed, dropout_offset, dropout_threshold;
  float dropout_scale;
  // SPEC 10.2: a launch for one sequence of a packed batch (Problem::sequence_problem) runs a
  // problem of its own with B = 1; its dropout draws name the sequence, b = packed_sequence.
  // 0 for every other problem.
  int64_t packed_sequence;
  // SPEC 5.5: a ring's placed sub-problem (lib/internal/problem.h Placement), read by the
  // variant and dropout instances through placed_positions.cuh: row t and key t are positions
  // place_q_first + place_q_step t and place_k_first + place_k_step t of the whole problem
  // (place_Nq, place_Nk), head h its head place_h0 + h of place_H. placed = 0 for every other
  // problem.
  int32_t placed;
  int64_t place_q_first, place_q_step, place_k_first, place_k_step;
  int64_t place_Nq, place_Nk, place_h0, place_H;
  // SPEC 3.4's pairs that several branches hold, computed once (lib/pair_sharing.h): share_pairs
  // != 0 on a dilated call whose branches nest (branches_share_pairs) and whose kernel applies
  // the weights (the tensor-core kernels' plain instances, forward and backward:
  // launch_shared.cu with_shared_pairs); branch_w and branch_r
  // then hold every branch's segment length and dilation. The tile's keys an earlier branch
  // holds whole are cut out of its span (two spans: before and after them) and each lane's
  // probabilities take its pairs' weights (lane_weights).
  int32_t share_pairs;
  int64_t branch_w[kMaxSharingBranches], branch_r[kMaxSharingBranches];
};

// ---------------------------------------------------------------- element conversions
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---------------------------------------------------------------- which rows a tile holds
// Block-sparse: the mask's query block of `tile`; the launch's tiles are the blocks that meet
// the problem's rows, tiles_per_group each (launch_shared.cu, prepare_launch).
__device__ __forceinline__ int64_t tile_query_block(const ForwardParams& p, int64_t tile) {
  return first_block_at(p.mask_q0, p.bq) + tile / p.tiles_per_group;
}

// Query row of tile-local row t (0 <= t < br) of tile `tile` for head h, or -1 for none.
__device__ __forceinline__ int64_t tile_row(const ForwardParams& p, int64_t h, int64_t tile,
                                            int64_t t, int64_t br) {
  if (p.kind == kKindDense) {
    const int64_t i = tile * br + t;
    return i < p.Nq ? i : -1;
  }
  if (p.kind == kKindDilated) {
    if (!head_uses_branch(p.head_mode, h, p.branch, p.H, p.num_branches)) return -1;
    const int64_t wc = clipped_segment(p.w, p.Nq);
    const int64_t s0 = (tile / p.tiles_per_group) * wc;
    const int64_t s1 = segment_end(s0, wc, p.Nq);
    const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
    const int64_t sel = (tile % p.tiles_per_group) * br + t;  // index among selected rows
    return sel < selected_count(s0, s1, p.r, o) ? selected_position(s0, p.r, o, sel) : -1;
  }
  // The rows of the tile's query block are a range of the problem's rows (a sequence of a
  // packed batch may start or end inside the block); the block's tiles cover it from its start.
  const KeyProgression rows =
      block_range_at(tile_query_block(p, tile), p.bq, p.mask_q0, p.Nq);
  const int64_t at = (tile % p.tiles_per_group) * br + t;
  return at < rows.count ? rows.first + at : -1;
}

// The BSR row of the query block holding `tile`: its key blocks cols[0 .. count).
__device__ __forceinline__ const int64_t* tile_key_blocks(const ForwardParams& p, int64_t h,
                                                          int64_t tile, int64_t* count) {
  const int64_t hm = p.mask_heads == 1 ? 0 : h;
  const int64_t ib = tile_query_block(p, tile);
  const int64_t* rp = p.row_ptr + hm * (p.I + 1);
  *count = rp[ib + 1] - rp[ib];
  return p.col_idx + p.head_ptr[hm] + rp[ib];
}

// ---------------------------------------------------------------- shared pairs (SPEC 3.4)
// Head h's view of the call's branches for lib/pair_sharing.h's forms (branches.at(c),
// branches.used(c)), read from the launch parameters as needed.
struct HeadBranches {
  const ForwardParams& p;
  int64_t h;
  __device__ __forceinline__ SharedBranch at(int64_t c) const {
    return SharedBranch{clipped_segment(p.branch_w[c], p.Nq), p.branch_r[c],
                        head_offset(p.head_mode, h, c, p.branch_r[c], p.H)};
  }
  __device__ __forceinline__ bool used(int64_t c) const {
    return head_uses_branch(p.head_mode, h, c, p.H, p.num_branches);
  }
};

// The keys a dilated tile with shared pairs leaves out, [lo, hi) of its rows' key progression
// (lo == hi: none): those an earlier branch holds whole, the same range for every row of the
// tile (lib/pair_sharing.h, shared_skip_range_as), read at the tile's first row row0. Its key
// spans are the keys before (span 0) and after (span 1) the range. 32-bit arithmetic: the
// launcher shares pairs only below kNarrowPositions.
struct SpanCut {
  int32_t lo = 0, hi = 0;
};
__device__ __forceinline__ SpanCut tile_span_cut(const ForwardParams& p, int64_t h,
                                                 int64_t row0) {
  SpanCut cut;
  if (p.kind != kKindDilated || !p.share_pairs || row0 < 0) return cut;
  int64_t lo = 0, hi = 0;
  shared_skip_range_as<int32_t>(HeadBranches{p, h}, p.branch, p.Nq, row0, &lo, &hi);
  cut.lo = static_cast<int32_t>(lo);
  cut.hi = static_cast<int32_t>(hi);
  return cut;
}

// A lane's shared-pair weights for the tile's two spans, 4 bits each, bits 4 (4 span + 2 row +
// column parity): the lane's columns 2t and 2t + 1 of a span's start stand for all its keys of
// that span (lib/pair_sharing.h, shared_span_weights_as). Computed once a tile, before its
// chunks; one register across them. 0 without shared pairs (chunk_log_weights then gives 0).
__device__ __forceinline__ uint32_t lane_weights(const ForwardParams& p, int64_t h, int64_t i0,
                                                 int64_t i1, int64_t row0, const SpanCut& cut) {
  if (p.kind != kKindDilated || !p.share_pairs || row0 < 0) return 0;
  const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
  const int64_t first = dilated_keys(row0, p.Nq, p.w, p.r, o, false).first;
  const int64_t col = 2 * (static_cast<int64_t>(threadIdx.x) & 3);
  uint32_t packed = 0;
  for (int span = 0; span < 2; ++span) {
    const int64_t start = first + p.r * (span == 0 ? 0 : cut.hi);
    int32_t weight[2][2];
    shared_span_weights_as<int32_t>(HeadBranches{p, h}, p.num_branches, p.branch, i0, i1,
                                    start + p.r * col, start + p.r * (col + 1), weight);
    for (int x = 0; x < 4; ++x)
      packed |= static_cast<uint32_t>(weight[x / 2][x % 2]) << (4 * (4 * span + x));
  }
  return packed;
}

// A tile's shared pairs as a tensor-core kernel keeps them across its chunks: the cut (on: the
// tile has one, cut_or_null() for read_span) and the lane's weights (lane_weights). Read once
// a tile, before the chunks, by tile_shares; the instances that never share pairs keep the
// default (none).
struct TileShares {
  SpanCut cut;
  bool on = false;
  uint32_t lane_w = 0;
  __device__ __forceinline__ const SpanCut* cut_or_null() const { return on ? &cut : nullptr; }
};
__device__ __forceinline__ TileShares tile_shares(const ForwardParams& p, int64_t h,
                                                  const int64_t* rows, int r0, int r1) {
  TileShares s;
  if (!p.share_pairs) return s;
  s.on = true;
  s.cut = tile_span_cut(p, h, rows[0]);
  s.lane_w = lane_weights(p, h, rows[r0], rows[r1], rows[0], s.cut);
  return s;
}

// The lane's weights for span `span` of its chunk as log2 (mma_rows.cuh's lw), from
// lane_weights' bits; 0 everywhere without shared pairs.
__device__ __forceinline__ void chunk_log_weights(const ForwardParams& p, uint32_t packed,
                                                  int64_t span, float (&lw)[2][2]) {
  for (int x = 0; x < 4; ++x)
    lw[x / 2][x % 2] =
        p.share_pairs ? log2_of_weight(static_cast<int32_t>(
                            (packed >> (4 * (4 * static_cast<int>(span) + x))) & 15u))
                      : 0.0f;
}

// The word of a tile's per-lane table for span slot `slot` (0, or 1 for every later span: only
// a launch with shared pairs has two spans with weights), tile row `row` (kRows rows a tile) and
// key column class `col` (0 .. 7: a key's column in its chunk mod 8): row-major, so that a
// warp's read of its lanes' two words (rows 16 w + g, columns 2 t4 and 2 t4 + 1) takes 64
// consecutive words, no bank twice in a half-warp's 8-byte reads
// (tests/kernels/test_smem_banks.cpp). The forward's log weights (tile_log_weights) and the
// backward dQ pass's shifts (mma_backward_loop.cuh) are such tables.
template <int kRows>
__host__ __device__ constexpr int lane_table_word(int slot, int row, int col) {
  return (slot * kRows + row) * 8 + col;
}

// The lane's log2 weights for the tile's two spans (chunk_log_weights of lane_weights' bits)
// into `table` ([2][kRows][8], lane_table_word), once a tile, so that a chunk reads its span's
// four (chunk_log_weights_of) instead of decoding them: the lane writes and reads its own
// words, rows r0 and r0 + 8, columns 2 t4 and 2 t4 + 1, so no barrier stands between.
template <int kRows>
__device__ __forceinline__ void tile_log_weights(const ForwardParams& p, uint32_t packed, int r0,
                                                 float* table) {
  const int col = 2 * (static_cast<int>(threadIdx.x) & 3);
  for (int span = 0; span < 2; ++span) {
    float lw[2][2];
    chunk_log_weights(p, packed, span, lw);
    for (int x = 0; x < 4; ++x)
      table[lane_table_word<kRows>(span, r0 + 8 * (x / 2), col + x % 2)] = lw[x / 2][x % 2];
  }
}
template <int kRows>
__device__ __forceinline__ void chunk_log_weights_of(const float* table, int64_t span, int r0,
                                                     float (&lw)[2][2]) {
  const int col = 2 * (static_cast<int>(threadIdx.x) & 3);
  for (int x = 0; x < 4; ++x)
    lw[x / 2][x % 2] = table[lane_table_word<kRows>(span != 0 ? 1 : 0, r0 + 8 * (x / 2),
                                                    col + x % 2)];
}

// Number of key spans the tile walks: one (dense, dilated) or the row's listed blocks; two for a
// dilated tile with shared pairs (before and after the keys an earlier branch holds whole).
__device__ __forceinline__ int64_t tile_span_count(const ForwardParams& p, int64_t h,
                                                   int64_t tile) {
  if (p.kind == kKindDilated && p.share_pairs) return 2;
  if (p.kind != kKindSparse) return 1;
  int64_t count = 0;
  tile_key_blocks(p, h, tile, &count);
  return count;
}

// The keys query row i (>= 0) sees in span `span` of its tile.
__device__ __forceinline__ KeyProgression row_keys(const ForwardParams& p, int64_t h,
                                                   int64_t tile, int64_t span, int64_t i) {
  const bool causal = p.causal != 0;
  if (p.kind == kKindDense) return dense_keys(i, p.Nq, p.Nk, causal);
  if (p.kind == kKindDilated) {
    const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
    return dilated_keys(i, p.Nq, p.w, p.r, o, causal);
  }
  int64_t count = 0;
  const int64_t* cols = tile_key_blocks(p, h, tile, &count);
  return block_keys_at(i, cols[span], p.bk, p.mask_k0, p.Nq, p.Nk, causal);
}

// Run by the 32 lanes of one warp (warp 0) together: each row's key count for span `span` of the
// tile (rows < 0 see none), and the keys the rows share: span_out = {first, step, largest
// count}. The rows of a tile share first and step (one segment's selected rows, one BSR block,
// or dense keys); only the causal cut makes their counts differ. first and step are those of
// the last row with a key (0 and 1 when none has one), so the result does not depend on which
// lane read which row. A lane reads rows lane, lane + 32, ...: with one thread the rows of a
// 128-row tile took longer than the block's products on a block-sparse span of two chunks.
// cut_range: a dilated tile's with shared pairs (tile_span_cut); null in the kernel instances
// that never share pairs, whose code then holds no cut at all.
__device__ __forceinline__ void read_span(const ForwardParams& p, int64_t h, int64_t tile,
                                          int64_t span, const int64_t* rows, int br,
                                          int64_t* cnt, int64_t* span_out,
                                          const SpanCut* cut_range = nullptr) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  int64_t first = 0, step = 1, most = 0;
  int last_row = -1;  // the lane's last row with a key
  // Shared pairs (SPEC 3.4): span 0 holds the row's keys before those an earlier branch holds
  // whole, span 1 those after (cut_range, the tile's).
  const bool cut = cut_range != nullptr && p.kind == kKindDilated && p.share_pairs;
  const int64_t cut_lo = cut ? cut_range->lo : 0, cut_hi = cut ? cut_range->hi : 0;
  for (int t = lane; t < br; t += 32) {
    int64_t count = 0;
    if (rows[t] >= 0) {
      KeyProgression kp = row_keys(p, h, tile, span, rows[t]);
      if (cut) {
        const int64_t lo = cut_lo == cut_hi ? kp.count : cut_lo;  // none skipped: all in span 0
        const int64_t hi = cut_lo == cut_hi ? kp.count : cut_hi;
        kp = span == 0 ? KeyProgression{kp.first, kp.step, min_i64(kp.count, lo)}
                       : KeyProgression{kp.first + hi * kp.step, kp.step,
                                        max_i64(int64_t{0}, kp.count - hi)};
      }
      count = kp.count;
      if (count > 0) {
        first = kp.first;
        step = kp.step;
        last_row = t;
      }
    }
    cnt[t] = count;
    most = max_i64(most, count);
  }
  // Butterfly over the warp: every lane ends with the largest count and the first and step of
  // the last row with a key.
  for (int offset = 16; offset > 0; offset >>= 1) {
    const int64_t other_most = __shfl_xor_sync(0xffffffffu, most, offset);
    const int other_row = __shfl_xor_sync(0xffffffffu, last_row, offset);
    const int64_t other_first = __shfl_xor_sync(0xffffffffu, first, offset);
    const int64_t other_step = __shfl_xor_sync(0xffffffffu, step, offset);
    most = max_i64(most, other_most);
    if (other_row > last_row) {
      last_row = other_row;
      first = other_first;
      step = other_step;
    }
  }
  if (lane == 0) {
    span_out[0] = first;
    span_out[1] = step;
    span_out[2] = most;
  }
}

// ---------------------------------------------------------------- gathers
// Element [b, n, hh, d] of a [B, N, H, D] view with element strides (SPEC 1: any strides).
template <class T>
__device__ __forceinline__ T load_bnhd(const void* base, const int64_t* stride, int64_t b,
                                       int64_t n, int64_t hh, int64_t d) {
  const T* x = static_cast<const T*>(base);
  return x[b * stride[0] + n * stride[1] + hh * stride[2] + d * stride[3]];
}

// An input element as a tile element of type E: f32 (SIMT tiles) or the input dtype itself
// (WMMA tiles; f16 -> f32 -> f16 is exact).
template <class E, class T>
__device__ __forceinline__ E to_tile(T x) {
  return from_float<E>(to_float(x));
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_ATTENTION_TILE_CUH
