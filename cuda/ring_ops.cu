// ring_ops.cu - the ring's element work on a device (SPEC 5; the interface is
// lib/internal/ring_ops.h): zeroed buffers, copy/convert, add, fill, pack/unpack of the rows
// another rank needs (a map of their offsets uploaded per call) and SPEC 5's merge of a
// partial (O_b, LSE_b) into the running (O, LSE), as small kernels queued on one stream.
//
// Built the same two ways as the launchers (cuda/meson.build): by nvcc into dilattn::cuda
// (device memory, the caller's GPU) and by the host compiler with the SIMT emulator into
// dilattn::emu (the emulator's device memory is host memory), so CI runs the emu backend's ring
// through these kernels. Uses the launchers' shared helpers (launch_shared.h: cuda_failure,
// elementwise_blocks, DeviceGuard, kBackendName).
//
// The arithmetic is the host loops' (lib/ring/ring_tensor_ops.h): each element read as f64,
// computed in f64, stored once in its view's dtype (f16/bf16 through f32, as store_element);
// the merge is softmax_rules.h merge_lse / merge_weight / merge_element per row. Every element
// is written by one thread, in one kernel, so results do not depend on the schedule (SPEC 6's
// bitwise determinism holds for the ring's backward on the device too).
//
// Checked by tests/ring/test_ring_forward.cpp and test_ring_backward.cpp (the emu backend's
// ring against the reference, and bitwise the same for every schedule and thread order).
#include <deque>
#include <vector>

#include "dtype_convert.h"
#include "launch_shared.h"
#include "ring_ops.h"
#include "softmax_rules.h"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ================================================================ element access
// A dilattn_tensor view as a kernel argument (by value).
struct ElementView {
  void* data;
  int32_t dtype;
  int64_t shape[4], strides[4];
};

// The offset in elements of the flat-th element of v, in row-major order of its shape.
__device__ __forceinline__ int64_t view_offset(const ElementView& v, int64_t flat) {
  int64_t offset = 0;
  for (int dim = 3; dim >= 0; --dim) {
    offset += (flat % v.shape[dim]) * v.strides[dim];
    flat /= v.shape[dim];
  }
  return offset;
}

// dtype_convert.h's load_element / store_element, on the device.
__device__ __forceinline__ double load_f64(const ElementView& v, int64_t at) {
  switch (v.dtype) {
    case DILATTN_F64: return static_cast<const double*>(v.data)[at];
    case DILATTN_F16: return to_float(static_cast<const __half*>(v.data)[at]);
    case DILATTN_BF16: return to_float(static_cast<const __nv_bfloat16*>(v.data)[at]);
    default: return static_cast<const float*>(v.data)[at];
  }
}

__device__ __forceinline__ void store_f64(const ElementView& v, int64_t at, double x) {
  switch (v.dtype) {
    case DILATTN_F64: static_cast<double*>(v.data)[at] = x; return;
    case DILATTN_F16:
      static_cast<__half*>(v.data)[at] = from_float<__half>(static_cast<float>(x));
      return;
    case DILATTN_BF16:
      static_cast<__nv_bfloat16*>(v.data)[at] = from_float<__nv_bfloat16>(static_cast<float>(x));
      return;
    default: static_cast<float*>(v.data)[at] = static_cast<float>(x); return;
  }
}

// ================================================================ kernels
// dst = src: the element's bytes when the dtypes agree (NaN payloads kept), else converted.
__global__ void ring_copy_kernel(ElementView src, ElementView dst, int64_t n, int32_t bytes) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < n; idx += stride) {
    const int64_t s = view_offset(src, idx), d = view_offset(dst, idx);
    if (bytes == 0) {
      store_f64(dst, d, load_f64(src, s));
    } else {
      const unsigned char* from = static_cast<const unsigned char*>(src.data) + s * bytes;
      unsigned char* to = static_cast<unsigned char*>(dst.data) + d * bytes;
      for (int32_t b = 0; b < bytes; ++b) to[b] = from[b];
    }
  }
}

// acc += part.
__global__ void ring_add_kernel(ElementView part, ElementView acc, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < n; idx += stride) {
    const int64_t d = view_offset(acc, idx);
    store_f64(acc, d, load_f64(acc, d) + load_f64(part, view_offset(part, idx)));
  }
}

__global__ void ring_fill_kernel(ElementView t, double x, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = start; idx < n; idx += stride) store_f64(t, view_offset(t, idx), x);
}

// Pack or unpack what another rank needs: the packed message is a run of units of D elements
// (one batch, row and head each), unit u starting at element unit_at[u] of `full`; the packed
// element idx is unit idx / D's element idx % D. mode: 0 packed = full, 1 full = packed,
// 2 full += packed. Copies move the element's bytes (one dtype); the sum is converted.
__global__ void ring_rows_kernel(void* packed, ElementView full, const int64_t* unit_at,
                                 int64_t n, int32_t mode, int32_t bytes) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t D = full.shape[3];
  const ElementView block{packed, full.dtype, {1, 1, 1, n}, {n, n, n, 1}};
  for (int64_t idx = start; idx < n; idx += stride) {
    const int64_t f = unit_at[idx / D] + (idx % D) * full.strides[3];
    if (mode == 2) {
      store_f64(full, f, load_f64(full, f) + load_f64(block, idx));
      continue;
    }
    unsigned char* at_full = static_cast<unsigned char*>(full.data) + f * bytes;
    unsigned char* at_packed = static_cast<unsigned char*>(packed) + idx * bytes;
    const unsigned char* from = mode == 0 ? at_full : at_packed;
    unsigned char* to = mode == 0 ? at_packed : at_full;
    for (int32_t k = 0; k < bytes; ++k) to[k] = from[k];
  }
}

// SPEC 5, one thread per row (b, h, i): the row's merged LSE and weights, then its D elements.
// lse views are [B, nh, n, 1], so the row's flat index is its LSE element's; O is [B, n, nh, D].
__global__ void ring_merge_kernel(ElementView o_b, ElementView lse_b, ElementView o,
                                  ElementView lse, int64_t rows) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n = o.shape[1], nh = o.shape[2], D = o.shape[3];
  for (int64_t row = start; row < rows; row += stride) {
    const int64_t i = row % n, h = (row / n) % nh, b = row / (n * nh);
    const int64_t at = view_offset(lse, row);
    const double old_lse = load_f64(lse, at);
    const double part_lse = load_f64(lse_b, view_offset(lse_b, row));
    const double merged = merge_lse(old_lse, part_lse);
    const double w_old = merge_weight(old_lse, merged), w_part = merge_weight(part_lse, merged);
    store_f64(lse, at, merged);
    for (int64_t d = 0; d < D; ++d) {
      const int64_t od = b * o.strides[0] + i * o.strides[1] + h * o.strides[2] + d * o.strides[3];
      const int64_t pd =
          b * o_b.strides[0] + i * o_b.strides[1] + h * o_b.strides[2] + d * o_b.strides[3];
      store_f64(o, od, merge_element(w_old, load_f64(o, od), w_part, load_f64(o_b, pd)));
    }
  }
}

// ================================================================ the ops
namespace {

ElementView element_view(const dilattn_tensor& t) {
  ElementView v;
  v.data = t.data;
  v.dtype = t.dtype;
  for (int dim = 0; dim < 4; ++dim) {
    v.shape[dim] = t.shape[dim];
    v.strides[dim] = t.strides[dim];
  }
  return v;
}

int64_t element_count(const dilattn_tensor& t) {
  return t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3];
}

class DeviceRingOps final : public RingOps {
 public:
  DeviceRingOps(int32_t device, void* stream) : stream_(static_cast<cudaStream_t>(stream)) {
#ifdef __CUDACC__
    // The shards' GPU is current for the whole ring call (allocations, launches, copies).
    selected_ = guard_.select(device);
#else
    (void)device;  // the emulator's one device
#endif
  }

  dilattn_status start() const {
    return selected_ == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(selected_, "cudaSetDevice");
  }

  dilattn_status allocate(size_t bytes, void** p) override {
    *p = nullptr;
    cudaError_t e = cudaMalloc(p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      *p = nullptr;
      return set_error(DILATTN_ERROR_OUT_OF_MEMORY, "backend '%s': ring buffer of %zu bytes: %s",
                       kBackendName, bytes, cudaGetErrorString(e));
    }
    // Zeroed on the stream, before any work that reads it (accumulators start at 0).
    if ((e = cudaMemsetAsync(*p, 0, bytes, stream_)) != cudaSuccess) {
      const dilattn_status s = cuda_failure(e, "cudaMemsetAsync of a ring buffer");
      cudaFree(*p);
      *p = nullptr;
      return s;
    }
    return DILATTN_SUCCESS;
  }

  ~DeviceRingOps() override {
    if (unit_map_ != nullptr && cudaFree(unit_map_) != cudaSuccess) cudaGetLastError();
  }

  void release(void* p) override {
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();  // cudaFree waits for the device
  }

  dilattn_status copy(const dilattn_tensor& src, const dilattn_tensor& dst) override {
    const int64_t n = element_count(src);
    const int32_t bytes = src.dtype == dst.dtype ? static_cast<int32_t>(dtype_size(src.dtype)) : 0;
    if (n == 0) return DILATTN_SUCCESS;
    DILATTN_LAUNCH(ring_copy_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                   stream_)(element_view(src), element_view(dst), n, bytes);
    return launched("ring_copy_kernel");
  }

  dilattn_status add(const dilattn_tensor& part, const dilattn_tensor& acc) override {
    const int64_t n = element_count(part);
    if (n == 0) return DILATTN_SUCCESS;
    DILATTN_LAUNCH(ring_add_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                   stream_)(element_view(part), element_view(acc), n);
    return launched("ring_add_kernel");
  }

  dilattn_status fill(const dilattn_tensor& t, double x) override {
    const int64_t n = element_count(t);
    if (n == 0) return DILATTN_SUCCESS;
    DILATTN_LAUNCH(ring_fill_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                   stream_)(element_view(t), x, n);
    return launched("ring_fill_kernel");
  }

  dilattn_status merge(const dilattn_tensor& o_b, const dilattn_tensor& lse_b,
                       const dilattn_tensor& o, const dilattn_tensor& lse) override {
    const int64_t rows = lse.shape[0] * lse.shape[1] * lse.shape[2];
    if (rows == 0) return DILATTN_SUCCESS;
    DILATTN_LAUNCH(ring_merge_kernel, dim3(elementwise_blocks(rows)), dim3(kElementwiseThreads),
                   0, stream_)(element_view(o_b), element_view(lse_b), element_view(o),
                               element_view(lse), rows);
    return launched("ring_merge_kernel");
  }

  dilattn_status pack_rows(const dilattn_tensor& full, const RowRuns& runs,
                           void* packed) override {
    return move_rows(packed, runs, full, 0);
  }

  dilattn_status unpack_rows(const void* packed, const RowRuns& runs,
                             const dilattn_tensor& full, bool add) override {
    return move_rows(const_cast<void*>(packed), runs, full, add ? 2 : 1);
  }

  size_t own_bytes() const override { return unit_map_units_ * sizeof(int64_t); }

  // cudaMemcpyDefault: the runtime tells device from host memory (unified addressing), so a
  // chunk of another GPU of this process comes over without peer setup.
  dilattn_status copy_bytes(void* dst, const void* src, size_t bytes) override {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
    if (e != cudaSuccess) return cuda_failure(e, "cudaMemcpyAsync of a ring chunk");
    return wait();
  }

  dilattn_status wait() override {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) uploads_.clear();  // every queued upload has read its rows
    return e == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(e, "ring attention");
  }

  StreamArgs stream_args() const override {
    StreamArgs run;
    run.stream = stream_;
    run.synchronous = false;
    run.workspace_from_pool = false;  // the ring's own buffers (RingMemory)
    return run;
  }

 private:
  dilattn_status launched(const char* what) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DILATTN_SUCCESS : cuda_failure(e, what);
  }

  // The runs as the offset in `full` of every packed unit (batch, row, head), in the packed
  // order; uploaded to the device's unit map on the stream (after the kernel before, before
  // the one that reads it), then ring_rows_kernel.
  dilattn_status move_rows(void* packed, const RowRuns& runs, const dilattn_tensor& full,
                           int32_t mode) {
    uploads_.emplace_back();  // kept until wait(): a queued copy may read it after we return
    std::vector<int64_t>& unit_at = uploads_.back();
    for (const RowRun& run : runs)
      for (int64_t b = 0; b < full.shape[0]; ++b)
        for (int64_t row = run.first; row < run.first + run.count; ++row)
          for (int64_t h = run.head; h < run.head + run.heads; ++h)
            unit_at.push_back(b * full.strides[0] + row * full.strides[1] + h * full.strides[2]);
    const size_t units = unit_at.size();
    const int64_t n = static_cast<int64_t>(units) * full.shape[3];
    if (n == 0) return DILATTN_SUCCESS;
    if (units > unit_map_units_) {
      if (unit_map_ != nullptr && cudaFree(unit_map_) != cudaSuccess) cudaGetLastError();
      unit_map_ = nullptr;
      unit_map_units_ = 0;
      const cudaError_t e = cudaMalloc(&unit_map_, units * sizeof(int64_t));
      if (e != cudaSuccess) {
        cudaGetLastError();
        unit_map_ = nullptr;
        return set_error(DILATTN_ERROR_OUT_OF_MEMORY, "backend '%s': ring unit map of %zu: %s",
                         kBackendName, units, cudaGetErrorString(e));
      }
      unit_map_units_ = units;
    }
    const cudaError_t e = cudaMemcpyAsync(unit_map_, unit_at.data(), units * sizeof(int64_t),
                                          cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess) return cuda_failure(e, "cudaMemcpyAsync of a ring unit map");
    const int32_t bytes = mode == 2 ? 0 : static_cast<int32_t>(dtype_size(full.dtype));
    DILATTN_LAUNCH(ring_rows_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                   stream_)(packed, element_view(full), static_cast<const int64_t*>(unit_map_), n,
                            mode, bytes);
    return launched("ring_rows_kernel");
  }

  cudaStream_t stream_;
  cudaError_t selected_ = cudaSuccess;
  void* unit_map_ = nullptr;  // device: the offset in `full` of each packed unit
  size_t unit_map_units_ = 0;
  std::deque<std::vector<int64_t>> uploads_;
#ifdef __CUDACC__
  DeviceGuard guard_;  // restores the caller's current device with the ops
#endif
};

}  // namespace

dilattn_status make_ring_ops(int32_t device_index, void* stream, std::unique_ptr<RingOps>* ops) {
  auto made = std::make_unique<DeviceRingOps>(device_index, stream);
  if (dilattn_status s = made->start()) return s;
  *ops = std::move(made);
  return DILATTN_SUCCESS;
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
