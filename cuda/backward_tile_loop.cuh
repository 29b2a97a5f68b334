// backward_tile_loop.cuh - the loops every backward kernel runs (SPEC 6), FlashAttention 2's
// backward structure, with the matrix products left to the kernel (backward_simt.cu with plain
// loops; backward_mma.cu runs its own, on tensor cores). One branch of SPEC 2-4 per launch.
//
// With the combined LSE of the forward, each occurrence of a key j in A(i) has
// P_ij = exp(S_ij - LSE_i) directly, so a dilated branch's pairs are just more pairs: each
// launch adds its branch's terms to f32 accumulators in the workspace, launches run one after
// another, and so every sum has one order (read it beside cpu/cpu_backward.cpp).
//
//   pre-pass (launch_backward.cu): D_i = <dO_i, O_i> and lse_s_i = lse_in_score_domain(LSE_i).
//   backward_dq_tile<Products>, one block per (query tile of BR rows, batch, head), as the
//   forward walks it (attention_tile.cuh):
//     load Q, dO, D_i, lse_s; for each key span and chunk of BC keys: gather K and V;
//       S = Q K^T, dP = dO V^T                                  (Products::scores)
//       P = 2^(post (pre S - lse_s)), dS = P (dP - D_i); 0 for keys the row does not see
//       dQ += dS K                                              (Products::accumulate_rows)
//     dq_acc[row] += dQ.
//   backward_dkdv_tile<Products>, one block per (key tile of BC keys, batch, kv head g), for
//   query head g * (H / Hkv) + head_in_group, or for every query head of g in head order
//   (head_in_group < 0; on a dilated branch a block per key tile and head, the first head of
//   each offset walking the heads of that offset; GQA sums over them in head order): gather K
//   and V; for each head, query span and chunk of BR rows meeting the tile
//   (backward_tile.cuh): load Q, dO, D_i, lse_s; the same S, dP, P, dS;
//       dV += P^T dO, dK += dS^T Q                              (Products::accumulate_cols)
//     dk_acc[key] += dK, dv_acc[key] += dV.
// The scale of dQ and dK (SPEC 6) is applied once, when the accumulators are stored.
// Dropout instances (kDropout, SPEC 11.3) regenerate each pair's factor M_ij (dropout_tile.cuh):
// dS = P (M dP - D_i) and dV += P M dO, D_i still <dO_i, O_i> of the forward's dropped O.
//
// NaN (SPEC 13): a pair a row does not see is left out (P = dS = 0, and the SIMT
// products skip it), so a NaN K or V row reaches only the rows that see it; a NaN row (LSE NaN)
// makes its own terms NaN. An empty row (LSE = -inf) has lse_s = +inf: P = 0, never NaN.
//
// Products, the kernel's part:
//   using Input, Elem;  kThreads, kBr (query rows per chunk), kBc (keys per chunk);
//   void carve(SmemCarver&, D)                              its own scratch, after the tiles;
//   void scores(a [BR][D], b [BC][D], out [BR][BC], D)      out[t][c] = <a_t, b_c>;
//   void accumulate_rows(acc [BR][D], x [BR][BC], y [BC][D], seen_lo, seen, D)
//                                                           acc[t] += sum_{c < seen[t]} x[t][c] y[c];
//   void accumulate_cols(acc [BC][D], x [BR][BC], y [BR][D], seen_lo, seen, D)
//                                                           acc[c] += sum_{t: c < seen[t]} x[t][c] y[t];
//   (variant instances, kVariants: also c >= seen_lo[t], the window's first key;
//   kDropout, only with kVariants: SPEC 11.3's factors).
// Each ends with the block's threads synchronized. Every tile lives in shared memory and every
// output element is summed by one thread (or one warp's fixed mma order): bitwise the same in
// every thread order. Checked by tests/kernels/test_backward_kernels.cpp (emulator, three
// thread orders, against the reference).
#ifndef DILATTN_BACKWARD_TILE_LOOP_CUH
#define DILATTN_BACKWARD_TILE_LOOP_CUH

#include "backward_tile.cuh"
#include "dropout_tile.cuh"
#include "smem_carver.cuh"
#include "softmax_rules.h"
#include "variant_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- shared memory
// The tiles both passes use; acc_a and acc_b are dQ ([BR][D], acc_b unused) in the dQ pass and
// dK, dV ([BC][D] each) in the dK/dV pass. E: the Q, K, V, dO element type (Products::Elem).
template <class E>
struct BackwardTiles {
  E *q, *d_o, *k, *v;      // [BR][D], [BR][D], [BC][D], [BC][D]
  float *s, *dp;           // [BR][BC]: S then P; dP then dS
  float *acc_a, *acc_b;    // see above
  float *di, *lse_s;       // [BR] the rows' D_i and LSE in the score domain
  int64_t *rows, *seen;    // [BR] query row (-1: none); keys of the chunk the row sees
  int64_t *cnt;            // [BR] dQ pass: the row's key count in the current span
  int64_t *keys;           // [BC] dK/dV pass: the tile's keys (-1: none)
  int64_t *span;           // {first, step, count}: the current span (keys or query rows)
  // Variant instances (SPEC 10.1's window): the row's first key in the span (dQ pass), and the
  // first key of the chunk the row sees, so that it sees keys [seen_lo, seen).
  int64_t *from, *seen_lo;  // [BR] each
};

template <class Products>
__host__ __device__ __forceinline__ BackwardTiles<typename Products::Elem> carve_backward_tiles(
    SmemCarver& c, int64_t D, bool dkdv) {
  using E = typename Products::Elem;
  constexpr size_t BR = Products::kBr, BC = Products::kBc;
  const size_t d = static_cast<size_t>(D);
  BackwardTiles<E> t;
  t.q = c.take<E>(BR * d);
  t.d_o = c.take<E>(BR * d);
  t.k = c.take<E>(BC * d);
  t.v = c.take<E>(BC * d);
  t.s = c.take<float>(BR * BC);
  t.dp = c.take<float>(BR * BC);
  t.acc_a = c.take<float>((dkdv ? BC : BR) * d);
  t.acc_b = dkdv ? c.take<float>(BC * d) : nullptr;
  t.di = c.take<float>(BR);
  t.lse_s = c.take<float>(BR);
  t.rows = c.take<int64_t>(BR);
  t.seen = c.take<int64_t>(BR);
  t.cnt = c.take<int64_t>(BR);
  t.keys = c.take<int64_t>(BC);
  t.span = c.take<int64_t>(3);
  t.from = Products::kVariants ? c.take<int64_t>(BR) : nullptr;
  t.seen_lo = Products::kVariants ? c.take<int64_t>(BR) : nullptr;
  return t;
}

// The dynamic shared memory of a backward pass's kernel for head dim D.
template <class Products>
inline size_t backward_smem_bytes(int64_t D, bool dkdv) {
  SmemCarver c{nullptr};
  carve_backward_tiles<Products>(c, D, dkdv);
  Products().carve(c, D);
  return c.used;
}

// ---------------------------------------------------------------- shared steps
// Rows rows[0 .. BR) of Q and dO into the tiles (zero for no row), with their D_i and lse_s.
template <class T, class E, int BR>
__device__ __forceinline__ void load_query_rows(const BackwardParams& bp, int64_t b, int64_t h,
                                                const BackwardTiles<E>& s, int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const ForwardParams& p = bp.ix;
  const E zero = from_float<E>(0.0f);
  for (int64_t idx = tid; idx < BR * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D, i = s.rows[t];
    s.q[idx] = i >= 0 ? to_tile<E>(load_bnhd<T>(p.q, p.q_stride, b, i, h, d)) : zero;
    s.d_o[idx] = i >= 0 ? to_tile<E>(load_bnhd<T>(bp.d_o, bp.d_o_stride, b, i, h, d)) : zero;
  }
  for (int t = tid; t < BR; t += nt) {
    const int64_t i = s.rows[t];
    s.di[t] = i >= 0 ? bp.di[(b * p.H + h) * p.Nq + i] : 0.0f;
    s.lse_s[t] = i >= 0 ? bp.lse_s[(b * p.H + h) * p.Nq + i] : 0.0f;
  }
}

// Key rows keys[0 .. BC) of kv head hk into the K and V tiles (zero for no key, -1), so the
// products there are exact zeros.
template <class T, class E, int BC>
__device__ __forceinline__ void load_key_rows(const ForwardParams& p, int64_t b, int64_t hk,
                                              const int64_t* keys, const BackwardTiles<E>& s,
                                              int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const E zero = from_float<E>(0.0f);
  for (int64_t idx = tid; idx < BC * D; idx += nt) {
    const int64_t c = idx / D, d = idx % D, j = keys[c];
    s.k[idx] = j >= 0 ? to_tile<E>(load_bnhd<T>(p.k, p.k_stride, b, j, hk, d)) : zero;
    s.v[idx] = j >= 0 ? to_tile<E>(load_bnhd<T>(p.v, p.v_stride, b, j, hk, d)) : zero;
  }
}

// After the two score products: S becomes P = 2^(post (pre S - lse_s)) (online_prob with the
// final LSE as the shift, lib/softmax_rules.h) and dP becomes dS = P (dP - D_i); both 0 for a
// key the row does not see (c >= seen[t]), whatever S or dP hold there.
template <class E, int BR, int BC>
__device__ __forceinline__ void probabilities_and_ds(const ForwardParams& p,
                                                     const BackwardTiles<E>& s) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int idx = tid; idx < BR * BC; idx += nt) {
    const int t = idx / BC, c = idx % BC;
    float prob = 0.0f, ds = 0.0f;
    if (c < s.seen[t]) {
      prob = online_prob(s.s[idx] * p.score_pre, s.lse_s[t], p.score_post);
      ds = prob * (s.dp[idx] - s.di[t]);
    }
    s.s[idx] = prob;
    s.dp[idx] = ds;
  }
  __syncthreads();
}

// probabilities_and_ds for the variant instances (variant_tile.cuh): the pair (rows[t],
// keys[c]) is seen for seen_lo[t] <= c < seen[t]; its score is softcapped and biased by ALiBi
// as the forward's, and dS takes the softcap's slope 1 - tanh^2 (SPEC 10.1). Dropout instances
// (SPEC 11.3): S becomes P M (what dV takes) and dS = P (M dP - D_i), M the pair's factor in
// batch element b, query head h.
template <class E, int BR, int BC, bool Dropout>
__device__ __forceinline__ void variant_probabilities_and_ds(const ForwardParams& p,
                                                             const BackwardTiles<E>& s,
                                                             float alibi_slope, int64_t b,
                                                             int64_t h) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int idx = tid; idx < BR * BC; idx += nt) {
    const int t = idx / BC, c = idx % BC;
    float prob = 0.0f, ds = 0.0f;
    if (c >= s.seen_lo[t] && c < s.seen[t]) {
      const float x = s.s[idx] * p.score_pre;
      const float score = variant_score(p, x, alibi_slope, s.rows[t], s.keys[c]);
      prob = online_prob(score, s.lse_s[t], p.score_post);
      float dp = s.dp[idx];
      if constexpr (Dropout) {
        const float factor = dropout_factor(p, b, h, s.rows[t], s.keys[c]);
        dp *= factor;
        ds = prob * (dp - s.di[t]) * softcap_slope_f32(x, p.softcap_s);
        prob *= factor;
      } else {
        ds = prob * (dp - s.di[t]) * softcap_slope_f32(x, p.softcap_s);
      }
    }
    s.s[idx] = prob;
    s.dp[idx] = ds;
  }
  __syncthreads();
}

// The middle of both passes, for one chunk: S = Q K^T and dP = dO V^T, then S becomes P and dP
// becomes dS in place (variant_probabilities_and_ds for the variant instances, with the ALiBi
// slope and the dropout draws of batch element b, query head h).
template <class E, int BR, int BC, class Products>
__device__ __forceinline__ void scores_and_ds(Products& products, const ForwardParams& p,
                                              const BackwardTiles<E>& s, int64_t D,
                                              float alibi_slope, int64_t b, int64_t h) {
  products.scores(s.q, s.k, s.s, D);
  products.scores(s.d_o, s.v, s.dp, D);
  if constexpr (Products::kVariants)
    variant_probabilities_and_ds<E, BR, BC, Products::kDropout>(p, s, alibi_slope, b, h);
  else
    probabilities_and_ds<E, BR, BC>(p, s);
}

// acc_rows[n][:] += tile[n][:] for the n < count rows with index[n] >= 0; row n of the
// workspace accumulator is at base + index[n] * D. One block owns these rows in this launch.
__device__ __forceinline__ void add_rows_to_workspace(float* base, const int64_t* index,
                                                      const float* tile, int count, int64_t D) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int64_t idx = tid; idx < count * D; idx += nt) {
    const int64_t n = idx / D, d = idx % D;
    if (index[n] >= 0) base[index[n] * D + d] += tile[idx];
  }
}

// ---------------------------------------------------------------- the dQ pass
template <class Products>
__device__ __forceinline__ void backward_dq_tile(const BackwardParams& bp, const int64_t D,
                                                 unsigned char* smem) {
  using E = typename Products::Elem;
  using T = typename Products::Input;
  constexpr int BR = Products::kBr, BC = Products::kBc;
  SmemCarver carver{smem};
  const BackwardTiles<E> s = carve_backward_tiles<Products>(carver, D, false);
  Products products;
  products.carve(carver, D);
  const ForwardParams& p = bp.ix;
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);
  constexpr bool kVariants = Products::kVariants;  // SPEC 10.1 steps (variant_tile.cuh)
  static_assert(!Products::kDropout || kVariants, "a dropout instance is a variant instance");
  float alibi_slope = 0.0f;
  if constexpr (kVariants) alibi_slope = block_alibi_slope(p, b, h);

  // The tile's query rows, as the forward's (-1: none).
  for (int t = tid; t < BR; t += nt) s.rows[t] = tile_row(p, h, tile, t, BR);
  __syncthreads();
  bool any_row = false;
  for (int t = 0; t < BR; ++t) any_row = any_row || s.rows[t] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only

  load_query_rows<T, E, BR>(bp, b, h, s, D);
  for (int64_t idx = tid; idx < BR * D; idx += nt) s.acc_a[idx] = 0.0f;

  const int64_t num_spans = tile_span_count(p, h, tile);
  for (int64_t span = 0; span < num_spans; ++span) {
    // Warp 0 reads each row's key progression: shared first and step, own count (and, with a
    // window, own first key: the range [from, cnt)).
    if (tid < 32) {
      if constexpr (kVariants)
        read_window_span(p, h, tile, span, s.rows, BR, s.from, s.cnt, s.span);
      else
        read_span(p, h, tile, span, s.rows, BR, s.cnt, s.span);
    }
    __syncthreads();
    const int64_t first = s.span[0], step = s.span[1], most = s.span[2];

    for (int64_t c0 = 0; c0 < most; c0 += BC) {
      const int64_t cn = min_i64(BC, most - c0);  // keys in this chunk
      for (int c = tid; c < BC; c += nt) s.keys[c] = c < cn ? first + step * (c0 + c) : -1;
      for (int t = tid; t < BR; t += nt) {
        s.seen[t] = max_i64(0, min_i64(cn, s.cnt[t] - c0));
        if constexpr (kVariants) s.seen_lo[t] = max_i64(0, min_i64(cn, s.from[t] - c0));
      }
      __syncthreads();
      load_key_rows<T, E, BC>(p, b, hk, s.keys, s, D);
      __syncthreads();
      scores_and_ds<E, BR, BC>(products, p, s, D, alibi_slope, b, h);
      products.accumulate_rows(s.acc_a, s.dp, s.k, s.seen_lo, s.seen, D);  // dQ += dS K
    }
    __syncthreads();  // span and cnt are rewritten by the next span
  }
  add_rows_to_workspace(bp.dq_acc + (b * p.H + h) * p.Nq * D, s.rows, s.acc_a, BR, D);
}

// ---------------------------------------------------------------- the dK/dV pass
template <class Products>
__device__ __forceinline__ void backward_dkdv_tile(const BackwardParams& bp, const int64_t D,
                                                   unsigned char* smem) {
  using E = typename Products::Elem;
  using T = typename Products::Input;
  constexpr int BR = Products::kBr, BC = Products::kBc;
  SmemCarver carver{smem};
  const BackwardTiles<E> s = carve_backward_tiles<Products>(carver, D, true);
  Products products;
  products.carve(carver, D);
  const ForwardParams& p = bp.ix;
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int64_t b = blockIdx.y / p.Hkv, g = blockIdx.y % p.Hkv;
  // One query head of the kv head, or all of them in head order (head_in_group < 0; the
  // launcher decides): on dense and block-sparse problems every head, whose key tiles are the
  // same; on a dilated one, block x's head x / key_tiles_per_head and the later heads with its
  // key rows, run by the block of the first of them (leads_key_rows).
  const int64_t group = p.H / p.Hkv;
  const bool all_heads = bp.head_in_group < 0;
  const bool dilated_heads = all_heads && p.kind == kKindDilated;
  const int64_t tile = dilated_heads ? blockIdx.x % bp.key_tiles_per_head : blockIdx.x;
  const int64_t head_first = !all_heads      ? bp.head_in_group
                             : dilated_heads ? blockIdx.x / bp.key_tiles_per_head
                                             : 0;
  const int64_t head_end = all_heads ? group : head_first + 1;
  const int64_t h = g * group + head_first;  // the head whose key tile this block holds
  if (dilated_heads && !leads_key_rows(p, g * group, head_first)) return;  // whole block
  constexpr bool kVariants = Products::kVariants;  // SPEC 10.1 steps (variant_tile.cuh)
  static_assert(!Products::kDropout || kVariants, "a dropout instance is a variant instance");

  // The tile's keys (-1: none); they ascend, so keys[0] is the first.
  for (int c = tid; c < BC; c += nt) s.keys[c] = key_tile_key(bp, h, tile, c, BC);
  __syncthreads();
  int num_keys = 0;
  for (int c = 0; c < BC; ++c) num_keys += s.keys[c] >= 0 ? 1 : 0;
  if (num_keys == 0) return;  // the same answer in every thread

  load_key_rows<T, E, BC>(p, b, g, s.keys, s, D);
  for (int64_t idx = tid; idx < BC * D; idx += nt) s.acc_a[idx] = s.acc_b[idx] = 0.0f;

  const int64_t num_spans = query_span_count(bp);
  for (int64_t hg = head_first; hg < head_end; ++hg) {
    const int64_t hq = g * group + hg;  // the query head whose rows this pass of the tile walks
    if (dilated_heads && !same_key_rows(p, hq, h)) continue;  // the same for the whole block
    float alibi_slope = 0.0f;
    if constexpr (kVariants) alibi_slope = block_alibi_slope(p, b, hq);
    for (int64_t span = 0; span < num_spans; ++span) {
      if (tid == 0) {
        KeyProgression rows = query_span(bp, hq, tile, span, s.keys[0]);
        // With a window, only the rows whose window reaches the tile's keys.
        if constexpr (kVariants) rows = window_query_cut(p, rows, s.keys[0], s.keys[num_keys - 1]);
        s.span[0] = rows.first;
        s.span[1] = rows.step;
        s.span[2] = rows.count;
      }
      __syncthreads();
      const KeyProgression rows{s.span[0], s.span[1], s.span[2]};
      for (int64_t t0 = 0; t0 < rows.count; t0 += BR) {
        // The chunk's rows and the prefix of the tile's keys each sees.
        for (int t = tid; t < BR; t += nt) {
          const int64_t i = t0 + t < rows.count ? progression_at(rows, t0 + t) : -1;
          s.rows[t] = i;
          if constexpr (kVariants) {  // the window leaves a range [seen_lo, seen) of the keys
            s.seen_lo[t] = s.seen[t] = 0;
            if (i >= 0)
              window_keys_seen(p, query_row_keys(bp, hq, tile, i), i, s.keys, num_keys,
                               &s.seen_lo[t], &s.seen[t]);
          } else {
            s.seen[t] =
                i >= 0 ? tile_keys_seen(query_row_keys(bp, hq, tile, i), s.keys, num_keys) : 0;
          }
        }
        __syncthreads();
        load_query_rows<T, E, BR>(bp, b, hq, s, D);
        __syncthreads();
        scores_and_ds<E, BR, BC>(products, p, s, D, alibi_slope, b, hq);
        products.accumulate_cols(s.acc_b, s.s, s.d_o, s.seen_lo, s.seen, D);  // dV += P^T dO
        products.accumulate_cols(s.acc_a, s.dp, s.q, s.seen_lo, s.seen, D);   // dK += dS^T Q
      }
      __syncthreads();  // span is rewritten by the next span
    }
  }
  const int64_t kv_base = (b * p.Hkv + g) * p.Nk * D;
  add_rows_to_workspace(bp.dk_acc + kv_base, s.keys, s.acc_a, BC, D);
  add_rows_to_workspace(bp.dv_acc + kv_base, s.keys, s.acc_b, BC, D);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_BACKWARD_TILE_LOOP_CUH
