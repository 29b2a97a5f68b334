// test_desc_arguments.cpp - SPEC 7 for dilattn_desc_set_dilated and dilattn_desc_set_scale: a
// segment < 1, a dilation < 1 or > its segment, no branches, and a NaN or infinite scale each
// get their own status and a message naming the argument and the value, and leave the
// description as it was: still dense and unscaled.
#include <cmath>

#include "error_fixture.h"

using errtest::FreshDesc;

namespace {

// The description is still dense and unscaled: a plan with Nq != Nk (refused for dilated
// attention) still builds, and its forward gives the default scale's numbers.
void check_still_dense(dilattn_desc desc) {
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(1, 2, 3, 1, 1, 1);
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF));
  // Nq = 2, Nk = 3, D = 1, q = 1, k = (0, ln 3, 0), v = (1, 2, 3): with the default scale 1,
  // exp S = (1, 3, 1), O = (1 + 6 + 3) / 5 = 2 for both rows. A kept bad scale would change it.
  double q[2] = {1, 1}, k[3] = {0, std::log(3.0), 0}, v[3] = {1, 2, 3}, o[2] = {0, 0};
  const dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F64, 1, 2, 1, 1);
  const dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F64, 1, 2, 1, 1);
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  CHECK(std::fabs(o[0] - 2) < 1e-14 && std::fabs(o[1] - 2) < 1e-14);
  dilattn_plan_destroy(plan);
}

void segment_zero_refused() {
  FreshDesc desc;
  const int64_t w[2] = {4, 0}, r[2] = {1, 1};
  CHECK_ERROR(dilattn_desc_set_dilated(desc.d, 2, w, r, DILATTN_HEADS_MOD),
              DILATTN_ERROR_BAD_SEGMENT, "segments[1] = 0");
  check_still_dense(desc.d);
}

void dilation_outside_one_to_w_refused() {
  FreshDesc desc;
  const int64_t w[2] = {4, 4}, r_big[2] = {1, 5}, r_zero[2] = {0, 1};
  CHECK_ERROR(dilattn_desc_set_dilated(desc.d, 2, w, r_big, DILATTN_HEADS_MOD),
              DILATTN_ERROR_BAD_DILATION, "dilations[1] = 5", "w = 4");
  CHECK_ERROR(dilattn_desc_set_dilated(desc.d, 2, w, r_zero, DILATTN_HEADS_MOD),
              DILATTN_ERROR_BAD_DILATION, "dilations[0] = 0");
  check_still_dense(desc.d);
}

void no_branches_refused() {
  FreshDesc desc;
  const int64_t w[1] = {4}, r[1] = {1};
  CHECK_ERROR(dilattn_desc_set_dilated(desc.d, 0, w, r, DILATTN_HEADS_MOD),
              DILATTN_ERROR_NO_BRANCHES, "'num_branches' = 0");
  check_still_dense(desc.d);
}

void nan_and_infinite_scale_refused() {
  FreshDesc desc;
  CHECK_ERROR(dilattn_desc_set_scale(desc.d, std::nan("")), DILATTN_ERROR_BAD_SCALE, "'scale'",
              "nan");
  CHECK_ERROR(dilattn_desc_set_scale(desc.d, -INFINITY), DILATTN_ERROR_BAD_SCALE, "'scale'",
              "-inf");
  check_still_dense(desc.d);  // the scale is still the default 1/sqrt(1)
}

}  // namespace

int main() {
  segment_zero_refused();
  dilation_outside_one_to_w_refused();
  no_branches_refused();
  nan_and_infinite_scale_refused();
  return harness::finish("bad_desc_arguments_leave_desc_dense");
}
