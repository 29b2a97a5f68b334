// standard_cases.h - the cases every cpu test against the reference walks: each kind, head
// mode, odd head dims (1, 40, 72, 100, 256), decode (Nq 1 and 3), N not a multiple of any tile
// (64 keys, 64 rows, 256..1024-row blocks), GQA, causal, Nq != Nk, every dtype, permuted
// outputs; f64 inputs (computed in f64, SPEC 12's bound) in every kind, head mode and path
// (decode, multi-row-block, GQA, causal, empty rows, permuted outputs). Small enough for the
// f64 reference under ASan.
#ifndef DILATTN_TESTS_CPU_STANDARD_CASES_H
#define DILATTN_TESTS_CPU_STANDARD_CASES_H

#include <vector>

#include "../common/attention_case.h"

namespace cpucases {

using harness::AttentionCase;

// Output views permuted: [B, H, N, D] memory seen as [B, N, H, D].
constexpr harness::Layout kPermuted{true, 0};

inline std::vector<AttentionCase> standard_cases() {
  std::vector<AttentionCase> cases;
  auto dense = [&](const char* name, int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv,
                   int64_t D, bool causal, dilattn_dtype t) {
    AttentionCase c;
    c.name = name; c.B = B; c.Nq = Nq; c.Nk = Nk; c.H = H; c.Hkv = Hkv; c.D = D;
    c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  dense("dense_gqa_d40", 2, 77, 77, 2, 1, 40, false, DILATTN_F32);
  dense("dense_causal_nq_lt_nk_d72", 1, 70, 300, 2, 2, 72, true, DILATTN_F32);
  dense("dense_causal_nq_gt_nk_empty_rows_d1", 1, 300, 70, 2, 1, 1, true, DILATTN_F32);
  dense("dense_nq_ne_nk_d100", 1, 45, 131, 1, 1, 100, false, DILATTN_F32)->output_layout =
      kPermuted;
  dense("dense_d256", 1, 90, 90, 1, 1, 256, true, DILATTN_F32);
  dense("dense_f16_causal_d100", 1, 130, 130, 2, 2, 100, true, DILATTN_F16);
  dense("dense_bf16_gqa_d64", 1, 100, 100, 4, 2, 64, false, DILATTN_BF16);
  dense("dense_f64_d40", 1, 65, 65, 2, 1, 40, true, DILATTN_F64);
  dense("dense_f64_gqa_d64", 2, 77, 150, 4, 2, 64, false, DILATTN_F64)->output_layout =
      kPermuted;
  dense("dense_f64_causal_nq_gt_nk_empty_rows_d1", 1, 300, 70, 2, 1, 1, true, DILATTN_F64);
  dense("dense_f64_d256", 1, 90, 90, 1, 1, 256, true, DILATTN_F64);
  dense("dense_f64_512_row_blocks_causal_d16", 1, 600, 600, 16, 16, 16, true, DILATTN_F64);
  // Enough heads for 512- and 1024-row dense blocks (block_rows: 32 work items), two of them,
  // the second partial.
  dense("dense_512_row_blocks_causal_d16", 1, 600, 600, 16, 16, 16, true, DILATTN_F32);
  dense("dense_1024_row_blocks_nq_gt_nk_d16", 1, 1100, 130, 32, 32, 16, false, DILATTN_F32);
  // Decode (a piece of <= 4 query rows reads K rows in place, cpu_forward.cpp): one and three
  // rows, f32 with D a multiple of the vector width; keys not a multiple of the 64-key tile.
  dense("decode_nq1_causal_gqa_d64", 2, 1, 300, 4, 2, 64, true, DILATTN_F32);
  dense("decode_nq3_d32", 1, 3, 200, 2, 2, 32, false, DILATTN_F32);
  dense("decode_f64_nq1_causal_gqa_d64", 2, 1, 300, 4, 2, 64, true, DILATTN_F64);
  dense("decode_f64_nq3_d72", 1, 3, 200, 2, 2, 72, false, DILATTN_F64);

  auto dilated = [&](const char* name, int64_t N, int64_t H, int64_t Hkv, int64_t D,
                     std::vector<int64_t> w, std::vector<int64_t> r, dilattn_head_mode mode,
                     bool causal, dilattn_dtype t) {
    AttentionCase c;
    c.name = name; c.B = 1; c.Nq = c.Nk = N; c.H = H; c.Hkv = Hkv; c.D = D;
    c.kind = DILATTN_KIND_DILATED; c.segments = w; c.dilations = r; c.head_mode = mode;
    c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  dilated("dilated_mod_d40", 300, 4, 4, 40, {64, 128, 300}, {1, 2, 4}, DILATTN_HEADS_MOD, false,
          DILATTN_F32);
  dilated("dilated_block_causal_d72", 333, 5, 5, 72, {100, 333}, {2, 3}, DILATTN_HEADS_BLOCK,
          true, DILATTN_F32);
  dilated("dilated_groups_causal_gqa_d64", 520, 3, 1, 64, {128, 256, 520}, {1, 2, 2},
          DILATTN_HEADS_GROUPS, true, DILATTN_F32)->output_layout = kPermuted;
  dilated("dilated_clipped_segment_f16_d100", 200, 2, 1, 100, {1000, 50}, {3, 5},
          DILATTN_HEADS_MOD, false, DILATTN_F16);
  // LongNet's nested branches at sizes where whole tiles are shared between branches: those
  // tiles are computed once, in the first branch, with weight 2 or 3 (cpu_pair_weights.h),
  // and skipped in the others. B x Hkv = 8 takes the one-pass backward.
  dilated("dilated_longnet_mod_causal_d32", 1024, 4, 4, 32, {128, 256, 512}, {1, 2, 4},
          DILATTN_HEADS_MOD, true, DILATTN_F32)->B = 2;
  dilated("dilated_longnet_block_partial_d64", 1100, 5, 1, 64, {128, 256, 512}, {1, 2, 4},
          DILATTN_HEADS_BLOCK, false, DILATTN_F32);
  // Dilation 1 only: 256-row blocks, so segments of 200 straddle block edges.
  dilated("dilated_r1_segments_cross_blocks_d16", 600, 2, 1, 16, {200, 600}, {1, 1},
          DILATTN_HEADS_MOD, true, DILATTN_F32);
  dilated("dilated_bf16_causal_d1", 150, 2, 2, 1, {40, 150}, {1, 2}, DILATTN_HEADS_MOD, true,
          DILATTN_BF16);
  dilated("dilated_f64_block_d40", 130, 4, 2, 40, {32, 64}, {2, 4}, DILATTN_HEADS_BLOCK, false,
          DILATTN_F64);
  dilated("dilated_f64_mod_causal_d32", 300, 4, 4, 32, {64, 128, 300}, {1, 2, 4},
          DILATTN_HEADS_MOD, true, DILATTN_F64);
  dilated("dilated_f64_groups_causal_gqa_d64", 520, 3, 1, 64, {128, 256, 520}, {1, 2, 2},
          DILATTN_HEADS_GROUPS, true, DILATTN_F64)->output_layout = kPermuted;
  // Nested branches (shared tiles with weights, cpu_pair_weights.h); B x Hkv = 8: one pass.
  dilated("dilated_f64_longnet_mod_causal_d16", 1024, 4, 4, 16, {128, 256, 512}, {1, 2, 4},
          DILATTN_HEADS_MOD, true, DILATTN_F64)->B = 2;
  dilated("dilated_f64_clipped_segment_d100", 200, 2, 1, 100, {1000, 50}, {3, 5},
          DILATTN_HEADS_MOD, false, DILATTN_F64);

  // Random masks (seed 12345); for causal cases without the blocks the causal rule empties.
  auto sparse = [&](const char* name, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D,
                    int64_t bq, int64_t bk, int64_t mask_heads, double density, bool causal,
                    dilattn_dtype t) {
    AttentionCase c;
    c.name = name; c.B = 1; c.Nq = Nq; c.Nk = Nk; c.H = H; c.Hkv = Hkv; c.D = D;
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.mask.bq = bq; c.mask.bk = bk;
    c.mask.heads = mask_heads; c.mask.density = density; c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  sparse("sparse_per_head_causal_d40", 300, 300, 2, 1, 40, 64, 64, 2, 0.4, true, DILATTN_F32);
  sparse("sparse_odd_blocks_gqa_d100", 200, 330, 4, 2, 100, 32, 48, 1, 0.3, false, DILATTN_F32);
  sparse("sparse_big_blocks_bf16_causal_d72", 300, 300, 1, 1, 72, 100, 100, 1, 0.6, true,
         DILATTN_BF16);
  sparse("sparse_f64_per_head_causal_d40", 300, 300, 2, 1, 40, 64, 64, 2, 0.4, true,
         DILATTN_F64);
  sparse("sparse_f64_odd_blocks_gqa_d100", 200, 330, 4, 2, 100, 32, 48, 1, 0.3, false,
         DILATTN_F64);
  return cases;
}

}  // namespace cpucases

#endif  // DILATTN_TESTS_CPU_STANDARD_CASES_H
