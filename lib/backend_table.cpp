// backend_table.cpp - every backend, once: the table plan.cpp, dispatch.cpp and version.cpp
// look backends up in (version.cpp for what a backend reports about itself). Adding a backend is adding one entry (and its functions).
#include "backend.h"
#include "errors.h"

namespace dilattn {

namespace {

// The reference runs every valid problem.
dilattn_status ref_can_run(const Problem&) { return DILATTN_SUCCESS; }

// A cudaStream_t of the caller's: the cuda backend enqueues on any.
bool any_stream(void*) { return true; }

// The SPEC 10 and 11 options each backend computes (Backend::runs_options): every one, and the
// ring's placed sub-problems (kOptionPlaced, SPEC 5.5), in every backend. cuda and emu run the
// same kernels: the window, softcap and ALiBi in every kernel's variant instance, sinks as each
// row finishes (cuda/kernel_choice.h), dropout in their dropout instances, packed batches one sequence at a
// time (cuda/launch.cu; not with a block-sparse mask, which their can_run refuses) and placed
// sub-problems at their places (cuda/placed_positions.cuh).
constexpr uint32_t kEveryOption = kOptionsAll | kOptionPlaced;

// In the order AUTO prefers them: a GPU when one can run the problem, else the fast cpu
// backend, else the reference. emu is never chosen by AUTO (it is for tests).
// narrower_compute: null for every one. cpu computes f32, f16 and bf16 in f32
// and f64 in f64; cuda and emu refuse f64 (SPEC 1, 7, 12). reports_progress (the last field):
// the CPU ones, which report while they work (SPEC 14.11).
const Backend kBackends[] = {
    {DILATTN_BACKEND_CUDA, "cuda", DILATTN_DEVICE_CUDA, cuda::can_run, cuda::workspace_bytes,
     cuda::forward, cuda::backward, cuda::prepare, cuda::after_work, cuda::make_ring_ops, nullptr,
     cuda::device_report, any_stream, nullptr, kEveryOption, false},
    {DILATTN_BACKEND_CPU, "cpu", DILATTN_DEVICE_CPU, cpu::can_run, cpu::workspace_bytes,
     cpu::forward, cpu::backward, nullptr, nullptr, make_host_ring_ops, cpu::isa_name, nullptr,
     nullptr, nullptr, kEveryOption, true},
    {DILATTN_BACKEND_REF, "ref", DILATTN_DEVICE_CPU, ref_can_run, ref::workspace_bytes,
     ref::forward, ref::backward, nullptr, nullptr, make_host_ring_ops, nullptr, nullptr, nullptr,
     nullptr, kEveryOption, true},
    {DILATTN_BACKEND_EMU, "emu", DILATTN_DEVICE_CPU, emu::can_run, emu::workspace_bytes,
     emu::forward, emu::backward, emu::prepare, emu::after_work, emu::make_ring_ops, nullptr,
     emu::device_report, emu::runs_on_stream, nullptr, kEveryOption, false},
};

}  // namespace

const Backend* find_backend(int32_t id) {
  for (const Backend& b : kBackends)
    if (b.id == id) return &b;
  return nullptr;
}

dilattn_status backend_can_run(const Backend& b, const Problem& p) {
  // SPEC 10 and 11: an option the backend does not compute is refused by name, in one place.
  if (const char* option = Problem::first_option_outside(p.options_used(), b.runs_options))
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s' does not support %s yet (docs/spec.md sections 10 and 11; use "
                     "backend ref)",
                     b.name, option);
  return b.can_run(p);
}

dilattn_status resolve_auto_backend(const Problem& p, const Backend** chosen) {
  for (const Backend& b : kBackends) {
    if (b.id == DILATTN_BACKEND_EMU) continue;
    const dilattn_status s = backend_can_run(b, p);
    if (s == DILATTN_SUCCESS) {
      *chosen = &b;
      return s;
    }
    // A backend that cannot run here or this problem is skipped; a setting the user got
    // wrong (INVALID_VALUE, e.g. DILATTN_CPU_ISA naming what this CPU lacks) stops the plan.
    if (s == DILATTN_ERROR_INVALID_VALUE) return s;
  }
  *chosen = find_backend(DILATTN_BACKEND_REF);  // ref_can_run never refuses
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
