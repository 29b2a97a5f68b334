// launch_shared.cu - the launchers' shared helpers (declared and described in launch_shared.h):
// errors, view checks, the cached device facts, the start of a call, the plan's device mask,
// and the index part of every launch's parameters (SPEC 1-4).
//
// Built twice, as every file of the backend: by nvcc into dilattn::cuda and by the host
// compiler with the SIMT emulator into dilattn::emu (cuda/meson.build). Checked through the
// launchers by tests/kernels/test_launch_checks.cpp (the refusals), test_launch_stream.cpp (no
// property query or allocation per call) and test_launch_device_arch.cpp (a device without a
// kernel image).
#include "launch_shared.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "dropout_rng.h"
#include "dtype_convert.h"
#include "kernel_choice.h"
#include "kernels.h"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- errors and views
dilattn_status cuda_failure(cudaError_t e, const char* what) {
#ifdef __CUDACC__
  return set_error(DILATTN_ERROR_CUDA, "backend 'cuda': %s: %s", what, cudaGetErrorString(e));
#else
  return set_error(DILATTN_ERROR_CUDA, "backend 'emu': %s: %s (%s)", what, cudaGetErrorString(e),
                   simt::last_error_message());
#endif
}

unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = ceil_div(n, kElementwiseThreads);
  return static_cast<unsigned>(min_i64(max_i64(blocks, 1), 4096));
}

dilattn_status check_view(const dilattn_tensor* t, const char* name, bool written) {
  const size_t element = dtype_size(t->dtype);
  if (reinterpret_cast<uintptr_t>(t->data) % element != 0)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': argument '%s': data pointer %p is not aligned to its %zu-byte "
                     "elements",
                     kBackendName, name, t->data, element);
  if (written)
    for (int dim = 0; dim < 4; ++dim)
      if (t->shape[dim] > 1 && t->strides[dim] == 0)
        return set_error(DILATTN_ERROR_UNSUPPORTED,
                         "backend '%s': argument '%s': stride 0 on dimension %d of extent %lld "
                         "makes rows share memory",
                         kBackendName, name, dim, static_cast<long long>(t->shape[dim]));
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- device facts
namespace {

#ifdef __CUDACC__
#ifndef DILATTN_SM_ARCHS
#define DILATTN_SM_ARCHS "?"
#endif
constexpr const char* kBuiltArchs = DILATTN_SM_ARCHS;  // meson option sm_archs
#else
constexpr const char* kBuiltArchs = "80,90";  // what the emulated binary holds (emu/README.md)
#endif

void query_device(int device, DeviceInfo* info) {
  cudaDeviceProp props;
  std::memset(&props, 0, sizeof(props));
  cudaError_t e = cudaGetDeviceProperties(&props, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    info->why_not = std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(e);
    return;
  }
  info->major = props.major;
  info->minor = props.minor;
  info->smem_limit = props.sharedMemPerBlockOptin > props.sharedMemPerBlock
                         ? props.sharedMemPerBlockOptin
                         : props.sharedMemPerBlock;
  // Asks the runtime for a kernel's code on the current device (which is `device`); every
  // kernel is built for the same archs, so the f32 SIMT forward answers for all.
  cudaFuncAttributes attr;
  e = cudaFuncGetAttributes(&attr, simt_forward<float>(0).fn);
  if (e != cudaSuccess) {
    cudaGetLastError();
    info->why_not = e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction
                        ? std::string("no kernel image for it (kernels built for sm ") +
                              kBuiltArchs + ")"
                        : std::string("cudaFuncGetAttributes failed: ") + cudaGetErrorString(e);
    return;
  }
  info->usable = true;
}

// A capturing stream replays the call's work later, on a workspace a pool block would no
// longer own (dispatch gives it back after the call): the caller must pass one.
dilattn_status check_capture(cudaStream_t stream, const StreamArgs& run) {
  if (!run.workspace_from_pool) return DILATTN_SUCCESS;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return DILATTN_SUCCESS;  // nothing known to capture
  }
  if (status == cudaStreamCaptureStatusNone) return DILATTN_SUCCESS;
  return set_error(DILATTN_ERROR_INVALID_VALUE,
                   "argument 'workspace' = NULL: the stream is capturing a CUDA graph, whose "
                   "replays would use a pool block given back after this call; pass a "
                   "workspace of dilattn_plan_workspace_size bytes");
}

}  // namespace

DeviceInfo& device_info(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceInfo>> infos;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<DeviceInfo>& info = infos[device];
  if (!info) {
    info.reset(new DeviceInfo);
    query_device(device, info.get());
  }
  return *info;
}

dilattn_status check_device(int device, DeviceInfo** info) {
  *info = &device_info(device);
  if ((*info)->usable) return DILATTN_SUCCESS;
  return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "backend '%s': device %d (sm_%d%d): %s",
                   kBackendName, device, (*info)->major, (*info)->minor,
                   (*info)->why_not.c_str());
}

// ---------------------------------------------------------------- the start of every call
dilattn_status begin_call(const dilattn_tensor& q, const StreamArgs& run, CallDevice* call) {
  call->stream = static_cast<cudaStream_t>(run.stream);
#ifdef __CUDACC__
  const cudaError_t e = call->guard.select(q.device_index);
  if (e != cudaSuccess) return cuda_failure(e, "cudaSetDevice");
  call->device = q.device_index;
#else
  (void)q;
  call->device = 0;  // the emulator's one device
#endif
  const dilattn_status st = check_device(call->device, &call->info);
  return st != DILATTN_SUCCESS ? st : check_capture(call->stream, run);
}

// ---------------------------------------------------------------- the plan's device state
LaunchPlanState::~LaunchPlanState() {
  for (const Copy& c : copies_) {
#ifdef __CUDACC__
    DeviceGuard guard;
    guard.select(c.device);
#endif
    cudaFree(c.base);
  }
  cudaGetLastError();
}

bool has_plan_arrays(const Problem& p) {
  return (p.kind == DILATTN_KIND_BLOCK_SPARSE && p.mask) || !p.alibi_slopes.empty();
}

dilattn_status LaunchPlanState::arrays_on(int device, const Problem& p, PlanArrays* arrays) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Copy& c : copies_)
    if (c.device == device) {
      *arrays = c.arrays;
      return DILATTN_SUCCESS;
    }
  // The host arrays: the mask's three (if any), then the slopes (if any).
  const bool sparse = p.kind == DILATTN_KIND_BLOCK_SPARSE && p.mask;
  const void* host[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t bytes[4] = {0, 0, 0, 0};
  if (sparse) {
    const std::vector<int64_t>* m[3] = {&p.mask->row_ptr, &p.mask->col_idx, &p.mask->head_ptr};
    for (int n = 0; n < 3; ++n) {
      host[n] = m[n]->data();
      bytes[n] = m[n]->size() * sizeof(int64_t);
    }
  }
  host[3] = p.alibi_slopes.data();
  bytes[3] = p.alibi_slopes.size() * sizeof(double);
  size_t offset[4], total = 0;
  for (int n = 0; n < 4; ++n) {
    offset[n] = total;
    total += (bytes[n] + 255) / 256 * 256;
  }
  Copy c;
  c.device = device;
  cudaError_t e = cudaMalloc(&c.base, total > 0 ? total : 256);
  if (e != cudaSuccess) return cuda_failure(e, "cudaMalloc of the plan's arrays");
  void* at[4];
  for (int n = 0; n < 4; ++n) {
    at[n] = static_cast<unsigned char*>(c.base) + offset[n];
    if (bytes[n] > 0 &&
        (e = cudaMemcpy(at[n], host[n], bytes[n], cudaMemcpyHostToDevice)) != cudaSuccess) {
      cudaFree(c.base);
      return cuda_failure(e, "cudaMemcpy of the plan's arrays");
    }
  }
  if (sparse)
    for (int n = 0; n < 3; ++n) c.arrays.mask[n] = static_cast<const int64_t*>(at[n]);
  if (bytes[3] > 0) c.arrays.alibi = static_cast<const double*>(at[3]);
  copies_.push_back(c);
  *arrays = c.arrays;
  return DILATTN_SUCCESS;
}

dilattn_status plan_arrays_of(const Problem& p, int device, PlanArrays* arrays) {
  *arrays = PlanArrays{};
  if (!has_plan_arrays(p)) return DILATTN_SUCCESS;
  auto* state = dynamic_cast<LaunchPlanState*>(p.backend_state.get());
  if (state == nullptr)
    return set_error(DILATTN_ERROR_INTERNAL, "plan without its device arrays (mask, ALiBi)");
  return state->arrays_on(device, p, arrays);
}

dilattn_status copy_sinks(const Problem& p, const SinksCall& sinks, void* dst,
                          cudaStream_t stream, const double** out) {
  *out = nullptr;
  if (!p.sinks) return DILATTN_SUCCESS;
  if (sinks.values == nullptr)
    return set_error(DILATTN_ERROR_INTERNAL, "a plan with sinks called without sink values");
  const cudaError_t e = cudaMemcpyAsync(dst, sinks.values, static_cast<size_t>(p.H) * sizeof(double),
                                        cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) return cuda_failure(e, "cudaMemcpyAsync of the sinks");
  *out = static_cast<const double*>(dst);
  return DILATTN_SUCCESS;
}

dilattn_status check_variant_values(const Problem& p) {
  constexpr double kF32Max = 3.4028234663852886e38, kF32MinNormal = 1.1754943508222875e-38;
  if (p.softcap > 0) {
    const double cs = p.softcap * kLog2e;
    if (!(cs >= kF32MinNormal && cs <= kF32Max))
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "backend '%s': softcap = %g: c * log2(e) is not a normal f32 (use "
                       "backend ref)",
                       kBackendName, p.softcap);
  }
  const double to_score = kLog2e / static_cast<double>(kernel_score_scale(p).post);
  for (size_t n = 0; n < p.alibi_slopes.size(); ++n)
    if (!(std::fabs(p.alibi_slopes[n] * to_score) <= kF32Max))
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "backend '%s': slopes[%zu] = %g: the ALiBi slope exceeds f32 (use backend "
                       "ref)",
                       kBackendName, n, p.alibi_slopes[n]);
  return DILATTN_SUCCESS;
}

dilattn_status check_placement(const Problem& p) {
  if (!p.placed || !p.causal) return DILATTN_SUCCESS;
  const Placement& at = p.place;
  if (p.Nq == p.Nk && at.Nq == at.Nk && at.q_first == at.k_first && at.q_step == at.k_step)
    return DILATTN_SUCCESS;
  return set_error(DILATTN_ERROR_INTERNAL,
                   "backend '%s': a causal ring sub-problem whose rows (%lld, step %lld) and keys "
                   "(%lld, step %lld) are not the same positions",
                   kBackendName, static_cast<long long>(at.q_first),
                   static_cast<long long>(at.q_step), static_cast<long long>(at.k_first),
                   static_cast<long long>(at.k_step));
}

// ---------------------------------------------------------------- launch parameters
// What every launch of a forward shares (launch_shared.h).
bool uses_score_variants(const Problem& p) {
  return (p.options_used() & (kOptionWindow | kOptionSoftcap | kOptionAlibi)) != 0;
}

bool uses_variant_kernels(const Problem& p) {
  return uses_score_variants(p) || (p.options_used() & kOptionSinks) != 0;
}

ScoreScale kernel_score_scale(const Problem& p) {
  if (p.softcap > 0)
    return ScoreScale{static_cast<float>(p.scale) * static_cast<float>(kLog2e), 1.0f};
  return score_scale(p.scale);
}

// SPEC 3.4's shared pairs (launch_shared.h). The environment is read once, so a process times
// one way; bench/gpu/first_light.sh runs both in two processes.
namespace {
bool shared_pairs_allowed() {
  static const bool allowed = [] {
    const char* value = std::getenv("DILATTN_CUDA_SHARE_PAIRS");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return allowed;
}
}  // namespace

ForwardParams with_shared_pairs(const Problem& p, int cc_major, ForwardParams fp) {
  const int64_t m = p.num_branches();
  if (p.kind != DILATTN_KIND_DILATED || !shared_pairs_allowed() || fp.placed ||
      uses_score_variants(p) || p.dropout_p > 0 || m > kMaxSharingBranches ||
      forward_kernel_for(p.dtype, p.D, cc_major) == KernelChoice::simt)
    return fp;
  for (int64_t c = 0; c < m; ++c) {
    fp.branch_w[c] = p.branches[static_cast<size_t>(c)].w;
    fp.branch_r[c] = p.branches[static_cast<size_t>(c)].r;
  }
  fp.share_pairs = branches_share_pairs(fp.branch_w, fp.branch_r, m, p.Nq) ? 1 : 0;
  return fp;
}

bool rows_of_16_bytes(const dilattn_tensor* t) {
  const int64_t per16 = static_cast<int64_t>(16 / dtype_size(t->dtype));
  return t->strides[3] == 1 && reinterpret_cast<uintptr_t>(t->data) % 16 == 0 &&
         t->strides[0] % per16 == 0 && t->strides[1] % per16 == 0 && t->strides[2] % per16 == 0;
}

ForwardParams shared_params(const Problem& p, const ForwardArgs& a, const Workspace& ws) {
  ForwardParams fp;
  std::memset(&fp, 0, sizeof(fp));
  fp.q = a.q->data;
  fp.k = a.k->data;
  fp.v = a.v->data;
  for (int dim = 0; dim < 4; ++dim) {
    fp.q_stride[dim] = a.q->strides[dim];
    fp.k_stride[dim] = a.k->strides[dim];
    fp.v_stride[dim] = a.v->strides[dim];
  }
  fp.o_acc = ws.o_acc;
  fp.lse_acc = ws.lse_acc;
  fp.kv_vec16 = rows_of_16_bytes(a.k) && rows_of_16_bytes(a.v) ? 1 : 0;
  fp.B = p.B;
  fp.Nq = p.Nq;
  fp.Nk = p.Nk;
  fp.H = p.H;
  fp.Hkv = p.Hkv;
  fp.D = p.D;
  const ScoreScale scale = kernel_score_scale(p);
  fp.score_pre = scale.pre;
  fp.score_post = scale.post;
  fp.causal = p.causal ? 1 : 0;
  fp.num_branches = p.num_branches();
  fp.head_mode = p.head_mode;
  fp.window_left = p.window_left;
  fp.window_right = p.window_right;
  fp.softcap_s = static_cast<float>(p.softcap * kLog2e);
  fp.alibi = ws.plan.alibi;
  // A placed sub-problem reads the whole problem's slopes (SPEC 5.5): H of them or [B][H].
  fp.alibi_per_batch = static_cast<int64_t>(p.alibi_slopes.size()) == p.draw_heads() ? 0 : 1;
  // One sequence of a packed batch with [n][H] slopes (SPEC 10.2): its b = 0 reads row
  // packed_sequence of the plan's slopes.
  if (fp.alibi != nullptr && fp.alibi_per_batch) fp.alibi += p.packed_sequence * p.H;
  fp.packed_sequence = p.packed_sequence;
  fp.alibi_to_score = kLog2e / static_cast<double>(scale.post);
  fp.sinks = ws.sinks;
  if (p.dropout_p > 0) {  // SPEC 11 (dropout_tile.cuh); dispatch.cpp checked offset < 2^32
    fp.dropout_seed = a.dropout.seed;
    fp.dropout_offset = a.dropout.offset;
    fp.dropout_threshold = dropout_threshold(p.dropout_p);
    fp.dropout_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
  }
  if (p.placed) {  // SPEC 5.5 (placed_positions.cuh)
    fp.placed = 1;
    fp.place_q_first = p.place.q_first;
    fp.place_q_step = p.place.q_step;
    fp.place_k_first = p.place.k_first;
    fp.place_k_step = p.place.k_step;
    fp.place_Nq = p.place.Nq;
    fp.place_Nk = p.place.Nk;
    fp.place_h0 = p.place.h0;
    fp.place_H = p.place.H;
  }
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    fp.row_ptr = ws.plan.mask[0];
    fp.col_idx = ws.plan.mask[1];
    fp.head_ptr = ws.plan.mask[2];
    fp.mask_heads = p.mask->num_heads;
    fp.bq = p.mask->bq;
    fp.bk = p.mask->bk;
    fp.I = p.mask->I;
    fp.mask_q0 = p.packed_q0;  // SPEC 10.2: a sequence's rows and keys in the batch's mask
    fp.mask_k0 = p.packed_k0;
  }
  return fp;
}


int64_t prepare_launch(const Problem& p, int tile_rows, int64_t launch, ForwardParams* fp) {
  if (p.kind == DILATTN_KIND_DENSE) {
    fp->kind = kKindDense;
    return ceil_div(p.Nq, tile_rows);
  }
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    fp->kind = kKindSparse;
    fp->tiles_per_group = ceil_div(fp->bq, tile_rows);
    return blocks_meeting(fp->mask_q0, p.Nq, fp->bq) * fp->tiles_per_group;
  }
  fp->kind = kKindDilated;
  fp->branch = launch;
  fp->w = p.branches[static_cast<size_t>(launch)].w;
  fp->r = p.branches[static_cast<size_t>(launch)].r;
  const int64_t wc = clipped_segment(fp->w, p.Nq);
  // The most rows a segment selects is ceil(wc / r) (offset 0).
  fp->tiles_per_group = ceil_div(ceil_div(wc, fp->r), tile_rows);
  return segment_count(p.Nq, wc) * fp->tiles_per_group;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
