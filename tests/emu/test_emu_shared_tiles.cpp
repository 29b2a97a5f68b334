// test_emu_shared_tiles.cpp - dynamic shared memory tiles, 2-D blocks and __syncthreads in the emulator.
//
// Property: a tiled matrix transpose (32x8 blocks staging a 32x32 tile through dynamic shared
// memory) of a 70x45 float matrix over a 3x2 grid equals the host transpose exactly, and is
// bitwise identical under ascending, descending and shuffled thread orders; the shared pointer
// is 16-byte aligned.
#include <cstdint>
#include <vector>

#include "emu_test_util.h"

namespace {

constexpr int kTile = 32, kRows = 8;

__global__ void transpose_kernel(const float* in, float* out, int rows, int cols, int* misaligned) {
  DILATTN_DYNAMIC_SHARED(float, tile);  // [kTile][kTile + 1]
  if (reinterpret_cast<uintptr_t>(tile) % 16 != 0) atomicAdd(misaligned, 1);
  const int c0 = static_cast<int>(blockIdx.x) * kTile, r0 = static_cast<int>(blockIdx.y) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int r = ty; r < kTile; r += kRows) {
    const int gr = r0 + r, gc = c0 + tx;
    tile[r * (kTile + 1) + tx] = gr < rows && gc < cols ? in[gr * cols + gc] : 0.0f;
  }
  __syncthreads();
  for (int c = ty; c < kTile; c += kRows) {
    const int gr = c0 + c, gc = r0 + tx;  // row of out = column of in
    if (gr < cols && gc < rows) out[gr * rows + gc] = tile[tx * (kTile + 1) + c];
  }
}

}  // namespace

int main() {
  const int rows = 45, cols = 70;
  std::vector<float> in(rows * cols);
  for (int i = 0; i < rows * cols; ++i) in[i] = static_cast<float>(i) * 0.5f - 100.0f;
  bool agree = false;
  int misaligned = 0;
  auto out = emu_test::from_bytes<float>(emu_test::run_in_orders(
      [&] {
        std::vector<float> o(rows * cols, -1.0f);
        const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
        DILATTN_LAUNCH(transpose_kernel, grid, dim3(kTile, kRows),
                       kTile * (kTile + 1) * sizeof(float), nullptr)
        (in.data(), o.data(), rows, cols, &misaligned);
        CHECK_MSG(emu_test::launched_ok("transpose_kernel"), "launch");
        return emu_test::as_bytes(o);
      },
      &agree));
  CHECK_MSG(agree, "transpose differs between thread orders");
  CHECK_MSG(misaligned == 0, "%d threads saw misaligned shared memory", misaligned);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      CHECK_MSG(out[c * rows + r] == in[r * cols + c], "out[%d][%d]", c, r);
  return harness::finish("emu_shared_tiles");
}
