// cpu_tile_io.h - moving rows between caller tensors (any dtype, any strides) and f32 tiles.
//
// SPEC 1: inputs are converted per tile (f16, bf16, f64 -> f32) while they are gathered, so the
// backend never copies a whole tensor; a dilated branch's rows are gathered with a stride (the
// KeyProgression step, index_rules.h), which is how dilation costs no copy. Outputs are rounded
// once to their dtype. f32 rows with unit stride and D a multiple of the vector width are
// transposed a vector at a time (gather_columns_f32) or read in place (row_pointers).
// Checked through tests/cpu/ (every dtype, strided outputs).
#ifndef DILATTN_CPU_TILE_IO_H
#define DILATTN_CPU_TILE_IO_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_tile_loop.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

// Element d of a row of dtype t starting at `base`, elements `stride` apart, as f32.
template <dilattn_dtype kType>
inline float load_f32(const void* data, int64_t index) {
  if constexpr (kType == DILATTN_F32) return static_cast<const float*>(data)[index];
  if constexpr (kType == DILATTN_F64)
    return static_cast<float>(static_cast<const double*>(data)[index]);
  if constexpr (kType == DILATTN_F16) return half_to_float(static_cast<const uint16_t*>(data)[index]);
  if constexpr (kType == DILATTN_BF16) return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
  return 0;
}

// dst[t * ld_row + d * ld_col] = element d of row progression_at(rows, first + t) of head h,
// batch b, for t < count and d < D. Rows past count (up to pad_rows) and elements past D (up to
// pad_cols) are zero, so kernels may read whole padded tiles.
template <dilattn_dtype kType>
inline void gather_typed(const dilattn_tensor& t, int64_t b, int64_t h,
                         const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                         float* dst, int64_t ld_row, int64_t ld_col, int64_t pad_rows,
                         int64_t pad_cols) {
  const int64_t sd = t.strides[3];
  for (int64_t r = 0; r < count; ++r) {
    const int64_t base = element_offset(t, b, progression_at(rows, first + r), h, 0);
    float* out = dst + r * ld_row;
    if (kType == DILATTN_F32 && sd == 1 && ld_col == 1)  // the common case: a plain copy
      std::memcpy(out, static_cast<const float*>(t.data) + base, sizeof(float) * D);
    else
      for (int64_t d = 0; d < D; ++d) out[d * ld_col] = load_f32<kType>(t.data, base + d * sd);
    for (int64_t d = D; d < pad_cols; ++d) out[d * ld_col] = 0;
  }
  for (int64_t r = count; r < pad_rows; ++r)
    for (int64_t d = 0; d < pad_cols; ++d) dst[r * ld_row + d * ld_col] = 0;
}

inline void gather(const dilattn_tensor& t, int64_t b, int64_t h, const KeyProgression& rows,
                   int64_t first, int64_t count, int64_t D, float* dst, int64_t ld_row,
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
inline void gather_rows(const dilattn_tensor& t, int64_t b, int64_t h,
                        const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                        float* dst, int64_t ld) {
  gather(t, b, h, rows, first, count, D, dst, ld, 1, count, ld);
}

// Can rows of t be read in place as D contiguous f32 (gather_columns_f32, scores_from_rows)?
inline bool rows_are_f32_vectors(const dilattn_tensor& t, int64_t D) {
  return t.dtype == DILATTN_F32 && t.strides[3] == 1 && D % kW == 0;
}

// Pointers to rows first .. first + count - 1 of the progression (head h, batch b), for
// reading in place when rows_are_f32_vectors.
inline void row_pointers(const dilattn_tensor& t, int64_t b, int64_t h,
                         const KeyProgression& rows, int64_t first, int64_t count,
                         const float** out) {
  for (int64_t c = 0; c < count; ++c)
    out[c] = static_cast<const float*>(t.data) +
             element_offset(t, b, progression_at(rows, first + c), h, 0);
}

// f32 rows with unit element stride and D a multiple of kW, as a transposed tile: kW rows at
// a time are loaded as vectors and transposed in registers (transpose_block), so every load
// and store is a whole vector. Columns count .. kBC - 1 are zero, as in gather().
inline void gather_columns_f32(const dilattn_tensor& t, int64_t b, int64_t h,
                               const KeyProgression& rows, int64_t first, int64_t count,
                               int64_t D, float* dst) {
  const float* src[kBC];
  row_pointers(t, b, h, rows, first, count, src);
  for (int64_t c0 = 0; c0 < kBC; c0 += kW)
    for (int64_t d0 = 0; d0 < D; d0 += kW) {
      vfloat v[kW];
      for (int i = 0; i < kW; ++i) v[i] = c0 + i < count ? vload(src[c0 + i] + d0) : vfloat{};
      transpose_block(v);
      for (int i = 0; i < kW; ++i) vstore(dst + (d0 + i) * kBC + c0, v[i]);
    }
}

// Rows as a transposed tile [D][kBC]: row t becomes column t (K or V as the right side of S).
inline void gather_columns(const dilattn_tensor& t, int64_t b, int64_t h,
                           const KeyProgression& rows, int64_t first, int64_t count, int64_t D,
                           float* dst) {
  if (rows_are_f32_vectors(t, D))
    return gather_columns_f32(t, b, h, rows, first, count, D, dst);
  gather(t, b, h, rows, first, count, D, dst, 1, kBC, kBC, D);
}

// Row i of head h, batch b, element d = mul * src[d], rounded once to the tensor's dtype.
inline void store_row(const dilattn_tensor& t, int64_t b, int64_t i, int64_t h, int64_t D,
                      const float* src, float mul) {
  const int64_t base = element_offset(t, b, i, h, 0), sd = t.strides[3];
  if (t.dtype == DILATTN_F32) {
    float* out = static_cast<float*>(t.data) + base;
    for (int64_t d = 0; d < D; ++d) out[d * sd] = src[d] * mul;
    return;
  }
  for (int64_t d = 0; d < D; ++d) store_element(t.data, t.dtype, base + d * sd, src[d] * mul);
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_TILE_IO_H
