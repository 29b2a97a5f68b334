// cpu_tile_loop.h - the work decomposition of the cpu backend: which rows a work item owns and
// which rows on the other side they meet, for dense (SPEC 2), dilated (SPEC 3) and
// block-sparse (SPEC 4) attention. All index math comes from lib/index_rules.h.
//
// A work item owns a block of block_rows(p) consecutive natural rows: query rows [i0, i1) for the forward and
// dQ, key rows [j0, j1) for dK/dV. It walks the block as *pieces*: a piece is an arithmetic
// progression of its own rows (`own`) and the ranges of rows on the other side they meet
// (`for_each_other_range`), plus the causal rule key <= query + shift.
//   dense:   one piece, own = the block, other = all keys (or all queries), shift = Nk - Nq.
//   dilated: per branch the head uses, per segment the block touches: own = the branch's
//            selected rows of that segment inside the block (step r), other = the segment's
//            selected rows (step r), shift = 0. Branches are just more pieces over the same
//            rows: the forward keeps one online softmax per row across all of them, which is
//            SPEC 3's LSE combination; backward adds each occurrence's gradient.
//   sparse:  per mask block the block touches: forward own = rows of row block ib, other = its
//            listed key blocks; dK/dV own = keys of key block jb, other = the row blocks that
//            list jb (found by binary search in each row).
// Pieces come in a fixed order (branch, segment, block), so every sum has one order.
// Checked through tests/cpu/ (each kind against the reference).
#ifndef DILATTN_CPU_TILE_LOOP_H
#define DILATTN_CPU_TILE_LOOP_H

#include <algorithm>
#include <cstdint>

#include "problem.h"

namespace dilattn::cpu {

// Rows first, first + step, ... (count of them), in natural positions.
struct RowSet {
  int64_t first = 0, step = 1, count = 0;
  int64_t at(int64_t t) const { return first + t * step; }
  int64_t last() const { return at(count - 1); }
};

struct Piece {
  RowSet own;
  RowSet other;          // dense, dilated: the one progression on the other side
  int64_t shift = 0;     // causal: key <= query + shift
  int64_t mask_block = -1;  // sparse: row block ib (forward) or key block jb (dK/dV)
};

// Natural rows per work item. A dilated branch of dilation r holds only 1/r of a block's rows,
// and each piece gathers its key tiles once for all its rows; so dilated blocks grow with the
// largest dilation (up to 4x) to keep pieces near kBaseBlockRows rows.
constexpr int64_t kBaseBlockRows = 256;
constexpr int64_t kMaxBlockRows = 4 * kBaseBlockRows;
inline int64_t block_rows(const Problem& p) {
  int64_t r_max = 1;
  if (p.kind == DILATTN_KIND_DILATED)
    for (const Branch& br : p.branches) r_max = max_i64(r_max, br.r);
  return kBaseBlockRows * min_i64(r_max, kMaxBlockRows / kBaseBlockRows);
}

// The selected rows of segment [s0, s1) (dilation r, offset o) that lie in [lo, hi).
inline RowSet selected_in(int64_t s0, int64_t s1, int64_t r, int64_t o, int64_t lo, int64_t hi) {
  const int64_t t_lo = lo > s0 + o ? ceil_div(lo - s0 - o, r) : 0;
  const int64_t t_hi = selected_count(s0, min_i64(s1, hi), r, o);
  return RowSet{selected_position(s0, r, o, t_lo), r, max_i64(0, t_hi - t_lo)};
}

// Calls f(piece) for the pieces of rows [lo, hi) of head h; queries_own: the block holds
// query rows (forward, dQ) or key rows (dK/dV).
template <class F>
void for_each_piece(const Problem& p, int64_t h, int64_t lo, int64_t hi, bool queries_own,
                    F&& f) {
  if (p.kind == DILATTN_KIND_DENSE) {
    Piece piece;
    piece.own = RowSet{lo, 1, hi - lo};
    piece.other = RowSet{0, 1, queries_own ? p.Nk : p.Nq};
    piece.shift = p.Nk - p.Nq;
    f(piece);
    return;
  }
  if (p.kind == DILATTN_KIND_DILATED) {  // Nq == Nk == N
    const int64_t N = p.Nq, m = p.num_branches();
    for (int64_t br = 0; br < m; ++br) {
      if (!head_uses_branch(p.head_mode, h, br, p.H, m)) continue;
      const Branch& branch = p.branches[static_cast<size_t>(br)];
      const int64_t wc = clipped_segment(branch.w, N), r = branch.r;
      const int64_t o = head_offset(p.head_mode, h, br, r, p.H);
      for (int64_t s0 = segment_start(lo, wc); s0 < hi; s0 += wc) {
        const int64_t s1 = segment_end(s0, wc, N);
        Piece piece;
        piece.own = selected_in(s0, s1, r, o, lo, hi);
        if (piece.own.count == 0) continue;
        piece.other = RowSet{s0 + o, r, selected_count(s0, s1, r, o)};
        piece.shift = 0;
        f(piece);
      }
    }
    return;
  }
  const BsrMask& mask = *p.mask;
  const int64_t bs = queries_own ? mask.bq : mask.bk;
  const int64_t n = queries_own ? p.Nq : p.Nk;
  for (int64_t blk = lo / bs; blk * bs < hi; ++blk) {
    Piece piece;
    const int64_t a = max_i64(lo, blk * bs), e = min_i64(hi, min_i64(n, (blk + 1) * bs));
    piece.own = RowSet{a, 1, e - a};
    piece.shift = p.Nk - p.Nq;
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
    for (int64_t e = 0; e < count; ++e) {
      const int64_t first = cols[e] * mask.bk;
      f(RowSet{first, 1, min_i64(mask.bk, p.Nk - first)});
    }
    return;
  }
  for (int64_t ib = 0; ib < mask.I; ++ib) {  // the row blocks that list key block jb
    int64_t count = 0;
    const int64_t* cols = mask.row_cols(h, ib, &count);
    if (!std::binary_search(cols, cols + count, piece.mask_block)) continue;
    const int64_t first = ib * mask.bq;
    f(RowSet{first, 1, min_i64(mask.bq, p.Nq - first)});
  }
}


// ---------------------------------------------------------------- masking a tile
// The S tile pairs query rows q.at(q0 + t), t < rows, with keys k.at(k0 + c), c < kcount.
// True when causal rules out every pair (the first key lies past the last row's limit).
inline bool tile_skipped(bool causal, const RowSet& q, int64_t q0, int64_t rows,
                         const RowSet& k, int64_t k0, int64_t shift) {
  return causal && k.at(k0) > q.at(q0 + rows - 1) + shift;
}

// Sets S[t][c] = -inf for c >= kcount (padding) and, when causal, for keys past row t's limit
// key <= query + shift. Keys ascend, so the allowed keys of a row are a prefix of the tile.
inline void mask_tile(float* S, int64_t lds, const RowSet& q, int64_t q0, int64_t rows,
                      const RowSet& k, int64_t k0, int64_t kcount, int64_t width, bool causal,
                      int64_t shift) {
  const bool cut = causal && k.at(k0 + kcount - 1) > q.at(q0) + shift;
  if (!cut && kcount == width) return;
  const float neg_inf = -__builtin_inff();
  for (int64_t t = 0; t < rows; ++t) {
    int64_t allowed = kcount;
    if (cut) {
      const int64_t limit = q.at(q0 + t) + shift;  // last key row t may see
      const int64_t reach = limit < k.at(k0) ? 0 : (limit - k.at(k0)) / k.step + 1;
      allowed = min_i64(kcount, reach);
    }
    for (int64_t c = allowed; c < width; ++c) S[t * lds + c] = neg_inf;
  }
}

}  // namespace dilattn::cpu

#endif  // DILATTN_CPU_TILE_LOOP_H
