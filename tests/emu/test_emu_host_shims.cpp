// test_emu_host_shims.cpp - the emulator's CUDA runtime shims and launch-configuration checks.
//
// Properties: cudaMalloc/cudaMemcpy/cudaMemset(+Async)/cudaFree move bytes exactly (256-byte
// aligned allocations); streams and events work (elapsed time >= 0); the fake device reports
// "SIMT emulator", sm 8.0, warp 32, 48 KB shared per block and 163 KB opt-in; a launch asking
// for more than 48 KB of dynamic shared memory fails with cudaErrorInvalidValue until
// cudaFuncSetAttribute raises the kernel's limit, then succeeds with all of it poisoned (0xFF)
// at block start; a block of 1025 threads or a grid.y of 65536 is cudaErrorInvalidConfiguration;
// cudaGetLastError resets, cudaPeekAtLastError does not; no runtime symbol is defined (the
// shims are simt:: inline functions behind macros). The emulated device: sm_90 takes 227 KB
// of opt-in shared memory, sm_80 refuses it (163 KB); sm_80 code runs on sm_86, sm_90 PTX on
// sm_100, nothing on sm_75 (cudaErrorNoKernelImageForDevice).
#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void count_poison(const unsigned char* unused, int bytes, int* not_poisoned) {
  (void)unused;
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < bytes; i += static_cast<int>(blockDim.x))
    if (smem[i] != 0xFF) atomicAdd(not_poisoned, 1);
  __syncthreads();  // everyone has checked before anyone writes
  for (int i = static_cast<int>(threadIdx.x); i < bytes; i += static_cast<int>(blockDim.x))
    smem[i] = 0;  // the next block must see 0xFF again
}

__global__ void add_one(int* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += 1;
}

}  // namespace

int main() {
  // memory
  const int n = 1000;
  int* d = nullptr;
  CHECK_MSG(cudaMalloc(&d, n * sizeof(int)) == cudaSuccess && d != nullptr, "cudaMalloc");
  CHECK_MSG(reinterpret_cast<uintptr_t>(d) % 256 == 0, "cudaMalloc alignment");
  std::vector<int> h(n), back(n, 0);
  for (int i = 0; i < n; ++i) h[i] = i * 3 - 17;
  cudaStream_t stream = nullptr;
  CHECK_MSG(cudaStreamCreate(&stream) == cudaSuccess && stream != nullptr, "cudaStreamCreate");
  CHECK_MSG(
      cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream) == cudaSuccess,
      "cudaMemcpyAsync");
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_MSG(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess,
            "events");
  CHECK_MSG(cudaEventRecord(start, stream) == cudaSuccess, "record");
  DILATTN_LAUNCH(add_one, dim3((n + 255) / 256), dim3(256), 0, stream)(d, n);
  CHECK_MSG(cudaEventRecord(stop, stream) == cudaSuccess, "record");
  CHECK_MSG(cudaStreamSynchronize(stream) == cudaSuccess, "sync");
  CHECK_MSG(cudaEventSynchronize(stop) == cudaSuccess, "event sync");
  float ms = -1.0f;
  CHECK_MSG(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms >= 0.0f, "elapsed %g",
            double(ms));
  CHECK_MSG(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess,
            "copy");
  for (int i = 0; i < n; ++i) CHECK_MSG(back[i] == h[i] + 1, "add_one[%d] = %d", i, back[i]);
  CHECK_MSG(cudaMemsetAsync(d, 0, n * sizeof(int), stream) == cudaSuccess, "memset");
  CHECK_MSG(cudaMemset(d, 0x01, 4) == cudaSuccess, "memset");
  CHECK_MSG(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDefault) == cudaSuccess, "copy");
  CHECK_MSG(back[0] == 0x01010101 && back[1] == 0 && back[n - 1] == 0, "memset values");
  CHECK_MSG(cudaEventDestroy(start) == cudaSuccess && cudaEventDestroy(stop) == cudaSuccess,
            "destroy");
  CHECK_MSG(cudaStreamDestroy(stream) == cudaSuccess, "stream destroy");
  CHECK_MSG(cudaFree(d) == cudaSuccess, "free");
  CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "device sync");

  // device
  int dev = -1;
  CHECK_MSG(cudaGetDevice(&dev) == cudaSuccess && dev == 0, "cudaGetDevice");
  cudaDeviceProp prop;
  CHECK_MSG(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "props");
  CHECK_MSG(std::string(prop.name) == "SIMT emulator", "name %s", prop.name);
  CHECK_MSG(prop.major == 8 && prop.minor == 0 && prop.warpSize == 32, "sm/warp");
  CHECK_MSG(prop.sharedMemPerBlock == 48 * 1024 && prop.sharedMemPerBlockOptin == 163 * 1024,
            "smem");

  // dynamic shared memory limits and poisoning
  int bad = 0;
  const int big = 100 * 1024;
  DILATTN_LAUNCH(count_poison, dim3(3), dim3(64), big, nullptr)(nullptr, big, &bad);
  CHECK_MSG(cudaGetLastError() == cudaErrorInvalidValue, "100 KB without the attribute launched");
  CHECK_MSG(std::string(simt::last_error_message()).find("exceed the kernel's limit of 49152") !=
                std::string::npos, "msg: %s", simt::last_error_message());
  CHECK_MSG(cudaFuncSetAttribute(count_poison, cudaFuncAttributeMaxDynamicSharedMemorySize, big) ==
                cudaSuccess, "cudaFuncSetAttribute");
  CHECK_MSG(cudaFuncSetAttribute(count_poison, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 163 * 1024 + 1) == cudaErrorInvalidValue,
            "over sm_80's opt-in limit");
  DILATTN_LAUNCH(count_poison, dim3(3), dim3(64), big, nullptr)(nullptr, big, &bad);
  CHECK_MSG(emu_test::launched_ok("count_poison"), "launch");
  CHECK_MSG(bad == 0, "%d shared bytes were not 0xFF at block start", bad);

  // the emulated device: sm_90 allows 227 KB, sm_80 163 KB, whatever the kernel's attribute;
  // sm_75 has no kernel image in the emulated binary (built for sm_80 and sm_90)
  const int sm90_limit = 227 * 1024;
  simt::set_emulated_device(9, 0);
  CHECK_MSG(cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 &&
                prop.sharedMemPerBlockOptin == static_cast<size_t>(sm90_limit), "sm_90 props");
  CHECK_MSG(cudaFuncSetAttribute(count_poison, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 sm90_limit + 1) == cudaErrorInvalidValue, "over sm_90's limit");
  CHECK_MSG(cudaFuncSetAttribute(count_poison, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 sm90_limit) == cudaSuccess, "sm_90's limit");
  DILATTN_LAUNCH(count_poison, dim3(1), dim3(64), sm90_limit, nullptr)(nullptr, sm90_limit, &bad);
  CHECK_MSG(emu_test::launched_ok("227 KB on sm_90"), "launch");
  simt::set_emulated_device(8, 0);
  DILATTN_LAUNCH(count_poison, dim3(1), dim3(64), sm90_limit, nullptr)(nullptr, sm90_limit, &bad);
  CHECK_MSG(cudaGetLastError() == cudaErrorInvalidValue, "227 KB launched on sm_80");
  CHECK_MSG(std::string(simt::last_error_message()).find("limit of 166912") != std::string::npos,
            "msg: %s", simt::last_error_message());
  cudaFuncAttributes attr;
  CHECK_MSG(cudaFuncGetAttributes(&attr, add_one) == cudaSuccess, "image for sm_80");
  simt::set_emulated_device(8, 6);
  CHECK_MSG(cudaFuncGetAttributes(&attr, add_one) == cudaSuccess, "sm_80 code runs on sm_86");
  simt::set_emulated_device(7, 5);
  CHECK_MSG(cudaFuncGetAttributes(&attr, add_one) == cudaErrorNoKernelImageForDevice, "sm_75");
  simt::set_emulated_device(10, 0);
  CHECK_MSG(cudaFuncGetAttributes(&attr, add_one) == cudaSuccess, "sm_90 PTX on sm_100");
  simt::set_emulated_device(8, 0);

  // configuration errors
  DILATTN_LAUNCH(add_one, dim3(1), dim3(1025), 0, nullptr)(nullptr, 0);
  CHECK_MSG(cudaPeekAtLastError() == cudaErrorInvalidConfiguration, "1025 threads accepted");
  CHECK_MSG(cudaPeekAtLastError() == cudaErrorInvalidConfiguration, "peek reset the error");
  CHECK_MSG(cudaGetLastError() == cudaErrorInvalidConfiguration, "get");
  CHECK_MSG(cudaGetLastError() == cudaSuccess, "get did not reset");
  DILATTN_LAUNCH(add_one, dim3(1, 65536), dim3(32), 0, nullptr)(nullptr, 0);
  CHECK_MSG(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 65536 accepted");
  CHECK_MSG(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("launch failure") !=
                std::string::npos, "cudaGetErrorString");
  return harness::finish("emu_host_shims");
}
