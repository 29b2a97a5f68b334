// simt_types.h - the CUDA vocabulary a host compiler lacks: qualifiers, dim3/uint3, __half, bf16.
//
// Part of the SIMT emulator (emu/README.md). The CUDA headers' own host paths give
// __half, __nv_bfloat16, their conversions, dim3/uint3 and the runtime's enums (cudaError_t,
// cudaMemcpyKind, cudaDeviceProp): we include them and add the execution-space qualifiers, which
// are empty on the host. No runtime function is *defined* here (see simt_runtime.h for why).
// Checked by tests/emu/test_emu_half_convert.cpp and by every emulator test that compiles.
#ifndef DILATTN_SIMT_TYPES_H
#define DILATTN_SIMT_TYPES_H

#ifdef __CUDACC__
#error "simt.h is the host-compiler path; under nvcc include the CUDA headers instead"
#endif

// The CUDA headers use a GNU variadic-macro extension that clang's -Wpedantic flags; the
// warning is about their code, not ours.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wgnu-zero-variadic-macro-arguments"
#pragma clang diagnostic ignored "-Wunknown-pragmas"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

// Execution spaces mean nothing on the host: every function is a host function.
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __constant__
#define __constant__
#undef __managed__
#define __managed__
#undef __launch_bounds__
#define __launch_bounds__(...)
// A kernel parameter read in place (a tensor map, whose address a copy names): kernel arguments
// are copied into the launch and live until it ends, so nothing more is needed here.
#undef __grid_constant__
#define __grid_constant__
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
// Static __shared__ becomes one copy per OS thread, shared by the fibers of a block. It is NOT
// poisoned between blocks (stale values can hide a missing barrier), which is why the kernels
// use DILATTN_DYNAMIC_SHARED instead (emu/README.md, "Limits").
#undef __shared__
#define __shared__ static thread_local

// Inside a kernel, as in CUDA, warpSize is 32.
constexpr int warpSize = 32;

#endif  // DILATTN_SIMT_TYPES_H
