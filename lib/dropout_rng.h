// dropout_rng.h - the keep decision of attention dropout (SPEC 11): Philox4x32-10 and the map
// from a score (b, h, i, j) to its counter, in one place.
//
// Every backend draws the same bits for the same score, whatever its tiling, thread count,
// instruction set or ring split, because the decision is a pure function of
// (seed, offset, b, h, i, j) computed here: the forward draws it, the backward draws it again.
// Philox4x32-10 is Salmon et al.'s counter-based generator (the one in Random123 and cuRAND):
// ten rounds of two 32x32->64-bit multiplies, a xor with the key, and a Weyl step of the key.
// Plain integer arithmetic, callable from host and device code.
//
// Checked by tests/reference/test_dropout_rng.cpp (the published known answers of Philox4x32-10,
// the counter map, the threshold at its edges, the fraction kept).
#ifndef DILATTN_DROPOUT_RNG_H
#define DILATTN_DROPOUT_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define DILATTN_RNG_HD __host__ __device__ __forceinline__
#else
#define DILATTN_RNG_HD inline
#endif

namespace dilattn {

struct Philox4x32 {
  uint32_t w[4];
};

// The round multipliers and the key's Weyl increments (the golden ratio and sqrt(3) - 1, as
// 32-bit fractions) of Philox4x32 (SPEC 11.1).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

DILATTN_RNG_HD Philox4x32 philox4x32_round(Philox4x32 c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.w[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.w[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return Philox4x32{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
}

// Philox4x32 with `rounds` rounds (10 for dropout; 7 is tested only against its known answer).
DILATTN_RNG_HD Philox4x32 philox4x32(Philox4x32 counter, uint32_t k0, uint32_t k1,
                                     int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    counter = philox4x32_round(counter, k0, k1);
    k0 += kPhiloxW0;  // unsigned: wraps mod 2^32, as the generator defines
    k1 += kPhiloxW1;
  }
  return counter;
}

// The smallest draw u that keeps a score: ceil(p * 2^32), for p in [0, 1). p * 2^32 is exact in
// f64 (a power-of-two scale), so this is exact too; the result is at most 2^32.
DILATTN_RNG_HD uint64_t dropout_threshold(double p) {
  const double scaled = p * 4294967296.0;
  uint64_t t = static_cast<uint64_t>(scaled);  // floor, scaled >= 0
  if (static_cast<double>(t) < scaled) ++t;
  return t;
}

// Which call of its row draws key j, and which of the call's four words (SPEC 11.1): keys
// j, j + 4, j + 8 and j + 12 of an aligned run of 16 (j mod 16 < 4) share a call, so rows of
// keys 1, 2 or 4 apart use every word of the calls they make. For j >= 0.
DILATTN_RNG_HD int64_t dropout_call_of(int64_t j) { return 4 * (j / 16) + j % 4; }
DILATTN_RNG_HD int dropout_word_of(int64_t j) { return static_cast<int>((j / 4) % 4); }

// The four draws of one generator call of row i of query head h of batch element b (SPEC 11.1):
// the counter holds the row's words first and the call last, so the words that are the same
// along a row enter the first rounds (cpu_dropout.h computes those once a row). The caller has
// checked the bounds there (every counter word fits 32 bits).
DILATTN_RNG_HD Philox4x32 dropout_draws(uint64_t seed, uint64_t offset, int64_t b, int64_t h,
                                        int64_t H, int64_t i, int64_t call) {
  const Philox4x32 counter{{static_cast<uint32_t>(offset), static_cast<uint32_t>(i),
                            static_cast<uint32_t>(b * H + h), static_cast<uint32_t>(call)}};
  return philox4x32(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Word k (0 to 3) of a call's result, by selection: an index computed at run time into w would
// put the four words in local memory on a GPU (ptxas gives the array a stack frame).
DILATTN_RNG_HD uint32_t philox_word(const Philox4x32& u, int64_t k) {
  return k == 0 ? u.w[0] : k == 1 ? u.w[1] : k == 2 ? u.w[2] : u.w[3];
}

// keep_ij of SPEC 11 for one score. Fast paths draw a whole call at once with dropout_draws
// and compare each word they use with dropout_threshold.
DILATTN_RNG_HD bool dropout_keep(uint64_t seed, uint64_t offset, int64_t b, int64_t h, int64_t H,
                                 int64_t i, int64_t j, uint64_t threshold) {
  const Philox4x32 u = dropout_draws(seed, offset, b, h, H, i, dropout_call_of(j));
  return philox_word(u, dropout_word_of(j)) >= threshold;
}

// Whether a problem's scores fit the counter words (SPEC 11.1): Nq <= 2^32, ceil(Nk / 4) <= 2^32
// (the last key's call, 4 floor((Nk - 1) / 16) + 3, is then below 2^32), B * H <= 2^32,
// offset < 2^32. Sizes are >= 1.
DILATTN_RNG_HD bool dropout_counter_fits(int64_t B, int64_t H, int64_t Nq, int64_t Nk,
                                         uint64_t offset) {
  const int64_t two32 = int64_t{1} << 32;
  return Nq <= two32 && Nk / 4 + (Nk % 4 != 0) <= two32 && B <= two32 / H &&
         offset < static_cast<uint64_t>(two32);
}

}  // namespace dilattn

#endif  // DILATTN_DROPOUT_RNG_H
