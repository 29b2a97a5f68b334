// test_emu_shuffle_reduce.cpp - warp shuffles, dynamic shared memory and multi-dim grids in the emulator.
//
// Property: a block sum (__shfl_xor_sync within warps, partials through dynamic shared memory,
// __shfl_down_sync across them), a width-16 inclusive scan (__shfl_up_sync), broadcasts
// (__shfl_sync, widths 32 and 8) over a 3x2x2 grid of 64x2 blocks equal the host computation
// exactly (integers), and are bitwise identical under ascending, descending and shuffled orders.
#include <cstdint>
#include <vector>

#include "emu_test_util.h"

namespace {

constexpr int kBx = 64, kBy = 2;  // 128 threads, 4 warps
const dim3 kGrid(3, 2, 2);

__global__ void shuffle_kernel(const int* in, int* block_sum, int* scan16, int* bcast32,
                               int* bcast8) {
  DILATTN_DYNAMIC_SHARED(int, warp_sums);
  const int t = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x * blockDim.y);
  const int block =
      static_cast<int>((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
  const int g = block * nthreads + t;
  const int lane = t % warpSize, warp = t / warpSize;
  const int v = in[g];

  // the 0th lane of each warp writes its warp's sum to shared memory
  int s = v;
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nthreads / warpSize ? warp_sums[lane] : 0;
    for (int o = 16; o > 0; o /= 2) w += __shfl_down_sync(0xffffffffu, w, static_cast<unsigned>(o));
    if (lane == 0) block_sum[block] = w;
  }

  int scan = v;  // inclusive scan inside each group of 16 lanes
  for (int d = 1; d < 16; d *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, scan, static_cast<unsigned>(d), 16);
    if (lane % 16 >= d) scan += up;
  }
  scan16[g] = scan;
  bcast32[g] = __shfl_sync(0xffffffffu, v, 3);
  bcast8[g] = __shfl_sync(0xffffffffu, v, 5 + 8 * 100, 8);  // srcLane is taken modulo width
}

}  // namespace

int main() {
  const int blocks = static_cast<int>(kGrid.x * kGrid.y * kGrid.z), nthreads = kBx * kBy;
  const int n = blocks * nthreads;
  std::vector<int> in(n);
  uint32_t state = 7;
  for (int& x : in) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<int>(state >> 20) - 2048;
  }

  bool agree = false;
  std::vector<int> out = emu_test::from_bytes<int>(emu_test::run_in_orders(
      [&] {
        std::vector<int> all(blocks + 3 * n, -1);  // sums, scan16, bcast32, bcast8
        int* sums = all.data();
        DILATTN_LAUNCH(shuffle_kernel, kGrid, dim3(kBx, kBy), 4 * sizeof(int), nullptr)
        (in.data(), sums, sums + blocks, sums + blocks + n, sums + blocks + 2 * n);
        CHECK_MSG(emu_test::launched_ok("shuffle_kernel"), "launch");
        return emu_test::as_bytes(all);
      },
      &agree));
  CHECK_MSG(agree, "results differ between thread orders");
  CHECK_MSG(out.size() == static_cast<size_t>(blocks + 3 * n), "size %zu", out.size());
  if (out.size() != static_cast<size_t>(blocks + 3 * n))
    return harness::finish("emu_shuffle_reduce");

  for (int b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int t = 0; t < nthreads; ++t) sum += in[b * nthreads + t];
    CHECK_MSG(out[b] == sum, "block %d sum %d, host %d", b, out[b], sum);
  }
  for (int g = 0; g < n; ++g) {
    const int lane = g % 32, warp0 = g - lane;
    int scan = 0;
    for (int l = lane - lane % 16; l <= lane; ++l) scan += in[warp0 + l];
    CHECK_MSG(out[blocks + g] == scan, "scan16[%d] %d, host %d", g, out[blocks + g], scan);
    CHECK_MSG(out[blocks + n + g] == in[warp0 + 3], "bcast32[%d]", g);
    CHECK_MSG(out[blocks + 2 * n + g] == in[warp0 + lane - lane % 8 + 5], "bcast8[%d]", g);
  }
  return harness::finish("emu_shuffle_reduce");
}
