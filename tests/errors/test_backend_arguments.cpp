// test_backend_arguments.cpp - SPEC 7: a plan for a backend this build lacks (cuda, in a build
// or on a machine without it) is refused with DEVICE_NOT_BUILT naming the backend, and the plan
// slot keeps the bytes it held. Skipped (exit 77) where a GPU makes cuda available.
#include "error_fixture.h"

int main() {
  if (dilattn_backend_available(DILATTN_BACKEND_CUDA))
    return harness::skip("a GPU is present: DEVICE_NOT_BUILT cannot be provoked here");
  errtest::PlanSlot slot;
  errtest::FreshDesc desc;
  CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 8, DILATTN_BACKEND_CUDA),
              DILATTN_ERROR_DEVICE_NOT_BUILT, "cuda");
  CHECK(slot.untouched());
  return harness::finish("missing_backend_refused");
}
