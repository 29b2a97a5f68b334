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
// for the tile of branch b: lib/pair_sharing.h's rule (SPEC 3.4), which the CUDA forwards apply
// too. Per S tile (query rows q0.. of progression q, keys k0.. of k, all
// inside one segment of b) each other branch c the head uses holds none, all or some of the
// tile's pairs:
//   an earlier c holding all of them: the tile is skipped (c's tiles compute its pairs);
//   a later c holding all: one more for every weight;
//   some (or an earlier c holding some): the weights are set pair by pair, a vector of keys at
//   a time, from the rows' and the keys' selected_segment numbers, and kept with those numbers
//   so the next tile with the same ones reuses them (PairWeightsMemo).
// Dense and block-sparse problems, and heads that use one branch (groups mode), have weight 1
// everywhere and pay one branch test per tile.
// Checked by tests/cpu/test_cpu_pair_weights.cpp (every pair's weights over its branches sum
// to its multiplicity, whatever the tiles; overlapping configurations against the reference).
#ifndef DILATTN_CPU_PAIR_WEIGHTS_H
#define DILATTN_CPU_PAIR_WEIGHTS_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// The weights of one S tile [rows][kBC], in the compute type T: skip (every weight 0), or
// `uniform` for every pair (per_pair null), or per_pair[t * kBC + c]; has_zero: some per-pair
// weight is 0.
template <class T>
struct PairWeights {
  bool skip = false;
  T uniform = 1;
  const T* per_pair = nullptr;
  bool has_zero = false;
};

// One branch as the pair rule sees it: clipped segment length, dilation, this head's offset.
struct BranchView {
  int64_t wc, r, o;
};
inline BranchView branch_view(const Problem& p, int64_t h, int64_t branch_index) {
  const Branch& branch = p.branches[static_cast<size_t>(branch_index)];
  return BranchView{clipped_segment(branch.w, p.Nq), branch.r,
                    head_offset(p.head_mode, h, branch_index, branch.r, p.H)};
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

// Per-pair weights of one tile, and what they were computed from: tiles of a piece often have
// the same weights (in LongNet's configurations every tile of the densest branch lies inside
// one segment of each sparser branch, at the same offsets), which are then reused. The key:
// rows, kcount, the uniform part, the branches set pair by pair, and for each (later branches
// first) its index, whether it is earlier, and its row and key segment numbers (kBC of them,
// padding keys unselected); key[0] holds the key's length, -1 when nothing is kept
// (carve_workspace sets it).
constexpr int kMemoBranches = 8;
constexpr int kMemoInts = 1 + 4 + kMemoBranches * (2 + kBR + kBC);
template <class T>
struct PairWeightsMemo {
  T* weights;      // [kBR][kBC]
  int32_t* key;    // [kMemoInts]
};

// Weights pair by pair for branch c, into `weights`, the slow and general way (more branches
// set pair by pair than the memo keeps, or segment numbers past 32 bits): cleared where c
// holds the pair (c earlier than the tile's branch) or one more (c later).
template <class T>
inline void apply_branch_one_by_one(const BranchView& c, bool earlier, const KeyProgression& q,
                                    int64_t q0, int64_t rows, const KeyProgression& k,
                                    int64_t k0, int64_t kcount, T* weights) {
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t row_seg = selected_segment(progression_at(q, q0 + t), c.wc, c.r, c.o);
    for (int64_t col = 0; col < kcount; ++col) {
      if (row_seg < 0 || selected_segment(progression_at(k, k0 + col), c.wc, c.r, c.o) != row_seg)
        continue;
      T& w = weights[t * kBC + col];
      w = earlier ? T(0) : w + T(1);
    }
  }
}

// The weights a key describes (see PairWeightsMemo), a row at a time in registers: start
// from the uniform part, one more where a later branch holds the pair, 0 where an earlier
// one does. Segment numbers are relative to the tile's first one, -1 (a row) and -2 (a key)
// mark unselected terms: they never match. The int32 segment numbers of kW<T> keys are
// compared at once and the result widened to T's lanes (for f32 the same vector).
template <class T>
inline void weights_from_key(const int32_t* key, T* weights) {
  typedef ivec<T> mask;
  const int32_t rows = key[1], branches = key[4];
  const vec<T> base = splat(static_cast<T>(key[3]));
  const mask one = (mask)splat(T(1));
  for (int32_t t = 0; t < rows; ++t)
    for (int col = 0; col < kBC; col += kW<T>) {
      vec<T> w = base;
      const int32_t* b = key + 5;
      for (int32_t x = 0; x < branches; ++x, b += 2 + rows + kBC) {
        segvec<T> segs;
        std::memcpy(&segs, b + 2 + rows + col, sizeof segs);
        // All ones where the branch holds the pair.
        const mask hit = __builtin_convertvector(segs == segvec<T>{} + b[2 + t], mask);
        w = b[1] ? (vec<T>)((mask)w & ~hit) : w + (vec<T>)(hit & one);
      }
      vstore(weights + t * kBC + col, w);
    }
}

// The tile's pair weights for branch `branch` of head h (-1: not a dilated piece, weight 1).
template <class T>
inline PairWeights<T> pair_weights(const Problem& p, int64_t h, int64_t branch,
                                   const KeyProgression& q, int64_t q0, int64_t rows,
                                   const KeyProgression& k, int64_t k0, int64_t kcount,
                                   const PairWeightsMemo<T>& memo) {
  PairWeights<T> pw;
  if (branch < 0) return pw;
  const int64_t m = p.num_branches();
  int64_t pair_by_pair = 0;
  for (int64_t c = 0; c < m; ++c) {
    if (c == branch || !head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    const Holds holds = branch_holds(branch_view(p, h, c), q, q0, rows, k, k0, kcount);
    if (holds == Holds::all && c < branch) {
      pw.skip = true;
      return pw;
    }
    if (holds == Holds::all) pw.uniform += T(1);
    pair_by_pair += holds == Holds::some;
  }
  if (pair_by_pair == 0) return pw;
  pw.per_pair = memo.weights;

  // The key, later branches first (their additions come before an earlier branch's clearing).
  alignas(64) int32_t key[kMemoInts];
  int32_t len = 5;
  bool keyed = pair_by_pair <= kMemoBranches;
  const int64_t first_pos = min_i64(progression_at(q, q0), progression_at(k, k0));
  const int64_t last_pos =
      max_i64(progression_at(q, q0 + rows - 1), progression_at(k, k0 + kcount - 1));
  for (int64_t c = m - 1; c >= 0 && keyed; --c) {
    if (c == branch || !head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    const BranchView view = branch_view(p, h, c);
    if (branch_holds(view, q, q0, rows, k, k0, kcount) != Holds::some) continue;
    const int64_t seg0 = first_pos / view.wc;
    keyed = last_pos / view.wc - seg0 < INT32_MAX;
    key[len++] = static_cast<int32_t>(c);
    key[len++] = c < branch;
    pw.has_zero = pw.has_zero || c < branch;
    progression_segments(view, q, q0, rows, seg0, -1, key + len);
    progression_segments(view, k, k0, kcount, seg0, -2, key + len + rows);
    for (int64_t col = kcount; col < kBC; ++col) key[len + rows + col] = -2;  // padding keys
    len += static_cast<int32_t>(rows + kBC);
  }
  if (keyed) {
    key[0] = len;
    key[1] = static_cast<int32_t>(rows);
    key[2] = static_cast<int32_t>(kcount);
    key[3] = static_cast<int32_t>(pw.uniform);
    key[4] = static_cast<int32_t>(pair_by_pair);
    if (memo.key[0] == len && std::memcmp(memo.key, key, sizeof(int32_t) * len) == 0) return pw;
    weights_from_key(key, memo.weights);
    std::memcpy(memo.key, key, sizeof(int32_t) * len);
    return pw;
  }

  memo.key[0] = -1;  // the weights below are not described by a key
  pw.has_zero = false;
  for (int64_t t = 0; t < rows; ++t)
    for (int c = 0; c < kBC; c += kW<T>) vstore(memo.weights + t * kBC + c, splat(pw.uniform));
  for (int64_t c = m - 1; c >= 0; --c) {
    if (c == branch || !head_uses_branch(p.head_mode, h, c, p.H, m)) continue;
    const BranchView view = branch_view(p, h, c);
    if (branch_holds(view, q, q0, rows, k, k0, kcount) != Holds::some) continue;
    apply_branch_one_by_one(view, c < branch, q, q0, rows, k, k0, kcount, memo.weights);
    pw.has_zero = pw.has_zero || c < branch;
  }
  return pw;
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_PAIR_WEIGHTS_H
