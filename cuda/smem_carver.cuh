// smem_carver.cuh - SmemCarver, the bump allocator every kernel carves its dynamic shared
// memory with (forward_tile_loop.cuh, backward_tile_loop.cuh, mma_tile_smem.cuh), and the
// launchers' size query for it.
//
// All shared memory is dynamic (cuda_compat.cuh), carved into 128-byte aligned pieces at kernel
// start (WMMA needs 32-byte aligned tiles). With a null base the carver only counts: the bytes a
// launch asks for. Under the emulator each piece is followed by DILATTN_SMEM_GUARD_BYTES guard
// bytes (cuda_compat.cuh) that catch a tile written past its end; under nvcc there are none.
// Checked by tests/emu/test_emu_negative_smem_overrun.cpp (a tile written past its end fails the
// launch) and by every kernel test in tests/kernels/.
#ifndef DILATTN_SMEM_CARVER_CUH
#define DILATTN_SMEM_CARVER_CUH

#include <stddef.h>

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

struct SmemCarver {
  unsigned char* base;
  size_t used = 0;
  template <class X>
  __host__ __device__ __forceinline__ X* take(size_t count) {
    X* piece = base != nullptr ? reinterpret_cast<X*>(base + used) : nullptr;
    used += (count * sizeof(X) + 127) & ~static_cast<size_t>(127);
    if (DILATTN_SMEM_GUARD_BYTES > 0) {
      if (base != nullptr) DILATTN_SMEM_GUARD(base + used, DILATTN_SMEM_GUARD_BYTES);
      used += DILATTN_SMEM_GUARD_BYTES;
    }
    return piece;
  }
};

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_SMEM_CARVER_CUH
