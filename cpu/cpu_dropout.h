// cpu_dropout.h - attention dropout in the cpu backend (SPEC 11): the keep decisions of an S
// tile, drawn a vector of generator calls at a time, and the factor M_ij = keep_ij / (1 - p)
// applied to a tile.
//
// The decision is lib/dropout_rng.h's and nothing else: Philox4x32-10 of the counter
// (floor(j / 4), i, b H + h, offset) under the key (seed mod 2^32, seed / 2^32), word j mod 4,
// kept iff that word is at least ceil(p 2^32). This file computes the same function for many
// counters at once: each 32-bit lane of a vector is one generator call, and each round is the
// scalar round lane by lane. The 32x32 -> 64-bit products are two even/odd-lane 64-bit
// multiplies with AVX-512 and AVX2, a 64-bit product per lane elsewhere.
// tests/cpu/test_cpu_dropout_draws.cpp checks every instruction set's copy bit for bit against
// dropout_keep.
//
// How a tile row's keys map to generator calls (one call gives the words of 4 keys j = 4 q ..
// 4 q + 3):
//   keys 1 apart (dense, block-sparse, a dilated branch of dilation 1): lanes are consecutive
//     quads q, so a row of 64 keys takes 16 calls (one AVX-512 vector, two AVX2 ones);
//   keys further apart (dilation r >= 2): lanes are the keys themselves, one call each, of which
//     word j mod 4 is used. SPEC 11.1 puts four consecutive keys in one call, so a branch that
//     selects one key in r >= 4 cannot share calls between its keys.
// A row's frame (SPEC 10.2: the sequence, the row and the keys within it) comes from
// Problem::frame_of_row, which is (b, i, j) itself without a packed batch.
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
};

inline TileDropout tile_dropout(const Problem& p, const DropoutCall& call) {
  TileDropout d;
  d.active = p.dropout_p > 0;
  if (!d.active) return d;
  const uint64_t threshold = dropout_threshold(p.dropout_p);
  d.drop_all = threshold > UINT32_MAX;
  d.threshold = static_cast<uint32_t>(d.drop_all ? 0 : threshold);
  d.offset = call.offset;
  d.H = p.H;
  d.keep_scale = 1.0 / (1.0 - p.dropout_p);
  uint32_t k0 = static_cast<uint32_t>(call.seed), k1 = static_cast<uint32_t>(call.seed >> 32);
  for (int r = 0; r < kPhiloxRounds; ++r) {  // the key schedule of philox4x32
    d.k0[r] = k0;
    d.k1[r] = k1;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return d;
}

inline u32vec splat_u32(uint32_t x) { return u32vec{} + x; }

// hi, lo: the high and low words of the 64-bit products a[l] * m, lane by lane.
inline void mul_hi_lo(u32vec a, uint32_t m, u32vec* hi, u32vec* lo) {
#if DILATTN_CPU_VEC_BYTES == 64
  // (The all-lanes mask forms: the unmasked intrinsics start from an undefined vector, which
  // GCC 12 warns about, as in cpu_microkernel.h.)
  const __m512i x = (__m512i)a, mv = _mm512_set1_epi32(static_cast<int>(m));
  // Lanes 0, 2, ...: their 64-bit products; lanes 1, 3, ... moved down first.
  const __m512i even = _mm512_mask_mul_epu32(x, 0xFF, x, mv);
  const __m512i odd = _mm512_mask_mul_epu32(x, 0xFF, _mm512_mask_srli_epi64(x, 0xFF, x, 32), mv);
  // hi: odd lanes keep odd's high words; even lanes take even's high words (pairs swapped).
  *hi = (u32vec)_mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_CDAB);
  // lo: even lanes keep even's low words; odd lanes take odd's low words (pairs swapped).
  *lo = (u32vec)_mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CDAB);
#elif defined(DILATTN_CPU_TARGET_AVX2) || (DILATTN_CPU_VEC_BYTES == 32 && defined(__AVX2__))
  const __m256i x = (__m256i)a, mv = _mm256_set1_epi32(static_cast<int>(m));
  const __m256i even = _mm256_mul_epu32(x, mv);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), mv);
  *hi = (u32vec)_mm256_blend_epi32(_mm256_shuffle_epi32(even, 0xB1), odd, 0xAA);
  *lo = (u32vec)_mm256_blend_epi32(even, _mm256_shuffle_epi32(odd, 0xB1), 0xAA);
#else
  typedef uint64_t u64wide __attribute__((vector_size(2 * kVecBytes)));
  const u64wide product = __builtin_convertvector(a, u64wide) * static_cast<uint64_t>(m);
  *hi = __builtin_convertvector(product >> 32, u32vec);
  *lo = __builtin_convertvector(product, u32vec);
#endif
}

// philox4x32 (lib/dropout_rng.h) of the counters c[0..3], lane by lane, under the call's key.
inline void philox_lanes(u32vec* c, const TileDropout& d) {
  for (int r = 0; r < kPhiloxRounds; ++r) {
    u32vec hi0, lo0, hi1, lo1;
    mul_hi_lo(c[0], kPhiloxM0, &hi0, &lo0);
    mul_hi_lo(c[2], kPhiloxM1, &hi1, &lo1);
    const u32vec next0 = hi1 ^ c[1] ^ splat_u32(d.k0[r]);
    const u32vec next2 = hi0 ^ c[3] ^ splat_u32(d.k1[r]);
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
  }
}

// Bit l set where lane l of w keeps its pair (w[l] >= the threshold).
inline uint32_t kept_lanes(u32vec w, const TileDropout& d) {
#if DILATTN_CPU_VEC_BYTES == 64
  return _mm512_cmpge_epu32_mask((__m512i)w, _mm512_set1_epi32(static_cast<int>(d.threshold)));
#else
  typedef int32_t i32vec __attribute__((vector_size(kVecBytes)));
  const i32vec keep = w >= splat_u32(d.threshold);  // -1 where kept
#if DILATTN_CPU_VEC_BYTES == 32
  return static_cast<uint32_t>(_mm256_movemask_ps((__m256)keep));
#elif defined(__SSE__)
  return static_cast<uint32_t>(_mm_movemask_ps((__m128)keep));
#else
  uint32_t bits = 0;
  for (int l = 0; l < kDrawLanes; ++l) bits |= static_cast<uint32_t>(keep[l] != 0) << l;
  return bits;
#endif
#endif
}

// Bit l of x (l < 16) moved to bit 4 l.
inline uint64_t spread_by_4(uint64_t x) {
  x &= 0xFFFF;
  x = (x | (x << 24)) & 0x000000FF000000FFull;
  x = (x | (x << 12)) & 0x000F000F000F000Full;
  x = (x | (x << 6)) & 0x0303030303030303ull;
  x = (x | (x << 3)) & 0x1111111111111111ull;
  return x;
}

inline u32vec lane_index() {
  u32vec v;
  for (int l = 0; l < kDrawLanes; ++l) v[l] = static_cast<uint32_t>(l);
  return v;
}

// floor(x / 4) for any int64 x (a key of another packed sequence may lie before the frame).
inline int64_t quad_of(int64_t x) { return x >= 0 ? x / 4 : -((-x + 3) / 4); }

// Keep bits of keys j_lo, j_lo + 1, ..., kcount of them (kcount <= 64), of the row whose
// counter words 1..3 are c1, c2, c3: bit c for key j_lo + c. Lanes are consecutive quads.
inline uint64_t keep_bits_consecutive(const TileDropout& d, uint32_t c1, uint32_t c2,
                                      uint32_t c3, int64_t j_lo, int64_t kcount) {
  const int64_t quad0 = quad_of(j_lo), shift = j_lo - 4 * quad0;  // shift in [0, 4)
  uint64_t words[3] = {0, 0, 0};  // bit x: key 4 quad0 + x
  const u32vec lanes = lane_index();
  for (int64_t bit = 0; bit < shift + kcount; bit += 4 * kDrawLanes) {
    u32vec c[4] = {lanes + static_cast<uint32_t>(quad0 + bit / 4), splat_u32(c1), splat_u32(c2),
                   splat_u32(c3)};
    philox_lanes(c, d);
    uint64_t bits = 0;
    for (int m = 0; m < 4; ++m) bits |= spread_by_4(kept_lanes(c[m], d)) << m;
    words[bit / 64] |= bits << (bit % 64);
    if (bit % 64 + 4 * kDrawLanes > 64) words[bit / 64 + 1] |= bits >> (64 - bit % 64);
  }
  uint64_t keep = shift == 0 ? words[0] : (words[0] >> shift) | (words[1] << (64 - shift));
  if (kcount < 64) keep &= (uint64_t{1} << kcount) - 1;
  return keep;
}

// Keep bits of keys key_at(c), c < kcount (kcount <= 64), one generator call per key.
template <class KeyAt>
inline uint64_t keep_bits_each(const TileDropout& d, uint32_t c1, uint32_t c2, uint32_t c3,
                               int64_t kcount, KeyAt&& key_at) {
  uint64_t keep = 0;
  for (int64_t c0 = 0; c0 < kcount; c0 += kDrawLanes) {
    u32vec quad, word;
    for (int l = 0; l < kDrawLanes; ++l) {
      const int64_t j = key_at(c0 + l < kcount ? c0 + l : c0);
      const int64_t q = quad_of(j);
      quad[l] = static_cast<uint32_t>(q);
      word[l] = static_cast<uint32_t>(j - 4 * q);
    }
    u32vec c[4] = {quad, splat_u32(c1), splat_u32(c2), splat_u32(c3)};
    philox_lanes(c, d);
    const u32vec w = word == 0u ? c[0] : word == 1u ? c[1] : word == 2u ? c[2] : c[3];
    keep |= static_cast<uint64_t>(kept_lanes(w, d)) << c0;
  }
  if (kcount < 64) keep &= (uint64_t{1} << kcount) - 1;
  return keep;
}

// keep[t] bit c: whether pair (query term q0 + t of q, key term k0 + c of k) of head h, batch
// element b is kept (SPEC 11.1), for t < rows, c < kcount <= kBC; bits from kcount up are 0.
inline void dropout_keep_bits(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                              const KeyProgression& q, int64_t q0, int64_t rows,
                              const KeyProgression& k, int64_t k0, int64_t kcount,
                              uint64_t* keep) {
  static_assert(kBC <= 64, "a tile row's keep bits fit one 64-bit word");
  for (int64_t t = 0; t < rows; ++t) {
    if (d.drop_all) {
      keep[t] = 0;
      continue;
    }
    const int64_t i = progression_at(q, q0 + t);
    const SequenceFrame f = p.frame_of_row(b, i);
    const uint32_t c1 = static_cast<uint32_t>(i - f.q0);
    const uint32_t c2 = static_cast<uint32_t>(f.seq * d.H + h);
    const uint32_t c3 = static_cast<uint32_t>(d.offset);
    const int64_t j_lo = progression_at(k, k0) - f.k0;
    if (k.step == 1 || kcount == 1)
      keep[t] = keep_bits_consecutive(d, c1, c2, c3, j_lo, kcount);
    else
      keep[t] = keep_bits_each(d, c1, c2, c3, kcount, [&](int64_t c) {
        return progression_at(k, k0 + c) - f.k0;
      });
  }
}

// tile[t][c] *= keep_scale where bit c of keep[t] is set, else *= 0 (a product, not a select:
// a NaN stays NaN, as P_ij M_ij of the reference), for t < rows and every c < kBC.
template <class T>
inline void apply_dropout(T* tile, int64_t rows, const uint64_t* keep, T keep_scale) {
  typedef ivec<T> mask;
  typedef std::remove_cv_t<std::remove_reference_t<decltype(mask{}[0])>> lane_int;
  mask lane_bit;
  for (int l = 0; l < kW<T>; ++l) lane_bit[l] = lane_int{1} << l;
  const mask scale_bits = (mask)splat(keep_scale);
  constexpr uint64_t chunk_bits = (uint64_t{1} << kW<T>) - 1;
  for (int64_t t = 0; t < rows; ++t)
    for (int c = 0; c < kBC; c += kW<T>) {
      const mask chunk = mask{} + static_cast<lane_int>((keep[t] >> c) & chunk_bits);
      const mask on = (chunk & lane_bit) != 0;  // all ones where kept
      T* x = tile + t * kBC + c;
      vstore(x, vload(x) * (vec<T>)(on & scale_bits));
    }
}

// Forward and backward use: the decisions of a tile, then its factors applied to `tile`.
template <class T>
inline void drop_tile(const TileDropout& d, const Problem& p, int64_t b, int64_t h,
                      const KeyProgression& q, int64_t q0, int64_t rows, const KeyProgression& k,
                      int64_t k0, int64_t kcount, T* tile, uint64_t* keep) {
  dropout_keep_bits(d, p, b, h, q, q0, rows, k, k0, kcount, keep);
  apply_dropout(tile, rows, keep, static_cast<T>(d.keep_scale));
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_DROPOUT_H
