/*
 * test_version.c - the header's DILATTN_VERSION equals the library's dilattn_version()
 * (a header/library mismatch is detectable), and the build info names the version and no
 * backend precision line: every backend computes each dtype in at least its own precision (the
 * cpu backend f64 in f64, SPEC 12; cuda and emu refuse f64), and a backend that did not would
 * have to say so there (never silently).
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
  if (strstr(dilattn_build_info(), "backend precision:") != NULL) {
    fprintf(stderr, "FAILED: build info says a backend computes in a narrower type:\n%s",
            dilattn_build_info());
    return 1;
  }
  printf("version %d matches the header\n", dilattn_version());
  return 0;
}
