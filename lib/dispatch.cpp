// dispatch.cpp - dilattn_forward / dilattn_backward, their _on_stream, _ex and _on_stream_ex
// twins: check every tensor against the plan (SPEC 7: nothing is written on error), find the
// workspace, run the plan's backend (with the call's progress callback, SPEC 14.11), give a
// pool workspace back once the backend's work on it is done.
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "call_options.h"
#include "errors.h"
#include "handles.h"
#include "pool_internal.h"
#include "staged_outputs.h"
#include "tensor_checks.h"

using dilattn::set_error;

namespace {

struct Check {
  const dilattn_tensor* t;
  const char* name;
  dilattn::TensorRole role;
  dilattn::TensorUse use;
};

dilattn_status check_all(const dilattn::Problem& p, std::initializer_list<Check> checks) {
  for (const Check& c : checks) {
    dilattn_status s = dilattn::check_tensor(p, c.t, c.name, c.role, c.use);
    if (s != DILATTN_SUCCESS) return s;
  }
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- stream-ordered release
// A device backend may return before its kernels are done with a pool workspace: on a
// caller's stream always, and on an error after some launches even in a synchronous call. Such
// a block goes back to its pool only once the stream has passed the call's work: the backend's
// after_work marks the record done from the stream (a CUDA host function, which must not call
// the runtime or wait on the pool's lock), and the next call on any thread, or this one when
// the work is already done, or dilattn_plan_destroy, gives every done block back. Checked by
// tests/kernels/test_launch_stream.cpp (the emulator's deferred streams).
struct PendingRelease {
  dilattn_pool pool;
  void* ptr;
  std::atomic<bool> done{false};
};

std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::vector<PendingRelease*>& pending_releases() {  // guarded by pending_mutex()
  static std::vector<PendingRelease*> v;
  return v;
}
void mark_done(void* record) { static_cast<PendingRelease*>(record)->done.store(true); }

// Gives back every block whose work is done (dilattn::release_finished_workspaces).
void release_finished_blocks() {
  std::vector<PendingRelease*> finished;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    std::vector<PendingRelease*>& all = pending_releases();
    for (size_t i = 0; i < all.size();) {
      if (all[i]->done.load()) {
        finished.push_back(all[i]);
        all[i] = all.back();
        all.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (PendingRelease* r : finished) {
    dilattn::pool_release(r->pool, r->ptr);
    delete r;
  }
}

// The caller's workspace, or a block of the plan's pool (problem.pool, else the default pool
// of the backend's device: pool_internal.h) for this call, given back when the call's work is
// done (at once for CPU backends). A host workspace the default pool cannot serve falls back
// to malloc, so a plan never fails because a default pool is small. A backend always receives a
// workspace that starts on a kWorkspaceAlignment (256-byte) boundary (SPEC 14.6): device
// backends carve it into f64 and 16-byte-copied regions, and a caller's pointer may be
// anywhere. The plan's sizes include the 255 bytes that may be skipped (plan.cpp).
// Checked by tests/pool/test_pool_workspace.cpp and tests/errors/test_workspace_argument.cpp.
void* align_up(void* ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  constexpr uintptr_t align = dilattn::kWorkspaceAlignment;
  return reinterpret_cast<void*>((address + align - 1) / align * align);
}

class Workspace {
 public:
  dilattn_status acquire(const dilattn::Problem& p, dilattn_device_type device,
                         int32_t device_index, void* given, size_t given_bytes, size_t needed) {
    if (needed == 0) return DILATTN_SUCCESS;
    if (given != nullptr) {
      // The backend starts at the caller's first 256-byte boundary, so the bytes before it
      // do not count.
      void* start = align_up(given);
      const size_t skipped = static_cast<size_t>(static_cast<char*>(start) - static_cast<char*>(given));
      const size_t backend_bytes = needed - (dilattn::kWorkspaceAlignment - 1);
      if (given_bytes < backend_bytes || given_bytes - backend_bytes < skipped)
        return set_error(DILATTN_ERROR_WORKSPACE_TOO_SMALL,
                         "argument 'workspace_bytes' = %zu: the plan needs %zu "
                         "(dilattn_plan_workspace_size), or %zu from the workspace's first "
                         "256-byte boundary, which is %zu bytes after its start",
                         given_bytes, needed, backend_bytes, skipped);
      ptr_ = start;
      return DILATTN_SUCCESS;
    }
    dilattn_status s;
    dilattn_pool pool = p.pool;
    if (pool != nullptr) {  // the caller's pool: its failures are the caller's to see
      dilattn_device_type pool_device;
      int32_t pool_index;
      if ((s = dilattn::pool_device(pool, &pool_device, &pool_index)) != DILATTN_SUCCESS) return s;
      if (pool_device != device || (device == DILATTN_DEVICE_CUDA && pool_index != device_index))
        return set_error(DILATTN_ERROR_DEVICE_MISMATCH,
                         "the plan's pool is on %s device %d; the workspace must be on %s device %d",
                         pool_device == DILATTN_DEVICE_CUDA ? "CUDA" : "host",
                         static_cast<int>(pool_index),
                         device == DILATTN_DEVICE_CUDA ? "CUDA" : "host",
                         static_cast<int>(device_index));
      if ((s = dilattn::pool_allocate(pool, needed, &ptr_)) != DILATTN_SUCCESS) return s;
      pool_ = pool;
      return DILATTN_SUCCESS;
    }
    // A host workspace larger than the default arena (the reference backward's f64 gradients)
    // is a one-off malloc: growing the default pool for it would keep that memory until exit.
    // Device workspaces always use the pool: cudaMalloc is slow and synchronising.
    const bool host_one_off = device == DILATTN_DEVICE_CPU && needed > dilattn::kDefaultHostArenaBytes;
    if (!host_one_off) {
      s = dilattn::default_pool(device, device_index, &pool);
      if (s == DILATTN_SUCCESS) s = dilattn::pool_allocate(pool, needed, &ptr_);
      if (s == DILATTN_SUCCESS) {
        pool_ = pool;
        return DILATTN_SUCCESS;
      }
      if (device == DILATTN_DEVICE_CUDA) return s;
      dilattn::clear_error();  // the host fallback below replaces the pool's failure
    }
    owned_.reset(std::malloc(needed));  // with the plan's slack for the alignment below
    if (!owned_)
      return set_error(DILATTN_ERROR_OUT_OF_MEMORY, "workspace of %zu bytes: allocation failed",
                       needed);
    ptr_ = align_up(owned_.get());
    return DILATTN_SUCCESS;
  }
  void* get() const { return ptr_; }
  bool from_pool() const { return pool_ != nullptr; }
  // After the backend returned: a pool block goes back now when the backend's work is over
  // (a CPU backend, or a synchronous call that succeeded), else once the stream passed it.
  void finish(const dilattn::Backend& backend, int32_t device_index,
              const dilattn::StreamArgs& run, dilattn_status status) {
    if (pool_ == nullptr) return;
    if (backend.after_work != nullptr && !(run.synchronous && status == DILATTN_SUCCESS)) {
      auto* record = new PendingRelease{pool_, ptr_};
      {
        std::lock_guard<std::mutex> lock(pending_mutex());
        pending_releases().push_back(record);
      }
      backend.after_work(device_index, run.stream, mark_done, record);
    } else {
      dilattn::pool_release(pool_, ptr_);
    }
    pool_ = nullptr;
    release_finished_blocks();
  }
  ~Workspace() {  // only on a path that never reached the backend
    if (pool_ != nullptr) dilattn::pool_release(pool_, ptr_);
  }

 private:
  struct Free { void operator()(void* p) const { std::free(p); } };
  std::unique_ptr<void, Free> owned_;
  dilattn_pool pool_ = nullptr;
  void* ptr_ = nullptr;
};

// ---------------------------------------------------------------- progress (SPEC 14.11)
// The outputs a backend writes, as the places in its arguments that point to them, so that a
// backend reporting progress can be handed host copies instead.
struct Outputs {
  std::initializer_list<const dilattn_tensor**> tensors;
  double** d_sinks;  // null for the forward
  int64_t sink_count;
};

// Runs work(progress) with the call's callback, if any. A backend that reports progress
// (ref, cpu) gets a Progress and host copies of its outputs, which reach the outputs only when
// it finished uncancelled; for the others this reports before the work (where a cancel stops
// the call before anything runs) and after it. Without a callback: work(nullptr), nothing else.
template <class Work>
dilattn_status run_with_progress(const dilattn::Backend& backend, dilattn::ProgressCall callback,
                                 Outputs outputs, Work&& work) {
  if (callback.fn == nullptr) return work(nullptr);
  dilattn::Progress progress(callback.fn, callback.user);
  if (!backend.reports_progress) {
    progress.begin(1);
    if (progress.cancelled())
      return set_error(DILATTN_ERROR_CANCELLED,
                       "the progress callback returned non-zero before the work began: nothing "
                       "was launched, the outputs are untouched");
    const dilattn_status s = work(nullptr);
    if (s == DILATTN_SUCCESS) progress.finish();
    return s;
  }
  dilattn::StagedOutputs staged;
  dilattn_status s = DILATTN_SUCCESS;
  for (const dilattn_tensor** view : outputs.tensors)
    if ((s = staged.stage(view)) != DILATTN_SUCCESS) return s;
  if (outputs.d_sinks != nullptr &&
      (s = staged.stage(outputs.d_sinks, outputs.sink_count)) != DILATTN_SUCCESS)
    return s;
  if ((s = work(&progress)) != DILATTN_SUCCESS) return s;
  if (progress.cancelled())
    return set_error(DILATTN_ERROR_CANCELLED,
                     "the progress callback returned non-zero: the call stopped, the outputs "
                     "are untouched");
  staged.commit();
  progress.finish();
  return DILATTN_SUCCESS;
}

dilattn::StreamArgs synchronous_call() { return dilattn::StreamArgs{nullptr, true, false}; }

// The stream a dilattn_*_on_stream call was given (`given`), or none for a plain call.
struct CallerStream {
  bool given;
  void* stream;
};
// How the backend runs the call: on the caller's stream where it runs on that stream, else as
// the plain call (a CPU backend, dilattn.h: it ignores the stream and never reads its value).
dilattn::StreamArgs stream_args(const dilattn::Backend& backend, CallerStream caller) {
  if (!caller.given || backend.runs_on_stream == nullptr || !backend.runs_on_stream(caller.stream))
    return synchronous_call();
  return dilattn::StreamArgs{caller.stream, false, false};
}

// What a call carries besides its tensors (dilattn_call_options, SPEC 11.2, 10.3, 14.11), read
// after the plan handle is checked.
struct CallExtras {
  dilattn::DropoutCall dropout;
  dilattn::SinksCall sinks;
  dilattn::ProgressCall progress;
};

dilattn_status read_call(dilattn_plan plan, const dilattn_call_options* options, const char* entry,
                         bool backward, CallExtras* extras) {
  const dilattn_status s = dilattn::check_handle(plan, "plan");
  if (s != DILATTN_SUCCESS) return s;
  return dilattn::read_call_options(plan->problem, options, entry, backward, &extras->dropout,
                                    &extras->sinks, &extras->progress);
}

// Both directions once their tensors are checked: gives back finished workspaces, takes this
// call's (`needed` bytes), runs work(workspace, stream arguments) and hands the workspace back
// when the backend's work on it is done.
template <class Work>
dilattn_status run_on_backend(dilattn_plan plan, CallerStream caller, int32_t device_index,
                              void* workspace, size_t workspace_bytes, size_t needed,
                              Work&& work) {
  release_finished_blocks();
  dilattn::StreamArgs run = stream_args(*plan->backend, caller);
  Workspace ws;
  dilattn_status s = ws.acquire(plan->problem, plan->backend->device, device_index, workspace,
                                workspace_bytes, needed);
  if (s != DILATTN_SUCCESS) return s;
  run.workspace_from_pool = ws.from_pool();
  s = work(ws.get(), run);
  ws.finish(*plan->backend, device_index, run, s);
  return s;
}

dilattn_status run_forward(dilattn_plan plan, CallerStream caller, const dilattn_tensor* q,
                           const dilattn_tensor* k, const dilattn_tensor* v,
                           const dilattn_tensor* o, const dilattn_tensor* lse,
                           const dilattn_call_options* options, const char* entry,
                           void* workspace, size_t workspace_bytes) {
  using dilattn::TensorRole;
  constexpr dilattn::TensorUse in = dilattn::TensorUse::read, out = dilattn::TensorUse::written;
  CallExtras extras;
  dilattn_status s = read_call(plan, options, entry, false, &extras);
  if (s != DILATTN_SUCCESS) return s;
  const dilattn::Problem& p = plan->problem;
  s = check_all(p, {{q, "q", TensorRole::q, in}, {k, "k", TensorRole::kv, in},
                    {v, "v", TensorRole::kv, in}, {o, "o", TensorRole::o, out}});
  if (s != DILATTN_SUCCESS) return s;
  if (lse != nullptr &&
      (s = dilattn::check_tensor(p, lse, "lse", TensorRole::lse, out)) != DILATTN_SUCCESS)
    return s;
  return run_on_backend(
      plan, caller, q->device_index, workspace, workspace_bytes, plan->workspace.forward,
      [&](void* ws, dilattn::StreamArgs run) {
        dilattn::ForwardArgs args{q, k, v, o, lse, ws, run, extras.dropout, extras.sinks};
        return run_with_progress(*plan->backend, extras.progress,
                                 Outputs{{&args.o, &args.lse}, nullptr, 0},
                                 [&](dilattn::Progress* reporter) {
                                   args.progress = reporter;
                                   return plan->backend->forward(p, args);
                                 });
      });
}

dilattn_status run_backward(dilattn_plan plan, CallerStream caller, const dilattn_tensor* q,
                            const dilattn_tensor* k, const dilattn_tensor* v,
                            const dilattn_tensor* o, const dilattn_tensor* lse,
                            const dilattn_tensor* d_o, const dilattn_tensor* dq,
                            const dilattn_tensor* dk, const dilattn_tensor* dv,
                            const dilattn_call_options* options, const char* entry,
                            void* workspace, size_t workspace_bytes) {
  using dilattn::TensorRole;
  constexpr dilattn::TensorUse in = dilattn::TensorUse::read, out = dilattn::TensorUse::written;
  CallExtras extras;
  dilattn_status s = read_call(plan, options, entry, true, &extras);
  if (s != DILATTN_SUCCESS) return s;
  const dilattn::Problem& p = plan->problem;
  s = check_all(p, {{q, "q", TensorRole::q, in}, {k, "k", TensorRole::kv, in},
                    {v, "v", TensorRole::kv, in}, {o, "o", TensorRole::o, in},
                    {lse, "lse", TensorRole::lse, in}, {d_o, "d_o", TensorRole::o, in},
                    {dq, "dq", TensorRole::q, out}, {dk, "dk", TensorRole::kv, out},
                    {dv, "dv", TensorRole::kv, out}});
  if (s != DILATTN_SUCCESS) return s;
  return run_on_backend(
      plan, caller, q->device_index, workspace, workspace_bytes, plan->workspace.backward,
      [&](void* ws, dilattn::StreamArgs run) {
        dilattn::BackwardArgs args{q, k, v, o, lse, d_o, dq, dk, dv, ws, run, extras.dropout,
                                   extras.sinks};
        return run_with_progress(*plan->backend, extras.progress,
                                 Outputs{{&args.dq, &args.dk, &args.dv}, &args.sinks.d_values, p.H},
                                 [&](dilattn::Progress* reporter) {
                                   args.progress = reporter;
                                   return plan->backend->backward(p, args);
                                 });
      });
}

}  // namespace

namespace dilattn {
void release_finished_workspaces() { release_finished_blocks(); }
}  // namespace dilattn

extern "C" dilattn_status dilattn_forward(dilattn_plan plan, const dilattn_tensor* q,
                                          const dilattn_tensor* k, const dilattn_tensor* v,
                                          const dilattn_tensor* o, const dilattn_tensor* lse,
                                          void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_forward(plan, CallerStream{false, nullptr}, q, k, v, o, lse, nullptr,
                     "dilattn_forward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_forward_on_stream(dilattn_plan plan, void* cuda_stream,
                                                    const dilattn_tensor* q,
                                                    const dilattn_tensor* k,
                                                    const dilattn_tensor* v,
                                                    const dilattn_tensor* o,
                                                    const dilattn_tensor* lse, void* workspace,
                                                    size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_forward(plan, CallerStream{true, cuda_stream}, q, k, v, o, lse, nullptr,
                     "dilattn_forward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_backward(dilattn_plan plan, const dilattn_tensor* q,
                                           const dilattn_tensor* k, const dilattn_tensor* v,
                                           const dilattn_tensor* o, const dilattn_tensor* lse,
                                           const dilattn_tensor* d_o, const dilattn_tensor* dq,
                                           const dilattn_tensor* dk, const dilattn_tensor* dv,
                                           void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_backward(plan, CallerStream{false, nullptr}, q, k, v, o, lse, d_o, dq, dk, dv,
                      nullptr, "dilattn_backward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_backward_on_stream(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_tensor* d_o, const dilattn_tensor* dq, const dilattn_tensor* dk,
    const dilattn_tensor* dv, void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_backward(plan, CallerStream{true, cuda_stream}, q, k, v, o, lse, d_o, dq, dk, dv,
                      nullptr, "dilattn_backward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_call_options dilattn_call_options_make(void) {
  dilattn_call_options options{};
  options.struct_size = sizeof(dilattn_call_options);
  return options;
}

extern "C" dilattn_status dilattn_forward_ex(dilattn_plan plan, const dilattn_tensor* q,
                                             const dilattn_tensor* k, const dilattn_tensor* v,
                                             const dilattn_tensor* o, const dilattn_tensor* lse,
                                             const dilattn_call_options* options,
                                             void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_forward(plan, CallerStream{false, nullptr}, q, k, v, o, lse, options,
                     "dilattn_forward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_backward_ex(
    dilattn_plan plan, const dilattn_tensor* q, const dilattn_tensor* k, const dilattn_tensor* v,
    const dilattn_tensor* o, const dilattn_tensor* lse, const dilattn_tensor* d_o,
    const dilattn_tensor* dq, const dilattn_tensor* dk, const dilattn_tensor* dv,
    const dilattn_call_options* options, void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_backward(plan, CallerStream{false, nullptr}, q, k, v, o, lse, d_o, dq, dk, dv,
                      options, "dilattn_backward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_forward_on_stream_ex(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_call_options* options, void* workspace, size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_forward(plan, CallerStream{true, cuda_stream}, q, k, v, o, lse, options,
                     "dilattn_forward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_backward_on_stream_ex(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_tensor* d_o, const dilattn_tensor* dq, const dilattn_tensor* dk,
    const dilattn_tensor* dv, const dilattn_call_options* options, void* workspace,
    size_t workspace_bytes) {
  DILATTN_ABI_BEGIN
  return run_backward(plan, CallerStream{true, cuda_stream}, q, k, v, o, lse, d_o, dq, dk, dv,
                      options, "dilattn_backward", workspace, workspace_bytes);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_reference_rows(dilattn_plan plan, const dilattn_tensor* q,
                                                 const dilattn_tensor* k, const dilattn_tensor* v,
                                                 const int64_t* rows, int64_t num_rows,
                                                 double* o_rows, double* lse_rows) {
  DILATTN_ABI_BEGIN
  using dilattn::TensorRole;
  dilattn_status s = dilattn::check_handle(plan, "plan");
  if (s != DILATTN_SUCCESS) return s;
  dilattn::Problem p = plan->problem;
  // SPEC 11.2: no seed argument here, so a dropout plan is refused as by dilattn_forward.
  if (p.dropout_p > 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "the plan has dropout p = %g: dilattn_reference_rows carries no seed",
                     p.dropout_p);
  // SPEC 10.3: nor sink values.
  if (p.sinks)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "the plan has sinks: dilattn_reference_rows carries no sink values");
  if (plan->backend->device != DILATTN_DEVICE_CPU)
    return set_error(DILATTN_ERROR_DEVICE_MISMATCH,
                     "dilattn_reference_rows runs on the CPU; the plan's backend is %s",
                     plan->backend->name);
  constexpr dilattn::TensorUse in = dilattn::TensorUse::read;
  s = check_all(p, {{q, "q", TensorRole::q, in}, {k, "k", TensorRole::kv, in},
                    {v, "v", TensorRole::kv, in}});
  if (s != DILATTN_SUCCESS) return s;
  if (rows == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'rows' is NULL");
  if (o_rows == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'o_rows' is NULL");
  // SPEC 15, as for tensors: each array aligned to its element (int64, f64).
  const std::pair<const void*, const char*> arrays[] = {
      {rows, "rows"}, {o_rows, "o_rows"}, {lse_rows, "lse_rows"}};
  for (const auto& [array, name] : arrays)
    if (reinterpret_cast<uintptr_t>(array) % 8 != 0)
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "argument '%s' = %p is not aligned to its 8-byte elements", name, array);
  if (num_rows < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'num_rows' = %lld: must be >= 1",
                     static_cast<long long>(num_rows));
  for (int64_t r = 0; r < num_rows; ++r)
    if (rows[r] < 0 || rows[r] >= p.Nq)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "rows[%lld] = %lld: outside [0, %lld)",
                       static_cast<long long>(r), static_cast<long long>(rows[r]),
                       static_cast<long long>(p.Nq));
  return dilattn::ref::forward_rows(p, *q, *k, *v, rows, num_rows, o_rows, lse_rows);
  DILATTN_ABI_END
}
