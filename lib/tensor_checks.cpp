// tensor_checks.cpp - one check for every tensor argument (SPEC 1 and 7).
#include "tensor_checks.h"

#include "abi_enum.h"
#include "backend.h"
#include "dtype_convert.h"
#include "errors.h"

namespace dilattn {

dilattn_status check_tensor_view(const dilattn_tensor* t, const char* name) {
  if (t == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s' is NULL", name);
  if (t->struct_size != sizeof(dilattn_tensor))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument '%s': struct_size = %zu, expected sizeof(dilattn_tensor) = %zu "
                     "(fill it with dilattn_tensor_contiguous or set the field)",
                     name, t->struct_size, sizeof(dilattn_tensor));
  if (t->data == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s': data is NULL", name);
  const int32_t dtype = enum_value(t->dtype), device = enum_value(t->device);
  if (dtype != DILATTN_F32 && dtype != DILATTN_F64 && dtype != DILATTN_F16 && dtype != DILATTN_BF16)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s': dtype = %d is not a dtype", name,
                     static_cast<int>(dtype));
  if (device != DILATTN_DEVICE_CPU && device != DILATTN_DEVICE_CUDA)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s': device = %d is not a device type",
                     name, static_cast<int>(device));
  return DILATTN_SUCCESS;
}

dilattn_status check_tensor(const Problem& p, const dilattn_tensor* t, const char* name,
                            TensorRole role) {
  if (dilattn_status s = check_tensor_view(t, name)) return s;
  if (role == TensorRole::lse) {
    if (t->dtype != DILATTN_F32 && t->dtype != DILATTN_F64)
      return set_error(DILATTN_ERROR_DTYPE_MISMATCH, "argument '%s': dtype %s, LSE must be f32 or f64",
                       name, dtype_name(t->dtype));
  } else if (t->dtype != p.dtype) {
    return set_error(DILATTN_ERROR_DTYPE_MISMATCH, "argument '%s': dtype %s, the plan has %s", name,
                     dtype_name(t->dtype), dtype_name(p.dtype));
  }
  const Backend& backend = *find_backend(p.backend);  // the plan's, never AUTO
  if (t->device != backend.device)
    return set_error(DILATTN_ERROR_DEVICE_MISMATCH,
                     "argument '%s': on device %d, backend %s needs device %d", name,
                     static_cast<int>(t->device), backend.name, static_cast<int>(backend.device));
  int64_t expected[4] = {0, 0, 0, 0};
  switch (role) {
    case TensorRole::q:
    case TensorRole::o: expected[0] = p.B; expected[1] = p.Nq; expected[2] = p.H; expected[3] = p.D; break;
    case TensorRole::kv: expected[0] = p.B; expected[1] = p.Nk; expected[2] = p.Hkv; expected[3] = p.D; break;
    case TensorRole::lse: expected[0] = p.B; expected[1] = p.H; expected[2] = p.Nq; expected[3] = 1; break;
  }
  for (int i = 0; i < 4; ++i)
    if (t->shape[i] != expected[i])
      return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                       "argument '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                       name, static_cast<long long>(t->shape[0]), static_cast<long long>(t->shape[1]),
                       static_cast<long long>(t->shape[2]), static_cast<long long>(t->shape[3]),
                       static_cast<long long>(expected[0]), static_cast<long long>(expected[1]),
                       static_cast<long long>(expected[2]), static_cast<long long>(expected[3]));
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t->strides[i] < 0)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s': strides[%d] = %lld is negative",
                       name, i, static_cast<long long>(t->strides[i]));
    int64_t term;
    if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &term) ||
        __builtin_add_overflow(last, term, &last))
      return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "argument '%s': element offsets overflow int64",
                       name);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(last + 1, static_cast<int64_t>(dtype_size(t->dtype)), &bytes))
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "argument '%s': byte extent overflows int64", name);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
