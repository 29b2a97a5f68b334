// mbarrier.cuh - mbarrier objects in shared memory (sm_90): the phase barrier a tensor-memory
// copy completes with its bytes and the consumers of a tile wait on.
//
//   mbarrier_init(bar, count)            a new barrier expecting `count` arrivals a phase
//   mbarrier_init_fence()                makes inits visible to the asynchronous proxy (the
//                                        copies) before the barrier is used; then __syncthreads
//   mbarrier_arrive(bar)                 one arrival
//   mbarrier_arrive_expect_tx(bar, n)    n more transaction bytes this phase, and one arrival
//   mbarrier_wait_parity(bar, parity)    returns once the phase of that parity has completed
//
// A phase completes when its arrivals and its transaction bytes are both in; the waiting side
// tracks the phase's parity (0, 1, 0, ...) as each ring slot is reused. The semantics are the
// PTX ISA's, section "Parallel Synchronization and Communication Instructions: mbarrier";
// emu/simt_mbarrier.h implements them for the emulator and reports a wait nothing can complete
// (a wrong byte count, a missing arrival) as a deadlock instead of hanging.
// expect_tx and try_wait are sm_90's: compiled for an older target those calls trap, so a file
// holding a Hopper kernel builds for every target in the build.
// Checked by tests/emu/test_emu_warp_specialization.cpp and tests/emu/test_emu_tma.cpp.
#ifndef DILATTN_MBARRIER_CUH
#define DILATTN_MBARRIER_CUH

#include <stdint.h>

#include "cuda_compat.cuh"
#include "shared_address.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#ifdef __CUDACC__
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(count)
               : "memory");
#else
  simt::mbarrier_init(bar, count);
#endif
}

__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ uint64_t mbarrier_arrive(uint64_t* bar) {
#ifdef __CUDACC__
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
               : "=l"(state)
               : "r"(shared_address(bar))
               : "memory");
  return state;
#else
  return simt::mbarrier_arrive(bar);
#endif
}

__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // transaction counts are sm_90's
  return 0;
#elif defined(__CUDACC__)
  uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(shared_address(bar)), "r"(bytes)
               : "memory");
  return state;
#else
  return simt::mbarrier_arrive_expect_tx(bar, bytes);
#endif
}

__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // try_wait is sm_90's
#elif defined(__CUDACC__)
  const uint32_t address = shared_address(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (!done);
#else
  simt::mbarrier_wait_parity(bar, parity);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MBARRIER_CUH
