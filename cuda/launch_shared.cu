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

#include <cstring>
#include <map>
#include <memory>

#include "dtype_convert.h"
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

dilattn_status LaunchPlanState::mask_on(int device, const BsrMask& m, const int64_t* arrays[3]) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Copy& c : copies_)
    if (c.device == device) {
      for (int n = 0; n < 3; ++n) arrays[n] = c.arrays[n];
      return DILATTN_SUCCESS;
    }
  const std::vector<int64_t>* host[3] = {&m.row_ptr, &m.col_idx, &m.head_ptr};
  size_t offset[3], total = 0;
  for (int n = 0; n < 3; ++n) {
    offset[n] = total;
    total += (host[n]->size() * sizeof(int64_t) + 255) / 256 * 256;
  }
  Copy c;
  c.device = device;
  cudaError_t e = cudaMalloc(&c.base, total);
  if (e != cudaSuccess) return cuda_failure(e, "cudaMalloc of the mask");
  for (int n = 0; n < 3; ++n) {
    unsigned char* at = static_cast<unsigned char*>(c.base) + offset[n];
    c.arrays[n] = reinterpret_cast<const int64_t*>(at);
    const size_t bytes = host[n]->size() * sizeof(int64_t);
    if (bytes > 0 &&
        (e = cudaMemcpy(at, host[n]->data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
      cudaFree(c.base);
      return cuda_failure(e, "cudaMemcpy of the mask");
    }
  }
  copies_.push_back(c);
  for (int n = 0; n < 3; ++n) arrays[n] = c.arrays[n];
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- launch parameters
// What every launch of a forward shares (launch_shared.h).
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
  const ScoreScale scale = score_scale(p.scale);
  fp.score_pre = scale.pre;
  fp.score_post = scale.post;
  fp.causal = p.causal ? 1 : 0;
  fp.num_branches = p.num_branches();
  fp.head_mode = p.head_mode;
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    fp.row_ptr = ws.mask[0];
    fp.col_idx = ws.mask[1];
    fp.head_ptr = ws.mask[2];
    fp.mask_heads = p.mask->num_heads;
    fp.bq = p.mask->bq;
    fp.bk = p.mask->bk;
    fp.I = p.mask->I;
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
    return fp->I * fp->tiles_per_group;
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
