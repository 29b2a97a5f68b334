// staged_outputs.cpp - the host copies of a call's outputs (staged_outputs.h, SPEC 14.11).
#include "staged_outputs.h"

#include <cstring>
#include <new>

#include "dtype_convert.h"
#include "errors.h"

namespace dilattn {

namespace {

// Copies a contiguous copy of a 4-D view back into the view, in C order: one memcpy for a
// contiguous view, one per row of D elements when the last dimension is dense, else one per
// element.
void copy_back(const dilattn_tensor& view, const char* copy) {
  const size_t element = dtype_size(view.dtype);
  const int64_t* n = view.shape;
  const int64_t* s = view.strides;
  char* data = static_cast<char*>(view.data);
  auto move = [&](int64_t at, int64_t flat, size_t bytes) {
    std::memcpy(data + at * element, copy + flat * element, bytes);
  };
  const bool dense_rows = s[3] == 1 || n[3] == 1;
  const bool contiguous = dense_rows && s[2] == n[3] && s[1] == n[2] * n[3] &&
                          s[0] == n[1] * n[2] * n[3];
  if (contiguous) return move(0, 0, static_cast<size_t>(n[0] * n[1] * n[2] * n[3]) * element);
  int64_t flat = 0;
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c) {
        const int64_t row = a * s[0] + b * s[1] + c * s[2];
        if (dense_rows) {
          move(row, flat, static_cast<size_t>(n[3]) * element);
          flat += n[3];
        } else {
          for (int64_t d = 0; d < n[3]; ++d) move(row + d * s[3], flat++, element);
        }
      }
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
  for (const Tensor& t : tensors_) copy_back(*t.output, t.bytes.get());
  for (const Values& v : values_) std::memcpy(v.output, v.copy.data(), v.copy.size() * sizeof(double));
}

}  // namespace dilattn
