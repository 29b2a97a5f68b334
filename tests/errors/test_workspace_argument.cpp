// test_workspace_argument.cpp - SPEC 7 and 14.6 for a caller's workspace: one smaller than
// dilattn_plan_workspace_size reports is refused with WORKSPACE_TOO_SMALL, naming the bytes
// given and the bytes needed, and no output byte changes. A workspace that does not start on a
// 256-byte boundary is used from its first boundary on (the reference backward keeps f64
// accumulators there: UBSan reports a misaligned one); the size the plan reports includes the
// 255 bytes that may be skipped, so on ref, cpu and emu a workspace of that size at any offset
// gives bitwise the results of a pool workspace.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
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

  // Every CPU-side backend, workspaces of the reported size 1 and 8 bytes past a 64-byte boundary:
  // accepted, outputs bitwise those of a pool workspace.
  for (dilattn_backend backend : errtest::cpu_side_backends()) {
    harness::CaseScope scope(dilattn_backend_name(backend));
    errtest::Problem q;
    dilattn_plan plan = nullptr;
    const dilattn_shape shape = dilattn_shape_make(q.B, q.N, q.N, q.H, q.Hkv, q.D);
    if (!CHECK_OK(dilattn_plan_create(&plan, q.desc, &shape, DILATTN_F32, backend))) continue;
    std::swap(plan, q.plan);
    dilattn_plan_destroy(plan);
    CHECK_OK(dilattn_plan_workspace_size(q.plan, &fwd, &bwd));
    CHECK_OK(q.forward());
    CHECK_OK(q.backward());
    const std::vector<float> o = q.o, lse = q.lse, qdq = q.dq, qdk = q.dk, qdv = q.dv;
    const size_t bytes = std::max<size_t>(std::max(fwd, bwd), 1);
    std::vector<unsigned char> buffer(bytes + 128);
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(buffer.data()) + 63) / 64 * 64);
    for (size_t off : {size_t{1}, size_t{8}}) {
      q.fill_sentinel();
      CHECK_OK(dilattn_forward(q.plan, &q.tq, &q.tk, &q.tv, &q.to, &q.tlse, base + off, bytes));
      CHECK_OK(q.backward(base + off, bytes));
      CHECK(q.o == o && q.lse == lse && q.dq == qdq && q.dk == qdk && q.dv == qdv);
    }
  }  return harness::finish("small_workspace_refused_outputs_untouched");
}
