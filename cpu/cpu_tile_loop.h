// cpu_tile_loop.h - the work decomposition of the cpu backend: which rows a work item owns and
// which rows on the other side they meet, for dense (SPEC 2), dilated (SPEC 3) and
// block-sparse (SPEC 4) attention. All index math comes from lib/index_rules.h: rows are its
// KeyProgressions, the causal limit is its causal_last_key.
//
// A work item owns a block of block_rows(p) consecutive natural rows: query rows [i0, i1) for the forward and
// dQ, key rows [j0, j1) for dK/dV. It walks the block as *pieces*: a piece is an arithmetic
// progression of its own rows (`own`) and the ranges of rows on the other side they meet
// (`for_each_other_range`), plus the causal rule key <= causal_last_key(query).
//   dense:   one piece, own = the block, other = all keys (or all queries).
//   dilated: per branch the head uses, per segment the block touches: own = the branch's
//            selected rows of that segment inside the block (step r), other = the segment's
//            selected rows (step r). Branches are just more pieces over the same
//            rows: the forward keeps one online softmax per row across all of them, which is
//            SPEC 3's LSE combination; backward adds each occurrence's gradient. A pair two
//            branches hold is computed once, weighted (cpu_pair_weights.h).
//   sparse:  per mask block the block touches: forward own = rows of row block ib, other = its
//            listed key blocks; dK/dV own = keys of key block jb, other = the row blocks that
//            list jb (found by binary search in each row).
// Pieces come in a fixed order (branch, segment, block), so every sum has one order.
// Checked through tests/cpu/ (each kind against the reference).
#ifndef DILATTN_CPU_TILE_LOOP_H
#define DILATTN_CPU_TILE_LOOP_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"
#include "cpu_pair_weights.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

struct Piece {
  KeyProgression own{};
  KeyProgression other{};   // dense, dilated: the one progression on the other side
  int64_t mask_block = -1;  // sparse: row block ib (forward) or key block jb (dK/dV)
  int64_t branch = -1;      // dilated: the branch (its pairs' weights: cpu_pair_weights.h)
};

// Natural rows per work item. A dilated branch of dilation r holds only 1/r of a block's rows,
// and each piece gathers its key tiles once for all its rows; so dilated blocks grow with the
// largest dilation (up to 4x) to keep pieces near kBaseBlockRows rows.
// Dense blocks grow up to 4x too, as long as both grids of work items (the forward's and dQ's
// B x H x query blocks, dK/dV's B x Hkv x key blocks) keep kMinBlockItems items: a key tile's
// gathers (K transposed, V; strided rows, mostly cache and TLB misses) then serve 4x the query
// rows. In the forward at N = 4096, H = 8 they took about 9% of the time with 256-row blocks,
// 4% with 1024 (perf, one thread; docs/performance.md has the 4%). From the shape alone, so
// the thread count never changes a result.
constexpr int64_t kBaseBlockRows = 256;
constexpr int64_t kMaxBlockRows = 4 * kBaseBlockRows;
constexpr int64_t kMinBlockItems = 32;
inline int64_t block_rows(const Problem& p) {
  if (p.kind == DILATTN_KIND_DENSE) {
    int64_t T = kMaxBlockRows;
    while (T > kBaseBlockRows && (p.B * p.H * ceil_div(p.Nq, T) < kMinBlockItems ||
                                  p.B * p.Hkv * ceil_div(p.Nk, T) < kMinBlockItems))
      T /= 2;
    return T;
  }
  int64_t r_max = 1;
  if (p.kind == DILATTN_KIND_DILATED)
    for (const Branch& branch : p.branches) r_max = max_i64(r_max, branch.r);
  return kBaseBlockRows * min_i64(r_max, kMaxBlockRows / kBaseBlockRows);
}

// The backward's schedule (cpu_backward.cpp), chosen from the problem's shape alone, never from
// the thread count, so a shape's result is bitwise the same for any number of threads:
//   one pass: work item (b, kv head g), the whole sequence: S and dS once per tile pair, five
//     products (S, dP, dV, dK, dQ); dK and dV of all Nk keys accumulate in the worker's
//     workspace (2 x Nk x padded(D) values of the compute type);
//   two passes: a dQ pass per (b, h, query block), a dK/dV pass per (b, g, key block): S and dS
//     twice, seven products, but B x H x blocks items and a workspace independent of N.
// One pass needs enough (b, g) items to keep the threads busy (an item is a whole kv head; it
// cannot be split without partial sums of dK and dV) and bounded accumulators. Per CPU-second
// it does about 1.4x the two passes' GFLOP/s (measured with bench/cpu/torch_sdpa_compare.py, 2
// threads, both schedules in one sitting; docs/decisions.md, "CPU backend"), so with k < t
// items on t threads its wall time is about 1 / (1.4 k) against 1 / t: it wins for k > 0.7 t.
// kOnePassMinItems = 8 keeps it ahead on machines up to 11 threads; with more threads and
// 8 <= B x Hkv < 0.7 x threads it still uses less CPU time but more wall time than the two
// passes would. (The thread count itself may not decide: results would then depend on it.)
// kOnePassMaxKeyBytes caps the accumulators (in the compute type T) at 64 MiB per worker
// (Nk <= 131072 at D = 64 in f32, half that in f64); longer sequences take the two passes.
constexpr int64_t kOnePassMinItems = 8;
constexpr int64_t kOnePassMaxKeyBytes = int64_t{64} << 20;  // dK and dV together
// A packed batch of dense or dilated attention runs one problem per sequence (cpu_variants.h):
// its one-pass items are (sequence, kv head), each accumulating its sequence's keys.
inline bool runs_per_sequence(const Problem& p) {
  return p.is_packed() && p.kind != DILATTN_KIND_BLOCK_SPARSE;
}
inline int64_t one_pass_items(const Problem& p) {
  return (runs_per_sequence(p) ? p.num_seqs() : p.B) * p.Hkv;
}
inline int64_t one_pass_keys(const Problem& p) {
  if (!runs_per_sequence(p)) return p.Nk;
  int64_t longest = 0;
  for (size_t s = 0; s + 1 < p.cu_seqlens_k.size(); ++s)
    longest = max_i64(longest, p.cu_seqlens_k[s + 1] - p.cu_seqlens_k[s]);
  return longest;
}
template <class T>
inline bool backward_one_pass(const Problem& p) {
  constexpr int64_t max_key_values = kOnePassMaxKeyBytes / static_cast<int64_t>(sizeof(T));
  return one_pass_items(p) >= kOnePassMinItems &&
         one_pass_keys(p) <= max_key_values / (2 * padded(p.D));
}

// How far apart a piece's rows lie in the block state. A one-row piece's step may be near
// INT64_MAX (dilation r >= N); it is never used, so it must not be multiplied either.
inline int64_t row_stride(const KeyProgression& own) { return own.count > 1 ? own.step : 1; }

// Calls f(piece) for the pieces of rows [lo, hi) of head h; queries_own: the block holds
// query rows (forward, dQ) or key rows (dK/dV).
template <class F>
void for_each_piece(const Problem& p, int64_t h, int64_t lo, int64_t hi, bool queries_own,
                    F&& f) {
  if (p.kind == DILATTN_KIND_DENSE) {
    Piece piece;
    piece.own = KeyProgression{lo, 1, hi - lo};
    piece.other = queries_own ? dense_keys(0, p.Nq, p.Nk, false)
                              : KeyProgression{0, 1, p.Nq};  // every query meets every key
    f(piece);
    return;
  }
  if (p.kind == DILATTN_KIND_DILATED) {  // Nq == Nk == N
    const int64_t N = p.Nq, m = p.num_branches();
    for (int64_t branch_index = 0; branch_index < m; ++branch_index) {
      if (!head_uses_branch(p.head_mode, h, branch_index, p.H, m)) continue;
      const Branch& branch = p.branches[static_cast<size_t>(branch_index)];
      const int64_t wc = clipped_segment(branch.w, N), r = branch.r;
      const int64_t o = head_offset(p.head_mode, h, branch_index, r, p.H);
      for (int64_t s0 = segment_start(lo, wc); s0 < hi; s0 += wc) {
        const int64_t s1 = segment_end(s0, wc, N);
        Piece piece;
        piece.own = selected_in_range(s0, s1, r, o, lo, hi);
        if (piece.own.count == 0) continue;
        // Rows meet the selected rows of their own segment, the same set for queries and keys.
        piece.other = dilated_keys(piece.own.first, N, branch.w, r, o, false);
        piece.branch = branch_index;
        f(piece);
      }
    }
    return;
  }
  const BsrMask& mask = *p.mask;
  const int64_t bs = queries_own ? mask.bq : mask.bk;
  const int64_t n = queries_own ? p.Nq : p.Nk;
  for (int64_t blk = lo / bs; blk * bs < hi; ++blk) {
    const KeyProgression rows = block_range(blk, bs, n);
    const int64_t a = max_i64(lo, rows.first), e = min_i64(hi, rows.first + rows.count);
    Piece piece;
    piece.own = KeyProgression{a, 1, e - a};
    piece.mask_block = blk;
    f(piece);
  }
}

// Calls f(range) for the ranges of rows on the other side of a piece, ascending.
template <class F>
void for_each_other_range(const Problem& p, int64_t h, const Piece& piece, bool queries_own,
                          F&& f) {
  if (piece.mask_block < 0) {
    if (piece.other.count > 0) f(piece.other);
    return;
  }
  const BsrMask& mask = *p.mask;
  if (queries_own) {  // the key blocks row block ib lists
    int64_t count = 0;
    const int64_t* cols = mask.row_cols(h, piece.mask_block, &count);
    for (int64_t e = 0; e < count; ++e) f(block_range(cols[e], mask.bk, p.Nk));
    return;
  }
  for (int64_t ib = 0; ib < mask.I; ++ib) {  // the row blocks that list key block jb
    int64_t count = 0;
    const int64_t* cols = mask.row_cols(h, ib, &count);
    if (!std::binary_search(cols, cols + count, piece.mask_block)) continue;
    f(block_range(ib, mask.bq, p.Nq));
  }
}


// ---------------------------------------------------------------- masking a tile
// The S tile pairs query rows q term q0 + t, t < rows, with keys k term k0 + c, c < kcount.
// True when causal rules out every pair (the first key lies past the last row's limit).
inline bool tile_skipped(const Problem& p, const KeyProgression& q, int64_t q0, int64_t rows,
                         const KeyProgression& k, int64_t k0) {
  return p.causal &&
         progression_at(k, k0) > causal_last_key(progression_at(q, q0 + rows - 1), p.Nq, p.Nk);
}

// Sets S[t][c] = -inf for c >= kcount (padding) and, when causal, for keys past row t's limit;
// allowed[t] = how many of the tile's keys row t sees (a prefix: keys ascend). Returns true when
// some row sees fewer than kcount: such a tile is multiplied row by row over its allowed keys
// (accumulate_allowed), because a masked key's V or K must not enter a row even as 0 * x,
// which is NaN for x = NaN or inf (SPEC 13).
template <class T>
inline bool mask_tile(T* S, int64_t lds, const KeyProgression& q, int64_t q0, int64_t rows,
                      const KeyProgression& k, int64_t k0, int64_t kcount, int64_t width,
                      const Problem& p, int64_t* allowed) {
  const bool cut = p.causal && progression_at(k, k0 + kcount - 1) >
                                   causal_last_key(progression_at(q, q0), p.Nq, p.Nk);
  for (int64_t t = 0; t < rows; ++t) allowed[t] = kcount;
  if (!cut && kcount == width) return false;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t t = 0; t < rows; ++t) {
    if (cut) {
      const int64_t limit = causal_last_key(progression_at(q, q0 + t), p.Nq, p.Nk);
      allowed[t] = max_i64(0, min_i64(kcount, terms_at_most(k, limit) - k0));
    }
    for (int64_t c = allowed[t]; c < width; ++c) S[t * lds + c] = neg_inf;
  }
  return cut;
}

// ---------------------------------------------------------------- the products O += A B
// The tile loops below say which (row, shared index) ranges of a product enter; a product type
// says how they are multiplied: add(O, ldo, r0, rows, c0, c1, width) does
// O[r] += sum_{c0 <= c < c1} A(r0 + r, c) B(c) for r < rows. F32Product multiplies tiles of the
// compute type (accumulate_tile); cpu_pair_dot.h's PairProduct multiplies bf16 pairs. The
// query-side products (P V, dS K) have A = the S tile's rows (lda kBC, a_step 1) and B = key
// rows; the key-side ones (P^T dO, dS^T Q) read the S tile column-wise (lda 1, a_step kBC) with
// B = query rows.
template <class T>
struct F32Product {
  const T* a;
  int64_t lda, a_step;
  const T* b;
  int64_t ldb;
  void add(T* O, int64_t ldo, int64_t r0, int64_t rows, int64_t c0, int64_t c1,
           int64_t width) const {
    accumulate_tile(O, ldo, rows, a + r0 * lda + c0 * a_step, lda, a_step, c1 - c0,
                    b + c0 * ldb, ldb, width);
  }
};

// O[t] += sum_{c < allowed[t]} A[t][c] B[c] for t < rows: one register-blocked call when every
// row sees all kcount keys, else one call per row. Pairs of weight 0 (computed in another
// branch, cpu_pair_weights.h) are left out as masked keys are, a run of keys at a time: their B
// row must not enter even as 0 * x.
template <class T, class Product>
inline void accumulate_allowed(T* O, int64_t ldo, int64_t rows, const Product& product, bool cut,
                               const int64_t* allowed, int64_t kcount, int64_t width,
                               const PairWeights<T>& pw) {
  if (pw.has_zero) {
    for (int64_t t = 0; t < rows; ++t) {
      const T* w = pw.per_pair + t * kBC;
      for (int64_t c = 0; c < allowed[t];) {
        if (w[c] == T(0)) { ++c; continue; }
        int64_t e = c + 1;
        while (e < allowed[t] && w[e] != T(0)) ++e;
        product.add(O + t * ldo, ldo, t, 1, c, e, width);
        c = e;
      }
    }
    return;
  }
  if (!cut) return product.add(O, ldo, 0, rows, 0, kcount, width);
  for (int64_t t = 0; t < rows; ++t) product.add(O + t * ldo, ldo, t, 1, 0, allowed[t], width);
}

// True when rows [0, rows) of Bm (ldb apart, `width` values each) are all finite.
template <class T>
inline bool rows_finite(const T* Bm, int64_t ldb, int64_t rows, int64_t width) {
  vec<T> bad = vec<T>{};
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t d = 0; d < width; d += kW<T>) {
      const vec<T> x = vload(Bm + t * ldb + d);
      bad += x - x;  // 0 for a finite lane, NaN for an infinite or NaN one
    }
  for (int c = 0; c < kW<T>; ++c)
    if (bad[c] != T(0)) return false;
  return true;
}

// Rows the forward found empty (lse_s = +inf: LSE = -inf, every score -inf) have no term, as
// in the reference: allowed[t] = 0 for them, and the tile counts as cut. Their P and dS are 0
// already; leaving them out keeps a nonfinite K, V, Q or dO value from entering as 0 x inf.
template <class T>
inline bool drop_empty_rows(const T* lse_s, int64_t rows, int64_t* allowed, bool cut) {
  for (int64_t t = 0; t < rows; ++t)
    if (lse_s[t] == std::numeric_limits<T>::infinity()) {
      allowed[t] = 0;
      cut = true;
    }
  return cut;
}

// Key by key, over the runs of rows t that see key c: first[t] <= c < allowed[t] (first null:
// from 0) and a nonzero weight. The careful path of accumulate_keys_allowed and of
// cpu_variants.h's accumulate_keys_ranges, where a pair a row does not see must not enter the
// sum even as 0 x inf (SPEC 13). `product` is key-side (F32Product's comment).
template <class T, class Product>
inline void accumulate_keys_by_runs(T* O, int64_t ldo, int64_t kcount, const Product& product,
                                    int64_t rows, const int64_t* first, const int64_t* allowed,
                                    int64_t width, const PairWeights<T>& pw) {
  auto sees = [&](int64_t t, int64_t c) {
    return (first == nullptr || c >= first[t]) && c < allowed[t] &&
           !(pw.has_zero && pw.per_pair[t * kBC + c] == T(0));
  };
  for (int64_t c = 0; c < kcount; ++c)
    for (int64_t t = 0; t < rows;) {
      if (!sees(t, c)) {
        ++t;
        continue;
      }
      int64_t e = t + 1;
      while (e < rows && sees(e, c)) ++e;
      product.add(O + c * ldo, ldo, c, 1, t, e, width);
      t = e;
    }
}

// The key-side products of a tile, dV += P^T dO and dK += dS^T Q: O[c] += sum over rows t of
// A[t][c] Bm[t] for keys c < kcount (`product` key-side). A pair a row does not see
// (c >= allowed[t], or weight 0) holds A = 0, which adds nothing while Bm[t] is finite: one
// register-blocked call. When some Bm row is not finite (`careful`, known per query tile), such
// a pair must not enter even as 0 x inf = NaN (SPEC 13): a tile with such pairs is then summed
// key by key over the runs of rows that see the key.
template <class T, class Product>
inline void accumulate_keys_allowed(T* O, int64_t ldo, int64_t kcount, const Product& product,
                                    int64_t rows, bool cut, const int64_t* allowed, int64_t width,
                                    const PairWeights<T>& pw, bool careful) {
  if (!careful || (!cut && !pw.has_zero)) return product.add(O, ldo, 0, kcount, 0, rows, width);
  accumulate_keys_by_runs(O, ldo, kcount, product, rows, nullptr, allowed, width, pw);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_TILE_LOOP_H
