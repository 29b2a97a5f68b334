// dropout_tile.cuh - attention dropout (SPEC 11) as the kernels apply it: the factor
// M_ij = keep_ij / (1 - p) of a score, with keep_ij lib/dropout_rng.h's decision and nothing
// else (Philox4x32-10 of the counter (floor(j / 4), i, b H + h, offset) under the seed, word
// j mod 4, kept iff at least ceil(p 2^32)), so the kernels draw the bits the ref and cpu
// backends draw, forward and backward.
//
//   dropout_factor        M_ij of score (b, h, i, j): 1 / (1 - p) or 0;
//   dropout_quad_draws    the four draws of the keys at positions 4 q .. 4 q + 3 of the row at
//                         position i (one generator call), for a kernel whose thread holds
//                         several keys of one quad;
//   dropout_factor_of     M of one of those draws;
//   dropout_row_fragments M applied to a tensor-core warp's chunk of scores in mma's C fragment
//                         layout (the lane's two rows, keys 8n + 2t and 8n + 2t + 1 of each
//                         8-key block: two adjacent keys, one generator call where they share a
//                         quad), for the tensor-core forward (mma_rows.cuh's layout) and the
//                         dQ pass of the tensor-core backward (mma_backward_loop.cuh).
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

// The draws of keys at positions 4 key_quad .. 4 key_quad + 3 of the row at position i_at of
// query head h of batch element b.
__device__ __forceinline__ Philox4x32 dropout_quad_draws(const ForwardParams& p, int64_t b,
                                                         int64_t h, int64_t i_at,
                                                         int64_t key_quad) {
  const OptionHead at = option_heads(p, h);
  return dropout_draws(p.dropout_seed, p.dropout_offset, b + p.packed_sequence, at.head,
                       at.heads, i_at, key_quad);
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
// makes them 0). The lane's two keys of a block share a generator call when they share a key
// quad (always for consecutive keys from a multiple of 4: dense chunks).
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
  for (int n = 0; n < kTiles; ++n)
    DILATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int c = 8 * n + 2 * t;
      if (c >= keys[r]) continue;  // neither key taken (a row with no key takes none)
      // The keys' positions (the draws' j): a placed sub-problem's are its keys' places.
      const int64_t j = key_position(p, first + step * (c0 + c));
      const int64_t j_next = key_position(p, first + step * (c0 + c + 1));
      const Philox4x32 u = dropout_quad_draws(p, b, h, row_position(p, rows[r]), j / 4);
      x[n][2 * r] *= dropout_factor_of(p, philox_word(u, j % 4));
      if (c + 1 >= keys[r]) continue;
      x[n][2 * r + 1] *= j_next / 4 == j / 4
                             ? dropout_factor_of(p, philox_word(u, j_next % 4))
                             : dropout_factor_of(p, philox_word(
                                   dropout_quad_draws(p, b, h, row_position(p, rows[r]),
                                                      j_next / 4),
                                   j_next % 4));
    }
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_DROPOUT_TILE_CUH
