// gpu_run.cpp - kgpu::run_forward / run_backward (gpu_run.h) through the CUDA runtime, or, in a
// build without CUDA (DILATTN_TEST_CUDA 0), failed checks that say the build has none.
#include "gpu_run.h"

#if DILATTN_TEST_CUDA
#include <cuda_runtime.h>
#endif


namespace kgpu {

#if DILATTN_TEST_CUDA
namespace {

bool cuda_ok(cudaError_t e, const char* what) {
  return CHECK_MSG(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e));
}

// A device copy of a host tensor: every byte, padding included, so the view's strides hold.
class DeviceCopy {
 public:
  explicit DeviceCopy(const harness::Tensor& host) : bytes_(host.bytes().size()) {
    view_ = host.view();
    view_.data = nullptr;
    if (cuda_ok(cudaMalloc(&view_.data, bytes_ == 0 ? 1 : bytes_), "cudaMalloc") && bytes_ > 0)
      cuda_ok(cudaMemcpy(view_.data, host.bytes().data(), bytes_, cudaMemcpyHostToDevice),
              "copy to the GPU");
    view_.device = DILATTN_DEVICE_CUDA;
    view_.device_index = 0;
  }
  ~DeviceCopy() { cudaFree(view_.data); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  const dilattn_tensor* view() const { return &view_; }
  void download(harness::Tensor* host) const {
    if (view_.data != nullptr && bytes_ > 0)
      cuda_ok(cudaMemcpy(host->view().data, view_.data, bytes_, cudaMemcpyDeviceToHost),
              "copy from the GPU");
  }

 private:
  size_t bytes_;
  dilattn_tensor view_{};
};

// The caller's stream for on_own_stream runs, or the default stream (nullptr).
class Stream {
 public:
  explicit Stream(bool own) {
    if (own) cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
  }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  bool own() const { return stream_ != nullptr; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace

harness::Forward run_forward(const harness::AttentionCase& c, const harness::Inputs& in,
                             bool on_own_stream, const dilattn_call_options* options) {
  harness::CaseScope scope(c.name);
  harness::AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  harness::Forward out{c.q_like(in.q.dtype(), c.output_layout), c.lse_like(DILATTN_F32)};
  out.o.poison();
  out.lse.poison();
  harness::Plan plan;
  if (!CHECK_OK(plan.create(planned, DILATTN_BACKEND_CUDA))) return out;
  const DeviceCopy q(in.q), k(in.k), v(in.v), o(out.o), lse(out.lse);
  const Stream stream(on_own_stream);
  if (stream.own()) {
    CHECK_OK(dilattn_forward_on_stream(plan.get(), stream.get(), q.view(), k.view(), v.view(),
                                       o.view(), lse.view(), nullptr, 0));
    cuda_ok(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  } else {
    CHECK_OK(dilattn_forward_ex(plan.get(), q.view(), k.view(), v.view(), o.view(), lse.view(),
                                options, nullptr, 0));
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the forward");
  o.download(&out.o);
  lse.download(&out.lse);
  return out;
}

harness::Gradients run_backward(const harness::AttentionCase& c, const harness::Inputs& in,
                                const harness::Forward& fwd, bool on_own_stream,
                                const dilattn_call_options* options) {
  harness::CaseScope scope(c.name);
  harness::AttentionCase planned = c;
  planned.dtype = in.q.dtype();
  harness::Gradients g{c.q_like(in.q.dtype(), c.output_layout),
                       c.kv_like(in.q.dtype(), c.output_layout),
                       c.kv_like(in.q.dtype(), c.output_layout)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  harness::Plan plan;
  if (!CHECK_OK(plan.create(planned, DILATTN_BACKEND_CUDA))) return g;
  const DeviceCopy q(in.q), k(in.k), v(in.v), o(fwd.o), lse(fwd.lse), d_o(in.d_o), dq(g.dq),
      dk(g.dk), dv(g.dv);
  const Stream stream(on_own_stream);
  if (stream.own()) {
    CHECK_OK(dilattn_backward_on_stream(plan.get(), stream.get(), q.view(), k.view(), v.view(),
                                        o.view(), lse.view(), d_o.view(), dq.view(), dk.view(),
                                        dv.view(), nullptr, 0));
    cuda_ok(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  } else {
    CHECK_OK(dilattn_backward_ex(plan.get(), q.view(), k.view(), v.view(), o.view(), lse.view(),
                                 d_o.view(), dq.view(), dk.view(), dv.view(), options, nullptr,
                                 0));
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the backward");
  dq.download(&g.dq);
  dk.download(&g.dk);
  dv.download(&g.dv);
  return g;
}

#else  // a build without the CUDA runtime

harness::Forward run_forward(const harness::AttentionCase& c, const harness::Inputs& in, bool,
                             const dilattn_call_options*) {
  harness::CaseScope scope(c.name);
  CHECK_MSG(false, "the cuda backend was asked for, but this test was built without CUDA");
  return {c.q_like(in.q.dtype(), c.output_layout), c.lse_like(DILATTN_F32)};
}

harness::Gradients run_backward(const harness::AttentionCase& c, const harness::Inputs& in,
                                const harness::Forward&, bool, const dilattn_call_options*) {
  harness::CaseScope scope(c.name);
  CHECK_MSG(false, "the cuda backend was asked for, but this test was built without CUDA");
  return {c.q_like(in.q.dtype(), c.output_layout), c.kv_like(in.q.dtype(), c.output_layout),
          c.kv_like(in.q.dtype(), c.output_layout)};
}

#endif

}  // namespace kgpu
