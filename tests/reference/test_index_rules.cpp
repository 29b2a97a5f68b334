// test_index_rules.cpp - every function of lib/index_rules.h on hand-computed cases (SPEC 1-4):
// GQA head map, causal limit, clipped and partial segments, head groups with H % m != 0,
// offsets of each head mode, selected positions and counts, key progressions, and the blocks of
// a block-sparse mask a packed sequence meets (SPEC 10.2).
#include "../common/check.h"
#include "index_rules.h"

int main() {
  using namespace dilattn;
  // SPEC 1: H = 6, Hkv = 2, groups of 3 query heads: head 5 reads kv head 5 / 3 = 1.
  CHECK_EQ(kv_head_of(5, 6, 2), 1);
  CHECK_EQ(kv_head_of(2, 6, 2), 0);
  // SPEC 2: causal limit j <= i + (Nk - Nq): Nq = 7, Nk = 3, row 0 -> -4 (no key), row 6 -> 2.
  CHECK_EQ(causal_last_key(0, 7, 3), -4);
  CHECK_EQ(causal_last_key(6, 7, 3), 2);
  CHECK_EQ(causal_last_key(1, 2, 5), 4);

  // SPEC 3 segments: w = 8 with N = 3 clips to 3; N = 11, w = 4: [0,4) [4,8) [8,11).
  CHECK_EQ(clipped_segment(8, 3), 3);
  CHECK_EQ(clipped_segment(4, 11), 4);
  CHECK_EQ(segment_start(5, 4), 4);
  CHECK_EQ(segment_start(10, 4), 8);
  CHECK_EQ(segment_end(4, 4, 11), 8);
  CHECK_EQ(segment_end(8, 4, 11), 11);  // the partial last segment
  CHECK_EQ(segment_count(11, 4), 3);
  CHECK_EQ(segment_count(12, 4), 3);

  // groups: H = 7, m = 3: floor(7/3) = 2 heads each, plus one for g < 7 mod 3 = 1:
  // group 0 = {0,1,2}, group 1 = {3,4}, group 2 = {5,6}.
  CHECK_EQ(group_first_head(0, 7, 3), 0);
  CHECK_EQ(group_first_head(1, 7, 3), 3);
  CHECK_EQ(group_first_head(2, 7, 3), 5);
  const int want_group[7] = {0, 0, 0, 1, 1, 2, 2};
  for (int h = 0; h < 7; ++h) CHECK_EQ(group_of_head(h, 7, 3), want_group[h]);
  // H = 8, m = 3: 8 mod 3 = 2 groups of 3 then one of 2: {0,1,2} {3,4,5} {6,7}.
  const int want_group8[8] = {0, 0, 0, 1, 1, 1, 2, 2};
  for (int h = 0; h < 8; ++h) CHECK_EQ(group_of_head(h, 8, 3), want_group8[h]);
  CHECK_EQ(group_first_head(2, 8, 3), 6);
  // H = m: one head per group.
  for (int h = 0; h < 4; ++h) CHECK_EQ(group_of_head(h, 4, 4), h);
  CHECK_EQ(head_uses_branch(kHeadsGroups, 4, 1, 7, 3), 1);
  CHECK_EQ(head_uses_branch(kHeadsGroups, 4, 0, 7, 3), 0);
  CHECK_EQ(head_uses_branch(kHeadsMod, 4, 0, 7, 3), 1);
  CHECK_EQ(head_uses_branch(kHeadsBlock, 4, 2, 7, 3), 1);

  // Offsets. mod: h mod r: 5 mod 3 = 2.
  CHECK_EQ(head_offset(kHeadsMod, 5, 0, 3, 7), 2);
  // block: floor(h / ceil(H / r)), H = 7, r = 3: ceil(7/3) = 3, heads 0-2 -> 0, 3-5 -> 1, 6 -> 2.
  const int want_block[7] = {0, 0, 0, 1, 1, 1, 2};
  for (int h = 0; h < 7; ++h) CHECK_EQ(head_offset(kHeadsBlock, h, 0, 3, 7), want_block[h]);
  // block, H = 5, r = 4: ceil(5/4) = 2: heads {0,1} -> 0, {2,3} -> 1, {4} -> 2; offset 3 unused.
  CHECK_EQ(head_offset(kHeadsBlock, 4, 0, 4, 5), 2);
  CHECK_EQ(head_offset(kHeadsBlock, 3, 0, 4, 5), 1);
  // groups: o = g mod r_g, g = the branch: branch 2 with r = 2 -> 0; branch 1 with r = 4 -> 1.
  CHECK_EQ(head_offset(kHeadsGroups, 6, 2, 2, 7), 0);
  CHECK_EQ(head_offset(kHeadsGroups, 3, 1, 4, 7), 1);

  // Selection in segment [8, 11) with r = 2: offset 0 -> 8, 10; offset 1 -> 9.
  CHECK_EQ(is_selected(10, 8, 2, 0), 1);
  CHECK_EQ(is_selected(9, 8, 2, 0), 0);
  CHECK_EQ(is_selected(9, 8, 2, 1), 1);
  CHECK_EQ(selected_count(8, 11, 2, 0), 2);  // 8, 10
  CHECK_EQ(selected_count(8, 11, 2, 1), 1);  // 9
  CHECK_EQ(selected_count(8, 11, 4, 2), 1);  // 10
  CHECK_EQ(selected_count(8, 11, 4, 3), 0);  // 11 is past the partial segment's end
  CHECK_EQ(selected_count(0, 4, 2, 1), 2);   // 1, 3
  // selected_segment, w = 4, r = 2, o = 1: 9 is selected in segment 2 ([8, 12)), 10 is not;
  // 1 and 3 share segment 0, 5 is in segment 1: the branch holds (1, 3), not (1, 5).
  CHECK_EQ(selected_segment(9, 4, 2, 1), 2);
  CHECK_EQ(selected_segment(10, 4, 2, 1), -1);
  CHECK_EQ(selected_segment(1, 4, 2, 1), selected_segment(3, 4, 2, 1));
  CHECK(selected_segment(1, 4, 2, 1) != selected_segment(5, 4, 2, 1));
  CHECK_EQ(selected_segment(5, 4, 2, 1), 1);
  CHECK_EQ(selected_position(8, 2, 1, 0), 9);
  CHECK_EQ(selected_position(0, 3, 2, 2), 8);

  // dilated_keys, N = 11, w = 4, r = 2, o = 0. Row 10 (segment [8, 11)): keys 8, 10.
  KeyProgression kp = dilated_keys(10, 11, 4, 2, 0, false);
  CHECK_EQ(kp.first, 8); CHECK_EQ(kp.step, 2); CHECK_EQ(kp.count, 2);
  kp = dilated_keys(10, 11, 4, 2, 0, true);  // causal: 8, 10 (both <= 10)
  CHECK_EQ(kp.count, 2);
  kp = dilated_keys(8, 11, 4, 2, 0, true);  // causal row 8: key 8 alone
  CHECK_EQ(kp.first, 8); CHECK_EQ(kp.count, 1);
  kp = dilated_keys(9, 11, 4, 2, 0, false);  // row 9 not selected with offset 0
  CHECK_EQ(kp.count, 0);
  kp = dilated_keys(9, 11, 4, 2, 1, false);  // offset 1: key 9 alone in [8, 11)
  CHECK_EQ(kp.first, 9); CHECK_EQ(kp.count, 1);
  // w = 20 clipped to N = 11, r = 3, o = 0: row 6 sees 0, 3, 6, 9; causal 0, 3, 6.
  kp = dilated_keys(6, 11, 20, 3, 0, false);
  CHECK_EQ(kp.first, 0); CHECK_EQ(kp.step, 3); CHECK_EQ(kp.count, 4);
  kp = dilated_keys(6, 11, 20, 3, 0, true);
  CHECK_EQ(kp.count, 3);

  // dense_keys: Nq = 7, Nk = 3 causal: row 1 limit -3 -> none; row 5 limit 1 -> keys 0, 1.
  CHECK_EQ(dense_keys(1, 7, 3, true).count, 0);
  CHECK_EQ(dense_keys(5, 7, 3, true).count, 2);
  CHECK_EQ(dense_keys(1, 7, 3, false).count, 3);
  CHECK_EQ(dense_keys(0, 2, 5, true).count, 4);  // limit 0 + 3 = 3: keys 0..3

  // block_keys: bk = 4, Nk = 6: block 1 is keys 4, 5 (cut at Nk). Causal with Nq = 8:
  // row 5 limit 5 - 2 = 3 < 4: nothing; row 7 limit 5: keys 4, 5.
  kp = block_keys(5, 1, 4, 8, 6, false);
  CHECK_EQ(kp.first, 4); CHECK_EQ(kp.count, 2);
  CHECK_EQ(block_keys(5, 1, 4, 8, 6, true).count, 0);
  CHECK_EQ(block_keys(7, 1, 4, 8, 6, true).count, 2);
  CHECK_EQ(block_keys(6, 1, 4, 8, 6, true).count, 1);

  // SPEC 10.2 with SPEC 4: a sequence of 9 rows starting at row 6 of a mask of 4-row blocks
  // (rows 6..14) meets blocks 1, 2, 3: block 1 holds its rows 0, 1 (mask rows 6, 7), block 2
  // rows 2..5, block 3 rows 6..8 (cut at 9), block 0 none.
  CHECK_EQ(first_block_at(6, 4), 1);
  CHECK_EQ(blocks_meeting(6, 9, 4), 3);
  CHECK_EQ(blocks_meeting(6, 10, 4), 3);  // rows 6..15: still blocks 1..3
  CHECK_EQ(blocks_meeting(6, 11, 4), 4);  // row 16 opens block 4
  CHECK_EQ(blocks_meeting(6, 0, 4), 0);
  CHECK_EQ(blocks_meeting(0, 6, 4), 2);  // origin 0: ceil(6 / 4)
  kp = block_range_at(1, 4, 6, 9);
  CHECK_EQ(kp.first, 0); CHECK_EQ(kp.count, 2);
  kp = block_range_at(2, 4, 6, 9);
  CHECK_EQ(kp.first, 2); CHECK_EQ(kp.count, 4);
  kp = block_range_at(3, 4, 6, 9);
  CHECK_EQ(kp.first, 6); CHECK_EQ(kp.count, 3);
  CHECK_EQ(block_range_at(0, 4, 6, 9).count, 0);
  CHECK_EQ(block_range_at(4, 4, 6, 9).count, 0);
  kp = block_range_at(1, 4, 0, 6);  // origin 0 is block_range
  CHECK_EQ(kp.first, block_range(1, 4, 6).first); CHECK_EQ(kp.count, block_range(1, 4, 6).count);
  // block_keys_at: the sequence's keys start at key 6 (k0), Nk = 9, Nq = 5 (d = 4): key block 2
  // is its keys 2..5; causal row 0 sees keys up to 4: keys 2, 3, 4; row 1 up to 5: all four.
  kp = block_keys_at(0, 2, 4, 6, 5, 9, false);
  CHECK_EQ(kp.first, 2); CHECK_EQ(kp.count, 4);
  CHECK_EQ(block_keys_at(0, 2, 4, 6, 5, 9, true).count, 3);
  CHECK_EQ(block_keys_at(1, 2, 4, 6, 5, 9, true).count, 4);
  CHECK_EQ(block_keys_at(0, 0, 4, 6, 5, 9, false).count, 0);  // block 0 lies before the sequence
  kp = block_keys_at(7, 1, 4, 0, 8, 6, true);  // k0 = 0 is block_keys
  CHECK_EQ(kp.first, 4); CHECK_EQ(kp.count, 2);

  return harness::finish("index_rules_hand_computed");
}
