// launch.cu - the CUDA backend's launcher (SPEC 1-4 forward): picks a kernel, checks the
// views, runs one launch per branch into an f32 (O, LSE) workspace, converts to the outputs.
//
// Built twice: by nvcc as dilattn::gpu (kernels on a GPU), and by the host compiler through
// cuda/launch_emu.cpp as dilattn::emu (the same kernels, run by the SIMT emulator in emu/; its
// device memory is host memory, so this file treats pointers alike in both builds).
//
//   1. can_run: f64 is CPU only; head dim <= 256; B * H fits grid.y.
//   2. forward: data pointers aligned to their element, no output dimension of stride 0 that
//      would make two rows write one address; kernel = WMMA for f16/bf16 with D in {64, 128}
//      on sm_80+, else SIMT (kernel_for); its shared memory within the device's limit.
//   3. workspace (from the plan's pool, workspace_layout) o_acc [B, H, Nq, D] = 0,
//      lse_acc [B, H, Nq] = -inf; dense is one launch,
//      dilated one per branch (each merges into the workspace, SPEC 3/5), block-sparse one launch
//      over the BSR rows (mask copied to the device); rows no branch selects keep 0 / -inf.
//   4. finalize: o_acc converted to O's dtype and strides, lse_acc to LSE (f32 or f64).
//
// Checked by tests/kernels/test_forward_kernels.cpp (every kernel x dtype x kind, emulator)
// and tests/kernels/test_launch_checks.cpp (the refusals).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "dtype_convert.h"
#include "errors.h"
#include "forward_simt.cu"
#include "forward_wmma.cu"
#include "kernel_choice.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ================================================================ small kernels
// The running (O, LSE) before any branch: no keys yet.
__global__ void init_accumulators_kernel(float* o_acc, float* lse_acc, int64_t rows, int64_t D) {
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

// lse[b, h, i] = lse_acc[b, h, i], as f32 or f64.
__global__ void finalize_lse_kernel(const float* lse_acc, void* lse, int32_t lse_is_f64,
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
      static_cast<float*>(lse)[at] = lse_acc[idx];
  }
}

// ================================================================ launcher
namespace {

#ifdef __CUDACC__
constexpr const char* kBackendName = "cuda";
#else
constexpr const char* kBackendName = "emu";
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

// The forward's device workspace, taken by dispatch from the plan's pool (the device's default
// pool unless the caller gave one; for emu, host memory): f32 O accumulator [B, H, Nq, D], f32
// LSE accumulator [B, H, Nq] and, for block-sparse attention, the device copy of the mask's
// row_ptr, col_idx and head_ptr (int64). Each piece starts on a 256-byte boundary.
struct WorkspaceLayout {
  size_t o_acc = 0, lse_acc = 0, mask[3] = {0, 0, 0}, total = 0;
};

WorkspaceLayout workspace_layout(const Problem& p) {
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(p.B * p.H * p.Nq);
  WorkspaceLayout l;
  size_t off = aligned(rows * static_cast<size_t>(p.D) * sizeof(float));
  l.lse_acc = off;
  off += aligned(rows * sizeof(float));
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE && p.mask) {
    const std::vector<int64_t>* arrays[3] = {&p.mask->row_ptr, &p.mask->col_idx, &p.mask->head_ptr};
    for (int n = 0; n < 3; ++n) {
      l.mask[n] = off;
      off += aligned(arrays[n]->size() * sizeof(int64_t));
    }
  }
  l.total = off;
  return l;
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

unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = ceil_div(n, kElementwiseThreads);
  return static_cast<unsigned>(min_i64(max_i64(blocks, 1), 4096));
}

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

using KernelFn = void (*)(ForwardParams);

struct ChosenKernel {
  KernelFn fn;
  size_t smem;
  int br;       // query rows per tile
  int threads;  // per block
};

ChosenKernel choose(const Problem& p, int cc_major) {
  if (kernel_for(p.dtype, p.D, cc_major) == KernelChoice::wmma) {
    const bool half = p.dtype == DILATTN_F16;
    if (p.D == 64)
      return half ? ChosenKernel{forward_wmma_kernel<__half, 64>, wmma_smem_bytes<__half>(64), kWmmaBr, kWmmaThreads}
                  : ChosenKernel{forward_wmma_kernel<__nv_bfloat16, 64>,
                                 wmma_smem_bytes<__nv_bfloat16>(64), kWmmaBr, kWmmaThreads};
    return half ? ChosenKernel{forward_wmma_kernel<__half, 128>, wmma_smem_bytes<__half>(128), kWmmaBr, kWmmaThreads}
                : ChosenKernel{forward_wmma_kernel<__nv_bfloat16, 128>,
                               wmma_smem_bytes<__nv_bfloat16>(128), kWmmaBr, kWmmaThreads};
  }
  const size_t smem = simt_smem_bytes(p.D);
  switch (p.dtype) {
    case DILATTN_F16: return ChosenKernel{forward_simt_kernel<__half>, smem, kSimtBr, kSimtThreads};
    case DILATTN_BF16: return ChosenKernel{forward_simt_kernel<__nv_bfloat16>, smem, kSimtBr, kSimtThreads};
    default: return ChosenKernel{forward_simt_kernel<float>, smem, kSimtBr, kSimtThreads};
  }
}

template <class T>
void launch_finalize_output(const float* o_acc, const dilattn_tensor& o, const Problem& p) {
  const int64_t n = p.B * p.H * p.Nq * p.D;
  DILATTN_LAUNCH(finalize_output_kernel<T>, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads),
                 0, 0)(o_acc, static_cast<T*>(o.data), o.strides[0], o.strides[1], o.strides[2],
                       o.strides[3], p.B, p.Nq, p.H, p.D);
}

}  // namespace

dilattn_status can_run(const Problem& p) {
#ifdef __CUDACC__
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return set_error(DILATTN_ERROR_DEVICE_NOT_BUILT, "backend 'cuda': no CUDA device");
  }
#endif
  if (p.dtype == DILATTN_F64)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': dtype f64 is CPU only (backends ref and cpu)", kBackendName);
  if (p.D > kMaxHeadDim)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': head_dim = %lld: the kernels take head dims up to %d",
                     kBackendName, static_cast<long long>(p.D), kMaxHeadDim);
  if (p.B * p.H > 65535)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': batch * heads = %lld: the launch grid takes at most 65535",
                     kBackendName, static_cast<long long>(p.B * p.H));
  if (ceil_div(p.Nq, 16) > 0x7fffffff)
    return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': seqlen_q = %lld is too long",
                     kBackendName, static_cast<long long>(p.Nq));
  return DILATTN_SUCCESS;
}

// Backward has no kernels yet, so it needs no workspace.
WorkspaceBytes workspace_bytes(const Problem& p) { return {workspace_layout(p).total, 0}; }

dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  dilattn_status st = can_run(p);
  if (st != DILATTN_SUCCESS) return st;
  if ((st = check_view(a.q, "q", false)) != DILATTN_SUCCESS) return st;
  if ((st = check_view(a.k, "k", false)) != DILATTN_SUCCESS) return st;
  if ((st = check_view(a.v, "v", false)) != DILATTN_SUCCESS) return st;
  if ((st = check_view(a.o, "o", true)) != DILATTN_SUCCESS) return st;
  if (a.lse != nullptr && (st = check_view(a.lse, "lse", true)) != DILATTN_SUCCESS) return st;

  cudaError_t e = cudaSuccess;
#ifdef __CUDACC__
  // Every tensor on one GPU, which runs the launches; the caller's current device is restored.
  const dilattn_tensor* views[5] = {a.q, a.k, a.v, a.o, a.lse};
  for (const dilattn_tensor* t : views)
    if (t != nullptr && t->device_index != a.q->device_index)
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "backend 'cuda': tensors on devices %d and %d; all must be on one GPU",
                       a.q->device_index, t->device_index);
  DeviceGuard device_guard;
  if ((e = device_guard.select(a.q->device_index)) != cudaSuccess)
    return cuda_failure(e, "cudaSetDevice");
#endif
  int device = 0;
  if ((e = cudaGetDevice(&device)) != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  cudaDeviceProp props;
  std::memset(&props, 0, sizeof(props));
  e = cudaGetDeviceProperties(&props, device);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDeviceProperties");
  const ChosenKernel kernel = choose(p, props.major);
  const size_t smem_limit = props.sharedMemPerBlockOptin > props.sharedMemPerBlock
                                ? props.sharedMemPerBlockOptin
                                : props.sharedMemPerBlock;
  if (kernel.smem > smem_limit)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': head_dim = %lld needs %zu bytes of shared memory per block, "
                     "the device has %zu",
                     kBackendName, static_cast<long long>(p.D), kernel.smem, smem_limit);
  if (kernel.smem > 48 * 1024 &&
      (e = cudaFuncSetAttribute(kernel.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kernel.smem))) != cudaSuccess)
    return cuda_failure(e, "cudaFuncSetAttribute");

  // Workspace and, for block-sparse attention, the device copy of the mask.
  const int64_t rows = p.B * p.H * p.Nq;
  const WorkspaceLayout ws = workspace_layout(p);
  unsigned char* base = static_cast<unsigned char*>(a.workspace);
  float* o_acc = reinterpret_cast<float*>(base + ws.o_acc);
  float* lse_acc = reinterpret_cast<float*>(base + ws.lse_acc);
  const BsrMask* mask = p.kind == DILATTN_KIND_BLOCK_SPARSE ? p.mask.get() : nullptr;
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE && mask == nullptr)
    return set_error(DILATTN_ERROR_INTERNAL, "block-sparse plan without a mask");
  const int64_t* mask_copy[3] = {nullptr, nullptr, nullptr};
  if (mask != nullptr) {
    const std::vector<int64_t>* arrays[3] = {&mask->row_ptr, &mask->col_idx, &mask->head_ptr};
    for (int n = 0; n < 3; ++n) {
      mask_copy[n] = reinterpret_cast<const int64_t*>(base + ws.mask[n]);
      const size_t bytes = arrays[n]->size() * sizeof(int64_t);
      if (bytes > 0 && (e = cudaMemcpy(base + ws.mask[n], arrays[n]->data(), bytes,
                                       cudaMemcpyHostToDevice)) != cudaSuccess)
        return cuda_failure(e, "cudaMemcpy of the mask");
    }
  }

  DILATTN_LAUNCH(init_accumulators_kernel, dim3(elementwise_blocks(rows * p.D)),
                 dim3(kElementwiseThreads), 0, 0)(o_acc, lse_acc, rows, p.D);
  if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "init_accumulators_kernel");

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
  fp.o_acc = o_acc;
  fp.lse_acc = lse_acc;
  fp.B = p.B;
  fp.Nq = p.Nq;
  fp.Nk = p.Nk;
  fp.H = p.H;
  fp.Hkv = p.Hkv;
  fp.D = p.D;
  fp.scale = static_cast<float>(p.scale);
  fp.causal = p.causal ? 1 : 0;
  fp.num_branches = p.num_branches();
  fp.head_mode = p.head_mode;

  // One launch per branch (dense and block-sparse: one); each covers disjoint rows.
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  for (int64_t br = 0; br < launches; ++br) {
    int64_t tiles = 0;
    if (p.kind == DILATTN_KIND_DENSE) {
      fp.kind = kKindDense;
      tiles = ceil_div(p.Nq, kernel.br);
    } else if (p.kind == DILATTN_KIND_DILATED) {
      fp.kind = kKindDilated;
      fp.branch = br;
      fp.w = p.branches[br].w;
      fp.r = p.branches[br].r;
      const int64_t wc = clipped_segment(fp.w, p.Nq);
      // The most rows a segment selects is ceil(wc / r) (offset 0).
      fp.tiles_per_group = ceil_div(ceil_div(wc, fp.r), kernel.br);
      tiles = segment_count(p.Nq, wc) * fp.tiles_per_group;
    } else {
      fp.kind = kKindSparse;
      fp.row_ptr = mask_copy[0];
      fp.col_idx = mask_copy[1];
      fp.head_ptr = mask_copy[2];
      fp.mask_heads = mask->num_heads;
      fp.bq = mask->bq;
      fp.bk = mask->bk;
      fp.I = mask->I;
      fp.tiles_per_group = ceil_div(mask->bq, kernel.br);
      tiles = mask->I * fp.tiles_per_group;
    }
    if (tiles > 0x7fffffff)
      return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': %lld query tiles exceed the grid",
                       kBackendName, static_cast<long long>(tiles));
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.B * p.H));
    DILATTN_LAUNCH(kernel.fn, grid, dim3(kernel.threads), kernel.smem, 0)(fp);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "forward kernel");
  }

  switch (p.dtype) {
    case DILATTN_F16: launch_finalize_output<__half>(o_acc, *a.o, p); break;
    case DILATTN_BF16: launch_finalize_output<__nv_bfloat16>(o_acc, *a.o, p); break;
    default: launch_finalize_output<float>(o_acc, *a.o, p); break;
  }
  if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "finalize_output_kernel");
  if (a.lse != nullptr) {
    DILATTN_LAUNCH(finalize_lse_kernel, dim3(elementwise_blocks(rows)), dim3(kElementwiseThreads),
                   0, 0)(lse_acc, a.lse->data, a.lse->dtype == DILATTN_F64 ? 1 : 0,
                         a.lse->strides[0], a.lse->strides[1], a.lse->strides[2], p.B, p.H, p.Nq);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "finalize_lse_kernel");
  }
  if ((e = cudaStreamSynchronize(0)) != cudaSuccess) return cuda_failure(e, "forward");
  return DILATTN_SUCCESS;
}

dilattn_status backward(const Problem&, const BackwardArgs&) {
  return set_error(DILATTN_ERROR_UNSUPPORTED,
                   "backend '%s': backward kernels not written yet (backends ref and cpu run "
                   "backward)",
                   kBackendName);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
