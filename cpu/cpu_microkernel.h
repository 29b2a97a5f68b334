// cpu_microkernel.h - the hot loops of the cpu backend: S = pre * Q K^T, O += A B, a
// vectorised exp2 (SPEC 2, accumulated in f32 as SPEC 1 allows for fast paths), and the lane
// shuffles they need (horizontal max/sum by a fixed tree, an in-register kW x kW transpose).
//
// Register blocking: a block of kMR rows times a few vectors of columns lives in registers while
// the shared dimension streams through, so each loaded K (or V) vector feeds kMR FMAs and each
// broadcast Q (or P) value feeds several vectors. The vectors are GCC/Clang vector extensions
// sized from the target this file is compiled for (cpu_isa_target.h): 16 floats with AVX-512,
// 8 with AVX2, 4 otherwise (SSE2, NEON); one build holds several targets and picks one at run
// time (cpu_isa.h). FMA instructions are used where the target has them (the library builds
// with -std=c++17, where GCC does not contract a*b+c on its own).
//
// Layouts, all f32 and row-major: Q rows [rows][ldq]; K transposed Kt [D][kBC] (a key per
// column, so S rows are vectors over keys; cpu_tile_io.h transposes K in registers) or, for a
// few rows (decode), K rows read in place; S [rows][kBC]; A of O += A B row-major or
// transposed (a_step); its right-hand side [count][ldb] with ldb a multiple of 16 (rows padded
// with zeros past D).
// Checked through tests/cpu/ (every result against the f64 reference); exp2v alone, on every
// instruction set, by tests/cpu/test_cpu_exp2.cpp.
#ifndef DILATTN_CPU_MICROKERNEL_H
#define DILATTN_CPU_MICROKERNEL_H

#include "cpu_isa_target.h"  // first: see there

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

constexpr int kVecBytes = DILATTN_CPU_VEC_BYTES;
typedef float vfloat __attribute__((vector_size(kVecBytes)));
typedef int32_t vint __attribute__((vector_size(kVecBytes)));
typedef uint32_t vuint __attribute__((vector_size(kVecBytes)));
constexpr int kW = kVecBytes / 4;  // floats per vector

constexpr int kBC = 64;  // keys per key tile: the columns of S
constexpr int kBR = 64;  // query rows per S tile
constexpr int kMR = 4;   // rows held in registers by both kernels
// Vectors per register block: kMR x kNV accumulators fit the register file (32 zmm, 16 ymm/xmm).
constexpr int kNV = kW == 16 ? 4 : 2;
constexpr int kPad = 16;  // row lengths (D) are padded to a multiple of this

inline int64_t padded(int64_t D) { return (D + kPad - 1) / kPad * kPad; }

// ---------------------------------------------------------------- vector helpers
inline vfloat vload(const float* p) { vfloat v; std::memcpy(&v, p, sizeof v); return v; }
inline void vstore(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }
inline vfloat splat(float x) {  // one broadcast instruction
#if DILATTN_CPU_VEC_BYTES == 64
  return (vfloat)_mm512_set1_ps(x);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_set1_ps(x);
#elif defined(__SSE__)
  return (vfloat)_mm_set1_ps(x);
#else
  return vfloat{} + x;
#endif
}
// Pins a loaded vector in a register. Without it the compiler folds the load into every FMA
// that uses it (kMR loads of the same vector per step), which makes the kernels load-bound.
inline vfloat in_register(vfloat v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+v"(v));
#endif
  return v;
}

// a * b + c, one rounding where the target has FMA.
inline vfloat madd(vfloat a, vfloat b, vfloat c) {
#if DILATTN_CPU_VEC_BYTES == 64
  return (vfloat)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

// Lane-wise max that keeps a NaN from either side, as softmax_rules.h's max_nan does: a NaN
// score must reach the row's running max (SPEC 13), where a plain compare or
// max instruction would drop it.
inline vfloat vmax(vfloat a, vfloat b) {
  const vint take_b = (b > a) | (b != b);
  return (vfloat)(((vint)b & take_b) | ((vint)a & ~take_b));
}

// Lane-wise max in one instruction (x86 max semantics: where a lane is NaN, b's lane wins), so
// a NaN may be dropped. The forward's row max uses it and restores the NaN afterwards from the
// row's sum (cpu_forward.cpp, online_softmax).
// (The intrinsics, where there are some: GCC does not always turn the select into the one
// instruction. AVX-512's unmasked ones start from an undefined vector, which GCC 12 warns
// about; the all-lanes mask form says the same without it.)
inline vfloat vmax_plain(vfloat a, vfloat b) {
#if DILATTN_CPU_VEC_BYTES == 64
  return (vfloat)_mm512_mask_max_ps((__m512)a, 0xFFFF, (__m512)a, (__m512)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_max_ps((__m256)a, (__m256)b);
#elif defined(__SSE__)
  return (vfloat)_mm_max_ps((__m128)a, (__m128)b);
#else
  return a > b ? a : b;
#endif
}
// The same for min (where a lane is NaN, b's lane wins).
inline vfloat vmin_plain(vfloat a, vfloat b) {
#if DILATTN_CPU_VEC_BYTES == 64
  return (vfloat)_mm512_mask_min_ps((__m512)a, 0xFFFF, (__m512)a, (__m512)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_min_ps((__m256)a, (__m256)b);
#elif defined(__SSE__)
  return (vfloat)_mm_min_ps((__m128)a, (__m128)b);
#else
  return a < b ? a : b;
#endif
}

// ---------------------------------------------------------------- lane shuffles
// Lane index lists for __builtin_shufflevector (GCC >= 12, Clang), per vector width:
//   SWAP_h:  each lane i takes lane i ^ h (the two halves of every 2h lanes trade places);
//   ZIP_LO / ZIP_HI: the low (high) halves of a and b interleaved, a0 b0 a1 b1 ...
// (b's lanes are numbered kW .. 2 kW - 1).
#if DILATTN_CPU_VEC_BYTES == 64
#define DILATTN_SWAP_8 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7
#define DILATTN_SWAP_4 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11
#define DILATTN_SWAP_2 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13
#define DILATTN_SWAP_1 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14
#define DILATTN_ZIP_LO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define DILATTN_ZIP_HI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif DILATTN_CPU_VEC_BYTES == 32
#define DILATTN_SWAP_4 4, 5, 6, 7, 0, 1, 2, 3
#define DILATTN_SWAP_2 2, 3, 0, 1, 6, 7, 4, 5
#define DILATTN_SWAP_1 1, 0, 3, 2, 5, 4, 7, 6
#define DILATTN_ZIP_LO 0, 8, 1, 9, 2, 10, 3, 11
#define DILATTN_ZIP_HI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define DILATTN_SWAP_2 2, 3, 0, 1
#define DILATTN_SWAP_1 1, 0, 3, 2
#define DILATTN_ZIP_LO 0, 4, 1, 5
#define DILATTN_ZIP_HI 2, 6, 3, 7
#endif

// Horizontal reduction of one vector by a fixed tree: combine each lane with the lane kW/2
// away, then kW/4, ... 1, all in registers. Every lane ends with the result; the order of the
// operations is fixed by the width alone, so results never depend on the thread count.
template <class Op>
inline float reduce_lanes(vfloat v, Op op) {
#if DILATTN_CPU_VEC_BYTES == 64
  v = op(v, __builtin_shufflevector(v, v, DILATTN_SWAP_8));
#endif
#if DILATTN_CPU_VEC_BYTES >= 32
  v = op(v, __builtin_shufflevector(v, v, DILATTN_SWAP_4));
#endif
  v = op(v, __builtin_shufflevector(v, v, DILATTN_SWAP_2));
  v = op(v, __builtin_shufflevector(v, v, DILATTN_SWAP_1));
  return v[0];
}
// Max (NaN-keeping, as vmax) and sum of the lanes of one vector. (Function objects, not
// lambdas: a lambda's body would be compiled without this file's target instructions.)
struct MaxOp {
  vfloat operator()(vfloat a, vfloat b) const { return vmax(a, b); }
};
struct PlainMaxOp {
  vfloat operator()(vfloat a, vfloat b) const { return vmax_plain(a, b); }
};
struct AddOp {
  vfloat operator()(vfloat a, vfloat b) const { return a + b; }
};
inline float hmax(vfloat v) { return reduce_lanes(v, MaxOp{}); }
inline float hmax_plain(vfloat v) { return reduce_lanes(v, PlainMaxOp{}); }
inline float hsum(vfloat v) { return reduce_lanes(v, AddOp{}); }

// Transposes the kW x kW block held in v[0 .. kW) (v[i] = row i): afterwards v[i] is column i.
// log2(kW) rounds of interleaving row i with row i + kW/2 (a perfect shuffle of the lanes each
// time), kW two-source shuffles per round.
inline void transpose_block(vfloat* v) {
  for (int round = 1; round < kW; round *= 2) {
    vfloat out[kW];
    for (int i = 0; i < kW / 2; ++i) {
      out[2 * i] = __builtin_shufflevector(v[i], v[i + kW / 2], DILATTN_ZIP_LO);
      out[2 * i + 1] = __builtin_shufflevector(v[i], v[i + kW / 2], DILATTN_ZIP_HI);
    }
    for (int i = 0; i < kW; ++i) v[i] = out[i];
  }
}

// ---------------------------------------------------------------- exp2
// 2^x for the online softmax (softmax_rules.h's online_prob, a vector at a time): x clamped to
// [-127, 127], rounded to the nearest integer n by adding and subtracting 1.5 * 2^23 (the sum's
// low mantissa bits are then n itself, which also gives 2^n's exponent bits), 2^(x - n) by a
// degree-4 polynomial on [-1/2, 1/2] (relative-error minimax fit, constant term exactly 1 so
// 2^0 = 1 exactly), times 2^n.
// Maximum relative error 2.9e-6 for x in [-126, 127] (tests/cpu/test_cpu_exp2.cpp sweeps every
// instruction set over the whole range), far inside SPEC 8's f32 rtol = 1e-4; a fifth degree
// would buy 1.7e-7 for one more FMA per vector in the softmax's hottest loop.
// Exactly 0 for x < -126.5 and for -inf (a masked score), NaN for NaN (a NaN score's
// probability stays NaN: both clamps are one max or min instruction that passes a NaN in its
// second operand through), 2^127 for x >= 127 (the softmax's x is <= 0; the backward's
// exponent comes from the caller's LSE, so it is clamped too).
inline vfloat exp2v(vfloat x) {
  x = vmax_plain(splat(-127.0f), x);
  x = vmin_plain(splat(127.0f), x);
  const vfloat round = splat(12582912.0f);  // 1.5 * 2^23
  const vfloat t = x + round;               // low mantissa bits: 2^22 + n, n = round(x)
  const vfloat f = x - (t - round);         // x - n, exact, in [-1/2, 1/2]
  vfloat p = splat(9.582851082e-3f);
  p = madd(p, f, splat(5.590642244e-2f));
  p = madd(p, f, splat(2.402409911e-1f));
  p = madd(p, f, splat(6.931241751e-1f));
  p = madd(p, f, splat(1.0f));
  // (2^22 + n) << 23 leaves n << 23 (2^45 falls off); plus the bias: n + 127 in [0, 254], and
  // a biased exponent of 0 makes 2^n exactly +0, so x < -126.5 (n = -127) gives 0.
  const vint two_n = ((vint)t << 23) + (127 << 23);
  return p * (vfloat)two_n;
}

// ---------------------------------------------------------------- S = pre * Q Kt
// kMR_ rows of S (all kBC columns): the K vector of a column block is loaded once per d and
// multiplied by kMR_ broadcast Q values.
template <int kMR_>
inline void scores_rows(const float* Q, int64_t ldq, const float* Kt, int64_t D, float pre,
                        float* S) {
  constexpr int kCols = kNV * kW;
  for (int cb = 0; cb < kBC; cb += kCols) {
    vfloat acc[kMR_][kNV];
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) acc[r][n] = vfloat{};
    for (int64_t d = 0; d < D; ++d) {
      vfloat k[kNV];
      for (int n = 0; n < kNV; ++n) k[n] = in_register(vload(Kt + d * kBC + cb + n * kW));
      for (int r = 0; r < kMR_; ++r) {
        const vfloat q = splat(Q[r * ldq + d]);
        for (int n = 0; n < kNV; ++n) acc[r][n] = madd(q, k[n], acc[r][n]);
      }
    }
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) vstore(S + r * kBC + cb + n * kW, acc[r][n] * pre);
  }
}

// S[r][c] = pre * <Q_r, Kt[:, c]> for r < rows, every c < kBC (pre: softmax_rules.h's
// score_scale; 1 for dO V^T).
inline void scores_tile(const float* Q, int64_t ldq, int64_t rows, const float* Kt, int64_t D,
                        float pre, float* S) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR) scores_rows<kMR>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC);
  switch (rows - r) {
    case 3: scores_rows<3>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC); break;
    case 2: scores_rows<2>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC); break;
    case 1: scores_rows<1>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC); break;
    default: break;
  }
}

// S[r][c] = pre * <Q_r, K_c> for r < rows, c < count, with K_c a key row of D floats read in
// place (D a multiple of kW): one dot product per pair, reduced across D by reduce_lanes. For a
// few query rows (decode, Nq small) this is cheaper than transposing the key tile for
// scores_tile, a cost the few rows could not amortise. Columns from count on are not written.
inline void scores_from_rows(const float* Q, int64_t ldq, int64_t rows, const float* const* K,
                             int64_t count, int64_t D, float pre, float* S) {
  for (int64_t c = 0; c < count; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      vfloat acc = vfloat{};
      for (int64_t d = 0; d < D; d += kW) acc = madd(vload(Q + r * ldq + d), vload(K[c] + d), acc);
      S[r * kBC + c] = hsum(acc) * pre;
    }
}

// ---------------------------------------------------------------- O += A B
// A's element (row r, shared index c) is A[r * lda + c * a_step]: a_step = 1 for a row-major
// A (P V, dS K), lda = 1 for a transposed one (P^T dO, dS^T Q read straight from the S tile,
// no transposed copy). The A values are broadcast one at a time, so either layout costs the
// same.
// kMR_ rows of O, kNV_ vectors of columns: for every shared index c, kNV_ vectors of B row c
// are loaded once and multiplied by kMR_ broadcast A values.
template <int kMR_, int kNV_>
inline void accumulate_block(float* O, int64_t ldo, const float* A, int64_t lda, int64_t a_step,
                             int64_t count, const float* Bm, int64_t ldb) {
  // Nothing to add without keys. Returning first also keeps the accumulators in registers
  // alone: with the zero-trip path joining the loop's exit, GCC 12 kept a second copy of them
  // on the stack, copied in and out on every call (README "Performance").
  if (count <= 0) return;
  vfloat acc[kMR_][kNV_];
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) acc[r][n] = vload(O + r * ldo + n * kW);
  for (int64_t c = 0; c < count; ++c) {
    vfloat b[kNV_];
    for (int n = 0; n < kNV_; ++n) b[n] = in_register(vload(Bm + c * ldb + n * kW));
    for (int r = 0; r < kMR_; ++r) {
      const vfloat a = splat(A[r * lda + c * a_step]);
      for (int n = 0; n < kNV_; ++n) acc[r][n] = madd(a, b[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) vstore(O + r * ldo + n * kW, acc[r][n]);
}

template <int kMR_>
inline void accumulate_rows(float* O, int64_t ldo, const float* A, int64_t lda, int64_t a_step,
                            int64_t count, const float* Bm, int64_t ldb, int64_t width) {
  int64_t d = 0;
  for (; d + kNV * kW <= width; d += kNV * kW)
    accumulate_block<kMR_, kNV>(O + d, ldo, A, lda, a_step, count, Bm + d, ldb);
  for (; d < width; d += kW)
    accumulate_block<kMR_, 1>(O + d, ldo, A, lda, a_step, count, Bm + d, ldb);
}

// O[r][0:width) += sum_{c < count} A(r, c) * Bm[c][0:width) for r < rows; width is a multiple
// of kPad. Rows of O are ldo apart (a dilated branch's rows are r rows apart in the block).
inline void accumulate_tile(float* O, int64_t ldo, int64_t rows, const float* A, int64_t lda,
                            int64_t a_step, int64_t count, const float* Bm, int64_t ldb,
                            int64_t width) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR)
    accumulate_rows<kMR>(O + r * ldo, ldo, A + r * lda, lda, a_step, count, Bm, ldb, width);
  const float* a = A + r * lda;
  switch (rows - r) {
    case 3: accumulate_rows<3>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    case 2: accumulate_rows<2>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    case 1: accumulate_rows<1>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    default: break;
  }
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_MICROKERNEL_H
