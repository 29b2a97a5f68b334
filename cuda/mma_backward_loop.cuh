// mma_backward_loop.cuh - the loops of the tensor-core backward kernels (SPEC 6 over SPEC 2-4),
// FlashAttention-2's backward split into two kernels so that no sum needs a float atomic: every
// gradient element is summed by one lane in a fixed order, and the result is bitwise the same run
// to run (SPEC 6). The products are the kernel file's (Products): cuda/backward_mma.cu
// (m16n8k16, f16 and bf16, ldmatrix) and cuda/backward_mma_tf32.cu (m16n8k8, f32 as 3xTF32).
//
// Both passes take P from the forward's LSE (lib/softmax_rules.h: P = 2^(post (pre S - lse_s)),
// with lse_s from the launcher's pre-pass) and dS = P (dP - D_i), D_i = <dO_i, O_i>. The index
// rules are backward_tile.cuh's and attention_tile.cuh's, the same the SIMT kernels and the
// forward use; the launcher (cuda/launch_backward.cu) launches one dQ pass per dilated branch
// and one dK/dV pass per branch that walks every query head of a kv head in head order, the K
// and V tile loaded once a block: on dense and block-sparse problems a block holds one key tile
// for every head; on a dilated branch, heads with the same offset share their key rows, so the
// block of the first of them walks them all and the blocks of the others exit
// (backward_tile.cuh, leads_key_rows), as the SIMT pair's dK/dV pass does too
// (backward_tile_loop.cuh). The variant instances launch the dilated dK/dV pass once per branch
// and head.
//
// mma_backward_dq: one block per query tile of 64 rows (4 warps, 16 rows each), as the forward's
// tiles (tile_row, read_span). Q and dO stay in shared memory; K and V chunks of kDqKeys keys
// stream through two buffers (mma_chunk_loop.cuh, the forward's loop). Per warp and chunk:
//     S = Q K^T, dP = dO V^T            (Products::scores)
//     P, dS for the keys each row sees  (the rest exactly 0, by selection)
//     dQ += dS K                        (Products::accumulate: dS's C fragments as A)
// dQ (16 x D per warp) lives in registers and is added to the workspace's dq_acc at the end.
//
// mma_backward_dkdv: one block per key tile of 64 keys (4 warps, 16 keys each), K and V resident
// in shared memory (and, where Products::kResidentKeys says so, in the plain instances, in
// registers as the warp's A fragments); the query rows that meet the tile (query_span: one span,
// or one per BSR query block) stream in chunks of kKvRows rows (the variant and dropout
// instances: kKvRowsOptions) through two cp.async buffers. Per warp and chunk:
//     S^T = K Q^T, dP^T = V dO^T        (Products::scores)
//     P^T, dS^T for the pairs seen      (key c of the tile is seen by row t iff c < seen[t])
//     dV += P^T dO, dK += dS^T Q        (Products::accumulate)
// dK and dV (16 x D each per warp) live in registers and are added to dk_acc, dv_acc at the end.
//
// Dropout (SPEC 11.3, the Dropout instances; dropout_tile.cuh): each pair's factor M_ij is drawn
// again, dP takes it before dS = P (M dP - D_i) is formed, and in the dK/dV pass P^T becomes
// P^T M for dV. The dQ pass draws with the forward's fragment layout (dropout_row_fragments);
// the dK/dV pass's lane holds two keys of two rows each: where the warp's keys take
// dropout_tile.cuh's QuadSlots its lanes draw one call each and share the decisions
// (dropout_key_rows_mask), else one draw a pair.
//
// The NaN rule (SPEC 13): a product on tensor cores multiplies every pair of its tile, so a
// pair a row does not see (P = dS = 0 there) still meets the other side's values: 0 * NaN is a
// NaN. The pre-pass marks each query row whose Q or dO holds a value that is not finite and each
// key row whose K does (row_bad, key_bad). A warp whose chunk holds such a row on the side the
// product reads, and a pair one of its rows does not see, computes that chunk's product on its
// own lanes instead, pair by pair, leaving the unseen pairs out (exact_rows_product,
// cuda/mma_unseen_pairs.cuh): a NaN reaches exactly the rows whose keys hold it. Finite inputs
// never take that path.
//
// Shared pairs (SPEC 3.4, lib/pair_sharing.h; the plain instances, where the launcher sets
// share_pairs): a pair several dilated branches hold is computed once, its P taken as W P (W
// its weight, 0 where an earlier branch computes it) in dV and dS. The dQ pass takes the
// forward's cut of a tile's keys and its lane weights (attention_tile.cuh tile_shares): log2 W
// is subtracted from each row's lse_s once a tile (weighted_shifts), into a shared-memory table
// that every chunk reads in place of lse_s. The dK/dV pass cuts the rows an earlier branch
// holds whole from a key tile's query spans (backward_tile.cuh key_tile_row_cut), takes each
// lane's weights once a span (key_lane_weights, in the walk) and subtracts log2 W per score.
//
// Variants (the variant instances, SPEC 10.1): each pair's score softcapped and biased by ALiBi
// and dS times the softcap's slope (mma_variants.cuh's variant_prob_and_ds); the dQ pass walks
// read_window_span's spans (only the key chunks the rows' windows reach) and takes the keys
// [from, keys) of each row; the dK/dV pass walks only the query rows whose window reaches its key
// tile (window_query_cut) and a row sees the range [seen_lo, seen) of the tile's keys
// (window_keys_seen). d_sinks (SPEC 10.3) is the launcher's pre-pass (launch_backward.cu).
//
// Products, the kernel file's part:
//   using Input;                          the input dtype, also the shared-memory element
//   kHeadDim, kStride (padded row), kDqKeys (dQ pass chunk), kKvRows (dK/dV pass chunk),
//   kKvRowsOptions                        (the same for the variant and dropout instances)
//   kResidentKeys                         whether the plain dK/dV pass keeps its warp's K and V
//                                         rows in registers (a_frags, KeyFrags)
//   kQuadDraws                            whether the dK/dV pass's dropout instance draws by
//                                         lane groups where it can (false where its registers
//                                         are too few for both ways of drawing)
//   Frags, frags()                        the lane's fragment offsets, computed once
//   scores<kN>(frags, s[kN / 8][4], a, b) s += a b^T for the warp: a its 16 rows of a padded
//                                         tile (or, with kResidentKeys, their KeyFrags), b kN
//                                         rows of another, over kHeadDim
//   accumulate<kCols>(frags, acc[D / 8][4], x[kCols / 8][4], y)
//                                         acc += x y: x (16 x kCols, C fragments, rounded as
//                                         the product takes them), y kCols rows of a tile
// Checked through the kernels by tests/kernels/test_backward_kernels.cpp and
// test_backward_nonfinite_kernels.cpp (emulator, three thread orders, against the reference).
#ifndef DILATTN_MMA_BACKWARD_LOOP_CUH
#define DILATTN_MMA_BACKWARD_LOOP_CUH

#include "async_copy.cuh"
#include "backward_tile.cuh"
#include "dropout_tile.cuh"
#include "mma_chunk_loop.cuh"
#include "mma_unseen_pairs.cuh"
#include "mma_variants.cuh"
#include "smem_carver.cuh"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// 4 warps a block; 64 query rows a dQ block (16 a warp), 64 keys a dK/dV block (16 a warp).
constexpr int kMmaBackwardThreads = 128, kMmaBackwardRows = 64, kMmaBackwardKeys = 64;

// ---------------------------------------------------------------- row copies
// Rows first + step * (c0 + c), c < cn, of a [B, N, H, D] view (base: its (b, head) corner) into
// a padded tile of kRows rows (kStride elements a row); rows cn .. kRows - 1 become zeros, so
// products there add exact zeros. 16 bytes at a time by cp.async when vec16 (D contiguous,
// 16-byte rows), else element by element. The caller commits the copies.
template <class T, int D, int kStride, int kRows, int kThreads>
__device__ __forceinline__ void copy_rows(T* tile, const T* base, const int64_t* stride,
                                          bool vec16, int64_t first, int64_t step, int64_t c0,
                                          int64_t cn) {
  constexpr int kPer16 = static_cast<int>(16 / sizeof(T)), kPieces = D / kPer16;
  constexpr int kRowsPerPass = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0, "whole rows per pass");
  const int tid = static_cast<int>(threadIdx.x), d0 = (tid % kPieces) * kPer16;
  for (int c = tid / kPieces; c < kRows; c += kRowsPerPass) {
    T* dst = tile + c * kStride + d0;
    if (c >= cn) {
      for (int e = 0; e < kPer16; ++e) dst[e] = from_float<T>(0.0f);
      continue;
    }
    const T* src = base + (first + step * (c0 + c)) * stride[1];
    if (vec16) {
      async_copy_16(dst, src + d0);
    } else {
      for (int e = 0; e < kPer16; ++e) dst[e] = src[(d0 + e) * stride[3]];
    }
  }
}

// ---------------------------------------------------------------- P and dS in registers
// One C-fragment element: P = 2^(post (pre s - lse_s)) and dS = P (dp - di) where the pair is
// seen, both exactly 0 where it is not (selection: whatever s and dp hold there).
__device__ __forceinline__ void prob_and_ds(const ForwardParams& p, bool seen, float lse_s,
                                            float di, float& s, float& dp) {
  const float prob = seen ? online_prob(s * p.score_pre, lse_s, p.score_post) : 0.0f;
  dp = seen ? prob * (dp - di) : 0.0f;
  s = prob;
}
// The same for a pair the row sees, when post = 1 and lse_s is finite (the usual case, checked
// by the caller for the whole chunk): P by online_prob_fused, one fused multiply-add and 2^x,
// equal to prob_and_ds's up to one rounding.
__device__ __forceinline__ void prob_and_ds_seen(const ForwardParams& p, float lse_s, float di,
                                                 float& s, float& dp) {
  const float prob = online_prob_fused(s, p.score_pre, lse_s);
  dp = prob * (dp - di);
  s = prob;
}

// ---------------------------------------------------------------- shared pairs (SPEC 3.4)
// The shift each of a lane's pairs takes in prob_and_ds(_seen) on a launch with shared pairs
// (shift[row][column parity]): the row's lse_s less the log2 of the pair's weight
// (lib/pair_sharing.h), so P becomes W P and dS = W P (dP - D_i): a pair several branches
// hold, computed once, adds what its W occurrences would (SPEC 6's sums are linear in them),
// and one an earlier branch computes (W = 0, shift +inf) adds exact zeros. The weights of
// span `span` come from lane_w (attention_tile.cuh lane_weights' packing), divided by post as
// the forward divides them (mma_rows.cuh), so that 2^(post (s - shift)) = W 2^(post (s -
// lse_s)). The dQ pass calls it once a tile per span; the dK/dV pass, whose shift is per query
// row, subtracts the weights per score instead.
__device__ __forceinline__ void weighted_shifts(const ForwardParams& p, uint32_t lane_w,
                                                int64_t span, float lse0, float lse1,
                                                float (&shift)[2][2]) {
  float lw[2][2];
  chunk_log_weights(p, lane_w, span, lw);
  for (int x = 0; x < 4; ++x)
    shift[x / 2][x % 2] = (x < 2 ? lse0 : lse1) - __fdividef(lw[x / 2][x % 2], p.score_post);
}

// The dK/dV pass's weights for one span of query rows `rows` (head h; the lane's keys key0,
// key1, -1 for none), packed as lane_weights packs a span (4 bits: 2 key row + column parity).
// SPEC 3.4's rule is symmetric (branch c holds (i, j) iff it holds (j, i)), so these are
// shared_span_weights_as with the lane's keys in the rows' place and the span's rows at the
// lane's columns 2 t4 and 2 t4 + 1 of its start in the keys': its other rows of the span lie a
// multiple of 8 terms further on and take the same weights, and the rows whose pairs an
// earlier branch holds whole are cut out of the spans (backward_tile.cuh, query_span).
// Checked, transposed, by tests/reference/test_pair_sharing.cpp.
__device__ __forceinline__ uint32_t key_lane_weights(const ForwardParams& p, int64_t h,
                                                     int64_t key0, int64_t key1,
                                                     const KeyProgression& rows) {
  const int64_t col = 2 * (static_cast<int64_t>(threadIdx.x) & 3);
  int32_t weight[2][2];
  shared_span_weights_as<int32_t>(HeadBranches{p, h}, p.num_branches, p.branch, key0, key1,
                                  rows.first + rows.step * col,
                                  rows.first + rows.step * (col + 1), weight);
  uint32_t packed = 0;
  for (int x = 0; x < 4; ++x) packed |= static_cast<uint32_t>(weight[x / 2][x % 2]) << (4 * x);
  return packed;
}

// ================================================================ the dQ pass
// The word of the dQ pass's shift table (DqSmem::shift) for span slot `slot`, tile row `row`
// and column class `col`: attention_tile.cuh's lane_table_word, as the forward's log weights.
__host__ __device__ constexpr int dq_shift_word(int slot, int row, int col) {
  return lane_table_word<kMmaBackwardRows>(slot, row, col);
}

template <class Products, bool Variants = false>
struct DqSmem {
  using T = typename Products::Input;
  static constexpr int kBr = kMmaBackwardRows, kBc = Products::kDqKeys;
  static constexpr int kStride = Products::kStride, kThreads = kMmaBackwardThreads;
  static constexpr int kSpanSlots = 3;  // as MmaTileSmem: mma_chunk_loop's span descriptors
  static constexpr bool kVariants = Variants;  // the window's spans (mma_chunk_loop.cuh)
  T* kv;                  // [K0][V0][K1][V1], each [kBc][kStride]
  T *q, *d_o;             // [kBr][kStride]
  float *lse_s, *di;      // [kBr]
  int32_t* bad_key;       // [2][kBc] the chunk's K rows: 1 where not all finite (key_bad)
  int64_t* rows;          // [kBr] query row, -1 for none
  int64_t* cnt;           // [kSpanSlots][kBr] each row's key count in a span
  int64_t* span;          // [kSpanSlots][3] {first, step, largest count}
  int64_t* from = nullptr;  // Variants: [kSpanSlots][kBr] each row's first key in a span
  // Not Variants: [2][kBr][8] the shift P takes for row r, span 0 or the others (1), and a key
  // whose column in a chunk is c mod 8 (weighted_shifts: lse_s, less SPEC 3.4's log2 weight).
  float* shift = nullptr;

  __host__ __device__ void carve(SmemCarver& c) {
    kv = c.take<T>(static_cast<size_t>(4 * kBc) * kStride);
    q = c.take<T>(static_cast<size_t>(kBr) * kStride);
    d_o = c.take<T>(static_cast<size_t>(kBr) * kStride);
    lse_s = c.take<float>(kBr);
    di = c.take<float>(kBr);
    bad_key = c.take<int32_t>(2 * kBc);
    rows = c.take<int64_t>(kBr);
    cnt = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * kBr);
    span = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * 3);
    if constexpr (Variants) from = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * kBr);
    if constexpr (!Variants) shift = c.take<float>(static_cast<size_t>(dq_shift_word(2, 0, 0)));
  }
  __device__ __forceinline__ T* k(int buf) const { return kv + (2 * buf) * kBc * kStride; }
  __device__ __forceinline__ T* v(int buf) const { return kv + (2 * buf + 1) * kBc * kStride; }
};

template <class Smem>
inline size_t smem_bytes_of() {
  SmemCarver c{nullptr};
  Smem().carve(c);
  return c.used;
}

template <class Products, bool Variants = false, bool Dropout = false>
__device__ __forceinline__ void mma_backward_dq(const BackwardParams& bp, unsigned char* smem) {
  // A problem with SPEC 10 options and dropout runs the SIMT kernels (kernel_choice.h).
  static_assert(!(Variants && Dropout), "variant and dropout instances are separate");
  using T = typename Products::Input;
  using Tile = DqSmem<Products, Variants>;
  constexpr int D = Products::kHeadDim;
  constexpr int BR = Tile::kBr, BC = Tile::kBc, S = Tile::kStride, kThreads = Tile::kThreads;
  SmemCarver carver{smem};
  Tile tl;
  tl.carve(carver);
  const ForwardParams& p = bp.ix;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);

  // The tile's rows (as the forward's), then Q, dO, lse_s and D_i of each.
  for (int r = tid; r < BR; r += kThreads) tl.rows[r] = tile_row(p, h, tile, r, BR);
  __syncthreads();
  bool any_row = false;
  for (int r = 0; r < BR; ++r) any_row = any_row || tl.rows[r] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only
  for (int idx = tid; idx < BR * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t i = tl.rows[r];
    tl.q[r * S + d] = i >= 0 ? load_bnhd<T>(p.q, p.q_stride, b, i, h, d) : from_float<T>(0.0f);
    tl.d_o[r * S + d] =
        i >= 0 ? load_bnhd<T>(bp.d_o, bp.d_o_stride, b, i, h, d) : from_float<T>(0.0f);
  }
  for (int r = tid; r < BR; r += kThreads) {
    const int64_t i = tl.rows[r], row = (b * p.H + h) * p.Nq + i;
    tl.lse_s[r] = i >= 0 ? bp.lse_s[row] : 0.0f;
    tl.di[r] = i >= 0 ? bp.di[row] : 0.0f;
  }
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // the lane's two tile rows
  const int64_t num_spans = tile_span_count(p, h, tile);
  // Shared pairs (SPEC 3.4; the plain instance only): the forward's cut of the tile's keys and
  // the lane's weights for its two spans (attention_tile.cuh tile_shares), once.
  TileShares shares;
  if constexpr (!Variants && !Dropout) shares = tile_shares(p, h, tl.rows, r0, r1);
  if (warp == 0 && num_spans > 0) read_tile_span(p, tl, h, tile, 0, 0, shares.cut_or_null());
  __syncthreads();

  VariantRows vr;
  if constexpr (Variants) vr = variant_rows(p, b, h, tl.rows[r0], tl.rows[r1]);
  const float lse0 = tl.lse_s[r0], lse1 = tl.lse_s[r1], di0 = tl.di[r0], di1 = tl.di[r1];
  // The shifts of the lane's pairs, per span: lse_s less the shared pairs' log2 weights on a
  // launch that shares them (SPEC 3.4: weighted_shifts, the plain instance), else lse_s. Kept
  // in shared memory, where the lane writes and reads its own (no barrier): its rows r0, r1 and
  // columns 2 t4, 2 t4 + 1 of span 0 and of span 1, which stands for every later span (only a
  // launch with shared pairs, two spans, has weights). Read once a chunk, in place of lse_s.
  constexpr int kRow1 = dq_shift_word(0, 8, 0);  // row r1 = r0 + 8
  if constexpr (!Variants) {
    for (int span = 0; span < 2; ++span) {
      float shift[2][2] = {{lse0, lse0}, {lse1, lse1}};
      if constexpr (!Dropout)
        if (p.share_pairs) weighted_shifts(p, shares.lane_w, span, lse0, lse1, shift);
      for (int x = 0; x < 4; ++x)
        tl.shift[dq_shift_word(span, r0, 2 * t4 + x % 2) + (x / 2) * kRow1] = shift[x / 2][x % 2];
    }
  }
  const T* qw = tl.q + warp * 16 * S;
  const typename Products::Frags frags = Products::frags();
  const T* dow = tl.d_o + warp * 16 * S;
  float dq[D / 8][4];
  for (int nd = 0; nd < D / 8; ++nd)
    for (int e = 0; e < 4; ++e) dq[nd][e] = 0.0f;

  const T* kb = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[2];
  const int32_t* key_flags = bp.key_bad == nullptr ? nullptr : bp.key_bad + (b * p.Hkv + hk) * p.Nk;
  mma_chunk_loop(
      p, tl, h, tile, num_spans, r0, r1, shares.cut_or_null(),
      [&](int64_t first, int64_t step, int64_t c0, int64_t cn, T* k, T* v) {
        copy_rows<T, D, S, BC, kThreads>(k, kb, p.k_stride, p.kv_vec16 != 0, first, step, c0, cn);
        copy_rows<T, D, S, BC, kThreads>(v, vb, p.v_stride, p.kv_vec16 != 0, first, step, c0, cn);
        // Which of the chunk's K rows are not all finite: copied with the chunk (cp.async, so
        // the issuing warp does not wait for them), in the buffer of the same index as k.
        int32_t* flags = tl.bad_key + (k == tl.k(0) ? 0 : BC);
        for (int c = tid; c < BC; c += kThreads) {
          if (c < cn && key_flags != nullptr)
            async_copy_4(flags + c, key_flags + first + step * (c0 + c));
          else
            flags[c] = 0;
        }
      },
      [&](const T* k, const T* v, int keys0, int keys1, const ChunkKeys& at,
          const auto&... window) {
        constexpr int kTiles = BC / 8;
        float s[kTiles][4], dp[kTiles][4];
        for (int n = 0; n < kTiles; ++n)
          for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
        Products::template scores<BC>(frags, s, qw, k);    // S = Q K^T
        Products::template scores<BC>(frags, dp, dow, v);  // dP = dO V^T
        if constexpr (Dropout)  // M dP (SPEC 11.3)
          dropout_row_fragments(p, b, h, {tl.rows[r0], tl.rows[r1]}, {keys0, keys1}, at.first,
                                at.step, at.c0, dp);
        // P and dS; the lane's keys are c = 8n + 2t + (e & 1), row 0 or 1 by e >> 1. A key of
        // the chunk one row skips and whose K is not finite sends the chunk the exact way.
        const int32_t* flags = tl.bad_key + (k == tl.k(0) ? 0 : BC);
        bool unseen_bad = false;
        const ChunkWindow w = chunk_window_or_none(window...);
        if constexpr (Variants) {  // the pairs c in [from, keys) of each row, variant scores
          DILATTN_UNROLL
          for (int n = 0; n < kTiles; ++n)
            for (int e = 0; e < 4; ++e) {
              const int c = 8 * n + 2 * t4 + (e & 1);
              const bool row1 = (e >> 1) != 0;
              const bool seen = row1 ? c >= w.from1 && c < keys1 : c >= w.from0 && c < keys0;
              variant_prob_and_ds(p, seen, vr.slope, row1 ? vr.i1 : vr.i0, w.key0 + w.step * c,
                                  row1 ? lse1 : lse0, row1 ? di1 : di0, s[n][e], dp[n][e]);
              unseen_bad = unseen_bad || (!seen && flags[c] != 0);
            }
        } else {
          // The shifts P takes in this span (the table above), rows r0 then r1.
          const float* at_span = tl.shift + dq_shift_word(at.span != 0 ? 1 : 0, r0, 2 * t4);
          const float shift[2][2] = {{at_span[0], at_span[1]},
                                     {at_span[kRow1], at_span[kRow1 + 1]}};
          // A shift of +inf (no key, or weight 0) takes the general path (prob_and_ds): P = 0.
          if (p.score_post == 1.0f && keys0 >= BC && keys1 >= BC && shift[0][0] != INFINITY &&
              shift[0][1] != INFINITY && shift[1][0] != INFINITY && shift[1][1] != INFINITY) {
            // Both rows see every key of the chunk: no selection, no flag (prob_and_ds_seen).
            DILATTN_UNROLL
            for (int n = 0; n < kTiles; ++n)
              for (int e = 0; e < 4; ++e) {
                const bool row1 = (e >> 1) != 0;
                prob_and_ds_seen(p, shift[e >> 1][e & 1], row1 ? di1 : di0, s[n][e], dp[n][e]);
              }
          } else {
            DILATTN_UNROLL
            for (int n = 0; n < kTiles; ++n)
              for (int e = 0; e < 4; ++e) {
                const int c = 8 * n + 2 * t4 + (e & 1);
                const bool row1 = (e >> 1) != 0;
                const bool seen = c < (row1 ? keys1 : keys0);
                prob_and_ds(p, seen, shift[e >> 1][e & 1], row1 ? di1 : di0, s[n][e], dp[n][e]);
                unseen_bad = unseen_bad || (!seen && flags[c] != 0);
              }
          }
        }
        if (__any_sync(0xffffffffu, unseen_bad)) {
          // The lane's rows are g (keys0 of the chunk's keys) and g + 8 (keys1).
          if constexpr (Variants)
            exact_rows_product<T, D, S, BC>(dq, dp, k, [&](int row, int c) {
              return row < 8 ? c >= w.from0 && c < keys0 : c >= w.from1 && c < keys1;
            });
          else
            exact_rows_product<T, D, S, BC>(
                dq, dp, k, [&](int row, int c) { return c < (row < 8 ? keys0 : keys1); });
        } else {
          Products::template accumulate<BC>(frags, dq, dp, k);  // dQ += dS K
        }
      });

  // dq_acc[row] += dQ: each element is one lane's (launches add one after another).
  const int64_t rows[2] = {tl.rows[r0], tl.rows[r1]};
  for (int r = 0; r < 2; ++r) {
    if (rows[r] < 0) continue;
    float* acc = bp.dq_acc + ((b * p.H + h) * p.Nq + rows[r]) * D;
    for (int nd = 0; nd < D / 8; ++nd)
      for (int e = 0; e < 2; ++e) acc[nd * 8 + 2 * t4 + e] += dq[nd][2 * r + e];
  }
}

// ================================================================ the dK/dV pass
template <class Products, bool Variants = false, bool Dropout = false>
struct DkdvSmem {
  using T = typename Products::Input;
  static constexpr int kBc = kMmaBackwardKeys;
  static constexpr int kRows = Variants || Dropout ? Products::kKvRowsOptions : Products::kKvRows;
  static constexpr int kStride = Products::kStride;
  T *k, *v;                 // [kBc][kStride], resident
  T* qdo;                   // [2][Q, dO] each [kRows][kStride]: two chunk buffers
  float *lse_s, *di;        // [2][kRows]
  int32_t *seen, *bad_row;  // [2][kRows] keys of the tile the row sees; Q or dO not finite
  int64_t* keys;            // [kBc] the tile's keys (-1: none), ascending
  // Variants: [2][kRows] the first key of the tile the row sees (the window) and the row;
  // [2] the chunk's ALiBi slope (its head's).
  int32_t* seen_lo = nullptr;
  int64_t* row_of = nullptr;
  float* slope = nullptr;

  __host__ __device__ void carve(SmemCarver& c) {
    k = c.take<T>(static_cast<size_t>(kBc) * kStride);
    v = c.take<T>(static_cast<size_t>(kBc) * kStride);
    qdo = c.take<T>(static_cast<size_t>(4 * kRows) * kStride);
    lse_s = c.take<float>(2 * kRows);
    di = c.take<float>(2 * kRows);
    seen = c.take<int32_t>(2 * kRows);
    bad_row = c.take<int32_t>(2 * kRows);
    keys = c.take<int64_t>(kBc);
    if constexpr (Variants) {
      seen_lo = c.take<int32_t>(2 * kRows);
      row_of = c.take<int64_t>(2 * kRows);
      slope = c.take<float>(2);
    }
  }
  __device__ __forceinline__ T* q(int buf) const { return qdo + (2 * buf) * kRows * kStride; }
  __device__ __forceinline__ T* d_o(int buf) const {
    return qdo + (2 * buf + 1) * kRows * kStride;
  }
};

// Where the walk over the query rows that meet a key tile stands: span `span`'s rows
// (a progression, query_span), from its term t0 on. Every thread keeps its own copy; they agree.
// With several query heads of the kv head in one launch (head_in_group < 0), the heads follow
// one another in head order: head `head` (of the group), its spans, their chunks. On a dilated
// launch only the heads whose key rows are the leader's (same_key_rows) are walked; leader < 0
// walks every head. lane_w: on a launch with shared pairs (SPEC 3.4), the lane's weights for
// the span's pairs (key_lane_weights), set where the walk finds the span.
struct QueryChunkCursor {
  int64_t head, head_end, span, num_spans, t0;
  KeyProgression rows;
  int64_t leader;
  uint32_t lane_w = 0;
  __device__ __forceinline__ bool done() const { return head >= head_end; }
};

// The cursor moved to the next chunk holding a row: the rest of this span, else the next span
// with any row, else the next head's first. done() when there is none. kWindow (variant
// instances): a span's rows cut to those whose window reaches the tile's keys first_key ..
// last_key (window_query_cut). kLeader: the cursor may have a leader (dilated heads walked
// together; the variant instances never do, which keeps their registers). kWeighted (the plain
// instances): on a launch with shared pairs, each span found sets lane_w for the lane's keys
// lane_keys[0] and lane_keys[8] (the tile's, -1: none), so the weights are computed once a
// span, in the walk.
template <bool kWindow = false, bool kLeader = false, bool kWeighted = false>
__device__ __forceinline__ void next_query_chunk(const BackwardParams& bp, int64_t hk,
                                                 int64_t tile, int64_t first_key,
                                                 int64_t last_key, int chunk_rows,
                                                 QueryChunkCursor& cur, bool first_call,
                                                 const int64_t* lane_keys = nullptr) {
  if (!first_call) {
    cur.t0 += chunk_rows;
    if (cur.t0 < cur.rows.count) return;
    ++cur.span;
  }
  cur.t0 = 0;
  for (; cur.head < cur.head_end; ++cur.head, cur.span = 0) {
    const int64_t h = hk * (bp.ix.H / bp.ix.Hkv) + cur.head;
    if constexpr (kLeader)
      if (cur.leader >= 0 && !same_key_rows(bp.ix, h, cur.leader)) continue;
    for (; cur.span < cur.num_spans; ++cur.span) {
      cur.rows = query_span(bp, h, tile, cur.span, first_key);
      if constexpr (kWindow) cur.rows = window_query_cut(bp.ix, cur.rows, first_key, last_key);
      if (cur.rows.count > 0) {
        if constexpr (kWeighted)
          if (bp.ix.share_pairs)
            cur.lane_w = key_lane_weights(bp.ix, h, lane_keys[0], lane_keys[8], cur.rows);
        return;
      }
    }
  }
}

template <class Products, bool Variants = false, bool Dropout = false>
__device__ __forceinline__ void mma_backward_dkdv(const BackwardParams& bp, unsigned char* smem) {
  // A problem with SPEC 10 options and dropout runs the SIMT kernels (kernel_choice.h).
  static_assert(!(Variants && Dropout), "variant and dropout instances are separate");
  using T = typename Products::Input;
  using Tile = DkdvSmem<Products, Variants, Dropout>;
  constexpr int D = Products::kHeadDim;
  constexpr int BC = Tile::kBc, R = Tile::kRows, S = Tile::kStride;
  constexpr int kThreads = kMmaBackwardThreads;
  SmemCarver carver{smem};
  Tile tl;
  tl.carve(carver);
  const ForwardParams& p = bp.ix;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t b = blockIdx.y / p.Hkv, hk = blockIdx.y % p.Hkv;
  // One query head of the kv head, or all of them in head order (head_in_group < 0; the
  // launcher decides): on dense and block-sparse problems every head, whose key tiles are the
  // same; on a dilated one, block x's head x / key_tiles_per_head and the later heads with its
  // key rows, run by the block of the first of them (leads_key_rows).
  const int64_t group = p.H / p.Hkv;
  // The variant instances never walk dilated heads together (BackwardKernels::
  // dkdv_dilated_heads): it would spill their registers at D = 128.
  constexpr bool kDilatedHeads = !Variants;
  const bool dilated_heads = kDilatedHeads && bp.head_in_group < 0 && p.kind == kKindDilated;
  const int64_t tile = dilated_heads ? blockIdx.x % bp.key_tiles_per_head : blockIdx.x;
  const int64_t head_first = bp.head_in_group >= 0 ? bp.head_in_group
                             : dilated_heads        ? blockIdx.x / bp.key_tiles_per_head
                                                    : 0;
  const int64_t head_end = bp.head_in_group < 0 ? group : head_first + 1;
  const int64_t h = hk * group + head_first;  // the head whose key tile this block holds
  if (dilated_heads && !leads_key_rows(p, hk * group, head_first)) return;  // whole block

  // The tile's keys (-1: none; they ascend, a progression), then K and V.
  for (int c = tid; c < BC; c += kThreads) tl.keys[c] = key_tile_key(bp, h, tile, c, BC);
  __syncthreads();
  int num_keys = 0;
  for (int c = 0; c < BC; ++c) num_keys += tl.keys[c] >= 0 ? 1 : 0;
  if (num_keys == 0) return;  // the same answer in every thread
  for (int idx = tid; idx < BC * D; idx += kThreads) {
    const int c = idx / D, d = idx % D;
    const int64_t j = tl.keys[c];
    tl.k[c * S + d] = j >= 0 ? load_bnhd<T>(p.k, p.k_stride, b, j, hk, d) : from_float<T>(0.0f);
    tl.v[c * S + d] = j >= 0 ? load_bnhd<T>(p.v, p.v_stride, b, j, hk, d) : from_float<T>(0.0f);
  }
  const int64_t first_key = tl.keys[0], last_key = tl.keys[num_keys - 1];
  const int kw = warp * 16;  // the warp's first key of the tile; the lane's are kw + g, + 8
  const typename Products::Frags frags = Products::frags();
  // The warp's K and V rows as resident A fragments where the products keep them (the plain
  // instances): read once, after the stores above are visible (rows other warps stored; the
  // emulator's descending order, one warp at a time, fails without the barrier).
  constexpr bool kResident = Products::kResidentKeys && !Variants && !Dropout;
  uint32_t k_frags[kResident ? D / 16 : 1][4], v_frags[kResident ? D / 16 : 1][4];
  if constexpr (kResident) {
    __syncthreads();
    Products::a_frags(frags, k_frags, tl.k + kw * S);
    Products::a_frags(frags, v_frags, tl.v + kw * S);
  }

  // One chunk's rows into buffer buf: seen counts, lse_s, D_i, flags by plain stores; Q and
  // dO by copy_rows (cp.async where it can). Read after the next barrier.
  auto prepare = [&](const QueryChunkCursor& cur, int buf) {
    const int64_t hq = hk * group + cur.head;
    const T* qb = static_cast<const T*>(p.q) + b * p.q_stride[0] + hq * p.q_stride[2];
    const T* dob = static_cast<const T*>(bp.d_o) + b * bp.d_o_stride[0] + hq * bp.d_o_stride[2];
    const int64_t row_base = (b * p.H + hq) * p.Nq;
    const int64_t cn = min_i64(R, cur.rows.count - cur.t0);
    for (int t = tid; t < R; t += kThreads) {
      const int64_t i = t < cn ? progression_at(cur.rows, cur.t0 + t) : -1;
      const int at = buf * R + t;
      if constexpr (Variants) {  // the window leaves a range [seen_lo, seen) of the keys
        int64_t lo = 0, hi = 0;
        if (i >= 0)
          window_keys_seen(p, query_row_keys(bp, hq, tile, i), i, tl.keys, num_keys, &lo, &hi);
        tl.seen_lo[at] = static_cast<int32_t>(lo);
        tl.seen[at] = static_cast<int32_t>(hi);
        tl.row_of[at] = i;
        if (t == 0) tl.slope[buf] = block_alibi_slope(p, b, hq);
      } else {
        tl.seen[at] = i >= 0 ? static_cast<int32_t>(tile_keys_seen(
                                   query_row_keys(bp, hq, tile, i), tl.keys, num_keys))
                             : 0;
      }
      // The row's scalars by cp.async, as its Q and dO: the warp issuing them goes on to this
      // chunk's products instead of waiting for global memory while the others wait for it.
      if (i >= 0) {
        async_copy_4(tl.lse_s + at, bp.lse_s + row_base + i);
        async_copy_4(tl.di + at, bp.di + row_base + i);
      } else {
        tl.lse_s[at] = 0.0f;
        tl.di[at] = 0.0f;
      }
      if (i >= 0 && bp.row_bad != nullptr)
        async_copy_4(tl.bad_row + at, bp.row_bad + row_base + i);
      else
        tl.bad_row[at] = 0;
    }
    copy_rows<T, D, S, R, kThreads>(tl.q(buf), qb, p.q_stride, bp.qdo_vec16 != 0, cur.rows.first,
                                 cur.rows.step, cur.t0, cn);
    copy_rows<T, D, S, R, kThreads>(tl.d_o(buf), dob, bp.d_o_stride, bp.qdo_vec16 != 0,
                                 cur.rows.first, cur.rows.step, cur.t0, cn);
  };

  // Dropout: quad_P != 0 when the warp's 16 keys take QuadSlots (dropout_tile.cuh), positions
  // j0 + quad_P k with j0 the first key's (keys past the tile's last are -1 and never seen);
  // their draws then go by lane groups.
  [[maybe_unused]] int quad_P = 0;
  if constexpr (Dropout && Products::kQuadDraws) {
    if (tl.keys[kw] >= 0 && tl.keys[kw + 1] >= 0) {
      const int64_t j0 = key_position(p, tl.keys[kw]);
      const int64_t P = key_position(p, tl.keys[kw + 1]) - j0;
      bool quad = quad_slots_apply(j0, P);
      for (int k = 2; k < 16 && quad; ++k) {
        const int64_t j = tl.keys[kw + k];
        quad = j < 0 || key_position(p, j) == j0 + P * k;
      }
      quad_P = quad ? static_cast<int>(P) : 0;
    }
  }
  float dk[D / 8][4], dv[D / 8][4];
  for (int nd = 0; nd < D / 8; ++nd)
    for (int e = 0; e < 4; ++e) dk[nd][e] = dv[nd][e] = 0.0f;

  // Shared pairs (SPEC 3.4; the plain instance only): the walk sets the lane's weights for each
  // span (QueryChunkCursor::lane_w), from its two keys.
  constexpr bool kWeighted = !Variants && !Dropout;
  const int64_t* lane_keys = tl.keys + kw + g;

  // The cursor names the chunk being prepared: one ahead of the chunk computed.
  QueryChunkCursor cur{head_first, head_end, 0, query_span_count(bp), 0,
                       KeyProgression{0, 1, 0}, dilated_heads ? h : -1};
  next_query_chunk<Variants, kDilatedHeads, kWeighted>(bp, hk, tile, first_key, last_key, R, cur,
                                                       true, lane_keys);
  bool has_chunk = !cur.done();
  if (has_chunk) prepare(cur, 0);
  async_copy_commit();
  int buf = 0;
  while (has_chunk) {
    const QueryChunkCursor chunk = cur;  // the chunk computed below (dropout's rows and head)
    next_query_chunk<Variants, kDilatedHeads, kWeighted>(bp, hk, tile, first_key, last_key, R,
                                                         cur, false, lane_keys);
    const bool has_next = !cur.done();
    async_copy_wait<0>();
    __syncthreads();  // this chunk visible to all; every thread is done with the other buffer
    if (has_next) prepare(cur, buf ^ 1);
    async_copy_commit();

    const int32_t* seen = tl.seen + buf * R;
    // A warp none of whose keys any row of the chunk sees skips it (seen counts are prefixes
    // of the tile's keys; with the window, the ranges [seen_lo, seen)).
    bool any = false;
    if constexpr (Variants) {
      for (int t = lane; t < R; t += 32)
        any = any || (seen[t] > kw && tl.seen_lo[buf * R + t] < kw + 16);
    } else {
      for (int t = lane; t < R; t += 32) any = any || seen[t] > kw;
    }
    if (__any_sync(0xffffffffu, any)) {
      const T* qc = tl.q(buf);
      const T* doc = tl.d_o(buf);
      constexpr int kTiles = R / 8;
      float st[kTiles][4], dpt[kTiles][4];
      for (int n = 0; n < kTiles; ++n)
        for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
      // S^T = K Q^T and dP^T = V dO^T: the warp's 16 K and V rows against the chunk's rows.
      if constexpr (kResident) {
        Products::template scores<R>(frags, st, k_frags, qc);
        Products::template scores<R>(frags, dpt, v_frags, doc);
      } else {
        Products::template scores<R>(frags, st, tl.k + kw * S, qc);
        Products::template scores<R>(frags, dpt, tl.v + kw * S, doc);
      }
      // P^T and dS^T: the lane's keys are kw + g (e < 2) and kw + g + 8, its query rows
      // t = 8n + 2 t4 + (e & 1). A row of the chunk that skips one of the warp's keys and
      // whose Q or dO is not finite sends the chunk the exact way.
      const float* lse = tl.lse_s + buf * R;
      const float* di = tl.di + buf * R;
      const int32_t* bad = tl.bad_row + buf * R;
      bool unseen_bad = false;
      // Every row of the chunk sees all 16 of the warp's keys (seen counts are prefixes) with a
      // finite lse_s: no selection, no flag (prob_and_ds_seen). One row a lane, R <= 32.
      static_assert(R <= 32, "one chunk row per lane");
      const bool row_whole = lane >= R || (seen[lane] >= kw + 16 && lse[lane] != INFINITY);
      // Dropout: M of element e of block n, the pair (row 8 n + 2 t4 + (e & 1) of the chunk,
      // key kw + g + 8 (e >> 1)) of the chunk's head. Where the keys take QuadSlots, from the
      // block's mask (block_mask, drawn by every lane at the top of each block, so that a
      // block's draws are not held in registers beside the others'); otherwise a draw a pair.
      [[maybe_unused]] auto block_mask = [&](int n) -> uint32_t {
        if (quad_P == 0) return 0u;
        const int64_t i = progression_at(chunk.rows, chunk.t0 + 8 * n + 2 * t4 + (g >> 2));
        return dropout_key_rows_mask(p, b, hk * group + chunk.head, row_position(p, i),
                                     key_position(p, tl.keys[kw]), quad_P);
      };
      [[maybe_unused]] auto factor = [&](uint32_t mask, int n, int e) {
        if (quad_P != 0) return key_rows_factor(p, mask, quad_P, e & 1, g + 8 * (e >> 1));
        return dropout_factor(p, b, hk * group + chunk.head,
                              progression_at(chunk.rows, chunk.t0 + 8 * n + 2 * t4 + (e & 1)),
                              tl.keys[kw + g + 8 * (e >> 1)]);
      };
      if constexpr (Variants) {  // the pairs in [seen_lo, seen), variant scores
        const int32_t* seen_lo = tl.seen_lo + buf * R;
        const int64_t* row_of = tl.row_of + buf * R;
        const float slope = tl.slope[buf];
        const int64_t lane_keys[2] = {tl.keys[kw + g], tl.keys[kw + g + 8]};
        DILATTN_UNROLL
        for (int n = 0; n < kTiles; ++n)
          for (int col = 0; col < 2; ++col) {  // the chunk row t, then the lane's two keys
            const int t = 8 * n + 2 * t4 + col, lo = seen_lo[t], hi = seen[t];
            const int64_t i = row_of[t];
            const float lse_t = lse[t], di_t = di[t];
            const bool bad_t = bad[t] != 0;
            for (int r = 0; r < 2; ++r) {
              const int key = kw + g + 8 * r, e = 2 * r + col;
              const bool seen_pair = key >= lo && key < hi;
              variant_prob_and_ds(p, seen_pair, slope, i, lane_keys[r], lse_t, di_t, st[n][e],
                                  dpt[n][e]);
              unseen_bad = unseen_bad || (!seen_pair && bad_t);
            }
          }
      } else if (kWeighted && p.share_pairs) {
        // Shared pairs (SPEC 3.4): each pair's shift less its log2 weight (weighted_shifts),
        // the weights of the lane's keys and columns of this span (chunk.lane_w).
        float lw[2][2];
        chunk_log_weights(p, chunk.lane_w, 0, lw);
        for (int x = 0; x < 4; ++x) lw[x / 2][x % 2] = __fdividef(lw[x / 2][x % 2], p.score_post);
        const bool whole = __all_sync(0xffffffffu, row_whole) && p.score_post == 1.0f;
        DILATTN_UNROLL
        for (int n = 0; n < kTiles; ++n)
          for (int e = 0; e < 4; ++e) {
            const int t = 8 * n + 2 * t4 + (e & 1);
            const float shift = lse[t] - lw[e >> 1][e & 1];
            if (whole) {
              prob_and_ds_seen(p, shift, di[t], st[n][e], dpt[n][e]);
            } else {
              const bool seen_pair = kw + g + 8 * (e >> 1) < seen[t];
              prob_and_ds(p, seen_pair, shift, di[t], st[n][e], dpt[n][e]);
              unseen_bad = unseen_bad || (!seen_pair && bad[t] != 0);
            }
          }
      } else if (__all_sync(0xffffffffu, row_whole) && p.score_post == 1.0f) {
        DILATTN_UNROLL
        for (int n = 0; n < kTiles; ++n) {
          [[maybe_unused]] uint32_t mask = 0u;
          if constexpr (Dropout) mask = block_mask(n);
          for (int e = 0; e < 4; ++e) {
            const int t = 8 * n + 2 * t4 + (e & 1);
            if constexpr (Dropout) {  // P (M dP - D_i) for dK; P M for dV
              const float m = factor(mask, n, e);
              dpt[n][e] *= m;
              prob_and_ds_seen(p, lse[t], di[t], st[n][e], dpt[n][e]);
              st[n][e] *= m;
            } else {
              prob_and_ds_seen(p, lse[t], di[t], st[n][e], dpt[n][e]);
            }
          }
        }
      } else {
        DILATTN_UNROLL
        for (int n = 0; n < kTiles; ++n) {
          [[maybe_unused]] uint32_t mask = 0u;
          if constexpr (Dropout) mask = block_mask(n);
          for (int e = 0; e < 4; ++e) {
            const int t = 8 * n + 2 * t4 + (e & 1);
            const bool seen_pair = kw + g + 8 * (e >> 1) < seen[t];
            if constexpr (Dropout) {  // as above; an unseen pair stays 0 (no draw of its own)
              const float m = seen_pair ? factor(mask, n, e) : 0.0f;
              dpt[n][e] *= m;
              prob_and_ds(p, seen_pair, lse[t], di[t], st[n][e], dpt[n][e]);
              st[n][e] *= m;
            } else {
              prob_and_ds(p, seen_pair, lse[t], di[t], st[n][e], dpt[n][e]);
            }
            unseen_bad = unseen_bad || (!seen_pair && bad[t] != 0);
          }
        }
      }
      if (__any_sync(0xffffffffu, unseen_bad)) {
        if constexpr (Variants) {
          // The chunk rows that see the lane's keys kw + g and kw + g + 8 (the only key rows
          // exact_rows_product asks about), one bit a row: two registers, not R pairs of loads.
          const int32_t* seen_lo = tl.seen_lo + buf * R;
          uint32_t sees0 = 0u, sees1 = 0u;
          for (int t = 0; t < R; ++t) {
            sees0 |= (kw + g >= seen_lo[t] && kw + g < seen[t] ? 1u : 0u) << t;
            sees1 |= (kw + g + 8 >= seen_lo[t] && kw + g + 8 < seen[t] ? 1u : 0u) << t;
          }
          auto seen_by = [&](int key_row, int t) {
            return (((key_row < 8 ? sees0 : sees1) >> t) & 1u) != 0u;
          };
          exact_rows_product<T, D, S, R>(dv, st, doc, seen_by);  // dV += P^T dO
          exact_rows_product<T, D, S, R>(dk, dpt, qc, seen_by);  // dK += dS^T Q
        } else {
          auto seen_by = [&](int key_row, int t) { return kw + key_row < seen[t]; };
          exact_rows_product<T, D, S, R>(dv, st, doc, seen_by);  // dV += P^T dO
          exact_rows_product<T, D, S, R>(dk, dpt, qc, seen_by);  // dK += dS^T Q
        }
      } else {
        Products::template accumulate<R>(frags, dv, st, doc);  // dV += P^T dO
        Products::template accumulate<R>(frags, dk, dpt, qc);  // dK += dS^T Q
      }
    }
    buf ^= 1;
    has_chunk = has_next;
  }
  async_copy_wait<0>();

  // dk_acc, dv_acc [key] += dK, dV: each element is one lane's (launches add one after another).
  const int64_t kv_base = (b * p.Hkv + hk) * p.Nk;
  for (int r = 0; r < 2; ++r) {
    const int64_t j = tl.keys[kw + g + 8 * r];
    if (j < 0) continue;
    float* dka = bp.dk_acc + (kv_base + j) * D;
    float* dva = bp.dv_acc + (kv_base + j) * D;
    for (int nd = 0; nd < D / 8; ++nd)
      for (int e = 0; e < 2; ++e) {
        dka[nd * 8 + 2 * t4 + e] += dk[nd][2 * r + e];
        dva[nd * 8 + 2 * t4 + e] += dv[nd][2 * r + e];
      }
  }
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_BACKWARD_LOOP_CUH
