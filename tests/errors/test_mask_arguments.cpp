// test_mask_arguments.cpp - SPEC 4 and 7 for dilattn_mask_create: an unsorted row and a key
// block out of range are refused with BAD_MASK and a message naming the first bad entry (row
// block, position, value), and the mask slot keeps the bytes it held.
#include <cstring>

#include "error_fixture.h"

int main() {
  // Nq = Nk = 8, blocks 4x4: I = J = 2. Row block 0 lists key blocks (1, 0): unsorted.
  const int32_t row_ptr[3] = {0, 2, 3}, col_idx[3] = {1, 0, 1};
  dilattn_bsr_view view{sizeof(dilattn_bsr_view), 8, 8, 4, 4, 1, DILATTN_INDEX_INT32, row_ptr,
                        col_idx, nullptr};
  dilattn_mask mask;
  std::memset(&mask, errtest::kSentinel, sizeof mask);
  const dilattn_mask before = mask;
  CHECK_ERROR(dilattn_mask_create(&mask, &view), DILATTN_ERROR_BAD_MASK,
              "row block 0, position 1", "col_idx = 0");
  CHECK(std::memcmp(&mask, &before, sizeof mask) == 0);
  const int32_t out_of_range[3] = {0, 1, 2};  // key block 2 >= J = 2
  view.col_idx = out_of_range;
  CHECK_ERROR(dilattn_mask_create(&mask, &view), DILATTN_ERROR_BAD_MASK,
              "row block 1, position 0", "col_idx = 2");
  CHECK(std::memcmp(&mask, &before, sizeof mask) == 0);
  return harness::finish("bad_mask_refused_naming_first_entry");
}
