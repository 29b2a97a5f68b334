// index_rules.h - the index rules of SPEC 1-4, in one place.
//
// Segments, head offsets, selected rows, causal limits and the GQA head map are defined here
// once and used by the reference (cpu_ref/), the cpu backend, the CUDA kernels (cuda/) and the
// ring. A change of rule is a change of one function. Everything is plain integer arithmetic
// callable from host and device code; no allocation, no C++ library types.
//
// Checked by tests/reference/test_index_rules.cpp (hand-computed cases) and, through the reference, by
// every numerical test.
#ifndef DILATTN_INDEX_RULES_H
#define DILATTN_INDEX_RULES_H

#include <stdint.h>

#if defined(__CUDACC__)
#define DILATTN_HD __host__ __device__ __forceinline__
#else
#define DILATTN_HD inline
#endif

namespace dilattn {

// Head modes, the same values as dilattn_head_mode in dilattn.h (kept free of the C header so
// kernels can include this file alone).
enum HeadMode : int32_t { kHeadsMod = 0, kHeadsBlock = 1, kHeadsGroups = 2 };

DILATTN_HD int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
DILATTN_HD int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
// For a >= 0, b >= 1; written without a + b - 1 so sizes near 2^63 cannot overflow.
DILATTN_HD int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// ---------------------------------------------------------------- SPEC 1: grouped-query heads
// Query head h reads kv head h / (H / Hkv).
DILATTN_HD int64_t kv_head_of(int64_t h, int64_t H, int64_t Hkv) { return h / (H / Hkv); }

// ---------------------------------------------------------------- SPEC 2: causal limit
// Causal keeps keys j <= i + (Nk - Nq) (bottom-right aligned). Returns that last key, which is
// negative when row i sees no key at all.
DILATTN_HD int64_t causal_last_key(int64_t i, int64_t Nq, int64_t Nk) { return i + (Nk - Nq); }

// ---------------------------------------------------------------- SPEC 3: segments
// A segment longer than N is clipped to N.
DILATTN_HD int64_t clipped_segment(int64_t w, int64_t N) { return min_i64(w, N); }
// Segment [s0, s1) holding position p, for (clipped) segment length w.
DILATTN_HD int64_t segment_start(int64_t p, int64_t w) { return (p / w) * w; }
DILATTN_HD int64_t segment_end(int64_t s0, int64_t w, int64_t N) { return min_i64(s0 + w, N); }
DILATTN_HD int64_t segment_count(int64_t N, int64_t w) { return ceil_div(N, w); }

// ---------------------------------------------------------------- SPEC 3: head groups
// groups mode: m contiguous groups, group g holds floor(H/m) heads plus one when g < H mod m.
DILATTN_HD int64_t group_first_head(int64_t g, int64_t H, int64_t m) {
  return g * (H / m) + min_i64(g, H % m);
}
DILATTN_HD int64_t group_of_head(int64_t h, int64_t H, int64_t m) {
  const int64_t base = H / m, extra = H % m;
  const int64_t big = extra * (base + 1);  // heads in the groups that hold one more
  return h < big ? h / (base + 1) : extra + (h - big) / base;
}

// Does head h use branch b (of m branches)? mod and block: always; groups: only its own.
DILATTN_HD bool head_uses_branch(int32_t mode, int64_t h, int64_t b, int64_t H, int64_t m) {
  return mode != kHeadsGroups || group_of_head(h, H, m) == b;
}

// Offset o_b(h) in [0, r) of the selected positions of branch b for head h.
DILATTN_HD int64_t head_offset(int32_t mode, int64_t h, int64_t b, int64_t r, int64_t H) {
  if (mode == kHeadsMod) return h % r;
  if (mode == kHeadsBlock) return h / ceil_div(H, r);
  return b % r;  // groups: head h uses branch b = its group g, offset g mod r_g
}

// ---------------------------------------------------------------- SPEC 3: selected rows
// Position p of segment [s0, s1) is selected iff (p - s0) mod r == o.
DILATTN_HD bool is_selected(int64_t p, int64_t s0, int64_t r, int64_t o) {
  return (p - s0) % r == o;
}
// The segment number of position p in a branch (clipped segment length wc, dilation r, offset
// o) when the branch selects p, else -1. The branch holds the pair (i, j), i.e. j is one of
// its keys for row i before the causal rule, iff both numbers are equal and not -1: the pair
// multiplicity of SPEC 3's multiset union is the count of such branches.
DILATTN_HD int64_t selected_segment(int64_t p, int64_t wc, int64_t r, int64_t o) {
  const int64_t s0 = segment_start(p, wc);
  return is_selected(p, s0, r, o) ? p / wc : -1;
}
// How many positions of [s0, s1) are selected: those s0 + o + t*r < s1.
DILATTN_HD int64_t selected_count(int64_t s0, int64_t s1, int64_t r, int64_t o) {
  return s0 + o < s1 ? ceil_div(s1 - s0 - o, r) : 0;
}
// The t-th selected position of a segment (t < selected_count).
DILATTN_HD int64_t selected_position(int64_t s0, int64_t r, int64_t o, int64_t t) {
  return s0 + o + t * r;
}

// The keys one branch gives query row i: the arithmetic progression first, first + step, ...
// (count terms). count == 0 when the branch does not select row i.
struct KeyProgression {
  int64_t first, step, count;
};

// SPEC 3: the selected keys of i's own segment, and only j <= i when causal (Nq == Nk == N).
// w and r are the branch's raw values; o its head offset.
DILATTN_HD KeyProgression dilated_keys(int64_t i, int64_t N, int64_t w, int64_t r, int64_t o,
                                       bool causal) {
  KeyProgression kp{0, r, 0};
  const int64_t wc = clipped_segment(w, N);
  const int64_t s0 = segment_start(i, wc);
  const int64_t s1 = segment_end(s0, wc, N);
  if (!is_selected(i, s0, r, o)) return kp;
  kp.first = s0 + o;
  kp.count = causal ? (i - kp.first) / r + 1 : selected_count(s0, s1, r, o);
  return kp;
}

// SPEC 2: the keys of dense attention, 0 .. Nk-1, cut at the causal limit.
DILATTN_HD KeyProgression dense_keys(int64_t i, int64_t Nq, int64_t Nk, bool causal) {
  KeyProgression kp{0, 1, Nk};
  if (causal) kp.count = max_i64(0, min_i64(Nk, causal_last_key(i, Nq, Nk) + 1));
  return kp;
}

// ---------------------------------------------------------------- SPEC 4: block-sparse blocks
// Keys of key block jb, cut at Nk and, when causal, at row i's causal limit.
DILATTN_HD KeyProgression block_keys(int64_t i, int64_t jb, int64_t bk, int64_t Nq, int64_t Nk,
                                     bool causal) {
  const int64_t first = jb * bk;
  int64_t end = min_i64(first + bk, Nk);
  if (causal) end = min_i64(end, causal_last_key(i, Nq, Nk) + 1);
  return KeyProgression{first, 1, max_i64(0, end - first)};
}

// ---------------------------------------------------------------- walking progressions
// The t-th term of a progression, for t < count: a real position, so it cannot overflow even
// when the step is near INT64_MAX (r >= N leaves one term).
DILATTN_HD int64_t progression_at(const KeyProgression& kp, int64_t t) {
  return kp.first + t * kp.step;
}
// How many terms of kp are <= limit (terms ascend).
// Step 1 (dense, causal, block-sparse and dilation 1) needs no division: the kernels call these
// per row and chunk, where a 64-bit division is a subroutine of dozens of instructions.
DILATTN_HD int64_t terms_at_most(const KeyProgression& kp, int64_t limit) {
  if (kp.count == 0 || limit < kp.first) return 0;
  const int64_t span = limit - kp.first;
  return min_i64(kp.count, (kp.step == 1 ? span : span / kp.step) + 1);
}
// The index of the first term >= x (count when there is none).
DILATTN_HD int64_t first_term_at_least(const KeyProgression& kp, int64_t x) {
  if (x <= kp.first) return 0;
  const int64_t gap = x - kp.first;
  return min_i64(kp.count, kp.step == 1 ? gap : ceil_div(gap, kp.step));
}

// SPEC 2: the first query row that may see key j under the causal rule (the inverse of
// causal_last_key).
DILATTN_HD int64_t causal_first_query(int64_t j, int64_t Nq, int64_t Nk) { return j - (Nk - Nq); }

// SPEC 3: the selected positions of segment [s0, s1) (dilation r, offset o) inside [lo, hi).
// Written so that no term past the last one is formed: with r near INT64_MAX that term
// would overflow.
DILATTN_HD KeyProgression selected_in_range(int64_t s0, int64_t s1, int64_t r, int64_t o,
                                            int64_t lo, int64_t hi) {
  const int64_t t_lo = lo > s0 + o ? ceil_div(lo - s0 - o, r) : 0;
  const int64_t t_hi = selected_count(s0, min_i64(s1, hi), r, o);
  if (t_hi <= t_lo) return KeyProgression{s0 + o, r, 0};
  return KeyProgression{selected_position(s0, r, o, t_lo), r, t_hi - t_lo};
}

// ---------------------------------------------------------------- SPEC 10.1: sliding window
// Key j is allowed for row i iff i + d - left <= j <= i + d + right, d = Nk - Nq, on positions
// before any dilation; a bound of -1 is unbounded. Bounds are -1 or >= 0 (desc.cpp checks).
// A bound above Nq + Nk reaches past every key, so it is clipped there and i + d -+ bound
// cannot overflow.
DILATTN_HD int64_t window_bound(int64_t bound, int64_t Nq, int64_t Nk) {
  return min_i64(bound, Nq + Nk);
}
// The window of row i as two bounds: it allows key j iff window_first_key <= j <=
// window_last_key (INT64_MIN and INT64_MAX for an unbounded side). Both never decrease as i
// grows, so a tile of rows can be tested against a tile of keys by its first and last row
// (the cpu backend's tile skipping, cpu/cpu_variants.h).
DILATTN_HD int64_t window_first_key(int64_t i, int64_t Nq, int64_t Nk, int64_t left) {
  return left < 0 ? INT64_MIN : i + (Nk - Nq) - window_bound(left, Nq, Nk);
}
DILATTN_HD int64_t window_last_key(int64_t i, int64_t Nq, int64_t Nk, int64_t right) {
  return right < 0 ? INT64_MAX : i + (Nk - Nq) + window_bound(right, Nq, Nk);
}
DILATTN_HD bool window_allows(int64_t i, int64_t j, int64_t Nq, int64_t Nk, int64_t left,
                              int64_t right) {
  return j >= window_first_key(i, Nq, Nk, left) && j <= window_last_key(i, Nq, Nk, right);
}
// The terms of kp (ascending keys) that the window of row i allows: still one progression.
DILATTN_HD KeyProgression window_cut(const KeyProgression& kp, int64_t i, int64_t Nq, int64_t Nk,
                                     int64_t left, int64_t right) {
  const int64_t a = i + (Nk - Nq);
  const int64_t t_lo = left < 0 ? 0 : first_term_at_least(kp, a - window_bound(left, Nq, Nk));
  const int64_t t_hi = right < 0 ? kp.count : terms_at_most(kp, a + window_bound(right, Nq, Nk));
  if (t_hi <= t_lo) return KeyProgression{kp.first, kp.step, 0};
  return KeyProgression{progression_at(kp, t_lo), kp.step, t_hi - t_lo};
}

// ---------------------------------------------------------------- SPEC 10.2: packed sequences
// The terms of kp (ascending keys) in [lo, hi]: still one progression.
DILATTN_HD KeyProgression range_cut(const KeyProgression& kp, int64_t lo, int64_t hi) {
  const int64_t t_lo = first_term_at_least(kp, lo);
  const int64_t t_hi = terms_at_most(kp, hi);
  if (t_hi <= t_lo) return KeyProgression{kp.first, kp.step, 0};
  return KeyProgression{progression_at(kp, t_lo), kp.step, t_hi - t_lo};
}
// kp moved by delta positions: a sequence's keys into the packed tensor (delta = its first
// key) or back (delta = minus it).
DILATTN_HD KeyProgression shifted(const KeyProgression& kp, int64_t delta) {
  return KeyProgression{kp.first + delta, kp.step, kp.count};
}

// SPEC 4: the rows (or keys) of block jb of size bs, cut at n.
DILATTN_HD KeyProgression block_range(int64_t jb, int64_t bs, int64_t n) {
  const int64_t first = jb * bs;
  return KeyProgression{first, 1, max_i64(0, min_i64(first + bs, n) - first)};
}

// SPEC 10.2 with SPEC 4: a problem of n rows (or keys) that are rows origin .. origin + n - 1
// of a block-sparse mask's (one sequence of a packed batch, whose mask is the batch's). The
// mask's blocks that meet them, first_block_at .. + blocks_meeting - 1, and those of block jb
// as the problem's own indices (a range, cut to [0, n)). origin = 0 gives block_range.
// first_block_at skips its 64-bit division for origin = 0 (every problem but a packed
// sequence): the CUDA kernels ask it for every row of every span.
DILATTN_HD int64_t first_block_at(int64_t origin, int64_t bs) {
  return origin == 0 ? 0 : origin / bs;
}
DILATTN_HD int64_t blocks_meeting(int64_t origin, int64_t n, int64_t bs) {
  return n <= 0 ? 0 : ceil_div(origin + n, bs) - origin / bs;
}
DILATTN_HD KeyProgression block_range_at(int64_t jb, int64_t bs, int64_t origin, int64_t n) {
  const int64_t lo = max_i64(jb * bs - origin, 0), hi = min_i64(jb * bs + bs - origin, n);
  return KeyProgression{lo, 1, max_i64(0, hi - lo)};
}
// Keys of the mask's key block jb as such a problem's keys (origin k0), cut, when causal, at
// row i's causal limit in the problem (Nq, Nk).
DILATTN_HD KeyProgression block_keys_at(int64_t i, int64_t jb, int64_t bk, int64_t k0,
                                        int64_t Nq, int64_t Nk, bool causal) {
  const KeyProgression keys = block_range_at(jb, bk, k0, Nk);
  int64_t end = keys.first + keys.count;
  if (causal) end = min_i64(end, causal_last_key(i, Nq, Nk) + 1);
  return KeyProgression{keys.first, 1, max_i64(0, end - keys.first)};
}

}  // namespace dilattn

#endif  // DILATTN_INDEX_RULES_H
