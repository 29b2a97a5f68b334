// ring_mpi_absent.cpp - ring_mpi.h in a dilattn built without MPI (meson option mpi): a world
// of one rank, and --ring mpi refused (exit 3) before any file is read.
#include "cli_error.h"
#include "ring_mpi.h"

namespace dilattn_cli {

MpiWorld::MpiWorld(const char* command, const RingOptions& ring)
    : command_(command), timeout_ms_(ring.timeout_ms) {
  if (ring.mpi)
    throw CliError(kExitRuntime, "flag --ring mpi: this dilattn was built without MPI (meson "
                                 "option mpi); use --ring-threads P");
}
MpiWorld::~MpiWorld() = default;
void MpiWorld::agree_on_command(const std::map<std::string, std::string>&) const {}
void MpiWorld::together(const std::function<void()>& step) const { step(); }
void MpiWorld::on_root(const std::function<void()>& step) const { step(); }
void MpiWorld::share_header(NpyArray*) const {}
void MpiWorld::share_mask(MaskHandle*, int64_t, int64_t, int64_t, int64_t) const {}

[[noreturn]] static void unreachable() {
  throw CliError(kExitRuntime, "flag --ring mpi: this dilattn was built without MPI");
}
void ring_forward_mpi(const MpiWorld&, dilattn_plan, const RingOptions&, const dilattn_tensor&,
                      const dilattn_tensor&, const dilattn_tensor&, const dilattn_tensor&,
                      const dilattn_tensor&, const dilattn_call_options*) {
  unreachable();
}
void ring_backward_mpi(const MpiWorld&, dilattn_plan, const RingOptions&, const dilattn_tensor&,
                       const dilattn_tensor&, const dilattn_tensor&, const dilattn_tensor&,
                       const dilattn_tensor&, const dilattn_tensor&, const dilattn_tensor&,
                       const dilattn_tensor&, const dilattn_tensor&, const dilattn_call_options*) {
  unreachable();
}

}  // namespace dilattn_cli
