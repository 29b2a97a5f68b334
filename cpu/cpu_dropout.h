// cpu_dropout.h - attention dropout in the cpu backend (SPEC 11): the keep decisions of an S
// tile, drawn a vector of generator calls at a time, and the factor M_ij = keep_ij / (1 - p)
// applied to a tile.
//
// The decision is lib/dropout_rng.h's and nothing else: Philox4x32-10 of the counter
// (offset, i, b H + h, 4 floor(j / 16) + j mod 4) under the key (seed mod 2^32, seed / 2^32),
// word floor(j / 4) mod 4, kept iff that word is at least ceil(p 2^32). This file computes the
// same function for many calls of one row at once: each 32-bit lane of a vector is one generator
// call, and each round is the scalar round lane by lane, its 32x32 -> 64-bit products as
// 64-bit-lane multiplies (philox_half). What the row's calls share is computed once a row
// (row_draws): four of each call's twenty products. What a call shares with every row (two
// more: round 2's product of word 2 and round 3's of word 0) is computed once a tile
// (RowCalls), as the rows of a tile take the same keys. A call's own work is then 14 products.
// The forward and backward draw a tile's rows between the steps of the score product that
// precedes their use (TileDraws, below), where the integer rounds overlap the products.
// tests/cpu/test_cpu_dropout_draws.cpp checks every instruction set's copy bit for bit against
// dropout_keep, drawn alone and inside products.
//
// How a tile row's keys map to generator calls (one call gives the words of keys j, j + 4,
// j + 8, j + 12 of an aligned run of 16):
//   keys 1, 2 or 4 apart (dense, block-sparse, a dilated branch of dilation 1, 2 or 4): lanes
//     are the calls of the residues mod 4 the row takes in consecutive runs, so every word of
//     every call is used: a row of 64 keys takes 16 calls (one AVX-512 vector, two AVX2 ones),
//     one more vector where the keys do not start a run (row_keep_bits, grouped_keep_bits);
//   keys further apart: lanes are the keys themselves, one call each, of which one word is used
//     (keep_bits_strided).
// A row's frame (SPEC 10.2: the sequence, the row and the keys within it) comes from
// Problem::frame_of_row, which is (b, i, j) itself without a packed batch; the row's and keys'
// positions and the head from Problem::row_position, key_position and draw_head, which for a
// ring's placed sub-problem (SPEC 5.5) are the whole problem's, so a ring draws the decisions
// of the single-process call.
//
// Pairs several dilated branches hold (cpu_pair_weights.h) are computed once with weight k;
// their decision is the pair's (i, j), the same in every branch, which is SPEC 11's one decision
// per pair: P k M.
#ifndef DILATTN_CPU_DROPOUT_H
#define DILATTN_CPU_DROPOUT_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

typedef uint32_t u32vec __attribute__((vector_size(kVecBytes)));
typedef uint64_t u64vec __attribute__((vector_size(kVecBytes)));
constexpr int kDrawLanes = kVecBytes / 4;  // generator calls per vector
constexpr int kPhiloxRounds = 10;

// One call's dropout: inactive for p = 0 (no dropout arithmetic at all, SPEC 11), else the
// seed's round keys, the threshold and 1 / (1 - p) (in f64, then rounded to T by the user).
struct TileDropout {
  bool active = false;
  bool drop_all = false;  // threshold 2^32 (p within 2^-32 of 1): no 32-bit draw keeps a pair
  uint32_t threshold = 0;
  uint64_t offset = 0;
  int64_t H = 1;
  double keep_scale = 1;
  uint32_t k0[kPhiloxRounds] = {}, k1[kPhiloxRounds] = {};  // the key of each round
  u64vec k0_lanes[kPhiloxRounds] = {}, k1_lanes[kPhiloxRounds] = {};  // the same in every lane
};

inline TileDropout tile_dropout(const Problem& p, const DropoutCall& call) {
  TileDropout d;
  d.active = p.dropout_p > 0;
  if (!d.active) return d;
  const uint64_t threshold = dropout_threshold(p.dropout_p);
  d.drop_all = threshold > UINT32_MAX;
  d.threshold = static_cast<uint32_t>(d.drop_all ? 0 : threshold);
  d.offset = call.offset;
  d.H = p.draw_heads();
  d.keep_scale = 1.0 / (1.0 - p.dropout_p);
  uint32_t k0 = static_cast<uint32_t>(call.seed), k1 = static_cast<uint32_t>(call.seed >> 32);
  for (int r = 0; r < kPhiloxRounds; ++r) {  // the key schedule of philox4x32
    d.k0[r] = k0;
    d.k1[r] = k1;
    d.k0_lanes[r] = u64vec{} + static_cast<uint64_t>(k0);
    d.k1_lanes[r] = u64vec{} + static_cast<uint64_t>(k1);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return d;
}

inline u32vec splat_u32(uint32_t x) { return u32vec{} + x; }

// The 64-bit products (low word of each 64-bit lane of a) * m: one unsigned 32x32 -> 64-bit
// multiply per pair of 32-bit lanes (pmuludq; the all-lanes mask form on AVX-512, whose
// unmasked intrinsic starts from an undefined vector, which GCC 12 warns about, as in
// cpu_microkernel.h).
inline u64vec mul_low_words(u64vec a, uint32_t m) {
#if DILATTN_CPU_AVX512
  return (u64vec)_mm512_mask_mul_epu32((__m512i)a, 0xFF, (__m512i)a,
                                       _mm512_set1_epi32(static_cast<int>(m)));
#elif defined(DILATTN_CPU_TARGET_AVX2) || (DILATTN_CPU_VEC_BYTES == 32 && defined(__AVX2__))
  return (u64vec)_mm256_mul_epu32((__m256i)a, _mm256_set1_epi32(static_cast<int>(m)));
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE2__)
  return (u64vec)_mm_mul_epu32((__m128i)a, _mm_set1_epi32(static_cast<int>(m)));
#else
  return (a & 0xFFFFFFFFull) * static_cast<uint64_t>(m);
#endif
}

// philox4x32 (lib/dropout_rng.h) of many calls of one row at once, lane by lane. The rounds run
// on two halves, each holding every other 32-bit lane in the low words of 64-bit lanes (the even
// lanes where they lie, the odd ones shifted down): a round's product is then one multiply whose
// high word a shift brings down, with no shuffles. The high words carry garbage that nothing
// reads: products read low words only, and each xor feeds a product or a result's low word.
inline void philox_round_half(u64vec& c0, u64vec& c1, u64vec& c2, u64vec& c3, u64vec k0,
                              u64vec k1) {
  const u64vec p0 = mul_low_words(c0, kPhiloxM0);  // (hi0, lo0)
  const u64vec p1 = mul_low_words(c2, kPhiloxM1);  // (hi1, lo1)
  c0 = (p1 >> 32) ^ c1 ^ k0;                       // hi1 ^ c1 ^ k0
  c2 = (p0 >> 32) ^ c3 ^ k1;                       // hi0 ^ c3 ^ k1
  c1 = p1;                                         // lo1
  c3 = p0;                                         // lo0
}

// What a row's calls have in common (SPEC 11.1: the counter is (offset, i, b H + h, call), the
// call last). The first round's products read words 0 and 2, the same in every call, so only its
// word 2 = hi0 ^ call ^ k1 differs; the second round's product of word 0 and the third's of
// word 2 are the same in every call too. With them computed once a row, the calls' first three
// rounds take 2 products instead of 6 (philox_half):
//   round 1: c = (U, U, call ^ call_xor, U)
//   round 2: (hi1, lo1) = M1 c2;  c = (hi1 ^ xor_b, lo1, U, U)
//   round 3: (hi0, lo0) = M0 c0;  c = (lo1 ^ xor_c, word1, hi0 ^ xor_e, lo0)
struct RowDraws {
  uint32_t call_xor, xor_b, xor_c, xor_e, word1;
};

inline uint32_t high_word(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

inline RowDraws row_draws(const TileDropout& d, uint32_t offset, uint32_t i, uint32_t head_word) {
  const uint64_t q0 = static_cast<uint64_t>(kPhiloxM0) * offset;     // round 1, word 0
  const uint64_t q1 = static_cast<uint64_t>(kPhiloxM1) * head_word;  // round 1, word 2
  const uint32_t c0 = high_word(q1) ^ i ^ d.k0[0], c1 = static_cast<uint32_t>(q1);
  const uint32_t c3 = static_cast<uint32_t>(q0);
  const uint64_t r0 = static_cast<uint64_t>(kPhiloxM0) * c0;  // round 2, word 0
  const uint32_t c2_next = high_word(r0) ^ c3 ^ d.k1[1];
  const uint64_t r1 = static_cast<uint64_t>(kPhiloxM1) * c2_next;  // round 3, word 2
  RowDraws row;
  row.call_xor = high_word(q0) ^ d.k1[0];
  row.xor_b = c1 ^ d.k0[1];
  row.xor_c = high_word(r1) ^ d.k0[2];
  row.word1 = static_cast<uint32_t>(r1);
  row.xor_e = static_cast<uint32_t>(r0) ^ d.k1[2];
  return row;
}

// What no row changes in a half of calls (x's low words): round 2's product of word 2 and round
// 3's of word 0 read the call, the offset and the head alone (row_draws: call_xor and xor_b
// hold no row), so the rows of a tile, which share their keys, compute them once (RowCalls).
struct CallHalf {
  u64vec p1, p0, p0_high;  // round 2's product (hi1, lo1), round 3's (hi0, lo0), and hi0
};

inline CallHalf call_half(u64vec x, const RowDraws& row) {
  CallHalf c;
  c.p1 = mul_low_words(x ^ static_cast<uint64_t>(row.call_xor), kPhiloxM1);
  c.p0 = mul_low_words((c.p1 >> 32) ^ static_cast<uint64_t>(row.xor_b), kPhiloxM0);
  c.p0_high = c.p0 >> 32;
  return c;
}

// A half of calls after round 3, from their common part and the row's.
inline void philox_start(const CallHalf& x, const RowDraws& row, u64vec* c) {
  c[0] = x.p1 ^ static_cast<uint64_t>(row.xor_c);
  c[1] = u64vec{} + static_cast<uint64_t>(row.word1);
  c[2] = x.p0_high ^ static_cast<uint64_t>(row.xor_e);
  c[3] = x.p0;
}

// The ten rounds of one half of calls.
inline void philox_half(const CallHalf& x, const RowDraws& row, const TileDropout& d, u64vec* c) {
  philox_start(x, row, c);
  for (int r = 3; r < kPhiloxRounds; ++r)
    philox_round_half(c[0], c[1], c[2], c[3], d.k0_lanes[r], d.k1_lanes[r]);
}

// Bit l set where lane l of w keeps its pair (w[l] >= the threshold).
inline uint32_t kept_lanes(u32vec w, const TileDropout& d) {
#if DILATTN_CPU_AVX512
  return _mm512_cmpge_epu32_mask((__m512i)w, _mm512_set1_epi32(static_cast<int>(d.threshold)));
#else
  typedef int32_t i32vec __attribute__((vector_size(kVecBytes)));
  const i32vec keep = w >= splat_u32(d.threshold);  // -1 where kept
#if DILATTN_CPU_VEC_BYTES == 32
  return static_cast<uint32_t>(_mm256_movemask_ps((__m256)keep));
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE__)
  return static_cast<uint32_t>(_mm_movemask_ps((__m128)keep));
#else
  uint32_t bits = 0;
  for (int l = 0; l < kDrawLanes; ++l) bits |= static_cast<uint32_t>(keep[l] != 0) << l;
  return bits;
#endif
#endif
}

// One result word of every lane's call from its two halves' copies (the even lanes' in e's low
// words, the odd lanes' in o's): a shift and a blend, which on Zen 4 leave the product's pipes
// free, where a compare a half would take one of their slots.
inline u32vec merged_halves(u64vec e, u64vec o) {
  return (u32vec)((e & 0xFFFFFFFFull) | (o << 32));
}

// Bit l set where lane l's call keeps its pair, from the two halves' copies of one result word.
inline uint32_t kept_halves(u64vec e, u64vec o, const TileDropout& d) {
  return kept_lanes(merged_halves(e, o), d);
}

// Whether TileDraws draws inside the product: on AVX-512, whose 32 registers hold a half vector
// of calls beside the product's register block. With 16 they would spill.
constexpr bool kDrawsInProduct = DILATTN_CPU_AVX512 != 0;

// A vector of calls (a call a 32-bit lane) as its two halves' common parts.
struct CallVector {
  CallHalf even, odd;
};

inline CallVector call_vector(u32vec calls, const RowDraws& row) {
  return CallVector{call_half((u64vec)calls, row), call_half((u64vec)calls >> 32, row)};
}

// For each result word m of the calls: bit l of kept[m] set where lane l's word m keeps its pair.
inline void kept_words(const CallVector& calls, const RowDraws& row, const TileDropout& d,
                       uint32_t* kept) {
  u64vec e[4], o[4];
  philox_half(calls.even, row, d, e);
  philox_half(calls.odd, row, d, o);
  for (int m = 0; m < 4; ++m) kept[m] = kept_halves(e[m], o[m], d);
}

// The calls in the lanes of `calls`, each lane's four result words.
inline void philox_lanes(u32vec calls, const RowDraws& row, const TileDropout& d, u32vec* w) {
  const CallVector v = call_vector(calls, row);
  u64vec e[4], o[4];
  philox_half(v.even, row, d, e);
  philox_half(v.odd, row, d, o);
  const u64vec low = u64vec{} + 0xFFFFFFFFull;
  for (int m = 0; m < 4; ++m) w[m] = (u32vec)((e[m] & low) | (o[m] << 32));
}

// kSpreadGroups<g>.bits[m]: the byte m's bits as groups of g (g = 1, 2 or 4), group x moved to
// bit 4 g x (a table: one load per byte, where shifts and masks would take a dozen instructions).
template <int g>
struct SpreadGroupsTable {
  uint32_t bits[256];
  constexpr SpreadGroupsTable() : bits() {
    for (int m = 0; m < 256; ++m)
      for (int l = 0; l < 8; ++l)
        if ((m >> l) & 1) bits[m] |= uint32_t{1} << (4 * g * (l / g) + l % g);
  }
};
template <int g>
inline constexpr SpreadGroupsTable<g> kSpreadGroups{};

// The bits kSpreadGroups<g> moves the kDrawLanes bits of a word to.
template <int g>
constexpr uint64_t spread_mask() {
  uint64_t mask = 0;
  for (int l = 0; l < kDrawLanes; ++l) mask |= uint64_t{1} << (4 * g * (l / g) + l % g);
  return mask;
}

// The kDrawLanes bits of x (bit l: lane l) spread as the table says, 32 bits a byte; with BMI2,
// one pdep does the same (a scalar instruction: it leaves the vector pipes to the products).
template <int g>
inline uint64_t spread_groups(uint32_t x) {
#if DILATTN_CPU_PDEP
  return _pdep_u64(x, spread_mask<g>());
#else
  uint64_t out = kSpreadGroups<g>.bits[x & 0xFF];
  if (kDrawLanes > 8) out |= static_cast<uint64_t>(kSpreadGroups<g>.bits[(x >> 8) & 0xFF]) << 32;
  return out;
#endif
}

inline u32vec lane_index() {
  u32vec v;
  for (int l = 0; l < kDrawLanes; ++l) v[l] = static_cast<uint32_t>(l);
  return v;
}

// floor(x / 16) for any int64 x (a key of another packed sequence may lie before the frame;
// its decision is never used, but it must not overflow).
inline int64_t run_of(int64_t x) { return x >= 0 ? x / 16 : -((-x + 15) / 16); }

// The call vectors of a tile row's keys when they are 1, 2 or 4 apart, with each call's common
// part (CallHalf). The rows of a tile share their keys, so dropout_keep_bits computes these once
// a tile and reuses them while the keys, the step and the head stay the same.
constexpr int kKeysPerCallVector = 4 * kDrawLanes;
constexpr int kMaxCallVectors = (15 + 64 + kKeysPerCallVector - 1) / kKeysPerCallVector;
struct RowCalls {
  bool valid = false;
  int64_t j_lo = 0, kcount = 0, step = 0;
  uint32_t call_xor = 0, xor_b = 0;  // the common parts' other inputs (row_draws)
  int64_t shift = 0;                 // key j_lo's place among its run's keys, below 16
  int count = 0;                     // call vectors
  CallVector v[kMaxCallVectors];

  bool serves(int64_t j, int64_t n, int64_t st, const RowDraws& row) const {
    return valid && j == j_lo && n == kcount && st == step && row.call_xor == call_xor &&
           row.xor_b == xor_b;
  }
};

// Keys j_lo + c step, c < kcount (kcount <= 64), for step = 4 / g = 1, 2 or 4. In an aligned run
// of 16 positions these keys are the g residues mod 4 from s = j_lo mod step on, so they take g
// calls a run, every word of each (SPEC 11.1): lane l is call 4 A + s + step l of runs A,
// A + 1, ..., and its word w is key 4 g (l / g) + g w + l mod g of the vector's
// kKeysPerCallVector keys.
template <int g>
inline void grouped_calls(const RowDraws& row, int64_t j_lo, int64_t kcount, RowCalls* out) {
  constexpr uint32_t step = 4 / g;
  const int64_t run0 = run_of(j_lo);
  const int64_t at = j_lo - 16 * run0;  // in [0, 16)
  const uint32_t s = static_cast<uint32_t>(at % step);
  const u32vec lanes = lane_index() * step;
  out->shift = at / step;
  out->count = 0;
  for (int64_t bit = 0; bit < out->shift + kcount; bit += kKeysPerCallVector) {
    const int64_t run = run0 + bit / (4 * g);
    out->v[out->count++] =
        call_vector(splat_u32(static_cast<uint32_t>(4 * run) + s) + lanes, row);
  }
  out->valid = true;
  out->j_lo = j_lo;
  out->kcount = kcount;
  out->step = step;
  out->call_xor = row.call_xor;
  out->xor_b = row.xor_b;
}

// Keep bits of one row from its calls' kept words (kept[x][m]: vector x of `calls`, word m, bit l
// for lane l): bit c for key c.
template <int g>
inline uint64_t grouped_keep_bits(const uint32_t (*kept)[4], const RowCalls& calls) {
  uint64_t words[3] = {0, 0, 0};  // bit x: the x-th key from the first run's first
  for (int x = 0; x < calls.count; ++x) {
    const int64_t bit = int64_t{x} * kKeysPerCallVector;
    uint64_t bits = 0;
    for (int m = 0; m < 4; ++m) bits |= spread_groups<g>(kept[x][m]) << (g * m);
    words[bit / 64] |= bits << (bit % 64);
    if (bit % 64 + kKeysPerCallVector > 64) words[bit / 64 + 1] |= bits >> (64 - bit % 64);
  }
  const int64_t shift = calls.shift, kcount = calls.kcount;
  uint64_t keep = shift == 0 ? words[0] : (words[0] >> shift) | (words[1] << (64 - shift));
  if (kcount < 64) keep &= (uint64_t{1} << kcount) - 1;
  return keep;
}

// Keep bits of keys j_lo + c r, c < kcount (kcount <= 64, 16 + 64 r < 2^32), one generator call
// per key: with x = j_lo - 16 A (A the run of j_lo) + c r, key c is word (x / 4) mod 4 of call
// 4 (A + x / 16) + x mod 4, in 32-bit lane arithmetic (the call is a 32-bit counter word).
inline uint64_t keep_bits_strided(const TileDropout& d, const RowDraws& row, int64_t j_lo,
                                  int64_t r, int64_t kcount) {
  const int64_t run0 = run_of(j_lo);
  const u32vec lanes = lane_index();
  const uint32_t step = static_cast<uint32_t>(r);
  uint64_t keep = 0;
  for (int64_t c0 = 0; c0 < kcount; c0 += kDrawLanes) {
    const u32vec x = splat_u32(static_cast<uint32_t>(j_lo - 16 * run0 + c0 * r)) + lanes * step;
    const u32vec word = (x >> 2) & 3u;
    u32vec w[4];
    philox_lanes(((x >> 4) << 2) + (x & 3u) + static_cast<uint32_t>(4 * run0), row, d, w);
    const u32vec u = word == 0u ? w[0] : word == 1u ? w[1] : word == 2u ? w[2] : w[3];
    keep |= static_cast<uint64_t>(kept_lanes(u, d)) << c0;
  }
  if (kcount < 64) keep &= (uint64_t{1} << kcount) - 1;
  return keep;
}

// The same for any step, a key at a time through lib/dropout_rng.h (steps of 2^26 and more,
// where 64 steps overflow a 32-bit lane: a dilation that large selects a key or two per row).
inline uint64_t keep_bits_scalar(const TileDropout& d, const Problem& p, const SequenceFrame& f,
                                 int64_t h, int64_t i, const KeyProgression& k, int64_t k0,
                                 int64_t kcount) {
  uint64_t keep = 0;
  for (int64_t c = 0; c < kcount; ++c) {
    const int64_t j = p.key_position(f, progression_at(k, k0 + c));
    const int64_t run = run_of(j), at = j - 16 * run;
    const Philox4x32 u = philox4x32(
        Philox4x32{{static_cast<uint32_t>(d.offset), static_cast<uint32_t>(p.row_position(f, i)),
                    static_cast<uint32_t>(f.seq * d.H + p.draw_head(h)),
                    static_cast<uint32_t>(4 * run + at % 4)}},
        d.k0[0], d.k1[0]);
    keep |= static_cast<uint64_t>(philox_word(u, at / 4) >= d.threshold) << c;
  }
  return keep;
}

// One tile row as the draws see it: its common part, its first key's position and its keys'
// step in positions (a placed sub-problem's keys are k_step positions apart).
struct DrawRow {
  RowDraws draws;
  SequenceFrame frame;
  int64_t i, j_lo, step;
};

// The row's common part: the same in every key tile.
inline RowDraws draws_of_row(const TileDropout& d, const Problem& p, const SequenceFrame& frame,
                             int64_t h, int64_t i) {
  return row_draws(d, static_cast<uint32_t>(d.offset),
                   static_cast<uint32_t>(p.row_position(frame, i)),
                   static_cast<uint32_t>(frame.seq * d.H + p.draw_head(h)));
}

// cached: the row's draws_of_row, made once for all key tiles (rows_draws), or null.
inline DrawRow draw_row(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                        const KeyProgression& q, int64_t q0, int64_t t, const KeyProgression& k,
                        int64_t k0, int64_t kcount, const RowDraws* cached = nullptr) {
  DrawRow r;
  r.i = progression_at(q, q0 + t);
  r.frame = p.frame_of_row(b, r.i);
  r.draws = cached != nullptr ? *cached : draws_of_row(d, p, r.frame, h, r.i);
  r.j_lo = p.key_position(r.frame, progression_at(k, k0));
  r.step = kcount == 1 ? 1 : k.step * (p.placed ? p.place.k_step : 1);
  return r;
}

// rows[t] = draws_of_row of query term t of q, t < count: a caller that walks the same rows over
// many key tiles makes them once (three dependent 64-bit products a row) and hands them to each
// tile's TileDraws.
inline void rows_draws(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                       const KeyProgression& q, int64_t count, RowDraws* rows) {
  for (int64_t t = 0; t < count; ++t) {
    const int64_t i = progression_at(q, t);
    rows[t] = draws_of_row(d, p, p.frame_of_row(b, i), h, i);
  }
}

// Keys 1, 2 or 4 positions apart take grouped_calls<4 / step>.
inline bool grouped_step(int64_t step) { return step == 1 || step == 2 || step == 4; }

// `calls` made to serve row r (grouped_step(r.step)) if they do not already.
inline void serve_row(const DrawRow& r, int64_t kcount, RowCalls* calls) {
  if (calls->serves(r.j_lo, kcount, r.step, r.draws)) return;
  if (r.step == 1) grouped_calls<4>(r.draws, r.j_lo, kcount, calls);
  if (r.step == 2) grouped_calls<2>(r.draws, r.j_lo, kcount, calls);
  if (r.step == 4) grouped_calls<1>(r.draws, r.j_lo, kcount, calls);
}

// The keep bits of a row that `calls` serve (bit c for key c) from the calls' kept words
// (grouped_keep_bits; the keys are calls.step apart).
inline uint64_t grouped_row_bits(const uint32_t (*kept)[4], const RowCalls& calls) {
  if (calls.step == 1) return grouped_keep_bits<4>(kept, calls);
  if (calls.step == 2) return grouped_keep_bits<2>(kept, calls);
  return grouped_keep_bits<1>(kept, calls);
}

// The keep bits of tile row t (query term q0 + t of q) over key terms k0 + c of k, c < kcount;
// `calls` carries the call vectors from row to row while they serve.
inline uint64_t row_keep_bits(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                              const KeyProgression& q, int64_t q0, int64_t t,
                              const KeyProgression& k, int64_t k0, int64_t kcount,
                              RowCalls* calls) {
  if (d.drop_all) return 0;
  const DrawRow r = draw_row(d, p, b, h, q, q0, t, k, k0, kcount);
  if (grouped_step(r.step)) {
    serve_row(r, kcount, calls);
    uint32_t kept[kMaxCallVectors][4];
    for (int x = 0; x < calls->count; ++x) kept_words(calls->v[x], r.draws, d, kept[x]);
    return grouped_row_bits(kept, *calls);
  }
  if (r.step < (int64_t{1} << 26)) return keep_bits_strided(d, r.draws, r.j_lo, r.step, kcount);
  return keep_bits_scalar(d, p, r.frame, h, r.i, k, k0, kcount);
}

// keep[t] bit c: whether pair (query term q0 + t of q, key term k0 + c of k) of head h, batch
// element b is kept (SPEC 11.1), for t < rows, c < kcount <= kBC; bits from kcount up are 0.
inline void dropout_keep_bits(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                              const KeyProgression& q, int64_t q0, int64_t rows,
                              const KeyProgression& k, int64_t k0, int64_t kcount,
                              uint64_t* keep) {
  static_assert(kBC <= 64, "a tile row's keep bits fit one 64-bit word");
  RowCalls calls;  // the call vectors of keys 1, 2 or 4 apart, kept while rows share them
  for (int64_t t = 0; t < rows; ++t)
    keep[t] = row_keep_bits(d, p, b, h, q, q0, t, k, k0, kcount, &calls);
}

// ---------------------------------------------------------------- draws inside a product
// The same decisions, scheduled differently. A row's draws are integer work (multiplies, shifts,
// xors) and the score product before them is floating-point work. Run one after the other they
// queue behind each other; interleaved finely, Zen 4 runs much of them side by side (cpu_bench:
// the bf16 forward's dropout cost went from about +32% to +25%, the backward's from +16% to
// +12%; docs/performance.md).
//
// TileDraws is the work a score product (scores_tile, scores_pairs_tile) runs between the steps
// of each register block: block(r, n) draws rows r..r+n-1 of the tile. On AVX-512, where the
// block's rows take keys 1, 2 or 4 apart from one set of call vectors (RowCalls), each half
// vector of calls runs its rounds 4..10 spread over an equal share of the product's steps, and
// the two halves' words are merged and compared once both finish (merged_halves: one compare a
// word rather than one a half; on Zen 4 the compares, like the rounds' multiplies, take the
// product's pipes, the shifts and blends do not); other rows, narrower vectors and an inactive
// or drop-all dropout draw after the product's steps, as dropout_keep_bits does.
class TileDraws {
 public:
  // The tile's rows q0.. of q against key terms k0.. of k; keep[t] receives row t's bits.
  // cached: the rows' draws_of_row (cached[t] for row q0 + t), or null to make them here.
  TileDraws(const TileDropout& d, const Problem& p, int64_t b, int64_t h, const KeyProgression& q,
            int64_t q0, const KeyProgression& k, int64_t k0, int64_t kcount, uint64_t* keep,
            const RowDraws* cached = nullptr)
      : d_(d), p_(p), b_(b), h_(h), q_(q), q0_(q0), k_(k), k0_(k0), kcount_(kcount), keep_(keep),
        cached_(cached) {}

  // Runs step(s) for every s < steps, drawing rows r..r+n-1 (n <= kMR) in between.
  template <class Step>
  __attribute__((always_inline)) inline void block(int64_t r, int n, int64_t steps,
                                                   const Step& step) {
    if (!d_.active) {
      for (int64_t s = 0; s < steps; ++s) step(s);
      return;
    }
    RowDraws own[kMR];
    const RowDraws* rows = interleavable(r, n, own);
    if (rows == nullptr) {
      for (int64_t s = 0; s < steps; ++s) step(s);
      for (int t = 0; t < n; ++t)
        keep_[r + t] = row_keep_bits(d_, p_, b_, h_, q_, q0_, r + t, k_, k0_, kcount_, &calls_);
      return;
    }
    // Each half vector of calls (row t, call vector v, even or odd lanes) takes an equal share
    // of the steps (the first steps % halves one more) and runs rounds 4..10 between them.
    uint32_t kept[kMR][kMaxCallVectors][4];
    const int count = calls_.count, halves = 2 * n * count;
    const int64_t base = steps / halves, extra = steps % halves;
    int64_t s = 0, x = 0;
    const auto half = [&](const CallHalf& calls, const RowDraws& row, u64vec* c)
        __attribute__((always_inline)) {
      philox_start(calls, row, c);
      const int64_t share = base + (x++ < extra ? 1 : 0);
      rounds_between(share, s, step, c);
      s += share;
    };
    for (int t = 0; t < n; ++t)
      for (int v = 0; v < count; ++v) {
        u64vec even[4], odd[4];
        half(calls_.v[v].even, rows[t], even);
        half(calls_.v[v].odd, rows[t], odd);
        for (int m = 0; m < 4; ++m) kept[t][v][m] = kept_lanes(merged_halves(even[m], odd[m]), d_);
      }
    for (int t = 0; t < n; ++t) keep_[r + t] = grouped_row_bits(kept[t], calls_);
  }

 private:
  // Steps s0..s0+share-1 with rounds 4..10 of half c between them, spread evenly (without a
  // division: a division a step costs more than a round). The shares of the usual products
  // (4: bf16 at D = 64; 8: f32 at D = 64, bf16 at D = 128) are written out.
  template <class Step>
  __attribute__((always_inline)) inline void rounds_between(int64_t share, int64_t s0,
                                                            const Step& step, u64vec* c) const {
    const auto round = [&](int r) __attribute__((always_inline)) {
      philox_round_half(c[0], c[1], c[2], c[3], d_.k0_lanes[r], d_.k1_lanes[r]);
    };
    static_assert(kPhiloxRounds == 10, "the written-out schedules below run rounds 4..10");
    if (share == 4) {
      step(s0), round(3), round(4);
      step(s0 + 1), round(5), round(6);
      step(s0 + 2), round(7), round(8);
      step(s0 + 3), round(9);
    } else if (share == 8) {
      for (int i = 0; i < 7; ++i) step(s0 + i), round(3 + i);
      step(s0 + 7);
    } else {
      int r = 3;
      int64_t owed = 0;  // (rounds due so far) * share
      for (int64_t i = 0; i < share; ++i) {
        step(s0 + i);
        for (owed += kPhiloxRounds - 3; owed >= share && r < kPhiloxRounds; owed -= share)
          round(r++);
      }
      while (r < kPhiloxRounds) round(r++);
    }
  }

  // The counter words of rows r..r+n-1 if they draw inside the product (calls_ then serves them
  // all), else null; own receives them where they are not cached. Outside a packed batch every
  // row of the tile has the same frame (SPEC 10.2), so the same first key, step and call
  // vectors: the first block checks them (shared_), the others take their rows' words alone.
  const RowDraws* interleavable(int64_t r, int n, RowDraws* own) {
    if (!kDrawsInProduct || d_.drop_all) return nullptr;
    if (shared_) {
      if (cached_ != nullptr) return cached_ + r;
      for (int t = 0; t < n; ++t) {
        const int64_t i = progression_at(q_, q0_ + r + t);
        own[t] = draws_of_row(d_, p_, shared_frame_, h_, i);
      }
      return own;
    }
    const auto row_at = [&](int t) {
      return draw_row(d_, p_, b_, h_, q_, q0_, r + t, k_, k0_, kcount_,
                      cached_ != nullptr ? cached_ + r + t : nullptr);
    };
    const DrawRow first = row_at(0);
    if (!grouped_step(first.step)) return nullptr;
    serve_row(first, kcount_, &calls_);
    for (int t = 0; t < n; ++t) {
      const DrawRow row = t == 0 ? first : row_at(t);
      if (row.step != first.step || !calls_.serves(row.j_lo, kcount_, row.step, row.draws))
        return nullptr;
      own[t] = row.draws;
    }
    if (!p_.is_packed()) {
      shared_ = true;
      shared_frame_ = first.frame;
    }
    return own;
  }

  const TileDropout& d_;
  const Problem& p_;
  int64_t b_, h_;
  const KeyProgression& q_;
  int64_t q0_;
  const KeyProgression& k_;
  int64_t k0_, kcount_;
  uint64_t* keep_;
  const RowDraws* cached_;
  RowCalls calls_;
  bool shared_ = false;          // every row of the tile takes calls_ (interleavable)
  SequenceFrame shared_frame_;  // their frame, while shared_
};

// product(work) with the tile's draws as its work when dropout is on (keep[t] receives row t's
// bits), else with none: the forward's S product and the backward's dP products. cached: as
// TileDraws takes it, or null.
template <class Product>
inline void product_drawing(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                            const KeyProgression& q, int64_t q0, const KeyProgression& k,
                            int64_t k0, int64_t kcount, uint64_t* keep, const Product& product,
                            const RowDraws* cached = nullptr) {
  if (d.active) {
    TileDraws draws(d, p, b, h, q, q0, k, k0, kcount, keep, cached);
    product(draws);
  } else {
    NoBlockWork none;
    product(none);
  }
}

// The factors of kW<T> pairs from their keep bits: keep_scale where the bit is set, else 0.
// AVX-512: one masked move. Narrower vectors: a row of a table of 0/1 vectors (2^kW<T> rows,
// 8 KiB at most), times the scale. bf16emu's 64-byte vectors on AVX2: the scale's bits where the
// lane's bit is set, else +0, as the masked move gives.
#if DILATTN_CPU_VEC_BYTES != 64
template <class T>
struct KeepVectorTable {
  T lanes[1 << kW<T>][kW<T>];
  constexpr KeepVectorTable() : lanes() {
    for (int m = 0; m < (1 << kW<T>); ++m)
      for (int l = 0; l < kW<T>; ++l) lanes[m][l] = (m >> l) & 1 ? T(1) : T(0);
  }
};
template <class T>
inline constexpr KeepVectorTable<T> kKeepVectors{};
#endif

#if DILATTN_CPU_VEC_BYTES == 64 && !DILATTN_CPU_AVX512
template <class T, int... L>
inline vec<T> keep_factors_by_lanes(uint32_t bits, vec<T> scale, std::integer_sequence<int, L...>) {
  typedef ivec<T> I;
  const I lane_bit = ((I{} + bits) >> I{L...}) & 1;
  return (vec<T>)((I)scale & -lane_bit);
}
#endif

inline vec<float> keep_factors(uint32_t bits, vec<float> scale) {
#if DILATTN_CPU_AVX512
  return (vec<float>)_mm512_maskz_mov_ps(static_cast<__mmask16>(bits), (__m512)scale);
#elif DILATTN_CPU_VEC_BYTES == 64
  return keep_factors_by_lanes<float>(bits, scale, std::make_integer_sequence<int, kW<float>>{});
#else
  return vload(kKeepVectors<float>.lanes[bits]) * scale;
#endif
}
inline vec<double> keep_factors(uint32_t bits, vec<double> scale) {
#if DILATTN_CPU_AVX512
  return (vec<double>)_mm512_maskz_mov_pd(static_cast<__mmask8>(bits), (__m512d)scale);
#elif DILATTN_CPU_VEC_BYTES == 64
  return keep_factors_by_lanes<double>(bits, scale, std::make_integer_sequence<int, kW<double>>{});
#else
  return vload(kKeepVectors<double>.lanes[bits]) * scale;
#endif
}

// The factors of tile row t's kW<T> pairs from column c on: keep_scale where the pair's bit is
// set, else 0. apply_dropout multiplies a tile by them; a pass that multiplies as it reads the
// tile (the bf16 paths' rounding of P, cpu_pair_dot.h's round_rows_to_words and
// round_columns_to_words) takes them instead, so the tile is not walked twice.
template <class T>
struct KeepFactors {
  const uint64_t* keep;
  vec<T> scale;
  vec<T> operator()(int64_t t, int c) const {
    constexpr uint64_t chunk_bits = (uint64_t{1} << kW<T>) - 1;
    return keep_factors(static_cast<uint32_t>((keep[t] >> c) & chunk_bits), scale);
  }
};

// The f32 factors of a call's dropout (the bf16 paths compute P in f32).
inline KeepFactors<float> keep_factors_of(const TileDropout& d, const uint64_t* keep) {
  return KeepFactors<float>{keep, splat(static_cast<float>(d.keep_scale))};
}

// tile[t][c] *= keep_scale where bit c of keep[t] is set, else *= 0 (a product, not a select:
// a NaN stays NaN, as P_ij M_ij of the reference), for t < rows and every c < kBC.
template <class T>
inline void apply_dropout(T* tile, int64_t rows, const uint64_t* keep, T keep_scale) {
  const KeepFactors<T> factors{keep, splat(keep_scale)};
  for (int64_t t = 0; t < rows; ++t)
    for (int c = 0; c < kBC; c += kW<T>) {
      T* x = tile + t * kBC + c;
      vstore(x, vload(x) * factors(t, c));
    }
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_DROPOUT_H
