// library_status.h - turning a dilattn_status into the tool's exit code and one-line message.
//
// Bad-input statuses (SPEC 7: null pointer, shape/dtype mismatch, heads, segments, dilations,
// branches, groups, scale, size overflow, bad mask, invalid value, seqlen mismatch) exit 2; the
// rest (unsupported, backend or device not built, device mismatch, memory, CUDA, internal) exit 3.
// The message is the library's own detail (dilattn_last_error), which names the argument and
// value. Checked by tests/cli/test_cli_flags.py (bad dilation exits 2, cpu backend stub exits 3).
#ifndef DILATTN_TOOLS_LIBRARY_STATUS_H
#define DILATTN_TOOLS_LIBRARY_STATUS_H

#include <string>

#include "cli_error.h"
#include "dilattn.h"

namespace dilattn_cli {

inline int exit_code_for(dilattn_status s) {
  switch (s) {
    case DILATTN_SUCCESS: return kExitOk;
    case DILATTN_ERROR_NULL_POINTER:
    case DILATTN_ERROR_SHAPE_MISMATCH:
    case DILATTN_ERROR_DTYPE_MISMATCH:
    case DILATTN_ERROR_HEADS_NOT_DIVISIBLE:
    case DILATTN_ERROR_BAD_SEGMENT:
    case DILATTN_ERROR_BAD_DILATION:
    case DILATTN_ERROR_NO_BRANCHES:
    case DILATTN_ERROR_GROUPS_TOO_FEW_HEADS:
    case DILATTN_ERROR_BAD_SCALE:
    case DILATTN_ERROR_SIZE_OVERFLOW:
    case DILATTN_ERROR_BAD_MASK:
    case DILATTN_ERROR_INVALID_VALUE:
    case DILATTN_ERROR_SEQLEN_MISMATCH: return kExitBadInput;
    default: return kExitRuntime;
  }
}

// Throws a CliError for a failed call; `what` says which step ("plan", "forward", "--mask M.npz").
// `detail` is the library's message: this thread's last error unless the call ran on another
// thread (a ring rank, ring_run.cpp).
inline void check_status(dilattn_status s, const std::string& what, std::string detail) {
  if (s == DILATTN_SUCCESS) return;
  for (char& c : detail)
    if (c == '\n') c = ' ';  // one line, always
  std::string name = dilattn_status_string(s);
  const size_t colon = name.find(':');
  if (colon != std::string::npos) name.resize(colon);
  throw CliError(exit_code_for(s), what + ": " + (detail.empty() ? name : detail) + " [" + name + "]");
}
inline void check_status(dilattn_status s, const std::string& what) {
  if (s != DILATTN_SUCCESS) check_status(s, what, dilattn_last_error());
}

// A forward or backward call with the progress line (progress_line.h): as check_status, but the
// one way such a call is cancelled is Ctrl-C, which exits 130.
inline void check_call(dilattn_status s, const std::string& what) {
  if (s == DILATTN_ERROR_CANCELLED)
    throw CliError(kExitInterrupted, what + ": interrupted (Ctrl-C): the call stopped and no "
                                            "output file was written [DILATTN_ERROR_CANCELLED]");
  check_status(s, what);
}

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_LIBRARY_STATUS_H
