// cuda_backend_stub.cpp - the cuda backend in a build without CUDA (nvcc not found): every
// call answers DILATTN_ERROR_DEVICE_NOT_BUILT. With CUDA, cuda/launch.cu replaces it.
// Checked by the error tests (a device the build lacks, SPEC 7).
#include "backend.h"
#include "errors.h"

namespace dilattn::cuda {
dilattn_status can_run(const Problem&) {
  return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "backend 'cuda': this build has no CUDA kernels");
}
WorkspaceBytes workspace_bytes(const Problem&) { return {}; }
dilattn_status forward(const Problem& p, const ForwardArgs&) { return can_run(p); }
dilattn_status backward(const Problem& p, const BackwardArgs&) { return can_run(p); }
dilattn_status prepare(Problem& p) { return can_run(p); }
void after_work(int32_t, void*, void (*release)(void*), void* ctx) { release(ctx); }
std::string device_report() { return "no (this build has no CUDA kernels)"; }
dilattn_status make_ring_ops(int32_t, void*, std::unique_ptr<RingOps>*) {
  return can_run(Problem{});
}
}  // namespace dilattn::cuda
