// test_last_error_thread_local.cpp - SPEC 7: dilattn_last_error() is per thread (an error on one
// thread neither shows nor overwrites on another) and a successful call clears it.
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "../common/check.h"
#include "dilattn.h"

int main() {
  dilattn_desc desc = nullptr;
  CHECK_MSG(dilattn_desc_create(&desc) == DILATTN_SUCCESS, "desc_create");
  // Main thread: a bad scale.
  CHECK_MSG(dilattn_desc_set_scale(desc, INFINITY) == DILATTN_ERROR_BAD_SCALE, "bad scale refused");
  const std::string main_message = dilattn_last_error();
  CHECK_MSG(main_message.find("'scale'") != std::string::npos, "main message names 'scale'");

  std::string other_before, other_after;
  std::thread other([&] {
    other_before = dilattn_last_error();  // a fresh thread has no error
    const int64_t w[1] = {0}, r[1] = {1};
    dilattn_desc_set_dilated(desc, 1, w, r, DILATTN_HEADS_MOD);  // BAD_SEGMENT on this thread
    other_after = dilattn_last_error();
  });
  other.join();
  CHECK_MSG(other_before.empty(), "a new thread starts with an empty last error");
  CHECK_MSG(other_after.find("segments[0] = 0") != std::string::npos,
            "other thread sees its own error");
  CHECK_MSG(main_message == dilattn_last_error(),
            "main thread's message survives the other thread");

  // A success clears the message.
  CHECK_MSG(dilattn_desc_set_causal(desc, 1) == DILATTN_SUCCESS, "set_causal");
  CHECK_MSG(std::strcmp(dilattn_last_error(), "") == 0, "a success clears the last error");
  dilattn_desc_destroy(desc);
  return harness::finish("last_error_is_thread_local");
}
