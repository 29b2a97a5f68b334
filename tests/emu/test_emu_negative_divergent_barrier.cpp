// test_emu_negative_divergent_barrier.cpp - a __syncthreads or warp collective not reached by all
// threads fails the launch with a precise message; it never hangs (meson runs it with a timeout).
//
// Properties: (1) a thread returning before __syncthreads gives cudaErrorLaunchFailure and
// "block (3,0,0): __syncthreads reached by 31 of 32 threads", in every thread order; (2) a lane
// returning before a __shfl_xor_sync fails the launch naming the warp; (3) a shuffle reading a
// lane outside its mask fails; (4) __trap() in one thread fails the launch naming the thread;
// (5) the same kernels without the defect succeed, and a later launch on the same thread works
// (the failure left no state behind).
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void early_return_kernel(int* out, int defect) {
  if (defect && blockIdx.x == 3 && threadIdx.x == 5) return;
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] += 1;
}

__global__ void shuffle_divergence_kernel(int* out, int defect) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (defect && threadIdx.x == 40) return;  // warp 1, lane 8
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane, 1);
}

__global__ void shuffle_outside_mask_kernel(int* out, int defect) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane < 16) {
    // lanes 0..15 shuffle among themselves; the defect reads lane 16, outside the mask
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, lane, defect ? 16 : 15 - lane);
  } else {
    out[threadIdx.x] = -lane;
  }
}

__global__ void trap_kernel(int* out, int defect) {
  if (defect && blockIdx.x == 1 && threadIdx.x == 7) __trap();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 2;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

int main() {
  const simt::ThreadOrder orders[] = {simt::ThreadOrder::ascending, simt::ThreadOrder::descending,
                                      simt::ThreadOrder::shuffled};
  for (simt::ThreadOrder order : orders) {
    simt::ScopedThreadOrder scope(order, 99);
    std::vector<int> out(4 * 32, 0);

    DILATTN_LAUNCH(early_return_kernel, dim3(4), dim3(32), 0, nullptr)(out.data(), 1);
    CHECK_MSG(cudaPeekAtLastError() == cudaErrorLaunchFailure, "got %d", cudaPeekAtLastError());
    std::string msg = simt::last_error_message();
    CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "cudaGetLastError");
    CHECK_MSG(cudaGetLastError() == cudaSuccess, "cudaGetLastError did not reset");
    CHECK_MSG(contains(msg, "block (3,0,0): __syncthreads reached by 31 of 32 threads"), "msg: %s",
              msg.c_str());
    CHECK_MSG(contains(msg, "early_return_kernel"), "msg lacks the kernel name: %s", msg.c_str());

    DILATTN_LAUNCH(early_return_kernel, dim3(4), dim3(32), 0, nullptr)(out.data(), 0);
    CHECK_MSG(emu_test::launched_ok("early_return_kernel without defect"), "launch");
    for (int i = 0; i < 4 * 32; ++i) CHECK_MSG(out[i] == i % 32 + 1, "out[%d] = %d", i, out[i]);

    DILATTN_LAUNCH(shuffle_divergence_kernel, dim3(1), dim3(64), 0, nullptr)(out.data(), 1);
    CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "shuffle divergence not reported");
    msg = simt::last_error_message();
    CHECK_MSG(contains(msg, "warp 1: __shfl_xor_sync (mask 0xffffffff) reached by 31 of 32 lanes"),
              "msg: %s", msg.c_str());
    DILATTN_LAUNCH(shuffle_divergence_kernel, dim3(1), dim3(64), 0, nullptr)(out.data(), 0);
    CHECK_MSG(emu_test::launched_ok("shuffle_divergence_kernel without defect"), "launch");
    for (int i = 0; i < 64; ++i) CHECK_MSG(out[i] == ((i % 32) ^ 1), "out[%d] = %d", i, out[i]);

    DILATTN_LAUNCH(shuffle_outside_mask_kernel, dim3(1), dim3(32), 0, nullptr)(out.data(), 1);
    CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "read outside mask not reported");
    msg = simt::last_error_message();
    CHECK_MSG(contains(msg, "out-of-range shuffle lane 16"), "msg: %s", msg.c_str());
    DILATTN_LAUNCH(shuffle_outside_mask_kernel, dim3(1), dim3(32), 0, nullptr)(out.data(), 0);
    CHECK_MSG(emu_test::launched_ok("shuffle_outside_mask_kernel without defect"), "launch");
    for (int i = 0; i < 32; ++i)
      CHECK_MSG(out[i] == (i < 16 ? 15 - i : -i), "out[%d] = %d", i, out[i]);

    DILATTN_LAUNCH(trap_kernel, dim3(2), dim3(32), 0, nullptr)(out.data(), 1);
    CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "__trap not reported");
    msg = simt::last_error_message();
    CHECK_MSG(contains(msg, "block (1,0,0) thread 7 (7,0,0): __trap() called"), "msg: %s",
              msg.c_str());
    DILATTN_LAUNCH(trap_kernel, dim3(2), dim3(32), 0, nullptr)(out.data(), 0);
    CHECK_MSG(emu_test::launched_ok("trap_kernel without defect"), "launch");
    for (int i = 0; i < 64; ++i) CHECK_MSG(out[i] == 2, "out[%d] = %d", i, out[i]);
  }
  return harness::finish("emu_negative_divergent_barrier");
}
