// attention_run.h - runs an AttentionCase forward and backward on one backend through the
// public C ABI, into tensors the test owns.
//
// make_inputs draws Q, K, V and dO from one SplitMix64 in the case's dtype (so f16/bf16 inputs
// are already rounded when the reference reads them). run_forward / run_backward poison every
// output first (tensor.h), so an element a backend forgets to write fails any comparison. O
// and dQ, dK, dV have Q's dtype; LSE is f64 from the reference backend and for f64 inputs
// (computed in f64, SPEC 12), f32 otherwise (SPEC 1). The reference writes contiguous views; every other backend writes through
// the case's output_layout. A failed call is a failed check naming the case.
#ifndef DILATTN_TESTS_ATTENTION_RUN_H
#define DILATTN_TESTS_ATTENTION_RUN_H

#include <cstdint>
#include <memory>

#include "attention_case.h"
#include "check.h"
#include "fill.h"
#include "tensor.h"

namespace harness {

struct Inputs {
  Tensor q, k, v, d_o;
};

// Q uniform in [-q_bound, q_bound), then K, V and dO uniform in [-1, 1), in c.dtype and
// c.input_layout. A wider Q makes softmax rows far from uniform; q_bound 1 keeps every score
// O(1), so no softmax term underflows to an exact 0.
inline Inputs make_inputs(const AttentionCase& c, uint64_t seed, double q_bound) {
  SplitMix64 rng(seed);
  Inputs in{c.q_like(c.dtype, c.input_layout), c.kv_like(c.dtype, c.input_layout),
            c.kv_like(c.dtype, c.input_layout), c.q_like(c.dtype, c.input_layout)};
  fill_uniform(in.q, rng, -q_bound, q_bound);
  fill_uniform(in.k, rng, -1.0, 1.0);
  fill_uniform(in.v, rng, -1.0, 1.0);
  fill_uniform(in.d_o, rng, -1.0, 1.0);
  return in;
}

// The same inputs widened to contiguous f64 (exact), for the reference.
inline Inputs widened_to_f64(const Inputs& in) {
  return {in.q.converted(DILATTN_F64), in.k.converted(DILATTN_F64), in.v.converted(DILATTN_F64),
          in.d_o.converted(DILATTN_F64)};
}

inline dilattn_dtype lse_dtype_of(dilattn_backend backend, dilattn_dtype input) {
  return backend == DILATTN_BACKEND_REF || input == DILATTN_F64 ? DILATTN_F64 : DILATTN_F32;
}

inline Layout output_layout_of(const AttentionCase& c, dilattn_backend backend) {
  return backend == DILATTN_BACKEND_REF ? Layout{} : c.output_layout;
}

struct Forward {
  Tensor o, lse;
};

inline Forward run_forward(const AttentionCase& c, const Inputs& in, dilattn_backend backend,
                           int32_t num_threads = 0) {
  CaseScope scope(c.name);
  AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  Forward out{c.q_like(in.q.dtype(), output_layout_of(c, backend)),
              c.lse_like(lse_dtype_of(backend, in.q.dtype()))};
  out.o.poison();
  out.lse.poison();
  Plan plan;
  if (CHECK_OK(plan.create(planned, backend, num_threads)))
    CHECK_OK(dilattn_forward(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &out.o.view(),
                             &out.lse.view(), nullptr, 0));
  return out;
}

struct Gradients {
  Tensor dq, dk, dv;
};

// The backward from the given forward outputs (the same O and LSE for every backend compared).
// exact_workspace: the caller's workspace, a heap block of exactly the bytes
// dilattn_plan_workspace_size asks for (so ASan sees a backend that writes past it); else the
// library's own.
inline Gradients run_backward(const AttentionCase& c, const Inputs& in, const Forward& fwd,
                              dilattn_backend backend, int32_t num_threads = 0,
                              bool exact_workspace = false) {
  CaseScope scope(c.name);
  AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  const Layout layout = output_layout_of(c, backend);
  Gradients g{c.q_like(in.q.dtype(), layout), c.kv_like(in.q.dtype(), layout),
              c.kv_like(in.q.dtype(), layout)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  Plan plan;
  if (!CHECK_OK(plan.create(planned, backend, num_threads))) return g;
  size_t forward_bytes = 0, backward_bytes = 0;
  if (exact_workspace)
    CHECK_OK(dilattn_plan_workspace_size(plan.get(), &forward_bytes, &backward_bytes));
  std::unique_ptr<unsigned char[]> workspace(
      backward_bytes > 0 ? new unsigned char[backward_bytes] : nullptr);
  CHECK_OK(dilattn_backward(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &fwd.o.view(),
                            &fwd.lse.view(), &in.d_o.view(), &g.dq.view(), &g.dk.view(),
                            &g.dv.view(), workspace.get(), backward_bytes));
  return g;
}

}  // namespace harness

#endif  // DILATTN_TESTS_ATTENTION_RUN_H
