// test_emu_threads.cpp - launches from several OS threads at once are independent and correct.
//
// Property: 4 OS threads each run 20 launches of a block reduction (shuffles + barrier) on their
// own data while a 5th thread launches a kernel with a divergent __syncthreads; every reduction
// equals its host sum, the 5th thread gets its own error each time, and no error leaks into the
// other threads' cudaGetLastError. And SIMT_THREADS (blocks of one launch on several OS
// threads) changes nothing: a 40-block reduction gives the same bytes with 1 and 3 threads, and
// a grid whose blocks 9 and 23 fail reports block 9 (the first in block order) both ways, under
// ascending and descending order (where it is block 23).
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void block_sum(const int* in, int* out) {
  DILATTN_DYNAMIC_SHARED(int, partial);
  const unsigned t = threadIdx.x;
  int v = in[blockIdx.x * blockDim.x + t];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(o));
  if (t % 32 == 0) partial[t / 32] = v;
  __syncthreads();
  if (t == 0) {
    int s = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}

__global__ void divergent(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void fails_in_two_blocks(int* out) {
  if ((blockIdx.x == 9 || blockIdx.x == 23) && threadIdx.x == 3) return;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

// Outputs of the reduction and the failure message with SIMT_THREADS=threads.
std::string run_with_threads(const char* threads, std::vector<int>* sums) {
  setenv("SIMT_THREADS", threads, 1);  // no other thread runs now
  std::vector<int> in(40 * 64);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>((i * 37) % 101) - 50;
  sums->assign(40, 0);
  DILATTN_LAUNCH(block_sum, dim3(40), dim3(64), 2 * sizeof(int), nullptr)(in.data(), sums->data());
  CHECK_MSG(emu_test::launched_ok("block_sum"), "SIMT_THREADS=%s", threads);
  std::vector<int> out(40 * 32);
  DILATTN_LAUNCH(fails_in_two_blocks, dim3(40), dim3(32), 0, nullptr)(out.data());
  CHECK_MSG(cudaGetLastError() == cudaErrorLaunchFailure, "SIMT_THREADS=%s: not reported", threads);
  unsetenv("SIMT_THREADS");
  return simt::last_error_message();
}

}  // namespace

int main() {
  for (simt::ThreadOrder order : {simt::ThreadOrder::ascending, simt::ThreadOrder::descending}) {
    simt::ScopedThreadOrder scope(order);
    std::vector<int> one, three;
    const std::string msg1 = run_with_threads("1", &one), msg3 = run_with_threads("3", &three);
    CHECK_MSG(one == three, "SIMT_THREADS=3 changed the block sums");
    const char* first = order == simt::ThreadOrder::ascending ? "block (9,0,0)" : "block (23,0,0)";
    CHECK_MSG(msg1.find(first) != std::string::npos, "1 thread: %s", msg1.c_str());
    CHECK_MSG(msg1 == msg3, "messages differ: '%s' vs '%s'", msg1.c_str(), msg3.c_str());
  }

  std::atomic<int> wrong{0}, leaked{0}, missed{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 4; ++id) {
    threads.emplace_back([id, &wrong, &leaked] {
      std::vector<int> in(8 * 128), out(8);
      for (int it = 0; it < 20; ++it) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i % 97) * (id + 1) - it;
        DILATTN_LAUNCH(block_sum, dim3(8), dim3(128), 4 * sizeof(int), nullptr)
        (in.data(), out.data());
        if (cudaGetLastError() != cudaSuccess) ++leaked;
        for (int b = 0; b < 8; ++b) {
          int s = 0;
          for (int t = 0; t < 128; ++t) s += in[b * 128 + t];
          if (out[b] != s) ++wrong;
        }
      }
    });
  }
  threads.emplace_back([&missed] {
    std::vector<int> out(64);
    for (int it = 0; it < 20; ++it) {
      DILATTN_LAUNCH(divergent, dim3(1), dim3(64), 0, nullptr)(out.data());
      if (cudaGetLastError() != cudaErrorLaunchFailure) ++missed;
    }
  });
  for (std::thread& t : threads) t.join();
  CHECK_MSG(wrong == 0, "%d wrong block sums", wrong.load());
  CHECK_MSG(leaked == 0, "%d launches saw another thread's error", leaked.load());
  CHECK_MSG(missed == 0, "%d divergent launches were not reported", missed.load());
  return harness::finish("emu_threads");
}
