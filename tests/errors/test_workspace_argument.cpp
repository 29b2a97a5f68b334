// test_workspace_argument.cpp - SPEC 7 for a caller's workspace: one smaller than
// dilattn_plan_workspace_size reports is refused with WORKSPACE_TOO_SMALL, naming the bytes
// given and the bytes needed; one whose start is not aligned to 16 bytes (SPEC 15: backends
// carve f64 arrays from it) is refused with INVALID_VALUE naming 'workspace' and the address,
// on ref, cpu and emu; no output byte changes; the same buffer aligned is accepted.
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

  // One byte, and eight bytes, past a 64-byte boundary.
  const dilattn_backend backends[] = {DILATTN_BACKEND_REF, DILATTN_BACKEND_CPU,
#ifdef DILATTN_TEST_EMU
                                      DILATTN_BACKEND_EMU,
#endif
  };
  for (dilattn_backend backend : backends) {
    harness::CaseScope scope(dilattn_backend_name(backend));
    errtest::Problem q;
    dilattn_plan plan = nullptr;
    const dilattn_shape shape = dilattn_shape_make(q.B, q.N, q.N, q.H, q.Hkv, q.D);
    if (!CHECK_OK(dilattn_plan_create(&plan, q.desc, &shape, DILATTN_F32, backend))) continue;
    std::swap(plan, q.plan);
    dilattn_plan_destroy(plan);
    CHECK_OK(dilattn_plan_workspace_size(q.plan, &fwd, &bwd));
    const size_t bytes = std::max<size_t>(std::max(fwd, bwd), 1) + 64;
    std::vector<unsigned char> buffer(bytes + 64);
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<uintptr_t>(buffer.data()) + 63) / 64 * 64);
    for (size_t off : {size_t{1}, size_t{8}}) {
      char address[32];
      std::snprintf(address, sizeof address, "%p", static_cast<void*>(base + off));
      CHECK_ERROR(dilattn_forward(q.plan, &q.tq, &q.tk, &q.tv, &q.to, &q.tlse, base + off, bytes),
                  DILATTN_ERROR_INVALID_VALUE, "'workspace'", address, "aligned");
      CHECK_ERROR(q.backward(base + off, bytes), DILATTN_ERROR_INVALID_VALUE, "'workspace'",
                  address);
      CHECK(q.outputs_untouched());
    }
    CHECK_OK(dilattn_forward(q.plan, &q.tq, &q.tk, &q.tv, &q.to, &q.tlse, base + 16, bytes));
    CHECK_OK(q.backward(base + 16, bytes));
  }
  return harness::finish("small_workspace_refused_outputs_untouched");
}
