// test_emu_mma.cpp - mma.sync m16n8k16 (f16, bf16) and m16n8k8 (tf32) and cvt.rna.tf32.f32
// (cuda/mma_sync.cuh) in the emulator: the PTX ISA fragment layouts (emu/simt_mma.h).
//
// Properties: (1) a kernel that builds its fragments from row-major A (16x16), B (16x8) and C
// by the documented layout gets D = A B + C for random inputs: within 1e-5 relative of the f64
// product (16 f32 products of operands below 2 in size), and the same bits in three thread
// orders; (2) a kernel with a wrong layout assumption (a[1] and a[2] swapped: rows g + 8 and
// columns 2t + 8 confused, a common mistake) gets wrong numbers; (3) called by 16 lanes (a
// partial warp) the launch fails.
// TF32 (check_tf32): (1) to (3) the same for m16n8k8 with TF32-exact operands (a0..a3 =
// A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; the wrong assumption swaps a[1] and a[2]); (4)
// raw f32 operands (low mantissa bits set) give exactly the product of their truncations
// (the tensor core reads 19 bits) and miss the f32 product by more than 1e-4 relative: an f32
// not split into TF32 parts carries TF32's error here as on the GPU; (5) cvt_rna_tf32 rounds
// to nearest with ties away from zero, keeps inf, gives NaN for NaN and inf past TF32's range.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "mma_sync.cuh"

namespace {

using dilattn::cuda::cvt_rna_tf32;
using dilattn::cuda::load_pair;
using dilattn::cuda::mma_m16n8k8_tf32;
using dilattn::cuda::mma_m16n8k16;
using dilattn::cuda::pack2;

// A: 16x16 row-major, B: 16x8 row-major (k x n), C and D: 16x8 row-major f32. swap_a12: the
// wrong assumption of property (2).
template <class T>
__global__ void mma_kernel(const T* A, const T* B, const float* C, float* D, int swap_a12) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t a[4], b[2];
  a[0] = load_pair(A + g * 16 + 2 * t);
  a[1] = load_pair(A + (g + 8) * 16 + 2 * t);
  a[2] = load_pair(A + g * 16 + 2 * t + 8);
  a[3] = load_pair(A + (g + 8) * 16 + 2 * t + 8);
  if (swap_a12) {
    const uint32_t x = a[1];
    a[1] = a[2];
    a[2] = x;
  }
  b[0] = pack2(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  b[1] = pack2(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                C[(g + 8) * 8 + 2 * t + 1]};
  mma_m16n8k16<T>(c, a, b, c);  // d = c: accumulate in place, as the kernels do
  D[g * 8 + 2 * t] = c[0];
  D[g * 8 + 2 * t + 1] = c[1];
  D[(g + 8) * 8 + 2 * t] = c[2];
  D[(g + 8) * 8 + 2 * t + 1] = c[3];
}

float to_f(__half x) { return __half2float(x); }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> T from_f(float x);
template <> __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <class T>
void check_dtype(const char* name, uint64_t seed) {
  emu_test::DeviceVector<T> A(256), B(128);
  emu_test::DeviceVector<float> C(128), D(128);
  uint64_t state = seed;
  auto uniform = [&] {  // [-2, 2)
    return static_cast<float>(simt::detail::splitmix64(state) >> 11) * 0x1p-53f * 4.0f - 2.0f;
  };
  for (T& x : A) x = from_f<T>(uniform());
  for (T& x : B) x = from_f<T>(uniform());
  for (float& x : C) x = uniform();

  // (1) the documented layout: D = A B + C.
  bool agree = false;
  const std::vector<float> d = emu_test::from_bytes<float>(emu_test::run_in_orders(
      [&] {
        DILATTN_LAUNCH(mma_kernel<T>, dim3(1), dim3(32), 0, nullptr)(A.data(), B.data(),
                                                                     C.data(), D.data(), 0);
        CHECK_MSG(emu_test::launched_ok(name), "%s launch", name);
        return emu_test::as_bytes(D);
      },
      &agree));
  CHECK_MSG(agree, "%s: thread orders disagree", name);
  int64_t wrong = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double exact = C[i * 8 + j];
      for (int k = 0; k < 16; ++k)
        exact += static_cast<double>(to_f(A[i * 16 + k])) * to_f(B[k * 8 + j]);
      const float got = d[i * 8 + j];
      CHECK_MSG(std::fabs(got - exact) <= 1e-5 * (1.0 + std::fabs(exact)),
                "%s (1) D[%d][%d] = %.9g, f64 product %.9g", name, i, j, double(got), exact);
    }

  // (2) a[1] and a[2] swapped: many elements wrong.
  DILATTN_LAUNCH(mma_kernel<T>, dim3(1), dim3(32), 0, nullptr)(A.data(), B.data(), C.data(),
                                                               D.data(), 1);
  CHECK_MSG(emu_test::launched_ok(name), "%s (2) launch", name);
  for (int i = 0; i < 128; ++i) wrong += std::fabs(D[i] - d[i]) > 1e-3f ? 1 : 0;
  CHECK_MSG(wrong >= 64, "%s (2): the swapped layout changed only %lld of 128 elements", name,
            static_cast<long long>(wrong));

  // (3) half a warp cannot run the instruction.
  DILATTN_LAUNCH(mma_kernel<T>, dim3(1), dim3(16), 0, nullptr)(A.data(), B.data(), C.data(),
                                                               D.data(), 0);
  const cudaError_t e = cudaGetLastError();
  CHECK_MSG(e == cudaErrorLaunchFailure &&
                std::string(simt::last_error_message()).find("needs all 32 lanes") !=
                    std::string::npos,
            "%s (3): 16 lanes gave %s (%s)", name, cudaGetErrorName(e),
            simt::last_error_message());
}

// A: 16x8 row-major, B: 8x8 row-major (k x n), C and D: 16x8 row-major, f32 bit patterns
// passed to the tensor core as they are.
__global__ void mma_tf32_kernel(const float* A, const float* B, const float* C, float* D,
                                int swap_a12) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t a[4] = {__float_as_uint(A[g * 8 + t]), __float_as_uint(A[(g + 8) * 8 + t]),
                   __float_as_uint(A[g * 8 + t + 4]), __float_as_uint(A[(g + 8) * 8 + t + 4])};
  if (swap_a12) {
    const uint32_t x = a[1];
    a[1] = a[2];
    a[2] = x;
  }
  const uint32_t b[2] = {__float_as_uint(B[t * 8 + g]), __float_as_uint(B[(t + 4) * 8 + g])};
  float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                C[(g + 8) * 8 + 2 * t + 1]};
  mma_m16n8k8_tf32(c, a, b, c);
  D[g * 8 + 2 * t] = c[0];
  D[g * 8 + 2 * t + 1] = c[1];
  D[(g + 8) * 8 + 2 * t] = c[2];
  D[(g + 8) * 8 + 2 * t + 1] = c[3];
}

float bits_to_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

void check_tf32() {
  emu_test::DeviceVector<float> A(128), B(64), C(128), D(128);
  uint64_t state = 13;
  auto uniform = [&] {  // [-2, 2), all 23 mantissa bits random
    return static_cast<float>(simt::detail::splitmix64(state) >> 11) * 0x1p-53f * 4.0f - 2.0f;
  };
  std::vector<float> raw_a(128), raw_b(64);
  for (int i = 0; i < 128; ++i) raw_a[i] = uniform();
  for (int i = 0; i < 64; ++i) raw_b[i] = uniform();
  for (float& x : C) x = uniform();
  auto tf32 = [](float x) { return bits_to_float(cvt_rna_tf32(x)); };
  auto launch = [&](int swap, unsigned lanes) {
    DILATTN_LAUNCH(mma_tf32_kernel, dim3(1), dim3(lanes), 0, nullptr)(A.data(), B.data(),
                                                                      C.data(), D.data(), swap);
  };

  // (1) TF32-exact operands by the documented layout: D = A B + C.
  for (int i = 0; i < 128; ++i) A[i] = tf32(raw_a[i]);
  for (int i = 0; i < 64; ++i) B[i] = tf32(raw_b[i]);
  bool agree = false;
  const std::vector<float> d = emu_test::from_bytes<float>(emu_test::run_in_orders(
      [&] {
        launch(0, 32);
        CHECK_MSG(emu_test::launched_ok("tf32"), "tf32 launch");
        return emu_test::as_bytes(D);
      },
      &agree));
  CHECK_MSG(agree, "tf32: thread orders disagree");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double exact = C[i * 8 + j];
      for (int k = 0; k < 8; ++k) exact += static_cast<double>(A[i * 8 + k]) * B[k * 8 + j];
      CHECK_MSG(std::fabs(d[i * 8 + j] - exact) <= 1e-6 * (1.0 + std::fabs(exact)),
                "tf32 (1) D[%d][%d] = %.9g, f64 product %.9g", i, j, double(d[i * 8 + j]), exact);
    }

  // (2) a[1] and a[2] swapped: many elements wrong.
  launch(1, 32);
  CHECK_MSG(emu_test::launched_ok("tf32"), "tf32 (2) launch");
  int64_t wrong = 0;
  for (int i = 0; i < 128; ++i) wrong += std::fabs(D[i] - d[i]) > 1e-3f ? 1 : 0;
  CHECK_MSG(wrong >= 64, "tf32 (2): the swapped layout changed only %lld of 128 elements",
            static_cast<long long>(wrong));

  // (3) half a warp cannot run the instruction.
  launch(0, 16);
  const cudaError_t e = cudaGetLastError();
  CHECK_MSG(e == cudaErrorLaunchFailure &&
                std::string(simt::last_error_message()).find("needs all 32 lanes") !=
                    std::string::npos,
            "tf32 (3): 16 lanes gave %s (%s)", cudaGetErrorName(e), simt::last_error_message());

  // (4) raw f32 operands: the truncated product, not the f32 one.
  for (int i = 0; i < 128; ++i) A[i] = raw_a[i];
  for (int i = 0; i < 64; ++i) B[i] = raw_b[i];
  launch(0, 32);
  CHECK_MSG(emu_test::launched_ok("tf32"), "tf32 (4) launch");
  auto truncated = [](float x) { return bits_to_float(float_bits(x) & 0xffffe000u); };
  int64_t far_from_f32 = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = C[i * 8 + j];  // f32 sums in k order, as the emulator documents
      double f32_product = C[i * 8 + j];
      for (int k = 0; k < 8; ++k) {
        want += truncated(A[i * 8 + k]) * truncated(B[k * 8 + j]);
        f32_product += static_cast<double>(A[i * 8 + k]) * B[k * 8 + j];
      }
      CHECK_MSG(D[i * 8 + j] == want, "tf32 (4) D[%d][%d] = %.9g, truncated operands give %.9g",
                i, j, double(D[i * 8 + j]), double(want));
      far_from_f32 += std::fabs(D[i * 8 + j] - f32_product) > 1e-4 * (1.0 + std::fabs(f32_product));
    }
  CHECK_MSG(far_from_f32 >= 32, "tf32 (4): only %lld of 128 elements differ from the f32 product",
            static_cast<long long>(far_from_f32));

  // (5) cvt.rna.tf32.f32.
  const float half_ulp = 0x1p-11f;  // TF32 keeps 10 mantissa bits: its ulp at 1 is 2^-10
  CHECK(cvt_rna_tf32(1.0f + half_ulp) == float_bits(1.0f + 2 * half_ulp));  // tie: away
  CHECK(cvt_rna_tf32(-(1.0f + half_ulp)) == float_bits(-(1.0f + 2 * half_ulp)));
  CHECK(cvt_rna_tf32(1.0f + half_ulp - 0x1p-23f) == float_bits(1.0f));
  CHECK(cvt_rna_tf32(1.0f + 3 * half_ulp) == float_bits(1.0f + 4 * half_ulp));  // tie: away
  CHECK(cvt_rna_tf32(INFINITY) == float_bits(INFINITY));
  CHECK(cvt_rna_tf32(-INFINITY) == float_bits(-INFINITY));
  CHECK(std::isnan(bits_to_float(cvt_rna_tf32(NAN))));
  CHECK(cvt_rna_tf32(FLT_MAX) == float_bits(INFINITY));
  CHECK((cvt_rna_tf32(raw_a[0]) & 0x1fffu) == 0);
}

}  // namespace

int main() {
  check_dtype<__half>("f16", 11);
  check_dtype<__nv_bfloat16>("bf16", 12);
  check_tf32();
  return harness::finish("emu_mma");
}
