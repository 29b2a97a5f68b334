// test_workspace_argument.cpp - SPEC 7 and 14.6 for a caller's workspace: one smaller than
// dilattn_plan_workspace_size reports is refused with WORKSPACE_TOO_SMALL, naming the bytes
// given and the bytes needed, and no output byte changes. A workspace that does not start on a
// 256-byte boundary is used from its first boundary on (the reference backward keeps f64
// accumulators there: UBSan reports a misaligned one); the size the plan reports includes the
// 255 bytes that may be skipped.
#include <cstdint>
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

  // The gradients with a workspace from the pool, then with caller workspaces one byte past a
  // 256-byte boundary: the reported size less the 255 bytes of slack is too small there (and
  // enough at a boundary); the reported size is enough, and the gradients are bitwise the same.
  CHECK_OK(p.backward());
  const std::vector<float> dq = p.dq, dk = p.dk, dv = p.dv;
  p.fill_sentinel();
  std::vector<unsigned char> storage(bwd + 256);
  unsigned char* boundary = storage.data() + (256 - reinterpret_cast<uintptr_t>(storage.data()) % 256);
  CHECK_ERROR(p.backward(boundary + 1, bwd - 255), DILATTN_ERROR_WORKSPACE_TOO_SMALL,
              "256-byte boundary", "255 bytes after its start");
  CHECK(p.outputs_untouched());
  CHECK_OK(p.backward(boundary + 1, bwd));
  CHECK(p.dq == dq && p.dk == dk && p.dv == dv);
  p.fill_sentinel();
  CHECK_OK(p.backward(boundary, bwd - 255));
  CHECK(p.dq == dq && p.dk == dk && p.dv == dv);
  return harness::finish("small_workspace_refused_outputs_untouched");
}
