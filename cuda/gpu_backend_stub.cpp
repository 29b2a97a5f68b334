// gpu_backend_stub.cpp - the cuda and emu backends until the kernels land.
#include "backend.h"
#include "errors.h"

#define STUB_BACKEND(ns, status, message)                                            \
  namespace dilattn::ns {                                                            \
  dilattn_status can_run(const Problem&) { return set_error(status, message); }      \
  WorkspaceBytes workspace_bytes(const Problem&) { return {}; }                      \
  dilattn_status forward(const Problem& p, const ForwardArgs&) { return can_run(p); } \
  dilattn_status backward(const Problem& p, const BackwardArgs&) { return can_run(p); } \
  }
STUB_BACKEND(gpu, DILATTN_ERROR_DEVICE_NOT_BUILT, "backend 'cuda': this build has no CUDA kernels")
STUB_BACKEND(emu, DILATTN_ERROR_BACKEND_NOT_BUILT, "backend 'emu': the emulator is not in this build yet")
