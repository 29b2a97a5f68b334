// emu_streams.cpp - which caller streams the emu backend runs on (Backend::runs_on_stream).
//
// emu's tensors are host memory and a caller's cudaStream_t means nothing to the emulator, so a
// dilattn_*_on_stream call runs as the plain call does (dilattn.h: CPU backends ignore the
// stream) and the value is never read. A stream the emulator itself made is the exception: it is
// how tests run the launcher on a caller's stream with deferred work
// (tests/kernels/test_launch_stream.cpp). Checked by
// tests/errors/test_stream_argument_on_cpu_backends.cpp.
#include "backend.h"
#include "simt.h"

namespace dilattn::emu {

bool runs_on_stream(void* stream) {
  return stream != nullptr && simt::is_live_stream(static_cast<cudaStream_t>(stream));
}

}  // namespace dilattn::emu
