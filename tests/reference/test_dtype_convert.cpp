// test_dtype_convert.cpp - lib/internal/dtype_convert.h against the CUDA toolkit's own host conversions
// (cuda_fp16.h, cuda_bf16.h), bit for bit (SPEC 1: round to nearest even):
//   f16 -> f32 and bf16 -> f32 for all 65536 bit patterns;
//   f32 -> f16 and f32 -> bf16 for every 97th f32 bit pattern (~44 million, every exponent,
//   sign, subnormal, inf and NaN range) plus the ties and range edges listed below.
// NaN only has to stay NaN (payloads may differ). Built only when the CUDA headers are found.
#include <cstdio>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/check.h"
#include "dtype_convert.h"

namespace {

bool same_float(float a, float b) {
  return (a != a && b != b) || dilattn::float_bits(a) == dilattn::float_bits(b);
}
bool same_half_bits(uint16_t a, uint16_t b, bool nan_a, bool nan_b) {
  return (nan_a && nan_b) || a == b;
}
bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

uint16_t cuda_half_bits(float f) {
  __half_raw r = __half_raw(__float2half_rn(f));
  return r.x;
}
uint16_t cuda_bf16_bits(float f) {
  __nv_bfloat16_raw r = __nv_bfloat16_raw(__float2bfloat16_rn(f));
  return r.x;
}

void check_float_to_narrow(uint32_t bits) {
  const float f = dilattn::bits_float(bits);
  const uint16_t ours_h = dilattn::float_to_half(f), cuda_h = cuda_half_bits(f);
  CHECK_MSG(same_half_bits(ours_h, cuda_h, half_is_nan(ours_h), half_is_nan(cuda_h)),
            "float_to_half(0x%08x) = 0x%04x, cuda 0x%04x", bits, ours_h, cuda_h);
  const uint16_t ours_b = dilattn::float_to_bf16(f), cuda_b = cuda_bf16_bits(f);
  CHECK_MSG(same_half_bits(ours_b, cuda_b, bf16_is_nan(ours_b), bf16_is_nan(cuda_b)),
            "float_to_bf16(0x%08x) = 0x%04x, cuda 0x%04x", bits, ours_b, cuda_b);
}

}  // namespace

int main() {
  for (uint32_t h = 0; h < 65536; ++h) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(h);
    const float want_h = __half2float(__half(hr));
    CHECK_MSG(same_float(dilattn::half_to_float(static_cast<uint16_t>(h)), want_h),
              "half_to_float(0x%04x)", h);
    __nv_bfloat16_raw raw_bf16;
    raw_bf16.x = static_cast<unsigned short>(h);
    const float want_b = __bfloat162float(__nv_bfloat16(raw_bf16));
    CHECK_MSG(same_float(dilattn::bf16_to_float(static_cast<uint16_t>(h)), want_b),
              "bf16_to_float(0x%04x)", h);
  }
  // Edges: ties to even in f16 normal (0x3f801000: 1 + 2^-11 exactly half an f16 ulp) and
  // subnormal ranges, the largest finite f16 and the first value rounding to inf (65520),
  // 2^-25 (rounds to 0, a tie), 2^-24 * 1.5 (a subnormal tie), bf16 ties (0x3f808000).
  const uint32_t edges[] = {0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
                            0x33000000u, 0x33000001u, 0x33c00000u, 0x38800000u, 0x387fe000u,
                            0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00001u,
                            0x80000000u, 0xb3c00000u, 0xff800000u, 0x00000001u};
  for (uint32_t bits : edges) check_float_to_narrow(bits);
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 97) check_float_to_narrow(static_cast<uint32_t>(bits));
  return harness::finish("dtype_convert_matches_cuda_headers");
}
