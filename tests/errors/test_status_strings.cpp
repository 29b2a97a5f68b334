// test_status_strings.cpp - SPEC 7 / STYLE (cuBLAS-like): every dilattn_status value has its own
// string, starting with its enum name; a value outside the enum gets the "unknown" string.
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "dilattn.h"

int main() {
  int failures = 0;
  const std::string unknown = dilattn_status_string(DILATTN_STATUS_COUNT_);
  // Spot-check that names match values (the prefix before ':' is the enum name).
  struct Named { dilattn_status s; const char* name; };
  const Named named[] = {{DILATTN_SUCCESS, "DILATTN_SUCCESS:"},
                         {DILATTN_ERROR_BAD_DILATION, "DILATTN_ERROR_BAD_DILATION:"},
                         {DILATTN_ERROR_WORKSPACE_TOO_SMALL, "DILATTN_ERROR_WORKSPACE_TOO_SMALL:"},
                         {DILATTN_ERROR_POOL_DESTROYED, "DILATTN_ERROR_POOL_DESTROYED:"}};
  for (const Named& n : named)
    if (std::strncmp(dilattn_status_string(n.s), n.name, std::strlen(n.name)) != 0) {
      std::fprintf(stderr, "FAILED: status %d reads \"%s\"\n", n.s, dilattn_status_string(n.s));
      ++failures;
    }
  std::set<std::string> seen;
  for (int s = 0; s < DILATTN_STATUS_COUNT_; ++s) {
    const char* text = dilattn_status_string(static_cast<dilattn_status>(s));
    if (text == nullptr || text == unknown || std::strncmp(text, "DILATTN_", 8) != 0 ||
        !seen.insert(text).second) {
      std::fprintf(stderr, "FAILED: status %d has no string of its own (\"%s\")\n", s,
                   text ? text : "(null)");
      ++failures;
    }
  }
  if (dilattn_status_string(static_cast<dilattn_status>(-1)) != unknown) {
    std::fprintf(stderr, "FAILED: status -1 is not reported as unknown\n");
    ++failures;
  }
  if (failures == 0) std::printf("%d statuses, each with its own string\n", DILATTN_STATUS_COUNT_);
  return failures != 0;
}
