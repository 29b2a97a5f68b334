// async_copy.cuh - asynchronous 16-byte and 4-byte copies from global to shared memory
// (cp.async, sm_80+), grouped and waited for as the PTX ISA defines:
//
//   async_copy_16(dst_shared, src_global)  starts a copy; both addresses 16-byte aligned
//   async_copy_4(dst_shared, src_global)   starts a copy of one 4-byte word (aligned to 4)
//   async_copy_commit()                    closes this thread's started copies into a group
//   async_copy_wait<n>()                   waits until at most n of this thread's groups are
//                                          still in flight (cp.async.wait_group n)
//
// A copy is complete only for the thread that issued it and only after its wait; other threads
// see it after that wait and a __syncthreads. The emulator (emu/simt_async_copy.h) makes the
// destination hold poison until the wait, so a kernel that reads early, or forgets a commit,
// gets wrong numbers or a failed launch. Under nvcc: inline PTX, .cg for 16 bytes (bypassing L1:
// each K/V row is read once per block), .ca for 4 (the only one PTX has for 4 bytes). A kernel
// loads a row's scalars (its LSE, D_i, flags) with async_copy_4 so that the thread issuing them
// does not wait for global memory before the chunk's products, as it would with plain loads.
// Checked by tests/emu/test_emu_async_copy.cpp and, through the kernel, tests/kernels/.
#ifndef DILATTN_ASYNC_COPY_CUH
#define DILATTN_ASYNC_COPY_CUH

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

__device__ __forceinline__ void async_copy_16(void* dst_shared, const void* src_global) {
#ifdef __CUDACC__
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src_global));
#else
  simt::cp_async_16(dst_shared, src_global);
#endif
}

__device__ __forceinline__ void async_copy_4(void* dst_shared, const void* src_global) {
#ifdef __CUDACC__
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src_global));
#else
  simt::cp_async_4(dst_shared, src_global);
#endif
}

__device__ __forceinline__ void async_copy_commit() {
#ifdef __CUDACC__
  asm volatile("cp.async.commit_group;\n" ::);
#else
  simt::cp_async_commit();
#endif
}

template <int n>
__device__ __forceinline__ void async_copy_wait() {
#ifdef __CUDACC__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
#else
  simt::cp_async_wait(n);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_ASYNC_COPY_CUH
