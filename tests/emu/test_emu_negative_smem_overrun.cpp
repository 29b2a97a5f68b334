// test_emu_negative_smem_overrun.cpp - a tile written one element past its end, into the next tile
// carved by the kernels' own carver (SmemCarver, cuda/smem_carver.cuh), fails the launch
// at the next __syncthreads ("shared-memory overrun"), also when the tile fills its 128-byte
// rounding exactly (so the element lands in the next tile, where ASan sees nothing); within
// bounds the same kernel succeeds and the tiles hold what was written.
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "smem_carver.cuh"

namespace {

using dilattn::cuda::SmemCarver;

constexpr int kTile = 32;  // 32 floats = 128 bytes: no rounding slack after the tile

size_t carved_bytes() {
  SmemCarver c{nullptr};
  c.take<float>(kTile);
  c.take<float>(kTile);
  return c.used;
}

__global__ void two_tiles_kernel(float* out, int overrun) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  SmemCarver carver{smem};
  float* first = carver.take<float>(kTile);
  float* second = carver.take<float>(kTile);
  const int t = static_cast<int>(threadIdx.x);
  first[t] = 1.0f;
  second[t] = 2.0f;
  if (overrun && t == kTile - 1) first[t + 1] = 9.0f;  // one past the end of the first tile
  __syncthreads();
  out[t] = first[t] + second[t];
}

}  // namespace

int main() {
  CHECK_MSG(carved_bytes() == 2 * (128 + DILATTN_SMEM_GUARD_BYTES), "carved %zu bytes",
            carved_bytes());
  std::vector<float> out(kTile, 0.0f);
  DILATTN_LAUNCH(two_tiles_kernel, dim3(2), dim3(kTile), carved_bytes(), nullptr)(out.data(), 1);
  CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "overrun not reported");
  const std::string msg = simt::last_error_message();
  CHECK_MSG(msg.find("shared-memory overrun: guard byte 0 of the guard at offset 128") !=
                std::string::npos,
            "msg: %s", msg.c_str());
  DILATTN_LAUNCH(two_tiles_kernel, dim3(2), dim3(kTile), carved_bytes(), nullptr)(out.data(), 0);
  CHECK_MSG(emu_test::launched_ok("two_tiles_kernel within bounds"), "control");
  for (int t = 0; t < kTile; ++t) CHECK_MSG(out[t] == 3.0f, "out[%d] = %g", t, double(out[t]));
  return harness::finish("emu_negative_smem_overrun");
}
