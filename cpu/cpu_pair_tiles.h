// cpu_pair_tiles.h - bf16 rows of a caller tensor gathered straight into the word layouts of the
// pair products (cpu_pair_dot.h), and the product type that multiplies them (PairProduct).
//
// A word is two bf16 values (low half first). Three layouts, each zero past the data (past D, and
// past the last row), so kernels may read whole padded tiles and a pair's missing half is 0:
//   row words   [count][ld]: word p of row r = elements 2p, 2p + 1 of the row: the bf16 row
//               itself (Q, dO as the left side of S = Q K^T, dP = dO V^T);
//   key pairs   [Dp / 2][kBC]: word (p, c) = elements 2p, 2p + 1 of row c, a key per column (K,
//               V as the right side of S, dP): the row words transposed;
//   pair rows   [ceil(count / 2)][ld]: word (p, d) = element d of rows 2p and 2p + 1 (V, K as
//               the right side of O += P V, dQ += dS K; dO, Q for dV += P^T dO, dK += dS^T Q).
// Rows are found as gather() finds them (cpu_tile_io.h): a dilated branch's rows with a stride,
// any element stride. Only bf16 tensors come here (kPairDot targets, bf16 inputs).
// Checked through tests/cpu/ with DILATTN_CPU_ISA=bf16emu.
#ifndef DILATTN_CPU_PAIR_TILES_H
#define DILATTN_CPU_PAIR_TILES_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_pair_dot.h"
#include "cpu_tile_loop.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

typedef uint16_t bf16_t __attribute__((may_alias));

// A workspace tile (f32) holding words instead.
template <class T>
inline word_t* words_in(T* tile) { return reinterpret_cast<word_t*>(tile); }

// Element d of row `first + r` of the progression, head h, batch b, as its bf16 bits.
struct Bf16Rows {
  const bf16_t* data;
  int64_t sd;  // element stride
  const bf16_t* row(const dilattn_tensor& t, int64_t b, int64_t h, const KeyProgression& rows,
                    int64_t index) const {
    return data + element_offset(t, b, progression_at(rows, index), h, 0);
  }
};
inline Bf16Rows bf16_rows(const dilattn_tensor& t) {
  return Bf16Rows{static_cast<const bf16_t*>(t.data), t.strides[3]};
}

// Row words: dst[r * ld + p], ld >= ceil(D / 2) words; words past the row are zero.
inline void gather_row_words(const dilattn_tensor& t, int64_t b, int64_t h,
                             const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                             word_t* dst, int64_t ld) {
  const Bf16Rows in = bf16_rows(t);
  for (int64_t r = 0; r < count; ++r) {
    const bf16_t* src = in.row(t, b, h, rows, first + r);
    bf16_t* out = reinterpret_cast<bf16_t*>(dst + r * ld);
    if (in.sd == 1)
      std::memcpy(out, src, sizeof(uint16_t) * static_cast<size_t>(D));
    else
      for (int64_t d = 0; d < D; ++d) out[d] = src[d * in.sd];
    for (int64_t d = D; d < 2 * ld; ++d) out[d] = 0;
  }
}

// Key pairs: dst[p * kBC + c] for p < Dp / 2, every c < kBC (columns past count zero). Rows of
// unit stride with ceil(D / 2) a multiple of the vector's words are read as words a vector at a
// time and transposed in registers (gather_columns_vectors' way).
inline void gather_key_pairs(const dilattn_tensor& t, int64_t b, int64_t h,
                             const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                             word_t* dst) {
  const Bf16Rows in = bf16_rows(t);
  const int64_t pairs = (D + 1) / 2, all_pairs = padded(D) / 2;
  const bf16_t* src[kBC];
  for (int64_t c = 0; c < count; ++c) src[c] = in.row(t, b, h, rows, first + c);
  if (in.sd == 1 && D % 2 == 0 && pairs % kWords == 0) {
    for (int64_t c0 = 0; c0 < kBC; c0 += kWords)
      for (int64_t p0 = 0; p0 < pairs; p0 += kWords) {
        wvec v[kWords];
        for (int i = 0; i < kWords; ++i)
          v[i] = c0 + i < count ? load_words(reinterpret_cast<const word_t*>(src[c0 + i]) + p0)
                                : wvec{};
        transpose_block(v);
        for (int i = 0; i < kWords; ++i) store_words(dst + (p0 + i) * kBC + c0, v[i]);
      }
  } else {
    for (int64_t c = 0; c < kBC; ++c)
      for (int64_t p = 0; p < pairs; ++p) {
        uint32_t word = 0;
        if (c < count) {
          const uint32_t low = src[c][2 * p * in.sd];
          const uint32_t high = 2 * p + 1 < D ? src[c][(2 * p + 1) * in.sd] : 0;
          word = low | high << 16;
        }
        dst[p * kBC + c] = word;
      }
  }
  for (int64_t p = pairs; p < all_pairs; ++p)
    for (int64_t c = 0; c < kBC; ++c) dst[p * kBC + c] = 0;
}

// Pair rows: dst[p * ld + d] for p < ceil(count / 2), d < ld (ld >= D; past D zero, a missing
// row 2p + 1 zero). Rows of unit stride with D a multiple of the vector's bf16 lanes are
// interleaved a vector at a time (zip_halves).
inline void gather_pair_rows(const dilattn_tensor& t, int64_t b, int64_t h,
                             const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                             word_t* dst, int64_t ld) {
  const Bf16Rows in = bf16_rows(t);
  constexpr int kHalves = 2 * kWords;  // bf16 lanes of a vector
  for (int64_t p = 0; 2 * p < count; ++p) {
    const bf16_t* low = in.row(t, b, h, rows, first + 2 * p);
    const bf16_t* high = 2 * p + 1 < count ? in.row(t, b, h, rows, first + 2 * p + 1) : nullptr;
    word_t* out = dst + p * ld;
    int64_t d = 0;
    if (in.sd == 1 && D % kHalves == 0)
      for (; d < D; d += kHalves) {
        hvec a, c = hvec{};
        std::memcpy(&a, low + d, sizeof a);
        if (high != nullptr) std::memcpy(&c, high + d, sizeof c);
        store_words(out + d, (wvec)zip_halves<0>(a, c));
        store_words(out + d + kWords, (wvec)zip_halves<1>(a, c));
      }
    for (; d < D; ++d) {
      const uint32_t high_bits = high != nullptr ? high[d * in.sd] : 0;
      out[d] = static_cast<uint32_t>(low[d * in.sd]) | high_bits << 16;
    }
    for (; d < ld; ++d) out[d] = 0;
  }
}

// True when every bf16 value of `n` words is finite (rows_finite for row words).
inline bool words_finite(const word_t* w, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    bad |= static_cast<uint32_t>((w[i] & 0x7F80u) == 0x7F80u) |
           static_cast<uint32_t>((w[i] & 0x7F800000u) == 0x7F800000u);
  return bad == 0;
}

// O += A B on bf16 pairs (cpu_tile_loop.h's product contract; accumulate_pairs_tile): A's word
// of row r, pair p at a[r lda + p a_step] (row words of P or dS: lda kBC / 2, a_step 1; their
// column words, round_columns_to_words: lda 1, a_step kBC), B as pair rows ldb apart.
struct PairProduct {
  const word_t* a;
  int64_t lda, a_step;
  const word_t* b;
  int64_t ldb;
  void add(float* O, int64_t ldo, int64_t r0, int64_t rows, int64_t c0, int64_t c1,
           int64_t width) const {
    accumulate_pairs_tile(O, ldo, rows, a + r0 * lda, lda, a_step, c0, c1, b, ldb, width);
  }
};

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_PAIR_TILES_H
