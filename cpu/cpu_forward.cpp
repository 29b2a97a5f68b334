// cpu_forward.cpp - the cpu backend's forward: SPEC 2 (dense), 3 (dilated), 4 (block-sparse)
// as tiled online softmax, on a pool of threads, in the compute type T: f32 (f32, f16 and bf16
// inputs, SPEC 1), f64 for f64 inputs (SPEC 12); one template serves both. bf16 inputs on a
// target with pair products (avx512bf16, bf16emu) multiply bf16 pairs (kPairs, SPEC 12).
// Read it beside reference_forward.cpp: the reference computes each softmax group of a row
// exactly and combines the groups by LSE; this file streams the same keys through one running
// (max, sum, O) per row.
//
// Work item = (batch b, head h, block of block_rows(p) query rows). For each piece of the block
// (cpu_tile_loop.h: the rows one dilated branch selects in one segment, or the whole block)
// and each key tile of kBC keys it meets (gathered with the branch's stride, converted to T),
// with the softmax rules of lib/softmax_rules.h (pre * post = scale * log2(e), score_scale):
//   S = pre * Q K^T                                 (cpu_microkernel.h, register-blocked;
//                                                    a piece of <= 4 rows, decode: dot
//                                                    products on the K rows in place)
//   mask padding and, causal, keys past the row's limit; skip tiles past every row's limit
//   m' = max_nan(m, rowmax S); alpha = online_rescale(m, m'); P = 2^(post (S - shift(m')))
//   l = alpha l + rowsum P;  O = alpha O + P V
// A row selected by several branches keeps one running state across them: one softmax over the
// union of their keys is exactly SPEC 3's LSE combination. Dropout (SPEC 11, cpu_dropout.h)
// multiplies each tile's P by M after the sum l took it, so the LSE is the softmax's.
// At the end O * finalize_o_factor and finalize_lse; a row no key reached gets O = 0,
// LSE = -inf (SPEC 2); a NaN score makes the row NaN (SPEC 13). The SPEC 10 variants (windows,
// softcap, ALiBi, packed batches, sinks) come in through cpu_variants.h, asked once per tile
// only where they are set.
// Checked by tests/cpu/test_cpu_forward.cpp against the f64 reference; NaN and huge scales by
// tests/cpu/test_cpu_nan_inputs.cpp and test_cpu_huge_scale.cpp; dropout by
// tests/cpu/test_cpu_dropout.cpp.
#include "cpu_isa_target.h"  // first: see there
#include "cpu_dropout.h"
#include "cpu_microkernel.h"
#include "cpu_pair_dot.h"
#include "cpu_pair_tiles.h"
#include "cpu_pair_weights.h"
#include "cpu_tile_io.h"
#include "cpu_tile_loop.h"
#include "cpu_variants.h"
#include "cpu_workspace.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

namespace {

// The online softmax step for `rows` rows of S (pre-scaled and masked): S becomes P, the
// running max m and sum l (rows `stride` apart) are updated, alpha[t] says how much to shrink
// the row's old O. kPostIsOne: the scale is folded into S (post = 1, softmax_rules.h), so the
// exponent is S - shift without a multiply (bitwise the same result).
// NaN: the row max is taken with the one-instruction max (vmax_plain), which may drop a NaN
// score; that score's probability is NaN all the same, so the tile's sum is NaN, and m is then
// set to NaN, as max_nan would have made it. From there the row is NaN as the rules say: l is
// NaN, O meets the NaN probability (its key is never masked: masking writes -inf over it),
// and later tiles see m = NaN (SPEC 13; tests/cpu/test_cpu_nan_inputs.cpp).
// Pair weights (cpu_pair_weights.h) multiply each probability after the exponent: kWeights
// 0 = none, 1 = one weight for the tile, 2 = a weight per pair.
// kGroup rows at a time, each step done for every row of the group before the next step: a
// row alone is one long dependency chain (its max, horizontal reductions, exponents and sum),
// so the group gives the core kGroup independent chains to overlap. Each row's arithmetic is
// the same as alone, so the result is too, bit for bit.
template <bool kPostIsOne, int kWeights, int kGroup, class T>
inline void online_softmax_group(T* S, int64_t t0, T post, T* m, T* l, int64_t stride, T* alpha,
                                 const PairWeights<T>& pw) {
  const vec<T> uniform = splat(pw.uniform);
  const vec<T> vpost = splat(post);
  T m_old[kGroup], m_new[kGroup];
  vec<T> shift[kGroup], sum[kGroup];
  for (int g = 0; g < kGroup; ++g) {
    const T* s = S + (t0 + g) * kBC;
    vec<T> vm = vload(s);
    for (int c = kW<T>; c < kBC; c += kW<T>) vm = vmax_plain(vm, vload(s + c));
    m_old[g] = m[(t0 + g) * stride];
    m_new[g] = max_nan(m_old[g], hmax_plain(vm));
    shift[g] = splat(online_shift(m_new[g]));
    sum[g] = vec<T>{};
  }
  for (int c = 0; c < kBC; c += kW<T>)
    for (int g = 0; g < kGroup; ++g) {
      T* s = S + (t0 + g) * kBC;
      const vec<T> x = vload(s + c) - shift[g];
      vec<T> e = exp2v(kPostIsOne ? x : vpost * x);  // online_prob, a vector at a time
      if (kWeights == 1) e *= uniform;
      if (kWeights == 2) e *= vload(pw.per_pair + (t0 + g) * kBC + c);
      vstore(s + c, e);
      sum[g] += e;
    }
  for (int g = 0; g < kGroup; ++g) {
    const int64_t t = t0 + g;
    const T tile_sum = hsum(sum[g]);
    if (tile_sum != tile_sum) m_new[g] = std::numeric_limits<T>::quiet_NaN();
    alpha[t] = online_rescale(m_old[g], m_new[g], post);
    l[t * stride] = l[t * stride] * alpha[t] + tile_sum;
    m[t * stride] = m_new[g];
  }
}

template <bool kPostIsOne, int kWeights, class T>
void online_softmax_rows(T* S, int64_t rows, T post, T* m, T* l, int64_t stride, T* alpha,
                         const PairWeights<T>& pw) {
  constexpr int kGroup = 4;
  int64_t t = 0;
  for (; t + kGroup <= rows; t += kGroup)
    online_softmax_group<kPostIsOne, kWeights, kGroup>(S, t, post, m, l, stride, alpha, pw);
  for (; t < rows; ++t)
    online_softmax_group<kPostIsOne, kWeights, 1>(S, t, post, m, l, stride, alpha, pw);
}

template <bool kPostIsOne, class T>
void online_softmax_post(T* S, int64_t rows, T post, T* m, T* l, int64_t stride, T* alpha,
                         const PairWeights<T>& pw) {
  if (pw.per_pair != nullptr)
    return online_softmax_rows<kPostIsOne, 2>(S, rows, post, m, l, stride, alpha, pw);
  if (pw.uniform != T(1))
    return online_softmax_rows<kPostIsOne, 1>(S, rows, post, m, l, stride, alpha, pw);
  online_softmax_rows<kPostIsOne, 0>(S, rows, post, m, l, stride, alpha, pw);
}

template <class T>
void online_softmax(T* S, int64_t rows, T post, T* m, T* l, int64_t stride, T* alpha,
                    const PairWeights<T>& pw) {
  if (post == T(1)) return online_softmax_post<true>(S, rows, post, m, l, stride, alpha, pw);
  online_softmax_post<false>(S, rows, post, m, l, stride, alpha, pw);
}

template <class T>
void scale_rows(T* O, int64_t ldo, int64_t rows, const T* alpha, int64_t width) {
  for (int64_t t = 0; t < rows; ++t) {
    if (alpha[t] == T(1)) continue;
    const vec<T> a = splat(alpha[t]);
    for (int64_t d = 0; d < width; d += kW<T>) vstore(O + t * ldo + d, vload(O + t * ldo + d) * a);
  }
}

// Pieces of at most this many rows compute S by scores_from_rows: for up to 4 rows (kMR, one
// register block of scores_tile) the transposed key tile costs more than it saves.
constexpr int64_t kDecodeRows = kMR;

// One work item: rows [i0, i1) of head h, batch b. options: the problem whose SPEC 10 options
// the tiles apply (cpu_variants.h); p itself but for a packed block-sparse batch.
// kPairs (bf16 inputs on a kPairDot target, T = float): S = Q K^T and O += P V are bf16 pair
// products (cpu_pair_dot.h): Q, K, V gathered into word layouts straight from bf16 memory
// (cpu_pair_tiles.h), P rounded to bf16 after everything the f32 path does to it (softmax,
// weights, variants, dropout). Everything else is the f32 path itself.
template <class T, bool kPairs>
void forward_block(const Problem& p, const ForwardArgs& a, const Workspace<T>& w, int64_t b,
                   int64_t h, int64_t i0, int64_t i1, const Problem& options) {
  [[maybe_unused]] const TileScope tile_scope{};  // the amx target's tiles, freed at the end
  const int64_t D = p.D, Dp = padded(D), kvh = kv_head_of(h, p.H, p.Hkv);
  const ScoreScaleOf<T> scaling = score_scale_in<T>(p.scale);
  const VariantTiles vx(options, b, h);
  int64_t allowed[kBR], first[kBR];
  const TileDropout dropout = tile_dropout(p, a.dropout);  // SPEC 11 (cpu_dropout.h)
  uint64_t keep[kBR];                                      // its decisions of one tile
  RowDraws row_draws_of_piece[kMaxBlockRows];  // the draws' part of each row, once a piece
  for (int64_t t = 0; t < i1 - i0; ++t) {
    w.row_a[t] = -std::numeric_limits<T>::infinity();
    w.row_b[t] = 0;
  }
  for (int64_t x = 0; x < (i1 - i0) * Dp; ++x) w.block_c[x] = 0;

  for_each_piece(p, h, i0, i1, true, [&](const Piece& piece) {
    const KeyProgression& own = piece.own;
    if constexpr (kPairs)
      gather_row_words(*a.q, b, h, own, 0, own.count, D, words_in(w.block_a), Dp / 2);
    else
      gather_rows(*a.q, b, h, own, 0, own.count, D, w.block_a, Dp);
    // This piece's rows in the block state: `stride` rows apart.
    const int64_t at = own.first - i0, stride = row_stride(own), ldo = stride * Dp;
    T* acc = w.block_c + at * Dp;
    T* m = w.row_a + at;
    T* l = w.row_b + at;
    // A piece of a few rows (decode) reads K rows in place: no transposed key tile.
    const bool decode = !kPairs && own.count <= kDecodeRows && rows_are_vectors<T>(*a.k, D);
    // A piece's rows lie in the block, at most kMaxBlockRows of them (cpu_tile_loop.h).
    const bool draws_cached = dropout.active && own.count <= kMaxBlockRows;
    if (draws_cached) rows_draws(dropout, p, b, h, own, own.count, row_draws_of_piece);
    const T* k_rows[kBC];
    bool done = false;
    for_each_other_range(p, h, piece, true, [&](const KeyProgression& keys) {
      for (int64_t k0 = 0; k0 < keys.count && !done; k0 += kBC) {
        if (tile_skipped(p, own, 0, own.count, keys, k0)) {
          done = true;  // keys ascend: every later tile is past every row's limit too
          return;
        }
        const int64_t kcount = min_i64(kBC, keys.count - k0);
        if (pairs_computed_earlier(p, h, piece.branch, own, 0, own.count, keys, k0, kcount))
          continue;  // no row of the piece needs this key tile here (cpu_pair_weights.h)
        if (vx.active && vx.cover(own, 0, own.count, keys, k0, kcount) == Cover::none)
          continue;  // outside the window or the rows' sequences (cpu_variants.h)
        if constexpr (kPairs) {
          gather_key_pairs(*a.k, b, kvh, keys, k0, kcount, D, words_in(w.kt));
          gather_pair_rows(*a.v, b, kvh, keys, k0, kcount, D, words_in(w.kv), Dp);
        } else {
          if (decode)
            row_pointers(*a.k, b, kvh, keys, k0, kcount, k_rows);
          else
            gather_columns(*a.k, b, kvh, keys, k0, kcount, D, w.kt);
          gather_rows(*a.v, b, kvh, keys, k0, kcount, D, w.kv, Dp);
        }
        for (int64_t t0 = 0; t0 < own.count; t0 += kBR) {
          const int64_t rows = min_i64(kBR, own.count - t0);
          if (tile_skipped(p, own, t0, rows, keys, k0)) continue;
          const Cover cover = vx.active ? vx.cover(own, t0, rows, keys, k0, kcount) : Cover::all;
          if (cover == Cover::none) continue;
          const PairWeights<T> pw =
              pair_weights(p, h, piece.branch, own, t0, rows, keys, k0, kcount, w.pair_weights);
          if (pw.skip) continue;
          // SPEC 11: the tile's keep decisions are drawn between the steps of its score
          // product (TileDraws, cpu_dropout.h), and applied to P below.
          auto scores = [&](auto& work) {
            if constexpr (kPairs)
              scores_pairs_tile(words_in(w.block_a) + t0 * (Dp / 2), Dp / 2, rows,
                                words_in(w.kt), D, scaling.pre, w.s, work);
            else
              scores_tile(w.block_a + t0 * Dp, Dp, rows, w.kt, D, scaling.pre, w.s, work);
          };
          if (decode) {
            scores_from_rows(w.block_a + t0 * Dp, Dp, rows, k_rows, kcount, D, scaling.pre, w.s);
            if (dropout.active)
              dropout_keep_bits(dropout, p, b, h, own, t0, rows, keys, k0, kcount, keep);
          } else {
            product_drawing(dropout, p, b, h, own, t0, keys, k0, kcount, keep, scores,
                            draws_cached ? row_draws_of_piece + t0 : nullptr);
          }
          bool cut = mask_tile(w.s, kBC, own, t0, rows, keys, k0, kcount, kBC, p, allowed);
          const bool ranges =
              vx.active && prepare_variant_tile(vx, cover, w.s, own, t0, rows, keys, k0, first,
                                                allowed, &cut, scaling.post,
                                                static_cast<T*>(nullptr));
          online_softmax(w.s, rows, scaling.post, m + t0 * stride, l + t0 * stride, stride,
                         w.small, pw);
          // SPEC 11: P M_ij enters O; the sum l above, so the LSE, is the softmax's. The bf16
          // path multiplies by M as it rounds P below (one pass over the tile fewer).
          if (dropout.active && !kPairs)
            apply_dropout(w.s, rows, keep, static_cast<T>(dropout.keep_scale));
          scale_rows(acc + t0 * ldo, ldo, rows, w.small, Dp);
          auto add_pv = [&](const auto& pv) {
            if (ranges)
              accumulate_ranges(acc + t0 * ldo, ldo, rows, pv, first, allowed, Dp, pw);
            else
              accumulate_allowed(acc + t0 * ldo, ldo, rows, pv, cut, allowed, kcount, Dp, pw);
          };
          if constexpr (kPairs) {
            if (dropout.active)
              round_rows_to_words(w.s, rows, words_in(w.low_a), keep_factors_of(dropout, keep));
            else
              round_rows_to_words(w.s, rows, words_in(w.low_a));
            add_pv(PairProduct{words_in(w.low_a), kBC / 2, 1, words_in(w.kv), Dp});
          } else {
            add_pv(F32Product<T>{w.s, kBC, 1, w.kv, Dp});
          }
        }
      }
    });
  });

  // Empty by the index rules alone: m stays -inf only when no key reached the row (SPEC 2).
  // SPEC 10.3: the sink joins the finished row once (join_sink).
  for (int64_t t = 0; t < i1 - i0; ++t) {
    T m = w.row_a[t], l = w.row_b[t];
    const T keep =
        a.sinks.values != nullptr ? join_sink(&m, &l, a.sinks.values[h], scaling.post) : T(1);
    store_row(*a.o, b, i0 + t, h, D, w.block_c + t * Dp, finalize_o_factor(m, l) * keep);
    if (a.lse)
      store_element(a.lse->data, a.lse->dtype, element_offset(*a.lse, b, h, i0 + t, 0),
                    finalize_lse(m, l, scaling.post));
  }
}

// SPEC 10.2: a packed batch of dense or dilated attention, one problem per sequence
// (cpu_variants.h): work items (sequence, head, block of its rows).
template <class V, bool kPairs>
void forward_packed(const Problem& p, const ForwardArgs& a, const ThreadPool& pool, int64_t T) {
  const PackedSequences seqs(p, p.H, [&](const Problem& one) { return ceil_div(one.Nq, T); });
  if (a.progress) a.progress->begin(seqs.items());  // SPEC 14.11: one unit per item
  pool.run(seqs.items(), [&](int64_t item, int worker) {
    int64_t local = 0;
    const size_t s = seqs.sequence_of(item, &local);
    const Problem& one = seqs.problems[s];
    const int64_t blocks = ceil_div(one.Nq, T), i0 = (local % blocks) * T;
    const dilattn_tensor q = rows_view(*a.q, 1, seqs.q0[s], one.Nq);
    const dilattn_tensor o = rows_view(*a.o, 1, seqs.q0[s], one.Nq);
    const dilattn_tensor k = rows_view(*a.k, 1, seqs.k0[s], one.Nk);
    const dilattn_tensor v = rows_view(*a.v, 1, seqs.k0[s], one.Nk);
    const dilattn_tensor lse = a.lse ? rows_view(*a.lse, 2, seqs.q0[s], one.Nq) : dilattn_tensor{};
    ForwardArgs sa = a;
    sa.q = &q; sa.k = &k; sa.v = &v; sa.o = &o; sa.lse = a.lse ? &lse : nullptr;
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    forward_block<V, kPairs>(one, sa, w, 0, local / blocks, i0, min_i64(i0 + T, one.Nq), one);
  });
}

template <class V, bool kPairs>
dilattn_status forward_in(const Problem& p, const ForwardArgs& a) {
  const int64_t T = block_rows(p), blocks = ceil_div(p.Nq, T);
  ThreadPool pool(p.num_threads, a.progress);
  if (p.is_packed() && p.kind != DILATTN_KIND_BLOCK_SPARSE) {
    forward_packed<V, kPairs>(p, a, pool, T);
    return DILATTN_SUCCESS;
  }
  // Packed block-sparse and placed problems: causal by the variant tiles (cpu_variants.h).
  Problem without_causal;
  const Problem& tiles = plain_rules(p, &without_causal);
  if (a.progress) a.progress->begin(p.B * p.H * blocks);  // SPEC 14.11: one unit per item
  pool.run(p.B * p.H * blocks, [&](int64_t item, int worker) {
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    const int64_t blk = item % blocks, bh = item / blocks;
    const int64_t i0 = blk * T;
    forward_block<V, kPairs>(tiles, a, w, bh / p.H, bh % p.H, i0, min_i64(i0 + T, p.Nq), p);
  });
  return DILATTN_SUCCESS;
}

}  // namespace

// f64 inputs are computed in f64 (SPEC 12), every other dtype in f32 (SPEC 1); bf16 inputs on a
// target with pair products take them (SPEC 12), f16 inputs never do.
dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  if (p.dtype == DILATTN_F64) return forward_in<double, false>(p, a);
  if (kPairDot && p.dtype == DILATTN_BF16) return forward_in<float, kPairDot>(p, a);
  return forward_in<float, false>(p, a);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS
