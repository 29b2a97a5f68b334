// forward_mma_tf32.cu - the tensor-core forward kernel for f32: one branch of dense, dilated or
// block-sparse attention (SPEC 2-4), head dims 64 and 128, on mma.sync m16n8k8 with TF32
// operands (cuda/mma_sync.cuh) and f32 accumulation, within SPEC 8's f32 tolerance by 3xTF32.
//
// 3xTF32. The tensor core reads 10 of an operand's 23 mantissa bits; one TF32 product per f32
// product (plain TF32) misses SPEC 8's f32 bound (tests/kernels/test_tf32_split.cpp shows it).
// So each f32 x is split x = big + small, big = x with its low 13 bits dropped (exact, never
// overflows), small = tf32(x - big) (x - big is exact in f32), and a b is taken as
// small_a big_b + big_a small_b + big_a big_b: three mma, f32 accumulation, the small terms
// first; the dropped small_a small_b is below 2^-20 |a b|. Both products are split: S = Q K^T
// and O += P V (P is f32 in registers). An infinite x gets small = 0 (inf - inf would be NaN),
// and meets the other operand only through big_a big_b (Tf32Operand::big_finite).
// kProducts = 1 is plain TF32 (big rounded to nearest): only the test above launches it.
//
// The structure is forward_mma.cu's (read its header): one block per (query tile, batch,
// head), one warp per 16 query rows, Q in registers (f32, split per chunk), K and V chunks
// double-buffered by cp.async in the same chunk loop (cuda/mma_chunk_loop.cuh), the online
// softmax base 2 (cuda/mma_rows.cuh), one branch writes O and LSE directly, several merge into
// the workspace. What differs (issue_tf32_chunk, tf32_warp_chunk):
//   - Tiles. f32 rows are twice f16's bytes. D = 64: 8 warps, BR = 128 rows, BC = 64 keys;
//     D = 128: 4 warps, BR = 64, BC = 32 keys a chunk. Shared memory (two chunks of K and V,
//     Q staged through the second, and the shared-pair weights' table, 32 bytes a row):
//     82,688 and 74,496 bytes a block, within the 99 KB opt-in of sm_86/89, sm_80's 163 KB and
//     sm_90's 227 KB. (BC = 64 at D = 128 would need 132 KiB; D = 128 keeps double buffering
//     and halves the chunk.)
//   - Rows are padded by 4 floats (stride = 4 banks mod 32): K's fragment words (row g,
//     column t and t + 4) and V's (rows 2t and 2t + 1, column g) fall in 32 distinct banks.
//   - P as an A fragment. m16n8k8's A fragment holds columns t and t + 4, S's C fragment
//     columns 2t and 2t + 1 (PTX ISA, "Matrix Fragments for mma.m16n8k8"). The sum over keys
//     does not care about their order, so k = t is taken to be key 2t and k = t + 4 key 2t + 1:
//     P's A fragment is the lane's own C registers {c0, c2, c1, c3}, and V's B fragment reads
//     rows 2t and 2t + 1 to match. No shuffles.
// Dropout (SPEC 11) as in forward_mma.cu: the dropout instance multiplies P by M_ij before P V.
// The variant instance (SPEC 10.1, 10.3) as in forward_mma.cu (cuda/mma_variants.cuh).
//
// Launched by cuda/launch.cu through tf32_forward (kernels.h; kernel_choice.h: f32, D 64 or
// 128, sm_80+). Checked by tests/kernels/test_forward_kernels.cpp and test_nonfinite_kernels.cpp
// (emulator, three thread orders, against the reference), test_tf32_split.cpp (the split is
// needed) and tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "async_copy.cuh"
#include "dropout_tile.cuh"
#include "forward_outputs.cuh"
#include "kernels.h"
#include "mma_chunk_loop.cuh"
#include "mma_rows.cuh"
#include "mma_sync.cuh"
#include "mma_unseen_pairs.cuh"
#include "mma_variants.cuh"
#include "mma_tile_smem.cuh"
#include "tf32_split.cuh"

// nvcc leaves the D = 128 loops over Q's, O's and S's fragments rolled, which puts those
// register arrays in local memory (a 320-byte stack frame); unrolled they stay in registers.
#ifdef __CUDACC__
#define DILATTN_TF32_UNROLL _Pragma("unroll")
#else
#define DILATTN_TF32_UNROLL
#endif

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- the tile's shape
// D = 64: 8 warps, 64-key chunks; D = 128: 4 warps, 32-key chunks (header); rows padded by 4
// floats (mma_tile_smem.cuh).
// Variants: the instance with SPEC 10.1's window, softcap and ALiBi and SPEC 10.3's sinks
// (cuda/mma_variants.cuh), which kernel_choice.h picks for a problem with any of them.
template <int D, bool Variants = false>
using Tf32Tile = MmaTileSmem<float, D == 64 ? 8 : 4, D == 64 ? 64 : 32, D + 4, Variants>;

template <int D, bool Variants = false>
inline size_t tf32_smem_bytes() {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  return mma_tile_smem_bytes<Tf32Tile<D, Variants>>();
}

// ---------------------------------------------------------------- loads
// Keys c0 .. c0 + cn - 1 of a span (rows first + step * (c0 + c)) of K and V into one buffer;
// rows cn .. BC-1 zero, so P V there adds exact zeros. 16-byte pieces (4 floats) by cp.async,
// or element by element when the rows are not 16-byte pieces (kv_vec16 = 0).
template <int D>
__device__ __forceinline__ void issue_tf32_chunk(const ForwardParams& p, const float* kb,
                                                 const float* vb, int64_t first, int64_t step,
                                                 int64_t c0, int64_t cn, float* k, float* v) {
  using Tile = Tf32Tile<D>;
  constexpr int kPieces = D / 4;
  const int tid = static_cast<int>(threadIdx.x);
  for (int idx = tid; idx < Tile::kBc * kPieces; idx += Tile::kThreads) {
    const int c = idx / kPieces, d0 = (idx % kPieces) * 4;
    float* kd = k + c * Tile::kStride + d0;
    float* vd = v + c * Tile::kStride + d0;
    if (c >= cn) {
      for (int e = 0; e < 4; ++e) kd[e] = vd[e] = 0.0f;
      continue;
    }
    const int64_t j = first + step * (c0 + c);
    if (p.kv_vec16) {
      async_copy_16(kd, kb + j * p.k_stride[1] + d0);
      async_copy_16(vd, vb + j * p.v_stride[1] + d0);
    } else {
      for (int e = 0; e < 4; ++e) {
        kd[e] = kb[j * p.k_stride[1] + (d0 + e) * p.k_stride[3]];
        vd[e] = vb[j * p.v_stride[1] + (d0 + e) * p.v_stride[3]];
      }
    }
  }
}

// ---------------------------------------------------------------- one chunk, one warp
// qf[kk]: the lane's A fragment of Q for dims 8kk .. 8kk + 7 (a0 = row 0 dim t, a1 = row 1
// dim t, a2, a3 the same at dim t + 4). Variants: w and vr give each score's window range, key
// and row (mma_variants.cuh). after_softmax(s): what the kernel does to P before P V (dropout:
// SPEC 11's factors).
// lw: the lane's shared-pair weights (attention_tile.cuh lane_weights), taken where Weighted
// (the plain instance), as forward_mma.cu.
template <int D, int kProducts, bool Variants, bool Weighted, class AfterSoftmax>
__device__ __forceinline__ void tf32_warp_chunk(const ForwardParams& p, const float (&qf)[D / 8][4],
                                                const float* k, const float* v, int keys0,
                                                int keys1, mma_rows::RowState<D>& st,
                                                const float (&lw)[2][2],
                                                const VariantRows& vr, AfterSoftmax after_softmax,
                                                const ChunkWindow& w = ChunkWindow{}) {
  using Tile = Tf32Tile<D>;
  constexpr int kTiles = Tile::kBc / 8;  // 8-key column blocks of S
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  // S = Q K^T: B[k][n] = K[key 8n + g][dim 8kk + k], k = t and t + 4.
  float s[kTiles][4];
  for (int n = 0; n < kTiles; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  DILATTN_TF32_UNROLL
  for (int kk = 0; kk < D / 8; ++kk) {
    const Tf32Operand<4> a = to_tf32<kProducts>(qf[kk]);
    for (int n = 0; n < kTiles; ++n) {
      const float* krow = k + (n * 8 + g) * Tile::kStride + kk * 8 + t;
      const float kf[2] = {krow[0], krow[4]};
      mma_f32<kProducts>(s[n], a, to_tf32<kProducts>(kf));
    }
  }
  // The NaN rule (mma_unseen_pairs.cuh): a V row some row of the warp skips that is not finite
  // would reach it as 0 * NaN on tensor cores; then P V is summed pair by pair, in f32.
  if constexpr (Variants) {
    softmax_chunk_variant<kTiles, D>(p, s, keys0, keys1, w, vr, st);
    after_softmax(s);
    if (window_unseen_values_not_finite<float, D, Tile::kStride, Tile::kBc>(v, keys0, keys1,
                                                                            w)) {
      exact_rows_product<float, D, Tile::kStride, Tile::kBc>(st.o, s, v, [&](int row, int c) {
        return row < 8 ? c >= w.from0 && c < keys0 : c >= w.from1 && c < keys1;
      });
      return;
    }
  } else {
    if constexpr (Weighted)
      mma_rows::softmax_chunk<kTiles, D>(p, s, keys0, keys1, st, lw);
    else
      mma_rows::softmax_chunk<kTiles, D>(p, s, keys0, keys1, st);
    after_softmax(s);
    if (unseen_values_not_finite<float, D, Tile::kStride, Tile::kBc>(v, keys0, keys1)) {
      exact_rows_product<float, D, Tile::kStride, Tile::kBc>(
          st.o, s, v, [&](int row, int c) { return c < (row < 8 ? keys0 : keys1); });
      return;
    }
  }
  // O += P V over the chunk's 8-key tiles, k = t standing for key 2t and k = t + 4 for key
  // 2t + 1 (header): A = {c0, c2, c1, c3}, B[k][n] = V[key][dim 8nd + g].
  DILATTN_TF32_UNROLL
  for (int n = 0; n < kTiles; ++n) {
    const float pf[4] = {s[n][0], s[n][2], s[n][1], s[n][3]};
    const Tf32Operand<4> a = to_tf32<kProducts>(pf);
    const float* vrow = v + (n * 8 + 2 * t) * Tile::kStride + g;
    DILATTN_TF32_UNROLL
    for (int nd = 0; nd < D / 8; ++nd) {
      const float vf[2] = {vrow[nd * 8], vrow[nd * 8 + Tile::kStride]};
      mma_f32<kProducts>(st.o[nd], a, to_tf32<kProducts>(vf));
    }
  }
}

// ---------------------------------------------------------------- the kernel
// Variants: the instance that runs SPEC 10.1's options and SPEC 10.3's sinks
// (mma_variants.cuh); Dropout: the one that multiplies each probability by its factor M_ij after
// the row's sum took it (SPEC 11, dropout_tile.cuh); the plain instance runs neither. A problem
// with both runs the SIMT kernels (kernel_choice.h).
template <int D, int kProducts, bool Variants = false, bool Dropout = false>
__global__ void forward_mma_tf32_kernel(ForwardParams p) {
  static_assert(kProducts == 3 || kProducts == 1, "3xTF32, or plain TF32 for the test");
  using Tile = Tf32Tile<D, Variants>;
  constexpr int BR = Tile::kBr, S = Tile::kStride;
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  SmemCarver carver{smem};
  Tile tl;
  tl.carve(carver);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);

  // 1. Rows, dilated gaps, Q.
  for (int r = tid; r < BR; r += Tile::kThreads) tl.rows[r] = tile_row(p, h, tile, r, BR);
  if (p.o != nullptr && p.kind == kKindDilated) write_dilated_gaps<float>(p, b, h, tile, BR);
  __syncthreads();
  bool any_row = false;
  for (int r = 0; r < BR; ++r) any_row = any_row || tl.rows[r] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only
  for (int idx = tid; idx < BR * D; idx += Tile::kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t i = tl.rows[r];
    tl.q()[r * S + d] = i >= 0 ? load_bnhd<float>(p.q, p.q_stride, b, i, h, d) : 0.0f;
  }
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // the lane's two tile rows
  const int64_t num_spans = tile_span_count(p, h, tile);
  // Shared pairs (SPEC 3.4; the plain instance only): as forward_mma.cu.
  TileShares shares;
  if constexpr (!Variants && !Dropout) {
    shares = tile_shares(p, h, tl.rows, r0, r1);
    tile_log_weights<Tile::kBr>(p, shares.lane_w, r0, tl.log_weights);  // read by the chunks
  }
  // The chunks read the table through this copy of its pointer: a chunk function that reads the
  // tile's own fields keeps the whole tile in memory, and ptxas then loses every pointer's
  // address space (generic loads and stores in place of shared ones).
  const float* log_weights = tl.log_weights;
  if (tid < 32 && num_spans > 0) read_tile_span(p, tl, h, tile, 0, 0, shares.cut_or_null());
  __syncthreads();
  float qf[D / 8][4];
  for (int kk = 0; kk < D / 8; ++kk) {
    const float* q0 = tl.q() + r0 * S + kk * 8 + t;
    const float* q1 = tl.q() + r1 * S + kk * 8 + t;
    qf[kk][0] = q0[0];
    qf[kk][1] = q1[0];
    qf[kk][2] = q0[4];
    qf[kk][3] = q1[4];
  }
  mma_rows::RowState<D> st;
  mma_rows::start(st);
  VariantRows vr;
  if constexpr (Variants) vr = variant_rows(p, b, h, tl.rows[r0], tl.rows[r1]);

  // 2-3. The chunks (mma_chunk_loop.cuh), each with its span's weights (lw).
  const float* kb = static_cast<const float*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[2];
  const float* vb = static_cast<const float*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[2];
  mma_chunk_loop(
      p, tl, h, tile, num_spans, r0, r1, shares.cut_or_null(),
      [&](int64_t first, int64_t step, int64_t c0, int64_t cn, float* k, float* v) {
        issue_tf32_chunk<D>(p, kb, vb, first, step, c0, cn, k, v);
      },
      [&](const float* k, const float* v, int keys0, int keys1, const ChunkKeys& at,
          const auto&... window) {
        float lw[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        if constexpr (!Variants && !Dropout)
          chunk_log_weights_of<Tile::kBr>(log_weights, at.span, r0, lw);
        tf32_warp_chunk<D, kProducts, Variants, !Variants && !Dropout>(
            p, qf, k, v, keys0, keys1, st, lw, vr,
            [&](auto& s) {
              if constexpr (Dropout)
                dropout_row_fragments(p, b, h, {tl.rows[r0], tl.rows[r1]}, {keys0, keys1},
                                      at.first, at.step, at.c0, s);
            },
            window...);
      });

  // 4. Finish the lane's two rows.
  mma_rows::finish_row<float, D>(p, b, h, tl.rows[r0], 0, st);
  mma_rows::finish_row<float, D>(p, b, h, tl.rows[r1], 1, st);
}

template __global__ void forward_mma_tf32_kernel<64, 3, false, false>(ForwardParams);
template __global__ void forward_mma_tf32_kernel<128, 3, false, false>(ForwardParams);
template __global__ void forward_mma_tf32_kernel<64, 3, true, false>(ForwardParams);
template __global__ void forward_mma_tf32_kernel<128, 3, true, false>(ForwardParams);
template __global__ void forward_mma_tf32_kernel<64, 3, false, true>(ForwardParams);
template __global__ void forward_mma_tf32_kernel<128, 3, false, true>(ForwardParams);

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <int D, bool Variants, bool Dropout>
ForwardKernel tf32_forward_of() {
  using Tile = Tf32Tile<D, Variants>;
  return ForwardKernel{forward_mma_tf32_kernel<D, 3, Variants, Dropout>,
                       tf32_smem_bytes<D, Variants>(), Tile::kBr, Tile::kThreads};
}

// forward_kernel_for picks MMA_TF32 for D = 64 and 128 only; variants and dropout are never both
// set (kernel_choice.h sends such problems to SIMT).
ForwardKernel tf32_forward(int64_t D, bool variants, bool dropout) {
  if (dropout)
    return D == 64 ? tf32_forward_of<64, false, true>() : tf32_forward_of<128, false, true>();
  if (variants)
    return D == 64 ? tf32_forward_of<64, true, false>() : tf32_forward_of<128, true, false>();
  return D == 64 ? tf32_forward_of<64, false, false>() : tf32_forward_of<128, false, false>();
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
