// test_cpu_forward.cpp - property: the cpu backend's forward equals the f64 reference within
// SPEC 8 (O by dtype, LSE absolute 1e-4) on every case of standard_cases() (dense, dilated in
// each head mode, block-sparse; odd head dims; N off every tile; GQA; causal; Nq != Nk; every
// dtype; permuted output strides), with 1 and 3 threads. Also: head_dim 257 is refused with
// DILATTN_ERROR_UNSUPPORTED, and AUTO resolves to cpu where no GPU is present.
#include "cpu_test_util.h"

using namespace cputest;

int main() {
  for (const Case& c : standard_cases()) {
    const Inputs in = make_inputs(c, 1);
    const ForwardOut want = run_forward(c, in, DILATTN_BACKEND_REF, 1, DILATTN_F64);
    for (int32_t threads : {1, 3}) {
      const ForwardOut got = run_forward(c, in, DILATTN_BACKEND_CPU, threads, DILATTN_F32);
      expect_close(c, "O", got.o, want.o, tolerance_of(c.dtype));
      expect_close(c, "LSE", got.lse, want.lse, Tolerance{spec8::kLseAtol, 0});
    }
  }

  {  // head_dim above the cpu backend's tile limit: refused before any memory is touched
    Case c;
    c.name = "head_dim_257_refused";
    c.Nq = c.Nk = 8; c.D = 257;
    dilattn_mask mask = nullptr;
    dilattn_desc desc = make_desc(c, 1, &mask);
    dilattn_plan plan = nullptr;
    const dilattn_shape shape = dilattn_shape_make(1, 8, 8, 1, 1, 257);
    const dilattn_status s = dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU);
    if (s != DILATTN_ERROR_UNSUPPORTED) {
      std::fprintf(stderr, "FAILED: head_dim 257 on cpu gave %s, want UNSUPPORTED\n",
                   dilattn_status_string(s));
      ++failure_count();
    }
    if (plan) dilattn_plan_destroy(plan);
    dilattn_desc_destroy(desc);
  }

  if (!dilattn_backend_available(DILATTN_BACKEND_CUDA)) {  // AUTO without a GPU is cpu
    Case c;
    c.name = "auto_is_cpu";
    c.Nq = c.Nk = 16; c.D = 8;
    dilattn_plan plan = make_plan(c, DILATTN_BACKEND_AUTO, 0);
    dilattn_backend chosen = DILATTN_BACKEND_REF;
    CPU_CHECK_OK(dilattn_plan_backend(plan, &chosen), "auto_is_cpu");
    if (chosen != DILATTN_BACKEND_CPU) {
      std::fprintf(stderr, "FAILED: AUTO resolved to %s without a GPU, want cpu\n",
                   dilattn_backend_name(chosen));
      ++failure_count();
    }
    dilattn_plan_destroy(plan);
  }
  std::printf("%s\n", failure_count() ? "FAILED" : "ok");
  return failure_count() != 0;
}
