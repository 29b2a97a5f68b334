// warp_specialization.cuh - what lets warpgroups of one block take different roles (sm_90a):
// named barriers for a subset of the block's threads, and setmaxnreg, by which a producer
// warpgroup hands registers to its consumers.
//
//   named_barrier_sync(id, threads)    waits until `threads` threads arrived at barrier id
//                                      (1 .. 15; 0 is __syncthreads')
//   named_barrier_arrive(id, threads)  counts the calling thread there and goes on
//   warpgroup_registers_inc<N>()       this warpgroup's threads hold N registers each, taken
//                                      from the block's pool (waits until the pool has them)
//   warpgroup_registers_dec<N>()       ... N registers each, the rest given back
// N is a multiple of 8 in 24 .. 256; the whole warpgroup executes the same call. setmaxnreg is
// an sm_90a feature: compiled for another target, the calls trap (wgmma.cuh does the same), so
// a file holding a Hopper kernel builds for every target in the build.
// The semantics are the PTX ISA's, sections "bar, barrier" and "setmaxnreg";
// emu/simt_named_barrier.h and emu/simt_setmaxnreg.h implement them for the emulator.
// Checked by tests/emu/test_emu_warp_specialization.cpp.
#ifndef DILATTN_WARP_SPECIALIZATION_CUH
#define DILATTN_WARP_SPECIALIZATION_CUH

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
#ifdef __CUDACC__
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  simt::named_barrier_sync(id, threads);
#endif
}

__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
#ifdef __CUDACC__
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  simt::named_barrier_arrive(id, threads);
#endif
}

template <int N>
__device__ __forceinline__ void warpgroup_registers_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8, 24..256");
#if defined(__CUDACC__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(__CUDACC__)
  __trap();  // sm_90a only: another target's pass of a file that holds a Hopper kernel
#else
  simt::setmaxnreg_inc(N);
#endif
}

template <int N>
__device__ __forceinline__ void warpgroup_registers_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes a multiple of 8, 24..256");
#if defined(__CUDACC__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(__CUDACC__)
  __trap();  // sm_90a only: another target's pass of a file that holds a Hopper kernel
#else
  simt::setmaxnreg_dec(N);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_WARP_SPECIALIZATION_CUH
