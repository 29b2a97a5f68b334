// test_emu_negative_wmma.cpp - WMMA misuse the GPU punishes and the emulator must not forgive.
//
// Properties: (1) f16 matrix_a/matrix_b fragments have 16 elements per lane: a kernel that
// scales only x[0..7] (assuming 8) fails the launch at mma_sync ("differs between its two
// copies"); scaling all num_elements gives 2 A B; (2) a load from a pointer 16 bytes off
// 32-byte alignment fails; (3) ldm = 20 for f16 and 18 for a float store fail (multiples of 8
// and 4 elements, 16 bytes); (4) one lane passing another pointer fails ("lanes disagree");
// (5) store_matrix_sync does not synchronise the warp: lanes that read elements other lanes
// stored, without __syncwarp, read the old values in some thread order, while the same kernel
// with __syncwarp reads the stored values in every order.
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace {

using namespace nvcuda;
using Frag16 = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB16 = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// D = (2 A) B with A scaled elementwise over `scaled` of the fragment's elements.
__global__ void scaled_product_kernel(const __half* a, const __half* b, float* d, int scaled) {
  Frag16 fa;
  FragB16 fb;
  Acc acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  for (int e = 0; e < scaled; ++e) fa.x[e] = __float2half(2.0f * __half2float(fa.x[e]));
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// Loads from a + offset with leading dimension ldm; lane `odd_lane` adds 16 elements.
__global__ void load_kernel(const __half* a, int offset, int ldm, int odd_lane, float* d,
                            int store_ldm) {
  Frag16 fa;
  FragB16 fb;
  Acc acc;
  wmma::fill_fragment(acc, 0.0f);
  const int extra = static_cast<int>(threadIdx.x) == odd_lane ? 16 : 0;
  wmma::load_matrix_sync(fa, a + offset + extra, static_cast<unsigned>(ldm));
  wmma::load_matrix_sync(fb, a, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, static_cast<unsigned>(store_ldm), wmma::mem_row_major);
}

// Each lane stores its part of a filled accumulator, then reads the element after its own
// eight: another lane's, visible only after a __syncwarp.
__global__ void read_after_store_kernel(float* tile, float* out, int sync) {
  Acc acc;
  wmma::fill_fragment(acc, 3.0f);
  wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
  if (sync) __syncwarp();
  const int lane = static_cast<int>(threadIdx.x);
  out[lane] = tile[(lane * 8 + 8) % 256];
}

}  // namespace

int main() {
  emu_test::DeviceVector<__half> a(16 * 32), b(16 * 16);
  for (int i = 0; i < 16 * 32; ++i) a[i] = __float2half(static_cast<float>(i % 7) - 3.0f);
  for (int i = 0; i < 16 * 16; ++i) b[i] = __float2half(static_cast<float>(i % 5) - 2.0f);
  emu_test::DeviceVector<float> d(16 * 32, 0.0f);

  // (1) 16 elements per lane: all of them or the copies disagree.
  DILATTN_LAUNCH(scaled_product_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), b.data(),
                                                                       d.data(), 8);
  CHECK_MSG(emu_test::launch_failed_with("scaling x[0..7] only", "matrix_a fragment element"), "(1)");
  DILATTN_LAUNCH(scaled_product_kernel, dim3(1), dim3(32), 0, nullptr)(
      a.data(), b.data(), d.data(), Frag16::num_elements);
  CHECK_MSG(emu_test::launched_ok("scaling all num_elements"), "(1) control");
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float ref = 0.0f;
      for (int k = 0; k < 16; ++k)
        ref += 2.0f * __half2float(a[i * 16 + k]) * __half2float(b[k * 16 + j]);
      CHECK_MSG(d[i * 16 + j] == ref, "(1) D[%d][%d] = %g, want %g", i, j, double(d[i * 16 + j]),
                double(ref));
    }

  // (2) alignment, (3) ldm, (4) one pointer and ldm for the warp.
  DILATTN_LAUNCH(load_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), 8, 16, -1, d.data(), 16);
  CHECK_MSG(emu_test::launch_failed_with("16 bytes off alignment", "is not 32-byte aligned"), "(2)");
  DILATTN_LAUNCH(load_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), 0, 20, -1, d.data(), 16);
  CHECK_MSG(emu_test::launch_failed_with("ldm 20 for f16", "ldm = 20 is not a positive multiple of 8"), "(3) f16");
  DILATTN_LAUNCH(load_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), 0, 16, -1, d.data(), 18);
  CHECK_MSG(emu_test::launch_failed_with("ldm 18 for a float store", "ldm = 18 is not a positive multiple of 4"),
            "(3) f32");
  DILATTN_LAUNCH(load_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), 0, 16, 5, d.data(), 16);
  CHECK_MSG(emu_test::launch_failed_with("lane 5 passing another pointer", "lanes disagree"), "(4)");
  DILATTN_LAUNCH(load_kernel, dim3(1), dim3(32), 0, nullptr)(a.data(), 16, 32, -1, d.data(), 24);
  CHECK_MSG(emu_test::launched_ok("aligned pointer, legal ldm"), "(2-4) control");

  // (5) a store is no warp barrier.
  for (int sync = 0; sync < 2; ++sync) {
    bool agree = false, all_stored = true;
    const simt::ThreadOrder orders[] = {simt::ThreadOrder::ascending,
                                        simt::ThreadOrder::descending,
                                        simt::ThreadOrder::shuffled};
    for (simt::ThreadOrder order : orders) {
      simt::ScopedThreadOrder scope(order, 7);
      emu_test::DeviceVector<float> tile(256, -1.0f), out(32, 0.0f);
      DILATTN_LAUNCH(read_after_store_kernel, dim3(1), dim3(32), 0, nullptr)(tile.data(),
                                                                             out.data(), sync);
      CHECK_MSG(emu_test::launched_ok("read_after_store_kernel"), "(5) launch");
      for (float x : out) all_stored = all_stored && x == 3.0f;
    }
    agree = all_stored;
    if (sync)
      CHECK_MSG(agree, "(5) with __syncwarp every lane must read the stored 3.0");
    else
      CHECK_MSG(!agree, "(5) without __syncwarp some lane must read the old -1 in some order "
                        "(store_matrix_sync synchronised the warp)");
  }
  return harness::finish("emu_negative_wmma");
}
