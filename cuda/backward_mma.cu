// backward_mma.cu - the tensor-core backward kernels (SPEC 6 over SPEC 2-4) for f16 and bf16,
// head dims 64 and 128, on mma.sync m16n8k16 (cuda/mma_sync.cuh) with ldmatrix fragments
// (cuda/ldmatrix.cuh) and f32 accumulation in registers.
//
// The loops, shared with the f32 kernels (backward_mma_tf32.cu), are mma_backward_loop.cuh's
// (read its header): a dQ pass over 64-row query tiles with K and V chunks streaming through
// cp.async buffers, a dK/dV pass over 64-key tiles with Q and dO chunks streaming, both with
// every gradient element summed by one lane (no atomics: bitwise repeatable), and the NaN rule
// kept on tensor cores. What this file adds is the products (MmaBackwardProducts):
//   scores       s += a b^T: a's 16 rows as the A operand (ldmatrix), b's rows as n-major B
//                operands (ldmatrix gives n tiles n, n + 1 at once), over D in k steps of 16;
//   accumulate   acc += x y: x's C fragments (n tiles 2kk, 2kk + 1) rounded to the input dtype
//                and repacked as the A fragment of k block kk, as FlashAttention rounds P and
//                dS; y's rows k-major, read with ldmatrix.trans.
// Chunks, as large as ptxas keeps in registers without spilling (tests/kernels/
// check_ptxas_spills.py): 32 keys (D = 64) or 64 (D = 128) in the dQ pass; 32 query rows in the
// dK/dV pass, where dK and dV take 2 x D / 2 registers a lane (the variant and dropout instances:
// 16 at D = 128, kKvRowsOptions). The dK/dV pass's K and V tiles are read as A fragments once a
// chunk for each of its two score products; at D = 64 the plain instances keep them in registers
// instead (kResidentKeys, 32 a lane): 8 of its 40 ldmatrix a warp and chunk fewer, 15% of the
// shared-memory wavefronts that bound it in the SASS model (bench/gpu/sass_model.py). The
// kernels say __launch_bounds__(128, 1): with the block size alone ptxas aimed at three blocks
// an SM (168 registers) and spilled.
// Shared memory rows are padded by 8 elements (16 bytes) so each ldmatrix reads 8 rows in 32
// distinct banks, as in forward_mma.cu.
//
// Launched through mma_backward (kernels.h). Checked by tests/kernels/test_backward_kernels.cpp
// and test_backward_nonfinite_kernels.cpp (emulator, three thread orders, against the reference;
// on a GPU by bench/gpu/first_light.sh) and tests/kernels/check_ptxas_spills.py (nvcc, no
// spills). Timed on an H200: bench/results/gpu_bench.h200.json.
#include <type_traits>

#include "kernels.h"
#include "ldmatrix.cuh"
#include "mma_backward_loop.cuh"
#include "mma_sync.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T, int D>
struct MmaBackwardProducts {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  using Input = T;
  static constexpr int kHeadDim = D, kStride = D + 8;
  // kKvRows: the plain dK/dV instances; kKvRowsOptions: the variant and dropout ones, whose
  // extra state leaves registers for 16 rows only at D = 128.
  static constexpr int kDqKeys = D == 64 ? 32 : 64, kKvRows = 32;
  static constexpr int kKvRowsOptions = D == 64 ? 32 : 16;
  static constexpr bool kQuadDraws = true;  // the dK/dV pass's dropout draws by lane groups
  // The plain dK/dV pass keeps its warp's K and V rows as A fragments in registers at D = 64
  // (2 x 16 a lane), read from shared memory once a block instead of once a chunk. At D = 128
  // they would take 64, more than the 32-row chunks leave.
  static constexpr bool kResidentKeys = D == 64;
  using KeyFrags = uint32_t[D / 16][4];

  // A lane's ldmatrix row address within a 16x16 block of a padded tile (as forward_mma.cu):
  // rows_first for an A operand stored row-major and for B operands read with .trans;
  // cols_first for B operands stored n-major (two adjacent 8-column n tiles per ldmatrix x4).
  struct Frags {
    int rows_first, cols_first;
  };
  static __device__ __forceinline__ Frags frags() {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    return Frags{((lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + 8 * (lane >> 4),
                 ((lane & 7) + 8 * (lane >> 4)) * kStride + 8 * ((lane >> 3) & 1)};
  }

  // a's 16 rows as A fragments, one a k step of 16 (the dK/dV pass's resident K and V).
  static __device__ __forceinline__ void a_frags(const Frags& f, KeyFrags& af, const T* a) {
    DILATTN_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix<4>(af[kk], a + f.rows_first + kk * 16);
  }

  // s += a b^T, a's 16 rows read from a padded tile (A a pointer) or resident (A KeyFrags).
  template <int kN, class A>
  static __device__ __forceinline__ void scores(const Frags& f, float (&s)[kN / 8][4], const A& a,
                                                const T* b) {
    const int frag_a = f.rows_first, frag_b = f.cols_first;
    DILATTN_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      if constexpr (std::is_pointer_v<A>) {
        ldmatrix<4>(af, a + frag_a + kk * 16);
      } else {
        for (int e = 0; e < 4; ++e) af[e] = a[kk][e];
      }
      DILATTN_UNROLL
      for (int n = 0; n < kN / 8; n += 2) {
        uint32_t bf[4];
        ldmatrix<4>(bf, b + frag_b + n * 8 * kStride + kk * 16);
        mma_m16n8k16<T>(s[n], af, bf, s[n]);
        mma_m16n8k16<T>(s[n + 1], af, bf + 2, s[n + 1]);
      }
    }
  }

  // Two C fragments (n tiles 2kk, 2kk + 1: 16 columns) in the input dtype as an A fragment over
  // those 16 columns (PTX layout: a[0], a[1] rows g, g + 8 of columns 2t..; a[2], a[3] of
  // columns 8 + 2t..).
  static __device__ __forceinline__ void c_pair_as_a(const float* lo, const float* hi,
                                                     uint32_t (&a)[4]) {
    a[0] = pack2(from_float<T>(lo[0]), from_float<T>(lo[1]));
    a[1] = pack2(from_float<T>(lo[2]), from_float<T>(lo[3]));
    a[2] = pack2(from_float<T>(hi[0]), from_float<T>(hi[1]));
    a[3] = pack2(from_float<T>(hi[2]), from_float<T>(hi[3]));
  }

  template <int kCols>
  static __device__ __forceinline__ void accumulate(const Frags& f, float (&acc)[D / 8][4],
                                                    const float (&x)[kCols / 8][4], const T* y) {
    const int frag_y = f.rows_first;
    DILATTN_UNROLL
    for (int kk = 0; kk < kCols / 16; ++kk) {
      uint32_t a[4];
      c_pair_as_a(x[2 * kk], x[2 * kk + 1], a);
      DILATTN_UNROLL
      for (int nd = 0; nd < D / 8; nd += 2) {
        uint32_t b[4];
        ldmatrix_trans<4>(b, y + frag_y + kk * 16 * kStride + nd * 8);
        mma_m16n8k16<T>(acc[nd], a, b, acc[nd]);
        mma_m16n8k16<T>(acc[nd + 1], a, b + 2, acc[nd + 1]);
      }
    }
  }
};

// Variants: the instances with SPEC 10.1's window, softcap and ALiBi (mma_backward_loop.cuh,
// cuda/mma_variants.cuh); Dropout: the ones that draw SPEC 11.3's factors. kernel_choice.h picks
// one or the other (a problem with both runs SIMT).
// The plain dQ kernel at D = 64 asks for three blocks an SM (at most 168 registers): it fits
// them (tests/kernels/check_ptxas_spills.py), and left to itself ptxas took 174 on sm_90 once
// the shared pairs' shift table came in, which would leave two.
template <class T, int D, bool Variants, bool Dropout>
__global__ void __launch_bounds__(128, D == 64 && !Variants && !Dropout ? 3 : 1)
    backward_dq_mma_kernel(BackwardParams bp) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  mma_backward_dq<MmaBackwardProducts<T, D>, Variants, Dropout>(bp, smem);
}

template <class T, int D, bool Variants, bool Dropout>
__global__ void __launch_bounds__(128, 1) backward_dkdv_mma_kernel(BackwardParams bp) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  mma_backward_dkdv<MmaBackwardProducts<T, D>, Variants, Dropout>(bp, smem);
}

#define DILATTN_BACKWARD_MMA_INSTANCES(V, DROP)                                          \
  template __global__ void backward_dq_mma_kernel<__half, 64, V, DROP>(BackwardParams);        \
  template __global__ void backward_dq_mma_kernel<__half, 128, V, DROP>(BackwardParams);       \
  template __global__ void backward_dq_mma_kernel<__nv_bfloat16, 64, V, DROP>(BackwardParams); \
  template __global__ void backward_dq_mma_kernel<__nv_bfloat16, 128, V, DROP>(BackwardParams);\
  template __global__ void backward_dkdv_mma_kernel<__half, 64, V, DROP>(BackwardParams);      \
  template __global__ void backward_dkdv_mma_kernel<__half, 128, V, DROP>(BackwardParams);     \
  template __global__ void backward_dkdv_mma_kernel<__nv_bfloat16, 64, V, DROP>(BackwardParams); \
  template __global__ void backward_dkdv_mma_kernel<__nv_bfloat16, 128, V, DROP>(BackwardParams);
DILATTN_BACKWARD_MMA_INSTANCES(false, false)
DILATTN_BACKWARD_MMA_INSTANCES(true, false)
DILATTN_BACKWARD_MMA_INSTANCES(false, true)
#undef DILATTN_BACKWARD_MMA_INSTANCES

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T, int D, bool Variants, bool Dropout>
BackwardKernels mma_backward_of() {
  using Products = MmaBackwardProducts<T, D>;
  return BackwardKernels{backward_dq_mma_kernel<T, D, Variants, Dropout>,
                         backward_dkdv_mma_kernel<T, D, Variants, Dropout>,
                         smem_bytes_of<DqSmem<Products, Variants>>(),
                         smem_bytes_of<DkdvSmem<Products, Variants, Dropout>>(),
                         kMmaBackwardRows,
                         kMmaBackwardKeys,
                         kMmaBackwardThreads,
                         true,
                         !Variants};
}

template <class T>
BackwardKernels mma_backward(int64_t D, bool variants, bool dropout) {  // D = 64 or 128
  if (dropout)
    return D == 64 ? mma_backward_of<T, 64, false, true>() : mma_backward_of<T, 128, false, true>();
  if (variants)
    return D == 64 ? mma_backward_of<T, 64, true, false>() : mma_backward_of<T, 128, true, false>();
  return D == 64 ? mma_backward_of<T, 64, false, false>() : mma_backward_of<T, 128, false, false>();
}

template BackwardKernels mma_backward<__half>(int64_t, bool, bool);
template BackwardKernels mma_backward<__nv_bfloat16>(int64_t, bool, bool);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
