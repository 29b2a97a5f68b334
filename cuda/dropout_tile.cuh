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
//                         the dQ pass of the tensor-core backward (mma_backward_loop.cuh);
//   dropout_key_rows_mask the decisions of a transposed chunk (the dK/dV pass: a lane holds two
//                         keys of two query rows), for key_rows_factor.
// Quads: the 16 keys of a block pair whose positions are 1, 2 or 4 apart and start a run of 16
// (dense chunks, dilated branches of dilation 1, 2 and 4) take exactly four generator calls,
// four keys each (QuadSlots). The lanes that hold one row's 16 keys draw one call each and
// share the four calls' decisions as a 16-bit mask by xor shuffles: one call a lane for 4 keys,
// where a lane drawing alone takes one per 2 keys (a dense row), per key (dilation 2) or per
// pair (the transposed layout). Other chunks draw lane by lane.
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

// The 16 keys k < 16 of a block pair, at positions J0 + P k with P = 1, 2 or 4 and
// J0 mod 16 < P: SPEC 11.1 draws them from four calls (slots), four keys each, key k being word
// w of slot s's call (bit 4 s + w of the block pair's 16-bit mask):
//   P = 1: one run of 16, its four residues mod 4:   s = k mod 4,              w = k / 4;
//   P = 2: two runs, two residues each:              s = 2 (k / 8) + k mod 2,  w = (k mod 8) / 2;
//   P = 4: four runs, one residue:                   s = k / 4,                w = k mod 4.
// (A run's positions J0 + P k hold the residue J0 mod 4 + P k mod 4, and J0 mod 16 < P keeps
// the words in order.) slot_key: the first key of slot s, whose position names the call.
struct QuadSlots {
  int P;
  __device__ __forceinline__ int bit(int k) const {
    const int slot = P == 1 ? (k & 3) : P == 2 ? 2 * (k >> 3) + (k & 1) : k >> 2;
    const int word = P == 1 ? k >> 2 : P == 2 ? (k & 7) >> 1 : k & 3;
    return 4 * slot + word;
  }
  __device__ __forceinline__ int slot_key(int slot) const {
    return P == 1 ? slot : P == 2 ? 8 * (slot >> 1) + (slot & 1) : 4 * slot;
  }
};

// Whether keys at positions J0, J0 + P, ... (P in positions, one per key) take QuadSlots.
__device__ __forceinline__ bool quad_slots_apply(int64_t j0, int64_t P) {
  return (P == 1 || P == 2 || P == 4) && j0 >= 0 && (j0 & 15) < P;
}

// The four keep bits of slot `slot`'s call for the row at position i_at, at bits shift + 4 slot
// + w: the call is the one of the slot's first key, at position j_slot.
__device__ __forceinline__ uint32_t quad_slot_bits(const ForwardParams& p, int64_t b, int64_t h,
                                                   int64_t i_at, int64_t j_slot, int slot,
                                                   int shift) {
  const Philox4x32 u = dropout_call_draws(p, b, h, i_at, dropout_call_of(j_slot));
  uint32_t bits = 0;
  DILATTN_UNROLL
  for (int w = 0; w < 4; ++w)
    bits |= (philox_word(u, w) >= p.dropout_threshold ? 1u : 0u) << (shift + 4 * slot + w);
  return bits;
}

// M of the decision at bit `bit` of mask.
__device__ __forceinline__ float dropout_factor_of_bit(const ForwardParams& p, uint32_t mask,
                                                       int bit) {
  return (mask >> bit) & 1u ? p.dropout_scale : 0.0f;
}

// The decisions of one row's keys in a chunk QuadSlots covers (j0, P: the chunk's first key
// position and the positions' step), for kTiles 8-key blocks (kTiles even, at most 8): bit
// 16 m + QuadSlots::bit(k) for chunk key 16 m + k. The quad's lane t draws slot t's call of
// each block pair and two xor shuffles give the quad the pair's 16 bits. The block pairs go
// one after another (their calls side by side would spill), and every lane of the warp takes
// part (the shuffles), whatever its row's key count.
template <int kTiles>
__device__ __forceinline__ uint64_t quad_row_mask(const ForwardParams& p, int64_t b, int64_t h,
                                                  int64_t i_at, int64_t j0, int64_t P) {
  static_assert(kTiles % 2 == 0 && kTiles <= 8, "block pairs whose bits fit 64");
  const int t = static_cast<int>(threadIdx.x) & 3;
  const QuadSlots q{static_cast<int>(P)};
  uint64_t mask = 0;
  DILATTN_NO_UNROLL
  for (int m = 0; m < kTiles / 2; ++m) {
    uint32_t bits = quad_slot_bits(p, b, h, i_at, j0 + P * (16 * m + q.slot_key(t)), t, 0);
    bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
    bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
    mask |= static_cast<uint64_t>(bits) << (16 * m);
  }
  return mask;
}

// dropout_row_fragments for chunks QuadSlots covers: each row's mask (quad_row_mask), then
// its factors on the lane's keys.
template <int kTiles>
__device__ __forceinline__ void dropout_quad_fragments(const ForwardParams& p, int64_t b,
                                                       int64_t h, const int64_t (&rows)[2],
                                                       const int (&keys)[2], int64_t j0,
                                                       int64_t P, float (&x)[kTiles][4]) {
  const int t = static_cast<int>(threadIdx.x) & 3;
  const QuadSlots q{static_cast<int>(P)};
  DILATTN_UNROLL
  for (int r = 0; r < 2; ++r) {
    const uint64_t mask = quad_row_mask<kTiles>(p, b, h, row_position(p, rows[r]), j0, P);
    DILATTN_UNROLL
    for (int n = 0; n < kTiles; ++n)
      DILATTN_UNROLL
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * n + 2 * t + e;  // chunk key 16 (n / 2) + (c mod 16)
        if (c >= keys[r]) continue;       // not taken
        const uint32_t pair_bits = static_cast<uint32_t>(mask >> (16 * (n >> 1)));
        x[n][2 * r + e] *= dropout_factor_of_bit(p, pair_bits, q.bit(c & 15));
      }
  }
}

// x: a warp's chunk of scores or probabilities as kTiles C fragments (element e of block n:
// row e >> 1 of the lane's two, key c = 8n + 2t + (e & 1) of the chunk, t = lane % 4, as PTX
// lays out mma's C). Each element the row takes (c < keys[r]) is multiplied by M of (b, h,
// rows[r], first + step * (c0 + c)); the rest are left as they are (the caller's selection
// makes them 0). Called by every lane of the warp with the same chunk. Chunks QuadSlots
// covers go by quads (dropout_quad_fragments); otherwise a lane visits its row's keys in order
// with the last two calls kept, so a call is drawn once for the lane's keys that share it.
template <int kTiles>
__device__ __forceinline__ void dropout_row_fragments(const ForwardParams& p, int64_t b,
                                                      int64_t h, const int64_t (&rows)[2],
                                                      const int (&keys)[2], int64_t first,
                                                      int64_t step, int64_t c0,
                                                      float (&x)[kTiles][4]) {
  // The chunk's keys are a progression: positions j0, j0 + P, ... (a placed sub-problem's keys
  // are k_step positions apart). The same for every lane of the warp.
  const int64_t j0 = key_position(p, first + step * c0);
  const int64_t P = key_position(p, first + step * (c0 + 1)) - j0;
  if constexpr (kTiles % 2 == 0 && kTiles <= 8) {
    if (quad_slots_apply(j0, P)) {
      dropout_quad_fragments<kTiles>(p, b, h, rows, keys, j0, P, x);
      return;
    }
  }
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

// The transposed chunk of the dK/dV pass (mma_backward_loop.cuh): lane 4 g + t holds keys g and
// g + 8 of the warp's 16 and chunk rows 8 n + 2 t + rho (rho = 0, 1) of each 8-row block n. When
// the warp's keys take QuadSlots (positions j0 + P k, k < 16), the 8 lanes of one t hold both
// rows' 16 keys: lane g draws slot g mod 4 of row rho = g / 4 (row_at: that row's position),
// and three xor shuffles give each of them both rows' masks, row rho's decision for key k at
// bit 16 rho + QuadSlots::bit(k) (key_rows_factor). Every lane of the warp takes part.
__device__ __forceinline__ uint32_t dropout_key_rows_mask(const ForwardParams& p, int64_t b,
                                                          int64_t h, int64_t row_at,
                                                          int64_t j0, int64_t P) {
  const int g = (static_cast<int>(threadIdx.x) & 31) >> 2;
  const QuadSlots q{static_cast<int>(P)};
  const int slot = g & 3, rho = g >> 2;
  uint32_t mask = quad_slot_bits(p, b, h, row_at, j0 + P * q.slot_key(slot), slot, 16 * rho);
  mask |= __shfl_xor_sync(0xffffffffu, mask, 4);
  mask |= __shfl_xor_sync(0xffffffffu, mask, 8);
  mask |= __shfl_xor_sync(0xffffffffu, mask, 16);
  return mask;
}

// M of row rho's pair with the warp's key k (k < 16) from dropout_key_rows_mask's mask.
__device__ __forceinline__ float key_rows_factor(const ForwardParams& p, uint32_t mask, int64_t P,
                                                 int rho, int k) {
  return dropout_factor_of_bit(p, mask, 16 * rho + QuadSlots{static_cast<int>(P)}.bit(k));
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_DROPOUT_TILE_CUH
