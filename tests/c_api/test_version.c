/*
 * test_version.c - the header's DILATTN_VERSION equals the library's dilattn_version()
 * (a header/library mismatch is detectable), and the build info names the version and, where
 * the cpu backend is built, that it computes f64 inputs in f32 (SPEC 12: never silently).
 */
#include <stdio.h>
#include <string.h>

#include "dilattn.h"

int main(void) {
  char expected[32];
  if (dilattn_version() != DILATTN_VERSION) {
    fprintf(stderr, "FAILED: header %d, library %d\n", DILATTN_VERSION, dilattn_version());
    return 1;
  }
  snprintf(expected, sizeof expected, "dilattn %d.%d.%d", DILATTN_VERSION_MAJOR,
           DILATTN_VERSION_MINOR, DILATTN_VERSION_PATCH);
  if (strstr(dilattn_build_info(), expected) == NULL) {
    fprintf(stderr, "FAILED: build info does not start with \"%s\":\n%s", expected,
            dilattn_build_info());
    return 1;
  }
  if (dilattn_backend_available(DILATTN_BACKEND_CPU) &&
      strstr(dilattn_build_info(), "cpu backend precision: f64 inputs are computed in f32") == NULL) {
    fprintf(stderr, "FAILED: build info does not say the cpu backend computes f64 in f32:\n%s",
            dilattn_build_info());
    return 1;
  }
  printf("version %d matches the header\n", dilattn_version());
  return 0;
}
