// wgmma.cuh - Hopper's warpgroup matrix multiply (sm_90a): wgmma.mma_async with shared-memory
// matrix descriptors, wgmma.fence, wgmma.commit_group and wgmma.wait_group, one source for nvcc
// (inline PTX) and the emulator (emu/simt_wgmma.h).
//
//   make_wgmma_descriptor(address, lbo, sbo, swizzle)
//                                     the 64-bit matrix descriptor of an operand tile at window
//                                     address `address` (16-byte aligned); leading and stride
//                                     dimension byte offsets in bytes (multiples of 16); base
//                                     offset 0
//   wgmma_ss<T, N, ScaleA, ScaleB, TransA, TransB>(d, desc_a, desc_b, scale_d)
//                                     d = A B (+ d when scale_d != 0), m64nNk16, A and B from
//                                     descriptors; T = __half or __nv_bfloat16; d: float[N / 2];
//                                     ScaleA/B +-1 (negate A or B); TransA/B 0 K-major, 1 MN-major
//   wgmma_rs<T, N, ScaleA, ScaleB, TransB>(d, a, desc_b, scale_d)
//                                     the same with A from four registers a[4]
//   wgmma_fence()                     wgmma.fence: before the first wgmma, and between any access
//                                     to d or a and a wgmma using them
//   wgmma_commit_group()              closes the warpgroup's uncommitted wgmmas into a group
//   wgmma_wait_group<N>()             waits until at most the newest N groups are pending; only
//                                     then d holds the result (and the operands may change)
//   wgmma_fence_operand<Count>(regs)  nvcc only: keeps the compiler from moving accesses to
//                                     Count registers (float or uint32_t) across it; call on d
//                                     after the wait and before the wgmma (as CUTLASS's
//                                     warpgroup_fence_operand); nothing under the emulator
//
// All 128 threads of a warpgroup (threads 128i .. 128i + 127) call each of these together with
// the same arguments (the descriptors too). The FlashAttention-3 forward's products:
//   S = Q K^T   wgmma_ss<T, 64 or 128>(s, desc(Q), desc(K), accumulate): Q (64 x d) and K
//               (n x d) K-major, typically 128B-swizzled, one call per 16 columns of d
//   O += P V    wgmma_rs<T, d, 1, 1, 1>(o, p, desc(V), 1): P from registers (its A fragment),
//               V (n x d, d contiguous) N-major (TransB = 1)
// The layouts (register fragments; canonical shared-memory layouts for each swizzle and
// major-ness; the descriptor's fields) are stated and checked in emu/simt_wgmma.h, from the PTX
// ISA sections "Register Fragments and Shared Memory Matrix Layouts", "Major-ness supported by
// Strides", "Canonical Layouts" and "Matrix Descriptor Format".
// Under nvcc: inline PTX for N = 8, 16, 32, 64, 128 and 256 (add a DILATTN_WGMMA_PTX line for
// another); the emulator takes any N, a multiple of 8 in 8 .. 256.
// Shared addresses (shared_address) and the fence after ordinary stores to an operand
// (fence_proxy_async_shared, not needed after a TMA load): cuda/shared_address.cuh.
// Checked by tests/emu/test_emu_wgmma.cpp.
#ifndef DILATTN_WGMMA_CUH
#define DILATTN_WGMMA_CUH

#include <stdint.h>

#include <type_traits>

#include "cuda_compat.cuh"
#include "shared_address.cuh"
#ifndef __CUDACC__
#include "simt_wgmma.h"
#endif

// The PTX is emitted only where nvcc compiles device code for sm_90a (wgmma is an
// architecture-specific feature: __CUDA_ARCH_FEAT_SM90_ALL). In nvcc's other passes (another
// target in the build, or the compute_90 PTX that nvcc 13 adds for -arch=sm_90a) the calls trap,
// so a file holding a Hopper kernel still builds for every target.
#if defined(__CUDACC__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DILATTN_WGMMA_SM90A 1
#else
#define DILATTN_WGMMA_SM90A 0
#endif

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// The descriptor's layout field (bits 62-63), as the PTX ISA numbers it.
enum class WgmmaSwizzle : uint32_t { none = 0, bytes128 = 1, bytes64 = 2, bytes32 = 3 };

// Matrix Descriptor Format: bits 0-13 start address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4,
// 49-51 base offset (0 here), 62-63 the swizzle. Under the emulator a value the fields cannot
// hold (not a multiple of 16, 2^18 or more) fails the launch; the GPU would drop its low bits.
__device__ __forceinline__ uint64_t make_wgmma_descriptor(uint32_t address, uint32_t lbo,
                                                          uint32_t sbo, WgmmaSwizzle swizzle) {
#ifdef __CUDACC__
  return static_cast<uint64_t>((address & 0x3ffffu) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3ffffu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3ffffu) >> 4) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
#else
  return simt::wgmma_descriptor(address, lbo, sbo, static_cast<int>(swizzle));
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if DILATTN_WGMMA_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
  __trap();
#else
  simt::wgmma_fence();
#endif
}

__device__ __forceinline__ void wgmma_commit_group() {
#if DILATTN_WGMMA_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
  __trap();
#else
  simt::wgmma_commit_group();
#endif
}

template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(N >= 0, "wgmma.wait_group N counts pending groups");
#if DILATTN_WGMMA_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDACC__)
  __trap();
#else
  simt::wgmma_wait_group(N);
#endif
}

// An empty asm that reads and writes each register: the compiler cannot move the registers'
// uses across it, nor across the wgmma.wait_group before it (both are volatile asm).
template <int Count, class Reg>
__device__ __forceinline__ void wgmma_fence_operand(Reg* regs) {
  static_assert(std::is_same<Reg, float>::value || std::is_same<Reg, uint32_t>::value,
                "wgmma operands are float accumulators or uint32_t A registers");
#ifdef __CUDACC__
  DILATTN_UNROLL
  for (int i = 0; i < Count; ++i) {
    if constexpr (std::is_same<Reg, float>::value)
      asm volatile("" : "+f"(regs[i])::"memory");
    else
      asm volatile("" : "+r"(regs[i])::"memory");
  }
#else
  (void)regs;
#endif
}

namespace wgmma_detail {

template <class T>
struct IsBf16 {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                "wgmma with f32 accumulators: T is __half or __nv_bfloat16");
  static constexpr bool value = std::is_same<T, __nv_bfloat16>::value;
};

template <int N, int ScaleA, int ScaleB, int TransA, int TransB>
struct ValidShapeAndImmediates {
  static constexpr bool value = N % 8 == 0 && N >= 8 && N <= 256 &&
                                (ScaleA == 1 || ScaleA == -1) && (ScaleB == 1 || ScaleB == -1) &&
                                (TransA == 0 || TransA == 1) && (TransB == 0 || TransB == 1);
};

#ifdef __CUDACC__
// The inline PTX of wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T for one N: the N / 2
// accumulators are operands %0 .. %(N / 2 - 1) ("+f": D is read when scale-d is true), the
// others follow them; scale-d is a predicate set from the runtime int. One DILATTN_WGMMA_PTX
// line per N (the operand numbers written out by a script): the macro listing the accumulator
// operands; for the descriptor form (ss) and the register form (rs) scale-d's operand and the
// text after the accumulators; the accumulators' text.
template <int N>
struct WgmmaPtx;  // no PTX for this N: add a DILATTN_WGMMA_PTX line below

#define DILATTN_WGMMA_D4(I) "+f"(d[I]), "+f"(d[I + 1]), "+f"(d[I + 2]), "+f"(d[I + 3])
#define DILATTN_WGMMA_D8(I) DILATTN_WGMMA_D4(I), DILATTN_WGMMA_D4(I + 4)
#define DILATTN_WGMMA_D16(I) DILATTN_WGMMA_D8(I), DILATTN_WGMMA_D8(I + 8)
#define DILATTN_WGMMA_D32(I) DILATTN_WGMMA_D16(I), DILATTN_WGMMA_D16(I + 16)
#define DILATTN_WGMMA_D64(I) DILATTN_WGMMA_D32(I), DILATTN_WGMMA_D32(I + 32)
#define DILATTN_WGMMA_D128(I) DILATTN_WGMMA_D64(I), DILATTN_WGMMA_D64(I + 64)

#define DILATTN_WGMMA_ASM(N, TYPE, D_OPERANDS, SCALE_D, AFTER_D, D_REGS, ...)              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                        \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " D_REGS \
                   AFTER_D "}\n"                                                            \
               : D_OPERANDS(0)                                                              \
               : __VA_ARGS__)

#define DILATTN_WGMMA_PTX(N, D_OPERANDS, SS_SCALE_D, SS_AFTER_D, RS_SCALE_D, RS_AFTER_D,     \
                          D_REGS)                                                           \
  template <>                                                                               \
  struct WgmmaPtx<N> {                                                                      \
    template <bool Bf16, int ScaleA, int ScaleB, int TransA, int TransB>                    \
    static __device__ __forceinline__ void ss(float* d, uint64_t desc_a, uint64_t desc_b,  \
                                              int scale_d) {                                \
      if constexpr (Bf16) {                                                                 \
        DILATTN_WGMMA_ASM(N, "bf16", D_OPERANDS, SS_SCALE_D, SS_AFTER_D, D_REGS,            \
                          "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(ScaleA), "n"(ScaleB), \
                          "n"(TransA), "n"(TransB));                                        \
      } else {                                                                              \
        DILATTN_WGMMA_ASM(N, "f16", D_OPERANDS, SS_SCALE_D, SS_AFTER_D, D_REGS,             \
                          "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(ScaleA), "n"(ScaleB), \
                          "n"(TransA), "n"(TransB));                                        \
      }                                                                                     \
    }                                                                                       \
    template <bool Bf16, int ScaleA, int ScaleB, int TransB>                                \
    static __device__ __forceinline__ void rs(float* d, const uint32_t* a, uint64_t desc_b, \
                                              int scale_d) {                                \
      if constexpr (Bf16) {                                                                 \
        DILATTN_WGMMA_ASM(N, "bf16", D_OPERANDS, RS_SCALE_D, RS_AFTER_D, D_REGS, "r"(a[0]), \
                          "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),       \
                          "n"(ScaleA), "n"(ScaleB), "n"(TransB));                           \
      } else {                                                                              \
        DILATTN_WGMMA_ASM(N, "f16", D_OPERANDS, RS_SCALE_D, RS_AFTER_D, D_REGS, "r"(a[0]),  \
                          "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),       \
                          "n"(ScaleA), "n"(ScaleB), "n"(TransB));                           \
      }                                                                                     \
    }                                                                                       \
  };

DILATTN_WGMMA_PTX(8, DILATTN_WGMMA_D4,
                  "%6", ", %4, %5, p, %7, %8, %9, %10;\n",
                  "%9", ", {%4, %5, %6, %7}, %8, p, %10, %11, %12;\n",
                  "{%0, %1, %2, %3}")
DILATTN_WGMMA_PTX(16, DILATTN_WGMMA_D8,
                  "%10", ", %8, %9, p, %11, %12, %13, %14;\n",
                  "%13", ", {%8, %9, %10, %11}, %12, p, %14, %15, %16;\n",
                  "{%0, %1, %2, %3, %4, %5, %6, %7}")
DILATTN_WGMMA_PTX(32, DILATTN_WGMMA_D16,
                  "%18", ", %16, %17, p, %19, %20, %21, %22;\n",
                  "%21", ", {%16, %17, %18, %19}, %20, p, %22, %23, %24;\n",
                  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                  "%12, %13, %14, %15}")
DILATTN_WGMMA_PTX(64, DILATTN_WGMMA_D32,
                  "%34", ", %32, %33, p, %35, %36, %37, %38;\n",
                  "%37", ", {%32, %33, %34, %35}, %36, p, %38, %39, %40;\n",
                  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                  "%24, %25, %26, %27, %28, %29, %30, %31}")
DILATTN_WGMMA_PTX(128, DILATTN_WGMMA_D64,
                  "%66", ", %64, %65, p, %67, %68, %69, %70;\n",
                  "%69", ", {%64, %65, %66, %67}, %68, p, %70, %71, %72;\n",
                  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
                  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
                  "%60, %61, %62, %63}")
DILATTN_WGMMA_PTX(256, DILATTN_WGMMA_D128,
                  "%130", ", %128, %129, p, %131, %132, %133, %134;\n",
                  "%133", ", {%128, %129, %130, %131}, %132, p, %134, %135, %136;\n",
                  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
                  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
                  "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
                  "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
                  "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
                  "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
                  "%120, %121, %122, %123, %124, %125, %126, %127}")

#undef DILATTN_WGMMA_PTX
#undef DILATTN_WGMMA_ASM
#undef DILATTN_WGMMA_D128
#undef DILATTN_WGMMA_D64
#undef DILATTN_WGMMA_D32
#undef DILATTN_WGMMA_D16
#undef DILATTN_WGMMA_D8
#undef DILATTN_WGMMA_D4
#endif  // __CUDACC__

}  // namespace wgmma_detail

template <class T, int N, int ScaleA = 1, int ScaleB = 1, int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float* d, uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  static_assert(wgmma_detail::ValidShapeAndImmediates<N, ScaleA, ScaleB, TransA, TransB>::value,
                "wgmma m64nNk16: N a multiple of 8 in 8..256, scales +-1, transposes 0 or 1");
  constexpr bool bf16 = wgmma_detail::IsBf16<T>::value;
#if DILATTN_WGMMA_SM90A
  wgmma_detail::WgmmaPtx<N>::template ss<bf16, ScaleA, ScaleB, TransA, TransB>(d, desc_a, desc_b,
                                                                               scale_d);
#elif defined(__CUDACC__)
  (void)bf16, (void)d, (void)desc_a, (void)desc_b, (void)scale_d;
  __trap();
#else
  (void)bf16;
  simt::wgmma_m64k16<T>(N, d, nullptr, desc_a, desc_b, scale_d, ScaleA, ScaleB, TransA, TransB);
#endif
}

template <class T, int N, int ScaleA = 1, int ScaleB = 1, int TransB = 0>
__device__ __forceinline__ void wgmma_rs(float* d, const uint32_t* a, uint64_t desc_b,
                                         int scale_d) {
  static_assert(wgmma_detail::ValidShapeAndImmediates<N, ScaleA, ScaleB, 0, TransB>::value,
                "wgmma m64nNk16: N a multiple of 8 in 8..256, scales +-1, transpose 0 or 1");
  constexpr bool bf16 = wgmma_detail::IsBf16<T>::value;
#if DILATTN_WGMMA_SM90A
  wgmma_detail::WgmmaPtx<N>::template rs<bf16, ScaleA, ScaleB, TransB>(d, a, desc_b, scale_d);
#elif defined(__CUDACC__)
  (void)bf16, (void)d, (void)a, (void)desc_b, (void)scale_d;
  __trap();
#else
  (void)bf16;
  simt::wgmma_m64k16<T>(N, d, a, 0, desc_b, scale_d, ScaleA, ScaleB, 0, TransB);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_WGMMA_CUH
