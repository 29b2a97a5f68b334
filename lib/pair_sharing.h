// pair_sharing.h - SPEC 3.4's pairs that several dilated branches hold, computed once: the
// weight rule, and its tile-sized form for the tensor-core kernels, forward and backward.
//
// SPEC 3.4 sums a row over the multiset union of its branches' keys, so a pair (i, j) that k
// branches hold counts k times. Computed once with weight k it is the same sum (the forward's
// sums are linear in a pair's occurrences, and so are the backward's P and dS). The rule, for
// the pairs of branch b:
//   W_b(i, j) = 0                                  if a branch before b holds (i, j),
//               1 + (branches after b holding it)  otherwise.
// Branch c holds (i, j) when it selects both in the same segment of c (index_rules.h
// selected_segment). The cpu backend applies it tile by tile (cpu/cpu_pair_weights.h); the
// tensor-core forwards (cuda/forward_mma.cu, forward_mma_tf32.cu, forward_wgmma.cu) and
// backwards (cuda/mma_backward_loop.cuh) apply it where every pair of branches nests
// (branches_share_pairs): then W is constant over the keys a lane holds in a span, so it costs
// one added term in each row's exponent, and the keys an earlier branch holds whole are cut out
// of the tile's span (shared_skip_range). The rule is symmetric in i and j, so the backward's
// dK/dV pass, which walks key tiles, reads the same functions with keys and rows swapped. Other
// configurations compute each branch's pairs in full, as SPEC 3.4 writes it.
//
// Checked by tests/reference/test_pair_sharing.cpp: the span weights and skip ranges against the
// rule pair by pair, over nested and mixed configurations.
#ifndef DILATTN_PAIR_SHARING_H
#define DILATTN_PAIR_SHARING_H

#include <math.h>
#include <stdint.h>

#include "index_rules.h"

namespace dilattn {

// At most this many branches share pairs on the GPU (the launch parameters hold their shapes).
constexpr int kMaxSharingBranches = 8;
// The query tile and key chunk sizes shared_skip_range's cuts stay aligned to: the largest
// tile of the kernels that share pairs (forward_wgmma.cu's 128 rows).
constexpr int64_t kSharingTileAlign = 128;

// One branch as a head sees it: clipped segment length, dilation, the head's offset.
struct SharedBranch {
  int64_t wc, r, o;
};

// Does branch c hold the pair (i, j)?
DILATTN_HD bool branch_holds_pair(const SharedBranch& c, int64_t i, int64_t j) {
  const int64_t si = selected_segment(i, c.wc, c.r, c.o);
  return si >= 0 && si == selected_segment(j, c.wc, c.r, c.o);
}

// W_b(i, j) by the rule above, for a pair branch b holds: `used[c]` says whether the head uses
// branch c (SPEC 3.2). The definition, pair by pair; the kernels use the forms below.
DILATTN_HD int64_t shared_pair_weight(const SharedBranch* branches, const bool* used, int64_t m,
                                      int64_t b, int64_t i, int64_t j) {
  int64_t weight = 1;
  for (int64_t c = 0; c < m; ++c) {
    if (c == b || !used[c] || !branch_holds_pair(branches[c], i, j)) continue;
    if (c < b) return 0;
    ++weight;
  }
  return weight;
}

// Whether branches b and c (clipped segment lengths wcb, wcc; dilations rb, rc) nest so that
// W_b is constant per lane and span: either b's segments lie inside c's and c selects b's
// positions all alike (rb a multiple of rc) or every (rc / rb)-th of them with rc / rb dividing
// 8 (a lane's keys in a chunk, 8n + 2t + e, are then alike mod rc / rb); or c is earlier, selects
// b's positions alike and cuts b's segments into whole tiles, so its pairs are whole key ranges
// a tile skips.
DILATTN_HD bool branch_pair_nests(int64_t b, int64_t c, int64_t wcb, int64_t rb, int64_t wcc,
                                  int64_t rc) {
  if (wcc % wcb == 0) return rb % rc == 0 || (rc % rb == 0 && (8 * rb) % rc == 0);
  return c < b && rb % rc == 0 && wcb % wcc == 0 && wcc % (kSharingTileAlign * rb) == 0;
}

// Positions below this bound fit the 32-bit forms of the functions below (index type int32_t):
// a GPU divides 64-bit integers in a long software routine. The bound leaves room for a lane's
// keys past a span's end.
constexpr int64_t kNarrowPositions = int64_t{1} << 30;

// Whether a dilated call with these branches (segment lengths w, dilations r; N rows) shares its
// pairs on the GPU: 2 to kMaxSharingBranches branches, every ordered pair nesting, and N at most
// kNarrowPositions (the kernels run the forms below in 32-bit arithmetic).
DILATTN_HD bool branches_share_pairs(const int64_t* w, const int64_t* r, int64_t m, int64_t N) {
  if (m < 2 || m > kMaxSharingBranches || N > kNarrowPositions) return false;
  for (int64_t b = 0; b < m; ++b)
    for (int64_t c = 0; c < m; ++c)
      if (c != b && !branch_pair_nests(b, c, clipped_segment(w[b], N), r[b],
                                       clipped_segment(w[c], N), r[c]))
        return false;
  return true;
}

// The forms below read the branches through `branches`: branches.at(c) is branch c as the head
// sees it (SharedBranch) and branches.used(c) whether the head uses it. SharedBranchArray gives
// them from arrays; a kernel gives them from its launch parameters.
struct SharedBranchArray {
  const SharedBranch* branch;
  const bool* use;
  DILATTN_HD SharedBranch at(int64_t c) const { return branch[c]; }
  DILATTN_HD bool used(int64_t c) const { return use[c]; }
};

// selected_segment in index type I (int64_t, or int32_t for positions below kNarrowPositions):
// the segment number of position q in branch c when c selects it, else -1.
template <class I>
DILATTN_HD I selected_segment_as(I q, const SharedBranch& c) {
  const I wc = static_cast<I>(c.wc), seg = q / wc;
  return (q - seg * wc) % static_cast<I>(c.r) == static_cast<I>(c.o) ? seg : I(-1);
}

// The keys of row i's progression in branch b (index t: position first + t * r_b, first being
// the first selected position of i's segment of b) whose pairs with i an earlier branch holds
// whole, as the range [lo, hi) of t (lo = hi: none). Under branches_share_pairs every row of a
// tile gets the same range, and its ends fall on whole tiles and chunks. An earlier branch c
// counts when it selects b's positions alike (r_b a multiple of its r) and selects i; the
// range is then b's keys in i's segment of c. The ranges of several such branches all hold i's
// own index, so their union is one range. In index type I (see kNarrowPositions).
template <class I, class Branches>
DILATTN_HD void shared_skip_range_as(const Branches& branches, int64_t b, int64_t N, int64_t i,
                                     int64_t* lo, int64_t* hi) {
  const SharedBranch bb = branches.at(b);
  const I wb = static_cast<I>(bb.wc), rb = static_cast<I>(bb.r), row = static_cast<I>(i);
  const I s0 = (row / wb) * wb, s1 = s0 + wb < static_cast<I>(N) ? s0 + wb : static_cast<I>(N);
  const I first = s0 + static_cast<I>(bb.o);  // the segment's first selected position
  I t_lo_all = 0, t_hi_all = 0;
  for (int64_t c = 0; c < b; ++c) {
    if (!branches.used(c)) continue;
    const SharedBranch cc = branches.at(c);
    if (bb.r % cc.r != 0) continue;
    const I wc = static_cast<I>(cc.wc), c0 = (row / wc) * wc;
    if ((row - c0) % static_cast<I>(cc.r) != static_cast<I>(cc.o)) continue;  // c skips row i
    const I from = c0 > s0 ? c0 : s0;
    const I to = c0 + wc < s1 ? c0 + wc : s1;
    const I t_lo = from > first ? (from - first + rb - 1) / rb : 0;
    const I t_hi = to > first ? (to - first + rb - 1) / rb : 0;
    if (t_lo >= t_hi) continue;
    if (t_lo_all == t_hi_all) {
      t_lo_all = t_lo;
      t_hi_all = t_hi;
    } else {
      t_lo_all = t_lo < t_lo_all ? t_lo : t_lo_all;
      t_hi_all = t_hi > t_hi_all ? t_hi : t_hi_all;
    }
  }
  *lo = t_lo_all;
  *hi = t_hi_all;
}
DILATTN_HD void shared_skip_range(const SharedBranch* branches, const bool* used, int64_t b,
                                  int64_t N, int64_t i, int64_t* lo, int64_t* hi) {
  const SharedBranchArray array{branches, used};
  if (N <= kNarrowPositions)
    shared_skip_range_as<int32_t>(array, b, N, i, lo, hi);
  else
    shared_skip_range_as<int64_t>(array, b, N, i, lo, hi);
}

// W_b for a lane's rows i0, i1 (-1: none) and its keys of one span outside the skip range,
// whose first-column keys are j0 (columns 2t) and j1 (columns 2t + 1): weight[r][e] for row r
// and column parity e. Under branches_share_pairs the lane's other keys of the span (further by
// a multiple of 8 terms) and its rows give the same weights, and a branch whose pairs the span
// could share only in part (smaller segments) holds none of them (they are in the skip range).
// Each branch's segment numbers of the two rows and two keys, then W from their matches: four
// selected_segment_as a branch.
template <class I, class Branches>
DILATTN_HD void shared_span_weights_as(const Branches& branches, int64_t m, int64_t b, int64_t i0,
                                       int64_t i1, int64_t j0, int64_t j1,
                                       int32_t (&weight)[2][2]) {
  const int64_t rows[2] = {i0, i1}, keys[2] = {j0, j1};
  for (int r = 0; r < 2; ++r)
    for (int e = 0; e < 2; ++e) weight[r][e] = 1;
  for (int64_t c = 0; c < m; ++c) {
    if (c == b || !branches.used(c)) continue;
    const SharedBranch cc = branches.at(c);
    I row_seg[2], key_seg[2];
    for (int x = 0; x < 2; ++x) {
      row_seg[x] = rows[x] < 0 ? I(-1) : selected_segment_as<I>(static_cast<I>(rows[x]), cc);
      key_seg[x] = selected_segment_as<I>(static_cast<I>(keys[x]), cc);
    }
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e)
        if (row_seg[r] >= 0 && row_seg[r] == key_seg[e])
          weight[r][e] = c < b ? 0 : (weight[r][e] == 0 ? 0 : weight[r][e] + 1);
  }
}

// A weight as the kernels add it to the exponent: log2 of 1 .. kMaxSharingBranches, -inf for 0.
// On the GPU (sm_80+) the MUFU.LG2 instruction alone (lg2.approx.ftz: within 2^-22 of log2 on
// these integers), not log2f's software sequence of some twenty instructions: the kernels take
// it for four weights a chunk, and the weight only scales a probability, which SPEC 8's
// tolerances hold to far less. Host: log2f.
DILATTN_HD float log2_of_weight(int32_t weight) {
  if (weight == 0) return -static_cast<float>(INFINITY);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(static_cast<float>(weight)));
  return y;
#else
  return log2f(static_cast<float>(weight));
#endif
}

// shared_span_weights_as from arrays, as log2_of_weight.
template <class I>
DILATTN_HD void shared_span_log_weights_as(const SharedBranch* branches, const bool* used,
                                           int64_t m, int64_t b, int64_t i0, int64_t i1,
                                           int64_t j0, int64_t j1, float (&lw)[2][2]) {
  int32_t weight[2][2];
  shared_span_weights_as<I>(SharedBranchArray{branches, used}, m, b, i0, i1, j0, j1, weight);
  for (int r = 0; r < 2; ++r)
    for (int e = 0; e < 2; ++e) lw[r][e] = log2_of_weight(weight[r][e]);
}
DILATTN_HD void shared_span_log_weights(const SharedBranch* branches, const bool* used,
                                        int64_t m, int64_t b, int64_t N, int64_t i0, int64_t i1,
                                        int64_t j0, int64_t j1, float (&lw)[2][2]) {
  if (N <= kNarrowPositions)
    shared_span_log_weights_as<int32_t>(branches, used, m, b, i0, i1, j0, j1, lw);
  else
    shared_span_log_weights_as<int64_t>(branches, used, m, b, i0, i1, j0, j1, lw);
}

}  // namespace dilattn

#endif  // DILATTN_PAIR_SHARING_H
