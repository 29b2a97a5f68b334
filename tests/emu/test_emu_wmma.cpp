// test_emu_wmma.cpp - the nvcuda::wmma shim: 16x16x16 fill/load/mma/store with f16 and bf16 inputs.
//
// Property: D = 2 * (A * B + C) for A 32x32 (row-major), B 32x32 (col-major in memory), C 32x32,
// computed by a 2x2 grid of one-warp blocks, two mma_sync per tile (K = 32), an elementwise
// loop over fragment::x, stores in row- and col-major, equals a host f64 matmul of the
// rounded inputs within f32 rounding (|d - ref| <= 1e-5 * (1 + sum |a*b| + |c|)), for __half
// and __nv_bfloat16, bitwise identical under ascending, descending and shuffled thread orders.
// Also: a fill_fragment + store gives the fill value everywhere; fragments have the hardware's
// num_elements (16 for f16/bf16 matrix_a and matrix_b, 8 for f32 accumulators).
#include <cmath>
#include <vector>

#include "emu_test_util.h"

namespace {

using namespace nvcuda;
constexpr int kN = 32;

template <class T>
__global__ void wmma_kernel(const T* a, const T* b_colmajor, const float* c, float* d_row,
                            float* d_col, float* filled) {
  const int ti = static_cast<int>(blockIdx.y) * 16, tj = static_cast<int>(blockIdx.x) * 16;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c + ti * kN + tj, kN, wmma::mem_row_major);
  for (int k = 0; k < kN; k += 16) {
    wmma::load_matrix_sync(fa, a + ti * kN + k, kN);
    wmma::load_matrix_sync(fb, b_colmajor + tj * kN + k, kN);  // B(k, j) at b[j * kN + k]
    wmma::mma_sync(acc, fa, fb, acc);
  }
  for (int e = 0; e < acc.num_elements; ++e) acc.x[e] *= 2.0f;
  wmma::store_matrix_sync(d_row + ti * kN + tj, acc, kN, wmma::mem_row_major);
  wmma::store_matrix_sync(d_col + tj * kN + ti, acc, kN, wmma::mem_col_major);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
  wmma::fill_fragment(f, 1.5f);
  wmma::store_matrix_sync(filled + ti * kN + tj, f, kN, wmma::mem_row_major);
}

float to_f(__half h) { return __half2float(h); }
float to_f(__nv_bfloat16 h) { return __bfloat162float(h); }
template <class T>
T from_f(float x);
template <>
__half from_f<__half>(float x) { return __float2half(x); }
template <>
__nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

template <class T>
void check_type(const char* type) {
  emu_test::DeviceVector<T> a(kN * kN), b(kN * kN);
  emu_test::DeviceVector<float> c(kN * kN);
  for (int i = 0; i < kN * kN; ++i) {
    a[i] = from_f<T>(static_cast<float>((i * 7) % 23 - 11) / 8.0f);
    b[i] = from_f<T>(static_cast<float>((i * 5) % 19 - 9) / 4.0f);
    c[i] = static_cast<float>(i % 13) - 6.0f;
  }
  bool agree = false;
  auto out = emu_test::from_bytes<float>(emu_test::run_in_orders(
      [&] {
        emu_test::DeviceVector<float> all(3 * kN * kN, -7.0f);
        DILATTN_LAUNCH(wmma_kernel<T>, dim3(2, 2), dim3(32), 0, nullptr)
        (a.data(), b.data(), c.data(), all.data(), all.data() + kN * kN,
         all.data() + 2 * kN * kN);
        CHECK_MSG(emu_test::launched_ok("wmma_kernel"), "launch %s", type);
        return emu_test::as_bytes(all);
      },
      &agree));
  CHECK_MSG(agree, "%s: wmma differs between thread orders", type);
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      double ref = c[i * kN + j], mag = std::fabs(ref);
      for (int k = 0; k < kN; ++k) {
        const double p = double(to_f(a[i * kN + k])) * double(to_f(b[j * kN + k]));
        ref += p;
        mag += std::fabs(p);
      }
      ref *= 2.0;
      const double tol = 1e-5 * (1.0 + 2.0 * mag);
      CHECK_MSG(std::fabs(out[i * kN + j] - ref) <= tol, "%s D[%d][%d] = %g, ref %g", type, i, j,
                double(out[i * kN + j]), ref);
      CHECK_MSG(out[kN * kN + j * kN + i] == out[i * kN + j], "%s col-major store [%d][%d]", type,
                i, j);
      CHECK_MSG(out[2 * kN * kN + i * kN + j] == 1.5f, "%s fill [%d][%d]", type, i, j);
    }
  }
}

}  // namespace

int main() {
  static_assert(
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>::num_elements == 16,
      "f16 matrix_a: 16 elements per lane, as on the GPU");
  static_assert(
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>::num_elements ==
          16,
      "bf16 matrix_b: 16 elements per lane, as on the GPU");
  static_assert(wmma::fragment<wmma::accumulator, 16, 16, 16, float>::num_elements == 8,
                "f32 accumulator: 8 elements per lane");
  check_type<__half>("f16");
  check_type<__nv_bfloat16>("bf16");
  return harness::finish("emu_wmma");
}
