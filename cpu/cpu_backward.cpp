// cpu_backward.cpp - the cpu backend's backward, SPEC 6, tiled, deterministic, no atomics, in
// the compute type T (f32; f64 for f64 inputs, SPEC 12), one template for both; bf16 inputs on
// a target with pair products multiply bf16 pairs (kPairs, as in cpu_forward.cpp; SPEC 12).
// Read it beside reference_backward.cpp: the same terms, grouped so that every output row has
// one owner and one summation order.
//
// With the combined LSE of the forward, each occurrence of a key j in A(i) (a dilated branch's
// pair, a block's pair) has P_ij = exp(S_ij - LSE_i) directly, so branches are just more pairs;
// a pair k branches hold is computed once with P multiplied by k (cpu_pair_weights.h).
// Per tile pair (query tile, key tile) of the pieces of cpu_tile_loop.h:
//   S = pre Q K^T, P = 2^(post (S - lse_s)) with lse_s = lse_in_score_domain(LSE)
//   (lib/softmax_rules.h), dP = dO V^T, dS = P (dP - D_i), then
//   dQ += dS K, dV += P^T dO, dK += dS^T Q
// Two schedules, chosen from the shape alone (backward_one_pass, cpu_tile_loop.h):
//   one pass, work item (b, kv head g), the whole sequence: for each query head of g in
//     order, each query block as the forward walks it (query_block), each piece, each key
//     tile, each query tile: S and dS once, all five products; dQ of the block is stored when
//     the block is done, dK and dV of every key (the worker's keys_dk, keys_dv) when the item
//     is done. 5 products per tile pair.
//   two passes, when there are too few (b, g) items to share among threads or Nk is too long
//   for the accumulators, each recomputing S and dS: 7 products per tile pair.
//     dQ pass, work item (b, h, block of query rows): query_block without key accumulators;
//     dK/dV pass, work item (b, kv head g, block of key rows): for each query head of g in
//     order, each piece (own = the keys, gathered once), each range of queries meeting it,
//     each query tile, each key tile: dV += P^T dO, dK += dS^T Q.
// D_i = <dO_i, O_i> is formed per query tile. Scale is applied once when dQ and dK are stored.
// Dropout (SPEC 11.3, cpu_dropout.h) draws each tile's decisions again: dP is multiplied by M
// before dS = P (M dP - D_i), and P by M after it, for dV.
// A causally masked pair is left out of every product (P and dS zeroed, dQ summed over each
// row's allowed keys, dK and dV over each key's allowed rows where a Q or dO row is not finite:
// accumulate_keys_allowed), so a NaN or inf in a row of Q, K, V or dO reaches only the rows and
// keys that meet it, as in the reference (SPEC 13); a NaN LSE (a NaN row) makes that
// row's terms NaN. The SPEC 10 variants come in through cpu_variants.h (the softcap's slope
// multiplies dS; d_sinks is its own sum over rows).
// A worker writes only the rows of its item, in an order fixed by the item: the result is
// bitwise the same for any number of threads (tests/cpu/test_cpu_determinism.cpp); values are
// checked against the reference by tests/cpu/test_cpu_backward.cpp, both schedules on the
// same shapes by tests/cpu/test_cpu_backward_schedules.cpp.
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

inline float value_of(float x) { return x; }
inline double value_of(double x) { return x; }
inline float value_of(uint16_t bf16) { return bf16_to_float(bf16); }

// Per query row t < count of term first + t of `rows`: D_t = <dO_t, O_t> (dO already in
// `d_o`, ld Dp: the compute type, or the bf16 row words of the pair products) and the LSE in
// the score domain (lse_in_score_domain: +inf where LSE = -inf, a row with no key, so every P
// is 0, never NaN).
template <class T, class DO>
void row_terms(const Problem& p, const BackwardArgs& a, int64_t b, int64_t h,
               const KeyProgression& rows, int64_t first, int64_t count, T post, const DO* d_o,
               T* o_tile, T* di, T* lse_s) {
  const int64_t D = p.D, Dp = padded(D);
  for (int64_t t0 = 0; t0 < count; t0 += kBR) {
    const int64_t n = min_i64(kBR, count - t0);
    gather_rows(*a.o, b, h, rows, first + t0, n, D, o_tile, Dp);
    for (int64_t t = 0; t < n; ++t) {
      T s = 0;
      for (int64_t d = 0; d < D; ++d) s += value_of(d_o[(t0 + t) * Dp + d]) * o_tile[t * Dp + d];
      di[t0 + t] = s;
    }
  }
  for (int64_t t = 0; t < count; ++t) {
    const int64_t i = progression_at(rows, first + t);
    const double lse = load_element(a.lse->data, a.lse->dtype, element_offset(*a.lse, b, h, i, 0));
    lse_s[t] = lse_in_score_domain(lse, post);
  }
}

// For `rows` rows of a masked, pre-scaled S tile: S becomes P = W 2^(post (S - lse_s[t]))
// (online_prob with the final LSE as the shift, W the pair's weight, cpu_pair_weights.h) and
// dP becomes dS = P (dP - D_t). In a cut tile (mask_tile) P and dS are 0 past each row's
// allowed keys, and at pairs of weight 0, whatever dP or lse_s hold.
// kWeights: 0 = every weight 1, 1 = one weight for the tile, 2 = a weight per pair.
template <int kWeights, class T>
void probabilities_and_ds_weighted(T* S, T* dP, int64_t rows, T post, const T* lse_s,
                                   const T* di, bool cut, const int64_t* allowed,
                                   const PairWeights<T>& pw) {
  const vec<T> vpost = splat(post), uniform = splat(pw.uniform);
  for (int64_t t = 0; t < rows; ++t) {
    const vec<T> l = splat(lse_s[t]), dt = splat(di[t]);
    for (int c = 0; c < kBC; c += kW<T>) {
      vec<T> prob = exp2v(vpost * (vload(S + t * kBC + c) - l));
      if (kWeights == 1) prob *= uniform;
      if (kWeights == 2) prob *= vload(pw.per_pair + t * kBC + c);
      vstore(S + t * kBC + c, prob);
      vstore(dP + t * kBC + c, prob * (vload(dP + t * kBC + c) - dt));
    }
    if (cut)
      for (int64_t c = allowed[t]; c < kBC; ++c) S[t * kBC + c] = dP[t * kBC + c] = 0;
    if (pw.has_zero)
      for (int64_t c = 0; c < kBC; ++c)
        if (pw.per_pair[t * kBC + c] == T(0)) S[t * kBC + c] = dP[t * kBC + c] = 0;
  }
}

template <class T>
void probabilities_and_ds(T* S, T* dP, int64_t rows, T post, const T* lse_s, const T* di,
                          bool cut, const int64_t* allowed, const PairWeights<T>& pw) {
  if (pw.per_pair != nullptr)
    return probabilities_and_ds_weighted<2>(S, dP, rows, post, lse_s, di, cut, allowed, pw);
  if (pw.uniform != T(1))
    return probabilities_and_ds_weighted<1>(S, dP, rows, post, lse_s, di, cut, allowed, pw);
  probabilities_and_ds_weighted<0>(S, dP, rows, post, lse_s, di, cut, allowed, pw);
}

// ---------------------------------------------------------------- dQ (dK, dV), per query block
// Rows [i0, i1) of head h: dQ of the block, stored at the end. In the one pass the workspace
// has key accumulators (w.keys_dk, w.keys_dv: row j holds the running dK_j, dV_j of the item's
// kv head), and the same S and dS also give dV += P^T dO and dK += dS^T Q for each tile's keys.
// options: the problem whose SPEC 10 options the tiles apply (forward_block in cpu_forward.cpp).
// kPairs: the bf16 pair products, as in forward_block: Q and dO as row words (for S, dP) and
// pair rows (for dK, dV) in block_a and block_b, K and V as key pairs, K as pair rows; dS and P
// rounded to bf16 words after every f32 step (dropout, softcap slope, weights).
template <class T, bool kPairs>
void query_block(const Problem& p, const BackwardArgs& a, const Workspace<T>& w, int64_t b,
                 int64_t h, int64_t i0, int64_t i1, const Problem& options) {
  [[maybe_unused]] const TileScope tile_scope{};  // the amx target's tiles, freed at the end
  const int64_t D = p.D, Dp = padded(D), kvh = kv_head_of(h, p.H, p.Hkv);
  const ScoreScaleOf<T> scaling = score_scale_in<T>(p.scale);
  const VariantTiles vx(options, b, h);
  T* const slope = vx.softcap != 0 ? w.slope : nullptr;
  int64_t allowed[kBR], first[kBR];
  const TileDropout dropout = tile_dropout(p, a.dropout);  // SPEC 11.3 (cpu_dropout.h)
  uint64_t keep[kBR];                                      // its decisions of one tile
  RowDraws row_draws_of_piece[kMaxBlockRows];  // the draws' part of each row, once a piece
  for (int64_t x = 0; x < (i1 - i0) * Dp; ++x) w.block_c[x] = 0;

  for_each_piece(p, h, i0, i1, true, [&](const Piece& piece) {
    const KeyProgression& own = piece.own;
    // kPairs: row words from 0, pair rows after an even number of rows' words.
    const int64_t pair_rows_at = (own.count + 1) / 2 * Dp;
    if constexpr (kPairs) {
      gather_row_words(*a.q, b, h, own, 0, own.count, D, words_in(w.block_a), Dp / 2);
      gather_row_words(*a.d_o, b, h, own, 0, own.count, D, words_in(w.block_b), Dp / 2);
      if (w.keys_dk != nullptr) {
        gather_pair_rows(*a.q, b, h, own, 0, own.count, D, words_in(w.block_a) + pair_rows_at, Dp);
        gather_pair_rows(*a.d_o, b, h, own, 0, own.count, D, words_in(w.block_b) + pair_rows_at,
                         Dp);
      }
      row_terms(p, a, b, h, own, 0, own.count, scaling.post,
                reinterpret_cast<const bf16_t*>(w.block_b), w.tile_o, w.row_a, w.row_b);
    } else {
      gather_rows(*a.q, b, h, own, 0, own.count, D, w.block_a, Dp);
      gather_rows(*a.d_o, b, h, own, 0, own.count, D, w.block_b, Dp);
      row_terms(p, a, b, h, own, 0, own.count, scaling.post, w.block_b, w.tile_o, w.row_a,
                w.row_b);
    }
    // Rare, so checked once per piece: an empty row, a nonfinite Q or dO row (drop_empty_rows,
    // accumulate_keys_allowed).
    bool has_empty = false;
    for (int64_t t = 0; t < own.count; ++t)
      has_empty |= w.row_b[t] == std::numeric_limits<T>::infinity();
    bool careful = false;
    if (w.keys_dk != nullptr) {
      if constexpr (kPairs)
        careful = !words_finite(words_in(w.block_a), own.count * Dp / 2) ||
                  !words_finite(words_in(w.block_b), own.count * Dp / 2);
      else
        careful = !rows_finite(w.block_a, Dp, own.count, Dp) ||
                  !rows_finite(w.block_b, Dp, own.count, Dp);
    }
    const int64_t ldo = row_stride(own) * Dp;
    T* dq = w.block_c + (own.first - i0) * Dp;
    // A piece's rows lie in the block, at most kMaxBlockRows of them (cpu_tile_loop.h).
    const bool draws_cached = dropout.active && own.count <= kMaxBlockRows;
    if (draws_cached) rows_draws(dropout, p, b, h, own, own.count, row_draws_of_piece);
    bool done = false;
    for_each_other_range(p, h, piece, true, [&](const KeyProgression& keys) {
      const int64_t ldk = row_stride(keys) * Dp;  // the keys' rows in keys_dk, keys_dv
      for (int64_t k0 = 0; k0 < keys.count && !done; k0 += kBC) {
        if (tile_skipped(p, own, 0, own.count, keys, k0)) {
          done = true;
          return;
        }
        const int64_t kcount = min_i64(kBC, keys.count - k0);
        if (pairs_computed_earlier(p, h, piece.branch, own, 0, own.count, keys, k0, kcount))
          continue;  // no row of the piece needs this key tile here (cpu_pair_weights.h)
        if (vx.active && vx.cover(own, 0, own.count, keys, k0, kcount) == Cover::none)
          continue;  // outside the window or the rows' sequences (cpu_variants.h)
        if constexpr (kPairs) {
          gather_key_pairs(*a.k, b, kvh, keys, k0, kcount, D, words_in(w.kt));
          gather_key_pairs(*a.v, b, kvh, keys, k0, kcount, D, words_in(w.vt));
          gather_pair_rows(*a.k, b, kvh, keys, k0, kcount, D, words_in(w.kv), Dp);
        } else {
          gather_columns(*a.k, b, kvh, keys, k0, kcount, D, w.kt);
          gather_columns(*a.v, b, kvh, keys, k0, kcount, D, w.vt);
          gather_rows(*a.k, b, kvh, keys, k0, kcount, D, w.kv, Dp);
        }
        for (int64_t t0 = 0; t0 < own.count; t0 += kBR) {
          const int64_t rows = min_i64(kBR, own.count - t0);
          if (tile_skipped(p, own, t0, rows, keys, k0)) continue;
          const Cover cover = vx.active ? vx.cover(own, t0, rows, keys, k0, kcount) : Cover::all;
          if (cover == Cover::none) continue;
          const PairWeights<T> pw =
              pair_weights(p, h, piece.branch, own, t0, rows, keys, k0, kcount, w.pair_weights);
          if (pw.skip) continue;
          if constexpr (kPairs)
            scores_pairs_tile(words_in(w.block_a) + t0 * (Dp / 2), Dp / 2, rows, words_in(w.kt),
                              D, scaling.pre, w.s);
          else
            scores_tile(w.block_a + t0 * Dp, Dp, rows, w.kt, D, scaling.pre, w.s);
          bool cut = mask_tile(w.s, kBC, own, t0, rows, keys, k0, kcount, kBC, p, allowed);
          const bool ranges =
              vx.active && prepare_variant_tile(vx, cover, w.s, own, t0, rows, keys, k0, first,
                                                allowed, &cut, scaling.post, slope);
          if (has_empty) cut = drop_empty_rows(w.row_b + t0, rows, allowed, cut);
          // SPEC 11.3: dS = P (M dP - D_i), and dV takes P M. The keep decisions are drawn
          // between the steps of the dP product (TileDraws, cpu_dropout.h).
          auto products_dp = [&](auto& work) {
            if constexpr (kPairs)
              scores_pairs_tile(words_in(w.block_b) + t0 * (Dp / 2), Dp / 2, rows,
                                words_in(w.vt), D, 1.0f, w.dp, work);
            else
              scores_tile(w.block_b + t0 * Dp, Dp, rows, w.vt, D, T(1), w.dp, work);
          };
          product_drawing(dropout, p, b, h, own, t0, keys, k0, kcount, keep, products_dp,
                          draws_cached ? row_draws_of_piece + t0 : nullptr);
          if (dropout.active) apply_dropout(w.dp, rows, keep, static_cast<T>(dropout.keep_scale));
          probabilities_and_ds(w.s, w.dp, rows, scaling.post, w.row_b + t0, w.row_a + t0, cut,
                               allowed, pw);
          if (vx.active) finish_variant_ds(w.s, w.dp, rows, first, allowed, slope, pw);
          // P M for dV: only where this pass adds dV (one pass), and on the bf16 path as P is
          // rounded below.
          if (dropout.active && !kPairs && w.keys_dk != nullptr)
            apply_dropout(w.s, rows, keep, static_cast<T>(dropout.keep_scale));
          auto add_ds_k = [&](const auto& ds_k) {
            if (ranges)
              accumulate_ranges(dq + t0 * ldo, ldo, rows, ds_k, first, allowed, Dp, pw);
            else
              accumulate_allowed(dq + t0 * ldo, ldo, rows, ds_k, cut, allowed, kcount, Dp, pw);
          };
          // dV += P^T dO, dK += dS^T Q: P and dS read column-wise.
          const int64_t at = progression_at(keys, k0) * Dp;
          auto add_keys = [&](const auto& pt_do, const auto& dst_q) {
            if (ranges) {
              accumulate_keys_ranges(w.keys_dv + at, ldk, kcount, pt_do, rows, first, allowed, Dp,
                                     pw, careful);
              accumulate_keys_ranges(w.keys_dk + at, ldk, kcount, dst_q, rows, first, allowed, Dp,
                                     pw, careful);
              return;
            }
            accumulate_keys_allowed(w.keys_dv + at, ldk, kcount, pt_do, rows, cut, allowed, Dp, pw,
                                    careful);
            accumulate_keys_allowed(w.keys_dk + at, ldk, kcount, dst_q, rows, cut, allowed, Dp, pw,
                                    careful);
          };
          if constexpr (kPairs) {
            word_t* const ds_rows = words_in(w.low_a);
            word_t* const ds_columns = ds_rows + kBR * kBC / 2;
            word_t* const p_columns = words_in(w.low_b);
            round_rows_to_words(w.dp, rows, ds_rows);
            add_ds_k(PairProduct{ds_rows, kBC / 2, 1, words_in(w.kv), Dp});
            if (w.keys_dk == nullptr) continue;  // two passes: dkdv_block does dK, dV
            if (dropout.active)
              round_columns_to_words(w.s, rows, p_columns, keep_factors_of(dropout, keep));
            else
              round_columns_to_words(w.s, rows, p_columns);
            round_columns_to_words(w.dp, rows, ds_columns);
            const word_t* const do_pairs = words_in(w.block_b) + pair_rows_at + t0 / 2 * Dp;
            const word_t* const q_pairs = words_in(w.block_a) + pair_rows_at + t0 / 2 * Dp;
            add_keys(PairProduct{p_columns, 1, kBC, do_pairs, Dp},
                     PairProduct{ds_columns, 1, kBC, q_pairs, Dp});
          } else {
            add_ds_k(F32Product<T>{w.dp, kBC, 1, w.kv, Dp});
            if (w.keys_dk == nullptr) continue;  // two passes: dkdv_block does dK, dV
            add_keys(F32Product<T>{w.s, 1, kBC, w.block_b + t0 * Dp, Dp},
                     F32Product<T>{w.dp, 1, kBC, w.block_a + t0 * Dp, Dp});
          }
        }
      }
    });
  });

  const T scale = static_cast<T>(p.scale);  // SPEC 6: dQ and dK carry the scale itself
  for (int64_t t = 0; t < i1 - i0; ++t) store_row(*a.dq, b, i0 + t, h, D, w.block_c + t * Dp, scale);
}

// ---------------------------------------------------------------- one pass, per (b, kv head)
// Every query head of g in order, every query block of it in order (query_block with the key
// accumulators): each tile pair's S and dS are formed once. dK and dV of all Nk keys are
// stored when the whole head group is done.
template <class T, bool kPairs>
void kv_head_one_pass(const Problem& p, const BackwardArgs& a, const Workspace<T>& w, int64_t b,
                      int64_t g, const Problem& options) {
  const int64_t D = p.D, Dp = padded(D), group = p.H / p.Hkv, block = block_rows(p);
  for (int64_t x = 0; x < p.Nk * Dp; ++x) w.keys_dk[x] = w.keys_dv[x] = 0;
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i0 = 0; i0 < p.Nq; i0 += block)
      query_block<T, kPairs>(p, a, w, b, h, i0, min_i64(i0 + block, p.Nq), options);

  const T scale = static_cast<T>(p.scale);  // SPEC 6: dQ and dK carry the scale itself
  for (int64_t j = 0; j < p.Nk; ++j) {
    store_row(*a.dk, b, j, g, D, w.keys_dk + j * Dp, scale);
    store_row(*a.dv, b, j, g, D, w.keys_dv + j * Dp, T(1));
  }
}

// ---------------------------------------------------------------- dK, dV, per key block
// kPairs: as query_block: the piece's K and V as key pairs in block_c and block_d, a query
// tile's Q and dO as row words and pair rows in tile_q and tile_do.
template <class T, bool kPairs>
void dkdv_block(const Problem& p, const BackwardArgs& a, const Workspace<T>& w, int64_t b,
                int64_t g, int64_t j0, int64_t j1, const Problem& options) {
  [[maybe_unused]] const TileScope tile_scope{};  // the amx target's tiles, freed at the end
  const int64_t D = p.D, Dp = padded(D), group = p.H / p.Hkv;
  const ScoreScaleOf<T> scaling = score_scale_in<T>(p.scale);
  int64_t allowed[kBR], first[kBR];
  const TileDropout dropout = tile_dropout(p, a.dropout);  // SPEC 11.3, as in query_block
  uint64_t keep[kBR];
  for (int64_t x = 0; x < (j1 - j0) * Dp; ++x) w.block_a[x] = w.block_b[x] = 0;

  for (int64_t h = g * group; h < (g + 1) * group; ++h) {  // query heads of kv head g, in order
    const VariantTiles vx(options, b, h);
    T* const slope = vx.softcap != 0 ? w.slope : nullptr;
    for_each_piece(p, h, j0, j1, false, [&](const Piece& piece) {
      const KeyProgression& own = piece.own;
      const int64_t ldo = row_stride(own) * Dp;
      T* dk = w.block_a + (own.first - j0) * Dp;
      T* dv = w.block_b + (own.first - j0) * Dp;
      // K^T and V^T of all the piece's key tiles, gathered once; the query tiles stream past.
      for (int64_t k0 = 0; k0 < own.count; k0 += kBC) {
        const int64_t kcount = min_i64(kBC, own.count - k0);
        if constexpr (kPairs) {
          gather_key_pairs(*a.k, b, g, own, k0, kcount, D, words_in(w.block_c + k0 * Dp));
          gather_key_pairs(*a.v, b, g, own, k0, kcount, D, words_in(w.block_d + k0 * Dp));
        } else {
          gather_columns(*a.k, b, g, own, k0, kcount, D, w.block_c + k0 * Dp);
          gather_columns(*a.v, b, g, own, k0, kcount, D, w.block_d + k0 * Dp);
        }
      }
      for_each_other_range(p, h, piece, false, [&](const KeyProgression& queries) {
        // Causal: queries before the first one that may see key own.first see none of them.
        const int64_t t_start =
            p.causal ? first_term_at_least(queries, causal_first_query(own.first, p.Nq, p.Nk)) : 0;
        for (int64_t t0 = t_start; t0 < queries.count; t0 += kBR) {
          const int64_t rows = min_i64(kBR, queries.count - t0);
          if (pairs_computed_earlier(p, h, piece.branch, queries, t0, rows, own, 0, own.count))
            continue;  // every pair of these queries with the piece's keys is computed elsewhere
          if (vx.active && vx.cover(queries, t0, rows, own, 0, own.count) == Cover::none)
            continue;  // outside the window or the keys' sequences (cpu_variants.h)
          // kPairs: row words from 0, pair rows from kBR rows' words on.
          word_t* const q_pairs = words_in(w.tile_q) + kBR * Dp / 2;
          word_t* const do_pairs = words_in(w.tile_do) + kBR * Dp / 2;
          bool careful = false;
          if constexpr (kPairs) {
            gather_row_words(*a.q, b, h, queries, t0, rows, D, words_in(w.tile_q), Dp / 2);
            gather_row_words(*a.d_o, b, h, queries, t0, rows, D, words_in(w.tile_do), Dp / 2);
            gather_pair_rows(*a.q, b, h, queries, t0, rows, D, q_pairs, Dp);
            gather_pair_rows(*a.d_o, b, h, queries, t0, rows, D, do_pairs, Dp);
            row_terms(p, a, b, h, queries, t0, rows, scaling.post,
                      reinterpret_cast<const bf16_t*>(w.tile_do), w.tile_o, w.row_a, w.row_b);
            careful = !words_finite(words_in(w.tile_q), rows * Dp / 2) ||
                      !words_finite(words_in(w.tile_do), rows * Dp / 2);
          } else {
            gather_rows(*a.q, b, h, queries, t0, rows, D, w.tile_q, Dp);
            gather_rows(*a.d_o, b, h, queries, t0, rows, D, w.tile_do, Dp);
            row_terms(p, a, b, h, queries, t0, rows, scaling.post, w.tile_do, w.tile_o, w.row_a,
                      w.row_b);
            careful = !rows_finite(w.tile_q, Dp, rows, Dp) || !rows_finite(w.tile_do, Dp, rows, Dp);
          }
          bool has_empty = false;  // as in query_block
          for (int64_t t = 0; t < rows; ++t)
            has_empty |= w.row_b[t] == std::numeric_limits<T>::infinity();
          for (int64_t k0 = 0; k0 < own.count; k0 += kBC) {
            // Keys ascend: once a tile is past every row's limit, so are the later ones.
            if (tile_skipped(p, queries, t0, rows, own, k0)) break;
            const int64_t kcount = min_i64(kBC, own.count - k0);
            const Cover cover =
                vx.active ? vx.cover(queries, t0, rows, own, k0, kcount) : Cover::all;
            if (cover == Cover::none) continue;
            const PairWeights<T> pw =
                pair_weights(p, h, piece.branch, queries, t0, rows, own, k0, kcount, w.pair_weights);
            if (pw.skip) continue;
            if constexpr (kPairs)
              scores_pairs_tile(words_in(w.tile_q), Dp / 2, rows, words_in(w.block_c + k0 * Dp), D,
                                scaling.pre, w.s);
            else
              scores_tile(w.tile_q, Dp, rows, w.block_c + k0 * Dp, D, scaling.pre, w.s);
            bool cut = mask_tile(w.s, kBC, queries, t0, rows, own, k0, kcount, kBC, p, allowed);
            const bool ranges =
                vx.active && prepare_variant_tile(vx, cover, w.s, queries, t0, rows, own, k0,
                                                  first, allowed, &cut, scaling.post, slope);
            if (has_empty) cut = drop_empty_rows(w.row_b, rows, allowed, cut);
            auto products_dp = [&](auto& work) {  // as in the dQ pass
              if constexpr (kPairs)
                scores_pairs_tile(words_in(w.tile_do), Dp / 2, rows,
                                  words_in(w.block_d + k0 * Dp), D, 1.0f, w.dp, work);
              else
                scores_tile(w.tile_do, Dp, rows, w.block_d + k0 * Dp, D, T(1), w.dp, work);
            };
            product_drawing(dropout, p, b, h, queries, t0, own, k0, kcount, keep, products_dp);
            if (dropout.active)
              apply_dropout(w.dp, rows, keep, static_cast<T>(dropout.keep_scale));
            probabilities_and_ds(w.s, w.dp, rows, scaling.post, w.row_b, w.row_a, cut, allowed,
                                 pw);
            if (vx.active) finish_variant_ds(w.s, w.dp, rows, first, allowed, slope, pw);
            if (dropout.active && !kPairs)  // P M for dV; the bf16 path as it rounds P below
              apply_dropout(w.s, rows, keep, static_cast<T>(dropout.keep_scale));
            // dV += P^T dO, dK += dS^T Q: P and dS read column-wise.
            auto add_keys = [&](const auto& pt_do, const auto& dst_q) {
              if (ranges) {
                accumulate_keys_ranges(dv + k0 * ldo, ldo, kcount, pt_do, rows, first, allowed, Dp,
                                       pw, careful);
                accumulate_keys_ranges(dk + k0 * ldo, ldo, kcount, dst_q, rows, first, allowed, Dp,
                                       pw, careful);
                return;
              }
              accumulate_keys_allowed(dv + k0 * ldo, ldo, kcount, pt_do, rows, cut, allowed, Dp,
                                      pw, careful);
              accumulate_keys_allowed(dk + k0 * ldo, ldo, kcount, dst_q, rows, cut, allowed, Dp,
                                      pw, careful);
            };
            if constexpr (kPairs) {
              word_t* const p_columns = words_in(w.low_b);
              word_t* const ds_columns = words_in(w.low_a);
              if (dropout.active)
                round_columns_to_words(w.s, rows, p_columns, keep_factors_of(dropout, keep));
              else
                round_columns_to_words(w.s, rows, p_columns);
              round_columns_to_words(w.dp, rows, ds_columns);
              add_keys(PairProduct{p_columns, 1, kBC, do_pairs, Dp},
                       PairProduct{ds_columns, 1, kBC, q_pairs, Dp});
            } else {
              add_keys(F32Product<T>{w.s, 1, kBC, w.tile_do, Dp},
                       F32Product<T>{w.dp, 1, kBC, w.tile_q, Dp});
            }
          }
        }
      });
    });
  }

  const T scale = static_cast<T>(p.scale);  // SPEC 6: dQ and dK carry the scale itself
  for (int64_t t = 0; t < j1 - j0; ++t) {
    store_row(*a.dk, b, j0 + t, g, D, w.block_a + t * Dp, scale);
    store_row(*a.dv, b, j0 + t, g, D, w.block_b + t * Dp, T(1));
  }
}

// SPEC 10.2: a packed batch of dense or dilated attention, one problem per sequence
// (cpu_variants.h): the one pass with items (sequence, kv head), or the two passes with dQ items
// (sequence, head, query block), then dK/dV items (sequence, kv head, key block).
template <class V, bool kPairs>
void backward_packed(const Problem& p, const BackwardArgs& a, const ThreadPool& pool, int64_t T) {
  // The sequence's rows of every tensor, as the arguments of a problem of its own.
  struct Views {
    dilattn_tensor q, k, v, o, lse, d_o, dq, dk, dv;
    BackwardArgs args;
  };
  auto views_of = [&](const PackedSequences& seqs, size_t s, Views* x) {
    const Problem& one = seqs.problems[s];
    const int64_t q0 = seqs.q0[s], k0 = seqs.k0[s];
    x->q = rows_view(*a.q, 1, q0, one.Nq);
    x->o = rows_view(*a.o, 1, q0, one.Nq);
    x->d_o = rows_view(*a.d_o, 1, q0, one.Nq);
    x->dq = rows_view(*a.dq, 1, q0, one.Nq);
    x->lse = rows_view(*a.lse, 2, q0, one.Nq);
    x->k = rows_view(*a.k, 1, k0, one.Nk);
    x->v = rows_view(*a.v, 1, k0, one.Nk);
    x->dk = rows_view(*a.dk, 1, k0, one.Nk);
    x->dv = rows_view(*a.dv, 1, k0, one.Nk);
    x->args = a;
    x->args.q = &x->q; x->args.k = &x->k; x->args.v = &x->v; x->args.o = &x->o;
    x->args.lse = &x->lse; x->args.d_o = &x->d_o;
    x->args.dq = &x->dq; x->args.dk = &x->dk; x->args.dv = &x->dv;
  };
  // SPEC 14.11: one progress unit per item, after the sinks' H (backward_in).
  const int64_t sink_items = a.sinks.d_values != nullptr ? p.H : 0;
  if (backward_one_pass<V>(p)) {  // from the shape alone (cpu_tile_loop.h)
    const int64_t key_values = key_accumulator_values(p);
    const PackedSequences by_head(p, p.Hkv, [](const Problem&) { return int64_t{1}; });
    if (a.progress) a.progress->begin(sink_items + by_head.items());
    if (sink_items) sink_gradients(p, a, pool);
    pool.run(by_head.items(), [&](int64_t item, int worker) {
      int64_t g = 0;
      const size_t s = by_head.sequence_of(item, &g);
      Views x;
      views_of(by_head, s, &x);
      const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T, key_values);
      kv_head_one_pass<V, kPairs>(by_head.problems[s], x.args, w, 0, g, by_head.problems[s]);
    });
    return;
  }
  const PackedSequences by_query(p, p.H, [&](const Problem& one) { return ceil_div(one.Nq, T); });
  const PackedSequences by_key(p, p.Hkv, [&](const Problem& one) { return ceil_div(one.Nk, T); });
  if (a.progress) a.progress->begin(sink_items + by_query.items() + by_key.items());
  if (sink_items) sink_gradients(p, a, pool);
  pool.run(by_query.items(), [&](int64_t item, int worker) {
    int64_t local = 0;
    const size_t s = by_query.sequence_of(item, &local);
    const Problem& one = by_query.problems[s];
    Views x;
    views_of(by_query, s, &x);
    const int64_t blocks = ceil_div(one.Nq, T), i0 = (local % blocks) * T;
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    query_block<V, kPairs>(one, x.args, w, 0, local / blocks, i0, min_i64(i0 + T, one.Nq), one);
  });
  pool.run(by_key.items(), [&](int64_t item, int worker) {
    int64_t local = 0;
    const size_t s = by_key.sequence_of(item, &local);
    const Problem& one = by_key.problems[s];
    Views x;
    views_of(by_key, s, &x);
    const int64_t blocks = ceil_div(one.Nk, T), j0 = (local % blocks) * T;
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    dkdv_block<V, kPairs>(one, x.args, w, 0, local / blocks, j0, min_i64(j0 + T, one.Nk), one);
  });
}

template <class V, bool kPairs>
dilattn_status backward_in(const Problem& p, const BackwardArgs& a) {
  ThreadPool pool(p.num_threads, a.progress);
  const int64_t T = block_rows(p), q_blocks = ceil_div(p.Nq, T), k_blocks = ceil_div(p.Nk, T);
  if (p.is_packed() && p.kind != DILATTN_KIND_BLOCK_SPARSE) {
    backward_packed<V, kPairs>(p, a, pool, T);
    return DILATTN_SUCCESS;
  }
  // Packed block-sparse and placed problems: causal by the variant tiles (cpu_variants.h).
  Problem without_causal;
  const Problem& tiles = plain_rules(p, &without_causal);
  // SPEC 10.3: the sinks' gradient, H items; SPEC 14.11: one progress unit per item.
  const int64_t sink_items = a.sinks.d_values != nullptr ? p.H : 0;
  if (backward_one_pass<V>(p)) {  // from the shape alone (cpu_tile_loop.h)
    const int64_t key_values = key_accumulator_values(p);
    if (a.progress) a.progress->begin(sink_items + p.B * p.Hkv);
    if (sink_items) sink_gradients(p, a, pool);
    pool.run(p.B * p.Hkv, [&](int64_t item, int worker) {
      const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T, key_values);
      kv_head_one_pass<V, kPairs>(tiles, a, w, item / p.Hkv, item % p.Hkv, p);
    });
    return DILATTN_SUCCESS;
  }
  if (a.progress) a.progress->begin(sink_items + p.B * p.H * q_blocks + p.B * p.Hkv * k_blocks);
  if (sink_items) sink_gradients(p, a, pool);
  pool.run(p.B * p.H * q_blocks, [&](int64_t item, int worker) {
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    const int64_t blk = item % q_blocks, bh = item / q_blocks;
    const int64_t i0 = blk * T;
    query_block<V, kPairs>(tiles, a, w, bh / p.H, bh % p.H, i0, min_i64(i0 + T, p.Nq), p);
  });
  pool.run(p.B * p.Hkv * k_blocks, [&](int64_t item, int worker) {
    const Workspace<V> w = carve_workspace<V>(a.workspace, worker, p.D, T);
    const int64_t blk = item % k_blocks, bg = item / k_blocks;
    const int64_t j0 = blk * T;
    dkdv_block<V, kPairs>(tiles, a, w, bg / p.Hkv, bg % p.Hkv, j0, min_i64(j0 + T, p.Nk), p);
  });
  return DILATTN_SUCCESS;
}

}  // namespace

// f64 inputs are computed in f64 (SPEC 12), every other dtype in f32 (SPEC 1); bf16 inputs on a
// target with pair products take them (SPEC 12), f16 inputs never do.
dilattn_status backward(const Problem& p, const BackwardArgs& a) {
  if (p.dtype == DILATTN_F64) return backward_in<double, false>(p, a);
  if (kPairDot && p.dtype == DILATTN_BF16) return backward_in<float, kPairDot>(p, a);
  return backward_in<float, false>(p, a);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS
