// emu_backend_stub.cpp - the emu backend in a build without the SIMT emulator (option
// emulator=false, or no emu/simt.h, or no cuda_fp16.h for the f16/bf16 types): every call
// answers DILATTN_ERROR_BACKEND_NOT_BUILT. Otherwise the emu build of cuda/ (cuda/meson.build,
// emu_unit.cpp.in) replaces it.
#include "backend.h"
#include "errors.h"

namespace dilattn::emu {
dilattn_status can_run(const Problem&) {
  return set_error(DILATTN_ERROR_BACKEND_NOT_BUILT,
                   "backend 'emu': this build has no SIMT emulator (meson option emulator, and "
                   "cuda_fp16.h from a CUDA toolkit)");
}
WorkspaceBytes workspace_bytes(const Problem&) { return {}; }
dilattn_status forward(const Problem& p, const ForwardArgs&) { return can_run(p); }
dilattn_status backward(const Problem& p, const BackwardArgs&) { return can_run(p); }
dilattn_status prepare(Problem& p) { return can_run(p); }
void after_work(int32_t, void*, void (*release)(void*), void* ctx) { release(ctx); }
bool runs_on_stream(void*) { return false; }
std::string device_report() { return "no (this build has no SIMT emulator)"; }
dilattn_status make_ring_ops(int32_t, void*, std::unique_ptr<RingOps>*) {
  return can_run(Problem{});
}
}  // namespace dilattn::emu
