// test_status_strings.cpp - SPEC 7 / STYLE (cuBLAS-like): every dilattn_status value has its own
// string, starting with its enum name; a value outside the enum gets the "unknown" string.
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "../common/check.h"
#include "dilattn.h"

int main() {
  const std::string unknown = dilattn_status_string(DILATTN_STATUS_COUNT_);
  // Spot-check that names match values (the prefix before ':' is the enum name).
  struct Named { dilattn_status s; const char* name; };
  const Named named[] = {{DILATTN_SUCCESS, "DILATTN_SUCCESS:"},
                         {DILATTN_ERROR_BAD_DILATION, "DILATTN_ERROR_BAD_DILATION:"},
                         {DILATTN_ERROR_WORKSPACE_TOO_SMALL, "DILATTN_ERROR_WORKSPACE_TOO_SMALL:"},
                         {DILATTN_ERROR_POOL_DESTROYED, "DILATTN_ERROR_POOL_DESTROYED:"}};
  for (const Named& n : named)
    CHECK_MSG(std::strncmp(dilattn_status_string(n.s), n.name, std::strlen(n.name)) == 0,
              "status %d reads \"%s\"", n.s, dilattn_status_string(n.s));
  std::set<std::string> seen;
  for (int s = 0; s < DILATTN_STATUS_COUNT_; ++s) {
    const char* text = dilattn_status_string(static_cast<dilattn_status>(s));
    CHECK_MSG(text != nullptr && text != unknown && std::strncmp(text, "DILATTN_", 8) == 0 &&
                  seen.insert(text).second,
              "status %d has no string of its own (\"%s\")", s, text ? text : "(null)");
  }
  CHECK_MSG(dilattn_status_string(static_cast<dilattn_status>(-1)) == unknown,
            "status -1 is not reported as unknown");
  return harness::finish("status_strings_cover_every_status");
}
