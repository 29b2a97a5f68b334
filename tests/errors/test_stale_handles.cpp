// test_stale_handles.cpp - SPEC 7: a handle (desc, mask, plan) used after its destroy, destroyed
// twice, forged, or passed as another kind is refused with INVALID_VALUE and a message naming
// the argument, without reading the freed memory (the ASan build would report that read), and
// handles created and destroyed on many threads at once stay usable.
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "error_fixture.h"

namespace {

void stale_desc() {
  std::printf("stale desc\n");
  dilattn_desc desc = nullptr;
  CHECK(dilattn_desc_create(&desc) == DILATTN_SUCCESS);
  CHECK(dilattn_desc_destroy(desc) == DILATTN_SUCCESS);
  CHECK_ERROR(dilattn_desc_set_causal(desc, 1), DILATTN_ERROR_INVALID_VALUE, "'desc'",
               "destroyed");
  CHECK_ERROR(dilattn_desc_destroy(desc), DILATTN_ERROR_INVALID_VALUE, "'desc'", "destroyed");
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 1, 1, 1);
  CHECK_ERROR(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF),
               DILATTN_ERROR_INVALID_VALUE, "'desc'", "destroyed");
  CHECK(plan == nullptr);
}

void stale_mask() {
  std::printf("stale mask\n");
  dilattn_mask live = nullptr, stale = nullptr, out = nullptr;
  CHECK(dilattn_mask_local(&live, 8, 8, 4, 4, 0, 0) == DILATTN_SUCCESS);
  CHECK(dilattn_mask_local(&stale, 8, 8, 4, 4, 1, 0) == DILATTN_SUCCESS);
  CHECK(dilattn_mask_destroy(stale) == DILATTN_SUCCESS);
  dilattn_bsr_view view{};
  CHECK_ERROR(dilattn_mask_get(stale, &view, nullptr), DILATTN_ERROR_INVALID_VALUE, "'mask'",
               "destroyed");
  CHECK_ERROR(dilattn_mask_destroy(stale), DILATTN_ERROR_INVALID_VALUE, "'mask'", "destroyed");
  const dilattn_mask inputs[2] = {live, stale};
  CHECK_ERROR(dilattn_mask_union(&out, inputs, 2), DILATTN_ERROR_INVALID_VALUE, "'masks[1]'",
               "destroyed");
  CHECK(out == nullptr);
  dilattn_desc desc = nullptr;
  CHECK(dilattn_desc_create(&desc) == DILATTN_SUCCESS);
  CHECK_ERROR(dilattn_desc_set_block_sparse(desc, stale), DILATTN_ERROR_INVALID_VALUE, "'mask'",
               "destroyed");
  dilattn_desc_destroy(desc);
  dilattn_mask_destroy(live);
}

void stale_plan() {
  std::printf("stale plan\n");
  errtest::Problem p;
  CHECK(dilattn_plan_destroy(p.plan) == DILATTN_SUCCESS);
  CHECK_ERROR(p.forward(), DILATTN_ERROR_INVALID_VALUE, "'plan'", "destroyed");
  CHECK_ERROR(p.backward(), DILATTN_ERROR_INVALID_VALUE, "'plan'", "destroyed");
  dilattn_backend backend = DILATTN_BACKEND_AUTO;
  CHECK_ERROR(dilattn_plan_backend(p.plan, &backend), DILATTN_ERROR_INVALID_VALUE, "'plan'",
               "destroyed");
  size_t bytes = 0;
  CHECK_ERROR(dilattn_plan_workspace_size(p.plan, &bytes, nullptr), DILATTN_ERROR_INVALID_VALUE,
               "'plan'", "destroyed");
  CHECK_ERROR(dilattn_plan_destroy(p.plan), DILATTN_ERROR_INVALID_VALUE, "'plan'", "destroyed");
  CHECK(p.outputs_untouched());
  p.plan = nullptr;  // the fixture's destructor must not destroy it a third time
}

// Memory the library never handed out, even one that starts with the bytes a live description
// starts with, is not a handle; the call must not write to it either.
void forged_and_wrong_kind() {
  std::printf("forged and wrong-kind handles\n");
  dilattn_desc real = nullptr;
  CHECK(dilattn_desc_create(&real) == DILATTN_SUCCESS);
  alignas(64) unsigned char forged[1024];
  std::memcpy(forged, static_cast<const void*>(real), 64);  // a live desc's leading bytes
  unsigned char before[sizeof forged];
  std::memcpy(before, forged, sizeof forged);
  dilattn_desc fake = reinterpret_cast<dilattn_desc>(forged);
  CHECK_ERROR(dilattn_desc_set_causal(fake, 1), DILATTN_ERROR_INVALID_VALUE, "'desc'",
               "not a desc");
  CHECK(std::memcmp(before, forged, sizeof forged) == 0);

  dilattn_mask mask = nullptr;
  CHECK(dilattn_mask_local(&mask, 8, 8, 4, 4, 0, 0) == DILATTN_SUCCESS);
  CHECK_ERROR(dilattn_desc_set_causal(reinterpret_cast<dilattn_desc>(mask), 1),
               DILATTN_ERROR_INVALID_VALUE, "'desc'", "is a mask");
  CHECK_ERROR(dilattn_plan_destroy(reinterpret_cast<dilattn_plan>(real)),
               DILATTN_ERROR_INVALID_VALUE, "'plan'", "is a desc");
  // Both are still live and usable after being refused as the wrong kind.
  CHECK(dilattn_desc_set_block_sparse(real, mask) == DILATTN_SUCCESS);
  CHECK(dilattn_mask_destroy(mask) == DILATTN_SUCCESS);
  CHECK(dilattn_desc_destroy(real) == DILATTN_SUCCESS);
}

// Threads creating, using and destroying their own handles while others do the same: the
// registry is shared, so this fails (crash, lost handle) without its lock.
void many_threads() {
  std::printf("handles on 4 threads\n");
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      for (int round = 0; round < 20000; ++round) {
        dilattn_desc d = nullptr;
        dilattn_mask m = nullptr;
        if (dilattn_desc_create(&d) != DILATTN_SUCCESS) ++bad[t];
        if (dilattn_mask_sink(&m, 8, 8, 4, 4, 1, 0) != DILATTN_SUCCESS) ++bad[t];
        if (dilattn_desc_set_block_sparse(d, m) != DILATTN_SUCCESS) ++bad[t];
        if (dilattn_mask_destroy(m) != DILATTN_SUCCESS) ++bad[t];
        if (dilattn_desc_destroy(d) != DILATTN_SUCCESS) ++bad[t];
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) CHECK(bad[t] == 0);
}

}  // namespace

int main() {
  stale_desc();
  stale_mask();
  stale_plan();
  forged_and_wrong_kind();
  many_threads();
  return harness::finish("stale_handles_refused");
}
