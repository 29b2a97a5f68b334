// launch.cu - the CUDA backend's launcher (SPEC 1-4 forward; the backward, SPEC 6, is
// launch_backward.cu, included below): picks a kernel, checks the
// views, runs one launch per branch into an (O, LSE) workspace, converts to the outputs.
//
// Built twice: by nvcc as dilattn::cuda (kernels on a GPU), and by the host compiler through
// cuda/launch_emu.cpp as dilattn::emu (the same kernels, run by the SIMT emulator in emu/; its
// device memory is host memory, so this file treats pointers alike in both builds).
//
//   can_run             a device with a kernel image for it (device_info); f64 is CPU only;
//                       head dim <= kMaxHeadDim; B * H fits grid.y.
//   prepare             plan time: the block-sparse mask copied to the device once
//                       (LaunchPlanState), not per call.
//   forward             in the order it calls them, every launch on the caller's stream:
//     check_views       data pointers aligned to their element, no output dimension of stride 0
//                       that would make two rows write one address (SPEC 1);
//     device_info       the device's compute capability and shared memory, asked once per
//                       device and process (no cudaGetDeviceProperties per call);
//     choose_kernel     MMA for f16/bf16 and MMA_TF32 (3xTF32) for f32, with D in {64, 128}
//                       on sm_80+, else SIMT (forward_kernel_for), its shared memory within
//                       the device's limit;
//     prepare_workspace several dilated branches only, from the plan's pool (workspace_layout):
//                       o_acc [B, H, Nq, D] f32 = 0, lse_acc [B, H, Nq] f64 = -inf;
//     launch_branches   dense and block-sparse one launch, dilated one per branch. One branch
//                       (writes_outputs_directly): the kernel writes O and LSE itself; several:
//                       each merges into the workspace (SPEC 3/5), rows no branch selects keep
//                       0 / -inf;
//     finalize          several branches: o_acc converted to O's dtype and strides, lse_acc to
//                       LSE (f32 or f64); dilattn_forward waits for the stream,
//                       dilattn_forward_on_stream not.
//   after_work          a pool workspace goes back once the stream passed the call's work
//                       (a host function on the stream; lib/dispatch.cpp).
//
// Checked by tests/kernels/test_forward_kernels.cpp (every kernel x dtype x kind, emulator),
// tests/kernels/test_launch_checks.cpp (the refusals), test_launch_stream.cpp (stream, no sync
// or allocation per call, release after the work) and test_launch_device_arch.cpp (a device
// without a kernel image).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "dtype_convert.h"
#include "errors.h"
#include "forward_mma.cu"
#include "forward_mma_tf32.cu"
#include "forward_simt.cu"  // the kernels: one translation unit, so no device linking
#include "kernel_choice.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ================================================================ small kernels
// The running (O, LSE) before any branch: no keys yet.
__global__ void init_accumulators_kernel(float* o_acc, double* lse_acc, int64_t rows,
                                         int64_t D) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < rows * D; idx += stride) o_acc[idx] = 0.0f;
  for (int64_t idx = start; idx < rows; idx += stride) lse_acc[idx] = -INFINITY;
}

// o[b, i, h, d] = o_acc[b, h, i, d], rounded once to O's dtype.
template <class T>
__global__ void finalize_output_kernel(const float* o_acc, T* o, int64_t s0, int64_t s1,
                                       int64_t s2, int64_t s3, int64_t B, int64_t Nq,
                                       int64_t H, int64_t D) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < B * H * Nq * D; idx += stride) {
    const int64_t d = idx % D, row = idx / D;  // row = (b * H + h) * Nq + i
    const int64_t i = row % Nq, h = (row / Nq) % H, b = row / (Nq * H);
    o[b * s0 + i * s1 + h * s2 + d * s3] = from_float<T>(o_acc[idx]);
  }
}

// lse[b, h, i] = lse_acc[b, h, i], as f32 (rounded: +-inf where it exceeds f32) or f64.
__global__ void finalize_lse_kernel(const double* lse_acc, void* lse, int32_t lse_is_f64,
                                    int64_t s0, int64_t s1, int64_t s2, int64_t B, int64_t H,
                                    int64_t Nq) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < B * H * Nq; idx += stride) {
    const int64_t i = idx % Nq, h = (idx / Nq) % H, b = idx / (Nq * H);
    const int64_t at = b * s0 + h * s1 + i * s2;
    if (lse_is_f64)
      static_cast<double*>(lse)[at] = lse_acc[idx];
    else
      static_cast<float*>(lse)[at] = static_cast<float>(lse_acc[idx]);
  }
}

// ================================================================ launcher
namespace {

#ifdef __CUDACC__
constexpr const char* kBackendName = "cuda";
#ifndef DILATTN_SM_ARCHS
#define DILATTN_SM_ARCHS "?"
#endif
constexpr const char* kBuiltArchs = DILATTN_SM_ARCHS;  // meson option sm_archs
#else
constexpr const char* kBackendName = "emu";
constexpr const char* kBuiltArchs = "80,90";  // what the emulated binary holds (emu/README.md)
#endif

constexpr int kElementwiseThreads = 256;

// A CUDA failure as a status; under the emulator, with its own explanation (barrier
// divergence, out-of-bounds shared access, ...).
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

// ---------------------------------------------------------------- check_views
// SPEC 1: a backend that cannot take a view says so before touching memory.
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

dilattn_status check_views(const ForwardArgs& a) {
  const struct {
    const dilattn_tensor* view;
    const char* name;
    bool written;
  } views[5] = {{a.q, "q", false}, {a.k, "k", false}, {a.v, "v", false}, {a.o, "o", true},
                {a.lse, "lse", true}};
  for (const auto& v : views) {
    if (v.view == nullptr) continue;  // only lse is optional
    const dilattn_status st = check_view(v.view, v.name, v.written);
    if (st != DILATTN_SUCCESS) return st;
  }
#ifdef __CUDACC__
  // Every tensor on one GPU, which runs the launches.
  for (const auto& v : views)
    if (v.view != nullptr && v.view->device_index != a.q->device_index)
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "backend 'cuda': tensors on devices %d and %d; all must be on one GPU",
                       a.q->device_index, v.view->device_index);
#endif
  return DILATTN_SUCCESS;
}

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

using KernelFn = void (*)(ForwardParams);

// ---------------------------------------------------------------- device_info
// What the launcher needs of a device, asked once per device and process (a call must not
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
  // Asks the runtime for the kernel's code on the current device (which is `device`).
  cudaFuncAttributes attr;
  e = cudaFuncGetAttributes(&attr, forward_simt_kernel<float>);
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

// The current device's facts (device must be the current device); thread-safe.
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
// The device a call runs on (the tensors', made current until the call returns), its cached
// facts, and the caller's stream. A capture that would outlive a pool workspace is refused
// before anything is enqueued (check_capture, below).
struct CallDevice {
  int device = 0;
  DeviceInfo* info = nullptr;
  cudaStream_t stream = nullptr;
#ifdef __CUDACC__
  DeviceGuard guard;  // restores the caller's current device
#endif
};

dilattn_status check_capture(cudaStream_t stream, const StreamArgs& run);

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
// A block-sparse plan's mask (BsrMask: row_ptr, col_idx, head_ptr as int64) in device memory,
// copied once per device: at plan time to the current device, on first use to another. Freed
// with the plan. Thread-safe: a plan runs from several threads at once.
class LaunchPlanState : public PlanState {
 public:
  ~LaunchPlanState() override {
    for (const Copy& c : copies_) {
#ifdef __CUDACC__
      DeviceGuard guard;
      guard.select(c.device);
#endif
      cudaFree(c.base);
    }
    cudaGetLastError();
  }
  // The device arrays on `device` (the current device), copied there if not yet.
  dilattn_status mask_on(int device, const BsrMask& m, const int64_t* arrays[3]) {
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

 private:
  struct Copy {
    int device = 0;
    void* base = nullptr;
    const int64_t* arrays[3] = {nullptr, nullptr, nullptr};
  };
  std::mutex mutex_;
  std::vector<Copy> copies_;  // one per device used, usually one
};

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

// ---------------------------------------------------------------- choose_kernel

struct ChosenKernel {
  KernelFn fn;
  size_t smem;  // dynamic shared memory per block
  int br;       // query rows per tile
  int threads;  // per block
};

template <class Products>
ChosenKernel chosen(KernelFn fn, int64_t D) {
  return ChosenKernel{fn, tile_smem_bytes<Products>(D), Products::kBr, Products::kThreads};
}
template <class T>
ChosenKernel simt_kernel(int64_t D) {
  return chosen<SimtProducts<T>>(forward_simt_kernel<T>, D);
}
template <class T, int D>
ChosenKernel mma_kernel_of() {
  return ChosenKernel{forward_mma_kernel<T, D>, mma_smem_bytes<T, D>(), MmaTile<T, D>::kBr,
                      MmaTile<T, D>::kThreads};
}
template <class T>
ChosenKernel mma_kernel(int64_t D) {  // forward_kernel_for picks MMA for D = 64 and 128 only
  return D == 64 ? mma_kernel_of<T, 64>() : mma_kernel_of<T, 128>();
}

template <int D>
ChosenKernel tf32_kernel_of() {
  return ChosenKernel{forward_mma_tf32_kernel<D, 3>, tf32_smem_bytes<D>(), Tf32Tile<D>::kBr,
                      Tf32Tile<D>::kThreads};
}

ChosenKernel pick_kernel(const Problem& p, int cc_major) {
  const KernelChoice choice = forward_kernel_for(p.dtype, p.D, cc_major);
  const bool mma = choice == KernelChoice::mma;
  switch (p.dtype) {
    case DILATTN_F16: return mma ? mma_kernel<__half>(p.D) : simt_kernel<__half>(p.D);
    case DILATTN_BF16:
      return mma ? mma_kernel<__nv_bfloat16>(p.D) : simt_kernel<__nv_bfloat16>(p.D);
    default:  // f32: 3xTF32 on tensor cores for D = 64 and 128 (forward_mma_tf32.cu)
      if (choice != KernelChoice::mma_tf32) return simt_kernel<float>(p.D);
      return p.D == 64 ? tf32_kernel_of<64>() : tf32_kernel_of<128>();
  }
}

// Above 48 KiB a kernel must opt in to more dynamic shared memory. Its limit is raised once per
// device to the largest size asked so far (device.granted), not per call. Used by the forward
// (choose_kernel) and the backward (launch_backward.cu).
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

// The kernel for this problem on the device, its shared memory checked and granted (a kernel's
// limit is raised once per device to the largest size asked so far, not per call).
dilattn_status choose_kernel(const Problem& p, DeviceInfo& device, ChosenKernel* kernel) {
  *kernel = pick_kernel(p, device.major);
  if (kernel->smem > device.smem_limit)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': head_dim = %lld needs %zu bytes of shared memory per block, "
                     "the device has %zu",
                     kBackendName, static_cast<long long>(p.D), kernel->smem, device.smem_limit);
  return grant_shared_memory(device, kernel->fn, kernel->smem);
}

// ---------------------------------------------------------------- prepare_workspace
// The forward's device workspace, taken by dispatch from the plan's pool (the device's default
// pool unless the caller gave one; for emu, host memory): f32 O accumulator [B, H, Nq, D] and
// f64 LSE accumulator [B, H, Nq] (an LSE near scale * <q, k> may exceed f32's range while O is
// right). Each piece starts on a 256-byte boundary. The block-sparse mask is the plan's
// (LaunchPlanState), not the workspace's.
struct WorkspaceLayout {
  size_t o_acc = 0, lse_acc = 0, total = 0;
};

// One branch (dense, block-sparse, one dilated branch): the kernels write O and LSE directly
// (forward_outputs.cuh), so there is no workspace and no init or finalize pass.
bool writes_outputs_directly(const Problem& p) {
  return p.kind != DILATTN_KIND_DILATED || p.num_branches() == 1;
}

WorkspaceLayout workspace_layout(const Problem& p) {
  if (writes_outputs_directly(p)) return WorkspaceLayout{};
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(p.B * p.H * p.Nq);
  WorkspaceLayout l;
  size_t off = aligned(rows * static_cast<size_t>(p.D) * sizeof(float));
  l.lse_acc = off;
  off += aligned(rows * sizeof(double));
  l.total = off;
  return l;
}

struct Workspace {
  float* o_acc;
  double* lse_acc;
  const int64_t* mask[3];  // device row_ptr, col_idx, head_ptr; null unless block-sparse
};

// Carves a.workspace, finds the plan's device copy of the block-sparse mask, and starts the
// accumulators at "no key yet": O = 0, LSE = -inf.
dilattn_status prepare_workspace(const Problem& p, const ForwardArgs& a, int device,
                                 cudaStream_t stream, Workspace* ws) {
  const WorkspaceLayout layout = workspace_layout(p);
  unsigned char* base = static_cast<unsigned char*>(a.workspace);
  ws->o_acc = reinterpret_cast<float*>(base + layout.o_acc);
  ws->lse_acc = reinterpret_cast<double*>(base + layout.lse_acc);
  for (int n = 0; n < 3; ++n) ws->mask[n] = nullptr;
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    auto* state = dynamic_cast<LaunchPlanState*>(p.backend_state.get());
    if (!p.mask || state == nullptr)
      return set_error(DILATTN_ERROR_INTERNAL, "block-sparse plan without its device mask");
    const dilattn_status st = state->mask_on(device, *p.mask, ws->mask);
    if (st != DILATTN_SUCCESS) return st;
  }
  if (writes_outputs_directly(p)) return DILATTN_SUCCESS;
  const int64_t rows = p.B * p.H * p.Nq;
  DILATTN_LAUNCH(init_accumulators_kernel, dim3(elementwise_blocks(rows * p.D)),
                 dim3(kElementwiseThreads), 0, stream)(ws->o_acc, ws->lse_acc, rows, p.D);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_failure(e, "init_accumulators_kernel");
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- launch_branches
// What every launch of this forward shares.
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
  // 16-byte copies of K and V rows (forward_mma.cu): D contiguous, every row 16-byte aligned.
  auto rows_of_16_bytes = [](const dilattn_tensor* t) {
    const int64_t per16 = static_cast<int64_t>(16 / dtype_size(t->dtype));
    return t->strides[3] == 1 && reinterpret_cast<uintptr_t>(t->data) % 16 == 0 &&
           t->strides[0] % per16 == 0 && t->strides[1] % per16 == 0 &&
           t->strides[2] % per16 == 0;
  };
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

// One branch: the kernels write the caller's O and LSE (forward_outputs.cuh). Not for the
// backward, which shares shared_params but has no O to write.
ForwardParams with_direct_outputs(const Problem& p, const ForwardArgs& a, ForwardParams fp) {
  if (!writes_outputs_directly(p)) return fp;
  fp.o = a.o->data;
  for (int dim = 0; dim < 4; ++dim) fp.o_stride[dim] = a.o->strides[dim];
  if (a.lse != nullptr) {
    fp.lse = a.lse->data;
    fp.lse_is_f64 = a.lse->dtype == DILATTN_F64 ? 1 : 0;
    for (int dim = 0; dim < 3; ++dim) fp.lse_stride[dim] = a.lse->strides[dim];
  }
  return fp;
}

// Sets launch `launch`'s kind and branch in fp; returns its number of query tiles (grid.x).
int64_t prepare_launch(const Problem& p, int br, int64_t launch, ForwardParams* fp) {
  if (p.kind == DILATTN_KIND_DENSE) {
    fp->kind = kKindDense;
    return ceil_div(p.Nq, br);
  }
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    fp->kind = kKindSparse;
    fp->tiles_per_group = ceil_div(fp->bq, br);
    return fp->I * fp->tiles_per_group;
  }
  fp->kind = kKindDilated;
  fp->branch = launch;
  fp->w = p.branches[static_cast<size_t>(launch)].w;
  fp->r = p.branches[static_cast<size_t>(launch)].r;
  const int64_t wc = clipped_segment(fp->w, p.Nq);
  // The most rows a segment selects is ceil(wc / r) (offset 0).
  fp->tiles_per_group = ceil_div(ceil_div(wc, fp->r), br);
  return segment_count(p.Nq, wc) * fp->tiles_per_group;
}

// One launch per dilated branch, one for dense and block-sparse; each covers disjoint rows
// and merges them into the workspace.
dilattn_status launch_branches(const Problem& p, const ChosenKernel& kernel, cudaStream_t stream,
                               ForwardParams fp) {
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  for (int64_t launch = 0; launch < launches; ++launch) {
    const int64_t tiles = prepare_launch(p, kernel.br, launch, &fp);
    if (tiles > 0x7fffffff)
      return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': %lld query tiles exceed the grid",
                       kBackendName, static_cast<long long>(tiles));
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.B * p.H));
    DILATTN_LAUNCH(kernel.fn, grid, dim3(kernel.threads), kernel.smem, stream)(fp);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failure(e, "forward kernel");
  }
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- finalize
template <class T>
void launch_finalize_output(const float* o_acc, const dilattn_tensor& o, const Problem& p,
                            cudaStream_t stream) {
  const int64_t n = p.B * p.H * p.Nq * p.D;
  DILATTN_LAUNCH(finalize_output_kernel<T>, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads),
                 0, stream)(o_acc, static_cast<T*>(o.data), o.strides[0], o.strides[1], o.strides[2],
                       o.strides[3], p.B, p.Nq, p.H, p.D);
}

// The workspace into the caller's O and LSE; a synchronous call then waits for the stream.
dilattn_status finalize(const Problem& p, const ForwardArgs& a, const Workspace& ws,
                        cudaStream_t stream) {
  cudaError_t e = cudaSuccess;
  if (writes_outputs_directly(p)) {  // the kernel wrote O and LSE
    if (a.run.synchronous && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
      return cuda_failure(e, "forward");
    return DILATTN_SUCCESS;
  }
  switch (p.dtype) {
    case DILATTN_F16: launch_finalize_output<__half>(ws.o_acc, *a.o, p, stream); break;
    case DILATTN_BF16: launch_finalize_output<__nv_bfloat16>(ws.o_acc, *a.o, p, stream); break;
    default: launch_finalize_output<float>(ws.o_acc, *a.o, p, stream); break;
  }
  e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_failure(e, "finalize_output_kernel");
  if (a.lse != nullptr) {
    const dilattn_tensor& lse = *a.lse;
    DILATTN_LAUNCH(finalize_lse_kernel, dim3(elementwise_blocks(p.B * p.H * p.Nq)),
                   dim3(kElementwiseThreads), 0, stream)(ws.lse_acc, lse.data,
                                                    lse.dtype == DILATTN_F64 ? 1 : 0,
                                                    lse.strides[0], lse.strides[1],
                                                    lse.strides[2], p.B, p.H, p.Nq);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "finalize_lse_kernel");
  }
  if (a.run.synchronous && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
    return cuda_failure(e, "forward");
  return DILATTN_SUCCESS;
}

}  // namespace

// ================================================================ the backend's entry points
dilattn_status can_run(const Problem& p) {
  int devices = 0, device = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "backend '%s': no CUDA device", kBackendName);
  }
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  DeviceInfo* info = nullptr;
  dilattn_status st = check_device(device, &info);
  if (st != DILATTN_SUCCESS) return st;
  if (p.dtype == DILATTN_F64)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': dtype f64 is CPU only (backends ref and cpu)", kBackendName);
  if (!scale_fits_f32(p.scale))
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': scale = %g: |scale| * log2(e) exceeds f32 (use backend ref)",
                     kBackendName, p.scale);
  if (p.D > kMaxHeadDim)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': head_dim = %lld: the kernels take head dims up to %lld",
                     kBackendName, static_cast<long long>(p.D),
                     static_cast<long long>(kMaxHeadDim));
  if (p.B * p.H > 65535)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': batch * heads = %lld: the launch grid takes at most 65535",
                     kBackendName, static_cast<long long>(p.B * p.H));
  if (ceil_div(p.Nq, 16) > 0x7fffffff)
    return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': seqlen_q = %lld is too long",
                     kBackendName, static_cast<long long>(p.Nq));
  return DILATTN_SUCCESS;
}

// The backward's workspace (launch_backward.cu, included at the end of this file).
size_t backward_workspace_bytes(const Problem& p);

WorkspaceBytes workspace_bytes(const Problem& p) {
  return {workspace_layout(p).total, backward_workspace_bytes(p)};
}

// The block-sparse mask to the current device, once per plan (SPEC 4 arrays).
dilattn_status prepare(Problem& p) {
  if (p.kind != DILATTN_KIND_BLOCK_SPARSE || !p.mask) return DILATTN_SUCCESS;
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  auto state = std::make_shared<LaunchPlanState>();
  const int64_t* arrays[3];
  const dilattn_status st = state->mask_on(device, *p.mask, arrays);
  if (st != DILATTN_SUCCESS) return st;
  p.backend_state = std::move(state);
  return DILATTN_SUCCESS;
}

// The plan was checked by can_run when it was made; a call checks what can differ per call:
// the views and the device the tensors are on (whose facts are cached, device_info).
dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  dilattn_status st = check_views(a);
  if (st != DILATTN_SUCCESS) return st;
  CallDevice call;
  ChosenKernel kernel;
  Workspace ws;
  if ((st = begin_call(*a.q, a.run, &call)) != DILATTN_SUCCESS) return st;
  if ((st = choose_kernel(p, *call.info, &kernel)) != DILATTN_SUCCESS) return st;
  if ((st = prepare_workspace(p, a, call.device, call.stream, &ws)) != DILATTN_SUCCESS) return st;
  const ForwardParams fp = with_direct_outputs(p, a, shared_params(p, a, ws));
  if ((st = launch_branches(p, kernel, call.stream, fp)) != DILATTN_SUCCESS)
    return st;
  return finalize(p, a, ws, call.stream);
}

// release(ctx) once the stream has run what was enqueued on it so far: a host function on the
// stream, else wait for the stream and call it now. On a capturing stream a pool workspace
// was refused before anything was enqueued (check_capture), and a host function would be
// captured into the graph instead of running: release at once.
void after_work(int32_t device_index, void* stream, void (*release)(void*), void* ctx) {
#ifdef __CUDACC__
  DeviceGuard device_guard;  // stream 0 is the legacy stream of the current device
  if (device_guard.select(device_index) != cudaSuccess) cudaGetLastError();
#else
  (void)device_index;
#endif
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) cudaGetLastError();
  if (capture != cudaStreamCaptureStatusNone) {
    release(ctx);
    return;
  }
  if (cudaLaunchHostFunc(s, release, ctx) == cudaSuccess) return;
  cudaGetLastError();
  cudaStreamSynchronize(s);
  cudaGetLastError();
  release(ctx);
}

// The "GPU present" line of dilattn_build_info.
std::string device_report() {
  int devices = 0, device = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return "no";
  }
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  const DeviceInfo& info = device_info(device);
  std::string report = "yes (sm_" + std::to_string(info.major) + std::to_string(info.minor) + ")";
  if (!info.usable) report += ", " + info.why_not + ": " + kBackendName + " not used";
  return report;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

// The backward launcher and its kernels (SPEC 6): backward() and backward_workspace_bytes.
#include "launch_backward.cu"

// The ring's element work on this backend's device (SPEC 5): make_ring_ops.
#include "ring_ops.cu"
