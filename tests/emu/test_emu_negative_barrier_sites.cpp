// test_emu_negative_barrier_sites.cpp - threads waiting at two different __syncthreads calls fail
// the launch (on the GPU that is undefined behaviour: the barrier counts arrivals, so the two
// halves would pass each other), naming both call sites; the same kernel with one barrier for
// all threads succeeds, in every thread order.
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void two_sites_kernel(int* out, int defect) {
  const int t = static_cast<int>(threadIdx.x);
  out[t] = t;
  if (defect && t < 16) {
    __syncthreads();  // first half here
  } else {
    __syncthreads();  // second half here
  }
  out[t] += out[(t + 1) % 32] > 0 ? 1 : 0;
}

__global__ void one_site_kernel(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  out[t] = t;
  for (int round = 0; round < 2; ++round) __syncthreads();  // one site, reached twice
  out[t] += 100;
}

}  // namespace

int main() {
  const simt::ThreadOrder orders[] = {simt::ThreadOrder::ascending, simt::ThreadOrder::descending,
                                      simt::ThreadOrder::shuffled};
  for (simt::ThreadOrder order : orders) {
    simt::ScopedThreadOrder scope(order, 5);
    std::vector<int> out(32, 0);
    DILATTN_LAUNCH(two_sites_kernel, dim3(2), dim3(32), 0, nullptr)(out.data(), 1);
    CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "two call sites not reported");
    const std::string msg = simt::last_error_message();
    CHECK_MSG(msg.find("__syncthreads at different call sites") != std::string::npos &&
                  msg.find("test_emu_negative_barrier_sites.cpp:") != std::string::npos,
              "msg: %s", msg.c_str());
    DILATTN_LAUNCH(two_sites_kernel, dim3(2), dim3(32), 0, nullptr)(out.data(), 0);
    CHECK_MSG(emu_test::launched_ok("two_sites_kernel without defect"), "control");
    DILATTN_LAUNCH(one_site_kernel, dim3(2), dim3(32), 0, nullptr)(out.data());
    CHECK_MSG(emu_test::launched_ok("one_site_kernel"), "one site in a loop");
    for (int t = 0; t < 32; ++t) CHECK_MSG(out[t] == t + 100, "out[%d] = %d", t, out[t]);
  }
  return harness::finish("emu_negative_barrier_sites");
}
