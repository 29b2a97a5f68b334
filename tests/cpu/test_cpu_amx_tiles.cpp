// test_cpu_amx_tiles.cpp - the amx target's bf16 products (cpu/cpu_amx_tiles.h) on any AVX2 CPU,
// through amxemu, the same code with the tile instructions emulated (cpu_amx_tiles.h: 16 x
// 64-byte tiles, tdpbf16ps's bf16 pair products summed in f32, the configuration checked,
// a tile instruction before it a fault), so what is checked is everything around them: which
// blocks go to tiles, the in-place and packed operands (short chunks zero-padded, P's and dS's
// column words transposed), the four C tiles, the vector code left for tail rows, odd range ends
// and columns past the last 64, and the per-thread configuration (loaded before the first tile
// instruction, released by TileScope). Properties, for every shape:
//   scores_pairs_tile and accumulate_pairs_tile equal the f64 sums of their bf16 operands to
//   f32 rounding (1e-5 of the sum of |terms|), tiles or not;
//   a word outside the operands' range (past D in Q, past the pairs in K, outside [c0, c1) in
//   A and B) is never multiplied: each holds a bf16 NaN and every result stays finite (SPEC 13);
//   whole 16-row blocks run tile products and nothing else does.
// The real instructions run in the cpu tests with DILATTN_CPU_ISA=amx on a CPU that has them
// (tests/cpu/meson.build); elsewhere those are skipped. Without AVX2 and FMA this prints
// "not run" and exits 77 (a skip).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../common/check.h"

// Compiled before cpu_isa_target.h switches on the amxemu target's instructions for the rest of
// the file, so a CPU without them gets the skip, not an illegal instruction.
int run_checks();
int main() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::printf("not run: the amxemu target's vector code needs AVX2 and FMA\n");
    return 77;
  }
  return run_checks();
}

#define DILATTN_CPU_TARGET_AMXEMU 1
#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"
#include "cpu_pair_dot.h"

using namespace dilattn::cpu::amxemu;

namespace {

constexpr uint32_t kNaNWord = 0x7FC07FC0u;  // two bf16 quiet NaNs

// tdpbf16ps executed on this thread so far.
int64_t tile_products() { return static_cast<int64_t>(emulated_tiles.products); }

// A bf16 value as the tiles read it (a denormal as zero).
float bf16_value(uint16_t h) {
  if ((h & 0x7F80u) == 0) h &= 0x8000u;
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::mt19937 rng(20261127);

uint16_t random_bf16() {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const float f = u(rng);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 will do
}
uint32_t random_word() { return random_bf16() | static_cast<uint32_t>(random_bf16()) << 16; }
double low_of(uint32_t w) { return bf16_value(w & 0xFFFFu); }
double high_of(uint32_t w) { return bf16_value(w >> 16); }
double half_of(uint32_t w, int64_t c) { return (c & 1) ? high_of(w) : low_of(w); }

void check_close(const char* what, double got, double want, double magnitude) {
  const double tolerance = 1e-5 * magnitude + 1e-30;
  CHECK_MSG(std::isfinite(got) && std::fabs(got - want) <= tolerance,
            "%s: %.9g, f64 sum %.9g (tolerance %.3g)", what, got, want, tolerance);
}

// S = pre * Q K^T for `rows` query rows and head dim D: Q row words ldq apart (NaN past the
// D / 2 pairs), K key pairs [ldk pair rows][kBC] (NaN rows past the pairs).
void check_scores(int64_t rows, int64_t D) {
  harness::CaseScope scope("scores rows " + std::to_string(rows) + " D " + std::to_string(D));
  const int64_t pairs = (D + 1) / 2, ldq = pairs + 5;
  std::vector<uint32_t> q(rows * ldq, kNaNWord), k((pairs + 3) * kBC, kNaNWord);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < pairs; ++p) {
      q[r * ldq + p] = random_word();
      if (D % 2 && p == pairs - 1) q[r * ldq + p] &= 0xFFFFu;  // zero past D
    }
  for (int64_t p = 0; p < pairs; ++p)
    for (int c = 0; c < kBC; ++c) {
      k[p * kBC + c] = random_word();
      if (D % 2 && p == pairs - 1) k[p * kBC + c] &= 0xFFFFu;
    }
  std::vector<float> s(rows * kBC, -1.0f);
  const float pre = 0.125f;
  const int64_t before = tile_products();
  scores_pairs_tile(reinterpret_cast<const word_t*>(q.data()), ldq, rows,
                    reinterpret_cast<const word_t*>(k.data()), D, pre, s.data());
  const int64_t whole_blocks = rows / 16, chunks = (pairs + 15) / 16;
  CHECK_EQ(tile_products() - before, whole_blocks * chunks * 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < kBC; ++c) {
      double want = 0, magnitude = 0;
      for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t a = q[r * ldq + p], b = k[p * kBC + c];
        const double t = low_of(a) * low_of(b) + high_of(a) * high_of(b);
        want += t;
        magnitude += std::fabs(low_of(a) * low_of(b)) + std::fabs(high_of(a) * high_of(b));
      }
      check_close("S", s[r * kBC + c], pre * want, pre * magnitude);
    }
}

// O [rows][width] += A B over the shared indices [c0, c1): A as row words (lda = kBC / 2,
// a_step 1) or as column words (lda 1, a_step kBC: the transposed case), B as pair rows
// [kBC / 2][ldb]. Words outside [c0, c1) in both hold NaN (whole words: an odd end's word
// keeps its outside half finite, as round_rows_to_words and the zero fill leave it).
void check_accumulate(int64_t rows, int64_t c0, int64_t c1, int64_t width, bool columns) {
  harness::CaseScope scope("accumulate rows " + std::to_string(rows) + " [" + std::to_string(c0) +
                           ", " + std::to_string(c1) + ") width " + std::to_string(width) +
                           (columns ? " column words" : " row words"));
  const int64_t all_pairs = kBC / 2, ldo = width + 3, ldb = width + 16;
  const int64_t lda = columns ? 1 : all_pairs, a_step = columns ? kBC : 1;
  const int64_t p_lo = c0 / 2, p_hi = (c1 + 1) / 2;  // words touching the range
  std::vector<uint32_t> a(columns ? all_pairs * kBC : rows * all_pairs, kNaNWord);
  std::vector<uint32_t> b(all_pairs * ldb, kNaNWord);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = p_lo; p < p_hi; ++p) a[r * lda + p * a_step] = random_word();
  for (int64_t p = p_lo; p < p_hi; ++p)
    for (int64_t d = 0; d < width; ++d) b[p * ldb + d] = random_word();
  std::vector<float> o(rows * ldo);
  for (float& x : o) x = bf16_value(random_bf16());
  const std::vector<float> o0 = o;
  const int64_t before = tile_products();
  accumulate_pairs_tile(o.data(), ldo, rows, reinterpret_cast<const word_t*>(a.data()), lda,
                        a_step, c0, c1, reinterpret_cast<const word_t*>(b.data()), ldb, width);
  const bool tiles = c0 % 2 == 0 && c1 % 2 == 0 && c1 > c0 && width >= 64;
  const int64_t chunks = (c1 / 2 - c0 / 2 + 15) / 16;
  CHECK_EQ(tile_products() - before, tiles ? (rows / 16) * chunks * (width / 64) * 4 : 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < width; ++d) {
      double want = o0[r * ldo + d], magnitude = std::fabs(want);
      for (int64_t c = c0; c < c1; ++c) {
        const double t = half_of(a[r * lda + (c / 2) * a_step], c) * half_of(b[(c / 2) * ldb + d], c);
        want += t;
        magnitude += std::fabs(t);
      }
      check_close("O", o[r * ldo + d], want, magnitude);
    }
}

}  // namespace

int run_checks() {
  // Shapes: whole 16-row blocks and tails, whole and short chunks of pairs (D 64 and 128: 2 and 4
  // chunks; D 40, 72 and 8: a short last chunk or only one; odd D 63).
  for (int64_t rows : {16, 37, 64, 5})
    for (int64_t D : {64, 128, 40, 72, 8, 63}) check_scores(rows, D);
  // Ranges: whole tiles, short ones, odd ends (vector code), both A layouts; widths 64 and 128
  // (tiles), 80 (64 on tiles, 16 by vectors), 48 (vectors).
  for (bool columns : {false, true})
    for (int64_t rows : {64, 16, 21, 7}) {
      check_accumulate(rows, 0, 64, 64, columns);
      check_accumulate(rows, 0, 64, 128, columns);
      check_accumulate(rows, 8, 50, 80, columns);
      check_accumulate(rows, 0, 2, 64, columns);
      check_accumulate(rows, 3, 61, 64, columns);
      check_accumulate(rows, 0, 64, 48, columns);
    }
  // The configuration: loaded before every tile instruction above (the emulation faults
  // otherwise), released by TileScope, loaded again by the next product.
  {
    const TileScope scope;
    check_scores(16, 64);
    CHECK(emulated_tiles.configured);
  }
  CHECK(!emulated_tiles.configured && !tiles_configured);
  check_scores(16, 64);
  CHECK(emulated_tiles.configured);
  return harness::finish("cpu_amx_tiles");
}
