// emu_mma.cpp - mma.sync m16n8k16 (cuda/mma_sync.cuh) in the emulator: the PTX ISA fragment
// layout (emu/simt_mma.h), f16 and bf16.
//
// Properties: (1) a kernel that builds its fragments from row-major A (16x16), B (16x8) and C
// by the documented layout gets D = A B + C for random inputs: within 1e-5 relative of the f64
// product (16 f32 products of operands below 2 in size), and the same bits in three thread
// orders; (2) a kernel with a wrong layout assumption (a[1] and a[2] swapped: rows g + 8 and
// columns 2t + 8 confused, a common mistake) gets wrong numbers; (3) called by 16 lanes (a
// partial warp) the launch fails.
#include <cmath>
#include <cstdint>
#include <vector>

#include "emu_test_util.h"
#include "mma_sync.cuh"

namespace {

using dilattn::cuda::load_pair;
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

}  // namespace

int main() {
  check_dtype<__half>("f16", 11);
  check_dtype<__nv_bfloat16>("bf16", 12);
  return harness::finish("emu_mma");
}
