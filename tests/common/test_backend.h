// test_backend.h - which backend a kernel test runs the CUDA kernels on, chosen by the
// environment variable DILATTN_TEST_BACKEND:
//   emu  (or unset) the SIMT emulator: the kernels on the CPU, on any machine (CI);
//   cuda            a GPU: the same cases, the same reference checks.
// A GPU asked for where none can run is a failure (exit 1), never a skip: a run that checked
// nothing must not read as a pass. A test that only the emulator can run (thread orders, the
// shared-memory bank model, the emulator's own counters) says so and exits with meson's skip
// status 77 when cuda is asked for, so a GPU run lists it as not run rather than passed.
#ifndef DILATTN_TESTS_TEST_BACKEND_H
#define DILATTN_TESTS_TEST_BACKEND_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dilattn.h"

namespace harness {

constexpr int kExitSkip = 77;  // meson's "skipped": neither a pass nor a failure

// The backend named by DILATTN_TEST_BACKEND. False (with the reason printed) when the name is
// unknown, or when it is cuda and this build or machine cannot run the cuda backend.
inline bool test_backend_from_env(dilattn_backend* backend) {
  const char* name = std::getenv("DILATTN_TEST_BACKEND");
  if (name == nullptr || name[0] == '\0' || std::strcmp(name, "emu") == 0) {
    *backend = DILATTN_BACKEND_EMU;
    return true;
  }
  if (std::strcmp(name, "cuda") != 0) {
    std::fprintf(stderr, "FAILED: DILATTN_TEST_BACKEND = '%s': not a kernel test backend "
                         "(emu or cuda)\n", name);
    return false;
  }
  *backend = DILATTN_BACKEND_CUDA;
  if (dilattn_backend_available(DILATTN_BACKEND_CUDA)) return true;
  std::fprintf(stderr,
               "FAILED: DILATTN_TEST_BACKEND = cuda, but the cuda backend cannot run here, so no "
               "case ran (a GPU run that checked nothing is a failure, not a skip).\n%s",
               dilattn_build_info());
  return false;
}

// For a test that only the emulator can run: true when it should run (backend emu). On cuda it
// prints "EMU-ONLY" with the reason and the caller returns kExitSkip.
inline bool runs_only_on_emu(const char* test, const char* why) {
  const char* name = std::getenv("DILATTN_TEST_BACKEND");
  if (name == nullptr || name[0] == '\0' || std::strcmp(name, "emu") == 0) return true;
  std::printf("EMU-ONLY: %s checks %s, which only the SIMT emulator has; not run on "
              "DILATTN_TEST_BACKEND = %s\n", test, why, name);
  return false;
}

}  // namespace harness

#endif  // DILATTN_TESTS_TEST_BACKEND_H
