// cpu_backend_stub.cpp - the cpu backend until it lands: answers BACKEND_NOT_BUILT.
#include "backend.h"
#include "errors.h"

namespace dilattn::cpu {
dilattn_status can_run(const Problem&) {
  return set_error(DILATTN_ERROR_BACKEND_NOT_BUILT, "backend 'cpu' is not in this build yet");
}
WorkspaceBytes workspace_bytes(const Problem&) { return {}; }
dilattn_status forward(const Problem& p, const ForwardArgs&) { return can_run(p); }
dilattn_status backward(const Problem& p, const BackwardArgs&) { return can_run(p); }
}  // namespace dilattn::cpu
