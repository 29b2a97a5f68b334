// forward_outputs.cuh - how a forward kernel leaves a finished row when the call has one
// branch (dense, block-sparse, or dilated with one branch: SPEC 2-4): straight into the
// caller's O (its dtype and strides) and LSE (f32 or f64), with no f32 workspace and no
// init, merge or finalize passes. Multi-branch dilated calls merge into the workspace instead
// (forward_tile_loop.cuh's merge_tile_into_workspace, forward_mma.cu's merge_row).
//
//   store_o / store_lse   one element of O / LSE of row i (b, h)
//   write_dilated_gaps    SPEC 3: the rows of a segment that the head's offset does not
//                         select get O = 0, LSE = -inf; with one branch no tile holds them,
//                         so each tile writes the gaps between its own selected rows
//                         (tile_gap_range), and over a segment's tiles every gap is
//                         written exactly once.
// Checked by tests/kernels/test_forward_kernels.cpp (every kind, one and several branches).
#ifndef DILATTN_FORWARD_OUTPUTS_CUH
#define DILATTN_FORWARD_OUTPUTS_CUH

#include "attention_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

template <class T>
__device__ __forceinline__ void store_o(const ForwardParams& p, int64_t b, int64_t i, int64_t h,
                                        int64_t d, float x) {
  T* o = static_cast<T*>(p.o);
  o[b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] + d * p.o_stride[3]] =
      from_float<T>(x);
}

// The natural LSE of row i, rounded to f32 (+-inf beyond its range) or kept in f64.
__device__ __forceinline__ void store_lse(const ForwardParams& p, int64_t b, int64_t h, int64_t i,
                                          double lse) {
  if (p.lse == nullptr) return;
  const int64_t at = b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2];
  if (p.lse_is_f64)
    static_cast<double*>(p.lse)[at] = lse;
  else
    static_cast<float*>(p.lse)[at] = static_cast<float>(lse);
}

// Dilated, one branch: the positions [*start, *end) of tile `tile`'s segment from its first
// selected row (the segment start, for the segment's first tile) to the next tile's first
// selected row (the segment end, for the last tile holding rows). Ranges of the tiles of a
// segment partition it; a tile past the selected rows gets an empty range.
__device__ __forceinline__ void tile_gap_range(const ForwardParams& p, int64_t h, int64_t tile,
                                               int64_t br, int64_t* start, int64_t* end) {
  const int64_t wc = clipped_segment(p.w, p.Nq);
  const int64_t s0 = (tile / p.tiles_per_group) * wc;
  const int64_t s1 = segment_end(s0, wc, p.Nq);
  const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
  const int64_t count = selected_count(s0, s1, p.r, o);
  const int64_t sel = (tile % p.tiles_per_group) * br;  // the tile's first selected index
  *start = sel == 0 ? s0 : (sel < count ? selected_position(s0, p.r, o, sel) : s1);
  *end = sel + br < count ? selected_position(s0, p.r, o, sel + br) : s1;
}

// Every thread of the block takes a share: O = 0, LSE = -inf (the head's sink with sinks, SPEC
// 10.3, in every instance of every kernel) for each unselected position of the tile's gap range
// (SPEC 3: rows no branch selects).
template <class T>
__device__ __forceinline__ void write_dilated_gaps(const ForwardParams& p, int64_t b, int64_t h,
                                                   int64_t tile, int64_t br) {
  const double empty_lse = p.sinks != nullptr ? p.sinks[h] : -static_cast<double>(INFINITY);
  int64_t start = 0, end = 0;
  tile_gap_range(p, h, tile, br, &start, &end);
  const int64_t wc = clipped_segment(p.w, p.Nq);
  const int64_t s0 = (tile / p.tiles_per_group) * wc;
  const int64_t o = head_offset(p.head_mode, h, p.branch, p.r, p.H);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int64_t idx = tid; idx < (end - start) * p.D; idx += nt) {
    const int64_t i = start + idx / p.D, d = idx % p.D;
    if (is_selected(i, s0, p.r, o)) continue;
    store_o<T>(p, b, i, h, d, 0.0f);
    if (d == 0) store_lse(p, b, h, i, empty_lse);
  }
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_FORWARD_OUTPUTS_CUH
