// device_memory.cpp - cudaMalloc / cudaMemcpy / cudaFree behind DeviceBuffer (device_memory.h),
// or a CliError when this build has no CUDA runtime; an emulated buffer is host memory and
// memcpy. Any CUDA error is exit 3 with its name.
#include "device_memory.h"

#include <cstring>
#include <string>

#include "cli_error.h"

#if DILATTN_CLI_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dilattn_cli {

namespace {
#if DILATTN_CLI_CUDA
void check_cuda(cudaError_t e, const char* what, size_t bytes) {
  if (e != cudaSuccess)
    throw CliError(kExitRuntime, std::string(what) + " of " + std::to_string(bytes) +
                                     " bytes failed: " + cudaGetErrorString(e));
}
#endif
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes, Kind kind) : bytes_(bytes), kind_(kind) {
  if (kind_ == Kind::emulated) {
    emulated_.resize(bytes_ ? bytes_ : 1);  // never NULL, as cudaMalloc of 1 byte
    ptr_ = emulated_.data();
    return;
  }
#if DILATTN_CLI_CUDA
  check_cuda(cudaMalloc(&ptr_, bytes_ ? bytes_ : 1), "cudaMalloc", bytes_);
#else
  throw CliError(kExitRuntime, "this dilattn tool was built without the CUDA runtime");
#endif
}

DeviceBuffer::~DeviceBuffer() {
#if DILATTN_CLI_CUDA
  if (kind_ == Kind::gpu) cudaFree(ptr_);
#endif
}

void DeviceBuffer::upload(const void* host) {
  if (kind_ == Kind::emulated) {
    if (bytes_ != 0) std::memcpy(ptr_, host, bytes_);
    return;
  }
#if DILATTN_CLI_CUDA
  check_cuda(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), "copy to the GPU", bytes_);
#endif
}

void DeviceBuffer::download(void* host) const {
  if (kind_ == Kind::emulated) {
    if (bytes_ != 0) std::memcpy(host, ptr_, bytes_);
    return;
  }
#if DILATTN_CLI_CUDA
  check_cuda(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost), "copy from the GPU", bytes_);
#endif
}

}  // namespace dilattn_cli
