// cuda_compat.cuh - what lets one kernel source build two ways (the emu/CUDA contract).
//
// Under nvcc: the CUDA runtime, fp16/bf16 types and WMMA, and two macros. Under a host compiler:
// emu/simt.h, the SIMT emulator, which provides the same names (threadIdx, __syncthreads,
// shuffles, __half, nvcuda::wmma, cudaMalloc, ...) and runs the kernels on the CPU.
//
//   DILATTN_DYNAMIC_SHARED(type, name)  the block's dynamic shared memory as type* name. All
//       shared memory is dynamic and carved into tiles at kernel start (no static __shared__),
//       so the emulator can poison it per block and a missing barrier shows.
//   DILATTN_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...)  a kernel launch.
//   DILATTN_UNROLL  before a loop whose index picks elements of a register array.
//   DILATTN_NO_UNROLL  before a loop nvcc must keep rolled (its iterations' registers at once
//       would spill).
//   DILATTN_SMEM_GUARD_BYTES, DILATTN_SMEM_GUARD(ptr, bytes)  guard bytes the tile carver leaves
//       after each tile: none under nvcc; under the emulator 128, checked at every barrier, so a
//       tile written past its end fails the launch.
//
// Checked by every test in tests/kernels/ (emulator) and by the nvcc build (CUDA).
#ifndef DILATTN_CUDA_COMPAT_CUH
#define DILATTN_CUDA_COMPAT_CUH

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

// 128-byte alignment: WMMA loads and stores need 32-byte aligned tiles; the kernels carve tiles
// at multiples of 32 bytes from this base.
#define DILATTN_DYNAMIC_SHARED(type, name)                                 \
  extern __shared__ __align__(128) unsigned char dilattn_smem_raw[];       \
  type* name = reinterpret_cast<type*>(dilattn_smem_raw)
#define DILATTN_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#define DILATTN_SMEM_GUARD_BYTES 0
#define DILATTN_SMEM_GUARD(ptr, bytes) ((void)0)
#else
#include "simt.h"
#endif

// A loop nvcc must unroll: its index picks elements of a register array (a fragment), which a
// rolled loop would put in local memory. Nothing under the emulator.
#ifdef __CUDACC__
#define DILATTN_UNROLL _Pragma("unroll")
#else
#define DILATTN_UNROLL
#endif
// A loop nvcc must keep rolled: unrolled, its iterations' independent work (a generator call
// each, dropout_tile.cuh) would be scheduled side by side and spill. Nothing under the emulator.
#ifdef __CUDACC__
#define DILATTN_NO_UNROLL _Pragma("unroll 1")
#else
#define DILATTN_NO_UNROLL
#endif

// The namespace the launchers and the kernels live in: cuda under nvcc, emu when a file is
// built for the host compiler (cuda/meson.build's emu_<file>.cpp, from cuda/emu_unit.cpp.in).
#ifndef DILATTN_BACKEND_NS
#define DILATTN_BACKEND_NS cuda
#endif

#endif  // DILATTN_CUDA_COMPAT_CUH
