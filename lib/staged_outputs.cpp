// staged_outputs.cpp - the host copies of a call's outputs (staged_outputs.h, SPEC 14.11).
#include "staged_outputs.h"

#include <cstring>
#include <new>

#include "dtype_convert.h"
#include "errors.h"

namespace dilattn {

namespace {

// Calls f(element offset in `strided`, element offset in the contiguous copy) for every
// element of a 4-D view, in C order.
template <class F>
void for_each_element(const dilattn_tensor& strided, F&& f) {
  const int64_t* n = strided.shape;
  const int64_t* s = strided.strides;
  int64_t flat = 0;
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        for (int64_t d = 0; d < n[3]; ++d) f(a * s[0] + b * s[1] + c * s[2] + d * s[3], flat++);
}

}  // namespace

dilattn_status StagedOutputs::stage(const dilattn_tensor** view) {
  if (*view == nullptr) return DILATTN_SUCCESS;
  const dilattn_tensor& output = **view;
  const size_t element = dtype_size(output.dtype);
  // dispatch.cpp has checked the view against the plan: its element count fits size_t.
  const int64_t count = output.shape[0] * output.shape[1] * output.shape[2] * output.shape[3];
  std::unique_ptr<char[]> bytes(new (std::nothrow) char[static_cast<size_t>(count) * element]);
  if (!bytes)
    return set_error(DILATTN_ERROR_OUT_OF_MEMORY,
                     "the host copy of an output (%lld elements) a progress callback needs "
                     "(SPEC 14.11): allocation failed",
                     static_cast<long long>(count));
  dilattn_tensor copy = output;
  copy.data = bytes.get();
  copy.strides[3] = 1;
  copy.strides[2] = output.shape[3];
  copy.strides[1] = output.shape[2] * copy.strides[2];
  copy.strides[0] = output.shape[1] * copy.strides[1];
  const char* from = static_cast<const char*>(output.data);
  char* to = bytes.get();
  for_each_element(output, [&](int64_t at, int64_t flat) {
    std::memcpy(to + flat * element, from + at * element, element);
  });
  tensors_.push_back(Tensor{*view, copy, std::move(bytes)});
  *view = &tensors_.back().copy;
  return DILATTN_SUCCESS;
}

dilattn_status StagedOutputs::stage(double** values, int64_t count) {
  if (*values == nullptr) return DILATTN_SUCCESS;
  values_.push_back(Values{*values, std::vector<double>(*values, *values + count)});
  *values = values_.back().copy.data();
  return DILATTN_SUCCESS;
}

void StagedOutputs::commit() const {
  for (const Tensor& t : tensors_) {
    const size_t element = dtype_size(t.output->dtype);
    char* to = static_cast<char*>(t.output->data);
    const char* from = t.bytes.get();
    for_each_element(*t.output, [&](int64_t at, int64_t flat) {
      std::memcpy(to + at * element, from + flat * element, element);
    });
  }
  for (const Values& v : values_) std::memcpy(v.output, v.copy.data(), v.copy.size() * sizeof(double));
}

}  // namespace dilattn
