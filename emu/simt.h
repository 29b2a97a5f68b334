// simt.h - the SIMT emulator: runs unmodified CUDA kernel sources on the CPU (host compiler).
//
// How it works and its limits: emu/README.md. The single include of the
// emulator; cuda/cuda_compat.cuh includes it when __CUDACC__ is not defined. Pieces:
//   simt_types.h      qualifiers, dim3/uint3, __half/__nv_bfloat16 (the CUDA headers' host paths)
//   simt_scheduler.h  fibers, thread order, __syncthreads and warp-collective scheduling,
//                     threadIdx/blockIdx/blockDim/gridDim
//   simt_device.h     shuffles, votes, atomics, fast-math and bit intrinsics
//   simt_wmma.h       nvcuda::wmma 16x16x16 with the emulator's element layout
//   simt_mma.h        mma.sync m16n8k16 (f16, bf16) with the PTX ISA's fragment layout
//   simt_ldmatrix.h   ldmatrix m8n8 x1/x2/x4 (.trans) with the PTX ISA's layout
//   simt_async_copy.h cp.async 16-byte copies, visible only after the matching wait
//   simt_mbarrier.h   mbarrier phases, arrivals and transaction bytes; waits that yield
//   simt_named_barrier.h bar.sync / bar.arrive with an id and a thread count
//   simt_setmaxnreg.h setmaxnreg.inc/.dec: warpgroups trading registers
//   simt_tma.h        tensor maps and cp.async.bulk.tensor copies (TMA), landing a round late
//   simt_wgmma.h      wgmma.mma_async with matrix descriptors, fence/commit/wait
//   simt_streams.h    deferred streams, runtime call counters, launches per stream
//   simt_launch.h     DILATTN_LAUNCH, DILATTN_DYNAMIC_SHARED, DILATTN_SMEM_GUARD,
//                     simt::last_error_message(), the emulated device
//   simt_runtime.h    cudaMalloc/cudaMemcpy/streams/events/... as simt:: inline shims + macros
// Needs the CUDA include directory (for cuda_fp16.h) and threads; nothing to link.
// Checked by tests/emu/ (meson test -C build-emu --suite emu).
#ifndef DILATTN_SIMT_H
#define DILATTN_SIMT_H

#include "simt_types.h"
#include "simt_scheduler.h"
#include "simt_device.h"
#include "simt_wmma.h"
#include "simt_mma.h"
#include "simt_ldmatrix.h"
#include "simt_async_copy.h"
#include "simt_mbarrier.h"
#include "simt_named_barrier.h"
#include "simt_setmaxnreg.h"
#include "simt_tma.h"
#include "simt_wgmma.h"
#include "simt_launch.h"
#include "simt_runtime.h"

#endif  // DILATTN_SIMT_H
