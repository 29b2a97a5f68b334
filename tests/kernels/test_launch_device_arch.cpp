// test_launch_device_arch.cpp - a GPU this build has no kernel image for (the emulator set to
// sm_75; the emulated binary, like the default build, holds sm_80 and sm_90 code) is refused
// when the plan is made, naming the device and why: DILATTN_ERROR_DEVICE_NOT_BUILT "device 0
// (sm_75): no kernel image for it (kernels built for sm 80,90)"; the "GPU present" report of
// dilattn_build_info says the same and that the backend is not used, and AUTO therefore runs
// on the CPU. (The same code is the cuda backend's: cuda/launch.cu.)
#include <cstdio>
#include <string>

#include "../common/check.h"
#include "backend.h"
#include "dilattn.h"
#include "simt.h"

int main() {
  simt::set_emulated_device(7, 5);  // before any call: device facts are cached per process
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  const dilattn_shape shape = dilattn_shape_make(1, 8, 8, 1, 1, 16);
  dilattn_plan plan = nullptr;
  CHECK_ERROR(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_EMU),
              DILATTN_ERROR_DEVICE_NOT_BUILT,
              "device 0 (sm_75): no kernel image for it (kernels built for sm 80,90)");
  const std::string report = dilattn::emu::device_report();
  CHECK_MSG(
      report == "yes (sm_75), no kernel image for it (kernels built for sm 80,90): emu not used",
      "device report: %s", report.c_str());
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  return harness::finish("kernels_launch_device_arch");
}
