// shared_address.cuh - the shared-window address of a pointer into shared memory (PTX
// cvta.to.shared), which mbarrier, tensor-memory copy and wgmma descriptors name shared memory
// by; and a tile pointer aligned to a power-of-two boundary of that window.
//
//   shared_address(p)              the 32-bit .shared address of p
//   align_shared(p, bytes)         p moved up to the next window address that is a multiple of
//                                  `bytes` (a swizzled tile's pattern repeats every 1024 bytes
//                                  of window address, and the GPU promises dynamic shared
//                                  memory only 16-byte alignment)
//   fence_proxy_async_shared()     fence.proxy.async.shared::cta: this thread's ordinary writes
//                                  to shared memory become visible to the asynchronous proxy
//                                  (a wgmma or a TMA store reading them); not needed between a
//                                  TMA load and a wgmma (both asynchronous)
//
// Under nvcc __cvta_generic_to_shared; under the emulator simt::detail::shared_address_of,
// whose window puts dynamic shared memory 128 bytes past a multiple of 1024, so a kernel that
// forgets to align fails there (emu/README.md). The emulator has one view of shared memory, so
// the fence does nothing there and a missing one is not caught.
#ifndef DILATTN_SHARED_ADDRESS_CUH
#define DILATTN_SHARED_ADDRESS_CUH

#include <stdint.h>

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
#ifdef __CUDACC__
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#else
  return simt::detail::shared_address_of(p, 1, "cvta.to.shared");
#endif
}

template <class T>
__device__ __forceinline__ T* align_shared(T* p, uint32_t bytes) {
  const uint32_t skip = (bytes - shared_address(p) % bytes) % bytes;
  return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(p) + skip);
}

__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_SHARED_ADDRESS_CUH
