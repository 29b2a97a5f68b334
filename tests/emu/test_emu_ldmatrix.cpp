// test_emu_ldmatrix.cpp - ldmatrix m8n8 x1/x2/x4, plain and .trans (cuda/ldmatrix.cuh) in the
// emulator: the PTX ISA's address and fragment layout (emu/simt_ldmatrix.h).
//
// A 16x16 tile of distinct 16-bit values (element (r, c) = 256 + 16 r + c) sits in shared memory
// with a padded pitch of 24 elements; matrix i of a load is the 8x8 block at rows 8 (i % 2),
// columns 8 (i / 2) (the order of mma's A fragment registers). Properties:
//   (1) every form (x1, x2, x4; plain, .trans) gives each lane, in r[i], the two elements the
//       PTX ISA names (plain: row lane / 4, columns 2 (lane % 4) + {0, 1} of matrix i; .trans:
//       rows 2 (lane % 4) + {0, 1} of column lane / 4), the same bits in three thread orders;
//   (2) lanes that address their rows by a wrong rule (matrices 1 and 2 swapped, the other
//       common pairing) get wrong registers;
//   (3) x1, x2: lanes 8N .. 31 passing no address is fine (the ISA ignores them on sm_80+);
//       x4: lanes 8 .. 31 passing none (a load written for x1), a row 2 bytes off its 16-byte
//       alignment, a row in global memory, or 16 lanes (a partial warp) fail the launch;
//   (4) ldmatrix feeds mma.sync: A from ldmatrix x4, B from ldmatrix x2 of B^T (n-major) and
//       from ldmatrix.trans x2 of B (k-major) give D = A B within 1e-5 of the f64 product,
//       bitwise equal to each other (the loads S = Q K^T and P V make in cuda/forward_mma.cu).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "ldmatrix.cuh"
#include "mma_sync.cuh"

namespace {

using dilattn::cuda::ldmatrix;
using dilattn::cuda::ldmatrix_trans;
using dilattn::cuda::mma_m16n8k16;

constexpr int kPitch = 24;  // elements: rows 48 bytes apart, each 16-byte aligned
constexpr size_t kSmem = 16 * kPitch * sizeof(uint16_t);

enum Mode : int { kRule, kWrongRule, kNoUpperAddresses, kMisaligned, kGlobalRow };

// out[lane * 4 + i] = the lane's r[i] (N of them).
template <int N, bool Trans>
__global__ void load_kernel(const uint16_t* tile, uint32_t* out, int mode) {
  DILATTN_DYNAMIC_SHARED(uint16_t, smem);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 256; e += static_cast<int>(blockDim.x))
    smem[(e / 16) * kPitch + e % 16] = tile[e];
  __syncthreads();
  const int i = lane / 8, j = lane % 8;  // the matrix and row this lane addresses
  int row = 8 * (i % 2) + j, col = 8 * ((i / 2) % 2);
  if (mode == kWrongRule) row = 8 * ((i / 2) % 2) + j, col = 8 * (i % 2);
  const void* address = smem + row * kPitch + col;
  if (mode == kNoUpperAddresses && lane >= 8 * (N == 4 ? 1 : N)) address = nullptr;
  if (mode == kMisaligned && lane == 3) address = smem + row * kPitch + col + 1;
  if (mode == kGlobalRow && lane == 5) address = tile + row * 16 + col;
  uint32_t r[N];
  if (Trans)
    ldmatrix_trans<N>(r, address);
  else
    ldmatrix<N>(r, address);
  for (int k = 0; k < N; ++k) out[lane * 4 + k] = r[k];
}

// The PTX ISA's result of the correct address rule: lane l, register i.
uint32_t expected(int lane, int i, bool trans) {
  const int g = lane / 4, t = lane % 4, r0 = 8 * (i % 2), c0 = 8 * (i / 2);
  auto at = [](int r, int c) { return static_cast<uint32_t>(256 + 16 * r + c); };
  const uint32_t lo = trans ? at(r0 + 2 * t, c0 + g) : at(r0 + g, c0 + 2 * t);
  const uint32_t hi = trans ? at(r0 + 2 * t + 1, c0 + g) : at(r0 + g, c0 + 2 * t + 1);
  return lo | (hi << 16);
}

template <int N, bool Trans>
void check_form(const emu_test::DeviceVector<uint16_t>& tile) {
  char name[32];
  std::snprintf(name, sizeof name, "x%d%s", N, Trans ? ".trans" : "");
  emu_test::DeviceVector<uint32_t> out(128);
  auto run = [&](int mode, int threads) {
    std::fill(out.begin(), out.end(), 0u);
    DILATTN_LAUNCH((load_kernel<N, Trans>), dim3(1), dim3(threads), kSmem, nullptr)(
        tile.data(), out.data(), mode);
  };
  // (1) the documented layout, in every thread order.
  bool agree = false;
  emu_test::run_in_orders(
      [&] {
        run(kRule, 32);
        CHECK_MSG(emu_test::launched_ok(name), "%s (1) launch", name);
        return emu_test::as_bytes(out);
      },
      &agree);
  CHECK_MSG(agree, "%s (1): thread orders disagree", name);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < N; ++i)
      CHECK_MSG(out[lane * 4 + i] == expected(lane, i, Trans),
                "%s (1) lane %d r[%d] = 0x%08x, want 0x%08x", name, lane, i,
                static_cast<unsigned>(out[lane * 4 + i]),
                static_cast<unsigned>(expected(lane, i, Trans)));
  // (2) a wrong address rule: matrices 1 and 2 trade places (x4) or matrix 1 is read from the
  // wrong columns (x2); x1 reads only matrix 0, which both rules agree on.
  if (N > 1) {
    run(kWrongRule, 32);
    CHECK_MSG(emu_test::launched_ok(name), "%s (2) launch", name);
    int wrong = 0;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < N; ++i) wrong += out[lane * 4 + i] != expected(lane, i, Trans) ? 1 : 0;
    CHECK_MSG(wrong >= 16 * N, "%s (2): the wrong address rule changed only %d registers", name,
              wrong);
  }
  // (3) addresses: only lanes 0 .. 8N - 1 supply rows.
  run(kNoUpperAddresses, 32);
  if (N <= 2) {
    CHECK_MSG(emu_test::launched_ok(name), "%s (3) lanes %d..31 without addresses", name, 8 * N);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < N; ++i)
        CHECK_MSG(out[lane * 4 + i] == expected(lane, i, Trans), "%s (3) lane %d r[%d]", name,
                  lane, i);
  }
  if (N == 4)
    CHECK_MSG(emu_test::launch_failed_with(name, "of lane 8 (matrix 1, row 0) is not in the block's dynamic "
                               "shared memory"),
              "%s (3) lanes 8..31 without addresses", name);
  run(kMisaligned, 32);
  CHECK_MSG(emu_test::launch_failed_with(name, "of lane 3 (matrix 0, row 3) is not 16-byte aligned"),
            "%s (3) misaligned row", name);
  run(kGlobalRow, 32);
  CHECK_MSG(emu_test::launch_failed_with(name, "of lane 5 (matrix 0, row 5) is not in the block's dynamic shared"),
            "%s (3) row in global memory", name);
  run(kRule, 16);
  CHECK_MSG(emu_test::launch_failed_with(name, "needs all 32 lanes"), "%s (3) a partial warp", name);
}

// (4) A (16x16) row-major and B (16x8) k-major in shared memory, pitch 24; Bt = B^T n-major
// after them. d[0 .. 128): D from Bt by ldmatrix x2; d[128 .. 256): from B by .trans x2.
__global__ void mma_kernel(const __half* A, const __half* B, float* d) {
  DILATTN_DYNAMIC_SHARED(__half, smem);
  __half* a_s = smem;
  __half* b_s = smem + 16 * kPitch;
  __half* bt_s = smem + 32 * kPitch;
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int e = lane; e < 256; e += 32) a_s[(e / 16) * kPitch + e % 16] = A[e];
  for (int e = lane; e < 128; e += 32) {
    b_s[(e / 8) * kPitch + e % 8] = B[e];            // B[k][n] at row k
    bt_s[(e % 8) * kPitch + e / 8] = B[e];           // B[k][n] at row n, column k
  }
  __syncthreads();
  const int i = lane / 8, j = lane % 8;
  uint32_t a[4], b_n[2], b_k[2];
  ldmatrix<4>(a, a_s + (8 * (i % 2) + j) * kPitch + 8 * (i / 2));
  ldmatrix<2>(b_n, bt_s + j * kPitch + 8 * (i % 2));          // matrix i: columns k 8i ..
  ldmatrix_trans<2>(b_k, b_s + (8 * (i % 2) + j) * kPitch);  // matrix i: rows k 8i ..
  for (int pass = 0; pass < 2; ++pass) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_m16n8k16<__half>(c, a, pass == 0 ? b_n : b_k, c);
    float* out = d + 128 * pass;
    out[g * 8 + 2 * t] = c[0];
    out[g * 8 + 2 * t + 1] = c[1];
    out[(g + 8) * 8 + 2 * t] = c[2];
    out[(g + 8) * 8 + 2 * t + 1] = c[3];
  }
}

void check_mma() {
  emu_test::DeviceVector<__half> A(256), B(128);
  emu_test::DeviceVector<float> d(256);
  uint64_t state = 21;
  auto uniform = [&] {  // [-2, 2)
    return static_cast<float>(simt::detail::splitmix64(state) >> 11) * 0x1p-53f * 4.0f - 2.0f;
  };
  for (__half& x : A) x = __float2half_rn(uniform());
  for (__half& x : B) x = __float2half_rn(uniform());
  DILATTN_LAUNCH(mma_kernel, dim3(1), dim3(32), 48 * kPitch * sizeof(__half), nullptr)(
      A.data(), B.data(), d.data());
  CHECK_MSG(emu_test::launched_ok("(4)"), "(4) launch");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double exact = 0.0;
      for (int k = 0; k < 16; ++k)
        exact += static_cast<double>(__half2float(A[r * 16 + k])) * __half2float(B[k * 8 + c]);
      const float got = d[r * 8 + c], got_trans = d[128 + r * 8 + c];
      CHECK_MSG(std::fabs(got - exact) <= 1e-5 * (1.0 + std::fabs(exact)),
                "(4) D[%d][%d] = %.9g, f64 product %.9g", r, c, double(got), exact);
      CHECK_MSG(std::memcmp(&got, &got_trans, sizeof got) == 0,
                "(4) D[%d][%d]: %.9g from B^T, %.9g from B by .trans", r, c, double(got),
                double(got_trans));
    }
}

}  // namespace

int main() {
  emu_test::DeviceVector<uint16_t> tile(256);
  for (int e = 0; e < 256; ++e) tile[e] = static_cast<uint16_t>(256 + e);
  check_form<1, false>(tile);
  check_form<1, true>(tile);
  check_form<2, false>(tile);
  check_form<2, true>(tile);
  check_form<4, false>(tile);
  check_form<4, true>(tile);
  check_mma();
  return harness::finish("emu_ldmatrix");
}
