// test_emu_negative_missing_barrier.cpp - a missing __syncthreads is caught by comparing
// thread orders.
//
// Property: a kernel that writes shared memory and reads a neighbour's slot WITHOUT a barrier
// gives different bytes under ascending and descending thread order (the emulator poisons
// dynamic shared memory with 0xFF per block, so an early read sees NaN in one order), which is
// how every kernel test detects the defect; the same kernel WITH the barrier agrees in all
// orders and equals the host result. The same holds where a warp collective (__syncwarp here;
// an ldmatrix in the kernels) stands between every thread's store and its read of another
// warp's slot: the descending order runs one warp at a time (emu/simt_scheduler.h), so the
// collective resolves before the other warps have stored.
#include <cmath>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void rotate_missing_barrier(const float* in, float* out) {
  DILATTN_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  tile[t] = in[base + t];
  // defect: no __syncthreads() here
  out[base + t] = tile[(t + 1) % n];
}

__global__ void rotate_with_barrier(const float* in, float* out) {
  DILATTN_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  tile[t] = in[base + t];
  __syncthreads();
  out[base + t] = tile[(t + 1) % n];
}

// The read is another warp's slot (t + 32), after a warp collective but no block barrier.
__global__ void next_warp_missing_barrier(const float* in, float* out) {
  DILATTN_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  tile[t] = in[base + t];
  __syncwarp();  // defect: a warp's collective orders nothing across warps
  out[base + t] = tile[(t + 32) % n];
}

__global__ void next_warp_with_barrier(const float* in, float* out) {
  DILATTN_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  tile[t] = in[base + t];
  __syncwarp();
  __syncthreads();
  out[base + t] = tile[(t + 32) % n];
}

template <class Kernel>
std::vector<unsigned char> run(Kernel kernel, const std::vector<float>& in) {
  std::vector<float> out(in.size(), 0.0f);
  DILATTN_LAUNCH(kernel, dim3(3), dim3(96), 96 * sizeof(float), nullptr)(in.data(), out.data());
  CHECK_MSG(emu_test::launched_ok("rotate"), "launch");
  return emu_test::as_bytes(out);
}

}  // namespace

int main() {
  std::vector<float> in(3 * 96);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.25f * static_cast<float>(i) - 7.0f;

  bool agree = true;
  std::vector<float> bad = emu_test::from_bytes<float>(
      emu_test::run_in_orders([&] { return run(rotate_missing_barrier, in); }, &agree));
  CHECK_MSG(!agree, "the missing barrier was NOT detected: all thread orders agreed");
  int poisoned = 0;
  for (float x : bad) poisoned += std::isnan(x);
  CHECK_MSG(poisoned > 0, "ascending order read no poisoned (NaN) shared memory");

  std::vector<float> good = emu_test::from_bytes<float>(
      emu_test::run_in_orders([&] { return run(rotate_with_barrier, in); }, &agree));
  CHECK_MSG(agree, "the correct kernel differs between thread orders");
  for (size_t b = 0; b < 3; ++b)
    for (size_t t = 0; t < 96; ++t)
      CHECK_MSG(good[b * 96 + t] == in[b * 96 + (t + 1) % 96], "out[%zu]", b * 96 + t);

  // Across warps, behind a collective: every order but the warp-serial descending one runs all
  // the stores before the collective resolves; that one reads poison.
  bad = emu_test::from_bytes<float>(
      emu_test::run_in_orders([&] { return run(next_warp_missing_barrier, in); }, &agree));
  CHECK_MSG(!agree, "the missing barrier behind __syncwarp was NOT detected: all orders agreed");
  good = emu_test::from_bytes<float>(
      emu_test::run_in_orders([&] { return run(next_warp_with_barrier, in); }, &agree));
  CHECK_MSG(agree, "the correct cross-warp kernel differs between thread orders");
  for (size_t b = 0; b < 3; ++b)
    for (size_t t = 0; t < 96; ++t)
      CHECK_MSG(good[b * 96 + t] == in[b * 96 + (t + 32) % 96], "out[%zu]", b * 96 + t);
  return harness::finish("emu_negative_missing_barrier");
}
