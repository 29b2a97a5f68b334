// forward_tile_loop.cuh - the loop the SIMT forward kernel runs over one query tile:
// FlashAttention 2's outer structure, with the two matrix products left to the kernel
// (forward_simt.cu does them with plain loops; the tensor-core forward, forward_mma.cu, keeps
// its tiles in registers and has its own loop). One branch of SPEC 2-4 per launch.
//
//   forward_tile<Products>(p, D, smem), one block of Products::kThreads threads per
//   (query tile of BR rows, batch, head):
//     1. carve shared memory into the tiles below, then the kernel's own scratch;
//     2. the tile's query rows (tile_row, attention_tile.cuh), m = -inf, l = 0, O = 0, and Q;
//     3. for each key span (one, or one per listed BSR block) and each chunk of BC keys of it:
//          gather K and V;  S = Q K^T                        (Products::scores)
//          S = pre * S, -inf past each row's own key count   (the causal cut, other rows' keys)
//          online softmax, one warp a row: m, l, alpha, S -> P (lib/softmax_rules.h)
//          dropout instances: P = P * M_ij, after l took P   (SPEC 11, dropout_tile.cuh)
//          O = alpha O + P V                                 (Products::accumulate)
//     4. one branch (p.o set): O / l and LSE straight to the caller's tensors, and the dilated
//        gaps (forward_outputs.cuh); several: merge (O / l, LSE) into the running (O, LSE) of
//        the workspace (SPEC 3 and 5).
//
// Softmax in the base-2 domain of lib/softmax_rules.h: pre and post are score_scale(scale), so
// a huge scale never overflows f32 where the reference is finite; max_nan keeps a NaN score, so
// a NaN anywhere in a row's scores makes its O and LSE NaN; a row is empty (O = 0, LSE = -inf,
// SPEC 2) only when it met no key.
//
// Products, the kernel's part:
//   using Input (the input dtype) and Elem (the Q, K, V tiles' element type);
//   kVariants, kDropout (the SPEC 10.1/10.3 steps; SPEC 11's, only with kVariants);
//   kThreads, kBr, kBc (threads per block, query rows per tile, keys per chunk);
//   void carve(SmemCarver&, D)                            its own scratch, after the tiles;
//   static int64_t key_pitch(D)                           the K tile's row pitch, >= D;
//   void scores(const TileMemory<Elem>&, D)               S[r][c] = <Q_r, K_c>, all BR x BC;
//   void accumulate(const TileMemory<Elem>&, D, c0)       O = alpha O + P V (P in S).
// Each ends with the block's threads synchronized.
//
// Every tile lives in shared memory (no per-thread arrays: no local memory, no spills) and every
// output element is summed by one thread in a fixed order, so results are bitwise the same
// whatever order the threads run in. Checked by tests/kernels/test_forward_kernels.cpp and
// tests/kernels/test_nonfinite_kernels.cpp (emulator, against the reference).
#ifndef DILATTN_FORWARD_TILE_LOOP_CUH
#define DILATTN_FORWARD_TILE_LOOP_CUH

#include "attention_tile.cuh"
#include "dropout_tile.cuh"
#include "forward_outputs.cuh"
#include "smem_carver.cuh"
#include "softmax_rules.h"
#include "variant_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- shared memory
// The tiles the loop itself uses. E: the Q, K, V element type (Products::Elem).
template <class E>
struct TileMemory {
  E *q, *k, *v;          // [BR][D], [BC][Products::key_pitch(D)], [BC][D]
  float *s, *o;          // [BR][BC] scores, then probabilities; [BR][D] the running output
  float *m, *l, *alpha;  // [BR] running max and sum (base 2), this chunk's rescale factor
  float *keep, *add;     // [BR] the merge's weights for the workspace's O and this tile's O
  int64_t *rows, *cnt;   // [BR] query row (-1: none) and its key count in the current span
  int64_t* span;         // {first, step, largest count}: the keys the rows share
  int64_t* from;         // [BR] variant instances: the row's first key in the span (window)
};

template <class Products>
__host__ __device__ __forceinline__ TileMemory<typename Products::Elem> carve_tiles(
    SmemCarver& c, int64_t D) {
  using E = typename Products::Elem;
  constexpr size_t BR = Products::kBr, BC = Products::kBc;
  const size_t d = static_cast<size_t>(D);
  TileMemory<E> t;
  t.q = c.take<E>(BR * d);
  t.k = c.take<E>(BC * static_cast<size_t>(Products::key_pitch(D)));
  t.v = c.take<E>(BC * d);
  t.s = c.take<float>(BR * BC);
  t.o = c.take<float>(BR * d);
  t.m = c.take<float>(BR);
  t.l = c.take<float>(BR);
  t.alpha = c.take<float>(BR);
  t.keep = c.take<float>(BR);
  t.add = c.take<float>(BR);
  t.rows = c.take<int64_t>(BR);
  t.cnt = c.take<int64_t>(BR);
  t.span = c.take<int64_t>(3);
  t.from = Products::kVariants ? c.take<int64_t>(BR) : nullptr;
  return t;
}

// The dynamic shared memory a kernel built on forward_tile needs for head dim D.
template <class Products>
inline size_t tile_smem_bytes(int64_t D) {
  SmemCarver c{nullptr};
  carve_tiles<Products>(c, D);
  Products().carve(c, D);
  return c.used;
}

// ---------------------------------------------------------------- warp reductions
// Butterfly over the 32 lanes: every lane ends with the same value, in a fixed order (so the
// result does not depend on the order threads run in). max_nan, not fmaxf: a NaN must survive.
__device__ __forceinline__ float warp_max_nan(float x) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// ---------------------------------------------------------------- the softmax steps
// One row's online-softmax step over a chunk of scores s[0 .. n) (masked ones -inf), done by
// one warp (lib/softmax_rules.h): turns the scores into probabilities in place, updates the
// row's running max m and sum l, and leaves in alpha the factor the row's O is rescaled by.
__device__ __forceinline__ void softmax_chunk_row(float* s, int n, float post, float* m,
                                                  float* l, float* alpha) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  float chunk_max = -INFINITY;
  for (int c = lane; c < n; c += 32) chunk_max = max_nan(chunk_max, s[c]);
  chunk_max = warp_max_nan(chunk_max);
  const float m_old = *m;
  const float m_new = max_nan(m_old, chunk_max);
  const float shift = online_shift(m_new);
  float sum = 0.0f;
  for (int c = lane; c < n; c += 32) {
    const float prob = online_prob(s[c], shift, post);
    s[c] = prob;
    sum += prob;
  }
  sum = warp_sum(sum);
  __syncwarp();
  if (lane == 0) {
    const float a = online_rescale(m_old, m_new, post);
    *l = *l * a + sum;
    *m = m_new;
    *alpha = a;
  }
}

// The end of a tile: row t's branch result is o_b = O[t] / l[t] and lse_b = finalize_lse; merge
// it into the running (o_acc, lse_acc) of the workspace with SPEC 5's stable update. A row this
// branch gives no key (empty, SPEC 3) is left as it is. Each row of a (b, h) belongs to exactly
// one tile per launch, so no two blocks touch the same row.
template <class E>
__device__ __forceinline__ void merge_tile_into_workspace(const ForwardParams& p, int64_t b,
                                                          int64_t h, const TileMemory<E>& s,
                                                          int br, int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int64_t row_base = (b * p.H + h) * p.Nq;
  for (int t = tid; t < br; t += nt) {
    if (s.rows[t] < 0 || row_is_empty(s.m[t])) continue;
    double* lse_acc = p.lse_acc + row_base + s.rows[t];
    const double lse_old = *lse_acc;
    const double lse_b = finalize_lse(s.m[t], s.l[t], p.score_post);
    const double lse_new = merge_lse(lse_old, lse_b);
    *lse_acc = lse_new;
    s.keep[t] = static_cast<float>(merge_weight(lse_old, lse_new));
    s.add[t] = static_cast<float>(merge_weight(lse_b, lse_new)) *
               finalize_o_factor(s.m[t], s.l[t]);
  }
  __syncthreads();
  for (int64_t idx = tid; idx < br * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D;
    if (s.rows[t] < 0 || row_is_empty(s.m[t])) continue;
    float* acc = p.o_acc + (row_base + s.rows[t]) * D + d;
    *acc = *acc * s.keep[t] + s.o[idx] * s.add[t];
  }
}

// One branch: the tile's finished rows straight to the caller's O (O / l, its dtype and
// strides) and LSE; an empty row gets O = 0, LSE = -inf (finalize_o_factor, finalize_lse).
template <class T, class E>
__device__ __forceinline__ void write_tile_outputs(const ForwardParams& p, int64_t b, int64_t h,
                                                   const TileMemory<E>& s, int br, int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int64_t idx = tid; idx < br * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D, i = s.rows[t];
    if (i < 0) continue;
    store_o<T>(p, b, i, h, d, s.o[idx] * finalize_o_factor(s.m[t], s.l[t]));
    if (d == 0) store_lse(p, b, h, i, finalize_lse(s.m[t], s.l[t], p.score_post));
  }
}

// write_tile_outputs for the variant instances: with sinks (p.sinks), each row's result takes
// its head's sink once (SPEC 10.3, sink_merge); an empty row gets O = 0 and LSE = the sink.
template <class T, class E>
__device__ __forceinline__ void write_tile_outputs_with_sink(const ForwardParams& p, int64_t b,
                                                             int64_t h, const TileMemory<E>& s,
                                                             int br, int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int64_t idx = tid; idx < br * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D, i = s.rows[t];
    if (i < 0) continue;
    double lse = finalize_lse(s.m[t], s.l[t], p.score_post);
    float factor = finalize_o_factor(s.m[t], s.l[t]);
    if (p.sinks != nullptr) sink_merge(p.sinks[h], &lse, &factor);
    store_o<T>(p, b, i, h, d, s.o[idx] * factor);
    if (d == 0) store_lse(p, b, h, i, lse);
  }
}

// ---------------------------------------------------------------- the loop
template <class Products>
__device__ __forceinline__ void forward_tile(const ForwardParams& p, const int64_t D,
                                             unsigned char* smem) {
  using E = typename Products::Elem;
  using T = typename Products::Input;
  constexpr int BR = Products::kBr, BC = Products::kBc;
  constexpr bool kVariants = Products::kVariants;  // SPEC 10.1/10.3 steps (variant_tile.cuh)
  constexpr bool kDropout = Products::kDropout;    // SPEC 11 (dropout_tile.cuh)
  static_assert(!kDropout || kVariants, "a dropout instance is a variant instance (s.from)");
  SmemCarver carver{smem};
  const TileMemory<E> s = carve_tiles<Products>(carver, D);
  Products products;
  products.carve(carver, D);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int warp = tid >> 5, num_warps = nt >> 5;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);
  // K rows lie kpad elements further apart than V rows (the kernel's padding against bank
  // conflicts, forward_simt.cu's key_pitch).
  const int64_t kpad = Products::key_pitch(D) - D;

  // The tile's query rows (-1: none) and fresh softmax state.
  for (int t = tid; t < BR; t += nt) {
    s.rows[t] = tile_row(p, h, tile, t, BR);
    s.m[t] = -INFINITY;
    s.l[t] = 0.0f;
  }
  if (p.o != nullptr && p.kind == kKindDilated) write_dilated_gaps<T>(p, b, h, tile, BR);
  __syncthreads();
  bool any_row = false;
  for (int t = 0; t < BR; ++t) any_row = any_row || s.rows[t] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only

  const E zero = from_float<E>(0.0f);
  for (int64_t idx = tid; idx < BR * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D, i = s.rows[t];
    s.q[idx] = i >= 0 ? to_tile<E>(load_bnhd<T>(p.q, p.q_stride, b, i, h, d)) : zero;
    s.o[idx] = 0.0f;
  }

  float alibi_slope = 0.0f;  // variant instances: the block's ALiBi slope, score domain
  if constexpr (kVariants) alibi_slope = block_alibi_slope(p, b, h);
  const int64_t num_spans = tile_span_count(p, h, tile);
  for (int64_t span = 0; span < num_spans; ++span) {
    // Warp 0 reads each row's key progression: shared first and step, own count (and, with a
    // window, own first key: the range [from, cnt)).
    if (warp == 0) {
      if constexpr (kVariants)
        read_window_span(p, h, tile, span, s.rows, BR, s.from, s.cnt, s.span);
      else
        read_span(p, h, tile, span, s.rows, BR, s.cnt, s.span);
    }
    __syncthreads();
    const int64_t first = s.span[0], step = s.span[1], most = s.span[2];

    for (int64_t c0 = 0; c0 < most; c0 += BC) {
      const int64_t cn = min_i64(BC, most - c0);  // keys in this chunk
      // K and V rows of the chunk (K at its key_pitch); zero past it, so the products there are
      // exact zeros.
      for (int64_t idx = tid; idx < BC * D; idx += nt) {
        const int64_t c = idx / D, d = idx % D;
        const int64_t j = first + step * (c0 + c);
        const E kval = c < cn ? to_tile<E>(load_bnhd<T>(p.k, p.k_stride, b, j, hk, d)) : zero;
        s.k[idx + c * kpad] = kval;
        s.v[idx] = c < cn ? to_tile<E>(load_bnhd<T>(p.v, p.v_stride, b, j, hk, d)) : zero;
      }
      __syncthreads();
      products.scores(s, D);
      // Scale, and mask a key past the row's own count: -inf, probability exactly 0.
      if constexpr (kVariants) {  // also before the row's first key; softcap and ALiBi
        for (int idx = tid; idx < BR * BC; idx += nt) {
          const int t = idx / BC, c = idx % BC;
          const int64_t at = c0 + c;
          s.s[idx] = (c < cn && at >= s.from[t] && at < s.cnt[t])
                         ? variant_score(p, s.s[idx] * p.score_pre, alibi_slope, s.rows[t],
                                         first + step * at)
                         : -INFINITY;
        }
      } else {
        for (int idx = tid; idx < BR * BC; idx += nt) {
          const int t = idx / BC, c = idx % BC;
          s.s[idx] = (c < cn && c0 + c < s.cnt[t]) ? s.s[idx] * p.score_pre : -INFINITY;
        }
      }
      __syncthreads();
      for (int t = warp; t < BR; t += num_warps)
        softmax_chunk_row(s.s + t * BC, BC, p.score_post, s.m + t, s.l + t, s.alpha + t);
      __syncthreads();
      if constexpr (kDropout) {
        // SPEC 11: each probability the row sees times its factor M_ij, after the row's sum l
        // took it (LSE is the softmax's); a dropped key's term is 0 * v_j.
        for (int idx = tid; idx < BR * BC; idx += nt) {
          const int t = idx / BC, c = idx % BC;
          const int64_t at = c0 + c;
          if (c < cn && at >= s.from[t] && at < s.cnt[t])
            s.s[idx] *= dropout_factor(p, b, h, s.rows[t], first + step * at);
        }
        __syncthreads();
      }
      products.accumulate(s, D, c0);
    }
    __syncthreads();  // span and cnt are rewritten by the next span
  }
  // Several branches merge into a workspace the launcher started at the sinks (launch.cu).
  if (p.o == nullptr)
    merge_tile_into_workspace(p, b, h, s, BR, D);
  else if constexpr (kVariants)
    write_tile_outputs_with_sink<T>(p, b, h, s, BR, D);
  else
    write_tile_outputs<T>(p, b, h, s, BR, D);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_FORWARD_TILE_LOOP_CUH
