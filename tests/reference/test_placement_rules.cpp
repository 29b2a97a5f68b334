// test_placement_rules.cpp - lib/placement_rules.h on hand-computed cases (SPEC 5 with SPEC 2
// and 10.1): a ring sub-problem's key indices cut by the whole problem's causal rule and window
// at their positions, for contiguous and strided (dilated) keys, Nq == Nk and Nq != Nk, cuts
// that leave nothing, and a sub-range of the sub-problem's keys.
#include "../common/check.h"
#include "placement_rules.h"

namespace {

void expect(const char* what, dilattn::KeyProgression got, int64_t first, int64_t step,
            int64_t count) {
  CHECK_MSG(got.count == count && (count == 0 || (got.first == first && got.step == step)),
            "%s: got {first %lld, step %lld, count %lld}, want {%lld, %lld, %lld}", what,
            static_cast<long long>(got.first), static_cast<long long>(got.step),
            static_cast<long long>(got.count), static_cast<long long>(first),
            static_cast<long long>(step), static_cast<long long>(count));
}

}  // namespace

int main() {
  using namespace dilattn;
  CHECK_EQ(placed_position(4, 3, 5), 19);
  // Keys 0..9 at positions 20..29 (N = 40), row at 25, window (3, 2): positions 22..27 are
  // local 2..7.
  expect("contiguous, window", placed_key_cut({0, 1, 10}, 20, 1, 25, 40, 40, false, 3, 2), 2, 1, 6);
  // The same keys, causal only: positions <= 25 are local 0..5.
  expect("contiguous, causal", placed_key_cut({0, 1, 10}, 20, 1, 25, 40, 40, true, -1, -1), 0, 1, 6);
  // Strided keys (dilation 3) at 4, 7, .., 25; row at 16, causal, window left 6: positions
  // 10, 13, 16 are local 2, 3, 4.
  expect("strided, causal and window", placed_key_cut({0, 1, 8}, 4, 3, 16, 40, 40, true, 6, -1),
         2, 1, 3);
  // Row at 0, window right 1, keys from 20: nothing.
  expect("out of reach", placed_key_cut({0, 1, 10}, 20, 1, 0, 40, 40, false, -1, 1), 0, 1, 0);
  // Nq = 10, Nk = 15 (d = 5), row 2, causal: last key 7, local 0..7 of keys at 0..14.
  expect("Nq != Nk, causal", placed_key_cut({0, 1, 15}, 0, 1, 2, 10, 15, true, -1, -1), 0, 1, 8);
  // Local keys 3..6 of keys at 10, 12, ..: positions 16, 18, 20, 22; row at 19, window (1, 1):
  // 18 and 20, local 4 and 5.
  expect("sub-range, strided, window", placed_key_cut({3, 1, 4}, 10, 2, 19, 40, 40, false, 1, 1),
         4, 1, 2);
  // No key to cut: stays empty.
  expect("empty", placed_key_cut({0, 1, 0}, 10, 2, 19, 40, 40, true, 1, 1), 0, 1, 0);
  return harness::finish("placement_rules_hand_computed");
}
