// cpu_microkernel.h - the hot loops of the cpu backend: S = pre * Q K^T, O += A B, a
// vectorised exp2 (SPEC 2), and the lane shuffles they need (horizontal max/sum by a fixed tree,
// an in-register transpose of a square block of lanes), all templates on the compute type T:
// float for f32, f16 and bf16 inputs (accumulated in f32 as SPEC 1 allows for fast paths),
// double for f64 inputs (computed in f64, SPEC 12). (bf16 inputs on avx512bf16 and bf16emu
// multiply bf16 pairs instead: cpu_pair_dot.h.) The same code serves both; only the vector
// helpers (one instruction each) and exp2's constants are written per type.
//
// Register blocking: a block of kMR rows times a few vectors of columns lives in registers while
// the shared dimension streams through, so each loaded K (or V) vector feeds kMR FMAs and each
// broadcast Q (or P) value feeds several vectors. The vectors are GCC/Clang vector extensions
// sized from the target this file is compiled for (cpu_isa_target.h): 64 bytes with AVX-512
// (16 floats or 8 doubles), 32 with AVX2, 16 otherwise (SSE2, NEON); one build holds several
// targets and picks one at run time (cpu_isa.h). FMA instructions are used where the target has
// them (the library builds with -std=c++17, where GCC does not contract a*b+c on its own).
//
// Layouts, all in T and row-major: Q rows [rows][ldq]; K transposed Kt [D][kBC] (a key per
// column, so S rows are vectors over keys; cpu_tile_io.h transposes K in registers) or, for a
// few rows (decode), K rows read in place; S [rows][kBC]; A of O += A B row-major or
// transposed (a_step); its right-hand side [count][ldb] with ldb a multiple of 16 (rows padded
// with zeros past D).
// Checked through tests/cpu/ (every result against the f64 reference); exp2v alone, on every
// instruction set and for both types, by tests/cpu/test_cpu_exp2.cpp.
#ifndef DILATTN_CPU_MICROKERNEL_H
#define DILATTN_CPU_MICROKERNEL_H

#include <type_traits>
#include <utility>

#include "cpu_isa_target.h"  // first: see there

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

constexpr int kVecBytes = DILATTN_CPU_VEC_BYTES;

// The vectors of compute type T: values (vec), lane masks and integers of the same width
// (ivec, what a comparison gives), and int32 lanes as many as vec has (seg, the pair weights'
// segment numbers, cpu_pair_weights.h).
template <class T>
struct Simd;
template <>
struct Simd<float> {
  typedef float vec __attribute__((vector_size(kVecBytes)));
  typedef int32_t ivec __attribute__((vector_size(kVecBytes)));
  typedef int32_t seg __attribute__((vector_size(kVecBytes)));
};
template <>
struct Simd<double> {
  typedef double vec __attribute__((vector_size(kVecBytes)));
  typedef int64_t ivec __attribute__((vector_size(kVecBytes)));
  typedef int32_t seg __attribute__((vector_size(kVecBytes / 2)));
};
template <class T>
using vec = typename Simd<T>::vec;
template <class T>
using ivec = typename Simd<T>::ivec;
template <class T>
using segvec = typename Simd<T>::seg;
typedef vec<float> vfloat;

// f32 bits rounded to bf16, lane by lane, in the high 16 bits of each lane (the low ones zero):
// dtype_convert.h's float_to_bf16 (to nearest even, a NaN made quiet, denormals rounded as any
// value). The one rounding step of the outputs' stores (cpu_tile_io.h store_bf16) and of the
// pair products' P and dS (cpu_pair_dot.h bf16_high_bits, after a denormal flush).
typedef uint32_t f32bits __attribute__((vector_size(kVecBytes)));
inline f32bits bf16_rounded_high(f32bits u) {
  const f32bits rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const f32bits nan = (f32bits)((u & 0x7FFFFFFFu) > 0x7F800000u);
  return (nan & ((u | 0x00400000u) & 0xFFFF0000u)) | (~nan & rounded);
}

template <class T>
constexpr int kW = kVecBytes / static_cast<int>(sizeof(T));  // lanes of a vector of T

// The dtype whose tensors hold T itself (read and written without conversion).
template <class T>
constexpr dilattn_dtype kComputeDtype = std::is_same<T, double>::value ? DILATTN_F64 : DILATTN_F32;

constexpr int kBC = 64;  // keys per key tile: the columns of S
constexpr int kBR = 64;  // query rows per S tile
constexpr int kMR = 4;   // rows held in registers by both kernels
// Vectors per register block: kMR x kNV accumulators fit the register file (32 zmm, 16 ymm/xmm),
// whatever the lane type.
constexpr int kNV = kVecBytes == 64 ? 4 : 2;
constexpr int kPad = 16;  // row lengths (D) are padded to a multiple of this (of every kW)

inline int64_t padded(int64_t D) { return (D + kPad - 1) / kPad * kPad; }

// ---------------------------------------------------------------- vector helpers
template <class T>
inline vec<T> vload(const T* p) { vec<T> v; std::memcpy(&v, p, sizeof v); return v; }
template <class T>
inline void vstore(T* p, vec<T> v) { std::memcpy(p, &v, sizeof v); }
inline vfloat splat(float x) {  // one broadcast instruction
#if DILATTN_CPU_AVX512
  return (vfloat)_mm512_set1_ps(x);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_set1_ps(x);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE__)
  return (vfloat)_mm_set1_ps(x);
#else
  return vfloat{} + x;
#endif
}
inline vec<double> splat(double x) {
#if DILATTN_CPU_AVX512
  return (vec<double>)_mm512_set1_pd(x);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vec<double>)_mm256_set1_pd(x);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE2__)
  return (vec<double>)_mm_set1_pd(x);
#else
  return vec<double>{} + x;
#endif
}
// Pins a loaded vector in a register. Without it the compiler folds the load into every FMA
// that uses it (kMR loads of the same vector per step), which makes the kernels load-bound.
// (bf16emu's 64-byte vectors fit no AVX2 register: left to the compiler there.)
template <class V>
inline V in_register(V v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && \
    (DILATTN_CPU_AVX512 || DILATTN_CPU_VEC_BYTES < 64)
  __asm__("" : "+v"(v));
#endif
  return v;
}

// 64-byte vectors on AVX2 (bf16emu): a fused multiply-add per 32-byte half.
template <class V, class Half, class FusedHalf>
inline V madd_by_halves(V a, V b, V c, FusedHalf fma_half) {
  Half x[2], y[2], z[2];
  std::memcpy(x, &a, sizeof a);
  std::memcpy(y, &b, sizeof b);
  std::memcpy(z, &c, sizeof c);
  for (int i = 0; i < 2; ++i) z[i] = fma_half(x[i], y[i], z[i]);
  std::memcpy(&c, z, sizeof c);
  return c;
}
#if !DILATTN_CPU_AVX512 && DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 64
struct FusedHalfPs {
  __m256 operator()(__m256 a, __m256 b, __m256 c) const { return _mm256_fmadd_ps(a, b, c); }
};
struct FusedHalfPd {
  __m256d operator()(__m256d a, __m256d b, __m256d c) const { return _mm256_fmadd_pd(a, b, c); }
};
#endif

// a * b + c, one rounding where the target has FMA.
inline vfloat madd(vfloat a, vfloat b, vfloat c) {
#if DILATTN_CPU_AVX512
  return (vfloat)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 64
  return madd_by_halves<vfloat, __m256>(a, b, c, FusedHalfPs{});
#else
  return a * b + c;
#endif
}
inline vec<double> madd(vec<double> a, vec<double> b, vec<double> c) {
#if DILATTN_CPU_AVX512
  return (vec<double>)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 32
  return (vec<double>)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#elif DILATTN_CPU_FMA && DILATTN_CPU_VEC_BYTES == 64
  return madd_by_halves<vec<double>, __m256d>(a, b, c, FusedHalfPd{});
#else
  return a * b + c;
#endif
}

// Lane-wise max that keeps a NaN from either side, as softmax_rules.h's max_nan does: a NaN
// score must reach the row's running max (SPEC 13), where a plain compare or
// max instruction would drop it.
template <class V>
inline V vmax(V a, V b) {
  typedef decltype(a > b) mask;
  const mask take_b = (b > a) | (b != b);
  return (V)(((mask)b & take_b) | ((mask)a & ~take_b));
}

// Lane-wise max in one instruction (x86 max semantics: where a lane is NaN, b's lane wins), so
// a NaN may be dropped. The forward's row max uses it and restores the NaN afterwards from the
// row's sum (cpu_forward.cpp, online_softmax).
// (The intrinsics, where there are some: GCC does not always turn the select into the one
// instruction. AVX-512's unmasked ones start from an undefined vector, which GCC 12 warns
// about; the all-lanes mask form says the same without it.)
inline vfloat vmax_plain(vfloat a, vfloat b) {
#if DILATTN_CPU_AVX512
  return (vfloat)_mm512_mask_max_ps((__m512)a, 0xFFFF, (__m512)a, (__m512)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_max_ps((__m256)a, (__m256)b);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE__)
  return (vfloat)_mm_max_ps((__m128)a, (__m128)b);
#else
  return a > b ? a : b;
#endif
}
inline vec<double> vmax_plain(vec<double> a, vec<double> b) {
#if DILATTN_CPU_AVX512
  return (vec<double>)_mm512_mask_max_pd((__m512d)a, 0xFF, (__m512d)a, (__m512d)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vec<double>)_mm256_max_pd((__m256d)a, (__m256d)b);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE2__)
  return (vec<double>)_mm_max_pd((__m128d)a, (__m128d)b);
#else
  return a > b ? a : b;
#endif
}
// The same for min (where a lane is NaN, b's lane wins).
inline vfloat vmin_plain(vfloat a, vfloat b) {
#if DILATTN_CPU_AVX512
  return (vfloat)_mm512_mask_min_ps((__m512)a, 0xFFFF, (__m512)a, (__m512)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vfloat)_mm256_min_ps((__m256)a, (__m256)b);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE__)
  return (vfloat)_mm_min_ps((__m128)a, (__m128)b);
#else
  return a < b ? a : b;
#endif
}
inline vec<double> vmin_plain(vec<double> a, vec<double> b) {
#if DILATTN_CPU_AVX512
  return (vec<double>)_mm512_mask_min_pd((__m512d)a, 0xFF, (__m512d)a, (__m512d)b);
#elif DILATTN_CPU_VEC_BYTES == 32
  return (vec<double>)_mm256_min_pd((__m256d)a, (__m256d)b);
#elif DILATTN_CPU_VEC_BYTES == 16 && defined(__SSE2__)
  return (vec<double>)_mm_min_pd((__m128d)a, (__m128d)b);
#else
  return a < b ? a : b;
#endif
}

// ---------------------------------------------------------------- lane shuffles
// Lane index lists for __builtin_shufflevector (GCC >= 12, Clang), from a vector's lane count
// n (b's lanes of a two-source shuffle are numbered n .. 2n - 1):
//   swap_lane<h>: each lane i takes lane i ^ h (the two halves of every 2h lanes trade places);
//   zip_lane<n, 0> / zip_lane<n, 1>: the low (high) halves of a and b interleaved, a0 b0 a1 b1 ...
template <int kHalf>
constexpr int swap_lane(int i) { return i ^ kHalf; }
template <int kLanes, int kHigh>
constexpr int zip_lane(int i) { return (i % 2 ? kLanes : 0) + kHigh * kLanes / 2 + i / 2; }
template <class V>
constexpr int lanes_of = static_cast<int>(sizeof(V) / sizeof(std::declval<V>()[0]));

template <int kHalf, class V, int... I>
inline V swap_halves(V v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, swap_lane<kHalf>(I)...);
}
template <int kHalf, class V>
inline V swap_halves(V v) {
  return swap_halves<kHalf>(v, std::make_integer_sequence<int, lanes_of<V>>{});
}
template <int kHigh, class V, int... I>
inline V zip_halves(V a, V b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, zip_lane<lanes_of<V>, kHigh>(I)...);
}
template <int kHigh, class V>
inline V zip_halves(V a, V b) {
  return zip_halves<kHigh>(a, b, std::make_integer_sequence<int, lanes_of<V>>{});
}

// Horizontal reduction of one vector of n lanes by a fixed tree: combine each lane with the lane
// n/2 away, then n/4, ... 1, all in registers. Every lane ends with the result; the order of the
// operations is fixed by the width alone, so results never depend on the thread count.
template <class V, class Op>
inline auto reduce_lanes(V v, Op op) {
  if constexpr (lanes_of<V> >= 16) v = op(v, swap_halves<8>(v));
  if constexpr (lanes_of<V> >= 8) v = op(v, swap_halves<4>(v));
  if constexpr (lanes_of<V> >= 4) v = op(v, swap_halves<2>(v));
  v = op(v, swap_halves<1>(v));
  return v[0];
}
// Max (NaN-keeping, as vmax) and sum of the lanes of one vector. (Function objects, not
// lambdas: a lambda's body would be compiled without this file's target instructions.)
struct MaxOp {
  template <class V>
  V operator()(V a, V b) const { return vmax(a, b); }
};
struct PlainMaxOp {
  template <class V>
  V operator()(V a, V b) const { return vmax_plain(a, b); }
};
struct AddOp {
  template <class V>
  V operator()(V a, V b) const { return a + b; }
};
template <class V>
inline auto hmax(V v) { return reduce_lanes(v, MaxOp{}); }
template <class V>
inline auto hmax_plain(V v) { return reduce_lanes(v, PlainMaxOp{}); }
template <class V>
inline auto hsum(V v) { return reduce_lanes(v, AddOp{}); }

// Transposes the n x n block held in v[0 .. n) (v[i] = row i, n lanes): afterwards v[i] is
// column i. log2(n) rounds of interleaving row i with row i + n/2 (a perfect shuffle of the
// lanes each time), n two-source shuffles per round.
template <class V>
inline void transpose_block(V* v) {
  constexpr int n = lanes_of<V>;
  for (int round = 1; round < n; round *= 2) {
    V out[n];
    for (int i = 0; i < n / 2; ++i) {
      out[2 * i] = zip_halves<0>(v[i], v[i + n / 2]);
      out[2 * i + 1] = zip_halves<1>(v[i], v[i + n / 2]);
    }
    for (int i = 0; i < n; ++i) v[i] = out[i];
  }
}

// ---------------------------------------------------------------- exp2
// 2^x for the online softmax (softmax_rules.h's online_prob, a vector at a time): x clamped to
// [-kMaxExponent, kMaxExponent], rounded to the nearest integer n by adding and subtracting
// 1.5 * 2^kMantissaBits (the sum's low mantissa bits are then n itself, which also gives 2^n's
// exponent bits), 2^(x - n) by a polynomial on [-1/2, 1/2] (constant term exactly 1 so 2^0 = 1
// exactly), times 2^n. Exactly 0 for x < -(kMaxExponent - 1/2) and for -inf (a masked score),
// NaN for NaN (a NaN score's probability stays NaN: both clamps are one max or min
// instruction that passes a NaN in its second operand through), 2^kMaxExponent for
// x >= kMaxExponent (the softmax's x is <= 0; the backward's exponent comes from the caller's
// LSE, so it is clamped too). tests/cpu/test_cpu_exp2.cpp sweeps every instruction set's copy
// over the whole range, for both types.
template <class T>
struct Exp2Constants;
// f32: degree 4, a relative-error minimax fit: at most 2.9e-6 relative for x in [-126, 127],
// far inside SPEC 8's f32 rtol = 1e-4; a fifth degree would buy 1.7e-7 for one more FMA per
// vector in the softmax's hottest loop.
template <>
struct Exp2Constants<float> {
  static constexpr float kMaxExponent = 127.0f;
  static constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  static constexpr int kMantissaBits = 23;
  static constexpr int32_t kBias = 127;
  static constexpr int kDegree = 4;
  static constexpr float kPoly[kDegree + 1] = {9.582851082e-3f, 5.590642244e-2f,
                                                2.402409911e-1f, 6.931241751e-1f, 1.0f};
};
// f64: f64 inputs are computed in f64 (SPEC 12), held to 1e-10 of the reference, so the
// probabilities must be good to f64 rounding, not to f32's: degree 13, the Taylor coefficients
// ln(2)^k / k! of 2^f = e^(f ln 2) (rounded to f64). On |f| <= 1/2 the first term left out,
// (ln(2) / 2)^14 / 14!, is 4e-18 relative, below half an ulp (1.1e-16), so what remains is the
// rounding of the evaluation: 1.6e-16 with FMA, 1.9e-16 without (tests/cpu/test_cpu_exp2.cpp
// holds it to 4e-16, which degree 12 already misses without FMA). A vector polynomial rather
// than std::exp2 per lane: a libm call per score would cost more than the score's products.
template <>
struct Exp2Constants<double> {
  static constexpr double kMaxExponent = 1023.0;
  static constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr int kMantissaBits = 52;
  static constexpr int64_t kBias = 1023;
  static constexpr int kDegree = 13;
  static constexpr double kPoly[kDegree + 1] = {
      1.3691488853904128e-12, 2.5678435993488206e-11, 4.4455382718708116e-10,
      7.054911620801123e-09,  1.01780860092397e-07,   1.321548679014431e-06,
      1.5252733804059841e-05, 0.0001540353039338161,  0.0013333558146428443,
      0.009618129107628477,   0.05550410866482158,    0.24022650695910072,
      0.6931471805599453,     1.0};
};

template <class V>
inline V exp2v(V x) {
  typedef std::remove_cv_t<std::remove_reference_t<decltype(x[0])>> T;
  typedef Exp2Constants<T> C;
  x = vmax_plain(splat(-C::kMaxExponent), x);
  x = vmin_plain(splat(C::kMaxExponent), x);
  const V round = splat(C::kRound);
  const V t = x + round;        // low mantissa bits: 2^(kMantissaBits - 1) + n, n = round(x)
  const V f = x - (t - round);  // x - n, exact, in [-1/2, 1/2]
  V p = splat(C::kPoly[0]);
  for (int k = 1; k <= C::kDegree; ++k) p = madd(p, f, splat(C::kPoly[k]));
  // (2^(kMantissaBits - 1) + n) << kMantissaBits leaves n << kMantissaBits (the high bit falls
  // off); plus the bias: n + kBias in [0, 2 kBias], and a biased exponent of 0 makes 2^n
  // exactly +0, so x < -(kMaxExponent - 1/2) (n = -kBias) gives 0.
  typedef ivec<T> I;
  const I two_n = ((I)t << C::kMantissaBits) + (C::kBias << C::kMantissaBits);
  return p * (V)two_n;
}

// ---------------------------------------------------------------- S = pre * Q Kt
// Work a score product runs between the steps of each register block (cpu_dropout.h's TileDraws
// draws the block's rows there): block(r, n, steps, step) runs step(s) for every s < steps and
// may do its own work for rows r..r+n-1 in between. NoBlockWork does none.
struct NoBlockWork {
  template <class Step>
  __attribute__((always_inline)) inline void block(int64_t, int, int64_t steps,
                                                   const Step& step) const {
    for (int64_t s = 0; s < steps; ++s) step(s);
  }
};

// kMR_ rows of S (all kBC columns), rows r.. of the tile: the K vector of a column block is
// loaded once per d and multiplied by kMR_ broadcast Q values. The first column block's steps
// run through work.block.
template <int kMR_, class T, class Work>
inline void scores_rows(const T* Q, int64_t ldq, const T* Kt, int64_t D, T pre, T* S, Work& work,
                        int64_t r0) {
  constexpr int kCols = kNV * kW<T>;
  for (int cb = 0; cb < kBC; cb += kCols) {
    vec<T> acc[kMR_][kNV];
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) acc[r][n] = vec<T>{};
    const auto step = [&](int64_t d) __attribute__((always_inline)) {
      vec<T> k[kNV];
      for (int n = 0; n < kNV; ++n) k[n] = in_register(vload(Kt + d * kBC + cb + n * kW<T>));
      for (int r = 0; r < kMR_; ++r) {
        const vec<T> q = splat(Q[r * ldq + d]);
        for (int n = 0; n < kNV; ++n) acc[r][n] = madd(q, k[n], acc[r][n]);
      }
    };
    if (cb == 0)
      work.block(r0, kMR_, D, step);
    else
      for (int64_t d = 0; d < D; ++d) step(d);
    for (int r = 0; r < kMR_; ++r)
      for (int n = 0; n < kNV; ++n) vstore(S + r * kBC + cb + n * kW<T>, acc[r][n] * pre);
  }
}

// S[r][c] = pre * <Q_r, Kt[:, c]> for r < rows, every c < kBC (pre: softmax_rules.h's
// score_scale; 1 for dO V^T), with work's share run between the steps (NoBlockWork).
template <class T, class Work>
inline void scores_tile(const T* Q, int64_t ldq, int64_t rows, const T* Kt, int64_t D, T pre,
                        T* S, Work& work) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR)
    scores_rows<kMR>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC, work, r);
  switch (rows - r) {
    case 3: scores_rows<3>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC, work, r); break;
    case 2: scores_rows<2>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC, work, r); break;
    case 1: scores_rows<1>(Q + r * ldq, ldq, Kt, D, pre, S + r * kBC, work, r); break;
    default: break;
  }
}

template <class T>
inline void scores_tile(const T* Q, int64_t ldq, int64_t rows, const T* Kt, int64_t D, T pre,
                        T* S) {
  NoBlockWork none;
  scores_tile(Q, ldq, rows, Kt, D, pre, S, none);
}

// S[r][c] = pre * <Q_r, K_c> for r < rows, c < count, with K_c a key row of D values read in
// place (D a multiple of kW<T>): one dot product per pair, reduced across D by reduce_lanes. For a
// few query rows (decode, Nq small) this is cheaper than transposing the key tile for
// scores_tile, a cost the few rows could not amortise. Columns from count on are not written.
template <class T>
inline void scores_from_rows(const T* Q, int64_t ldq, int64_t rows, const T* const* K,
                             int64_t count, int64_t D, T pre, T* S) {
  for (int64_t c = 0; c < count; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      vec<T> acc = vec<T>{};
      for (int64_t d = 0; d < D; d += kW<T>) acc = madd(vload(Q + r * ldq + d), vload(K[c] + d), acc);
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
template <int kMR_, int kNV_, class T>
inline void accumulate_block(T* O, int64_t ldo, const T* A, int64_t lda, int64_t a_step,
                             int64_t count, const T* Bm, int64_t ldb) {
  // Nothing to add without keys. Returning first also keeps the accumulators in registers
  // alone: with the zero-trip path joining the loop's exit, GCC 12 kept a second copy of them
  // on the stack, copied in and out on every call (docs/decisions.md, "Work items").
  if (count <= 0) return;
  vec<T> acc[kMR_][kNV_];
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) acc[r][n] = vload(O + r * ldo + n * kW<T>);
  for (int64_t c = 0; c < count; ++c) {
    vec<T> b[kNV_];
    for (int n = 0; n < kNV_; ++n) b[n] = in_register(vload(Bm + c * ldb + n * kW<T>));
    for (int r = 0; r < kMR_; ++r) {
      const vec<T> a = splat(A[r * lda + c * a_step]);
      for (int n = 0; n < kNV_; ++n) acc[r][n] = madd(a, b[n], acc[r][n]);
    }
  }
  for (int r = 0; r < kMR_; ++r)
    for (int n = 0; n < kNV_; ++n) vstore(O + r * ldo + n * kW<T>, acc[r][n]);
}

template <int kMR_, class T>
inline void accumulate_rows(T* O, int64_t ldo, const T* A, int64_t lda, int64_t a_step,
                            int64_t count, const T* Bm, int64_t ldb, int64_t width) {
  int64_t d = 0;
  for (; d + kNV * kW<T> <= width; d += kNV * kW<T>)
    accumulate_block<kMR_, kNV>(O + d, ldo, A, lda, a_step, count, Bm + d, ldb);
  for (; d < width; d += kW<T>)
    accumulate_block<kMR_, 1>(O + d, ldo, A, lda, a_step, count, Bm + d, ldb);
}

// O[r][0:width) += sum_{c < count} A(r, c) * Bm[c][0:width) for r < rows; width is a multiple
// of kPad. Rows of O are ldo apart (a dilated branch's rows are r rows apart in the block).
template <class T>
inline void accumulate_tile(T* O, int64_t ldo, int64_t rows, const T* A, int64_t lda,
                            int64_t a_step, int64_t count, const T* Bm, int64_t ldb,
                            int64_t width) {
  int64_t r = 0;
  for (; r + kMR <= rows; r += kMR)
    accumulate_rows<kMR>(O + r * ldo, ldo, A + r * lda, lda, a_step, count, Bm, ldb, width);
  const T* a = A + r * lda;
  switch (rows - r) {
    case 3: accumulate_rows<3>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    case 2: accumulate_rows<2>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    case 1: accumulate_rows<1>(O + r * ldo, ldo, a, lda, a_step, count, Bm, ldb, width); break;
    default: break;
  }
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_MICROKERNEL_H
