// ldmatrix.cuh - the warp-level matrix load ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}
// .shared.b16 (sm_75+): N 8x8 matrices of 16-bit elements from shared memory straight into
// mma.sync's fragment registers, one instruction instead of 4N 32-bit (or 8N 16-bit) loads.
//
//   ldmatrix<N>(r, row)        r[i] = row g = lane / 4, columns 2t, 2t + 1 (t = lane % 4) of
//                              matrix i: mma's A fragment registers, and B's of a matrix stored
//                              n-major (K in S = Q K^T)
//   ldmatrix_trans<N>(r, row)  the same of the transposed matrix: rows 2t, 2t + 1 of column g,
//                              B's registers of a matrix stored k-major (V in P V)
// N = 1, 2 or 4. Lane 8i + j passes the address of row j of matrix i (16 bytes, 16-byte
// aligned, in shared memory); lanes 8N .. 31 pass anything. All 32 lanes call it together.
//
// The layout is the PTX ISA's, section "Warp-level matrix load instruction: ldmatrix"; the
// emulator implements it (emu/simt_ldmatrix.h, which states it lane by lane). Under nvcc:
// inline PTX. Checked by tests/emu/test_emu_ldmatrix.cpp and, through cuda/forward_mma.cu,
// tests/kernels/.
#ifndef DILATTN_LDMATRIX_CUH
#define DILATTN_LDMATRIX_CUH

#include <stdint.h>

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <int N, bool Trans>
__device__ __forceinline__ void ldmatrix_m8n8(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef __CUDACC__
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  if constexpr (N == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(a));
  if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if constexpr (N == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
  simt::ldmatrix_m8n8<N, Trans>(r, row);
#endif
}

template <int N>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row) {
  ldmatrix_m8n8<N, false>(r, row);
}
template <int N>
__device__ __forceinline__ void ldmatrix_trans(uint32_t (&r)[N], const void* row) {
  ldmatrix_m8n8<N, true>(r, row);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_LDMATRIX_CUH
