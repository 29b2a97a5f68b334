// test_plan_arguments.cpp - SPEC 7 for dilattn_plan_create: a NULL description, H not a
// multiple of Hkv, groups mode with fewer heads than branches, sizes whose byte count overflows
// int64, head_dim 0, a backend outside the enum, and Nq != Nk for dilated attention each get
// their own status and a message naming the argument and the value, and the plan slot keeps
// the bytes it held.
#include <cstdint>

#include "error_fixture.h"

using errtest::create_plan;
using errtest::FreshDesc;
using errtest::PlanSlot;

namespace {

void null_desc_refused() {
  PlanSlot slot;
  const dilattn_shape shape = dilattn_shape_make(1, 1, 1, 1, 1, 1);
  CHECK_ERROR(dilattn_plan_create(&slot.plan, nullptr, &shape, DILATTN_F32, DILATTN_BACKEND_REF),
              DILATTN_ERROR_NULL_POINTER, "'desc'", "NULL");
  CHECK(slot.untouched());
}

void heads_not_divisible_names_both_counts() {
  PlanSlot slot;
  FreshDesc desc;
  CHECK_ERROR(create_plan(&slot.plan, desc, 1, 4, 4, 6, 4, 8), DILATTN_ERROR_HEADS_NOT_DIVISIBLE,
              "heads_q = 6", "heads_kv = 4");
  CHECK(slot.untouched());
}

void groups_with_too_few_heads_refused() {
  PlanSlot slot;
  FreshDesc desc;
  const int64_t w[3] = {2, 4, 8}, r[3] = {1, 2, 4};
  CHECK_OK(dilattn_desc_set_dilated(desc.d, 3, w, r, DILATTN_HEADS_GROUPS));
  CHECK_ERROR(create_plan(&slot.plan, desc, 1, 8, 8, 2, 1, 4), DILATTN_ERROR_GROUPS_TOO_FEW_HEADS,
              "heads_q = 2", "(3)");
  CHECK(slot.untouched());
}

void overflowing_sizes_refused() {
  PlanSlot slot;
  FreshDesc desc;
  // 8 bytes * 2^31 * 2^31 * 4 * 64 overflows int64.
  CHECK_ERROR(create_plan(&slot.plan, desc, int64_t{1} << 31, int64_t{1} << 31, 4, 4, 4, 64),
              DILATTN_ERROR_SIZE_OVERFLOW, "B=2147483648");
  CHECK(slot.untouched());
}

void zero_head_dim_and_unknown_backend_refused() {
  PlanSlot slot;
  FreshDesc desc;
  CHECK_ERROR(create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 0), DILATTN_ERROR_INVALID_VALUE,
              "'head_dim' = 0");
  CHECK_ERROR(create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 8, static_cast<dilattn_backend>(9)),
              DILATTN_ERROR_INVALID_VALUE, "'backend' = 9");
  CHECK(slot.untouched());
}

void dilated_with_nq_ne_nk_refused() {
  PlanSlot slot;
  FreshDesc desc;
  const int64_t w[1] = {4}, r[1] = {2};
  CHECK_OK(dilattn_desc_set_dilated(desc.d, 1, w, r, DILATTN_HEADS_MOD));
  CHECK_ERROR(create_plan(&slot.plan, desc, 1, 4, 6, 2, 1, 8), DILATTN_ERROR_SEQLEN_MISMATCH, "4",
              "6");
  CHECK(slot.untouched());
}

}  // namespace

int main() {
  null_desc_refused();
  heads_not_divisible_names_both_counts();
  groups_with_too_few_heads_refused();
  overflowing_sizes_refused();
  zero_head_dim_and_unknown_backend_refused();
  dilated_with_nq_ne_nk_refused();
  return harness::finish("bad_plan_arguments_leave_slot_untouched");
}
