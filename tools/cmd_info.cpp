// cmd_info.cpp - `dilattn info`: the library's dilattn_build_info() (version, backends built,
// CUDA/NCCL found, CPU features, the instruction set the cpu backend chose), then whether each backend can run here, and a warning when the
// header the tool was compiled against differs from the library it runs with.
// Checked by tests/cli/test_cli_forward_backward.py (the version line and "ref: yes").
#include <cstdio>

#include "commands.h"
#include "dilattn.h"
#include "flags.h"

namespace dilattn_cli {

int cmd_info(int argc, char** argv, int first) {
  const Flags f(argc, argv, first, {}, 0);
  std::fputs(dilattn_build_info(), stdout);
  std::printf("backends available:");
  for (dilattn_backend b : {DILATTN_BACKEND_REF, DILATTN_BACKEND_CPU, DILATTN_BACKEND_EMU,
                            DILATTN_BACKEND_CUDA})
    std::printf(" %s: %s%s", dilattn_backend_name(b), dilattn_backend_available(b) ? "yes" : "no",
                b == DILATTN_BACKEND_CUDA ? "" : ",");
  std::printf("\n");
  if (dilattn_version() != DILATTN_VERSION)
    std::printf("warning: tool built against dilattn %d, running with library %d\n", DILATTN_VERSION,
                dilattn_version());
  return 0;
}

}  // namespace dilattn_cli
