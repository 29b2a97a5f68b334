// launch_emu.cpp - the emu backend (DILATTN_BACKEND_EMU): cuda/launch.cu and its kernels,
// compiled by the host compiler against the SIMT emulator (emu/simt.h) into namespace
// dilattn::emu, so the CUDA backend's exact kernels and launcher run on a CPU: replay a case
// through the kernels, or step through one in gdb, without a GPU.
//
// Checked by tests/kernels/ (every kernel x dtype x kind against the reference).
#define DILATTN_BACKEND_NS emu
#include "launch.cu"

namespace dilattn::emu {

// emu's tensors are host memory and a caller's cudaStream_t means nothing to the emulator, so a
// dilattn_*_on_stream call runs as the plain call does (dilattn.h: CPU backends ignore the
// stream) and the value is never read. A stream the emulator itself made is the exception: it is
// how tests run the launcher on a caller's stream with deferred work
// (tests/kernels/test_launch_stream.cpp).
bool runs_on_stream(void* stream) {
  return stream != nullptr && simt::is_live_stream(static_cast<cudaStream_t>(stream));
}

}  // namespace dilattn::emu
