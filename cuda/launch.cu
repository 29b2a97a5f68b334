// launch.cu - the CUDA backend's forward launcher (SPEC 1-4) and its entry points: picks a
// kernel, checks the views, runs one launch per branch into an (O, LSE) workspace, converts to
// the outputs. The backward is launch_backward.cu, the ring's element work ring_ops.cu, what
// they share launch_shared.h; the kernels are reached through kernels.h.
//
// Built twice, as every file of the backend (cuda/meson.build): by nvcc as dilattn::cuda
// (kernels on a GPU), and by the host compiler as dilattn::emu (the same kernels, run by the
// SIMT emulator in emu/; its device memory is host memory, so this file treats pointers alike
// in both builds).
//
//   can_run             a device with a kernel image for it (device_info); f64 is CPU only;
//                       head dim <= kMaxHeadDim; a softcap and ALiBi slopes the f32 kernels
//                       can score (check_variant_values); B * H fits grid.y. The SPEC 10
//                       options themselves are refused or taken by lib/backend_table.cpp.
//   prepare             plan time: the block-sparse mask and the ALiBi slopes copied to the
//                       device once (LaunchPlanState), not per call.
//   forward             in the order it calls them, every launch on the caller's stream:
//     check_views       data pointers aligned to their element, no output dimension of stride 0
//                       that would make two rows write one address (SPEC 1);
//     begin_call        the tensors' GPU made current; its compute capability and shared
//                       memory asked once per device and process (device_info, launch_shared.h:
//                       no cudaGetDeviceProperties per call);
//     choose_kernel     MMA for f16/bf16 and MMA_TF32 (3xTF32) for f32, with D in {64, 128}
//                       on sm_80+, else SIMT (forward_kernel_for); a window, softcap or ALiBi
//                       (sinks too, on SIMT): the chosen kernel's variant instance (sinks
//                       alone: the tensor-core kernels' own, pick_kernel); dropout (SPEC 11): its
//                       dropout instance (with SPEC 10 options too: SIMT's, which runs both);
//                       its shared memory within the device's limit; on sm_90 the Hopper
//                       kernel instead for dense and dilated problems it takes
//                       (docs/spec.md 14.5; DILATTN_CUDA_WGMMA=0 or 1 changes the rule;
//                       wgmma_maps_for: forward_wgmma.cu, its tensor maps per launch);
//     prepare_workspace from the plan's pool (workspace_layout): with sinks, the call's H sink
//                       logits (SPEC 10.3); several dilated branches: o_acc [B, H, Nq, D]
//                       f32 = 0, lse_acc [B, H, Nq] f64 = -inf (with sinks: the head's sink,
//                       so the sink joins each row once);
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
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "dtype_convert.h"
#include "errors.h"
#include "kernel_choice.h"
#include "kernels.h"
#include "launch_shared.h"
#include "sequence_rows.h"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ================================================================ small kernels
// The running (O, LSE) before any branch: no keys yet. With sinks (SPEC 10.3) the row starts
// as the sink's term alone, O = 0 and LSE = sinks[h] (rows = (b * H + h) * Nq + i), so each
// branch's merge adds to it and the sink joins the row once.
__global__ void init_accumulators_kernel(float* o_acc, double* lse_acc, int64_t rows,
                                         int64_t D, const double* sinks, int64_t H, int64_t Nq) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < rows * D; idx += stride) o_acc[idx] = 0.0f;
  for (int64_t idx = start; idx < rows; idx += stride)
    lse_acc[idx] = sinks != nullptr ? sinks[(idx / Nq) % H] : -static_cast<double>(INFINITY);
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

// ---------------------------------------------------------------- check_views
// SPEC 1 (check_view, launch_shared.h) for the five views, all on one GPU.
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

// ---------------------------------------------------------------- choose_kernel
// forward_kernel_for's choice, from the kernel files (kernels.h).
// Sinks alone keep the tensor-core kernels' plain (or dropout) instance, which joins them as each
// row finishes; the SIMT forward joins them in its variant instance only (launch_shared.h).
ForwardKernel pick_kernel(const Problem& p, int cc_major) {
  const bool scores = uses_score_variants(p), dropout = p.dropout_p > 0;
  const bool simt_variants = uses_variant_kernels(p);
  const KernelChoice choice = forward_kernel_for(p.dtype, p.D, cc_major, scores, dropout);
  const bool mma = choice == KernelChoice::mma;
  switch (p.dtype) {
    case DILATTN_F16:
      return mma ? mma_forward<__half>(p.D, scores, dropout)
                 : simt_forward<__half>(p.D, simt_variants, dropout);
    case DILATTN_BF16:
      return mma ? mma_forward<__nv_bfloat16>(p.D, scores, dropout)
                 : simt_forward<__nv_bfloat16>(p.D, simt_variants, dropout);
    default:  // f32: 3xTF32 on tensor cores for D = 64 and 128 (forward_mma_tf32.cu)
      return choice == KernelChoice::mma_tf32 ? tf32_forward(p.D, scores, dropout)
                                              : simt_forward<float>(p.D, simt_variants, dropout);
  }
}

// The kernel for this problem on the device, its shared memory checked and granted (a kernel's
// limit is raised once per device to the largest size asked so far, not per call).
dilattn_status choose_kernel(const Problem& p, DeviceInfo& device, ForwardKernel* kernel) {
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
// right), and with sinks the call's H sink logits (f64). Each piece starts on a 256-byte
// boundary. The block-sparse mask and the ALiBi slopes are the plan's (LaunchPlanState), not
// the workspace's.
struct WorkspaceLayout {
  size_t o_acc = 0, lse_acc = 0, sinks = 0, total = 0;
};

// One branch (dense, block-sparse, one dilated branch): the kernels write O and LSE directly
// (forward_outputs.cuh), so there is no workspace and no init or finalize pass.
bool writes_outputs_directly(const Problem& p) {
  return p.kind != DILATTN_KIND_DILATED || p.num_branches() == 1;
}

WorkspaceLayout workspace_layout(const Problem& p) {
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(p.B * p.H * p.Nq);
  WorkspaceLayout l;
  size_t off = 0;
  if (!writes_outputs_directly(p)) {
    off = aligned(rows * static_cast<size_t>(p.D) * sizeof(float));
    l.lse_acc = off;
    off += aligned(rows * sizeof(double));
  }
  l.sinks = off;
  if (p.sinks) off += aligned(static_cast<size_t>(p.H) * sizeof(double));
  l.total = off;
  return l;
}

// Carves a.workspace, finds the plan's device arrays (mask, ALiBi slopes), copies the call's
// sink logits over, and starts the accumulators at "no key yet": O = 0, LSE = -inf (or the
// sink).
dilattn_status prepare_workspace(const Problem& p, const ForwardArgs& a, int device,
                                 cudaStream_t stream, Workspace* ws) {
  const WorkspaceLayout layout = workspace_layout(p);
  unsigned char* base = static_cast<unsigned char*>(a.workspace);
  ws->o_acc = reinterpret_cast<float*>(base + layout.o_acc);
  ws->lse_acc = reinterpret_cast<double*>(base + layout.lse_acc);
  ws->plan = PlanArrays{};
  ws->sinks = nullptr;
  dilattn_status st = plan_arrays_of(p, device, &ws->plan);
  if (st != DILATTN_SUCCESS) return st;
  if ((st = copy_sinks(p, a.sinks, base + layout.sinks, stream, &ws->sinks)) != DILATTN_SUCCESS)
    return st;
  if (writes_outputs_directly(p)) return DILATTN_SUCCESS;
  const int64_t rows = p.B * p.H * p.Nq;
  DILATTN_LAUNCH(init_accumulators_kernel, dim3(elementwise_blocks(rows * p.D)),
                 dim3(kElementwiseThreads), 0, stream)(ws->o_acc, ws->lse_acc, rows, p.D,
                                                      ws->sinks, p.H, p.Nq);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_failure(e, "init_accumulators_kernel");
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- launch_branches
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

// One launch per dilated branch, one for dense and block-sparse; each covers disjoint rows
// and merges them into the workspace. launch(fp, grid, index) launches one with fp prepared
// for it (prepare_launch) and returns its status.
template <class Launch>
dilattn_status for_each_branch_launch(const Problem& p, int block_rows, ForwardParams fp,
                                      Launch launch) {
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  for (int64_t index = 0; index < launches; ++index) {
    const int64_t tiles = prepare_launch(p, block_rows, index, &fp);
    if (tiles > 0x7fffffff)
      return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': %lld query tiles exceed the grid",
                       kBackendName, static_cast<long long>(tiles));
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.B * p.H));
    const dilattn_status st = launch(fp, grid, index);
    if (st != DILATTN_SUCCESS) return st;
  }
  return DILATTN_SUCCESS;
}

dilattn_status launch_branches(const Problem& p, const ForwardKernel& kernel, cudaStream_t stream,
                               ForwardParams fp) {
  return for_each_branch_launch(p, kernel.block_rows, fp,
                                [&](const ForwardParams& f, dim3 grid, int64_t) {
    DILATTN_LAUNCH(kernel.fn, grid, dim3(kernel.threads), kernel.smem, stream)(f);
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? cuda_failure(e, "forward kernel") : DILATTN_SUCCESS;
  });
}

// ---------------------------------------------------------------- the Hopper kernel
// forward_wgmma.cu runs when kernel_choice.h's rule says the Hopper path is open: wanted for
// the problem's kind (hopper_wanted, with DILATTN_CUDA_WGMMA read once: docs/spec.md 14.5), the
// build holding sm_90a code (the emulator always does), an sm_90 device, and K and V views
// every launch's tensor maps can be made for.
HopperMode hopper_mode() {
  static const HopperMode mode = hopper_mode_from(std::getenv("DILATTN_CUDA_WGMMA"));
  return mode;
}

constexpr bool kBuildHasSm90a =
#if !defined(__CUDACC__) || defined(DILATTN_SM90A)
    true;
#else
    false;
#endif

// One launch's tensor maps (kernels.h, WgmmaTensorMaps): for K and V, map `residue` views the
// rows residue, residue + step, ... (step: the branch's dilation, 1 for dense and block-sparse)
// as [B, Hkv, rows, D] boxes of 128 rows by 64 dims, 128-byte swizzled, rows past the tensor
// zero. False when a view cannot be one (the driver's rules: strides multiples of 16 bytes,
// the rows of 16-byte aligned; kv_vec16 holds those) or the step exceeds kWgmmaMaxStep.
bool make_wgmma_tensor_maps(const Problem& p, const ForwardParams& fp, WgmmaTensorMaps* maps) {
  const int64_t step = fp.kind == kKindDilated ? fp.r : 1;
  if (!fp.kv_vec16 || step < 1 || step > kWgmmaMaxStep) return false;
  std::memset(static_cast<void*>(maps), 0, sizeof *maps);
  const CUtensorMapDataType type = p.dtype == DILATTN_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t bytes = 2;
  struct View {
    const void* data;
    const int64_t* stride;
    CUtensorMap* maps;
  };
  const View views[2] = {{fp.k, fp.k_stride, maps->k}, {fp.v, fp.v_stride, maps->v}};
  for (const View& view : views) {
    if (view.stride[3] != 1) return false;
    for (int64_t residue = 0; residue < step && residue < fp.Nk; ++residue) {
      const cuuint64_t dims[4] = {static_cast<cuuint64_t>(fp.D),
                                  static_cast<cuuint64_t>((fp.Nk - residue + step - 1) / step),
                                  static_cast<cuuint64_t>(fp.Hkv), static_cast<cuuint64_t>(fp.B)};
      const cuuint64_t strides[3] = {static_cast<cuuint64_t>(step * view.stride[1]) * bytes,
                                     static_cast<cuuint64_t>(view.stride[2]) * bytes,
                                     static_cast<cuuint64_t>(view.stride[0]) * bytes};
      const cuuint32_t box[4] = {64, 128, 1, 1};
      const cuuint32_t element_strides[4] = {1, 1, 1, 1};
      void* address = const_cast<unsigned char*>(static_cast<const unsigned char*>(view.data) +
                                                 residue * view.stride[1] * 2);
      const CUresult r = encode_tensor_map_tiled(
          &view.maps[residue], type, 4, address, dims, strides, box, element_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) return false;
    }
  }
  return true;
}

std::atomic<uint64_t>& wgmma_launches() {
  static std::atomic<uint64_t> launches{0};
  return launches;
}

WgmmaForwardKernel pick_wgmma_kernel(const Problem& p) {
  return p.dtype == DILATTN_F16 ? wgmma_forward<__half>(p.D) : wgmma_forward<__nv_bfloat16>(p.D);
}

// Whether this call runs forward_wgmma.cu: the rule, and every launch's tensor maps, made
// here once (maps[i] for launch i); false leaves the call to forward_mma.cu.
bool wgmma_maps_for(const Problem& p, const DeviceInfo& device, ForwardParams fp,
                    std::vector<WgmmaTensorMaps>* maps) {
  const bool open = hopper_wanted(hopper_mode(), p.kind) && kBuildHasSm90a;
  if (forward_kernel_for(p.dtype, p.D, device.major, uses_score_variants(p), p.dropout_p > 0,
                         open) != KernelChoice::wgmma)
    return false;
  const WgmmaForwardKernel kernel = pick_wgmma_kernel(p);
  if (kernel.smem > device.smem_limit) return false;
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  maps->resize(static_cast<size_t>(launches));
  for (int64_t launch = 0; launch < launches; ++launch) {
    prepare_launch(p, kernel.block_rows, launch, &fp);
    if (!make_wgmma_tensor_maps(p, fp, &(*maps)[static_cast<size_t>(launch)])) return false;
  }
  return true;
}

// launch_branches for forward_wgmma.cu: each launch with its tensor maps.
dilattn_status launch_wgmma_branches(const Problem& p, DeviceInfo& device, cudaStream_t stream,
                                     ForwardParams fp, const std::vector<WgmmaTensorMaps>& maps) {
  const WgmmaForwardKernel kernel = pick_wgmma_kernel(p);
  const dilattn_status st = grant_shared_memory(device, kernel.fn, kernel.smem);
  if (st != DILATTN_SUCCESS) return st;
  return for_each_branch_launch(p, kernel.block_rows, fp,
                                [&](const ForwardParams& f, dim3 grid, int64_t index) {
    DILATTN_LAUNCH(kernel.fn, grid, dim3(kernel.threads), kernel.smem,
                   stream)(f, maps[static_cast<size_t>(index)]);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_failure(e, "forward_wgmma_kernel");
    wgmma_launches().fetch_add(1);
    return DILATTN_SUCCESS;
  });
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

// Launches of forward_wgmma.cu so far, in this process (kernels.h).
uint64_t wgmma_launch_count() { return wgmma_launches().load(); }

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
  if ((st = check_variant_values(p)) != DILATTN_SUCCESS) return st;
  if (p.B * p.H > 65535)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': batch * heads = %lld: the launch grid takes at most 65535",
                     kBackendName, static_cast<long long>(p.B * p.H));
  if (ceil_div(p.Nq, 16) > 0x7fffffff)
    return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': seqlen_q = %lld is too long",
                     kBackendName, static_cast<long long>(p.Nq));
  return DILATTN_SUCCESS;
}

// The backward's workspace (launch_backward.cu).
size_t backward_workspace_bytes(const Problem& p);

WorkspaceBytes workspace_bytes(const Problem& p) {
  return {workspace_layout(p).total, backward_workspace_bytes(p)};
}

// The plan's arrays (the block-sparse mask of SPEC 4, the ALiBi slopes of SPEC 10.1) to the
// current device, once per plan.
dilattn_status prepare(Problem& p) {
  if (!has_plan_arrays(p)) return DILATTN_SUCCESS;
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  auto state = std::make_shared<LaunchPlanState>();
  PlanArrays arrays;
  const dilattn_status st = state->arrays_on(device, p, &arrays);
  if (st != DILATTN_SUCCESS) return st;
  p.backend_state = std::move(state);
  return DILATTN_SUCCESS;
}

namespace {

// One problem (a plan's, or one sequence of a packed batch) on the call's stream.
dilattn_status forward_one(const Problem& p, const ForwardArgs& a) {
  CallDevice call;
  ForwardKernel kernel;
  Workspace ws;
  dilattn_status st = begin_call(*a.q, a.run, &call);
  if (st != DILATTN_SUCCESS) return st;
  if ((st = choose_kernel(p, *call.info, &kernel)) != DILATTN_SUCCESS) return st;
  if ((st = prepare_workspace(p, a, call.device, call.stream, &ws)) != DILATTN_SUCCESS) return st;
  const ForwardParams fp =
      with_shared_pairs(p, call.info->major, with_direct_outputs(p, a, shared_params(p, a, ws)));
  std::vector<WgmmaTensorMaps> maps;
  if (wgmma_maps_for(p, *call.info, fp, &maps))
    st = launch_wgmma_branches(p, *call.info, call.stream, fp, maps);
  else
    st = launch_branches(p, kernel, call.stream, fp);
  if (st != DILATTN_SUCCESS) return st;
  return finalize(p, a, ws, call.stream);
}

// SPEC 10.2: a packed batch runs one sequence at a time (Problem::sequence_problem), each on
// its rows of the batch's tensors, in order on the call's stream and in the same workspace
// (each sequence's is no larger than the batch's); a sequence with no rows has nothing to do.
// A synchronous call waits once, at the end.
dilattn_status forward_packed(const Problem& p, const ForwardArgs& a) {
  ForwardArgs each = a;
  each.run.synchronous = false;
  return run_sequences(p, *a.q, a.run, "forward",
                       [&](const Problem& one, int64_t q0, int64_t k0, cudaStream_t) {
    if (one.Nq == 0) return DILATTN_SUCCESS;
    const dilattn_tensor q = rows_view(*a.q, 1, q0, one.Nq), o = rows_view(*a.o, 1, q0, one.Nq);
    const dilattn_tensor k = rows_view(*a.k, 1, k0, one.Nk), v = rows_view(*a.v, 1, k0, one.Nk);
    const dilattn_tensor lse =
        a.lse != nullptr ? rows_view(*a.lse, 2, q0, one.Nq) : dilattn_tensor{};
    each.q = &q;
    each.k = &k;
    each.v = &v;
    each.o = &o;
    each.lse = a.lse != nullptr ? &lse : nullptr;
    return forward_one(one, each);
  });
}

}  // namespace

// The plan was checked by can_run when it was made; a call checks what can differ per call:
// the views and the device the tensors are on (whose facts are cached, device_info).
dilattn_status forward(const Problem& p, const ForwardArgs& a) {
  dilattn_status st = check_views(a);
  if (st == DILATTN_SUCCESS) st = check_placement(p);  // a ring's sub-problem (SPEC 5.5)
  if (st != DILATTN_SUCCESS) return st;
  return p.is_packed() ? forward_packed(p, a) : forward_one(p, a);
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

// On an sm_90, which forward kernel runs (docs/spec.md 14.5), for the "GPU present" line.
std::string hopper_report() {
  if (!kBuildHasSm90a) return "forward on the sm_80 kernels (no sm_90a code built)";
  switch (hopper_mode()) {
    case HopperMode::never: return "forward on the sm_80 kernels (DILATTN_CUDA_WGMMA=0)";
    case HopperMode::always:
      return "forward on the Hopper kernel wherever it runs (DILATTN_CUDA_WGMMA=1)";
    default: return "forward on the Hopper kernel for dense and dilated f16/bf16, D 64 and 128";
  }
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
  else if (info.major == 9) report += ", " + hopper_report();
  return report;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
