// transport_nccl_stub.cpp - dilattn_comm_create_nccl in a build without NCCL (meson option
// nccl, found together with CUDA): DILATTN_ERROR_UNSUPPORTED, saying so. With NCCL,
// transport_nccl.cpp replaces it.
// Checked by tests/ring/test_ring_device_errors.cpp.
#include "errors.h"
#include "ring_transport.h"

namespace dilattn {

dilattn_status make_nccl_transport(const void*, void*, int32_t, std::unique_ptr<RingTransport>*) {
  return set_error(DILATTN_ERROR_UNSUPPORTED,
                   "dilattn_comm_create_nccl: this build has no NCCL (it needs CUDA, nccl.h and "
                   "libnccl at build time: meson option nccl)");
}

}  // namespace dilattn
