// test_tensor_arguments.cpp - SPEC 7 for the tensors of dilattn_forward and dilattn_backward:
// a NULL tensor or data pointer, a shape, dtype or device that disagrees with the plan, strides
// whose offsets overflow, and a negative stride each get their own status and a message naming
// the tensor and the value, and no output byte changes.
#include <cstdint>

#include "error_fixture.h"

using errtest::Problem;

namespace {

void null_pointers_are_named() {
  Problem p;
  p.tq.data = nullptr;  // q's data pointer
  CHECK_ERROR(p.forward(), DILATTN_ERROR_NULL_POINTER, "'q'", "NULL");
  CHECK_ERROR(p.backward(), DILATTN_ERROR_NULL_POINTER, "'q'", "NULL");
  p.tq.data = p.q.data();
  CHECK_ERROR(dilattn_forward(p.plan, &p.tq, &p.tk, &p.tv, nullptr, &p.tlse, nullptr, 0),
              DILATTN_ERROR_NULL_POINTER, "'o'", "NULL");
  CHECK_ERROR(dilattn_backward(p.plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq,
                               nullptr, &p.tdv, nullptr, 0),
              DILATTN_ERROR_NULL_POINTER, "'dk'", "NULL");
  CHECK(p.outputs_untouched());
}

void shape_mismatch_names_both_shapes() {
  Problem p;
  p.tk.shape[1] = 5;  // Nk 5, the plan has 4
  CHECK_ERROR(p.forward(), DILATTN_ERROR_SHAPE_MISMATCH, "'k'", "[1, 5, 1, 3]", "[1, 4, 1, 3]");
  CHECK_ERROR(p.backward(), DILATTN_ERROR_SHAPE_MISMATCH, "'k'");
  p.tk.shape[1] = 4;
  p.tlse.shape[3] = 2;
  CHECK_ERROR(p.forward(), DILATTN_ERROR_SHAPE_MISMATCH, "'lse'", "[1, 2, 4, 2]");
  CHECK(p.outputs_untouched());
}

void dtype_mismatch_names_both_dtypes() {
  Problem p;
  p.tv.dtype = DILATTN_F16;
  CHECK_ERROR(p.forward(), DILATTN_ERROR_DTYPE_MISMATCH, "'v'", "f16", "f32");
  p.tv.dtype = DILATTN_F32;
  p.tlse.dtype = DILATTN_BF16;
  CHECK_ERROR(p.forward(), DILATTN_ERROR_DTYPE_MISMATCH, "'lse'", "bf16");
  CHECK_ERROR(p.backward(), DILATTN_ERROR_DTYPE_MISMATCH, "'lse'", "bf16");
  CHECK(p.outputs_untouched());
}

void device_mismatch_names_the_tensor() {
  Problem p;
  p.to.device = DILATTN_DEVICE_CUDA;  // the ref backend runs on the CPU
  CHECK_ERROR(p.forward(), DILATTN_ERROR_DEVICE_MISMATCH, "'o'", "device 1");
  p.to.device = DILATTN_DEVICE_CPU;
  p.tdv.device = DILATTN_DEVICE_CUDA;
  CHECK_ERROR(p.backward(), DILATTN_ERROR_DEVICE_MISMATCH, "'dv'");
  CHECK(p.outputs_untouched());
}

void overflowing_strides_refused() {
  Problem p;
  p.to.strides[0] = INT64_MAX / 2;  // offsets (B-1)*s0 fine for B = 1, so use dim 1
  p.to.strides[1] = INT64_MAX / 2;  // (4 - 1) * INT64_MAX/2 overflows
  CHECK_ERROR(p.forward(), DILATTN_ERROR_SIZE_OVERFLOW, "'o'");
  CHECK(p.outputs_untouched());
}

void negative_stride_refused() {
  Problem p;
  p.tq.strides[2] = -3;
  CHECK_ERROR(p.forward(), DILATTN_ERROR_INVALID_VALUE, "'q'", "strides[2] = -3");
  CHECK(p.outputs_untouched());
}

}  // namespace

int main() {
  null_pointers_are_named();
  shape_mismatch_names_both_shapes();
  dtype_mismatch_names_both_dtypes();
  device_mismatch_names_the_tensor();
  overflowing_strides_refused();
  negative_stride_refused();
  return harness::finish("bad_tensors_refused_outputs_untouched");
}
