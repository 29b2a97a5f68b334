// dropout_tile.cuh - attention dropout (SPEC 11) as the kernels apply it: the factor
// M_ij = keep_ij / (1 - p) of a score, with keep_ij lib/dropout_rng.h's decision and nothing
// else (Philox4x32-10 of the counter (offset, i, b H + h, 4 floor(j / 16) + j mod 4) under the
// seed, word floor(j / 4) mod 4, kept iff at least ceil(p 2^32)), so the kernels draw the bits
// the ref and cpu backends draw, forward and backward.
//
//   dropout_factor        M_ij of score (b, h, i, j): 1 / (1 - p) or 0;
//   dropout_call_draws    the four draws of one generator call of the row at position i (keys
//                         j, j + 4, j + 8, j + 12 of a run of 16), for a kernel whose thread
//                         holds several keys of one call;
//   dropout_factor_of     M of one of those draws;
//   dropout_row_fragments M applied to a tensor-core warp's chunk of scores in mma's C fragment
//                         layout (the lane's two rows, keys 8n + 2t and 8n + 2t + 1 of each
//                         8-key block), for the tensor-core forward (mma_rows.cuh's layout) and
//                         the dQ pass of the tensor-core backward (mma_backward_loop.cuh). A
//                         lane keeps the last two calls of a row: the keys 8 apart of a dense
//                         row (blocks n and n + 1) and 4 apart of a dilation-4 branch share them.
//
// Positions are the launched problem's rows and keys, but for a ring's placed sub-problem
// (SPEC 5.5), whose draws take its rows', keys' and heads' places in the whole problem
// (placed_positions.cuh). A packed batch runs one sequence at a time (cuda/launch.cu), whose
// rows and keys are then the sequence's positions (SPEC 10.2), so b is the batch element plus
// p.packed_sequence (0 but for a packed sequence).
// A dilated pair several branches hold gets the same factor in each (a pure function of
// (b, h, i, j)), which is SPEC 11's one decision per pair applied to each occurrence's term.
// The launcher fills the parameters (launch_shared.cu, shared_params); the kernels' dropout
// instances apply them after the softmax (forward_tile_loop.cuh, forward_mma.cu,
// forward_mma_tf32.cu) and in P and dS (backward_tile_loop.cuh, mma_backward_loop.cuh).
//
// Checked by tests/kernels/test_dropout_kernels.cpp against the reference.
#ifndef DILATTN_DROPOUT_TILE_CUH
#define DILATTN_DROPOUT_TILE_CUH

#include "attention_tile.cuh"
#include "dropout_rng.h"
#include "placed_positions.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// The draws of generator call `call` (SPEC 11.1) of the row at position i_at of query head h of
// batch element b.
__device__ __forceinline__ Philox4x32 dropout_call_draws(const ForwardParams& p, int64_t b,
                                                         int64_t h, int64_t i_at, int64_t call) {
  const OptionHead at = option_heads(p, h);
  return dropout_draws(p.dropout_seed, p.dropout_offset, b + p.packed_sequence, at.head,
                       at.heads, i_at, call);
}

// M of a draw u: 1 / (1 - p) when kept (u >= ceil(p 2^32)), else 0.
__device__ __forceinline__ float dropout_factor_of(const ForwardParams& p, uint32_t u) {
  return u >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

// M_ij of score (b, h, i, j) (SPEC 11).
__device__ __forceinline__ float dropout_factor(const ForwardParams& p, int64_t b, int64_t h,
                                                int64_t i, int64_t j) {
  const OptionHead at = option_heads(p, h);
  return dropout_keep(p.dropout_seed, p.dropout_offset, b + p.packed_sequence, at.head, at.heads,
                      row_position(p, i), key_position(p, j), p.dropout_threshold)
             ? p.dropout_scale
             : 0.0f;
}

// x: a warp's chunk of scores or probabilities as kTiles C fragments (element e of block n:
// row e >> 1 of the lane's two, key c = 8n + 2t + (e & 1) of the chunk, t = lane % 4, as PTX
// lays out mma's C). Each element the row takes (c < keys[r]) is multiplied by M of (b, h,
// rows[r], first + step * (c0 + c)); the rest are left as they are (the caller's selection
// makes them 0). A row's keys are visited in order with its last two calls kept, so a call is
// drawn once for the lane's keys that share it: keys 2t and 2t + 8 and keys 2t + 1 and 2t + 9
// of a run of 16 in a dense chunk that starts a run (two calls for four keys), keys c and c + 1
// of a dilation-4 chunk (one call for two).
template <int kTiles>
__device__ __forceinline__ void dropout_row_fragments(const ForwardParams& p, int64_t b,
                                                      int64_t h, const int64_t (&rows)[2],
                                                      const int (&keys)[2], int64_t first,
                                                      int64_t step, int64_t c0,
                                                      float (&x)[kTiles][4]) {
  const int t = static_cast<int>(threadIdx.x) & 3;
  // Unrolled, so that x stays in registers (an index known only at run time would move the
  // whole array to local memory).
  DILATTN_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int64_t i_at = row_position(p, rows[r]);
    int64_t newer = INT64_MIN, older = INT64_MIN;  // the kept calls (none yet)
    Philox4x32 u_newer{{0, 0, 0, 0}}, u_older{{0, 0, 0, 0}};
    DILATTN_UNROLL
    for (int n = 0; n < kTiles; ++n)
      DILATTN_UNROLL
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * n + 2 * t + e;
        if (c >= keys[r]) continue;  // not taken (a row with no key takes none)
        // The key's position (the draw's j): a placed sub-problem's are its keys' places.
        const int64_t j = key_position(p, first + step * (c0 + c));
        const int64_t call = dropout_call_of(j);
        if (call != newer && call != older) {
          older = newer;
          u_older = u_newer;
          newer = call;
          u_newer = dropout_call_draws(p, b, h, i_at, call);
        }
        const int word = dropout_word_of(j);
        x[n][2 * r + e] *= dropout_factor_of(
            p, call == newer ? philox_word(u_newer, word) : philox_word(u_older, word));
      }
  }
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_DROPOUT_TILE_CUH
