// test_dropout_rng.cpp - lib/dropout_rng.h, the keep decision of attention dropout (SPEC 11):
// Philox4x32-10 against its published known answers (Random123's kat_vectors), the counter map
// of SPEC 11.1 (which word of which call a score draws), the threshold ceil(p * 2^32) at its
// edges, and the fraction of scores kept for p = 0.1, 0.5, 0.9 within binomial bounds.
#include <cmath>
#include <cstdint>

#include "../common/check.h"
#include "dropout_rng.h"

namespace {

using dilattn::Philox4x32;

void check_known_answer(Philox4x32 counter, uint32_t k0, uint32_t k1, Philox4x32 want) {
  const Philox4x32 got = dilattn::philox4x32(counter, k0, k1);
  for (int w = 0; w < 4; ++w)
    CHECK_MSG(got.w[w] == want.w[w], "counter %08x.. key %08x %08x word %d: %08x, want %08x",
              counter.w[0], k0, k1, w, got.w[w], want.w[w]);
}

}  // namespace

int main() {
  using namespace dilattn;
  // Random123 kat_vectors, "philox4x32 10": counter (4 words), key (2 words) -> 4 words.
  check_known_answer({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  check_known_answer({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
                     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  check_known_answer({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
                     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});

  // SPEC 11.1's map: key = the seed's low and high words; counter = (offset, i, b * H + h,
  // 4 floor(j / 16) + j mod 4); score j draws word floor(j / 4) mod 4. Written out here for
  // b = 1, h = 2, H = 3, i = 5.
  const uint64_t seed = 0x0123456789abcdefull, offset = 7;
  bool drawn[12][4] = {};  // [call][word]: each drawn by exactly one key of 0 .. 47
  for (int64_t j = 0; j < 48; ++j) {
    const uint32_t call_index = static_cast<uint32_t>(4 * (j / 16) + j % 4);
    const int word = static_cast<int>((j / 4) % 4);
    const Philox4x32 call = philox4x32({{7, 5, 1 * 3 + 2, call_index}}, 0x89abcdefu, 0x01234567u);
    const uint64_t u = call.w[word];
    CHECK(dropout_call_of(j) == call_index && dropout_word_of(j) == word);
    CHECK(dropout_draws(seed, offset, 1, 2, 3, 5, call_index).w[word] == u);
    CHECK_MSG(!drawn[call_index][word], "key %lld draws call %u word %d again",
              static_cast<long long>(j), call_index, word);
    drawn[call_index][word] = true;
    // The threshold splits exactly at u: u keeps at threshold u, not at u + 1.
    CHECK(dropout_keep(seed, offset, 1, 2, 3, 5, j, u));
    CHECK(!dropout_keep(seed, offset, 1, 2, 3, 5, j, u + 1));
  }
  // The last key of the largest Nk (2^34) draws the last call a 32-bit word holds.
  CHECK(dropout_call_of((int64_t{1} << 34) - 1) == (int64_t{1} << 32) - 1);

  // Threshold ceil(p * 2^32): p = 0 keeps everything (no dropout, bitwise), p = 2^-32 drops
  // only u = 0, p = 0.5 drops the lower half, the largest p below 1 drops every u.
  CHECK_EQ(dropout_threshold(0.0), uint64_t{0});
  CHECK_EQ(dropout_threshold(std::ldexp(1.0, -32)), uint64_t{1});
  CHECK_EQ(dropout_threshold(std::ldexp(1.0, -33)), uint64_t{1});  // 0.5 rounds up
  CHECK_EQ(dropout_threshold(0.5), uint64_t{1} << 31);
  CHECK_EQ(dropout_threshold(std::nextafter(1.0, 0.0)), uint64_t{1} << 32);

  // The counter words fit (SPEC 11.1): Nq <= 2^32, ceil(Nk / 4) <= 2^32, B * H <= 2^32,
  // offset < 2^32.
  const int64_t two32 = int64_t{1} << 32;
  CHECK(dropout_counter_fits(1, 1, two32, 4 * two32, two32 - 1));
  CHECK(!dropout_counter_fits(1, 1, two32 + 1, 8, 0));
  CHECK(!dropout_counter_fits(1, 1, 8, 4 * two32 + 1, 0));
  CHECK(dropout_counter_fits(two32 / 8, 8, 8, 8, 0));
  CHECK(!dropout_counter_fits(two32 / 8 + 1, 8, 8, 8, 0));
  CHECK(!dropout_counter_fits(1, 1, 8, 8, uint64_t{1} << 32));

  // The fraction kept: 2^20 scores of one (b, h), rows 0..1023 x keys 0..1023, within 6 standard
  // deviations of 1 - p (binomial); and a different offset gives different decisions.
  for (const double p : {0.1, 0.5, 0.9}) {
    const uint64_t t = dropout_threshold(p);
    int64_t kept = 0, changed = 0;
    const int64_t n = 1024;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const bool keep = dropout_keep(42, 0, 0, 1, 2, i, j, t);
        kept += keep;
        changed += keep != dropout_keep(42, 1, 0, 1, 2, i, j, t);
      }
    const double total = double(n) * n, mean = (1 - p) * total;
    const double sigma = std::sqrt(total * p * (1 - p));
    CHECK_MSG(std::fabs(kept - mean) <= 6 * sigma, "p = %g: kept %lld of %.0f, expected %.0f +- %.0f",
              p, static_cast<long long>(kept), total, mean, 6 * sigma);
    // Two independent decisions differ with probability 2 p (1 - p).
    const double differ = 2 * p * (1 - p) * total, differ_sigma = std::sqrt(differ);
    CHECK_MSG(std::fabs(changed - differ) <= 6 * differ_sigma + 1,
              "p = %g: offset 0 and 1 differ on %lld scores, expected %.0f", p,
              static_cast<long long>(changed), differ);
  }
  return harness::finish("dropout_rng");
}
