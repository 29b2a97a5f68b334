// mma_tile_smem.cuh - the shared memory of a tensor-core forward block (cuda/forward_mma.cu,
// cuda/forward_mma_tf32.cu): K and V of two key chunks, [K0][V0][K1][V1], each [kBc][kStride]
// elements (rows padded against bank conflicts); the tile's query rows; kSpanSlots span
// descriptors (see the kernels' loops). Q ([kBr][kStride]) passes through [K1][V1] on its way
// into registers, before chunk 1 is copied there, so the block holds the two chunks alone.
// Variant instances (kVariants, SPEC 10.1 windows) add each row's window start per span slot;
// the others a table of the lanes' shared-pair log weights (SPEC 3.4).
#ifndef DILATTN_MMA_TILE_SMEM_CUH
#define DILATTN_MMA_TILE_SMEM_CUH

#include "attention_tile.cuh"  // lane_table_word
#include "smem_carver.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class Elem, int kWarpsT, int kBcT, int kStrideT, bool kVariantsT = false>
struct MmaTileSmem {
  static constexpr bool kVariants = kVariantsT;
  static constexpr int kWarps = kWarpsT;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kWarps;   // query rows per block, 16 per warp
  static constexpr int kBc = kBcT;          // keys per chunk
  static constexpr int kStride = kStrideT;  // padded shared-memory row, in elements
  static constexpr int kSpanSlots = 3;      // span descriptors in flight
  static_assert(kBr <= 2 * kBc, "Q fits in the second chunk's K and V");

  Elem* kv;
  int64_t* rows;  // [BR] query row, -1 for none
  int64_t* cnt;   // [kSpanSlots][BR] each row's key count in a span
  int64_t* span;  // [kSpanSlots][3] {first, step, largest count}
  int64_t* from = nullptr;  // kVariants: [kSpanSlots][BR] each row's first key in a span
  // Not kVariants: [2][BR][8] SPEC 3.4's log2 weights of the lanes' pairs, span 0 or the later
  // one, by row and key column mod 8 (attention_tile.cuh tile_log_weights).
  float* log_weights = nullptr;

  __host__ __device__ void carve(SmemCarver& c) {
    kv = c.take<Elem>(static_cast<size_t>(4 * kBc) * kStride);
    rows = c.take<int64_t>(kBr);
    cnt = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * kBr);
    span = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * 3);
    if constexpr (kVariants) from = c.take<int64_t>(static_cast<size_t>(kSpanSlots) * kBr);
    if constexpr (!kVariants)
      log_weights = c.take<float>(static_cast<size_t>(lane_table_word<kBr>(2, 0, 0)));
  }
  __device__ __forceinline__ Elem* k(int buf) const { return kv + (2 * buf) * kBc * kStride; }
  __device__ __forceinline__ Elem* v(int buf) const { return kv + (2 * buf + 1) * kBc * kStride; }
  __device__ __forceinline__ Elem* q() const { return kv + 2 * kBc * kStride; }
};

// Bytes of a tile's shared memory (the launch's dynamic shared memory).
template <class Tile>
inline size_t mma_tile_smem_bytes() {
  SmemCarver c{nullptr};
  Tile().carve(c);
  return c.used;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_TILE_SMEM_CUH
