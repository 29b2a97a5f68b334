// device_memory.h - device copies of the tool's arrays: on the GPU for --backend cuda (and auto
// on a GPU), or in the SIMT emulator's device memory for the emu backend's ring shards.
//
// The library takes device pointers for cuda plans and never allocates caller tensors, so the
// tool, like any user program, copies its host arrays to the device and back. Built with the CUDA
// runtime when the build found CUDA (DILATTN_CLI_CUDA); otherwise a GPU buffer is a CliError
// (exit 3), though plan creation has already refused cuda by then (DEVICE_NOT_BUILT).
// The emu backend's device memory is host memory (emu/simt_runtime.h: cudaMalloc is an aligned
// host allocation, cudaMemcpy is memcpy), so an emulated buffer is a host allocation copied with
// memcpy: the steps a GPU buffer takes, run where no GPU is (tests/ring/test_cli_ring.py runs
// --ring-threads with --backend emu through them). A GPU buffer needs a GPU to run.
#ifndef DILATTN_TOOLS_DEVICE_MEMORY_H
#define DILATTN_TOOLS_DEVICE_MEMORY_H

#include <cstddef>
#include <vector>

namespace dilattn_cli {

class DeviceBuffer {
 public:
  enum class Kind { gpu, emulated };
  explicit DeviceBuffer(size_t bytes, Kind kind = Kind::gpu);
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
  Kind kind_;
  std::vector<unsigned char> emulated_;  // the memory of an emulated buffer
};

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_DEVICE_MEMORY_H
