// tma_copy.cuh - tile copies between global and shared memory by the tensor memory accelerator
// (cp.async.bulk.tensor, sm_90+), described by a tensor map (cuda/tensor_map.h):
//
//   tma_load_Nd(dst, map, c0, .., mbar)    N = 1..5: one thread starts loading the box at
//                                          coordinates (c0, ..) (signed; outside the tensor:
//                                          filled) into dst, 128-byte aligned (and aligned to
//                                          the swizzle pattern's repeat: 256/512/1024 bytes);
//                                          the bytes complete their count on mbar, so a thread
//                                          sees them after the mbarrier phase it waits for,
//                                          whose expect_tx must name the box's bytes
//   tma_store_Nd(map, c0, .., src)         N = 1..5: one thread starts storing the box in src to
//                                          coordinates (c0, ..) (non-negative; elements outside
//                                          the tensor are skipped)
//   tma_store_commit()                     closes this thread's started stores into a group
//   tma_store_wait_read<n>()               waits until at most n of this thread's groups still
//                                          read shared memory (src may be reused after it)
//   tma_store_wait<n>()                    waits until at most n groups are unfinished (writes
//                                          done)
//
// The map is a kernel parameter `const __grid_constant__ CUtensorMap map`, passed as &map:
// PTX wants its generic address in .param, .const or .global space. Under nvcc: inline PTX.
// Under the emulator (emu/simt_tma.h) a load's destination holds poison until the end of the
// round after the one it was issued in, and its bytes complete on the mbarrier then; a store reads shared
// memory at the wait that covers it. Shared addresses, tile alignment and the proxy fence a TMA
// store needs after ordinary writes to its source: cuda/shared_address.cuh.
// Checked by tests/emu/test_emu_tma.cpp.
#ifndef DILATTN_TMA_COPY_CUH
#define DILATTN_TMA_COPY_CUH

#include <cstdint>

#include "cuda_compat.cuh"
#include "shared_address.cuh"

#ifdef __CUDACC__
#include <cuda.h>  // CUtensorMap (a type only: nothing of the driver is linked)
#else
#include "simt_tma.h"
#endif

namespace dilattn {
namespace DILATTN_BACKEND_NS {

#ifdef __CUDACC__
// The operands every load shares; the coordinates follow as %5.. in the PTX strings below.
#define DILATTN_TMA_LOAD_OPERANDS                                              \
  "r"(shared_address(dst)), "l"(reinterpret_cast<uint64_t>(map)), \
      "r"(shared_address(mbar))
#endif

__device__ __forceinline__ void tma_load_1d(void* dst, const CUtensorMap* map, int32_t c0,
                                            uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3}], [%2];\n" ::DILATTN_TMA_LOAD_OPERANDS,
      "r"(c0)
      : "memory");
#else
  const int32_t coords[1] = {c0};
  simt::tma_load(dst, map, coords, 1, mbar);
#endif
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int32_t c0,
                                            int32_t c1, uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::DILATTN_TMA_LOAD_OPERANDS,
      "r"(c0), "r"(c1)
      : "memory");
#else
  const int32_t coords[2] = {c0, c1};
  simt::tma_load(dst, map, coords, 2, mbar);
#endif
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int32_t c0,
                                            int32_t c1, int32_t c2, uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::DILATTN_TMA_LOAD_OPERANDS,
      "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  const int32_t coords[3] = {c0, c1, c2};
  simt::tma_load(dst, map, coords, 3, mbar);
#endif
}

__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3,
                                            uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::DILATTN_TMA_LOAD_OPERANDS,
      "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  const int32_t coords[4] = {c0, c1, c2, c3};
  simt::tma_load(dst, map, coords, 4, mbar);
#endif
}

__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, int32_t c0,
                                            int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                                            uint64_t* mbar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::DILATTN_TMA_LOAD_OPERANDS,
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#else
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  simt::tma_load(dst, map, coords, 5, mbar);
#endif
}

#ifdef __CUDACC__
#undef DILATTN_TMA_LOAD_OPERANDS
// The operands every store shares; the coordinates follow as %2.. in the PTX strings below.
#define DILATTN_TMA_STORE_OPERANDS \
  "l"(reinterpret_cast<uint64_t>(map)), "r"(shared_address(src))
#endif

__device__ __forceinline__ void tma_store_1d(const CUtensorMap* map, int32_t c0,
                                             const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];\n"
               ::DILATTN_TMA_STORE_OPERANDS, "r"(c0)
               : "memory");
#else
  const int32_t coords[1] = {c0};
  simt::tma_store(map, coords, 1, src);
#endif
}

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int32_t c0, int32_t c1,
                                             const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n"
      ::DILATTN_TMA_STORE_OPERANDS, "r"(c0), "r"(c1)
      : "memory");
#else
  const int32_t coords[2] = {c0, c1};
  simt::tma_store(map, coords, 2, src);
#endif
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, int32_t c0, int32_t c1,
                                             int32_t c2, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      ::DILATTN_TMA_STORE_OPERANDS, "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  const int32_t coords[3] = {c0, c1, c2};
  simt::tma_store(map, coords, 3, src);
#endif
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, int32_t c0, int32_t c1,
                                             int32_t c2, int32_t c3, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
      " [%0, {%2, %3, %4, %5}], [%1];\n" ::DILATTN_TMA_STORE_OPERANDS,
      "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  const int32_t coords[4] = {c0, c1, c2, c3};
  simt::tma_store(map, coords, 4, src);
#endif
}

__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, int32_t c0, int32_t c1,
                                             int32_t c2, int32_t c3, int32_t c4,
                                             const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
      " [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::DILATTN_TMA_STORE_OPERANDS,
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#else
  const int32_t coords[5] = {c0, c1, c2, c3, c4};
  simt::tma_store(map, coords, 5, src);
#endif
}

#ifdef __CUDACC__
#undef DILATTN_TMA_STORE_OPERANDS
#endif

__device__ __forceinline__ void tma_store_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  simt::tma_store_commit();
#endif
}

template <int n>
__device__ __forceinline__ void tma_store_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(n) : "memory");
#else
  simt::tma_store_wait(n);
#endif
}

template <int n>
__device__ __forceinline__ void tma_store_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the tensor memory accelerator is sm_90's
#elif defined(__CUDACC__)
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(n) : "memory");
#else
  simt::tma_store_wait(n);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_TMA_COPY_CUH
