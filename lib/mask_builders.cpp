// mask_builders.cpp - block-sparse pattern builders (SPEC 4). Not landed yet.
#include "errors.h"
#include "handles.h"

extern "C" dilattn_status dilattn_mask_from_pattern(dilattn_mask* mask, const char* pattern,
                                                    int64_t, int64_t, int64_t, int64_t) {
  DILATTN_ABI_BEGIN
  if (mask == nullptr) return dilattn::set_error(DILATTN_ERROR_NULL_POINTER, "argument 'mask' is NULL");
  if (pattern == nullptr) return dilattn::set_error(DILATTN_ERROR_NULL_POINTER, "argument 'pattern' is NULL");
  return dilattn::set_error(DILATTN_ERROR_UNSUPPORTED, "pattern builders are not in this build yet");
  DILATTN_ABI_END
}
