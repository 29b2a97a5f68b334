// device_memory.cpp - cudaMalloc / cudaMemcpy / cudaFree behind DeviceBuffer (device_memory.h),
// or a CliError when this build has no CUDA runtime. Any CUDA error is exit 3 with its name.
#include "device_memory.h"

#include <string>

#include "cli_error.h"

#if DILATTN_CLI_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dilattn_cli {

#if DILATTN_CLI_CUDA
namespace {
void check_cuda(cudaError_t e, const char* what, size_t bytes) {
  if (e != cudaSuccess)
    throw CliError(kExitRuntime, std::string(what) + " of " + std::to_string(bytes) +
                                     " bytes failed: " + cudaGetErrorString(e));
}
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  check_cuda(cudaMalloc(&ptr_, bytes_ ? bytes_ : 1), "cudaMalloc", bytes_);
}
DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }
void DeviceBuffer::upload(const void* host) {
  check_cuda(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), "copy to the GPU", bytes_);
}
void DeviceBuffer::download(void* host) const {
  check_cuda(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost), "copy from the GPU", bytes_);
}
#else
DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  throw CliError(kExitRuntime, "this dilattn tool was built without the CUDA runtime");
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void*) {}
void DeviceBuffer::download(void*) const {}
#endif

}  // namespace dilattn_cli
