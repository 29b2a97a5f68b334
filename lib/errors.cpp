// errors.cpp - status strings and the thread-local last-error message (SPEC 7).
#include "errors.h"

#include <cstdarg>
#include <cstdio>

#include "abi_enum.h"

namespace dilattn {

namespace {
thread_local char t_last_error[512] = "";
}

dilattn_status set_error(dilattn_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_last_error, sizeof t_last_error, format, args);
  va_end(args);
  return status;
}

void clear_error() { t_last_error[0] = '\0'; }

}  // namespace dilattn

extern "C" const char* dilattn_last_error(void) { return dilattn::t_last_error; }

extern "C" const char* dilattn_status_string(dilattn_status status) {
  switch (dilattn::enum_value(status)) {  // any int may arrive from C
    case DILATTN_SUCCESS: return "DILATTN_SUCCESS: no error";
    case DILATTN_ERROR_NULL_POINTER: return "DILATTN_ERROR_NULL_POINTER: a required pointer is NULL";
    case DILATTN_ERROR_SHAPE_MISMATCH: return "DILATTN_ERROR_SHAPE_MISMATCH: tensor shapes disagree";
    case DILATTN_ERROR_DTYPE_MISMATCH: return "DILATTN_ERROR_DTYPE_MISMATCH: tensor dtypes disagree";
    case DILATTN_ERROR_HEADS_NOT_DIVISIBLE: return "DILATTN_ERROR_HEADS_NOT_DIVISIBLE: H is not a multiple of Hkv";
    case DILATTN_ERROR_BAD_SEGMENT: return "DILATTN_ERROR_BAD_SEGMENT: a segment length is < 1";
    case DILATTN_ERROR_BAD_DILATION: return "DILATTN_ERROR_BAD_DILATION: a dilation is < 1 or > its segment";
    case DILATTN_ERROR_NO_BRANCHES: return "DILATTN_ERROR_NO_BRANCHES: a dilated configuration needs a branch";
    case DILATTN_ERROR_GROUPS_TOO_FEW_HEADS: return "DILATTN_ERROR_GROUPS_TOO_FEW_HEADS: groups mode needs H >= branches";
    case DILATTN_ERROR_BAD_SCALE: return "DILATTN_ERROR_BAD_SCALE: scale is NaN or infinite";
    case DILATTN_ERROR_SIZE_OVERFLOW: return "DILATTN_ERROR_SIZE_OVERFLOW: a size overflows";
    case DILATTN_ERROR_BAD_MASK: return "DILATTN_ERROR_BAD_MASK: the block-sparse mask is invalid";
    case DILATTN_ERROR_DEVICE_NOT_BUILT: return "DILATTN_ERROR_DEVICE_NOT_BUILT: this build or machine lacks the device";
    case DILATTN_ERROR_DEVICE_MISMATCH: return "DILATTN_ERROR_DEVICE_MISMATCH: a tensor is on a device the backend does not use";
    case DILATTN_ERROR_INVALID_VALUE: return "DILATTN_ERROR_INVALID_VALUE: an argument is out of range";
    case DILATTN_ERROR_SEQLEN_MISMATCH: return "DILATTN_ERROR_SEQLEN_MISMATCH: dilated attention needs Nq == Nk";
    case DILATTN_ERROR_UNSUPPORTED: return "DILATTN_ERROR_UNSUPPORTED: the backend cannot take this input";
    case DILATTN_ERROR_BACKEND_NOT_BUILT: return "DILATTN_ERROR_BACKEND_NOT_BUILT: the backend is not in this build";
    case DILATTN_ERROR_OUT_OF_MEMORY: return "DILATTN_ERROR_OUT_OF_MEMORY: allocation failed";
    case DILATTN_ERROR_WORKSPACE_TOO_SMALL: return "DILATTN_ERROR_WORKSPACE_TOO_SMALL: workspace smaller than the plan needs";
    case DILATTN_ERROR_CUDA: return "DILATTN_ERROR_CUDA: the CUDA runtime reported an error";
    case DILATTN_ERROR_INTERNAL: return "DILATTN_ERROR_INTERNAL: internal error, please report";
    case DILATTN_ERROR_POOL_DOUBLE_FREE: return "DILATTN_ERROR_POOL_DOUBLE_FREE: block already free";
    case DILATTN_ERROR_POOL_FOREIGN_POINTER: return "DILATTN_ERROR_POOL_FOREIGN_POINTER: pointer not from this pool";
    case DILATTN_ERROR_POOL_INTERIOR_POINTER: return "DILATTN_ERROR_POOL_INTERIOR_POINTER: pointer inside a block";
    case DILATTN_ERROR_POOL_ZERO_SIZE: return "DILATTN_ERROR_POOL_ZERO_SIZE: allocation of 0 bytes";
    case DILATTN_ERROR_POOL_TOO_LARGE: return "DILATTN_ERROR_POOL_TOO_LARGE: request larger than the arena";
    case DILATTN_ERROR_POOL_DESTROYED: return "DILATTN_ERROR_POOL_DESTROYED: pool already destroyed";
    case DILATTN_ERROR_COMM: return "DILATTN_ERROR_COMM: another rank failed or did not arrive in time";
    case DILATTN_ERROR_CANCELLED: return "DILATTN_ERROR_CANCELLED: the progress callback stopped the call";
    case DILATTN_STATUS_COUNT_: break;
  }
  return "DILATTN_ERROR_UNKNOWN: not a dilattn status";
}
