// cpu_backend.cpp - the cpu backend's entry points (backend.h): what it can run, how much
// workspace a plan must hand it, and forward/backward through the instruction set chosen for
// this process (cpu_isa.h).
//
// It runs every kind, dtype, stride and head count the plan validates, the SPEC 10 variants
// (windows, softcap, ALiBi, packed batches, sinks: cpu_variants.h) and dropout (SPEC 11,
// cpu_dropout.h; backend_table.cpp lists the options it runs); it refuses head dims
// above kMaxHeadDim (its tiles are sized for at most that) and every plan when DILATTN_CPU_ISA
// names an instruction set it cannot use. f32, f16 and bf16 are computed in f32, f64 in f64
// (SPEC 12; cpu_forward.cpp and cpu_backward.cpp pick the compute type from the plan's dtype).
// Workspace: one set of tiles of the compute type per thread (cpu_workspace.h),
// O(threads x tile), independent of N, plus the one-pass backward's accumulators of one kv
// head's dK and dV per worker.
// Checked by tests/cpu/test_cpu_forward.cpp (can_run refusal, AUTO choice) and
// tests/cpu/test_cpu_isa.cpp (the ISA refusals).
#include "backend.h"
#include "cpu_isa.h"
#include "errors.h"
#include "softmax_rules.h"  // kMaxHeadDim, scale_fits_f32

namespace dilattn::cpu {

dilattn_status can_run(const Problem& p) {
  // A DILATTN_CPU_ISA this process cannot use is the user's setting gone wrong: INVALID_VALUE,
  // which stops AUTO too instead of falling back to the slow reference (backend_table.cpp).
  if (chosen_isa() == nullptr) return set_error(DILATTN_ERROR_INVALID_VALUE, "%s", isa_refusal());
  if (!scale_fits_f32(p.scale))
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend 'cpu': scale = %g: |scale| * log2(e) exceeds f32 (use backend ref)",
                     p.scale);
  if (p.D > kMaxHeadDim)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend 'cpu': head_dim = %lld is above its limit of %lld",
                     static_cast<long long>(p.D), static_cast<long long>(kMaxHeadDim));
  return DILATTN_SUCCESS;
}

// Plans exist only where can_run succeeded, so chosen_isa() is not null below.
WorkspaceBytes workspace_bytes(const Problem& p) { return chosen_isa()->workspace_bytes(p); }

const char* isa_name() {
  const IsaKernels* isa = chosen_isa();
  return isa != nullptr ? isa->name : nullptr;
}

dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  return chosen_isa()->forward(p, a);
}

dilattn_status backward(const Problem& p, const BackwardArgs& a) {
  return chosen_isa()->backward(p, a);
}

}  // namespace dilattn::cpu
