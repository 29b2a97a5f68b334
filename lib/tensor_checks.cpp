// tensor_checks.cpp - one check for every tensor argument (SPEC 1 and 7).
#include "tensor_checks.h"

#include <cstdint>
#include <utility>

#include "abi_enum.h"
#include "backend.h"
#include "dtype_convert.h"
#include "errors.h"

namespace dilattn {

namespace {

// An output is written element by element by several threads (or GPU blocks) at once, so two
// of its elements at one address would race and keep whichever landed last (SPEC 1: a view a
// backend cannot take is refused before memory is touched). Inputs may share memory (a zero
// stride broadcasts one row). Taken in the order of their strides, each dimension of size > 1
// must step past every offset the dimensions with smaller strides reach: then each element has
// its own address. This also refuses interleaved layouts that happen not to collide, which no
// framework makes. check_tensor has checked that the offsets fit int64.
dilattn_status check_no_shared_elements(const dilattn_tensor* t, const char* name) {
  int dims[4];
  int n = 0;
  for (int i = 0; i < 4; ++i) {
    if (t->shape[i] == 0) return DILATTN_SUCCESS;  // no elements (a ring rank without rows)
    if (t->shape[i] > 1) dims[n++] = i;
  }
  for (int a = 1; a < n; ++a)  // insertion sort by stride, ties in dimension order
    for (int b = a; b > 0 && t->strides[dims[b]] < t->strides[dims[b - 1]]; --b)
      std::swap(dims[b], dims[b - 1]);
  int64_t span = 0;  // the largest offset the dimensions taken so far reach
  for (int k = 0; k < n; ++k) {
    const int d = dims[k];
    if (t->strides[d] <= span)
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "argument '%s' is an output, and its strides [%lld, %lld, %lld, %lld] "
                       "let two of its elements share memory: dimension %d (size %lld, stride "
                       "%lld) must step past offset %lld, the largest the dimensions with "
                       "smaller strides reach",
                       name, static_cast<long long>(t->strides[0]),
                       static_cast<long long>(t->strides[1]), static_cast<long long>(t->strides[2]),
                       static_cast<long long>(t->strides[3]), d,
                       static_cast<long long>(t->shape[d]), static_cast<long long>(t->strides[d]),
                       static_cast<long long>(span));
    span += (t->shape[d] - 1) * t->strides[d];
  }
  return DILATTN_SUCCESS;
}

}  // namespace

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
  // SPEC 15: every backend reads and writes elements as their type (a misaligned access is
  // undefined behaviour in C++ and a fault on a GPU), so each data pointer is aligned to its
  // element size. One rule for every backend, checked before any backend runs.
  const size_t element = dtype_size(static_cast<dilattn_dtype>(dtype));
  if (reinterpret_cast<uintptr_t>(t->data) % element != 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument '%s': data pointer %p is not aligned to its %zu-byte %s elements",
                     name, t->data, element, dtype_name(static_cast<dilattn_dtype>(dtype)));
  return DILATTN_SUCCESS;
}

dilattn_status check_tensor(const Problem& p, const dilattn_tensor* t, const char* name,
                            TensorRole role, TensorUse use) {
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
  if (use == TensorUse::written) return check_no_shared_elements(t, name);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
