// test_launch_device_arch.cpp - the launcher's device check (cuda/launch.cu), on the backend
// DILATTN_TEST_BACKEND names.
//   emu (default): a GPU this build has no kernel image for (the emulator set to sm_75; the
//     emulated binary, like the default build, holds sm_80 and sm_90 code) is refused when the
//     plan is made, naming the device and why: DILATTN_ERROR_DEVICE_NOT_BUILT "device 0
//     (sm_75): no kernel image for it (kernels built for sm 80,90)"; the "GPU present" report
//     of dilattn_build_info says the same and that the backend is not used, and AUTO therefore
//     runs on the CPU.
//   cuda: the real GPU, which a build for its own architecture has kernels for: the report
//     names its sm and no refusal, and a cuda plan is made.
#include <cstdio>
#include <string>

#include "../common/check.h"
#include "../common/test_backend.h"
#include "backend.h"
#include "dilattn.h"
#include "simt.h"

namespace {

// A plan of a small dense f32 problem; destroyed at the end of the scope, so the status's
// message (dilattn_last_error) is still the plan's when the caller checks it.
class SmallPlan {
 public:
  ~SmallPlan() {
    dilattn_plan_destroy(plan_);
    dilattn_desc_destroy(desc_);
  }
  dilattn_status create(dilattn_backend backend) {
    dilattn_desc_create(&desc_);
    const dilattn_shape shape = dilattn_shape_make(1, 8, 8, 1, 1, 16);
    return dilattn_plan_create(&plan_, desc_, &shape, DILATTN_F32, backend);
  }

 private:
  dilattn_desc desc_ = nullptr;
  dilattn_plan plan_ = nullptr;
};

}  // namespace

int main() {
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  if (backend == DILATTN_BACKEND_CUDA) {
    const std::string report = dilattn::cuda::device_report();
    std::printf("GPU present: %s\n", report.c_str());
    CHECK_MSG(report.rfind("yes (sm_", 0) == 0 && report.find("not used") == std::string::npos,
              "device report: %s", report.c_str());
    SmallPlan plan;
    CHECK_OK(plan.create(DILATTN_BACKEND_CUDA));
    return harness::finish("kernels_launch_device_arch on cuda");
  }
  simt::set_emulated_device(7, 5);  // before any call: device facts are cached per process
  SmallPlan plan;
  CHECK_ERROR(plan.create(DILATTN_BACKEND_EMU), DILATTN_ERROR_DEVICE_NOT_BUILT,
              "device 0 (sm_75): no kernel image for it (kernels built for sm 80,90)");
  const std::string report = dilattn::emu::device_report();
  CHECK_MSG(
      report == "yes (sm_75), no kernel image for it (kernels built for sm 80,90): emu not used",
      "device report: %s", report.c_str());
  return harness::finish("kernels_launch_device_arch");
}
