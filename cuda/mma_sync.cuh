// mma_sync.cuh - the warp-level tensor-core product mma.sync.aligned.m16n8k16.row.col with f16
// or bf16 operands and f32 accumulators, and the packing of two 16-bit elements into the
// 32-bit registers its fragments are made of.
//
//   mma_m16n8k16<T>(d, a, b, c)   d = a b + c for the warp's 16x8 tile (T = __half or
//                                 __nv_bfloat16); a: uint32_t[4], b: uint32_t[2], c, d: float[4]
//                                 (d may be c). All 32 lanes call it together.
//   pack2<T>(lo, hi)              two elements in one register, lo in the low half
//   load_pair<T>(p)               p[0], p[1] (4-byte aligned) as one register
//   mma_m16n8k8_tf32(d, a, b, c)  d = a b + c, mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32:
//                                 a: uint32_t[4], b: uint32_t[2], one .tf32 element (an f32 bit
//                                 pattern, of which the tensor core reads the top 19 bits) each
//   cvt_rna_tf32(x)               cvt.rna.tf32.f32: x rounded to TF32 (nearest, ties away)
//
// The fragment layout (which lane holds which element) is the PTX ISA's, section "Matrix
// Fragments for mma.m16n8k16 with floating point type"; emu/simt_mma.h states it and
// implements it for the emulator (and the m16n8k8 .tf32 one, section "Matrix Fragments for
// mma.m16n8k8"), and cuda/forward_mma.cu relies on it (the C fragment of
// S = Q K^T is reused as the A fragment of P V). Under nvcc: inline PTX (sm_80 and newer).
// Checked by tests/emu/test_emu_mma.cpp and, through the kernels (forward_mma.cu,
// forward_mma_tf32.cu), tests/kernels/.
#ifndef DILATTN_MMA_SYNC_CUH
#define DILATTN_MMA_SYNC_CUH

#include <stdint.h>
#include <string.h>

#include "cuda_compat.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T>
__device__ __forceinline__ void mma_m16n8k16(float* d, const uint32_t* a, const uint32_t* b,
                                             const float* c);

#ifdef __CUDACC__
template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float* d, const uint32_t* a,
                                                     const uint32_t* b, const float* c) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}
template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float* d, const uint32_t* a,
                                                            const uint32_t* b, const float* c) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}
#else
template <>
inline void mma_m16n8k16<__half>(float* d, const uint32_t* a, const uint32_t* b,
                                 const float* c) {
  simt::mma_m16n8k16<__half>(d, a, b, c);
}
template <>
inline void mma_m16n8k16<__nv_bfloat16>(float* d, const uint32_t* a, const uint32_t* b,
                                        const float* c) {
  simt::mma_m16n8k16<__nv_bfloat16>(d, a, b, c);
}
#endif

#ifdef __CUDACC__
__device__ __forceinline__ void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b,
                                                 const float* c) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ uint32_t cvt_rna_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
#else
inline void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
  simt::mma_m16n8k8_tf32(d, a, b, c);
}
inline uint32_t cvt_rna_tf32(float x) { return simt::cvt_rna_tf32(x); }
#endif

// Two 16-bit elements as one register, `lo` in bits 0..15 (the lower-indexed element).
template <class T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  uint16_t l, h;
  memcpy(&l, static_cast<const void*>(&lo), 2);
  memcpy(&h, static_cast<const void*>(&hi), 2);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// p[0] and p[1] as one register; p is 4-byte aligned.
template <class T>
__device__ __forceinline__ uint32_t load_pair(const T* p) {
#ifdef __CUDACC__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t r;
  memcpy(&r, static_cast<const void*>(p), 4);  // the host compiler's aliasing rules: no uint32_t read of __half storage
  return r;
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_SYNC_CUH
