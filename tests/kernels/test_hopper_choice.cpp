// test_hopper_choice.cpp - which forward kernel an sm_90 runs without being asked
// (docs/spec.md 14.5): the Hopper kernel (cuda/forward_wgmma.cu) for dense and dilated f16/bf16
// problems at D 64 and 128, the sm_80 kernel (forward_mma.cu) for block-sparse ones, and
// DILATTN_CUDA_WGMMA=0 keeping every problem on the sm_80 kernel.
//
// Usage: [DILATTN_TEST_BACKEND=emu|cuda] test_hopper_choice measured|never
//   measured  DILATTN_CUDA_WGMMA unset: the rule as measured;
//   never     DILATTN_CUDA_WGMMA=0.
// On emu the emulated device is set to 9.0; on cuda the GPU must be an sm_90. Each case runs
// once on the backend; the test counts the Hopper kernel's launches (hopper_launches.h) and
// compares the outputs with the f64 reference (SPEC 8). The parsing of the variable and the
// rule itself (cuda/kernel_choice.h) are checked as pure functions first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hopper_launches.h"
#include "kernel_cases.h"
#include "kernel_choice.h"

namespace {

using Case = harness::AttentionCase;

// kernel_choice.h's reading of DILATTN_CUDA_WGMMA and its rule per kind.
void check_rule() {
  using dilattn::HopperMode;
  using dilattn::hopper_mode_from;
  using dilattn::hopper_wanted;
  CHECK(hopper_mode_from(nullptr) == HopperMode::measured);
  CHECK(hopper_mode_from("") == HopperMode::measured);
  CHECK(hopper_mode_from("0") == HopperMode::never);
  CHECK(hopper_mode_from("1") == HopperMode::always);
  CHECK(hopper_mode_from("01") == HopperMode::measured);
  CHECK(hopper_mode_from("10") == HopperMode::measured);
  CHECK(hopper_mode_from("auto") == HopperMode::measured);
  CHECK(hopper_wanted(HopperMode::measured, DILATTN_KIND_DENSE));
  CHECK(hopper_wanted(HopperMode::measured, DILATTN_KIND_DILATED));
  CHECK(!hopper_wanted(HopperMode::measured, DILATTN_KIND_BLOCK_SPARSE));
  CHECK(hopper_wanted(HopperMode::always, DILATTN_KIND_BLOCK_SPARSE));
  CHECK(!hopper_wanted(HopperMode::never, DILATTN_KIND_DENSE));
  CHECK(!hopper_wanted(HopperMode::never, DILATTN_KIND_DILATED));
}

// Whether the case should have launched the Hopper kernel under `mode`. Rows of D + 4
// elements are no tensor map's: that case runs forward_mma.cu whatever the mode.
bool expects_hopper(const Case& c, const std::string& mode) {
  if (mode == "never" || c.name.find("unaligned_rows") != std::string::npos) return false;
  return c.kind != DILATTN_KIND_BLOCK_SPARSE;
}

void run_case(const Case& c, const std::string& mode, dilattn_backend backend) {
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  const harness::Inputs in = kcase::random_inputs(c);
  const harness::Forward ref =
      harness::run_forward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const uint64_t before = hopper_launches(backend);
  // On cuda the inputs are copied to the GPU first (gpu_run.h), as any caller's would be.
  const harness::Forward got = kcase::run_forward_on(c, in, backend, 0);
  const uint64_t launched = hopper_launches(backend) - before;
  const bool expected = expects_hopper(c, mode);
  CHECK_MSG((launched > 0) == expected, "forward_wgmma.cu launched %llu times, expected %s",
            static_cast<unsigned long long>(launched), expected ? "some" : "none");
  CHECK_CLOSE("O", got.o, ref.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, ref.lse, spec8::lse());
  std::printf("%-60s %s %s\n", c.name.c_str(), expected ? "wgmma" : "mma  ",
              harness::failures() == failed_before ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "measured" && mode != "never") {
    std::fprintf(stderr, "usage: %s measured|never\n", argc > 0 ? argv[0] : "test");
    return 2;
  }
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  // Before the first call: the launcher reads the variable and the device once.
  if (mode == "never")
    setenv("DILATTN_CUDA_WGMMA", "0", 1);
  else
    unsetenv("DILATTN_CUDA_WGMMA");
  if (backend == DILATTN_BACKEND_EMU) simt::set_emulated_device(9, 0);
  check_rule();
  // The forward cases of the sm_80 tensor-core kernel (every kind, f16 and bf16, D 64 and 128):
  // the first two f16 cases of each kind are enough to see the choice (and the unaligned case
  // its fallback), with bf16's dense case beside them.
  int dense = 0, dilated = 0, sparse = 0, unaligned = 0;
  for (const Case& c : kcase::kernel_cases(kcase::Direction::forward, "mma")) {
    const bool bf16_dense = c.dtype == DILATTN_BF16 && c.name == "mma/bf16/dense";
    if (c.dtype != DILATTN_F16 && !bf16_dense) continue;
    int* seen = c.name.find("unaligned_rows") != std::string::npos ? &unaligned
                : c.kind == DILATTN_KIND_BLOCK_SPARSE             ? &sparse
                : c.kind == DILATTN_KIND_DILATED                  ? &dilated
                                                                  : &dense;
    if (*seen >= 2 && !bf16_dense) continue;
    ++*seen;
    run_case(c, mode, backend);
  }
  CHECK_MSG(dense > 0 && dilated > 0 && sparse > 0 && unaligned > 0,
            "cases: %d dense, %d dilated, %d block-sparse, %d unaligned", dense, dilated, sparse,
            unaligned);
  return harness::finish(("kernels_hopper_choice_" + mode + " on " +
                          dilattn_backend_name(backend)).c_str());
}
