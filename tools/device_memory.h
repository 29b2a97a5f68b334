// device_memory.h - GPU copies of the tool's arrays for --backend cuda (and auto on a GPU).
//
// The library takes device pointers for cuda plans and never allocates caller tensors, so the
// tool, like any user program, copies its host arrays to the device and back. Built with the CUDA
// runtime when the build found CUDA (DILATTN_CLI_CUDA); otherwise every call is a CliError
// (exit 3), though plan creation has already refused cuda by then (DEVICE_NOT_BUILT).
// Needs a GPU to run; no test here has one (the cuda backend's own tests cover the kernels).
#ifndef DILATTN_TOOLS_DEVICE_MEMORY_H
#define DILATTN_TOOLS_DEVICE_MEMORY_H

#include <cstddef>

namespace dilattn_cli {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host);  // bytes() from host
  void download(void* host) const;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_DEVICE_MEMORY_H
