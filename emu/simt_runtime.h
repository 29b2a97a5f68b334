// simt_runtime.h - host shims of the CUDA runtime for the emulator: memory, streams, events.
//
// Part of the SIMT emulator (emu/README.md). "Device" memory is host memory
// (256-byte aligned), copies are memcpy. Work on a stream runs at once, or in deferred mode
// when the stream is waited for (simt_streams.h); every call is counted (simt::runtime_calls).
// An event records the host clock when it is reached. The device is the emulated one
// (simt::set_emulated_device, default sm_80); the emulated binary holds kernel images for
// sm_80 and sm_90 and PTX for sm_90, as the project builds by default (meson option sm_archs).
// Why macros: libdilattn links the real libcudart for the GPU backend into the same .so as the
// emulated backend, so this header must not define a single external symbol named like the
// runtime. Every shim is an inline function in namespace simt, and `#define cudaMalloc
// simt::cudaMalloc` etc. route the kernels' launcher code to them. The types (cudaError_t,
// cudaDeviceProp, ...) are the CUDA headers' own, which <cuda_fp16.h> includes anyway.
// Checked by tests/emu/test_emu_host_shims.cpp.
#ifndef DILATTN_SIMT_RUNTIME_H
#define DILATTN_SIMT_RUNTIME_H

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "simt_launch.h"

namespace simt {
namespace detail {
struct EmuEvent {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};
}  // namespace detail

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = detail::last_error().code;
  detail::last_error().code = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return detail::last_error().code; }

inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
    default: return "cudaErrorUnknown";
  }
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure (SIMT emulator)";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    default: return "unknown error";
  }
}

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  detail::count(detail::counters().mallocs);
  if (p == nullptr) return cudaErrorInvalidValue;
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  const size_t rounded = (bytes + 255) / 256 * 256;
  *p = std::aligned_alloc(256, rounded);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
  void* v = nullptr;
  const cudaError_t e = simt::cudaMalloc(&v, bytes);
  *p = static_cast<T*>(v);
  return e;
}
inline cudaError_t cudaFree(void* p) {
  detail::count(detail::counters().frees);
  detail::flush_all_streams();  // cudaFree waits for the device, as on the GPU
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) { return simt::cudaMalloc(p, bytes); }
inline cudaError_t cudaFreeHost(void* p) { return simt::cudaFree(p); }

// A synchronous copy waits for every stream first (the legacy default stream's rule).
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  detail::count(detail::counters().sync_copies);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  detail::flush_all_streams();
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t stream = nullptr) {
  detail::count(detail::counters().async_copies);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  detail::submit(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  detail::count(detail::counters().sync_copies);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr) return cudaErrorInvalidValue;
  detail::flush_all_streams();
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes,
                                   cudaStream_t stream = nullptr) {
  detail::count(detail::counters().async_copies);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr) return cudaErrorInvalidValue;
  detail::submit(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}
// fn(data) once the stream's earlier work is done (at once unless the stream is deferred).
inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  detail::count(detail::counters().host_funcs);
  if (fn == nullptr) return cudaErrorInvalidValue;
  detail::submit(stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  if (s == nullptr) return cudaErrorInvalidValue;
  auto* made = new detail::EmuStream;
  {
    std::lock_guard<std::mutex> lock(detail::stream_mutex());
    detail::live_streams()[made] = true;
  }
  *s = reinterpret_cast<cudaStream_t>(made);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  return simt::cudaStreamCreate(s);
}
// The stream's queued work still runs (as on the GPU), then the stream is gone.
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  auto* stream = reinterpret_cast<detail::EmuStream*>(s);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  detail::flush_stream(stream);
  {
    std::lock_guard<std::mutex> lock(detail::stream_mutex());
    detail::live_streams().erase(stream);
  }
  delete stream;
  return cudaSuccess;
}
// Capture: work given to a capturing stream is recorded, not run (simt::captured_on counts
// it), as CUDA records it into a graph; EndCapture drops it and gives no graph.
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s == nullptr) return cudaErrorStreamCaptureUnsupported;  // as CUDA: not the legacy stream
  reinterpret_cast<detail::EmuStream*>(s)->capturing.store(true);
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  if (s == nullptr || graph == nullptr) return cudaErrorInvalidValue;
  reinterpret_cast<detail::EmuStream*>(s)->capturing.store(false);
  *graph = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return cudaErrorInvalidValue;
  const bool on = s != nullptr && reinterpret_cast<detail::EmuStream*>(s)->capturing.load();
  *status = on ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

// Runs what is queued; a pending launch error shows here too, as on the GPU.
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  detail::count(detail::counters().stream_syncs);
  if (s == nullptr)
    detail::flush_all_streams();
  else
    detail::flush_stream(reinterpret_cast<detail::EmuStream*>(s));
  return simt::cudaPeekAtLastError();
}
inline cudaError_t cudaDeviceSynchronize() {
  detail::count(detail::counters().device_syncs);
  detail::flush_all_streams();
  return simt::cudaPeekAtLastError();
}

inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (e == nullptr) return cudaErrorInvalidValue;
  *e = reinterpret_cast<cudaEvent_t>(new detail::EmuEvent);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return simt::cudaEventCreate(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  auto* ev = reinterpret_cast<detail::EmuEvent*>(e);
  detail::submit(stream, [ev] {
    ev->when = std::chrono::steady_clock::now();
    ev->recorded = true;
  });
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  detail::count(detail::counters().event_syncs);
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  detail::flush_all_streams();
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (ms == nullptr || start == nullptr || stop == nullptr) return cudaErrorInvalidValue;
  auto* a = reinterpret_cast<detail::EmuEvent*>(start);
  auto* b = reinterpret_cast<detail::EmuEvent*>(stop);
  if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<detail::EmuEvent*>(e);
  return cudaSuccess;
}

inline cudaError_t cudaGetDevice(int* d) {
  if (d == nullptr) return cudaErrorInvalidValue;
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  if (n == nullptr) return cudaErrorInvalidValue;
  *n = 1;
  return cudaSuccess;
}
// The emulated device (default sm_80): what the launchers query to size their tiles.
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  detail::count(detail::counters().device_properties);
  if (p == nullptr || device != 0) return cudaErrorInvalidValue;
  const detail::EmulatedDevice d = detail::emulated_device();
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->name, "SIMT emulator", sizeof p->name - 1);
  p->major = d.major;
  p->minor = d.minor;
  p->warpSize = 32;
  p->sharedMemPerBlock = detail::kDefaultSharedBytes;
  p->sharedMemPerBlockOptin = detail::optin_shared_bytes(d);
  p->sharedMemPerMultiprocessor = detail::optin_shared_bytes(d) + 1024;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->multiProcessorCount = 1;
  p->totalGlobalMem = size_t(1) << 32;
  p->regsPerBlock = 65536;
  return cudaSuccess;
}

namespace detail {
// Whether the emulated binary (real code for sm_80 and sm_90, PTX for sm_90) runs on the
// emulated device: real code for sm_XY runs on X.Y' with Y' >= Y, PTX on any newer device.
inline bool has_kernel_image(const EmulatedDevice& d) {
  return d.major == 8 || d.major * 10 + d.minor >= 90;
}
}  // namespace detail

// cudaErrorNoKernelImageForDevice when the emulated binary has no code for the device.
template <class... P>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, void (*kernel)(P...)) {
  detail::count(detail::counters().func_attributes);
  if (attr == nullptr) return cudaErrorInvalidValue;
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  const detail::EmulatedDevice d = detail::emulated_device();
  if (!detail::has_kernel_image(d)) return cudaErrorNoKernelImageForDevice;
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->binaryVersion = d.major >= 9 ? 90 : 80;
  attr->ptxVersion = 90;
  attr->maxDynamicSharedSizeBytes =
      static_cast<int>(detail::kernel_shared_limit(reinterpret_cast<detail::KernelKey>(kernel)));
  return cudaSuccess;
}

template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (kernel == nullptr) return cudaErrorInvalidDeviceFunction;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // no effect here
  if (value < 0 ||
      static_cast<size_t>(value) > detail::optin_shared_bytes(detail::emulated_device()))
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(detail::attribute_mutex());
  detail::max_dynamic_shared()[reinterpret_cast<detail::KernelKey>(kernel)] =
      static_cast<size_t>(value);
  return cudaSuccess;
}

}  // namespace simt

// Route the runtime names to the shims (some are macros in cuda_runtime_api.h already).
#undef cudaGetLastError
#define cudaGetLastError simt::cudaGetLastError
#undef cudaPeekAtLastError
#define cudaPeekAtLastError simt::cudaPeekAtLastError
#undef cudaGetErrorName
#define cudaGetErrorName simt::cudaGetErrorName
#undef cudaGetErrorString
#define cudaGetErrorString simt::cudaGetErrorString
#undef cudaMalloc
#define cudaMalloc simt::cudaMalloc
#undef cudaFree
#define cudaFree simt::cudaFree
#undef cudaMallocHost
#define cudaMallocHost simt::cudaMallocHost
#undef cudaFreeHost
#define cudaFreeHost simt::cudaFreeHost
#undef cudaMemcpy
#define cudaMemcpy simt::cudaMemcpy
#undef cudaMemcpyAsync
#define cudaMemcpyAsync simt::cudaMemcpyAsync
#undef cudaMemset
#define cudaMemset simt::cudaMemset
#undef cudaMemsetAsync
#define cudaMemsetAsync simt::cudaMemsetAsync
#undef cudaStreamCreate
#define cudaStreamCreate simt::cudaStreamCreate
#undef cudaStreamCreateWithFlags
#define cudaStreamCreateWithFlags simt::cudaStreamCreateWithFlags
#undef cudaStreamDestroy
#define cudaStreamDestroy simt::cudaStreamDestroy
#undef cudaStreamSynchronize
#define cudaStreamSynchronize simt::cudaStreamSynchronize
#undef cudaDeviceSynchronize
#define cudaDeviceSynchronize simt::cudaDeviceSynchronize
#undef cudaEventCreate
#define cudaEventCreate simt::cudaEventCreate
#undef cudaEventCreateWithFlags
#define cudaEventCreateWithFlags simt::cudaEventCreateWithFlags
#undef cudaEventRecord
#define cudaEventRecord simt::cudaEventRecord
#undef cudaEventSynchronize
#define cudaEventSynchronize simt::cudaEventSynchronize
#undef cudaEventElapsedTime
#define cudaEventElapsedTime simt::cudaEventElapsedTime
#undef cudaEventDestroy
#define cudaEventDestroy simt::cudaEventDestroy
#undef cudaGetDevice
#define cudaGetDevice simt::cudaGetDevice
#undef cudaSetDevice
#define cudaSetDevice simt::cudaSetDevice
#undef cudaGetDeviceCount
#define cudaGetDeviceCount simt::cudaGetDeviceCount
#undef cudaGetDeviceProperties
#define cudaGetDeviceProperties simt::cudaGetDeviceProperties
#undef cudaFuncSetAttribute
#define cudaFuncSetAttribute simt::cudaFuncSetAttribute
#undef cudaFuncGetAttributes
#define cudaFuncGetAttributes simt::cudaFuncGetAttributes
#undef cudaLaunchHostFunc
#define cudaLaunchHostFunc simt::cudaLaunchHostFunc
#undef cudaStreamBeginCapture
#define cudaStreamBeginCapture simt::cudaStreamBeginCapture
#undef cudaStreamEndCapture
#define cudaStreamEndCapture simt::cudaStreamEndCapture
#undef cudaStreamIsCapturing
#define cudaStreamIsCapturing simt::cudaStreamIsCapturing

#endif  // DILATTN_SIMT_RUNTIME_H
