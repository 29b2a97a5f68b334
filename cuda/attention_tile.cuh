// attention_tile.cuh - device helpers shared by the forward kernels (forward_simt.cu,
// forward_wmma.cu): which query rows a tile holds, which keys each row sees, element
// conversions, the online-softmax step and the LSE merge of SPEC 5.
//
// SPEC 2-4 through lib/index_rules.h: a tile never re-derives a segment, offset or causal limit.
//   Dense (SPEC 2)    tile t holds rows t*BR ..; keys dense_keys(i) (0, 1, 2, ..., causal cut).
//   Dilated (SPEC 3)  one launch per branch; tile t holds BR consecutive *selected* rows of one
//                     segment (selected_position), keys dilated_keys(i): the selected rows of a
//                     segment form a dense sub-problem, causal among themselves.
//   Sparse (SPEC 4)   tile t holds BR rows of one query block; its keys are the listed key blocks
//                     of the BSR row (one "span" per block), cut by block_keys(i, jb).
// Every row's keys are an arithmetic progression (first, step, count); rows of one tile share
// first and step and differ only in count (the causal cut), so a tile gathers key chunks once.
// Branches merge into a running (O, LSE) in f32 workspace with SPEC 5's stable update.
//
// Checked by tests/kernels/test_forward_kernels.cpp against the reference.
#ifndef DILATTN_ATTENTION_TILE_CUH
#define DILATTN_ATTENTION_TILE_CUH

#include <math.h>
#include <stdint.h>

#include "cuda_compat.cuh"
#include "index_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

enum KernelKind : int32_t { kKindDense = 0, kKindDilated = 1, kKindSparse = 2 };

// Everything a forward kernel launch needs; passed by value.
struct ForwardParams {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_stride[4], k_stride[4], v_stride[4];  // elements, [B, N, H, D] order
  float* o_acc;    // [B, H, Nq, D] f32 running output
  float* lse_acc;  // [B, H, Nq] f32 running LSE
  int64_t B, Nq, Nk, H, Hkv, D;
  float scale;
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
  const int64_t ib = tile / p.tiles_per_group;
  const int64_t in_block = (tile % p.tiles_per_group) * br + t;
  const int64_t i = ib * p.bq + in_block;
  return (in_block < p.bq && i < p.Nq) ? i : -1;
}

// The BSR row of the query block holding `tile`: its key blocks cols[0 .. count).
__device__ __forceinline__ const int64_t* tile_key_blocks(const ForwardParams& p, int64_t h,
                                                          int64_t tile, int64_t* count) {
  const int64_t hm = p.mask_heads == 1 ? 0 : h;
  const int64_t ib = tile / p.tiles_per_group;
  const int64_t* rp = p.row_ptr + hm * (p.I + 1);
  *count = rp[ib + 1] - rp[ib];
  return p.col_idx + p.head_ptr[hm] + rp[ib];
}

// Number of key spans the tile walks: one (dense, dilated) or the row's listed blocks.
__device__ __forceinline__ int64_t tile_span_count(const ForwardParams& p, int64_t h,
                                                   int64_t tile) {
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
  return block_keys(i, cols[span], p.bk, p.Nq, p.Nk, causal);
}

// Run by one thread per block: each row's key count for span `span` of the tile (rows < 0 see
// none), and the keys the rows share: span_out = {first, step, largest count}. The rows of a
// tile share first and step (one segment's selected rows, one BSR block, or dense keys); only
// the causal cut makes their counts differ.
__device__ __forceinline__ void read_span(const ForwardParams& p, int64_t h, int64_t tile,
                                          int64_t span, const int64_t* rows, int br,
                                          int64_t* cnt, int64_t* span_out) {
  int64_t first = 0, step = 1, most = 0;
  for (int t = 0; t < br; ++t) {
    int64_t count = 0;
    if (rows[t] >= 0) {
      const KeyProgression kp = row_keys(p, h, tile, span, rows[t]);
      count = kp.count;
      if (count > 0) {
        first = kp.first;
        step = kp.step;
      }
    }
    cnt[t] = count;
    most = max_i64(most, count);
  }
  span_out[0] = first;
  span_out[1] = step;
  span_out[2] = most;
}

// ---------------------------------------------------------------- gathers
// Element [b, n, hh, d] of a [B, N, H, D] view with element strides.
template <class T>
__device__ __forceinline__ float load_bnhd(const void* base, const int64_t* stride, int64_t b,
                                           int64_t n, int64_t hh, int64_t d) {
  const T* x = static_cast<const T*>(base);
  return to_float(x[b * stride[0] + n * stride[1] + hh * stride[2] + d * stride[3]]);
}

// ---------------------------------------------------------------- softmax and merge
// One online-softmax step for a row (FlashAttention's m, l): the chunk's max mx and the new
// running max. Returns the factor alpha that rescales the old O and l. A row that has seen no
// key keeps m = -inf and gets alpha = 1 (nothing to rescale, no NaN from -inf - -inf).
__device__ __forceinline__ float online_rescale(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
}
__device__ __forceinline__ float online_prob(float s, float m_new) {
  return m_new == -INFINITY ? 0.0f : expf(s - m_new);
}

// SPEC 5's stable merge of a branch's (o_b, lse_b) into the running (o, lse):
//   lse' = max(lse, lse_b) + log1p(exp(-|lse - lse_b|)),  o' = o e^(lse-lse') + o_b e^(lse_b-lse')
// A branch that gives the row nothing (lse_b = -inf) leaves it unchanged.
__device__ __forceinline__ float merged_lse(float lse, float lse_b) {
  if (lse_b == -INFINITY) return lse;
  if (lse == -INFINITY) return lse_b;
  return fmaxf(lse, lse_b) + log1pf(expf(-fabsf(lse - lse_b)));
}
__device__ __forceinline__ float merged_o(float o, float lse, float o_b, float lse_b,
                                          float lse_new) {
  if (lse_b == -INFINITY) return o;
  if (lse == -INFINITY) return o_b;
  return o * expf(lse - lse_new) + o_b * expf(lse_b - lse_new);
}

// ---------------------------------------------------------------- warp reductions
// Butterfly over the 32 lanes: every lane ends with the same value, in a fixed order (so the
// result does not depend on the order threads run in).
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// One row's online-softmax step over a chunk of scores s[0 .. n) (masked ones -inf), done by
// one warp: turns the scores into probabilities in place and updates the row's m and l;
// alpha receives the factor the row's O must be scaled by.
__device__ __forceinline__ void softmax_chunk_row(float* s, int n, float* m, float* l,
                                                  float* alpha) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  float mx = -INFINITY;
  for (int c = lane; c < n; c += 32) mx = fmaxf(mx, s[c]);
  mx = warp_max(mx);
  const float m_old = *m;
  const float m_new = fmaxf(m_old, mx);
  const float a = online_rescale(m_old, m_new);
  float sum = 0.0f;
  for (int c = lane; c < n; c += 32) {
    const float pr = online_prob(s[c], m_new);
    s[c] = pr;
    sum += pr;
  }
  sum = warp_sum(sum);
  __syncwarp();
  if (lane == 0) {
    *l = *l * a + sum;
    *m = m_new;
    *alpha = a;
  }
}

// The end of a tile: row t's branch result is o_b = O[t][:] / l[t], lse_b = m[t] + log l[t];
// merge it into the running (o_acc, lse_acc) of the workspace. Each row of a (b, h) belongs to
// exactly one tile per launch, so no two blocks touch the same row. lse_old and lse_new are
// br floats of scratch shared memory.
__device__ __forceinline__ void merge_tile_into_workspace(const ForwardParams& p, int64_t b,
                                                          int64_t h, const int64_t* rows,
                                                          const float* O, const float* m,
                                                          const float* l, float* lse_old,
                                                          float* lse_new, int br) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int64_t row_base = (b * p.H + h) * p.Nq;
  for (int t = tid; t < br; t += nt) {
    if (rows[t] < 0) continue;
    const float lse_b = l[t] > 0.0f ? m[t] + logf(l[t]) : -INFINITY;
    float* lse_acc = p.lse_acc + row_base + rows[t];
    lse_old[t] = *lse_acc;
    lse_new[t] = merged_lse(lse_old[t], lse_b);
    *lse_acc = lse_new[t];
  }
  __syncthreads();
  const int64_t D = p.D;
  for (int64_t idx = tid; idx < br * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D;
    if (rows[t] < 0 || !(l[t] > 0.0f)) continue;
    const float lse_b = m[t] + logf(l[t]);
    float* acc = p.o_acc + (row_base + rows[t]) * D + d;
    *acc = merged_o(*acc, lse_old[t], O[t * D + d] / l[t], lse_b, lse_new[t]);
  }
}

// Shared-memory carving: bump allocator over the dynamic buffer, 128-byte aligned pieces
// (WMMA needs 32-byte aligned tiles).
__host__ __device__ __forceinline__ size_t smem_align(size_t bytes) {
  return (bytes + 127) & ~static_cast<size_t>(127);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_ATTENTION_TILE_CUH
