// dropout_tile.cuh - attention dropout (SPEC 11) as the kernels apply it: the factor
// M_ij = keep_ij / (1 - p) of a score, with keep_ij lib/dropout_rng.h's decision and nothing
// else (Philox4x32-10 of the counter (floor(j / 4), i, b H + h, offset) under the seed, word
// j mod 4, kept iff at least ceil(p 2^32)), so the kernels draw the bits the ref and cpu
// backends draw, forward and backward.
//
//   dropout_factor        M_ij of score (b, h, i, j): 1 / (1 - p) or 0;
//   dropout_quad_draws    the four draws of keys 4 q .. 4 q + 3 of row i (one generator call),
//                         for a kernel whose thread holds several keys of one quad;
//   dropout_factor_of     M of one of those draws.
//
// Positions are the whole problem's: the kernels run neither packed batches nor a ring's placed
// sub-problems (lib/backend_table.cpp), so b is the batch element, i and j the row and the key.
// A dilated pair several branches hold gets the same factor in each (a pure function of
// (b, h, i, j)), which is SPEC 11's one decision per pair applied to each occurrence's term.
// The launcher fills the parameters (launch_shared.cu, shared_params); the SIMT kernels'
// dropout instances (kDropout) apply them after the softmax (forward_tile_loop.cuh) and in dS
// (backward_tile_loop.cuh).
//
// Checked by tests/kernels/test_dropout_kernels.cpp against the reference.
#ifndef DILATTN_DROPOUT_TILE_CUH
#define DILATTN_DROPOUT_TILE_CUH

#include "attention_tile.cuh"
#include "dropout_rng.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// The draws of keys 4 key_quad .. 4 key_quad + 3 of row i of query head h of batch element b.
__device__ __forceinline__ Philox4x32 dropout_quad_draws(const ForwardParams& p, int64_t b,
                                                         int64_t h, int64_t i,
                                                         int64_t key_quad) {
  return dropout_draws(p.dropout_seed, p.dropout_offset, b, h, p.H, i, key_quad);
}

// M of a draw u: 1 / (1 - p) when kept (u >= ceil(p 2^32)), else 0.
__device__ __forceinline__ float dropout_factor_of(const ForwardParams& p, uint32_t u) {
  return u >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

// M_ij of score (b, h, i, j) (SPEC 11).
__device__ __forceinline__ float dropout_factor(const ForwardParams& p, int64_t b, int64_t h,
                                                int64_t i, int64_t j) {
  return dropout_keep(p.dropout_seed, p.dropout_offset, b, h, p.H, i, j, p.dropout_threshold)
             ? p.dropout_scale
             : 0.0f;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_DROPOUT_TILE_CUH
