// cpu_microkernel.h - the hot loops of the cpu backend: S = pre * Q K^T, O += A B, and a
// vectorised exp2 (SPEC 2, accumulated in f32 as SPEC 1 allows for fast paths).
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
// column, so S rows are vectors over keys); S [rows][kBC]; the right-hand side of O += A B is
// [count][ldb] with ldb a multiple of 16 (rows padded with zeros past D).
// Checked through tests/cpu/ (every result against the f64 reference).
#ifndef DILATTN_CPU_MICROKERNEL_H
#define DILATTN_CPU_MICROKERNEL_H

#include "cpu_isa_target.h"  // first: see there

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

constexpr int kVecBytes = DILATTN_CPU_VEC_BYTES;
typedef float vfloat __attribute__((vector_size(kVecBytes)));
typedef int32_t vint __attribute__((vector_size(kVecBytes)));
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
// score must reach the row's running max (README "Decisions"), where a plain compare or
// max instruction would drop it.
inline vfloat vmax(vfloat a, vfloat b) {
  const vint take_b = (b > a) | (b != b);
  return (vfloat)(((vint)b & take_b) | ((vint)a & ~take_b));
}

// Horizontal max (NaN-keeping, as vmax) and sum of one vector: halve the lanes until one is
// left (fixed-size loops the compiler turns into a few vector ops; the order is fixed, so
// results are too).
inline float hmax(vfloat v) {
  float lanes[kW];
  vstore(lanes, v);
  for (int half = kW / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) {
      const float b = lanes[i + half];
      lanes[i] = (b > lanes[i] || b != b) ? b : lanes[i];
    }
  return lanes[0];
}
inline float hsum(vfloat v) {
  float lanes[kW];
  vstore(lanes, v);
  for (int half = kW / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
  return lanes[0];
}

// 2^x for x <= 128, exactly 0 for x < -126 (and for -inf, the masked scores), NaN for NaN
// (a NaN score's probability stays NaN), relative error about 2e-7: round x to n, 2^(x-n) by
// its degree-6 Taylor polynomial on [-1/2, 1/2], times 2^n built in the exponent bits.
inline vfloat exp2v(vfloat x) {
  const vint nan = x != x;
  const vfloat x_in = x;
  const vint alive = x >= splat(-126.0f);
  x = (vfloat)(((vint)x & alive) | ((vint)splat(-126.0f) & ~alive));
  const vint small = x <= splat(127.0f);
  x = (vfloat)(((vint)x & small) | ((vint)splat(127.0f) & ~small));
  const vint n = __builtin_convertvector(x + 127.5f, vint);  // round(x) + 127, in [1, 254]
  const vfloat f = x - (__builtin_convertvector(n, vfloat) - 127.0f);
  vfloat p = splat(1.540353e-4f);
  p = madd(p, f, splat(1.3333558e-3f));
  p = madd(p, f, splat(9.6181291e-3f));
  p = madd(p, f, splat(5.5504109e-2f));
  p = madd(p, f, splat(2.4022651e-1f));
  p = madd(p, f, splat(6.9314718e-1f));
  p = madd(p, f, splat(1.0f));
  const vfloat two_n = (vfloat)(n << 23);
  return (vfloat)(((vint)(p * two_n) & alive) | ((vint)x_in & nan));
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

// ---------------------------------------------------------------- O += A B
// kMR_ rows of O, kNV_ vectors of columns: for every shared index c, kNV_ vectors of B row c
// are loaded once and multiplied by kMR_ broadcast A values.
template <int kMR_, int kNV_>
inline void accumulate_block(float* O, int64_t ldo, const float* A, int64_t lda, int64_t count,
                             const float* Bm, int64_t ldb) {
  vfloat acc[kMR_][kNV_];
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) acc[r][n] = vload(O + r * ldo + n * kW);
  for (int64_t c = 0; c < count; ++c) {
    vfloat b[kNV_];
    for (int n = 0; n < kNV_; ++n) b[n] = in_register(vload(Bm + c * ldb + n * kW));
    for (int r = 0; r < kMR_; ++r) {
      const vfloat a = splat(A[r * lda + c]);
      for (int n = 0; n < kNV_; ++n) acc[r][n] = madd(a, b[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) vstore(O + r * ldo + n * kW, acc[r][n]);
}

template <int kMR_>
inline void accumulate_rows(float* O, int64_t ldo, const float* A, int64_t lda, int64_t count,
                            const float* Bm, int64_t ldb, int64_t width) {
  int64_t d = 0;
  for (; d + kNV * kW <= width; d += kNV * kW)
    accumulate_block<kMR_, kNV>(O + d, ldo, A, lda, count, Bm + d, ldb);
  for (; d < width; d += kW) accumulate_block<kMR_, 1>(O + d, ldo, A, lda, count, Bm + d, ldb);
}

// O[r][0:width) += sum_{c < count} A[r][c] * Bm[c][0:width) for r < rows; width is a multiple
// of kPad. Rows of O are ldo apart (a dilated branch's rows are r rows apart in the block).
inline void accumulate_tile(float* O, int64_t ldo, int64_t rows, const float* A, int64_t lda,
                            int64_t count, const float* Bm, int64_t ldb, int64_t width) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR)
    accumulate_rows<kMR>(O + r * ldo, ldo, A + r * lda, lda, count, Bm, ldb, width);
  switch (rows - r) {
    case 3: accumulate_rows<3>(O + r * ldo, ldo, A + r * lda, lda, count, Bm, ldb, width); break;
    case 2: accumulate_rows<2>(O + r * ldo, ldo, A + r * lda, lda, count, Bm, ldb, width); break;
    case 1: accumulate_rows<1>(O + r * ldo, ldo, A + r * lda, lda, count, Bm, ldb, width); break;
    default: break;
  }
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_MICROKERNEL_H
