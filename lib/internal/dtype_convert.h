// dtype_convert.h - f16 and bf16 to and from f32 on the host, round to nearest even (SPEC 1).
//
// Portable bit arithmetic, so the library needs no CUDA header on the CPU side. Checked
// exhaustively against the CUDA headers' host conversions in tests/reference/test_dtype_convert.cpp.
#ifndef DILATTN_DTYPE_CONVERT_H
#define DILATTN_DTYPE_CONVERT_H

#include <cstdint>
#include <cstring>

#include "dilattn.h"

namespace dilattn {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Count units of 2^-24: (1.m * 2^23) * 2^(e - 150) / 2^-24 = mant >> (126 - e), rounded to
    // nearest even; below 2^-25 everything rounds to zero.
    const uint32_t e = abs >> 23;
    if (e < 102u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t total_shift = 126u - e;  // 14 .. 24
    const uint32_t q = mant >> total_shift;
    const uint32_t rem = mant & ((1u << total_shift) - 1u);
    const uint32_t half = 1u << (total_shift - 1);
    const uint32_t rounded = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias exponent, round the 13 dropped bits to nearest even.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

inline size_t dtype_size(dilattn_dtype t) {
  switch (t) {
    case DILATTN_F32: return 4;
    case DILATTN_F64: return 8;
    case DILATTN_F16:
    case DILATTN_BF16: return 2;
  }
  return 0;
}

inline const char* dtype_name(dilattn_dtype t) {
  switch (t) {
    case DILATTN_F32: return "f32";
    case DILATTN_F64: return "f64";
    case DILATTN_F16: return "f16";
    case DILATTN_BF16: return "bf16";
  }
  return "unknown";
}

// Element `index` (in elements) of an array of dtype t, read as double.
inline double load_element(const void* base, dilattn_dtype t, int64_t index) {
  switch (t) {
    case DILATTN_F32: return static_cast<const float*>(base)[index];
    case DILATTN_F64: return static_cast<const double*>(base)[index];
    case DILATTN_F16: return half_to_float(static_cast<const uint16_t*>(base)[index]);
    case DILATTN_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
  return 0;
}

// Stores x, rounded once to dtype t (f16/bf16 through f32: double rounding is below SPEC 8).
inline void store_element(void* base, dilattn_dtype t, int64_t index, double x) {
  switch (t) {
    case DILATTN_F32: static_cast<float*>(base)[index] = static_cast<float>(x); return;
    case DILATTN_F64: static_cast<double*>(base)[index] = x; return;
    case DILATTN_F16: static_cast<uint16_t*>(base)[index] = float_to_half(static_cast<float>(x)); return;
    case DILATTN_BF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(x)); return;
  }
}

// Offset in elements of [i0, i1, i2, i3] in a view.
inline int64_t element_offset(const dilattn_tensor& t, int64_t i0, int64_t i1, int64_t i2,
                              int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

}  // namespace dilattn

#endif  // DILATTN_DTYPE_CONVERT_H
