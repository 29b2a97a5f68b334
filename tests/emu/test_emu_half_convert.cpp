// test_emu_half_convert.cpp - __half/__nv_bfloat16 and the fast-math intrinsics inside emulated kernels.
//
// Property: in a kernel, __float2half/__half2float, __float2bfloat16/__bfloat162float and the
// __half2/__nv_bfloat162 pairs round exactly as the library's portable converters
// (lib/internal/dtype_convert.h, round to nearest even) over 4096 values including ties, subnormals,
// infinities and overflow; __float2int_rn rounds half to even; __int_as_float/__float_as_int
// round-trip bits; __expf/__logf/exp2f/__fdividef/rsqrtf/__frcp_rn/__fmaf_rn/fmaxf/fminf/__ldg
// equal the host's libm results bitwise. Ascending and descending orders agree.
#include <cmath>
#include <cstdint>
#include <vector>

#include "dtype_convert.h"
#include "emu_test_util.h"

namespace {

__global__ void convert_kernel(const float* in, uint16_t* h, uint16_t* bf, float* back, int* ints,
                               float* math, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const float x = __ldg(in + i);
  const __half hx = __float2half(x);
  const __nv_bfloat16 bx = __float2bfloat16(x);
  uint16_t hb, bb;
  std::memcpy(&hb, &hx, 2);
  std::memcpy(&bb, &bx, 2);
  h[i] = hb;
  bf[i] = bb;
  const __half2 h2 = __floats2half2_rn(x, -x);
  const __nv_bfloat162 b2 = __floats2bfloat162_rn(x, -x);
  back[4 * i + 0] = __half2float(hx) + __high2float(h2);  // x + (-x) in f16: 0 unless inf
  back[4 * i + 1] = __bfloat162float(bx);
  back[4 * i + 2] = __low2float(h2);
  back[4 * i + 3] = __low2float(b2);
  ints[2 * i] = __float2int_rn(std::fmin(std::fmax(x, -1e6f), 1e6f));
  ints[2 * i + 1] = __float_as_int(__int_as_float(i * 7919)) - i * 7919;
  const float y = std::fabs(x) + 0.5f;
  math[8 * i + 0] = __expf(std::fmin(x, 80.0f));
  math[8 * i + 1] = __logf(y);
  math[8 * i + 2] = exp2f(std::fmin(x, 100.0f));
  math[8 * i + 3] = __fdividef(x, y);
  math[8 * i + 4] = rsqrtf(y);
  math[8 * i + 5] = __frcp_rn(y);
  math[8 * i + 6] = __fmaf_rn(x, y, 1.0f);
  math[8 * i + 7] = fmaxf(x, 0.0f) - fminf(x, 0.0f);
}

}  // namespace

int main() {
  std::vector<float> in;
  for (int i = 0; i < 1024; ++i) in.push_back(static_cast<float>(i - 512) * 0.37f);
  for (int i = 0; i < 1024; ++i)
    in.push_back(std::ldexp(1.0f + static_cast<float>(i) / 1024.0f, i % 40 - 30));
  for (int i = 0; i < 1024; ++i)
    in.push_back(dilattn::bits_float(0x33000000u + 0x1000u * static_cast<uint32_t>(i)));
  for (int i = 0; i < 1021; ++i)
    in.push_back(1.0f + static_cast<float>(i) * (1.0f / 2048.0f));  // f16 ties
  in.push_back(INFINITY);
  in.push_back(-INFINITY);
  in.push_back(70000.0f);  // overflows f16 to inf
  const int n = static_cast<int>(in.size());

  std::vector<uint16_t> h, bf;
  std::vector<float> back, math;
  std::vector<int> ints;
  bool agree = false;
  emu_test::run_in_orders(
      [&] {
        h.assign(n, 0);
        bf.assign(n, 0);
        back.assign(4 * n, 0.0f);
        ints.assign(2 * n, 0);
        math.assign(8 * n, 0.0f);
        DILATTN_LAUNCH(convert_kernel, dim3((n + 127) / 128), dim3(128), 0, nullptr)
        (in.data(), h.data(), bf.data(), back.data(), ints.data(), math.data(), n);
        CHECK_MSG(emu_test::launched_ok("convert_kernel"), "launch");
        std::vector<unsigned char> all = emu_test::as_bytes(h);
        for (auto& v : {emu_test::as_bytes(bf), emu_test::as_bytes(back), emu_test::as_bytes(ints),
                        emu_test::as_bytes(math)}) {
          const size_t at = all.size();
          all.resize(at + v.size());
          std::memcpy(all.data() + at, v.data(), v.size());
        }
        return all;
      },
      &agree);
  CHECK_MSG(agree, "conversions differ between thread orders");

  auto same = [](float a, float b) { return dilattn::float_bits(a) == dilattn::float_bits(b); };
  for (int i = 0; i < n; ++i) {
    const float x = in[i];
    CHECK_MSG(h[i] == dilattn::float_to_half(x), "f16(%g) = %04x, host %04x", double(x), h[i],
              dilattn::float_to_half(x));
    CHECK_MSG(bf[i] == dilattn::float_to_bf16(x), "bf16(%g) = %04x, host %04x", double(x), bf[i],
              dilattn::float_to_bf16(x));
    const float hx = dilattn::half_to_float(dilattn::float_to_half(x));
    CHECK_MSG(same(back[4 * i], std::isinf(hx) ? NAN : hx + -hx) ||
                  (std::isinf(hx) && std::isnan(back[4 * i])),
              "half pair %d", i);
    CHECK_MSG(same(back[4 * i + 1], dilattn::bf16_to_float(dilattn::float_to_bf16(x))),
              "bf16 back %d", i);
    CHECK_MSG(same(back[4 * i + 2], hx), "__half2 low %d", i);
    CHECK_MSG(same(back[4 * i + 3], dilattn::bf16_to_float(dilattn::float_to_bf16(x))),
              "bf162 low %d", i);
    const float clamped = std::fmin(std::fmax(x, -1e6f), 1e6f);
    CHECK_MSG(ints[2 * i] == static_cast<int>(std::nearbyint(clamped)), "__float2int_rn(%g) = %d",
              double(clamped), ints[2 * i]);
    CHECK_MSG(ints[2 * i + 1] == 0, "bit round trip %d", i);
    const float y = std::fabs(x) + 0.5f;
    const float want[8] = {std::exp(std::fmin(x, 80.0f)),
                           std::log(y),
                           std::exp2(std::fmin(x, 100.0f)),
                           x / y,
                           1.0f / std::sqrt(y),
                           1.0f / y,
                           std::fma(x, y, 1.0f),
                           std::fmax(x, 0.0f) - std::fmin(x, 0.0f)};
    for (int k = 0; k < 8; ++k)
      CHECK_MSG(
          same(math[8 * i + k], want[k]) || (std::isnan(math[8 * i + k]) && std::isnan(want[k])),
          "math %d of x=%g: %g vs %g", k, double(x), double(math[8 * i + k]), double(want[k]));
  }
  CHECK_MSG(__float2int_rn(2.5f) == 2 && __float2int_rn(3.5f) == 4 && __float2int_rn(-2.5f) == -2,
            "__float2int_rn ties are not to even");
  return harness::finish("emu_half_convert");
}
