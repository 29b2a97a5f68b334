// launch_shared.h - what the CUDA backend's launchers share: the forward (launch.cu), the
// backward (launch_backward.cu) and the ring's element work (ring_ops.cu). Defined in
// launch_shared.cu.
//
// Every file that includes it is built twice, like the kernels: by nvcc into dilattn::cuda and
// by the host compiler with the SIMT emulator into dilattn::emu (cuda/meson.build), so both
// builds have their own copy of everything here (and of the device facts cached below).
//
//   cuda_failure, elementwise_blocks   a CUDA error as a status; a grid for an element-wise
//                                      kernel of kElementwiseThreads threads a block;
//   check_view                         a view the kernels cannot take, refused (SPEC 1);
//   DeviceGuard (nvcc only)            the tensors' GPU made current for a call;
//   DeviceInfo, device_info            a device's facts, asked once per device and process;
//   begin_call                         the start of every forward and backward call: the
//                                      device, its facts, the caller's stream;
//   run_sequences                      a packed batch's sequences, one after the other;
//   LaunchPlanState                    a plan's arrays in device memory: the block-sparse
//                                      mask, the ALiBi slopes;
//   grant_shared_memory                a kernel's dynamic shared memory limit raised, once per
//                                      device;
//   uses_variant_kernels,              whether a problem runs the kernels' variant instances
//   kernel_score_scale                 (SPEC 10.1, 10.3), and the score scale
//                                      every kernel and pre-pass of a call uses;
//   shared_params, prepare_launch      the index part of every forward and backward launch;
//   with_shared_pairs                  SPEC 3.4's shared pairs switched on where they apply;
//   rows_of_16_bytes                   whether a view's rows may be copied by cp.async.
#ifndef DILATTN_LAUNCH_SHARED_H
#define DILATTN_LAUNCH_SHARED_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attention_tile.cuh"  // ForwardParams; cuda_compat.cuh
#include "backend.h"
#include "errors.h"
#include "softmax_rules.h"  // ScoreScale

namespace dilattn {
namespace DILATTN_BACKEND_NS {

#ifdef __CUDACC__
constexpr const char* kBackendName = "cuda";
#else
constexpr const char* kBackendName = "emu";
#endif

constexpr int kElementwiseThreads = 256;

// A CUDA failure as a status; under the emulator, with its own explanation (barrier
// divergence, out-of-bounds shared access, ...).
dilattn_status cuda_failure(cudaError_t e, const char* what);

// Blocks for an element-wise kernel over n elements (grid-stride loops: at most 4096 blocks).
unsigned elementwise_blocks(int64_t n);

// SPEC 1: a backend that cannot take a view says so before touching memory: data aligned to
// its element, and for a written view no dimension of stride 0 that makes two rows one address.
dilattn_status check_view(const dilattn_tensor* t, const char* name, bool written);

#ifdef __CUDACC__
// Makes the tensors' GPU current for the launches and restores the caller's on the way out.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t select(int device) {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e != cudaSuccess || previous_ == device) return e;
    e = cudaSetDevice(device);
    changed_ = e == cudaSuccess;
    return e;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};
#endif

// ---------------------------------------------------------------- device facts
// What the launchers need of a device, asked once per device and process (a call must not
// query properties: cudaGetDeviceProperties is slow): its compute capability, its shared memory
// per block, and whether this binary has a kernel image for it (a build for sm_80 and sm_90 has
// none for sm_75, where every launch would fail; SPEC 1: refuse before touching memory).
struct DeviceInfo {
  bool usable = false;
  std::string why_not;  // when not usable: "no kernel image for it (...)"
  int major = 0, minor = 0;
  size_t smem_limit = 0;
  std::mutex granted_mutex;
  // Dynamic shared memory limits raised so far, per kernel (any kernel's type, forward or
  // backward, as a plain function pointer).
  std::vector<std::pair<void (*)(), size_t>> granted;
};

// The device's facts (device must be the current device); thread-safe.
DeviceInfo& device_info(int device);

// The device's facts in *info; DILATTN_ERROR_DEVICE_NOT_BUILT when this binary cannot run on it.
dilattn_status check_device(int device, DeviceInfo** info);

// ---------------------------------------------------------------- the start of every call
// The device a call runs on (the tensors', made current until the call returns), its cached
// facts, and the caller's stream.
struct CallDevice {
  int device = 0;
  DeviceInfo* info = nullptr;
  cudaStream_t stream = nullptr;
#ifdef __CUDACC__
  DeviceGuard guard;  // restores the caller's current device
#endif
};

// Fills *call for tensors on q's device. A capturing stream with a pool workspace is refused
// before anything is enqueued: its replays would use a block given back after the call.
dilattn_status begin_call(const dilattn_tensor& q, const StreamArgs& run, CallDevice* call);

// SPEC 10.2: a packed batch one sequence at a time, forward (launch.cu) and backward
// (launch_backward.cu): each(sequence's problem, its first row, its first key, stream) for every
// sequence in order (Problem::sequence_problem), on the call's stream with the tensors' device
// current; each runs its sequence without waiting, and a synchronous call waits once, at the
// end (`what` names the call in an error).
template <class Each>
dilattn_status run_sequences(const Problem& p, const dilattn_tensor& q, const StreamArgs& run,
                             const char* what, Each&& each) {
  CallDevice call;
  dilattn_status st = begin_call(q, run, &call);
  if (st != DILATTN_SUCCESS) return st;
  for (int64_t s = 0; s < p.num_seqs(); ++s) {
    const size_t z = static_cast<size_t>(s);
    st = each(p.sequence_problem(s), p.cu_seqlens_q[z], p.cu_seqlens_k[z], call.stream);
    if (st != DILATTN_SUCCESS) return st;
  }
  const cudaError_t e = run.synchronous ? cudaStreamSynchronize(call.stream) : cudaSuccess;
  return e == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(e, what);
}

// ---------------------------------------------------------------- the plan's device state
// The arrays of a plan the kernels read: a block-sparse mask (BsrMask: row_ptr, col_idx,
// head_ptr as int64) and the ALiBi slopes (SPEC 10.1, f64 as given); null where the plan has
// none.
struct PlanArrays {
  const int64_t* mask[3] = {nullptr, nullptr, nullptr};
  const double* alibi = nullptr;
};

// Whether a plan has arrays for the device (so prepare makes a LaunchPlanState).
bool has_plan_arrays(const Problem& p);

// A plan's arrays in device memory, copied once per device: at plan time to the current
// device, on first use to another. Freed with the plan. Thread-safe: a plan runs from several
// threads at once.
class LaunchPlanState : public PlanState {
 public:
  ~LaunchPlanState() override;
  // The device arrays of plan p on `device` (the current device), copied there if not yet.
  dilattn_status arrays_on(int device, const Problem& p, PlanArrays* arrays);

 private:
  struct Copy {
    int device = 0;
    void* base = nullptr;
    PlanArrays arrays;
  };
  std::mutex mutex_;
  std::vector<Copy> copies_;  // one per device used, usually one
};

// The plan's device arrays on `device` (none when it has none; LaunchPlanState otherwise).
dilattn_status plan_arrays_of(const Problem& p, int device, PlanArrays* arrays);

// SPEC 10.3: the call's H sink logits (host memory) copied to dst in device memory, on the
// call's stream; *out = dst, or null for a plan without sinks. The calls that carry sinks
// (dilattn_forward_ex, dilattn_backward_ex) wait for their work, so the host array outlives
// the copy.
dilattn_status copy_sinks(const Problem& p, const SinksCall& sinks, void* dst,
                          cudaStream_t stream, const double** out);

// SPEC 10.1 values the kernels cannot represent, refused by can_run (SPEC 7): a softcap whose
// score-domain value c * log2(e) is not a normal f32, an ALiBi slope whose score-domain value
// exceeds f32.
dilattn_status check_variant_values(const Problem& p);

// SPEC 5.5: a ring's placed sub-problem the kernels compute exactly. They apply its causal rule
// at its own indices (placed_positions.cuh), which is the whole problem's at the placed
// positions when rows and keys are the same positions of a square problem (the ring's diagonal
// parts; its other parts are not causal). Any other causal placement is refused
// (DILATTN_ERROR_INTERNAL: the ring never makes one) rather than computed wrongly.
dilattn_status check_placement(const Problem& p);

// ---------------------------------------------------------------- shared memory
// Above 48 KiB a kernel must opt in to more dynamic shared memory. Its limit is raised once per
// device to the largest size asked so far (device.granted), not per call. Used by the forward
// and the backward.
template <class Kernel>
dilattn_status grant_shared_memory(DeviceInfo& device, Kernel fn, size_t smem) {
  if (smem <= 48 * 1024) return DILATTN_SUCCESS;
  const auto key = reinterpret_cast<void (*)()>(fn);
  std::lock_guard<std::mutex> lock(device.granted_mutex);
  std::pair<void (*)(), size_t>* grant = nullptr;
  for (auto& g : device.granted)
    if (g.first == key) grant = &g;
  if (grant != nullptr && grant->second >= smem) return DILATTN_SUCCESS;
  const cudaError_t e =
      cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return cuda_failure(e, "cudaFuncSetAttribute");
  if (grant != nullptr)
    grant->second = smem;
  else
    device.granted.emplace_back(key, smem);
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- launch parameters
// The forward's device workspace pieces (launch.cu, workspace_layout) and the plan's device
// mask, as shared_params reads them.
struct Workspace {
  float* o_acc;
  double* lse_acc;
  PlanArrays plan;       // the plan's device arrays (mask, ALiBi slopes)
  const double* sinks;   // the call's sink logits in device memory [H]; null: none
};

// A view whose rows the tensor-core kernels may copy 16 bytes at a time (cp.async): D
// contiguous, every row 16-byte aligned.
bool rows_of_16_bytes(const dilattn_tensor* t);

// SPEC 10.1 and 10.3, which instance of its kernel a problem runs (kernel_choice.h): a window,
// softcap or ALiBi, options of each score, need the variant instance of every kernel; sinks,
// which join each finished row once, need it only for the SIMT forward (the tensor-core
// forwards join them in every instance, mma_rows.cuh's finish_row; no backward kernel reads
// them: their LSE holds them).
bool uses_score_variants(const Problem& p);
bool uses_variant_kernels(const Problem& p);  // uses_score_variants, or sinks

// The score scale (lib/softmax_rules.h) of every kernel and pre-pass of a call: score_scale,
// except that a softcapped problem keeps post = 1 (its scores are bounded by the softcap, so
// none needs the scale after the maximum; variant_tile.cuh).
ScoreScale kernel_score_scale(const Problem& p);

// What every launch of a forward shares (and the backward's index part, with no forward
// workspace): the views, the problem's sizes, the scale, the kind's parameters, the variants',
// and with p > 0 the call's dropout seed and offset, the threshold and 1 / (1 - p) (SPEC 11).
ForwardParams shared_params(const Problem& p, const ForwardArgs& a, const Workspace& ws);

// SPEC 3.4's pairs that several dilated branches hold, computed once (lib/pair_sharing.h): fp
// with share_pairs set and every branch's shape, where the branches nest
// (branches_share_pairs) and the call runs a tensor-core kernel's plain instance, forward or
// backward (forward_mma.cu, forward_mma_tf32.cu, forward_wgmma.cu, backward_mma.cu and
// backward_mma_tf32.cu apply the weights; the SIMT, variant and dropout instances and a
// ring's placed sub-problems compute every branch's pairs). DILATTN_CUDA_SHARE_PAIRS=0 (read
// once, docs/spec.md 14.5) computes every branch's pairs in full, so bench/gpu/first_light.sh
// can time both ways.
ForwardParams with_shared_pairs(const Problem& p, int cc_major, ForwardParams fp);

// Sets launch `launch`'s kind and branch in fp; returns its number of tiles (grid.x) of
// tile_rows rows (the forward's and the dQ pass's query tiles) or keys (the dK/dV pass: the
// dilated tile count per segment).
int64_t prepare_launch(const Problem& p, int tile_rows, int64_t launch, ForwardParams* fp);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_LAUNCH_SHARED_H
