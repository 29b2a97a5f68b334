// cpu_pair_weights.h - dilated branches that share pairs: each distinct pair computed once,
// with its multiplicity as a weight (SPEC 3).
//
// SPEC 3 combines a row's branches as one softmax over the multiset union of their keys: a
// pair (i, j) that k branches hold counts k times. In LongNet's configurations most pairs of a
// sparse branch are pairs of a denser one too (segments 2048, 4096, 8192 at dilations 1, 2, 4
// with mod heads: 3584 pairs per row on average, 2816 distinct ones). So the cpu backend
// computes each distinct pair once, in the first branch (in configuration order) that holds
// it, with weight k: its probability is multiplied by k, which is exactly k occurrences (the
// forward's sums and the backward's P and dS are linear in the occurrence count). Later
// branches give the pair weight 0. Whether a branch holds a pair depends on (i, j) alone
// (index_rules.h selected_segment), never on how tiles are cut, so the forward and both
// backward schedules agree on who computes each pair:
//   W(i, j) = 0                                    if a branch before b holds (i, j),
//             1 + (branches after b holding it)    otherwise,
// for the tile of branch b. Per S tile (query rows q0.. of progression q, keys k0.. of k, all
// inside one segment of b) each other branch c the head uses holds none, all or some of the
// tile's pairs:
//   an earlier c holding all of them: the tile is skipped (c's tiles compute its pairs);
//   a later c holding all: one more for every weight;
//   some (or an earlier c holding some): the weights are set pair by pair, a vector of keys at
//   a time, from the rows' and the keys' selected_segment numbers.
// Dense and block-sparse problems, and heads that use one branch (groups mode), have weight 1
// everywhere and pay one branch test per tile.
// Checked by tests/cpu/test_cpu_pair_weights.cpp (every pair's weights over its branches sum
// to its multiplicity, whatever the tiles; overlapping configurations against the reference).
#ifndef DILATTN_CPU_PAIR_WEIGHTS_H
#define DILATTN_CPU_PAIR_WEIGHTS_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// The weights of one S tile [rows][kBC]: skip (every weight 0), or `uniform` for every pair
// (per_pair null), or per_pair[t * kBC + c]; has_zero: some per-pair weight is 0.
struct PairWeights {
  bool skip = false;
  float uniform = 1.0f;
  const float* per_pair = nullptr;
  bool has_zero = false;
};

// One branch as the pair rule sees it: clipped segment length, dilation, this head's offset.
struct BranchView {
  int64_t wc, r, o;
};
inline BranchView branch_view(const Problem& p, int64_t h, int64_t b) {
  const Branch& br = p.branches[static_cast<size_t>(b)];
  return BranchView{clipped_segment(br.w, p.Nq), br.r,
                    head_offset(p.head_mode, h, b, br.r, p.H)};
}

enum class Holds { none, all, some };

// Does branch c hold none, all or some of the pairs (q term q0 + t, k term k0 + c)?
// "some" may also be said of a tile holding none (both sides touching several of c's
// segments): the pair-by-pair weights are exact either way.
inline Holds branch_holds(const BranchView& c, const KeyProgression& q, int64_t q0,
                          int64_t rows, const KeyProgression& k, int64_t k0, int64_t kcount) {
  const int64_t q_lo = progression_at(q, q0), q_hi = progression_at(q, q0 + rows - 1);
  const int64_t k_lo = progression_at(k, k0), k_hi = progression_at(k, k0 + kcount - 1);
  const int64_t sq_lo = q_lo / c.wc, sq_hi = q_hi / c.wc;
  const int64_t sk_lo = k_lo / c.wc, sk_hi = k_hi / c.wc;
  if (sq_hi < sk_lo || sk_hi < sq_lo) return Holds::none;  // no segment of c in common
  if (sq_lo != sq_hi || sk_lo != sk_hi) return Holds::some;
  // One segment of c on both sides, the same. A side's selection is uniform when its step is
  // a multiple of c's dilation (every term has the same offset in the segment) or it has one term.
  const int64_t s0 = sq_lo * c.wc;
  const bool q_uniform = rows == 1 || q.step % c.r == 0;
  const bool k_uniform = kcount == 1 || k.step % c.r == 0;
  const bool q_selected = is_selected(q_lo, s0, c.r, c.o);
  const bool k_selected = is_selected(k_lo, s0, c.r, c.o);
  if ((q_uniform && !q_selected) || (k_uniform && !k_selected)) return Holds::none;
  return q_uniform && k_uniform ? Holds::all : Holds::some;
}

// True when a branch before `branch` holds every pair of the tile: its pairs are computed
// there, and this branch skips the tile (and may skip gathering for it).
inline bool pairs_computed_earlier(const Problem& p, int64_t h, int64_t branch,
                                   const KeyProgression& q, int64_t q0, int64_t rows,
                                   const KeyProgression& k, int64_t k0, int64_t kcount) {
  if (branch <= 0 || rows <= 0 || kcount <= 0) return false;
  const int64_t m = p.num_branches();
  for (int64_t c = 0; c < branch; ++c) {
    if (!head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    if (branch_holds(branch_view(p, h, c), q, q0, rows, k, k0, kcount) == Holds::all) return true;
  }
  return false;
}

// out[t] = selected_segment(term first + t of kp) - seg0 for t < count, or `unselected` where
// c does not select the term. One division for the first term, then additions only (a 64-bit
// division takes tens of cycles, and selected_segment does three per term): the term's offset
// in its segment and that offset mod r are carried along.
inline void progression_segments(const BranchView& c, const KeyProgression& kp, int64_t first,
                                 int64_t count, int64_t seg0, int32_t unselected, int32_t* out) {
  const int64_t p = progression_at(kp, first);
  int64_t seg = p / c.wc, q = p - seg * c.wc, qr = q % c.r;
  const int64_t step_seg = kp.step / c.wc, step_q = kp.step % c.wc;
  const int64_t step_qr = step_q % c.r, wc_r = c.wc % c.r;
  for (int64_t t = 0;; ++t) {
    // Equal to selected_segment(progression_at(kp, first + t), c.wc, c.r, c.o) - seg0.
    out[t] = qr == c.o ? static_cast<int32_t>(seg - seg0) : unselected;
    if (t + 1 >= count) return;  // the next term may not exist (a step near INT64_MAX)
    seg += step_seg;
    q += step_q;
    qr += step_qr;
    if (qr >= c.r) qr -= c.r;
    if (q >= c.wc) {  // q < 2 wc: at most one more segment
      q -= c.wc;
      seg += 1;
      qr -= wc_r;
      if (qr < 0) qr += c.r;
    }
  }
}

// Weights pair by pair for branch c: cleared where c holds the pair (c earlier than the tile's
// branch) or one more (c later). Segment numbers are taken relative to the tile's first one so
// they fit 32-bit lanes; -1 (a row) and -2 (a key) mark unselected terms and never match.
inline void apply_branch_pair_by_pair(const BranchView& c, bool earlier, const KeyProgression& q,
                                      int64_t q0, int64_t rows, const KeyProgression& k,
                                      int64_t k0, int64_t kcount, float* weights) {
  const int64_t q_first = progression_at(q, q0), k_first = progression_at(k, k0);
  const int64_t last = max_i64(progression_at(q, q0 + rows - 1), progression_at(k, k0 + kcount - 1));
  const int64_t seg0 = min_i64(q_first, k_first) / c.wc;
  if (last / c.wc - seg0 >= INT32_MAX) {  // more segments than 32-bit lanes count: one by one
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t row_seg = selected_segment(progression_at(q, q0 + t), c.wc, c.r, c.o);
      for (int64_t col = 0; col < kcount; ++col) {
        if (row_seg < 0 || selected_segment(progression_at(k, k0 + col), c.wc, c.r, c.o) != row_seg)
          continue;
        float& w = weights[t * kBC + col];
        w = earlier ? 0.0f : w + 1.0f;
      }
    }
    return;
  }
  alignas(64) int32_t key_seg[kBC], row_seg[kBR];
  progression_segments(c, k, k0, kcount, seg0, -2, key_seg);
  for (int64_t col = kcount; col < kBC; ++col) key_seg[col] = -2;
  progression_segments(c, q, q0, rows, seg0, -1, row_seg);
  const vint one = (vint)splat(1.0f);
  for (int64_t t = 0; t < rows; ++t) {
    const vint row = vint{} + row_seg[t];
    for (int col = 0; col < kBC; col += kW) {
      vint key;
      std::memcpy(&key, key_seg + col, sizeof key);
      const vint hit = key == row;  // all ones where c holds the pair
      const vfloat w = vload(weights + t * kBC + col);
      vstore(weights + t * kBC + col, earlier ? (vfloat)((vint)w & ~hit) : w + (vfloat)(hit & one));
    }
  }
}

// The tile's pair weights for branch `branch` of head h (-1: not a dilated piece, weight 1).
// `buffer` holds kBR x kBC floats, used when the weights differ pair by pair.
inline PairWeights pair_weights(const Problem& p, int64_t h, int64_t branch,
                                const KeyProgression& q, int64_t q0, int64_t rows,
                                const KeyProgression& k, int64_t k0, int64_t kcount,
                                float* buffer) {
  PairWeights pw;
  if (branch < 0) return pw;
  const int64_t m = p.num_branches();
  bool pair_by_pair = false;
  for (int64_t c = 0; c < m; ++c) {
    if (c == branch || !head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    const Holds holds = branch_holds(branch_view(p, h, c), q, q0, rows, k, k0, kcount);
    if (holds == Holds::all && c < branch) {
      pw.skip = true;
      return pw;
    }
    if (holds == Holds::all) pw.uniform += 1.0f;
    pair_by_pair = pair_by_pair || holds == Holds::some;
  }
  if (!pair_by_pair) return pw;

  for (int64_t t = 0; t < rows; ++t)
    for (int c = 0; c < kBC; c += kW) vstore(buffer + t * kBC + c, splat(pw.uniform));
  // Later branches first: a pair an earlier branch holds ends at 0 whatever they added.
  for (int64_t c = m - 1; c >= 0; --c) {
    if (c == branch || !head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    const BranchView view = branch_view(p, h, c);
    if (branch_holds(view, q, q0, rows, k, k0, kcount) != Holds::some) continue;
    apply_branch_pair_by_pair(view, c < branch, q, q0, rows, k, k0, kcount, buffer);
    pw.has_zero = pw.has_zero || c < branch;
  }
  pw.per_pair = buffer;
  return pw;
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_PAIR_WEIGHTS_H
