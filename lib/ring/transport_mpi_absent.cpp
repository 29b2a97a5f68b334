// transport_mpi_absent.cpp - dilattn_comm_create_mpi in a library built without MPI (meson
// option mpi disabled or MPI not found): the symbol exists in every build, so a program linked
// against one build loads with another, and says why it cannot work (SPEC 7).
// Checked by tests/ring/test_ring_errors.cpp (ring_mpi_absent_unsupported).
#include "errors.h"
#include "ring_transport.h"

namespace dilattn {

dilattn_status make_mpi_transport(const void*, int32_t, size_t, std::unique_ptr<RingTransport>*) {
  return set_error(DILATTN_ERROR_UNSUPPORTED,
                   "dilattn_comm_create_mpi: this library was built without MPI (meson option "
                   "mpi; dilattn info shows the build)");
}

}  // namespace dilattn

extern "C" dilattn_status dilattn_comm_create_mpi(const void* mpi_comm, int32_t timeout_ms,
                                                  dilattn_comm* comm) {
  DILATTN_ABI_BEGIN
  if (comm == nullptr) return dilattn::set_error(DILATTN_ERROR_NULL_POINTER, "argument 'comm' is NULL");
  (void)mpi_comm;
  (void)timeout_ms;
  return dilattn::make_mpi_transport(nullptr, 0, 0, nullptr);
  DILATTN_ABI_END
}
