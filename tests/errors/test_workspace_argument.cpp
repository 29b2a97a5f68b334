// test_workspace_argument.cpp - SPEC 7 for a caller's workspace: one smaller than
// dilattn_plan_workspace_size reports is refused with WORKSPACE_TOO_SMALL, naming the bytes
// given and the bytes needed, and no output byte changes.
#include <string>
#include <vector>

#include "error_fixture.h"

int main() {
  errtest::Problem p;  // the ref backward needs f64 accumulators for dQ, dK, dV
  size_t fwd = 0, bwd = 0;
  CHECK_OK(dilattn_plan_workspace_size(p.plan, &fwd, &bwd));
  CHECK(bwd > 8);
  std::vector<unsigned char> ws(8);
  CHECK_ERROR(p.backward(ws.data(), ws.size()), DILATTN_ERROR_WORKSPACE_TOO_SMALL,
              "'workspace_bytes' = 8", std::to_string(bwd).c_str());
  CHECK(p.outputs_untouched());
  return harness::finish("small_workspace_refused_outputs_untouched");
}
