// launch_backward.cu - the CUDA backend's backward launcher (SPEC 6): checks the views, picks
// the kernels, runs the pre-pass, the dQ pass and the dK/dV pass into f32 accumulators, and
// stores the gradients.
//
// Built the same two ways as the forward launcher (cuda/meson.build): nvcc into dilattn::cuda,
// the host compiler with the SIMT emulator into dilattn::emu. Uses the launchers' shared
// helpers (launch_shared.h: cuda_failure, check_view, elementwise_blocks, begin_call with the
// cached device facts, the plan's device mask LaunchPlanState, shared_params and
// prepare_launch) and reaches the kernels through kernels.h.
//
//   backward, in the order it calls them:
//     check_backward_views    as the forward's check_views, for the nine tensors;
//     choose_backward_kernels MMA (f16/bf16) or MMA_TF32 (f32) with D in {64, 128} on
//                             sm_80+, else SIMT
//                             (backward_kernel_for), shared memory checked and granted;
//     prepare_backward_workspace  from the plan's pool (backward_workspace_layout): the mask
//                             copied over, D_i = <dO_i, O_i> and lse_s = lse_in_score_domain(LSE)
//                             per row and the rows not all finite (the pre-pass: the
//                             tensor-core kernels' NaN rule, backward_mma.cu), with d_sinks
//                             wanted each row's term of it (SPEC 10.3), dQ, dK, dV
//                             accumulators = 0;
//     run_dq_pass             one launch per dilated branch (one for dense, block-sparse);
//     run_dkdv_pass           one launch per branch whose blocks walk a kv head's query
//                             heads in head order (one launch per (branch, query head) for
//                             the tensor-core variant instances on dilated problems): each
//                             adds its pairs to dK and dV in turn, so GQA's and the
//                             branches' sums have a fixed order without atomics (SPEC 6:
//                             deterministic);
//     store_gradients         dQ = scale dq_acc, dK = scale dk_acc, dV = dv_acc, to the views;
//                             d_sinks: the rows' terms added per head in a fixed order
//                             (reduce_sink_terms_kernel), copied to the caller's array.
//
// Checked by tests/kernels/test_backward_kernels.cpp (every kernel x dtype x kind, emulator,
// three thread orders) and tests/kernels/test_cli_backend_emu.py (`dilattn backward`).
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend.h"
#include "errors.h"
#include "kernel_choice.h"
#include "kernels.h"
#include "launch_shared.h"
#include "sequence_rows.h"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ================================================================ small kernels
// What the pre-pass reads and writes; passed by value.
struct RowTermsParams {
  const void *o, *d_o;
  int64_t o_stride[4], d_o_stride[4];
  const void* lse;
  int32_t lse_is_f64;
  int64_t lse_stride[3];
  float post;          // score_scale(scale).post
  float *di, *lse_s;   // [B, H, Nq]
  // SPEC 10.3, with d_sinks wanted: the sinks [H] and each row's term of d_sinks [B, H, Nq].
  const double* sinks;
  double* sink_terms;
  const void* q;
  int64_t q_stride[4];
  int32_t* row_bad;    // [B, H, Nq] Q or dO of the row not all finite
  int64_t B, H, Nq, D;
};

// The pre-pass, one thread per row (b, h, i): D_i = <dO_i, O_i> summed in d order, the
// forward's LSE (f32 or f64) in the score domain, where P = 2^(post (s - lse_s)), and whether
// the row's Q or dO holds a value that is not finite.
template <class T>
__global__ void backward_row_terms_kernel(RowTermsParams r) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = start; row < r.B * r.H * r.Nq; row += stride) {  // (b * H + h) * Nq + i
    const int64_t i = row % r.Nq, h = (row / r.Nq) % r.H, b = row / (r.Nq * r.H);
    float sum = 0.0f;
    bool finite = true;
    for (int64_t d = 0; d < r.D; ++d) {
      const float d_o = to_float(load_bnhd<T>(r.d_o, r.d_o_stride, b, i, h, d));
      const float q = to_float(load_bnhd<T>(r.q, r.q_stride, b, i, h, d));
      sum += d_o * to_float(load_bnhd<T>(r.o, r.o_stride, b, i, h, d));
      finite = finite && isfinite(d_o) && isfinite(q);
    }
    r.di[row] = sum;
    r.row_bad[row] = finite ? 0 : 1;
    const int64_t at = b * r.lse_stride[0] + h * r.lse_stride[1] + i * r.lse_stride[2];
    const double lse = r.lse_is_f64 ? static_cast<const double*>(r.lse)[at]
                                    : static_cast<double>(static_cast<const float*>(r.lse)[at]);
    r.lse_s[row] = lse_in_score_domain(lse, r.post);
    // dsigma_h's term of the row: -exp(sigma_h - LSE_i) D_i, none for an empty row (SPEC 10.3).
    if (r.sink_terms != nullptr)
      r.sink_terms[row] = lse == -static_cast<double>(INFINITY)
                              ? 0.0
                              : -exp(r.sinks[h] - lse) * static_cast<double>(sum);
  }
}

constexpr int kSinkReduceThreads = 256;

// d_sinks[h] = the sum of the row terms of head h over b and i, one block per head: each
// thread sums its rows in order, then the block adds the threads' sums in a fixed tree, so the
// result is the same bits in every run and thread order (SPEC 6's determinism).
__global__ void reduce_sink_terms_kernel(const double* terms, double* d_sinks, int64_t B,
                                         int64_t H, int64_t Nq) {
  __shared__ double partial[kSinkReduceThreads];
  const int64_t h = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  double sum = 0.0;
  for (int64_t n = tid; n < B * Nq; n += kSinkReduceThreads) {
    const int64_t b = n / Nq, i = n % Nq;
    sum += terms[(b * H + h) * Nq + i];
  }
  partial[tid] = sum;
  __syncthreads();
  for (int width = kSinkReduceThreads / 2; width > 0; width >>= 1) {
    if (tid < width) partial[tid] += partial[tid + width];
    __syncthreads();
  }
  if (tid == 0) d_sinks[h] = partial[0];
}

// One thread per key row (b, hk, j): whether K's row holds a value that is not finite.
template <class T>
__global__ void backward_key_flags_kernel(const void* k, int64_t s0, int64_t s1, int64_t s2,
                                          int64_t s3, int64_t B, int64_t Hkv, int64_t Nk,
                                          int64_t D, int32_t* key_bad) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t strides[4] = {s0, s1, s2, s3};
  for (int64_t row = start; row < B * Hkv * Nk; row += stride) {  // (b * Hkv + hk) * Nk + j
    const int64_t j = row % Nk, hk = (row / Nk) % Hkv, b = row / (Nk * Hkv);
    bool finite = true;
    for (int64_t d = 0; d < D; ++d) finite = finite && isfinite(to_float(load_bnhd<T>(k, strides, b, j, hk, d)));
    key_bad[row] = finite ? 0 : 1;
  }
}

__global__ void zero_floats_kernel(float* x, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < n; idx += stride) x[idx] = 0.0f;
}

// out[b, n, hh, d] = factor * acc[b, hh, n, d], rounded once to the gradient's dtype.
template <class T>
__global__ void store_gradient_kernel(const float* acc, T* out, int64_t s0, int64_t s1,
                                      int64_t s2, int64_t s3, int64_t B, int64_t N,
                                      int64_t heads, int64_t D, float factor) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < B * heads * N * D; idx += stride) {
    const int64_t d = idx % D, row = idx / D;  // row = (b * heads + hh) * N + n
    const int64_t n = row % N, hh = (row / N) % heads, b = row / (N * heads);
    out[b * s0 + n * s1 + hh * s2 + d * s3] = from_float<T>(factor * acc[idx]);
  }
}

// out[b, n, hh, d] = 0: the dK and dV rows of a packed sequence with no rows, which no pass
// visits (SPEC 6, 10.2).
template <class T>
__global__ void zero_view_kernel(T* out, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                                 int64_t B, int64_t N, int64_t heads, int64_t D) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < B * heads * N * D; idx += stride) {
    const int64_t d = idx % D, row = idx / D;  // row = (b * heads + hh) * N + n
    const int64_t n = row % N, hh = (row / N) % heads, b = row / (N * heads);
    out[b * s0 + n * s1 + hh * s2 + d * s3] = from_float<T>(0.0f);
  }
}

// ================================================================ launcher
namespace {

// ---------------------------------------------------------------- check_backward_views
dilattn_status check_backward_views(const BackwardArgs& a) {
  const struct {
    const dilattn_tensor* view;
    const char* name;
    bool written;
  } views[9] = {{a.q, "q", false},   {a.k, "k", false},     {a.v, "v", false},
                {a.o, "o", false},   {a.lse, "lse", false}, {a.d_o, "d_o", false},
                {a.dq, "dq", true}, {a.dk, "dk", true},    {a.dv, "dv", true}};
  for (const auto& v : views) {
    const dilattn_status st = check_view(v.view, v.name, v.written);
    if (st != DILATTN_SUCCESS) return st;
  }
#ifdef __CUDACC__
  for (const auto& v : views)
    if (v.view->device_index != a.q->device_index)
      return set_error(DILATTN_ERROR_UNSUPPORTED,
                       "backend 'cuda': tensors on devices %d and %d; all must be on one GPU",
                       a.q->device_index, v.view->device_index);
#endif
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- choose_backward_kernels
// backward_kernel_for's choice, from the kernel files (kernels.h).
// Sinks do not choose the instance: no backward kernel reads them (the forward's LSE holds them;
// d_sinks is the pre-pass's, below).
BackwardKernels pick_backward_kernels(const Problem& p, int cc_major) {
  const bool variants = uses_score_variants(p), dropout = p.dropout_p > 0;
  const KernelChoice choice = backward_kernel_for(p.dtype, p.D, cc_major, variants, dropout);
  const bool mma = choice == KernelChoice::mma;
  switch (p.dtype) {
    case DILATTN_F16:
      return mma ? mma_backward<__half>(p.D, variants, dropout)
                 : simt_backward<__half>(p.D, variants, dropout);
    case DILATTN_BF16:
      return mma ? mma_backward<__nv_bfloat16>(p.D, variants, dropout)
                 : simt_backward<__nv_bfloat16>(p.D, variants, dropout);
    default:
      return choice == KernelChoice::mma_tf32 ? tf32_backward(p.D, variants, dropout)
                                              : simt_backward<float>(p.D, variants, dropout);
  }
}

// The kernel's shared memory checked against the device, then granted once per device
// (grant_shared_memory, launch_shared.h).
dilattn_status grant_smem(DeviceInfo& device, BackwardKernelFn fn, size_t smem, int64_t D) {
  if (smem > device.smem_limit)
    return set_error(DILATTN_ERROR_UNSUPPORTED,
                     "backend '%s': head_dim = %lld needs %zu bytes of shared memory per block "
                     "in the backward, the device has %zu",
                     kBackendName, static_cast<long long>(D), smem, device.smem_limit);
  return grant_shared_memory(device, fn, smem);
}

// From the device's cached facts (device_info): no property query per call.
dilattn_status choose_backward_kernels(const Problem& p, DeviceInfo& device,
                                       BackwardKernels* kernels) {
  *kernels = pick_backward_kernels(p, device.major);
  dilattn_status st = grant_smem(device, kernels->dq, kernels->dq_smem, p.D);
  if (st == DILATTN_SUCCESS) st = grant_smem(device, kernels->dkdv, kernels->dkdv_smem, p.D);
  return st;
}

// ---------------------------------------------------------------- prepare_backward_workspace
// The backward's device workspace: f32 D_i and lse_s [B, H, Nq], f32 accumulators dQ
// [B, H, Nq, D], dK and dV [B, Hkv, Nk, D], int32 row marks [B, H, Nq] and key marks
// [B, Hkv, Nk]; with sinks (SPEC 10.3) the call's sinks [H], the rows' d_sinks terms
// [B, H, Nq] and d_sinks [H], f64. Each piece starts on a 256-byte boundary. The block-sparse
// mask and the ALiBi slopes are the plan's (LaunchPlanState, copied once), not the workspace's.
struct BackwardWorkspaceLayout {
  size_t di = 0, lse_s = 0, dq = 0, dk = 0, dv = 0, row_bad = 0, key_bad = 0;
  size_t sinks = 0, sink_terms = 0, d_sinks = 0, total = 0;
};

BackwardWorkspaceLayout backward_workspace_layout(const Problem& p) {
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t q_rows = static_cast<size_t>(p.B * p.H * p.Nq);
  const size_t kv_rows = static_cast<size_t>(p.B * p.Hkv * p.Nk);
  const size_t d = static_cast<size_t>(p.D);
  BackwardWorkspaceLayout l;
  size_t off = 0;
  l.di = off;
  off += aligned(q_rows * sizeof(float));
  l.lse_s = off;
  off += aligned(q_rows * sizeof(float));
  l.dq = off;
  off += aligned(q_rows * d * sizeof(float));
  l.dk = off;
  off += aligned(kv_rows * d * sizeof(float));
  l.dv = off;
  off += aligned(kv_rows * d * sizeof(float));
  l.row_bad = off;
  off += aligned(q_rows * sizeof(int32_t));
  l.key_bad = off;
  off += aligned(kv_rows * sizeof(int32_t));
  if (p.sinks) {
    l.sinks = off;
    off += aligned(static_cast<size_t>(p.H) * sizeof(double));
    l.sink_terms = off;
    off += aligned(q_rows * sizeof(double));
    l.d_sinks = off;
    off += aligned(static_cast<size_t>(p.H) * sizeof(double));
  }
  l.total = off;
  return l;
}

struct BackwardWorkspace {
  float *di, *lse_s, *dq, *dk, *dv;
  int32_t *row_bad, *key_bad;
  PlanArrays plan;          // the plan's device arrays (mask, ALiBi slopes)
  const double* sinks;      // the call's sinks on the device; null: none
  double *sink_terms, *d_sinks;  // null unless d_sinks is wanted
};

// Carves a.workspace, finds the plan's device arrays (mask, ALiBi slopes) and copies the
// call's sinks over.
dilattn_status prepare_backward_workspace(const Problem& p, const BackwardArgs& a, int device,
                                          cudaStream_t stream, BackwardWorkspace* ws) {
  const BackwardWorkspaceLayout layout = backward_workspace_layout(p);
  unsigned char* base = static_cast<unsigned char*>(a.workspace);
  ws->di = reinterpret_cast<float*>(base + layout.di);
  ws->lse_s = reinterpret_cast<float*>(base + layout.lse_s);
  ws->dq = reinterpret_cast<float*>(base + layout.dq);
  ws->dk = reinterpret_cast<float*>(base + layout.dk);
  ws->dv = reinterpret_cast<float*>(base + layout.dv);
  ws->row_bad = reinterpret_cast<int32_t*>(base + layout.row_bad);
  ws->key_bad = reinterpret_cast<int32_t*>(base + layout.key_bad);
  const bool d_sinks_wanted = p.sinks && a.sinks.d_values != nullptr;
  ws->sink_terms = d_sinks_wanted ? reinterpret_cast<double*>(base + layout.sink_terms) : nullptr;
  ws->d_sinks = d_sinks_wanted ? reinterpret_cast<double*>(base + layout.d_sinks) : nullptr;
  const dilattn_status st = plan_arrays_of(p, device, &ws->plan);
  if (st != DILATTN_SUCCESS) return st;
  return copy_sinks(p, a.sinks, base + layout.sinks, stream, &ws->sinks);
}

// The pre-pass (D_i, lse_s) and the accumulators at zero.
dilattn_status run_pre_pass(const Problem& p, const BackwardArgs& a, const BackwardWorkspace& ws,
                            cudaStream_t stream) {
  RowTermsParams r;
  std::memset(&r, 0, sizeof(r));
  r.o = a.o->data;
  r.d_o = a.d_o->data;
  for (int dim = 0; dim < 4; ++dim) {
    r.o_stride[dim] = a.o->strides[dim];
    r.d_o_stride[dim] = a.d_o->strides[dim];
  }
  r.lse = a.lse->data;
  r.lse_is_f64 = a.lse->dtype == DILATTN_F64 ? 1 : 0;
  for (int dim = 0; dim < 3; ++dim) r.lse_stride[dim] = a.lse->strides[dim];
  r.post = kernel_score_scale(p).post;
  r.di = ws.di;
  r.lse_s = ws.lse_s;
  r.q = a.q->data;
  for (int dim = 0; dim < 4; ++dim) r.q_stride[dim] = a.q->strides[dim];
  r.row_bad = ws.row_bad;
  r.sinks = ws.sinks;
  r.sink_terms = ws.sink_terms;
  r.B = p.B;
  r.H = p.H;
  r.Nq = p.Nq;
  r.D = p.D;
  const dim3 grid(elementwise_blocks(p.B * p.H * p.Nq)), block(kElementwiseThreads);
  switch (p.dtype) {
    case DILATTN_F16:
      DILATTN_LAUNCH(backward_row_terms_kernel<__half>, grid, block, 0, stream)(r);
      break;
    case DILATTN_BF16:
      DILATTN_LAUNCH(backward_row_terms_kernel<__nv_bfloat16>, grid, block, 0, stream)(r);
      break;
    default: DILATTN_LAUNCH(backward_row_terms_kernel<float>, grid, block, 0, stream)(r); break;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_failure(e, "backward_row_terms_kernel");
  const dim3 key_grid(elementwise_blocks(p.B * p.Hkv * p.Nk));
  const int64_t* ks = a.k->strides;
  switch (p.dtype) {
    case DILATTN_F16:
      DILATTN_LAUNCH(backward_key_flags_kernel<__half>, key_grid, block, 0, stream)(
          a.k->data, ks[0], ks[1], ks[2], ks[3], p.B, p.Hkv, p.Nk, p.D, ws.key_bad);
      break;
    case DILATTN_BF16:
      DILATTN_LAUNCH(backward_key_flags_kernel<__nv_bfloat16>, key_grid, block, 0, stream)(
          a.k->data, ks[0], ks[1], ks[2], ks[3], p.B, p.Hkv, p.Nk, p.D, ws.key_bad);
      break;
    default:
      DILATTN_LAUNCH(backward_key_flags_kernel<float>, key_grid, block, 0, stream)(
          a.k->data, ks[0], ks[1], ks[2], ks[3], p.B, p.Hkv, p.Nk, p.D, ws.key_bad);
      break;
  }
  if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "backward_key_flags_kernel");
  const int64_t q_elems = p.B * p.H * p.Nq * p.D, kv_elems = p.B * p.Hkv * p.Nk * p.D;
  const struct {
    float* acc;
    int64_t n;
  } accs[3] = {{ws.dq, q_elems}, {ws.dk, kv_elems}, {ws.dv, kv_elems}};
  for (const auto& acc : accs) {
    DILATTN_LAUNCH(zero_floats_kernel, dim3(elementwise_blocks(acc.n)), dim3(kElementwiseThreads),
                   0, stream)(acc.acc, acc.n);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_failure(e, "zero_floats_kernel");
  }
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- the two passes
// What every launch of this backward shares: the forward's index part (shared_params, with no
// forward workspace; shared pairs where the forward would share them, with_shared_pairs) and
// the backward's pointers.
BackwardParams backward_params(const Problem& p, const BackwardArgs& a,
                               const BackwardWorkspace& ws, int cc_major) {
  BackwardParams bp;
  std::memset(&bp, 0, sizeof(bp));
  ForwardArgs fa{a.q, a.k, a.v, nullptr, nullptr, nullptr, a.run};
  fa.dropout = a.dropout;  // SPEC 11.3: the forward's seed and offset, drawn again
  Workspace fws{};
  fws.plan = ws.plan;
  fws.sinks = ws.sinks;
  bp.ix = with_shared_pairs(p, cc_major, shared_params(p, fa, fws));
  bp.d_o = a.d_o->data;
  for (int dim = 0; dim < 4; ++dim) bp.d_o_stride[dim] = a.d_o->strides[dim];
  bp.di = ws.di;
  bp.lse_s = ws.lse_s;
  bp.dq_acc = ws.dq;
  bp.dk_acc = ws.dk;
  bp.dv_acc = ws.dv;
  bp.row_bad = ws.row_bad;
  bp.key_bad = ws.key_bad;
  // 16-byte copies of Q and dO rows (backward_mma.cu), as the forward's of K and V.
  bp.qdo_vec16 = rows_of_16_bytes(a.q) && rows_of_16_bytes(a.d_o) ? 1 : 0;
  return bp;
}

dilattn_status launch_backward_kernel(BackwardKernelFn fn, int64_t tiles, int64_t heads,
                                      const BackwardKernels& k, size_t smem,
                                      const BackwardParams& bp, cudaStream_t stream,
                                      const char* what) {
  if (tiles > 0x7fffffff)
    return set_error(DILATTN_ERROR_UNSUPPORTED, "backend '%s': %lld tiles exceed the grid",
                     kBackendName, static_cast<long long>(tiles));
  if (tiles == 0) return DILATTN_SUCCESS;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(heads));
  DILATTN_LAUNCH(fn, grid, dim3(k.threads), smem, stream)(bp);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(e, what);
}

// dQ: query tiles of block_rows rows as the forward's (prepare_launch), one launch per branch;
// each launch covers disjoint rows and adds them to dq_acc.
dilattn_status run_dq_pass(const Problem& p, const BackwardKernels& k, BackwardParams bp,
                           cudaStream_t stream) {
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  for (int64_t launch = 0; launch < launches; ++launch) {
    const int64_t tiles = prepare_launch(p, k.block_rows, launch, &bp.ix);
    const dilattn_status st =
        launch_backward_kernel(k.dq, tiles, p.B * p.H, k, k.dq_smem, bp, stream,
                               "backward dQ kernel");
    if (st != DILATTN_SUCCESS) return st;
  }
  return DILATTN_SUCCESS;
}

// The number of key tiles of tile_keys keys (grid.x) of launch `launch`; sets
// key_tiles_per_group.
int64_t prepare_key_launch(const Problem& p, int tile_keys, int64_t launch, BackwardParams* bp) {
  prepare_launch(p, tile_keys, launch, &bp->ix);  // kind, branch; dilated: tiles per segment
  if (p.kind == DILATTN_KIND_DENSE) return ceil_div(p.Nk, tile_keys);
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    bp->key_tiles_per_group = ceil_div(bp->ix.bk, tile_keys);
    return blocks_meeting(bp->ix.mask_k0, p.Nk, bp->ix.bk) * bp->key_tiles_per_group;
  }
  // Dilated (Nq == Nk): a segment's selected keys are its selected rows.
  bp->key_tiles_per_group = bp->ix.tiles_per_group;
  return segment_count(p.Nk, clipped_segment(bp->ix.w, p.Nk)) * bp->key_tiles_per_group;
}

// dK, dV: key tiles of block_keys keys, one launch per (branch, query head of a kv head), in
// that order; the launches of one branch's heads add to the same rows one after another. A
// kernel with dkdv_all_heads (the SIMT and tensor-core ones) walks the heads itself, one launch
// per branch (on dilated problems where dkdv_dilated_heads: not the tensor-core variant
// instances).
dilattn_status run_dkdv_pass(const Problem& p, const BackwardKernels& k, BackwardParams bp,
                             cudaStream_t stream) {
  const int64_t launches = p.kind == DILATTN_KIND_DILATED ? p.num_branches() : 1;
  // A kernel that can walks every query head of a kv head in one launch, in head order (fewer
  // launches, K and V read once a block): dense and block-sparse key tiles are the same for
  // every head; a dilated branch's are the same for the heads of one offset, so its launch
  // has a block per (key tile, head) of which the first head of each offset runs them all
  // (backward_tile.cuh, leads_key_rows).
  const int64_t group = p.H / p.Hkv;
  const bool all_heads =
      k.dkdv_all_heads && (p.kind != DILATTN_KIND_DILATED || k.dkdv_dilated_heads);
  for (int64_t launch = 0; launch < launches; ++launch) {
    const int64_t tiles = prepare_key_launch(p, k.block_keys, launch, &bp);
    if (all_heads) {
      bp.head_in_group = -1;
      bp.key_tiles_per_head = tiles;
      const int64_t blocks = p.kind == DILATTN_KIND_DILATED ? tiles * group : tiles;
      const dilattn_status st = launch_backward_kernel(
          k.dkdv, blocks, p.B * p.Hkv, k, k.dkdv_smem, bp, stream, "backward dK/dV kernel");
      if (st != DILATTN_SUCCESS) return st;
      continue;
    }
    for (int64_t hg = 0; hg < group; ++hg) {
      bp.head_in_group = hg;
      const dilattn_status st = launch_backward_kernel(
          k.dkdv, tiles, p.B * p.Hkv, k, k.dkdv_smem, bp, stream, "backward dK/dV kernel");
      if (st != DILATTN_SUCCESS) return st;
    }
  }
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- zero_view
template <class T>
void launch_zero_view(const dilattn_tensor& t, cudaStream_t stream) {
  const int64_t n = t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3];
  DILATTN_LAUNCH(zero_view_kernel<T>, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                 stream)(static_cast<T*>(t.data), t.strides[0], t.strides[1], t.strides[2],
                         t.strides[3], t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
}

// A gradient view (shape [B, N, heads, D]) at zero.
dilattn_status zero_view(const dilattn_tensor& t, cudaStream_t stream) {
  switch (t.dtype) {
    case DILATTN_F16: launch_zero_view<__half>(t, stream); break;
    case DILATTN_BF16: launch_zero_view<__nv_bfloat16>(t, stream); break;
    default: launch_zero_view<float>(t, stream); break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(e, "zero_view_kernel");
}

// ---------------------------------------------------------------- store_gradients
template <class T>
void launch_store_gradient(const float* acc, const dilattn_tensor& out, int64_t B, int64_t N,
                           int64_t heads, int64_t D, float factor, cudaStream_t stream) {
  const int64_t n = B * heads * N * D;
  DILATTN_LAUNCH(store_gradient_kernel<T>, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads),
                 0, stream)(acc, static_cast<T*>(out.data), out.strides[0], out.strides[1],
                       out.strides[2], out.strides[3], B, N, heads, D, factor);
}

template <class T>
void store_all(const Problem& p, const BackwardArgs& a, const BackwardWorkspace& ws,
               cudaStream_t stream) {
  const float scale = static_cast<float>(p.scale);  // SPEC 6: dQ and dK carry the scale itself
  launch_store_gradient<T>(ws.dq, *a.dq, p.B, p.Nq, p.H, p.D, scale, stream);
  launch_store_gradient<T>(ws.dk, *a.dk, p.B, p.Nk, p.Hkv, p.D, scale, stream);
  launch_store_gradient<T>(ws.dv, *a.dv, p.B, p.Nk, p.Hkv, p.D, 1.0f, stream);
}

// The accumulators into the caller's dQ, dK, dV, and d_sinks into the caller's host array
// (SPEC 10.3; the calls that carry sinks wait for their work, so the copy is done on return);
// a synchronous call then waits for the stream.
dilattn_status store_gradients(const Problem& p, const BackwardArgs& a,
                               const BackwardWorkspace& ws, cudaStream_t stream) {
  switch (p.dtype) {
    case DILATTN_F16: store_all<__half>(p, a, ws, stream); break;
    case DILATTN_BF16: store_all<__nv_bfloat16>(p, a, ws, stream); break;
    default: store_all<float>(p, a, ws, stream); break;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_failure(e, "store_gradient_kernel");
  if (ws.d_sinks != nullptr) {
    DILATTN_LAUNCH(reduce_sink_terms_kernel, dim3(static_cast<unsigned>(p.H)),
                   dim3(kSinkReduceThreads), 0, stream)(ws.sink_terms, ws.d_sinks, p.B, p.H,
                                                        p.Nq);
    if ((e = cudaGetLastError()) != cudaSuccess)
      return cuda_failure(e, "reduce_sink_terms_kernel");
    e = cudaMemcpyAsync(a.sinks.d_values, ws.d_sinks, static_cast<size_t>(p.H) * sizeof(double),
                        cudaMemcpyDeviceToHost, stream);
    if (e != cudaSuccess) return cuda_failure(e, "cudaMemcpyAsync of d_sinks");
  }
  if (a.run.synchronous && (e = cudaStreamSynchronize(stream)) != cudaSuccess)
    return cuda_failure(e, "backward");
  return DILATTN_SUCCESS;
}

}  // namespace

// ================================================================ the entry points
size_t backward_workspace_bytes(const Problem& p) { return backward_workspace_layout(p).total; }

namespace {

// One problem (a plan's, or one sequence of a packed batch) on the call's stream (SPEC 6: the
// pre-pass, the dQ pass, the dK/dV pass, the stores).
dilattn_status backward_one(const Problem& p, const BackwardArgs& a) {
  dilattn_status st = DILATTN_SUCCESS;
  CallDevice call;
  BackwardKernels kernels;
  BackwardWorkspace ws;
  if ((st = begin_call(*a.q, a.run, &call)) != DILATTN_SUCCESS) return st;
  const cudaStream_t stream = call.stream;
  if ((st = choose_backward_kernels(p, *call.info, &kernels)) != DILATTN_SUCCESS) return st;
  if ((st = prepare_backward_workspace(p, a, call.device, stream, &ws)) != DILATTN_SUCCESS)
    return st;
  if ((st = run_pre_pass(p, a, ws, stream)) != DILATTN_SUCCESS) return st;
  const BackwardParams bp = backward_params(p, a, ws, call.info->major);
  if ((st = run_dq_pass(p, kernels, bp, stream)) != DILATTN_SUCCESS) return st;
  if ((st = run_dkdv_pass(p, kernels, bp, stream)) != DILATTN_SUCCESS) return st;
  return store_gradients(p, a, ws, stream);
}

// SPEC 10.2: a packed batch one sequence at a time, as the forward runs it (launch.cu's
// forward_packed). A key gets gradient only from its own sequence's rows, so each sequence's
// dK and dV are whole; the keys of a sequence with no rows get 0 (SPEC 6), and a sequence with
// rows but no keys runs as any problem does (its rows' dQ is 0, their sink terms count). The
// sinks' gradient is the sum over the sequences, taken in sequence order after each sequence's
// d_sinks has reached the host: the stream is waited for after each sequence then.
dilattn_status backward_packed(const Problem& p, const BackwardArgs& a) {
  const bool d_sinks_wanted = p.sinks && a.sinks.d_values != nullptr;
  std::vector<double> d_sinks(static_cast<size_t>(d_sinks_wanted ? p.H : 0), 0.0);
  std::vector<double> one_d_sinks(d_sinks.size());
  BackwardArgs each = a;
  each.run.synchronous = false;
  if (d_sinks_wanted) each.sinks.d_values = one_d_sinks.data();
  const dilattn_status st = run_sequences(
      p, *a.q, a.run, "backward",
      [&](const Problem& one, int64_t q0, int64_t k0, cudaStream_t stream) {
    const dilattn_tensor q = rows_view(*a.q, 1, q0, one.Nq), o = rows_view(*a.o, 1, q0, one.Nq);
    const dilattn_tensor d_o = rows_view(*a.d_o, 1, q0, one.Nq);
    const dilattn_tensor dq = rows_view(*a.dq, 1, q0, one.Nq);
    const dilattn_tensor lse = rows_view(*a.lse, 2, q0, one.Nq);
    const dilattn_tensor k = rows_view(*a.k, 1, k0, one.Nk), v = rows_view(*a.v, 1, k0, one.Nk);
    const dilattn_tensor dk = rows_view(*a.dk, 1, k0, one.Nk);
    const dilattn_tensor dv = rows_view(*a.dv, 1, k0, one.Nk);
    dilattn_status s = DILATTN_SUCCESS;
    if (one.Nq == 0) {  // no row: its keys get no gradient (SPEC 6)
      for (const dilattn_tensor* t : {&dk, &dv})
        if (t->shape[1] > 0 && (s = zero_view(*t, stream)) != DILATTN_SUCCESS) return s;
      return s;
    }
    each.q = &q;
    each.k = &k;
    each.v = &v;
    each.o = &o;
    each.lse = &lse;
    each.d_o = &d_o;
    each.dq = &dq;
    each.dk = &dk;
    each.dv = &dv;
    if ((s = backward_one(one, each)) != DILATTN_SUCCESS || !d_sinks_wanted) return s;
    const cudaError_t e = cudaStreamSynchronize(stream);  // this sequence's d_sinks, on the host
    if (e != cudaSuccess) return cuda_failure(e, "backward");
    for (size_t h = 0; h < d_sinks.size(); ++h) d_sinks[h] += one_d_sinks[h];
    return s;
  });
  if (st == DILATTN_SUCCESS)
    for (size_t h = 0; h < d_sinks.size(); ++h) a.sinks.d_values[h] = d_sinks[h];
  return st;
}

}  // namespace

// As the forward: the plan was checked by can_run when it was made; a call checks the views
// and the device the tensors are on (cached facts), then enqueues everything on the caller's
// stream.
dilattn_status backward(const Problem& p, const BackwardArgs& a) {
  dilattn_status st = check_backward_views(a);
  if (st == DILATTN_SUCCESS) st = check_placement(p);  // a ring's sub-problem (SPEC 5.5)
  if (st != DILATTN_SUCCESS) return st;
  return p.is_packed() ? backward_packed(p, a) : backward_one(p, a);
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
