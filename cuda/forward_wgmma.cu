// forward_wgmma.cu - the Hopper forward kernel (sm_90a), FlashAttention-3 style: one branch of
// dense, dilated or block-sparse attention (SPEC 2-4) for f16 and bf16, head dims 64 and 128,
// on wgmma (cuda/wgmma.cuh) with f32 accumulation, K and V brought in by the tensor memory
// accelerator (cuda/tma_copy.cuh) while the tensor cores work.
//
// One block per (query tile of BR = 128 rows, batch, head): three warpgroups of 128 threads.
//   Producer (warpgroup 0). Keeps 56 registers a thread and hands the rest to the consumers,
//     224 a thread each (setmaxnreg; 56 + 2 x 224 = 504 of the block's 65536 / 128; with 40 or
//     48 the producer's index arithmetic spilled, nvcc 13). One of its threads walks the
//     tile's key chunks (BC = 128 keys) in the order the consumers do,
//     loading each chunk's K and V rows with TMA into a ring of stages, K and V each on
//     mbarriers of their own (StageBarriers): wait until the consumers released the stage's
//     K ("empty"), announce the bytes ("full", expect_tx), issue the copies; then the same for
//     V. The rows of a span are first + step * c (SPEC 3's dilation
//     is the step): the tensor maps (WgmmaTensorMaps) view K and V as rows `step` apart from
//     a residue, so a dilated gather is a plain box copy, no index arithmetic per row. Rows
//     past the tensor's end arrive as zeros.
//   Consumers (warpgroups 1 and 2), each 64 query rows (one warp per 16, as mma's fragments):
//     Q into shared memory once, then for each chunk, after its K's "full" phase and its turn
//     (the groups take turns to start their products, FlashAttention-3's ping-pong, so one
//     group's softmax overlaps the other's products):
//       S = Q K^T      wgmma, A = Q and B = K from 128-byte-swizzled tiles (K-major); the
//                      stage's K released ("empty") once it is done;
//       softmax        mma_rows.cuh, the same online softmax as forward_mma.cu (wgmma's
//                      accumulators hold each warp's rows as mma's C fragments do);
//       O += P V       wgmma with P from registers (S's accumulators rounded to T: the same
//                      repacking as forward_mma.cu) and V MN-major (its rows are keys),
//                      started with the next chunk's S product, behind it, so that it runs
//                      during that chunk's softmax (FlashAttention-3's overlap inside a
//                      warpgroup);
//     and release the stage's V once its P V is done. Every path through a chunk starts the
//     same products (the loop's comment says why).
//   Finish: mma_rows.cuh's finish_row, as forward_mma.cu.
// The NaN rule (SPEC 13): a tensor-core product multiplies every pair, and a stage holds keys
// some rows do not take (the causal cut, the span's end, rows of the next segment a box brings
// along), so where a V row such a row skips is not finite, the warpgroup sums P V pair by pair
// for that chunk (mma_unseen_pairs.cuh's exact product, through the swizzle). Masked scores are
// -inf by selection, so a K row that is not finite reaches no row that skips it.
//
// Shared memory (SwizzledTiles): every tile is 64-column pieces of 128-byte rows, swizzled as TMA
// writes them (a 16-byte chunk c of row r at chunk c ^ (r % 8)), each piece aligned to 1024
// bytes; Q 128 rows, K and V 128 rows a stage, and a tile of zeros. 128 KB at D = 64 (three
// stages), 192 KB at D = 128 (two).
//
// Launched by cuda/launch.cu through wgmma_forward (kernels.h) with the tensor maps it makes
// (make_wgmma_tensor_maps). Checked by tests/kernels/test_forward_kernels.cpp on the emulated
// sm_90 (emulator: wgmma, TMA, mbarriers and setmaxnreg to the PTX ISA, emu/README.md; three
// thread orders, against the reference).
#include "attention_tile.cuh"
#include "forward_outputs.cuh"
#include "kernels.h"
#include "mbarrier.cuh"
#include "mma_rows.cuh"
#include "mma_sync.cuh"  // pack2
#include "mma_unseen_pairs.cuh"
#include "shared_address.cuh"
#include "tma_copy.cuh"
#include "warp_specialization.cuh"
#include "wgmma.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- the tile's shape
template <class T, int D>
struct WgmmaTile {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kConsumers = 2;
  static constexpr int kBr = 64 * kConsumers;  // query rows: 64 a consumer warpgroup
  static constexpr int kBc = 128;              // keys a chunk
  // Stages of the K and V ring: three where they fit (D = 64; at D = 128 a third would pass
  // the 227 KB an SM has), so the producer loads further ahead of the consumers (StageBarriers).
  // One block an SM either way: its 384 threads take every register.
  static constexpr int kStages = D == 64 ? 3 : 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kPieces = D / 64;       // 64-column pieces of a row (128 bytes each)
  static constexpr int kPieceBytes = kBc * 128;  // one piece of a 128-row tile
  static constexpr int kTileBytes = kPieces * kPieceBytes;
  // Offsets from the 1024-aligned base: Q, K stages, V stages, the zero tile (the V of a P V
  // that must add nothing), then the barriers and the rows.
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTileBytes;
  static constexpr int kV = kK + kStages * kTileBytes;
  static constexpr int kZero = kV + kStages * kTileBytes;
  static constexpr int kBarriers = kZero + kTileBytes;  // StageBarriers: 4 x kStages
  static constexpr int kRows = kBarriers + 4 * kStages * 8;    // int64 rows[kBr]
  // Each warpgroup's span slot: int64 cnt[kBr], then first, step, most, its rows' fewest
  // count, 4 bytes of per-warp flags, and the tile's cut (shared pairs: lo and hi, int32).
  static constexpr int kSlotBytes = kBr * 8 + 6 * 8;
  static constexpr int kSlots = kRows + kBr * 8;
  static constexpr int kBytes = kSlots + (1 + kConsumers) * kSlotBytes;
  static constexpr size_t kSmem = kBytes + 1024;  // the base is aligned up from dynamic memory
};

// The ring's mbarriers, K's and V's apart (as FlashAttention-3's two pipelines): a chunk's K is
// done with once its S product is, early in the chunk, its V only once its P V is, during the
// next chunk (the overlap). Were they one, the producer could refill a stage only then, after
// the chunk after next should have started. full: the producer's arrival and the copies'
// bytes; empty: one arrival per consumer thread.
struct StageBarriers {
  uint64_t* full_k;
  uint64_t* full_v;
  uint64_t* empty_k;
  uint64_t* empty_v;
};
template <class Tile>
__device__ __forceinline__ StageBarriers stage_barriers(unsigned char* base) {
  uint64_t* at = reinterpret_cast<uint64_t*>(base + Tile::kBarriers);
  return StageBarriers{at, at + Tile::kStages, at + 2 * Tile::kStages, at + 3 * Tile::kStages};
}

// Byte offset of element (row, col) in a swizzled tile of 128-row pieces (the swizzle as TMA's
// 128B mode writes it: the base is 1024-aligned, so the pattern row is row % 8).
__device__ __forceinline__ int swizzled_offset(int row, int col, int piece_bytes) {
  const int byte = (col % 64) * 2;
  return (col / 64) * piece_bytes + row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}

// ---------------------------------------------------------------- descriptors
// Q and K are K-major (the head dim is the reduction): a 16-column step kk starts 32 bytes on
// inside its 128-byte row of piece kk / 4; 8-row groups are 1024 bytes apart.
__device__ __forceinline__ uint64_t k_major_descriptor(uint32_t tile, int kk, int piece_bytes) {
  return make_wgmma_descriptor(tile + (kk / 4) * piece_bytes + (kk % 4) * 32, 16, 1024,
                               WgmmaSwizzle::bytes128);
}
// V is MN-major (its rows are the reduction, keys): a 16-key step starts 16 rows (2048 bytes)
// on; the second 64 columns of D are the next piece (LBO), 8-key groups 1024 bytes apart (SBO).
__device__ __forceinline__ uint64_t mn_major_descriptor(uint32_t tile, int kk, int piece_bytes) {
  return make_wgmma_descriptor(tile + kk * 2048, piece_bytes, 1024, WgmmaSwizzle::bytes128);
}

// ---------------------------------------------------------------- the producer
// Chunk `chunk` of the walk (keys c0 .. c0 + BC - 1 of a span starting at `first`, `step` apart)
// into its stage: its K once the consumers released the stage's previous K, then its V once
// they released that V.
template <class T, int D>
__device__ __forceinline__ void load_chunk(const WgmmaTensorMaps& maps, unsigned char* base,
                                           int64_t first, int64_t step, int64_t c0, int64_t hk,
                                           int64_t b, int chunk) {
  using Tile = WgmmaTile<T, D>;
  const StageBarriers bar = stage_barriers<Tile>(base);
  const int stage = chunk % Tile::kStages, use = chunk / Tile::kStages;
  // Key c0 + c is row `residue + step * (m0 + c)` of the tensor: map `residue` counts rows
  // `step` apart from there (one map when step is 1).
  const int64_t residue = step > 1 ? first % step : 0;
  const int32_t m0 = static_cast<int32_t>((step > 1 ? first / step : first) + c0);
  const CUtensorMap* k_map = &maps.k[residue];
  const CUtensorMap* v_map = &maps.v[residue];
  unsigned char* k = base + Tile::kK + stage * Tile::kTileBytes;
  unsigned char* v = base + Tile::kV + stage * Tile::kTileBytes;
  if (use > 0) mbarrier_wait_parity(&bar.empty_k[stage], (use - 1) & 1);
  mbarrier_arrive_expect_tx(&bar.full_k[stage], Tile::kTileBytes);
  for (int piece = 0; piece < Tile::kPieces; ++piece)
    tma_load_4d(k + piece * Tile::kPieceBytes, k_map, 64 * piece, m0, static_cast<int32_t>(hk),
                static_cast<int32_t>(b), &bar.full_k[stage]);
  if (use > 0) mbarrier_wait_parity(&bar.empty_v[stage], (use - 1) & 1);
  mbarrier_arrive_expect_tx(&bar.full_v[stage], Tile::kTileBytes);
  for (int piece = 0; piece < Tile::kPieces; ++piece)
    tma_load_4d(v + piece * Tile::kPieceBytes, v_map, 64 * piece, m0, static_cast<int32_t>(hk),
                static_cast<int32_t>(b), &bar.full_v[stage]);
}

// ---------------------------------------------------------------- a warpgroup's spans
// Warp 0 of warpgroup `group` reads span `span` of the tile into the group's slot (read_span:
// every row's count, first, step and the largest count) and, for a consumer, the fewest count
// of its own 64 rows (rows < 0 left out). The caller synchronises.
// With shared pairs the tile's cut (attention_tile.cuh tile_span_cut) comes from the slot
// (slot_cut), where the kernel put it once, so no register holds it across the chunks.
__device__ __forceinline__ SpanCut slot_cut(const int64_t* slot, int br) {
  const int32_t* cut = reinterpret_cast<const int32_t*>(slot + br + 5);
  SpanCut c;
  c.lo = cut[0];
  c.hi = cut[1];
  return c;
}
__device__ __forceinline__ void read_group_span(const ForwardParams& p, int64_t h, int64_t tile,
                                                int64_t span, const int64_t* rows, int br,
                                                int64_t* slot, int group) {
  const SpanCut cut = p.share_pairs ? slot_cut(slot, br) : SpanCut{};  // written only then
  read_span(p, h, tile, span, rows, br, slot, slot + br, &cut);
  if (group == 0) return;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  int64_t fewest = INT64_MAX;
  for (int t = 64 * (group - 1) + lane; t < 64 * group; t += 32)
    if (rows[t] >= 0) fewest = min_i64(fewest, slot[t]);
  for (int offset = 16; offset > 0; offset >>= 1)
    fewest = min_i64(fewest, __shfl_xor_sync(0xffffffffu, fewest, offset));
  if (lane == 0) slot[br + 3] = fewest;
}

// ---------------------------------------------------------------- a consumer's chunk
// Whether a V row of the stage that some row of the warpgroup skips (from the fewest keys any
// of its rows takes, `fewest`, to BC) is not finite: the 128 threads look at those rows
// together and meet at the group's named barrier; flags: a byte per warp in the group's slot.
template <class T, int D>
__device__ __forceinline__ bool group_unseen_values_not_finite(const unsigned char* v,
                                                               int fewest, unsigned barrier,
                                                               unsigned char* flags) {
  using Tile = WgmmaTile<T, D>;
  const int t = static_cast<int>(threadIdx.x) & 127, warp = t >> 5;
  bool bad = false;
  for (int idx = t; idx < (Tile::kBc - fewest) * D; idx += 128) {
    const int row = fewest + idx / D, col = idx % D;
    T x;
    memcpy(&x, v + swizzled_offset(row, col, Tile::kPieceBytes), sizeof(T));
    bad = bad || !isfinite(to_float(x));
  }
  bad = __any_sync(0xffffffffu, bad) != 0;
  named_barrier_sync(barrier, 128);  // every thread read the flags of the chunk before
  if ((t & 31) == 0) flags[warp] = bad ? 1 : 0;
  named_barrier_sync(barrier, 128);
  // Lane 0's reading for the whole warp: a warp-uniform answer to ptxas (the kernel's comment).
  return __shfl_sync(0xffffffffu, (flags[0] | flags[1] | flags[2] | flags[3]) != 0 ? 1 : 0, 0) != 0;
}

// S = Q K^T for the warpgroup's 64 rows and the stage's BC keys: issued (start_scores), then
// waited for (finish_scores), so the turn can pass to the other warpgroup in between.
template <class T, int D>
__device__ __forceinline__ void start_scores(uint32_t q, uint32_t k,
                                             float (&s)[WgmmaTile<T, D>::kBc / 8][4]) {
  using Tile = WgmmaTile<T, D>;
  wgmma_fence();
  DILATTN_UNROLL
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma_ss<T, Tile::kBc, 1, 1, 0, 0>(&s[0][0], k_major_descriptor(q, kk, Tile::kPieceBytes),
                                       k_major_descriptor(k, kk, Tile::kPieceBytes),
                                       kk > 0 ? 1 : 0);
  wgmma_commit_group();
}
template <class T, int D>
__device__ __forceinline__ void finish_scores(float (&s)[WgmmaTile<T, D>::kBc / 8][4]) {
  wgmma_wait_group<0>();
  wgmma_fence_operand<WgmmaTile<T, D>::kBc / 2>(&s[0][0]);
}

// P as wgmma's register A fragments: S's accumulators rounded to T (accumulator blocks 2kk and
// 2kk + 1 are the A fragment of keys 16kk .. 16kk + 15, as in forward_mma.cu).
template <class T, int D>
__device__ __forceinline__ void pack_probabilities(
    const float (&s)[WgmmaTile<T, D>::kBc / 8][4], uint32_t (&a)[WgmmaTile<T, D>::kBc / 16][4]) {
  DILATTN_UNROLL
  for (int kk = 0; kk < WgmmaTile<T, D>::kBc / 16; ++kk) {
    const float* lo = s[2 * kk];
    const float* hi = s[2 * kk + 1];
    a[kk][0] = pack2(from_float<T>(lo[0]), from_float<T>(lo[1]));
    a[kk][1] = pack2(from_float<T>(lo[2]), from_float<T>(lo[3]));
    a[kk][2] = pack2(from_float<T>(hi[0]), from_float<T>(hi[1]));
    a[kk][3] = pack2(from_float<T>(hi[2]), from_float<T>(hi[3]));
  }
}

// O += P V started (committed, not waited for): P from registers, V MN-major.
template <class T, int D>
__device__ __forceinline__ void start_values(const uint32_t (&a)[WgmmaTile<T, D>::kBc / 16][4],
                                             uint32_t v, mma_rows::RowState<D>& st) {
  using Tile = WgmmaTile<T, D>;
  wgmma_fence_operand<D / 2>(&st.o[0][0]);
  wgmma_fence();
  DILATTN_UNROLL
  for (int kk = 0; kk < Tile::kBc / 16; ++kk)
    wgmma_rs<T, D, 1, 1, 1>(&st.o[0][0], a[kk], mn_major_descriptor(v, kk, Tile::kPieceBytes), 1);
  wgmma_commit_group();
}

// ---------------------------------------------------------------- the kernel
template <class T, int D>
__global__ void __launch_bounds__(WgmmaTile<T, D>::kThreads, 1)
    forward_wgmma_kernel(ForwardParams p, const __grid_constant__ WgmmaTensorMaps maps) {
  using Tile = WgmmaTile<T, D>;
  constexpr int BR = Tile::kBr, BC = Tile::kBc;
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  unsigned char* base = align_shared(smem, 1024);
  const StageBarriers bar = stage_barriers<Tile>(base);
  int64_t* rows = reinterpret_cast<int64_t*>(base + Tile::kRows);
  // The warpgroup, broadcast from lane 0: ptxas keeps wgmma products in flight only on paths
  // it can prove warp-uniform (else warning C7518: each product waited for at once), and a
  // value from a shuffle of lane 0 is one (CUTLASS's canonical_warp_group_idx does the same).
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = (tid & 127) >> 5;  // in the warpgroup
  int64_t* slot = reinterpret_cast<int64_t*>(base + Tile::kSlots + group * Tile::kSlotBytes);
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);

  // The tile's rows, the dilated gaps, the barriers.
  for (int r = tid; r < BR; r += Tile::kThreads) rows[r] = tile_row(p, h, tile, r, BR);
  if (p.o != nullptr && p.kind == kKindDilated) write_dilated_gaps<T>(p, b, h, tile, BR);
  if (tid == 0) {
    for (int s = 0; s < Tile::kStages; ++s) {
      mbarrier_init(&bar.full_k[s], 1);  // the producer's arrival; the bytes complete the phase
      mbarrier_init(&bar.full_v[s], 1);
      mbarrier_init(&bar.empty_k[s], 128 * Tile::kConsumers);
      mbarrier_init(&bar.empty_v[s], 128 * Tile::kConsumers);
    }
    mbarrier_init_fence();
  }
  // The zero tile, written once by ordinary stores and read by wgmma (the async proxy).
  uint4* zero = reinterpret_cast<uint4*>(base + Tile::kZero);
  for (int x = tid; x < Tile::kTileBytes / 16; x += Tile::kThreads)
    zero[x] = make_uint4(0, 0, 0, 0);
  fence_proxy_async_shared();
  __syncthreads();
  bool any_row = false;
  for (int r = 0; r < BR; ++r) any_row = any_row || rows[r] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only
  const int64_t num_spans = tile_span_count(p, h, tile);
  // Shared pairs (SPEC 3.4): the tile's cut into every group's slot, once (read_group_span).
  if (p.share_pairs) {
    if (tid < 1 + Tile::kConsumers) {
      const SpanCut cut = tile_span_cut(p, h, rows[0]);
      int32_t* at = reinterpret_cast<int32_t*>(
          reinterpret_cast<int64_t*>(base + Tile::kSlots + tid * Tile::kSlotBytes) + BR + 5);
      at[0] = cut.lo;
      at[1] = cut.hi;
    }
    __syncthreads();  // the same branch in every thread: p.share_pairs is the launch's
  }

  if (group == 0) {  // the producer
    warpgroup_registers_dec<56>();
    if (warp != 0) return;
    int chunk = 0;
    for (int64_t span = 0; span < num_spans; ++span) {
      read_group_span(p, h, tile, span, rows, BR, slot, 0);
      __syncwarp();
      const int64_t first = slot[BR], step = slot[BR + 1], most = slot[BR + 2];
      for (int64_t c0 = 0; c0 < most; c0 += BC, ++chunk)
        if (lane == 0) load_chunk<T, D>(maps, base, first, step, c0, hk, b, chunk);
      __syncwarp();  // the slot is read before the next span overwrites it
    }
    return;
  }

  // A consumer: rows 64 (group - 1) .. + 63 of the tile; the lane's two are r0 and r1.
  warpgroup_registers_inc<224>();
  const unsigned barrier = static_cast<unsigned>(group);  // named barriers 1, 2: the group's own
  const unsigned my_turn = 2 + barrier, other_turn = 5 - barrier;  // 3, 4: the groups' turns
  const int row0 = 64 * (group - 1);
  const int r0 = row0 + warp * 16 + (lane >> 2), r1 = r0 + 8;
  // The lane's shared-pair weights for the tile's two spans, once (attention_tile.cuh).
  const uint32_t lane_w =
      p.share_pairs ? lane_weights(p, h, rows[r0], rows[r1], rows[0], slot_cut(slot, BR)) : 0;
  unsigned char* q = base + Tile::kQ;
  for (int idx = tid & 127; idx < 64 * D; idx += 128) {
    const int r = row0 + idx / D, d = idx % D;
    const int64_t i = rows[r];
    const T x = i >= 0 ? load_bnhd<T>(p.q, p.q_stride, b, i, h, d) : from_float<T>(0.0f);
    memcpy(q + swizzled_offset(r, d, Tile::kPieceBytes), &x, sizeof(T));
  }
  fence_proxy_async_shared();  // ordinary stores, read by wgmma
  const uint32_t q_group = shared_address(q) + static_cast<uint32_t>(row0) * 128;
  mma_rows::RowState<D> st;
  mma_rows::start(st);
  unsigned char* flags = reinterpret_cast<unsigned char*>(slot + BR + 4);
  // FlashAttention-3's overlap inside a group: chunk j's P V is started right after chunk
  // j + 1's S product, behind it on the tensor pipe, and runs during chunk j + 1's softmax.
  // ptxas keeps products in flight only where every path starts and waits for them alike (a
  // wait in a branch: its note C7518; an empty group committed: C7520), so every chunk starts
  // one S product and one P V. Before the first chunk, and after a chunk whose P V was summed
  // pair by pair (the NaN rule), that P V reads the zero tile: whatever pa holds (a P, finite,
  // or NaN in a row that is NaN already), it adds zeros, never 0 x inf from a stage's V.
  // pa, pv: the P and the V of the P V to start; held: the stage pv is in, released once that
  // product is done, -1 for the zero tile.
  uint32_t pa[BC / 16][4] = {};
  uint32_t pv = shared_address(base + Tile::kZero);
  int held = -1;
  int chunk = 0;
  for (int64_t span = 0; span < num_spans; ++span) {
    named_barrier_sync(barrier, 128);  // the group finished with the slot (and Q is written)
    if (warp == 0) read_group_span(p, h, tile, span, rows, BR, slot, group);
    named_barrier_sync(barrier, 128);
    // The span's counts the whole group branches on, made warp-uniform for ptxas (above).
    const int64_t most = __shfl_sync(0xffffffffu, slot[BR + 2], 0);
    const int64_t group_fewest = __shfl_sync(0xffffffffu, slot[BR + 3], 0);
    const int64_t cnt0 = slot[r0], cnt1 = slot[r1];
    float lw[2][2];  // the span's shared-pair weights
    chunk_log_weights(p, lane_w, span, lw);
    for (int64_t c0 = 0; c0 < most; c0 += BC, ++chunk) {
      const int stage = chunk % Tile::kStages, use = chunk / Tile::kStages;
      mbarrier_wait_parity(&bar.full_k[stage], use & 1);
      float s[BC / 8][4];
      // Ping-pong: the groups take turns to start their products, so one group's softmax runs
      // while the other's products keep the tensor cores busy. Group 1 starts; each chunk, a
      // group waits for its turn and hands it over once its products are issued. A group none
      // of whose rows takes a key of the chunk (rare) runs its products all the same: its
      // scores are all masked, so they change nothing, and the paths stay alike (above).
      if (group == 2 || chunk > 0) named_barrier_sync(my_turn, 256);
      start_scores<T, D>(q_group, shared_address(base + Tile::kK + stage * Tile::kTileBytes), s);
      start_values<T, D>(pa, pv, st);  // the previous chunk's
      named_barrier_arrive(other_turn, 256);
      wgmma_wait_group<1>();  // S (the older group) done; the P V may run on
      wgmma_fence_operand<BC / 2>(&s[0][0]);
      mbarrier_arrive(&bar.empty_k[stage]);  // this chunk's K read
      const int64_t cn = min_i64(BC, most - c0);
      const int keys0 = mma_rows::row_keys_in_chunk(cn, cnt0, c0);
      const int keys1 = mma_rows::row_keys_in_chunk(cn, cnt1, c0);
      float alpha[2] = {1.0f, 1.0f};
      mma_rows::softmax_scaled_scores<BC / 8, D>(p.score_pre, p.score_post, s, keys0, keys1, st,
                                                 alpha, lw);
      wgmma_wait_group<0>();  // the previous chunk's P V, then its V back
      wgmma_fence_operand<D / 2>(&st.o[0][0]);
      if (held >= 0) mbarrier_arrive(&bar.empty_v[held]);
      mma_rows::rescale_rows<D>(st, alpha);
      const int fewest = mma_rows::row_keys_in_chunk(cn, group_fewest, c0);
      const unsigned char* v = base + Tile::kV + stage * Tile::kTileBytes;
      mbarrier_wait_parity(&bar.full_v[stage], use & 1);  // this chunk's V, for what follows
      if (fewest < BC && group_unseen_values_not_finite<T, D>(v, fewest, barrier, flags)) {
        // The NaN rule: this chunk's P V pair by pair, now.
        exact_rows_product_at<T, D, BC>(
            st.o, s,
            [&](int c, int d) {
              T x;
              memcpy(&x, v + swizzled_offset(c, d, Tile::kPieceBytes), sizeof(T));
              return to_float(x);
            },
            [&](int row, int c) { return c < (row < 8 ? keys0 : keys1); });
        mbarrier_arrive(&bar.empty_v[stage]);
        pv = shared_address(base + Tile::kZero);
        held = -1;
      } else {  // started with the next chunk's S
        pack_probabilities<T, D>(s, pa);
        pv = shared_address(v);
        held = stage;
      }
    }
  }
  start_values<T, D>(pa, pv, st);  // the last chunk's P V (the zero tile's if none ran)
  wgmma_wait_group<0>();
  wgmma_fence_operand<D / 2>(&st.o[0][0]);
  if (held >= 0) mbarrier_arrive(&bar.empty_v[held]);
  // Group 2 handed group 1 a turn after its last chunk too: group 1 takes it, so every arrival
  // at the turn barriers is matched.
  if (group == 1 && chunk > 0) named_barrier_sync(my_turn, 256);
  mma_rows::finish_row<T, D>(p, b, h, rows[r0], 0, st);
  mma_rows::finish_row<T, D>(p, b, h, rows[r1], 1, st);
}

#define DILATTN_FORWARD_WGMMA_INSTANCES(T)                                          \
  template __global__ void forward_wgmma_kernel<T, 64>(                              \
      ForwardParams, const __grid_constant__ WgmmaTensorMaps);                       \
  template __global__ void forward_wgmma_kernel<T, 128>(ForwardParams,               \
                                                        const __grid_constant__ WgmmaTensorMaps);
DILATTN_FORWARD_WGMMA_INSTANCES(__half)
DILATTN_FORWARD_WGMMA_INSTANCES(__nv_bfloat16)
#undef DILATTN_FORWARD_WGMMA_INSTANCES

// ---------------------------------------------------------------- for the launcher (kernels.h)
template <class T>
WgmmaForwardKernel wgmma_forward(int64_t D) {  // D = 64 or 128
  if (D == 64)
    return WgmmaForwardKernel{forward_wgmma_kernel<T, 64>, WgmmaTile<T, 64>::kSmem,
                              WgmmaTile<T, 64>::kBr, WgmmaTile<T, 64>::kThreads};
  return WgmmaForwardKernel{forward_wgmma_kernel<T, 128>, WgmmaTile<T, 128>::kSmem,
                            WgmmaTile<T, 128>::kBr, WgmmaTile<T, 128>::kThreads};
}

template WgmmaForwardKernel wgmma_forward<__half>(int64_t);
template WgmmaForwardKernel wgmma_forward<__nv_bfloat16>(int64_t);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
