// test_progress.cpp - SPEC 14.11, the progress callback of dilattn_call_options, on every
// backend of the build (ref, cpu, and emu where the SIMT emulator is built), forward and
// backward:
//   1. the calls add up: the first has done = 0, total is one value >= 1, done never decreases
//      and stays below total until the last call, which has done = total;
//   2. every call comes from the calling thread (cpu with 2 worker threads and a callback slower
//      than the 100 ms interval, so that calls happen while a helper works: never a helper);
//   3. a callback changes no bit of any output (O, LSE, dQ, dK, dV, d_sinks), contiguous or
//      strided (a permuted layout with padding, whose unused elements stay as they were);
//   4. a cancel at the first call returns DILATTN_ERROR_CANCELLED with every output byte as it
//      was, and no call follows it; on ref and cpu a cancel in the middle of the work does the
//      same (the callback sleeps past the 100 ms interval, so the next work item reports);
//   5. a second-version dilattn_call_options (struct_size up to d_sinks) reads as no callback,
//      and the ring's calls refuse one.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "../common/attention_run.h"
#include "dilattn_ring.h"

using harness::AttentionCase;
using harness::Inputs;
using harness::Plan;
using harness::Tensor;

namespace {

// What the callback saw, and what it answers.
struct Recorder {
  std::vector<std::pair<int64_t, int64_t>> calls;  // (done, total)
  std::thread::id caller = std::this_thread::get_id();
  int64_t calls_off_the_caller = 0;
  int64_t cancel_at_call = -1;    // the index of the call that returns 1; -1: none
  bool cancel_once_started = false;  // return 1 from the first call with done > 0
  int sleep_ms = 0;                // per call, to outlast the 100 ms interval

  static int callback(void* user, int64_t done, int64_t total) {
    auto* r = static_cast<Recorder*>(user);
    if (std::this_thread::get_id() != r->caller) ++r->calls_off_the_caller;
    r->calls.emplace_back(done, total);
    if (r->sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(r->sleep_ms));
    if (static_cast<int64_t>(r->calls.size()) - 1 == r->cancel_at_call) return 1;
    return r->cancel_once_started && done > 0 ? 1 : 0;
  }
};

int never_called(void*, int64_t, int64_t) {
  CHECK_MSG(false, "a callback beyond a second-version struct_size was called");
  return 0;
}

// Property 1 for a call that finished.
void check_complete_sequence(const Recorder& r, const char* what) {
  harness::CaseScope scope(what);
  if (!CHECK(r.calls.size() >= 2)) return;
  const int64_t total = r.calls.front().second;
  CHECK(total >= 1);
  CHECK_EQ(r.calls.front().first, int64_t{0});
  for (size_t c = 0; c < r.calls.size(); ++c) {
    CHECK_EQ(r.calls[c].second, total);
    if (c > 0) CHECK(r.calls[c].first >= r.calls[c - 1].first);
    if (c + 1 < r.calls.size()) CHECK(r.calls[c].first < total);
  }
  CHECK_EQ(r.calls.back().first, total);
  CHECK_EQ(r.calls_off_the_caller, int64_t{0});
}

struct Outputs {
  Tensor o, lse, dq, dk, dv;
  std::vector<double> d_sinks;
};

// A call's outputs, every byte poisoned first (so "untouched" can be checked bitwise).
Outputs poisoned_outputs(const AttentionCase& c, dilattn_backend backend) {
  const dilattn_dtype lse_dtype = harness::lse_dtype_of(backend, c.dtype);
  const harness::Layout l = c.output_layout;
  Outputs out{c.q_like(c.dtype, l), c.lse_like(lse_dtype), c.q_like(c.dtype, l),
              c.kv_like(c.dtype, l), c.kv_like(c.dtype, l),
              std::vector<double>(static_cast<size_t>(c.H), 0.0)};
  for (Tensor* t : {&out.o, &out.lse, &out.dq, &out.dk, &out.dv}) t->poison();
  std::memset(out.d_sinks.data(), 0x7f, out.d_sinks.size() * sizeof(double));
  return out;
}

bool d_sinks_poisoned(const Outputs& out) {
  std::vector<double> poison(out.d_sinks.size());
  std::memset(poison.data(), 0x7f, poison.size() * sizeof(double));
  return std::memcmp(poison.data(), out.d_sinks.data(), poison.size() * sizeof(double)) == 0;
}

std::vector<double> sink_values(const AttentionCase& c) {
  std::vector<double> v(static_cast<size_t>(c.H));
  for (size_t h = 0; h < v.size(); ++h) v[h] = 0.25 * static_cast<double>(h) - 0.5;
  return v;
}

// The call options of a case: the sinks where the plan has them, the recorder's callback where
// one is given.
dilattn_call_options options_for(const AttentionCase& c, const std::vector<double>& sinks,
                                 Outputs* out, Recorder* recorder) {
  dilattn_call_options options = dilattn_call_options_make();
  if (c.sinks) {
    options.sinks = sinks.data();
    options.d_sinks = out->d_sinks.data();
  }
  if (recorder != nullptr) {
    options.progress = Recorder::callback;
    options.progress_user = recorder;
  }
  return options;
}

dilattn_status forward(const Plan& plan, const Inputs& in, Outputs* out,
                       const dilattn_call_options& options) {
  return dilattn_forward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(), &out->o.view(),
                            &out->lse.view(), &options, nullptr, 0);
}

dilattn_status backward(const Plan& plan, const Inputs& in, const Outputs& fwd, Outputs* out,
                        const dilattn_call_options& options) {
  return dilattn_backward_ex(plan.get(), &in.q.view(), &in.k.view(), &in.v.view(),
                             &fwd.o.view(), &fwd.lse.view(), &in.d_o.view(), &out->dq.view(),
                             &out->dk.view(), &out->dv.view(), &options, nullptr, 0);
}

// Properties 1 to 4 for one case on one backend.
void check_backend(const AttentionCase& c, dilattn_backend backend, int32_t threads) {
  harness::CaseScope scope(c.name + " on " + dilattn_backend_name(backend));
  Plan plan;
  if (!CHECK_OK(plan.create(c, backend, threads))) return;
  const Inputs in = harness::make_inputs(c, 17, 2.0);
  const std::vector<double> sinks = sink_values(c);
  const bool reports_while_working = backend == DILATTN_BACKEND_REF || backend == DILATTN_BACKEND_CPU;

  // Without a callback: the outputs every other run is compared with.
  Outputs plain = poisoned_outputs(c, backend);
  CHECK_OK(forward(plan, in, &plain, options_for(c, sinks, &plain, nullptr)));
  CHECK_OK(backward(plan, in, plain, &plain, options_for(c, sinks, &plain, nullptr)));

  // With a callback that lets the call finish: the same bits, a complete sequence of calls.
  Outputs watched = poisoned_outputs(c, backend);
  Recorder fwd_calls, bwd_calls;
  CHECK_OK(forward(plan, in, &watched, options_for(c, sinks, &watched, &fwd_calls)));
  CHECK_OK(backward(plan, in, plain, &watched, options_for(c, sinks, &watched, &bwd_calls)));
  check_complete_sequence(fwd_calls, "forward calls");
  check_complete_sequence(bwd_calls, "backward calls");
  if (!reports_while_working) {  // cuda and emu: before and after the work (SPEC 14.11)
    CHECK_EQ(fwd_calls.calls.size(), size_t{2});
    CHECK_EQ(bwd_calls.calls.size(), size_t{2});
  }
  CHECK(watched.o.bytes() == plain.o.bytes());
  CHECK(watched.lse.bytes() == plain.lse.bytes());
  CHECK(watched.dq.bytes() == plain.dq.bytes());
  CHECK(watched.dk.bytes() == plain.dk.bytes());
  CHECK(watched.dv.bytes() == plain.dv.bytes());
  CHECK(std::memcmp(watched.d_sinks.data(), plain.d_sinks.data(),
                    watched.d_sinks.size() * sizeof(double)) == 0);

  // Cancelled at the first call: nothing written, nothing called after it.
  Outputs stopped = poisoned_outputs(c, backend);
  Recorder at_start;
  at_start.cancel_at_call = 0;
  CHECK_ERROR(forward(plan, in, &stopped, options_for(c, sinks, &stopped, &at_start)),
              DILATTN_ERROR_CANCELLED, "untouched");
  CHECK_EQ(at_start.calls.size(), size_t{1});
  at_start.calls.clear();
  CHECK_ERROR(backward(plan, in, plain, &stopped, options_for(c, sinks, &stopped, &at_start)),
              DILATTN_ERROR_CANCELLED, "untouched");
  CHECK_EQ(at_start.calls.size(), size_t{1});
  for (const Tensor* t : {&stopped.o, &stopped.lse, &stopped.dq, &stopped.dk, &stopped.dv})
    CHECK(t->is_poisoned());
  CHECK(d_sinks_poisoned(stopped));
  if (!reports_while_working) return;

  // A callback slower than the interval: every work item of the calling thread reports, while
  // helper threads work on; still every call on the calling thread, still the same bits.
  if (threads > 1) {
    Outputs slow = poisoned_outputs(c, backend);
    Recorder slow_fwd, slow_bwd;
    slow_fwd.sleep_ms = slow_bwd.sleep_ms = 110;
    CHECK_OK(forward(plan, in, &slow, options_for(c, sinks, &slow, &slow_fwd)));
    CHECK_OK(backward(plan, in, plain, &slow, options_for(c, sinks, &slow, &slow_bwd)));
    check_complete_sequence(slow_fwd, "slow forward calls");
    check_complete_sequence(slow_bwd, "slow backward calls");
    CHECK(slow.o.bytes() == plain.o.bytes());
    CHECK(slow.dq.bytes() == plain.dq.bytes());
    CHECK(slow.dk.bytes() == plain.dk.bytes());
    return;
  }

  // Cancelled while working (one thread, so no helper finishes the work during the first
  // call): the first call after a work item (the callback outlasts the interval, so every
  // item reports) stops the call.
  for (bool is_backward : {false, true}) {
    Outputs middle = poisoned_outputs(c, backend);
    Recorder once_started;
    once_started.cancel_once_started = true;
    once_started.sleep_ms = 110;
    const dilattn_call_options options = options_for(c, sinks, &middle, &once_started);
    CHECK_ERROR(is_backward ? backward(plan, in, plain, &middle, options)
                            : forward(plan, in, &middle, options),
                DILATTN_ERROR_CANCELLED, "the call stopped");
    if (CHECK(once_started.calls.size() == 2)) {
      const int64_t done = once_started.calls[1].first, total = once_started.calls[1].second;
      CHECK_MSG(done > 0 && done < total, "cancelled at done = %lld of %lld",
                static_cast<long long>(done), static_cast<long long>(total));
    }
    CHECK_EQ(once_started.calls_off_the_caller, int64_t{0});
    for (const Tensor* t : {&middle.o, &middle.lse, &middle.dq, &middle.dk, &middle.dv})
      CHECK(t->is_poisoned());
    CHECK(d_sinks_poisoned(middle));
  }
}

AttentionCase dilated_case() {
  AttentionCase c;
  c.name = "dilated causal GQA";
  c.B = 2;
  c.Nq = c.Nk = 256;
  c.H = 4;
  c.Hkv = 2;
  c.D = 16;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {64, 128};
  c.dilations = {1, 2};
  c.causal = true;
  return c;
}

AttentionCase sinks_case() {
  AttentionCase c;
  c.name = "dense with sinks, strided outputs";
  c.output_layout = {true, 3};  // [B, H, N, D] memory with 3 unused elements after each row
  c.Nq = 96;
  c.Nk = 160;
  c.H = 2;
  c.Hkv = 1;
  c.D = 8;
  c.sinks = true;
  return c;
}

// Property 5.
void second_version_and_ring() {
  AttentionCase c;
  c.name = "second-version options";
  c.Nq = c.Nk = 32;
  c.H = 2;
  c.D = 4;
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CPU))) return;
  const Inputs in = harness::make_inputs(c, 3, 1.0);
  Outputs out = poisoned_outputs(c, DILATTN_BACKEND_CPU);
  dilattn_call_options options = dilattn_call_options_make();
  options.struct_size = offsetof(dilattn_call_options, progress);
  options.progress = never_called;
  CHECK_OK(forward(plan, in, &out, options));
  CHECK(!out.o.is_poisoned());

  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_threads(1, 10000, &comm))) return;
  Recorder recorder;
  options = options_for(c, {}, &out, &recorder);
  CHECK_ERROR(dilattn_ring_forward_ex(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &in.q.view(),
                                      &in.k.view(), &in.v.view(), &out.o.view(),
                                      &out.lse.view(), &options),
              DILATTN_ERROR_INVALID_VALUE, "takes no progress callback");
  CHECK(recorder.calls.empty());
  dilattn_comm_destroy(comm);
}

}  // namespace

int main() {
  std::vector<std::pair<dilattn_backend, int32_t>> backends = {
      {DILATTN_BACKEND_REF, 1}, {DILATTN_BACKEND_CPU, 2}, {DILATTN_BACKEND_CPU, 1}};
#ifdef DILATTN_TEST_EMU
  backends.emplace_back(DILATTN_BACKEND_EMU, 1);
#endif
  for (const auto& [backend, threads] : backends)
    for (const AttentionCase& c : {dilated_case(), sinks_case()}) check_backend(c, backend, threads);
  second_version_and_ring();
  return harness::finish("progress");
}
