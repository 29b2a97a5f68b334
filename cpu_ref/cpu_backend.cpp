// cpu_backend.cpp - the cpu backend's entry points besides forward/backward: what it can run and
// how much workspace a plan must hand it (backend.h).
//
// It runs every kind, dtype, stride and head count the plan validates; it refuses only head
// dims above kMaxHeadDim (its tiles are sized for at most that). Workspace: one set of f32
// tiles per thread (cpu_workspace.h), O(threads x tile), independent of N.
// Checked by tests/cpu/test_cpu_forward.cpp (can_run refusal, AUTO choice).
#include "backend.h"
#include "cpu_workspace.h"
#include "errors.h"
#include "softmax_rules.h"  // kMaxHeadDim

namespace dilattn::cpu {

dilattn_status can_run(const Problem& p) {
  if (p.D > kMaxHeadDim)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend 'cpu': head_dim = %lld is above its limit of %lld",
                     static_cast<long long>(p.D), static_cast<long long>(kMaxHeadDim));
  return DILATTN_SUCCESS;
}

WorkspaceBytes workspace_bytes(const Problem& p) {
  const int64_t workers = p.num_threads < 1 ? 1 : p.num_threads;
  WorkspaceBytes w;
  w.forward = w.backward = sizeof(float) * static_cast<size_t>(workers * floats_per_worker(p.D, block_rows(p)));
  return w;
}

}  // namespace dilattn::cpu
