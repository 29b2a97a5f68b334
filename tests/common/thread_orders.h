// thread_orders.h - how many of the SIMT emulator's thread orders (emu/simt_scheduler.h) a
// test's repeats take: all three (ascending, descending, shuffled), which compare the runs bit
// for bit, or with DILATTN_TEST_ONE_THREAD_ORDER=1 the ascending one alone. CI sets it for its
// sanitizer build (.ci/run), where the emulated kernels run several times slower and ASan and
// UBSan look at each memory access, whatever the order; its release build runs all three.
#ifndef DILATTN_TESTS_THREAD_ORDERS_H
#define DILATTN_TESTS_THREAD_ORDERS_H

#include <cstdlib>
#include <cstring>

namespace harness {

inline bool every_thread_order() {
  const char* one = std::getenv("DILATTN_TEST_ONE_THREAD_ORDER");
  return one == nullptr || std::strcmp(one, "1") != 0;
}

}  // namespace harness

#endif  // DILATTN_TESTS_THREAD_ORDERS_H
