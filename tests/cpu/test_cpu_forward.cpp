// test_cpu_forward.cpp - property: the cpu backend's forward equals the f64 reference within
// SPEC 8 (O by dtype, LSE absolute 1e-4; f64 inputs, computed in f64: SPEC 12's 1e-10 for O
// and the f64 LSE) on every case of standard_cases() (dense, dilated in each head mode,
// block-sparse; odd head dims; N off every tile; GQA; causal; Nq != Nk; every dtype; permuted
// output strides), with 1 and 3 threads. Also: head_dim 257 is refused with
// DILATTN_ERROR_UNSUPPORTED, and AUTO resolves to cpu where no GPU is present.
#include "../common/attention_run.h"
#include "../common/compare.h"
#include "standard_cases.h"

using namespace harness;

int main() {
  for (const AttentionCase& c : cpucases::standard_cases()) {
    CaseScope scope(c.name);
    const Inputs in = make_inputs(c, 1, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    for (int32_t threads : {1, 3}) {
      const Forward got = run_forward(c, in, DILATTN_BACKEND_CPU, threads);
      CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
      CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse(c.dtype));
    }
  }

  {  // head_dim above the cpu backend's tile limit: refused before any memory is touched
    AttentionCase c;
    c.name = "head_dim_257_refused";
    c.Nq = c.Nk = 8; c.D = 257;
    CaseScope scope(c.name);
    Plan plan;
    CHECK_EQ(plan.create(c, DILATTN_BACKEND_CPU, 1), DILATTN_ERROR_UNSUPPORTED);
  }

  if (!dilattn_backend_available(DILATTN_BACKEND_CUDA)) {  // AUTO without a GPU is cpu
    AttentionCase c;
    c.name = "auto_is_cpu";
    c.Nq = c.Nk = 16; c.D = 8;
    CaseScope scope(c.name);
    Plan plan;
    CHECK_OK(plan.create(c, DILATTN_BACKEND_AUTO, 0));
    dilattn_backend chosen = DILATTN_BACKEND_REF;
    CHECK_OK(dilattn_plan_backend(plan.get(), &chosen));
    CHECK_MSG(chosen == DILATTN_BACKEND_CPU, "AUTO resolved to %s without a GPU, want cpu",
              dilattn_backend_name(chosen));
  }
  return finish("cpu_forward_matches_reference");
}
