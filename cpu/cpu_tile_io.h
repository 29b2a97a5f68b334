// cpu_tile_io.h - moving rows between caller tensors (any dtype, any strides) and tiles of the
// compute type T.
//
// SPEC 1: inputs are converted per tile while they are gathered (f16, bf16 -> f32; f64 inputs
// are computed in f64, T = double, SPEC 12, and read as they are), so the backend never copies a
// whole tensor; a dilated branch's rows are gathered with a stride (the KeyProgression step,
// index_rules.h), which is how dilation costs no copy. Outputs are rounded once to their dtype.
// Rows of T itself with unit stride and D a multiple of the vector width are transposed a
// vector at a time (gather_columns_vectors) or read in place (row_pointers). bf16 inputs on a
// target with pair products are not widened: cpu_pair_tiles.h gathers them as bf16.
// Checked through tests/cpu/ (every dtype, strided outputs).
#ifndef DILATTN_CPU_TILE_IO_H
#define DILATTN_CPU_TILE_IO_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_tile_loop.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// kW<float> values rounded to bf16 and stored: dtype_convert.h's float_to_bf16 lane by lane (to
// nearest even, a NaN made quiet, denormals rounded as any value).
inline void store_bf16(uint16_t* out, vfloat x) {
  typedef uint16_t u16v __attribute__((vector_size(kVecBytes / 2)));
  const u16v bits = __builtin_convertvector(bf16_rounded_high((f32bits)x) >> 16, u16v);
  std::memcpy(out, &bits, sizeof bits);
}

// Element `index` of an array of dtype kType, as T.
template <class T, dilattn_dtype kType>
inline T load_as(const void* data, int64_t index) {
  if constexpr (kType == DILATTN_F32) return static_cast<T>(static_cast<const float*>(data)[index]);
  if constexpr (kType == DILATTN_F64) return static_cast<T>(static_cast<const double*>(data)[index]);
  if constexpr (kType == DILATTN_F16)
    return static_cast<T>(half_to_float(static_cast<const uint16_t*>(data)[index]));
  if constexpr (kType == DILATTN_BF16)
    return static_cast<T>(bf16_to_float(static_cast<const uint16_t*>(data)[index]));
  return 0;
}

// dst[t * ld_row + d * ld_col] = element d of row progression_at(rows, first + t) of head h,
// batch b, for t < count and d < D. Rows past count (up to pad_rows) and elements past D (up to
// pad_cols) are zero, so kernels may read whole padded tiles.
template <dilattn_dtype kType, class T>
inline void gather_typed(const dilattn_tensor& t, int64_t b, int64_t h,
                         const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                         T* dst, int64_t ld_row, int64_t ld_col, int64_t pad_rows,
                         int64_t pad_cols) {
  const int64_t sd = t.strides[3];
  for (int64_t r = 0; r < count; ++r) {
    const int64_t base = element_offset(t, b, progression_at(rows, first + r), h, 0);
    T* out = dst + r * ld_row;
    if (kType == kComputeDtype<T> && sd == 1 && ld_col == 1)  // the common case: a plain copy
      std::memcpy(out, static_cast<const T*>(t.data) + base, sizeof(T) * D);
    else
      for (int64_t d = 0; d < D; ++d) out[d * ld_col] = load_as<T, kType>(t.data, base + d * sd);
    for (int64_t d = D; d < pad_cols; ++d) out[d * ld_col] = 0;
  }
  for (int64_t r = count; r < pad_rows; ++r)
    for (int64_t d = 0; d < pad_cols; ++d) dst[r * ld_row + d * ld_col] = 0;
}

template <class T>
inline void gather(const dilattn_tensor& t, int64_t b, int64_t h, const KeyProgression& rows,
                   int64_t first, int64_t count, int64_t D, T* dst, int64_t ld_row,
                   int64_t ld_col, int64_t pad_rows, int64_t pad_cols) {
  switch (t.dtype) {
    case DILATTN_F32:
      return gather_typed<DILATTN_F32>(t, b, h, rows, first, count, D, dst, ld_row, ld_col, pad_rows, pad_cols);
    case DILATTN_F64:
      return gather_typed<DILATTN_F64>(t, b, h, rows, first, count, D, dst, ld_row, ld_col, pad_rows, pad_cols);
    case DILATTN_F16:
      return gather_typed<DILATTN_F16>(t, b, h, rows, first, count, D, dst, ld_row, ld_col, pad_rows, pad_cols);
    case DILATTN_BF16:
      return gather_typed<DILATTN_BF16>(t, b, h, rows, first, count, D, dst, ld_row, ld_col, pad_rows, pad_cols);
  }
}

// Rows as a row-major tile [count][ld] (Q, dO, O, and K or V as the right side of O += A B).
template <class T>
inline void gather_rows(const dilattn_tensor& t, int64_t b, int64_t h,
                        const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                        T* dst, int64_t ld) {
  gather(t, b, h, rows, first, count, D, dst, ld, 1, count, ld);
}

// Can rows of t be read in place as D contiguous values of T (gather_columns_vectors,
// scores_from_rows)?
template <class T>
inline bool rows_are_vectors(const dilattn_tensor& t, int64_t D) {
  return t.dtype == kComputeDtype<T> && t.strides[3] == 1 && D % kW<T> == 0;
}

// Pointers to rows first .. first + count - 1 of the progression (head h, batch b), for
// reading in place when rows_are_vectors<T>.
template <class T>
inline void row_pointers(const dilattn_tensor& t, int64_t b, int64_t h,
                         const KeyProgression& rows, int64_t first, int64_t count,
                         const T** out) {
  for (int64_t c = 0; c < count; ++c)
    out[c] = static_cast<const T*>(t.data) +
             element_offset(t, b, progression_at(rows, first + c), h, 0);
}

// Rows of T with unit element stride and D a multiple of kW<T>, as a transposed tile: kW<T>
// rows at a time are loaded as vectors and transposed in registers (transpose_block), so every
// load and store is a whole vector. Columns count .. kBC - 1 are zero, as in gather().
template <class T>
inline void gather_columns_vectors(const dilattn_tensor& t, int64_t b, int64_t h,
                                   const KeyProgression& rows, int64_t first, int64_t count,
                                   int64_t D, T* dst) {
  constexpr int n = kW<T>;
  const T* src[kBC];
  row_pointers(t, b, h, rows, first, count, src);
  for (int64_t c0 = 0; c0 < kBC; c0 += n)
    for (int64_t d0 = 0; d0 < D; d0 += n) {
      vec<T> v[n];
      for (int i = 0; i < n; ++i) v[i] = c0 + i < count ? vload(src[c0 + i] + d0) : vec<T>{};
      transpose_block(v);
      for (int i = 0; i < n; ++i) vstore(dst + (d0 + i) * kBC + c0, v[i]);
    }
}

// Rows as a transposed tile [D][kBC]: row t becomes column t (K or V as the right side of S).
template <class T>
inline void gather_columns(const dilattn_tensor& t, int64_t b, int64_t h,
                           const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                           T* dst) {
  if (rows_are_vectors<T>(t, D))
    return gather_columns_vectors(t, b, h, rows, first, count, D, dst);
  gather(t, b, h, rows, first, count, D, dst, 1, kBC, kBC, D);
}

// Row i of head h, batch b, element d = mul * src[d], rounded once to the tensor's dtype.
template <class T>
inline void store_row(const dilattn_tensor& t, int64_t b, int64_t i, int64_t h, int64_t D,
                      const T* src, T mul) {
  const int64_t base = element_offset(t, b, i, h, 0), sd = t.strides[3];
  if (t.dtype == kComputeDtype<T>) {
    T* out = static_cast<T*>(t.data) + base;
    for (int64_t d = 0; d < D; ++d) out[d * sd] = src[d] * mul;
    return;
  }
  if constexpr (std::is_same<T, float>::value) {
    if (t.dtype == DILATTN_BF16 && sd == 1) {  // a vector at a time: the rows of O, dQ, dK, dV
      uint16_t* out = static_cast<uint16_t*>(t.data) + base;
      int64_t d = 0;
      for (; d + kW<float> <= D; d += kW<float>) store_bf16(out + d, vload(src + d) * splat(mul));
      for (; d < D; ++d) out[d] = float_to_bf16(src[d] * mul);
      return;
    }
  }
  for (int64_t d = 0; d < D; ++d) store_element(t.data, t.dtype, base + d * sd, src[d] * mul);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_TILE_IO_H
