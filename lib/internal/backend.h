// backend.h - the interface between the plan (plan.cpp, dispatch.cpp) and each backend.
//
// dispatch.cpp has validated every tensor against the plan before a backend runs (SPEC 7), so a
// backend only refuses what it cannot take (DILATTN_ERROR_UNSUPPORTED, before touching memory).
#ifndef DILATTN_BACKEND_H
#define DILATTN_BACKEND_H

#include <cstddef>
#include <memory>
#include <string>

#include "dilattn.h"
#include "problem.h"
#include "progress.h"

namespace dilattn {

class RingOps;  // ring_ops.h

// Where a device backend runs a call: the caller's CUDA stream (a cudaStream_t; null = the
// legacy default stream) and whether the call waits for its work before returning
// (dilattn_forward does; dilattn_forward_on_stream does not). CPU backends ignore both: their
// calls finish before they return. workspace_from_pool: the workspace is a pool block that
// dispatch gives back after the work (Backend::after_work), which a CUDA graph capture would
// outlive, so a backend refuses it on a capturing stream.
struct StreamArgs {
  void* stream = nullptr;
  bool synchronous = true;
  bool workspace_from_pool = false;
};

// The per-call part of dropout (SPEC 11.2): what dilattn_call_options carry. Read only when the
// plan's dropout_p > 0; dispatch.cpp has checked offset < 2^32.
struct DropoutCall {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// SPEC 10.3: the sink logits of a call (H values, host memory) and where the backward writes
// their gradient (null: not wanted). Both null for a plan without sinks; dispatch.cpp has
// checked the values.
struct SinksCall {
  const double* values = nullptr;
  double* d_values = nullptr;
};

struct ForwardArgs {
  const dilattn_tensor* q;
  const dilattn_tensor* k;
  const dilattn_tensor* v;
  const dilattn_tensor* o;
  const dilattn_tensor* lse;  // may be null
  void* workspace;            // at least workspace_bytes(problem).forward bytes
  StreamArgs run;
  DropoutCall dropout = {};
  SinksCall sinks = {};
  // SPEC 14.11: the call's progress callback, null without one; read only by a backend whose
  // entry says reports_progress (the others are reported for by dispatch.cpp).
  Progress* progress = nullptr;
};

struct BackwardArgs {
  const dilattn_tensor* q;
  const dilattn_tensor* k;
  const dilattn_tensor* v;
  const dilattn_tensor* o;
  const dilattn_tensor* lse;
  const dilattn_tensor* d_o;
  const dilattn_tensor* dq;
  const dilattn_tensor* dk;
  const dilattn_tensor* dv;
  void* workspace;
  StreamArgs run;
  DropoutCall dropout = {};
  SinksCall sinks = {};
  // SPEC 14.11: the call's progress callback, null without one; read only by a backend whose
  // entry says reports_progress (the others are reported for by dispatch.cpp).
  Progress* progress = nullptr;
};

struct WorkspaceBytes {
  size_t forward = 0, backward = 0;
};

// Each backend is one entry of the table in backend_table.cpp: a name, the device its
// workspace lives on and its functions. can_run returns SUCCESS or a status with the last
// error set; forward and backward run a validated call. The last two are null for backends
// that keep nothing per plan and finish their work before returning (the CPU ones):
//   prepare     plan time, after can_run: sets p.backend_state (device copies of the mask);
//   after_work  calls release(ctx) once the work a call left on `stream` of device
//               `device_index` is done (from another thread, so release only marks; it must
//               not call the CUDA runtime).
//   ring_ops    the element work of one ring call (ring_ops.h): host loops for the CPU
//               backends, kernels on `stream` of device `device_index` for cuda and emu.
// What a backend says about itself (dilattn_build_info, dilattn_cpu_isa) also goes through its
// entry, so the library's version code knows no backend's internals; null where there is
// nothing to say:
//   code_variant   the code chosen at run time for this machine (the cpu backend's instruction
//                  set, e.g. "avx512"), or null when none could be chosen.
//   device_report  the device it found (cuda: "yes (sm_90)", or why it is not used).
//   narrower_compute  which input dtypes it computes in a narrower type, so that
//                  dilattn_build_info says so (SPEC 12: never silently); null: none.
// And how it takes a caller's stream:
//   runs_on_stream  whether a dilattn_*_on_stream call given `stream` runs on it; null or
//                   false: the call runs as the plain one does, finishing before it returns,
//                   and the value is never read (dilattn.h: CPU backends ignore the stream).
//                   cuda: every stream; emu: only a stream the SIMT emulator made (tests/kernels).
// And progress (SPEC 14.11):
//   reports_progress  the backend itself reports a call's progress through args.progress and
//                     stops when it is cancelled (ref, cpu); its outputs are a host copy
//                     (dispatch.cpp) while it works. false: dispatch.cpp reports before and
//                     after the backend's work (cuda, emu).
struct Backend {
  dilattn_backend id;
  const char* name;
  dilattn_device_type device;  // where its tensors and workspace live
  dilattn_status (*can_run)(const Problem& p);
  WorkspaceBytes (*workspace_bytes)(const Problem& p);
  dilattn_status (*forward)(const Problem& p, const ForwardArgs& a);
  dilattn_status (*backward)(const Problem& p, const BackwardArgs& a);
  dilattn_status (*prepare)(Problem& p);
  void (*after_work)(int32_t device_index, void* stream, void (*release)(void*), void* ctx);
  dilattn_status (*ring_ops)(int32_t device_index, void* stream, std::unique_ptr<RingOps>* ops);
  const char* (*code_variant)();
  std::string (*device_report)();
  bool (*runs_on_stream)(void* stream);
  const char* narrower_compute;
  uint32_t runs_options;  // the ProblemOption bits (SPEC 10, 11) it computes; the rest refused
  bool reports_progress;
};

// The entry of a concrete backend (never AUTO), or null for a value that names none.
const Backend* find_backend(int32_t id);
// Whether backend b can run p: its can_run, after the refusal of any SPEC 10 or 11 option
// outside b.runs_options, so no backend's own can_run repeats it. plan.cpp and resolve_auto_backend ask a backend through this.
dilattn_status backend_can_run(const Backend& b, const Problem& p);
// AUTO: the first backend, in the table's order of preference, that can run the problem; a
// backend refusing with INVALID_VALUE (a bad setting) makes AUTO fail with its status.
dilattn_status resolve_auto_backend(const Problem& p, const Backend** chosen);

// The functions behind the entries.
// The ring's host loops, for every backend whose tensors live in host memory (ref, cpu).
dilattn_status make_host_ring_ops(int32_t device_index, void* stream, std::unique_ptr<RingOps>* ops);

namespace ref {
WorkspaceBytes workspace_bytes(const Problem& p);
dilattn_status forward(const Problem& p, const ForwardArgs& a);
dilattn_status backward(const Problem& p, const BackwardArgs& a);
// Only query rows rows[0..num_rows): o_rows [B, num_rows, H, D], lse_rows [B, H, num_rows],
// both f64 contiguous (lse_rows may be null). Rows are checked in [0, Nq) by the caller.
dilattn_status forward_rows(const Problem& p, const dilattn_tensor& q, const dilattn_tensor& k,
                            const dilattn_tensor& v, const int64_t* rows, int64_t num_rows,
                            double* o_rows, double* lse_rows);
// The number of score terms of the problem (reference_key_sets.h).
int64_t score_count(const Problem& p);
}  // namespace ref

namespace cpu {
dilattn_status can_run(const Problem& p);
WorkspaceBytes workspace_bytes(const Problem& p);
dilattn_status forward(const Problem& p, const ForwardArgs& a);
dilattn_status backward(const Problem& p, const BackwardArgs& a);
// The instruction set chosen for this process ("avx512", "avx2", ...), null when none fits.
const char* isa_name();
}  // namespace cpu

// The CUDA backend: the launchers (cuda/launch.cu, cuda/launch_backward.cu) and their kernel
// files, each built twice, by nvcc into namespace cuda (kernels on a GPU) and by the host
// compiler with the SIMT emulator into namespace emu (the same kernels executed on the CPU).
// A build without one gets its stub (cuda/cuda_backend_stub.cpp, cuda/emu_backend_stub.cpp).
// device_report: the "GPU present" line of dilattn_build_info, e.g. "yes (sm_75), no kernel
// image for it: cuda not used".
namespace cuda {
dilattn_status can_run(const Problem& p);
WorkspaceBytes workspace_bytes(const Problem& p);
dilattn_status forward(const Problem& p, const ForwardArgs& a);
dilattn_status backward(const Problem& p, const BackwardArgs& a);
dilattn_status prepare(Problem& p);
void after_work(int32_t device_index, void* stream, void (*release)(void*), void* ctx);
std::string device_report();
// The ring's element work as kernels on `stream` (cuda/ring_ops.cu).
dilattn_status make_ring_ops(int32_t device_index, void* stream, std::unique_ptr<RingOps>* ops);
}  // namespace cuda

namespace emu {
dilattn_status can_run(const Problem& p);
WorkspaceBytes workspace_bytes(const Problem& p);
dilattn_status forward(const Problem& p, const ForwardArgs& a);
dilattn_status backward(const Problem& p, const BackwardArgs& a);
dilattn_status prepare(Problem& p);
void after_work(int32_t device_index, void* stream, void (*release)(void*), void* ctx);
std::string device_report();
// The ring's element work as kernels on `stream` (cuda/ring_ops.cu).
dilattn_status make_ring_ops(int32_t device_index, void* stream, std::unique_ptr<RingOps>* ops);
// True only for a stream the SIMT emulator made (cuda/emu_streams.cpp).
bool runs_on_stream(void* stream);
}  // namespace emu

}  // namespace dilattn

#endif  // DILATTN_BACKEND_H
