// tensor_checks.h - checking a caller's tensor view against what the plan expects (SPEC 1, 7).
#ifndef DILATTN_TENSOR_CHECKS_H
#define DILATTN_TENSOR_CHECKS_H

#include "problem.h"

namespace dilattn {

enum class TensorRole { q, kv, o, lse };

// Whether the call writes the tensor (O, LSE, dQ, dK, dV) or only reads it.
enum class TensorUse { read, written };

// Checks what a view must be on its own: t and its data not NULL, dtype and device values of
// their enums (read as integers first: abi_enum.h), the data pointer aligned to the dtype's
// element size (SPEC 15: 2 bytes f16/bf16, 4 f32, 8 f64, for every backend). INVALID_VALUE
// names `name` and the value. Call before reading t->dtype or t->device as enums.
dilattn_status check_tensor_view(const dilattn_tensor* t, const char* name);

// Checks check_tensor_view, then dtype and device against the plan, shape, strides >= 0 and
// that the largest element offset fits int64; a written tensor also must not map two of its
// elements to one address (no_shared_elements). `name` is the argument's name for the message
// ("q", "dk", ...). For LSE any of f32 or f64 is accepted.
dilattn_status check_tensor(const Problem& p, const dilattn_tensor* t, const char* name,
                            TensorRole role, TensorUse use = TensorUse::read);

}  // namespace dilattn

#endif  // DILATTN_TENSOR_CHECKS_H
