// kernel_case.h - the kernel tests' layer over the common harness (tests/common/): an
// AttentionCase run on the CUDA backend's kernels, on the backend DILATTN_TEST_BACKEND names
// (tests/common/test_backend.h), each run repeated and the repeats compared bit for bit:
//   emu:  the SIMT emulator, in its ascending, descending and shuffled thread orders (a race, or
//         a sum whose order depends on the thread order, shows as a difference);
//   cuda: the GPU, twice: once with the plain call, once on a stream of the test's own
//         (gpu_run.h), so the second run also checks the on-stream path (SPEC 6's determinism
//         on hardware).
// Cases, inputs, runs and checks are the harness's; only the repeats are added here. The
// callers hold a harness::CaseScope, so a failed check names the case.
#ifndef DILATTN_TESTS_KERNEL_CASE_H
#define DILATTN_TESTS_KERNEL_CASE_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "../common/attention_run.h"
#include "../common/check.h"
#include "../common/compare.h"
#include "../common/fill.h"
#include "../common/test_backend.h"
#include "../common/thread_orders.h"
#include "gpu_run.h"
#include "simt.h"

namespace kcase {

// The kernel a test binary runs, its one argument: simt, mma or mma_tf32; else it prints the
// usage and returns nullptr (the test then exits 2).
inline const char* kernel_argument(int argc, char** argv) {
  const char* kernel = argc == 2 ? argv[1] : "";
  for (const char* known : {"simt", "mma", "mma_tf32", "wgmma"})
    if (std::strcmp(kernel, known) == 0) return known;
  std::fprintf(stderr, "usage: %s simt|mma|mma_tf32|wgmma\n", argc > 0 ? argv[0] : "test");
  return nullptr;
}

// The dtypes a kernel takes (cuda/kernel_choice.h): mma and wgmma f16 and bf16, mma_tf32 f32,
// SIMT all three.
inline std::vector<dilattn_dtype> dtypes_of(const std::string& kernel) {
  if (kernel == "mma" || kernel == "wgmma") return {DILATTN_F16, DILATTN_BF16};
  if (kernel == "mma_tf32") return {DILATTN_F32};
  return {DILATTN_F32, DILATTN_F16, DILATTN_BF16};
}

// Whether DILATTN_TEST_CASES (a comma list) names the case `name`, by the part after its last
// '/'; every case is named when it is unset or empty. For slow runs such as compute-sanitizer
// (bench/gpu/first_light.sh); a filter that keeps nothing fails the test (check.h: no check
// ran).
inline bool case_asked_for(const std::string& name) {
  const char* list = std::getenv("DILATTN_TEST_CASES");
  if (list == nullptr || list[0] == '\0') return true;
  const std::string names = std::string(",") + list + ",";
  return names.find("," + name.substr(name.rfind('/') + 1) + ",") != std::string::npos;
}

// A block-sparse mask of explicit BSR arrays (c.mask.bq, bk and heads already set): each row
// block lists key block 0 (a sink) and the two key blocks around its first row, shifted by
// h * shift rows for head h; row block `empty_row` lists nothing (SPEC 2: its rows are empty).
inline void local_sink_mask(harness::AttentionCase& c, int64_t empty_row, int64_t shift) {
  harness::MaskSpec& m = c.mask;
  const int64_t I = (c.Nq + m.bq - 1) / m.bq, J = (c.Nk + m.bk - 1) / m.bk;
  m.head_ptr.push_back(0);
  for (int64_t h = 0; h < m.heads; ++h) {
    const size_t head_start = m.col_idx.size();
    m.row_ptr.push_back(0);
    for (int64_t ib = 0; ib < I; ++ib) {
      if (ib != empty_row) {
        const int64_t centre = (ib * m.bq + h * shift) / m.bk;  // key block at the row's start
        for (int64_t jb = 0; jb < J; ++jb)
          if (jb == 0 || jb == centre - 1 || jb == centre) m.col_idx.push_back(jb);
      }
      m.row_ptr.push_back(static_cast<int64_t>(m.col_idx.size() - head_start));
    }
    m.head_ptr.push_back(static_cast<int64_t>(m.col_idx.size()));
  }
}

// Q, K, V (and dO) of the case in its dtype and input layout, uniform in [-2, 2), each from its
// own seed (1, 2, 3, 4), so each tensor's values do not depend on the others' sizes.
inline harness::Inputs random_inputs(const harness::AttentionCase& c) {
  harness::Inputs in{c.q_like(c.dtype, c.input_layout), c.kv_like(c.dtype, c.input_layout),
                     c.kv_like(c.dtype, c.input_layout), c.q_like(c.dtype, c.input_layout)};
  harness::Tensor* tensors[4] = {&in.q, &in.k, &in.v, &in.d_o};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    harness::SplitMix64 rng(seed);
    harness::fill_uniform(*tensors[seed - 1], rng, -2.0, 2.0);
  }
  return in;
}

// Every byte of the tensors, padding included (each run poisons it the same way).
inline std::vector<unsigned char> bytes_of(std::initializer_list<const harness::Tensor*> ts) {
  std::vector<unsigned char> out;
  for (const harness::Tensor* t : ts) out.insert(out.end(), t->bytes().begin(), t->bytes().end());
  return out;
}

// The three thread orders, the ascending one first; the shuffled one with a fixed seed. The
// ascending one alone with DILATTN_TEST_ONE_THREAD_ORDER=1 (../common/thread_orders.h).
template <class Run>
void in_thread_orders(Run run) {
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::ascending);
    run();
  }
  if (!harness::every_thread_order()) return;
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::descending);
    run();
  }
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::shuffled, 12345);
    run();
  }
}

// The case's forward on `backend`: emu in the three thread orders, cuda twice (plain call,
// then the test's own stream).
inline harness::Forward run_forward_on(const harness::AttentionCase& c, const harness::Inputs& in,
                                       dilattn_backend backend, int repeat) {
  if (backend == DILATTN_BACKEND_CUDA) return kgpu::run_forward(c, in, repeat == 1);
  return harness::run_forward(c, in, backend);
}

// The repeats of a case on `backend`: the three thread orders on emu, two runs on cuda.
template <class Run>
void repeated(dilattn_backend backend, Run run) {
  if (backend == DILATTN_BACKEND_CUDA) {
    run(0);
    run(1);
  } else {
    in_thread_orders([&] { run(0); });
  }
}

// The case's forward repeated on `backend`; returns the first run and checks that the others
// give the same O and LSE bits.
inline harness::Forward run_forward_repeated(const harness::AttentionCase& c,
                                             const harness::Inputs& in, dilattn_backend backend) {
  std::vector<harness::Forward> runs;
  repeated(backend, [&](int r) { runs.push_back(run_forward_on(c, in, backend, r)); });
  const std::vector<unsigned char> first = bytes_of({&runs[0].o, &runs[0].lse});
  for (size_t r = 1; r < runs.size(); ++r)
    CHECK_MSG(bytes_of({&runs[r].o, &runs[r].lse}) == first,
              "%s run %zu gives other O/LSE bits than the first", dilattn_backend_name(backend),
              r);
  return runs[0];
}

// The case's forward and then its backward on `backend` from that forward's own O and LSE (as
// a training step would); on cuda, repeat 1 runs both on the test's own stream.
inline harness::Gradients run_forward_backward(const harness::AttentionCase& c,
                                               const harness::Inputs& in,
                                               dilattn_backend backend, int repeat = 0) {
  const harness::Forward fwd = run_forward_on(c, in, backend, repeat);
  if (backend == DILATTN_BACKEND_CUDA) return kgpu::run_backward(c, in, fwd, repeat == 1);
  return harness::run_backward(c, in, fwd, backend);
}

// run_forward_backward repeated on `backend`; returns the first run and checks that the others
// give the same dQ, dK, dV bits (SPEC 6's determinism).
inline harness::Gradients run_backward_repeated(const harness::AttentionCase& c,
                                                const harness::Inputs& in,
                                                dilattn_backend backend) {
  std::vector<harness::Gradients> runs;
  repeated(backend, [&](int r) { runs.push_back(run_forward_backward(c, in, backend, r)); });
  const std::vector<unsigned char> first = bytes_of({&runs[0].dq, &runs[0].dk, &runs[0].dv});
  for (size_t r = 1; r < runs.size(); ++r)
    CHECK_MSG(bytes_of({&runs[r].dq, &runs[r].dk, &runs[r].dv}) == first,
              "%s run %zu gives other gradient bits than the first", dilattn_backend_name(backend),
              r);
  return runs[0];
}

// A case's outputs through the _ex calls: O and LSE of the forward, dQ, dK, dV of the backward
// from that forward, and the sinks' gradient (H values when c.sinks).
struct OptionOutputs {
  harness::Tensor o, lse, dq, dk, dv;
  std::vector<double> d_sinks;
};

// Forward, then backward from that forward's O and LSE, on `backend`, through
// dilattn_forward_ex / dilattn_backward_ex with `options` (null: no options; with c.sinks its
// sinks and a d_sinks of the outputs' are set here); on cuda with device copies (gpu_run.h).
inline OptionOutputs run_with_options(const harness::AttentionCase& c, const harness::Inputs& in,
                                      dilattn_backend backend,
                                      const dilattn_call_options* options,
                                      const std::vector<double>& sinks) {
  harness::CaseScope scope(c.name);
  harness::AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  const harness::Layout layout = harness::output_layout_of(c, backend);
  OptionOutputs out{c.q_like(in.q.dtype(), layout),
                    c.lse_like(harness::lse_dtype_of(backend, in.q.dtype())),
                    c.q_like(in.q.dtype(), layout), c.kv_like(in.q.dtype(), layout),
                    c.kv_like(in.q.dtype(), layout), std::vector<double>(c.sinks ? c.H : 0, NAN)};
  for (harness::Tensor* t : {&out.o, &out.lse, &out.dq, &out.dk, &out.dv}) t->poison();
  dilattn_call_options with_sinks = options != nullptr ? *options : dilattn_call_options{};
  if (options != nullptr && c.sinks) {
    with_sinks.sinks = sinks.data();
    with_sinks.d_sinks = out.d_sinks.data();
  }
  const dilattn_call_options* opts = options != nullptr ? &with_sinks : nullptr;
  if (backend == DILATTN_BACKEND_CUDA) {
    harness::Forward fwd = kgpu::run_forward(planned, in, false, opts);
    harness::Gradients grads = kgpu::run_backward(planned, in, fwd, false, opts);
    out.o = std::move(fwd.o);
    out.lse = std::move(fwd.lse);
    out.dq = std::move(grads.dq);
    out.dk = std::move(grads.dk);
    out.dv = std::move(grads.dv);
    return out;
  }
  harness::Plan plan;
  if (!CHECK_OK(plan.create(planned, backend))) return out;
  CHECK_OK(dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                              &out.o.view(), &out.lse.view(), opts, nullptr, 0));
  CHECK_OK(dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                               &out.o.view(), &out.lse.view(), &in.d_o.view(), &out.dq.view(),
                               &out.dk.view(), &out.dv.view(), opts, nullptr, 0));
  return out;
}

// Every bit of the outputs, d_sinks included, for comparing runs.
inline std::vector<unsigned char> bits_of(const OptionOutputs& r) {
  std::vector<unsigned char> b = bytes_of({&r.o, &r.lse, &r.dq, &r.dk, &r.dv});
  const unsigned char* s = reinterpret_cast<const unsigned char*>(r.d_sinks.data());
  b.insert(b.end(), s, s + r.d_sinks.size() * sizeof(double));
  return b;
}

}  // namespace kcase

#endif  // DILATTN_TESTS_KERNEL_CASE_H
