// forward_mma.cu - the tensor-core forward kernel, FlashAttention-2 style: one branch of dense,
// dilated or block-sparse attention (SPEC 2-4) for f16 and bf16, head dims 64 and 128, on
// mma.sync m16n8k16 (cuda/mma_sync.cuh) with f32 accumulation.
//
// One block per (query tile of BR = 64 rows, batch, head); one warp per 16 query rows (4 warps);
// chunks of BC = 64 keys.
//   1. The tile's rows (tile_row, attention_tile.cuh); with one branch the dilated gaps
//      (forward_outputs.cuh). Q through shared memory into registers, as mma A fragments
//      (ldmatrix, cuda/ldmatrix.cuh), for the whole tile.
//   2. For each chunk of each key span (read_span: one span, or one per listed BSR block),
//      double-buffered (the loop is mma_chunk_loop.cuh, shared with forward_mma_tf32.cu): the
//      next chunk's K and V rows are copied 16 bytes at a time with cp.async
//      (cuda/async_copy.cuh, issue_chunk) while this one is computed; one __syncthreads a chunk.
//      Rows are gathered by the index rules (first + step * c: dilation is a row stride), so
//      cp.async serves every kind; a view whose D is not contiguous or whose rows are not 16-byte
//      aligned is loaded element by element instead (kv_vec16 = 0).
//   3. Per warp, in registers (warp_chunk): S = Q K^T (mma; K's B fragments by ldmatrix), scaled by
//      score_scale's pre and masked per row (-inf past the row's keys in the chunk, min(chunk
//      end, count - c0), computed once per chunk: the causal cut and the span's end, by
//      selection so a NaN key masked out stays out); online softmax
//      (lib/softmax_rules.h: max_nan, online_shift/prob/rescale, base 2), each row's
//      max and sum over the 4 lanes holding it;
//      O = alpha O + P V (mma; V's B fragments by ldmatrix .trans), where P is S's C fragments
//      rounded to the input dtype and repacked as A fragments (the PTX layout makes C tiles 2k,
//      2k+1 the A fragment k). A warp none of whose rows has a key in the chunk skips it.
//      The dropout instance multiplies P by each pair's factor M_ij before P V (SPEC 11,
//      dropout_tile.cuh's dropout_row_fragments); l has taken P already, so LSE is unchanged.
//      The variant instance applies SPEC 10.1's softcap and ALiBi to each score and its window
//      per row (a tile walks only the chunks its rows' windows reach), and joins SPEC 10.3's sinks
//      when a row is finished (cuda/mma_variants.cuh).
//   4. Finish each row: one branch: O / l and LSE straight to the caller's tensors
//      (forward_outputs.cuh); several dilated branches: merged into the workspace (SPEC 3/5).
//
// Shared memory rows are padded by 8 elements (16 bytes): each 8x8 matrix an ldmatrix reads,
// 8 rows of 16 bytes, then falls in 32 distinct banks (row stride = 4 banks mod 32;
// tests/kernels/test_smem_banks.cpp). The work per chunk is counted by bench/gpu/sass_model.py
// (modelled, bench/results/sass_model.sm80-sm90.txt). NaN (SPEC 13): a V row that is not finite
// among keys some row of the warp skips would reach that row as 0 * NaN on tensor cores, so
// such a chunk's P V is summed pair by pair (cuda/mma_unseen_pairs.cuh).
//
// Launched by cuda/launch.cu through mma_forward (kernels.h). Checked by
// tests/kernels/test_forward_kernels.cpp and tests/kernels/test_nonfinite_kernels.cpp (emulator,
// three thread orders, against the reference) and tests/kernels/check_ptxas_spills.py (nvcc, no
// spills).
#include "async_copy.cuh"
#include "dropout_tile.cuh"
#include "forward_outputs.cuh"
#include "kernels.h"
#include "ldmatrix.cuh"
#include "mma_chunk_loop.cuh"
#include "mma_rows.cuh"
#include "mma_sync.cuh"
#include "mma_unseen_pairs.cuh"
#include "mma_tile_smem.cuh"
#include "mma_variants.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- the tile's shape
// 4 warps (64 query rows), 64-key chunks; rows padded by 8 elements (mma_tile_smem.cuh: 76,544
// bytes at D = 128, 43,776 at D = 64, the shared-pair weights' table's 4 KiB included).
// Measured on an H200 (bench_gpu, N=8192, f16): at D = 64, 4 warps of 158 registers let three
// blocks share an SM (12 warps, against 8 for one 8-warp block) and ran dense 25%, causal 28%,
// block-sparse 44% and dilated 21% faster than 8 warps;
// 128-key chunks with 8 warps gained less (21% dense) and lost on block-sparse spans.
// Variants: the instance with SPEC 10.1's window, softcap and ALiBi and SPEC 10.3's sinks
// (cuda/mma_variants.cuh), which kernel_choice.h picks for a problem with any of them.
template <class T, int D, bool Variants = false>
using MmaTile = MmaTileSmem<T, 4, 64, D + 8, Variants>;

template <class T, int D, bool Variants>
inline size_t mma_smem_bytes() {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  return mma_tile_smem_bytes<MmaTile<T, D, Variants>>();
}

// ---------------------------------------------------------------- loads
// Keys c0 .. c0 + cn - 1 of a span (rows first + step * (c0 + c)) of K and V into one buffer;
// rows cn .. BC-1 zero, so P V there adds exact zeros. Each thread issues its 16-byte pieces,
// the same 8 dims d0 of every kRowsPerPass-th key; the caller commits them as one group.
template <class T, int D>
__device__ __forceinline__ void issue_chunk(const ForwardParams& p, const T* kb, const T* vb,
                                            int64_t first, int64_t step, int64_t c0, int64_t cn,
                                            T* k, T* v) {
  using Tile = MmaTile<T, D>;
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  constexpr int kRowsPerPass = Tile::kThreads / kPieces;
  const int tid = static_cast<int>(threadIdx.x), d0 = (tid % kPieces) * 8;
  const int64_t row0 = first + step * c0;  // the chunk's first key row
  for (int c = tid / kPieces; c < Tile::kBc; c += kRowsPerPass) {
    T* kd = k + c * Tile::kStride + d0;
    T* vd = v + c * Tile::kStride + d0;
    if (c >= cn) {
      for (int e = 0; e < 8; ++e) kd[e] = vd[e] = from_float<T>(0.0f);
      continue;
    }
    const int64_t j = row0 + step * c;
    if (p.kv_vec16) {
      async_copy_16(kd, kb + j * p.k_stride[1] + d0);
      async_copy_16(vd, vb + j * p.v_stride[1] + d0);
    } else {
      for (int e = 0; e < 8; ++e) {
        kd[e] = kb[j * p.k_stride[1] + (d0 + e) * p.k_stride[3]];
        vd[e] = vb[j * p.v_stride[1] + (d0 + e) * p.v_stride[3]];
      }
    }
  }
}

// ---------------------------------------------------------------- fragments by ldmatrix
// Every operand is a 16x16 block of a padded tile, read as ldmatrix's four 8x8 matrices; lane
// 8i + j addresses row j of matrix i, so its offset from the block's corner is fixed per lane.
// Q's A fragment (and V's B fragments for dim blocks nd, nd + 1) want matrix i at rows
// 8 (i % 2), columns 8 (i / 2) (frag_rows_first); K's B fragments for key tiles n, n + 1 want
// rows 8 (i / 2), columns 8 (i % 2) (frag_cols_first), so each fragment is two adjacent
// registers, as mma takes them.
template <class T, int D>
__device__ __forceinline__ int frag_rows_first(int lane) {
  return ((lane & 7) + 8 * ((lane >> 3) & 1)) * MmaTile<T, D>::kStride + 8 * (lane >> 4);
}
template <class T, int D>
__device__ __forceinline__ int frag_cols_first(int lane) {
  return ((lane & 7) + 8 * (lane >> 4)) * MmaTile<T, D>::kStride + 8 * ((lane >> 3) & 1);
}

// One chunk for one warp: S = Q K^T, mask and scale, the online softmax, O = alpha O + P V.
// keys0, keys1: how many of the chunk's first keys the lane's two rows take (the rest are
// masked); frag_k, frag_v: the lane's ldmatrix row offsets in K and V (frag_cols_first,
// frag_rows_first). Variants: w and vr give each score's window range, key and row
// (mma_variants.cuh). after_softmax(s): what the kernel does to P before P V (dropout instances:
// SPEC 11's factors; the others nothing).
// lw: the lane's shared-pair weights (attention_tile.cuh lane_weights), taken where Weighted
// (the plain instance); the others run the unweighted softmax, which holds no register for them.
template <class T, int D, bool Variants, bool Weighted, class AfterSoftmax>
__device__ __forceinline__ void warp_chunk(const ForwardParams& p, const uint32_t (&qf)[D / 16][4],
                                           const T* k, const T* v, int frag_k, int frag_v,
                                           int keys0, int keys1,
                                           mma_rows::RowState<D>& st, const float (&lw)[2][2],
                                           const VariantRows& vr, AfterSoftmax after_softmax,
                                           const ChunkWindow& w = ChunkWindow{}) {
  using Tile = MmaTile<T, D>;
  constexpr int kTiles = Tile::kBc / 8;  // 8-key column blocks of S
  float s[kTiles][4];
  for (int n = 0; n < kTiles; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  // B[k][n] = K[key n][dim k], stored n-major: one ldmatrix gives the B fragments of key
  // tiles n (matrices 0, 1: dims 16kk .. 16kk + 7, + 8 ..) and n + 1 (matrices 2, 3).
  for (int n = 0; n < kTiles; n += 2)
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldmatrix<4>(b, k + frag_k + n * 8 * Tile::kStride + kk * 16);
      mma_m16n8k16<T>(s[n], qf[kk], b, s[n]);
      mma_m16n8k16<T>(s[n + 1], qf[kk], b + 2, s[n + 1]);
    }
  // The NaN rule (mma_unseen_pairs.cuh): a V row some row of the warp skips that is not finite
  // would reach it as 0 * NaN on tensor cores; then P V is summed pair by pair.
  if constexpr (Variants) {
    softmax_chunk_variant<kTiles, D>(p, s, keys0, keys1, w, vr, st);
    after_softmax(s);
    if (window_unseen_values_not_finite<T, D, Tile::kStride, Tile::kBc>(v, keys0, keys1, w)) {
      exact_rows_product<T, D, Tile::kStride, Tile::kBc>(st.o, s, v, [&](int row, int c) {
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
    if (unseen_values_not_finite<T, D, Tile::kStride, Tile::kBc>(v, keys0, keys1)) {
      exact_rows_product<T, D, Tile::kStride, Tile::kBc>(
          st.o, s, v, [&](int row, int c) { return c < (row < 8 ? keys0 : keys1); });
      return;
    }
  }
  // P V: S's C tiles 2kk and 2kk + 1 are, in the input dtype, P's A fragment for keys
  // 16kk .. 16kk + 15 (PTX layout: a[0], a[1] rows g, g + 8 of columns 2t..; a[2], a[3] of
  // columns 2t + 8..). B[k][n] = V[key k][dim n], stored k-major: ldmatrix.trans gives the B
  // fragments of dim blocks nd, nd + 1 (matrices 0, 1: keys 16kk .. 16kk + 7, + 8 ..; 2, 3:
  // the same keys of the next 8 dims).
  for (int kk = 0; kk < Tile::kBc / 16; ++kk) {
    const float* lo = s[2 * kk];
    const float* hi = s[2 * kk + 1];
    const uint32_t a[4] = {pack2(from_float<T>(lo[0]), from_float<T>(lo[1])),
                           pack2(from_float<T>(lo[2]), from_float<T>(lo[3])),
                           pack2(from_float<T>(hi[0]), from_float<T>(hi[1])),
                           pack2(from_float<T>(hi[2]), from_float<T>(hi[3]))};
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t b[4];
      ldmatrix_trans<4>(b, v + frag_v + kk * 16 * Tile::kStride + nd * 8);
      mma_m16n8k16<T>(st.o[nd], a, b, st.o[nd]);
      mma_m16n8k16<T>(st.o[nd + 1], a, b + 2, st.o[nd + 1]);
    }
  }
}

// ---------------------------------------------------------------- the kernel
// Variants: the instance that runs SPEC 10.1's window, softcap and ALiBi and SPEC 10.3's sinks
// (mma_variants.cuh); Dropout: the one that multiplies each probability by its factor M_ij after
// the row's sum took it (SPEC 11, dropout_tile.cuh); the plain instance runs neither. A problem
// with both runs the SIMT kernels (kernel_choice.h).
template <class T, int D, bool Variants, bool Dropout>
__global__ void forward_mma_kernel(ForwardParams p) {
  using Tile = MmaTile<T, D, Variants>;
  constexpr int BR = Tile::kBr, S = Tile::kStride;
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  SmemCarver carver{smem};
  Tile tl;
  tl.carve(carver);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);

  // 1. Rows, dilated gaps, Q.
  for (int r = tid; r < BR; r += Tile::kThreads) tl.rows[r] = tile_row(p, h, tile, r, BR);
  if (p.o != nullptr && p.kind == kKindDilated) write_dilated_gaps<T>(p, b, h, tile, BR);
  __syncthreads();
  bool any_row = false;
  for (int r = 0; r < BR; ++r) any_row = any_row || tl.rows[r] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only
  for (int idx = tid; idx < BR * D; idx += Tile::kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t i = tl.rows[r];
    tl.q()[r * S + d] = i >= 0 ? load_bnhd<T>(p.q, p.q_stride, b, i, h, d) : from_float<T>(0.0f);
  }
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // the lane's two tile rows
  const int64_t num_spans = tile_span_count(p, h, tile);
  // Shared pairs (SPEC 3.4; the plain instance only, attention_tile.cuh): the tile's cut and
  // the lane's weights for its two spans, once, before the chunks.
  TileShares shares;
  if constexpr (!Variants && !Dropout) {
    shares = tile_shares(p, h, tl.rows, r0, r1);
    tile_log_weights<Tile::kBr>(p, shares.lane_w, r0, tl.log_weights);  // read by the chunks
  }
  // The chunks read the table through this copy of its pointer: a chunk function that reads the
  // tile's own fields keeps the whole tile in memory, and ptxas then loses every pointer's
  // address space (generic loads and stores in place of shared ones).
  const float* log_weights = tl.log_weights;
  if (warp == 0 && num_spans > 0) read_tile_span(p, tl, h, tile, 0, 0, shares.cut_or_null());
  __syncthreads();
  const int frag_a = frag_rows_first<T, D>(lane), frag_k = frag_cols_first<T, D>(lane);
  uint32_t qf[D / 16][4];
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix<4>(qf[kk], tl.q() + warp * 16 * S + frag_a + kk * 16);
  mma_rows::RowState<D> st;
  mma_rows::start(st);
  VariantRows vr;
  if constexpr (Variants) vr = variant_rows(p, b, h, tl.rows[r0], tl.rows[r1]);

  // 2-3. The chunks (mma_chunk_loop.cuh), each with its span's weights (lw).
  const T* kb = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[2];
  mma_chunk_loop(
      p, tl, h, tile, num_spans, r0, r1, shares.cut_or_null(),
      [&](int64_t first, int64_t step, int64_t c0, int64_t cn, T* k, T* v) {
        issue_chunk<T, D>(p, kb, vb, first, step, c0, cn, k, v);
      },
      [&](const T* k, const T* v, int keys0, int keys1, const ChunkKeys& at,
          const auto&... window) {
        float lw[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        if constexpr (!Variants && !Dropout)
          chunk_log_weights_of<Tile::kBr>(log_weights, at.span, r0, lw);
        warp_chunk<T, D, Variants, !Variants && !Dropout>(
            p, qf, k, v, frag_k, frag_a, keys0, keys1, st, lw, vr,
            [&](auto& s) {
              if constexpr (Dropout)
                dropout_row_fragments(p, b, h, {tl.rows[r0], tl.rows[r1]}, {keys0, keys1},
                                      at.first, at.step, at.c0, s);
            },
            window...);
      });

  // 4. Finish the lane's two rows.
  mma_rows::finish_row<T, D>(p, b, h, tl.rows[r0], 0, st);
  mma_rows::finish_row<T, D>(p, b, h, tl.rows[r1], 1, st);
}

#define DILATTN_FORWARD_MMA_INSTANCES(V, DROP)                                        \
  template __global__ void forward_mma_kernel<__half, 64, V, DROP>(ForwardParams);         \
  template __global__ void forward_mma_kernel<__half, 128, V, DROP>(ForwardParams);        \
  template __global__ void forward_mma_kernel<__nv_bfloat16, 64, V, DROP>(ForwardParams);  \
  template __global__ void forward_mma_kernel<__nv_bfloat16, 128, V, DROP>(ForwardParams);
DILATTN_FORWARD_MMA_INSTANCES(false, false)
DILATTN_FORWARD_MMA_INSTANCES(true, false)
DILATTN_FORWARD_MMA_INSTANCES(false, true)
#undef DILATTN_FORWARD_MMA_INSTANCES

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T, int D, bool Variants, bool Dropout>
ForwardKernel mma_forward_of() {
  using Tile = MmaTile<T, D, Variants>;
  return ForwardKernel{forward_mma_kernel<T, D, Variants, Dropout>,
                       mma_smem_bytes<T, D, Variants>(), Tile::kBr, Tile::kThreads};
}

// variants and dropout are never both set (kernel_choice.h sends such problems to SIMT).
template <class T>
ForwardKernel mma_forward(int64_t D, bool variants, bool dropout) {  // D = 64 or 128
  if (dropout)
    return D == 64 ? mma_forward_of<T, 64, false, true>() : mma_forward_of<T, 128, false, true>();
  if (variants)
    return D == 64 ? mma_forward_of<T, 64, true, false>() : mma_forward_of<T, 128, true, false>();
  return D == 64 ? mma_forward_of<T, 64, false, false>() : mma_forward_of<T, 128, false, false>();
}

template ForwardKernel mma_forward<__half>(int64_t, bool, bool);
template ForwardKernel mma_forward<__nv_bfloat16>(int64_t, bool, bool);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
