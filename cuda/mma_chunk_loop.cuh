// mma_chunk_loop.cuh - the loop over key chunks both tensor-core forward kernels run
// (forward_mma.cu for f16/bf16, forward_mma_tf32.cu for f32): steps 2-3 of forward_mma.cu's
// header, with the chunk's copy and the warp's work left to the kernel.
//
//   issue(first, step, c0, cn, k, v)  copy keys c0 .. c0 + cn - 1 of a span (rows first +
//                                     step * (c0 + c)) of K and V into buffers k and v, rows
//                                     cn .. BC - 1 zero, by cp.async (the loop commits them);
//   compute(k, v, keys0, keys1, at)   one warp's S = Q K^T, online softmax, O += P V for the
//                                     chunk in k and v; keys0, keys1: how many of its first keys
//                                     the lane's two rows take; at: where its keys lie (ChunkKeys,
//                                     for dropout's draws). Variant instances (Tile::kVariants)
//                                     get a sixth argument, the chunk's ChunkWindow
//                                     (mma_variants.cuh): the rows' window starts and the keys'
//                                     indices; their spans are read_window_span's, which start
//                                     at the first key any row's window reaches and end at the
//                                     last, so chunks no window reaches are never walked.
//
// Double-buffered: the next chunk's K and V are copied while this one is computed; one
// __syncthreads a chunk. Span descriptors rotate through Tile::kSpanSlots = 3 slots: warp 0
// fills the next span's slot during a chunk while other threads may still read the previous
// span's (the chunk before), never the one before that. A warp none of whose rows has a key in
// the chunk skips it. Checked with the kernels by tests/kernels/test_forward_kernels.cpp.
#ifndef DILATTN_MMA_CHUNK_LOOP_CUH
#define DILATTN_MMA_CHUNK_LOOP_CUH

#include "async_copy.cuh"
#include "attention_tile.cuh"
#include "mma_rows.cuh"
#include "mma_tile_smem.cuh"
#include "mma_variants.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// Warp 0 reads span `span` of the tile's rows into descriptor slot `slot`: read_span, or with
// the window read_window_span (variant instances).
template <class Tile>
__device__ __forceinline__ void read_tile_span(const ForwardParams& p, const Tile& tl, int64_t h,
                                               int64_t tile, int64_t span, int slot,
                                               const SpanCut* cut) {
  constexpr int BR = Tile::kBr;
  if constexpr (Tile::kVariants)
    read_window_span(p, h, tile, span, tl.rows, BR, tl.from + slot * BR, tl.cnt + slot * BR,
                     tl.span + 3 * slot);
  else
    read_span(p, h, tile, span, tl.rows, BR, tl.cnt + slot * BR, tl.span + 3 * slot, cut);
}
// Where a chunk's keys lie: key c of the chunk is first + step * (c0 + c), in span `span`.
struct ChunkKeys {
  int64_t first, step, c0, span;
};

// The tile's rows and the first span's descriptor are in tl (read_span of span 0 done, visible
// to all); r0, r1: the lane's two tile rows; cut: the tile's (tile_span_cut: shared pairs), or
// null in the instances that never share pairs.
template <class Tile, class Issue, class Compute>
__device__ __forceinline__ void mma_chunk_loop(const ForwardParams& p, const Tile& tl, int64_t h,
                                               int64_t tile, int64_t num_spans, int r0, int r1,
                                               const SpanCut* cut, Issue issue,
                                               Compute compute) {
  constexpr int BR = Tile::kBr, BC = Tile::kBc;
  const int tid = static_cast<int>(threadIdx.x);
  int64_t span = 0, c0 = 0;
  int buf = 0;
  if (num_spans > 0 && tl.span[2] > 0)
    issue(tl.span[0], tl.span[1], int64_t{0}, min_i64(BC, tl.span[2]), tl.k(0), tl.v(0));
  async_copy_commit();
  int slot = 0;  // span % kSpanSlots
  while (span < num_spans) {
    const int64_t* info = tl.span + 3 * slot;
    const int64_t most = info[2];
    // The next chunk: the rest of this span, else the next span's first (spans may be empty).
    int64_t next_span = span, next_c0 = c0 + BC;
    int next_slot = slot;
    if (next_c0 >= most) {
      next_span = span + 1;
      next_c0 = 0;
      next_slot = slot + 1 == Tile::kSpanSlots ? 0 : slot + 1;
    }
    if (tid < 32 && next_span != span && next_span < num_spans)
      read_tile_span(p, tl, h, tile, next_span, next_slot, cut);
    async_copy_wait<0>();
    __syncthreads();  // this chunk's K, V and the next span's descriptor visible to all
    // buf holds this chunk (if the span has one); the next goes to the other buffer, whose
    // chunk (or, for chunk 1, Q) every thread finished with before the barrier above.
    const bool has_chunk = c0 < most;
    const int next_buf = has_chunk ? buf ^ 1 : buf;
    const int64_t* next_info = tl.span + 3 * next_slot;
    if (next_span < num_spans && next_c0 < next_info[2])
      issue(next_info[0], next_info[1], next_c0, min_i64(BC, next_info[2] - next_c0),
            tl.k(next_buf), tl.v(next_buf));
    async_copy_commit();
    if (has_chunk) {
      // Each row's keys in this chunk: the first min(cn, count - c0) (the causal cut and the
      // span's end). A warp none of whose rows has one skips the chunk.
      const int64_t cn = min_i64(BC, most - c0);
      const int keys0 = mma_rows::row_keys_in_chunk(cn, tl.cnt[slot * BR + r0], c0);
      const int keys1 = mma_rows::row_keys_in_chunk(cn, tl.cnt[slot * BR + r1], c0);
      const ChunkKeys at{info[0], info[1], c0, span};
      if constexpr (Tile::kVariants) {  // the rows' keys in it: [from, keys) (the window)
        const ChunkWindow w =
            chunk_window<BC>(info, c0, tl.from[slot * BR + r0], tl.from[slot * BR + r1]);
        if (__any_sync(0xffffffffu, w.from0 < keys0 || w.from1 < keys1))
          compute(tl.k(buf), tl.v(buf), keys0, keys1, at, w);
      } else if (__any_sync(0xffffffffu, keys0 > 0 || keys1 > 0)) {
        compute(tl.k(buf), tl.v(buf), keys0, keys1, at);
      }
    }
    buf = next_buf;
    span = next_span;
    c0 = next_c0;
    slot = next_slot;
  }
  async_copy_wait<0>();
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_MMA_CHUNK_LOOP_CUH
