// test_scale_beyond_f32.cpp - a finite scale whose |scale| * log2(e) exceeds f32 (SPEC 7 allows
// any finite scale; lib/softmax_rules.h, scale_fits_f32): the f32 backends (cpu, emu)
// refuse it with UNSUPPORTED naming the scale, and AUTO runs it on the reference, whose O is
// right: with q = k = 1 and v = (1, 3) the two scores are equal, O = 2 for both rows.
#include <cmath>
#include <cstring>

#include "error_fixture.h"

namespace {

void check_case(double scale) {
  harness::CaseScope scope(scale > 0 ? "scale 3e38" : "scale -3e38");
  errtest::FreshDesc desc;
  CHECK_OK(dilattn_desc_set_scale(desc.d, scale));
  for (dilattn_backend b : {DILATTN_BACKEND_CPU, DILATTN_BACKEND_EMU}) {
    if (!dilattn_backend_available(b)) continue;
    errtest::PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 2, 2, 1, 1, 1, b),
                DILATTN_ERROR_UNSUPPORTED, "scale", "e+38");
    CHECK(slot.untouched());
  }
  dilattn_plan plan = nullptr;
  if (!CHECK_OK(errtest::create_plan(&plan, desc, 1, 2, 2, 1, 1, 1, DILATTN_BACKEND_AUTO)))
    return;
  dilattn_backend ran = DILATTN_BACKEND_AUTO;
  CHECK_OK(dilattn_plan_backend(plan, &ran));
  CHECK_MSG(ran == DILATTN_BACKEND_REF, "AUTO chose %s", dilattn_backend_name(ran));
  float q[2] = {1, 1}, k[2] = {1, 1}, v[2] = {1, 3}, o[2] = {0, 0};
  const dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 1, 2, 1, 1);
  const dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, 1, 2, 1, 1);
  const dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F32, 1, 2, 1, 1);
  const dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F32, 1, 2, 1, 1);
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  CHECK_MSG(o[0] == 2.0f && o[1] == 2.0f, "O = (%g, %g), want (2, 2)", o[0], o[1]);
  dilattn_plan_destroy(plan);
}

}  // namespace

int main() {
  check_case(3e38);
  check_case(-3e38);
  return harness::finish("scale_beyond_f32_runs_on_the_reference");
}
