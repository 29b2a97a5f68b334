// cpu_pair_dot.h - the cpu backend's bf16 products as bf16 pair dot products (SPEC 12): the
// instruction vdpbf16ps (AVX512_BF16) or, in the test target bf16emu, an exact emulation of it.
//
// A word holds two bf16 values, element 2p in its low 16 bits and 2p + 1 in its high ones (the
// order of memory, and the order vdpbf16ps reads). pair_dot(acc, a, b) adds to each f32 lane
// a.high * b.high, then a.low * b.low: two products along the shared dimension per instruction,
// accumulated in f32. The kernels here are the f32 kernels of cpu_microkernel.h with the shared
// dimension walked a pair at a time:
//   scores_pairs_tile:     S = pre * Q K^T, pairs along D: Q (or dO) as row words [rows][Dp/2],
//                          K (or V) as key pairs [Dp/2][kBC] (word (p, c): K[c][2p], K[c][2p+1]);
//   accumulate_pairs_tile: O += A B, pairs along the keys (P V, dS K) or the query rows
//                          (P^T dO, dS^T Q): A's word of row r and pair p at A[r lda + p a_step],
//                          B as pair rows [pairs][ldb] (word (p, d): B[2p][d], B[2p+1][d]).
// P and dS are rounded to bf16 (round to nearest even, as the GPU kernels do, denormals flushed
// as vdpbf16ps reads them) into those word layouts by round_rows_to_words and
// round_columns_to_words; the inputs are gathered into them straight from bf16 memory
// (cpu_pair_tiles.h). The softmax, masks, weights, dropout and the
// SPEC 10 options stay in f32 on the S tile before the rounding, exactly as on the f32 path.
// Checked through tests/cpu/ run with DILATTN_CPU_ISA=bf16emu; the emulation against the
// instruction by tests/cpu/test_cpu_bf16_emulation.cpp on a CPU that has it.
#ifndef DILATTN_CPU_PAIR_DOT_H
#define DILATTN_CPU_PAIR_DOT_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// bf16 inputs take the pair products in this compilation (cpu_isa_target.h).
constexpr bool kPairDot = DILATTN_CPU_PAIR_DOT != 0;

// Words live in the workspace's f32 tiles, so they are read and written through an aliasing type.
typedef uint32_t word_t __attribute__((may_alias));
typedef uint32_t wvec __attribute__((vector_size(kVecBytes)));  // kW<float> words
typedef uint16_t hvec __attribute__((vector_size(kVecBytes)));  // 2 kW<float> bf16 values
constexpr int kWords = kW<float>;

inline wvec load_words(const word_t* p) { wvec v; std::memcpy(&v, p, sizeof v); return v; }
inline void store_words(word_t* p, wvec v) { std::memcpy(p, &v, sizeof v); }
inline wvec splat_word(uint32_t w) { return wvec{} + w; }

#if DILATTN_CPU_PAIR_DOT == 1
inline vfloat pair_dot(vfloat acc, wvec a, wvec b) {
  return (vfloat)_mm512_dpbf16_ps((__m512)acc, (__m512bh)a, (__m512bh)b);
}
#else  // the emulation (bf16emu; compiled but never called where DILATTN_CPU_PAIR_DOT is 0)
// vdpbf16ps treats denormal inputs and results as zero of their sign (DAZ, FTZ, whatever the
// MXCSR says): a lane whose exponent bits are all zero keeps its sign bit only.
inline vfloat flush_denormal(vfloat x) {
  const wvec bits = (wvec)x;
  const wvec tiny = (wvec)((bits & 0x7F800000u) == 0u);
  return (vfloat)(bits & ~(tiny & 0x7FFFFFFFu));
}
// The instruction, step by step: each bf16 product is exact in f32 (8-bit significands), so each
// step is one fused multiply-add, rounded to nearest even; the high pair first.
inline vfloat pair_dot(vfloat acc, wvec a, wvec b) {
  const vfloat a_high = flush_denormal((vfloat)(a & 0xFFFF0000u));
  const vfloat b_high = flush_denormal((vfloat)(b & 0xFFFF0000u));
  const vfloat a_low = flush_denormal((vfloat)(a << 16));
  const vfloat b_low = flush_denormal((vfloat)(b << 16));
  acc = flush_denormal(madd(a_high, b_high, flush_denormal(acc)));
  return flush_denormal(madd(a_low, b_low, acc));
}
#endif

// ---------------------------------------------------------------- rounding to bf16
// P and dS enter the pair products rounded to bf16 as vcvtneps2bf16 rounds (AVX512_BF16):
// to nearest, ties to even; a NaN stays a NaN, made quiet; a denormal f32 becomes the zero of
// its sign (DAZ). vdpbf16ps takes a denormal bf16 as zero anyway, so DAZ changes only the f32
// denormals that round up to the least normal bf16, and it lets avx512bf16 round with the
// instruction (one per 32 values) while bf16emu computes the same bits step by step.
#if DILATTN_CPU_PAIR_DOT == 1
template <int... I>
inline __m512i interleave_halves_index(std::integer_sequence<int, I...>) {
  // Word i of the result: 16-bit lanes i (low) and 16 + i (high) of the converted pair.
  return _mm512_set_epi16(((31 - I) % 2 == 0 ? (31 - I) / 2 : 16 + (31 - I) / 2)...);
}

// Words (bf16(low[i]), bf16(high[i])): two rows paired along the rows.
inline wvec round_word_pairs(vfloat low, vfloat high) {
#if defined(DILATTN_CPU_TARGET_AVX512BF16) || defined(DILATTN_CPU_TARGET_AMX) || \
    defined(__AVX512BW__)  // (their pragmas name BW)
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh((__m512)high, (__m512)low);
  return (wvec)_mm512_permutexvar_epi16(
      interleave_halves_index(std::make_integer_sequence<int, 32>{}), both);
#else  // (-Dnative=true on a compiler that does not say AVX512BW)
  // (The all-lanes mask form: the unmasked one starts from an undefined vector,
  // cpu_microkernel.h.)
  const wvec l =
      (wvec)_mm512_maskz_cvtepu16_epi32(0xFFFF, (__m256i)_mm512_cvtneps_pbh((__m512)low));
  const wvec h =
      (wvec)_mm512_maskz_cvtepu16_epi32(0xFFFF, (__m256i)_mm512_cvtneps_pbh((__m512)high));
  return l | (h << 16);
#endif
}

// The 2 kWords values a then b rounded, in order: words (bf16(x[2p]), bf16(x[2p + 1])).
inline void round_in_order(vfloat a, vfloat b, word_t* out) {
  store_words(out, (wvec)_mm512_cvtne2ps_pbh((__m512)b, (__m512)a));
}
#else
// x rounded to bf16 in the high 16 bits of each lane, the low ones zero: dtype_convert.h's
// float_to_bf16 after the denormal flush, a vector at a time.
inline wvec bf16_high_bits(vfloat x) {
  return (wvec)bf16_rounded_high((f32bits)flush_denormal(x));
}

template <int... I>
inline wvec even_lanes(wvec a, wvec b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, (2 * I)...);
}
template <int... I>
inline wvec odd_lanes(wvec a, wvec b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, (2 * I + 1)...);
}

inline wvec round_word_pairs(vfloat low, vfloat high) {
  return (bf16_high_bits(low) >> 16) | bf16_high_bits(high);
}

inline void round_in_order(vfloat a, vfloat b, word_t* out) {
  constexpr auto lanes = std::make_integer_sequence<int, kWords>{};
  const wvec h0 = bf16_high_bits(a), h1 = bf16_high_bits(b);
  store_words(out, (even_lanes(h0, h1, lanes) >> 16) | odd_lanes(h0, h1, lanes));
}
#endif

// No factor: round_rows_to_words rounds X itself.
struct Unscaled {};

// Rows r < rows of X [rows][kBC] (f32) rounded to bf16, paired along the columns:
// out[r * kBC / 2 + p] = (X[r][2p], X[r][2p + 1]). times(r, c), where given: a vector the
// kWords values X[r][c..] are multiplied by before they are rounded (the forward's dropout
// factors, cpu_dropout.h's KeepFactors: the same products as a pass of its own would make).
template <class Times = Unscaled>
inline void round_rows_to_words(const float* X, int64_t rows, word_t* out,
                                const Times& times = Times{}) {
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < kBC; c += 2 * kWords) {
      vfloat a = vload(X + r * kBC + c), b = vload(X + r * kBC + c + kWords);
      if constexpr (!std::is_same_v<Times, Unscaled>) {
        a = a * times(r, c);
        b = b * times(r, c + kWords);
      }
      round_in_order(a, b, out + r * (kBC / 2) + c / 2);
    }
}

// Rows of X [rows][kBC] (f32) rounded to bf16, paired along the rows:
// out[p * kBC + c] = (X[2p][c], X[2p + 1][c]), with a missing row 2p + 1 (odd rows) as zeros.
// times: as round_rows_to_words takes it (the backward's dropout factors of P).
template <class Times = Unscaled>
inline void round_columns_to_words(const float* X, int64_t rows, word_t* out,
                                   const Times& times = Times{}) {
  for (int64_t p = 0; 2 * p < rows; ++p) {
    const float* low = X + 2 * p * kBC;
    const bool has_high = 2 * p + 1 < rows;
    for (int c = 0; c < kBC; c += kWords) {
      vfloat a = vload(low + c), b = has_high ? vload(low + kBC + c) : vfloat{};
      if constexpr (!std::is_same_v<Times, Unscaled>) {
        a = a * times(2 * p, c);
        if (has_high) b = b * times(2 * p + 1, c);
      }
      store_words(out + p * kBC + c, round_word_pairs(a, b));
    }
  }
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

// The amx target's tile products (and TileScope, a no-op elsewhere), on the word types above.
#include "cpu_amx_tiles.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// ---------------------------------------------------------------- S = pre * Q K^T
// kMR_ rows of S (all kBC columns), rows r0.. of the tile; `pairs` = ceil(D / 2) words per row
// (zero past D). The first column block's steps run through work.block (cpu_microkernel.h).
template <int kMR_, class Work>
inline void scores_pairs_rows(const word_t* Q, int64_t ldq, const word_t* Kp, int64_t pairs,
                              float pre, float* S, Work& work, int64_t r0) {
  constexpr int kCols = kNV * kWords;
  for (int cb = 0; cb < kBC; cb += kCols) {
    vfloat acc[kMR_][kNV];
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) acc[r][n] = vfloat{};
    const auto step = [&](int64_t p) __attribute__((always_inline)) {
      wvec k[kNV];
      for (int n = 0; n < kNV; ++n) k[n] = in_register(load_words(Kp + p * kBC + cb + n * kWords));
      for (int r = 0; r < kMR_; ++r) {
        const wvec q = splat_word(Q[r * ldq + p]);
        for (int n = 0; n < kNV; ++n) acc[r][n] = pair_dot(acc[r][n], q, k[n]);
      }
    };
    if (cb == 0)
      work.block(r0, kMR_, pairs, step);
    else
      for (int64_t p = 0; p < pairs; ++p) step(p);
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) vstore(S + r * kBC + cb + n * kWords, acc[r][n] * pre);
  }
}

// S[r][c] = pre * <Q_r, K_c> for r < rows, every c < kBC (scores_tile's contract), Q as row
// words (ldq words apart), K as key pairs; work's share run between the steps.
template <class Work>
inline void scores_pairs_tile(const word_t* Q, int64_t ldq, int64_t rows, const word_t* Kp,
                              int64_t D, float pre, float* S, Work& work) {
  const int64_t pairs = (D + 1) / 2;
  int64_t r = 0;
#if DILATTN_CPU_AMX
  // Whole 16-row blocks on tiles; work's share (the dropout draws) after each block's product.
  for (; r + kTileRows <= rows; r += kTileRows) {
    amx_scores_rows16(Q + r * ldq, ldq, Kp, pairs, pre, S + r * kBC);
    for (int g = 0; g < kTileRows; g += kMR) work.block(r + g, kMR, pairs, [](int64_t) {});
  }
#endif
  for (; r + kMR <= rows; r += kMR)
    scores_pairs_rows<kMR>(Q + r * ldq, ldq, Kp, pairs, pre, S + r * kBC, work, r);
  const word_t* q = Q + r * ldq;
  switch (rows - r) {
    case 3: scores_pairs_rows<3>(q, ldq, Kp, pairs, pre, S + r * kBC, work, r); break;
    case 2: scores_pairs_rows<2>(q, ldq, Kp, pairs, pre, S + r * kBC, work, r); break;
    case 1: scores_pairs_rows<1>(q, ldq, Kp, pairs, pre, S + r * kBC, work, r); break;
    default: break;
  }
}

inline void scores_pairs_tile(const word_t* Q, int64_t ldq, int64_t rows, const word_t* Kp,
                              int64_t D, float pre, float* S) {
  NoBlockWork none;
  scores_pairs_tile(Q, ldq, rows, Kp, D, pre, S, none);
}

// ---------------------------------------------------------------- O += A B
// One pair step of a register block: B's words of pair p (kNV_ vectors) times the kMR_ rows'
// broadcast A words. kMasked: only the halves `keep` selects enter, in A and in B alike.
template <bool kMasked, int kMR_, int kNV_>
inline void pairs_step(vfloat (&acc)[kMR_][kNV_], const word_t* A, int64_t lda, const word_t* Bp,
                       uint32_t keep) {
  wvec b[kNV_];
  for (int n = 0; n < kNV_; ++n) {
    b[n] = load_words(Bp + n * kWords);
    if (kMasked) b[n] &= keep;
    b[n] = in_register(b[n]);
  }
  for (int r = 0; r < kMR_; ++r) {
    const wvec a = splat_word(kMasked ? A[r * lda] & keep : A[r * lda]);
    for (int n = 0; n < kNV_; ++n) acc[r][n] = pair_dot(acc[r][n], a, b[n]);
  }
}

// The halves of pair p inside [c0, c1): a pair cut by an odd c0 or c1 enters with its outside
// half zero in both operands, so an outside element never enters, not even as 0 x inf (SPEC 13).
inline uint32_t pair_keep(int64_t p, int64_t c0, int64_t c1) {
  uint32_t keep = ~0u;
  if (2 * p < c0) keep &= 0xFFFF0000u;
  if (2 * p + 1 >= c1) keep &= 0x0000FFFFu;
  return keep;
}

// kMR_ rows of O, kNV_ vectors of columns, over the whole pairs [p0, p1), p1 > p0: the common
// case (a range with even ends). It is a function of its own, with a loop that runs at least
// once, so that the accumulators stay in registers: inlined beside the masked steps below (or
// with a zero-trip path joining the loop's exit), GCC 12 kept a copy of them on the stack,
// stored and reloaded on every call, as accumulate_block in cpu_microkernel.h says. That cost
// the bf16 forward 9% of its time (one thread, dense N=1024).
template <int kMR_, int kNV_>
__attribute__((noinline)) void accumulate_whole_pairs_block(float* O, int64_t ldo,
                                                            const word_t* A, int64_t lda,
                                                            int64_t a_step, int64_t p0,
                                                            int64_t p1, const word_t* Bp,
                                                            int64_t ldb) {
  vfloat acc[kMR_][kNV_];
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) acc[r][n] = vload(O + r * ldo + n * kWords);
  int64_t p = p0;
  do
    pairs_step<false>(acc, A + p * a_step, lda, Bp + p * ldb, ~0u);
  while (++p < p1);
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) vstore(O + r * ldo + n * kWords, acc[r][n]);
}

// kMR_ rows of O, kNV_ vectors of columns, over the shared indices [c0, c1).
template <int kMR_, int kNV_>
inline void accumulate_pairs_block(float* O, int64_t ldo, const word_t* A, int64_t lda,
                                   int64_t a_step, int64_t c0, int64_t c1, const word_t* Bp,
                                   int64_t ldb) {
  if (c1 <= c0) return;  // as accumulate_block: nothing to add, and the accumulators stay put
  if ((c0 & 1) == 0 && (c1 & 1) == 0) {
    accumulate_whole_pairs_block<kMR_, kNV_>(O, ldo, A, lda, a_step, c0 / 2, c1 / 2, Bp, ldb);
    return;
  }
  vfloat acc[kMR_][kNV_];
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) acc[r][n] = vload(O + r * ldo + n * kWords);
  const int64_t p0 = c0 / 2, last = (c1 + 1) / 2 - 1;
  pairs_step<true>(acc, A + p0 * a_step, lda, Bp + p0 * ldb, pair_keep(p0, c0, c1));
  for (int64_t p = p0 + 1; p < last; ++p)
    pairs_step<false>(acc, A + p * a_step, lda, Bp + p * ldb, ~0u);
  if (last > p0)
    pairs_step<true>(acc, A + last * a_step, lda, Bp + last * ldb, pair_keep(last, c0, c1));
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) vstore(O + r * ldo + n * kWords, acc[r][n]);
}

template <int kMR_>
inline void accumulate_pairs_rows(float* O, int64_t ldo, const word_t* A, int64_t lda,
                                  int64_t a_step, int64_t c0, int64_t c1, const word_t* Bp,
                                  int64_t ldb, int64_t width) {
  int64_t d = 0;
  for (; d + kNV * kWords <= width; d += kNV * kWords)
    accumulate_pairs_block<kMR_, kNV>(O + d, ldo, A, lda, a_step, c0, c1, Bp + d, ldb);
  for (; d < width; d += kWords)
    accumulate_pairs_block<kMR_, 1>(O + d, ldo, A, lda, a_step, c0, c1, Bp + d, ldb);
}

// accumulate_pairs_tile's contract (below) on vectors.
inline void accumulate_pairs_vectors(float* O, int64_t ldo, int64_t rows, const word_t* A,
                                     int64_t lda, int64_t a_step, int64_t c0, int64_t c1,
                                     const word_t* Bp, int64_t ldb, int64_t width) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR)
    accumulate_pairs_rows<kMR>(O + r * ldo, ldo, A + r * lda, lda, a_step, c0, c1, Bp, ldb, width);
  const word_t* a = A + r * lda;
  switch (rows - r) {
    case 3: accumulate_pairs_rows<3>(O + r * ldo, ldo, a, lda, a_step, c0, c1, Bp, ldb, width); break;
    case 2: accumulate_pairs_rows<2>(O + r * ldo, ldo, a, lda, a_step, c0, c1, Bp, ldb, width); break;
    case 1: accumulate_pairs_rows<1>(O + r * ldo, ldo, a, lda, a_step, c0, c1, Bp, ldb, width); break;
    default: break;
  }
}

// O[r][0:width) += sum_{c0 <= c < c1} A(r, c) B(c)[0:width) for r < rows (accumulate_tile's
// contract over a range of the shared index): A(r, c) is half (c & 1) of word
// A[r * lda + (c / 2) * a_step], B(c)[d] half (c & 1) of word Bp[(c / 2) * ldb + d].
inline void accumulate_pairs_tile(float* O, int64_t ldo, int64_t rows, const word_t* A,
                                  int64_t lda, int64_t a_step, int64_t c0, int64_t c1,
                                  const word_t* Bp, int64_t ldb, int64_t width) {
  int64_t r = 0;
#if DILATTN_CPU_AMX
  // Whole 16-row blocks of whole pairs on tiles, 64 result columns at a time; their columns
  // past the last 64, and the rows after them, by the vector code.
  const int64_t tile_width = width / kTileCols * kTileCols;
  if (c1 > c0 && c0 % 2 == 0 && c1 % 2 == 0 && tile_width > 0) {
    for (; r + kTileRows <= rows; r += kTileRows)
      if (!amx_accumulate_rows16(O + r * ldo, ldo, A + r * lda, lda, a_step, c0 / 2, c1 / 2, Bp,
                                 ldb, tile_width))
        break;
    if (r > 0 && tile_width < width)
      accumulate_pairs_vectors(O + tile_width, ldo, r, A, lda, a_step, c0, c1, Bp + tile_width,
                               ldb, width - tile_width);
  }
#endif
  accumulate_pairs_vectors(O + r * ldo, ldo, rows - r, A + r * lda, lda, a_step, c0, c1, Bp, ldb,
                           width);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_PAIR_DOT_H
