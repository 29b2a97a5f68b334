// test_ring_cuda.cpp - SPEC 5 + 6 on GPUs: the ring on the cuda backend, shards in device
// memory, against the f64 reference (SPEC 8, f32):
//   ring_cuda_threads_within_spec8: the threads transport, P = 1..4 ranks spread over the GPUs
//     (rank r on GPU r mod count), chunks copied device to device; forward and backward, both
//     splits, dense causal, dilated and block-sparse cases.
//   ring_nccl_within_spec8 (a build with NCCL): one rank per GPU (ncclCommInitAll over every
//     GPU, so P = the GPU count; P = 1 on one GPU), each on its own stream, the same checks.
// Without a GPU, or on a GPU this build has no kernels for, it runs nothing and exits with
// meson's skip code 77, saying why (a skip is not a pass).
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#include "dilattn_config.h"
#include "ring_test_util.h"
#if DILATTN_HAVE_NCCL
#include <nccl.h>
#endif

using namespace harness;

namespace {

constexpr int kSkip = 77;

// A copy of a host tensor in the memory of GPU `device` (contiguous, like the host one).
class DeviceTensor {
 public:
  DeviceTensor(const Tensor& host, int device) : bytes_(host.bytes().size()) {
    view_ = host.view();
    CHECK_MSG(cudaMalloc(&view_.data, bytes_ == 0 ? 1 : bytes_) == cudaSuccess, "cudaMalloc");
    CHECK_MSG(cudaMemcpy(view_.data, host.bytes().data(), bytes_, cudaMemcpyHostToDevice) ==
                  cudaSuccess, "cudaMemcpy to the GPU");
    view_.device = DILATTN_DEVICE_CUDA;
    view_.device_index = device;
  }
  ~DeviceTensor() { cudaFree(view_.data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  const dilattn_tensor* view() const { return &view_; }
  void copy_to(Tensor* host) const {
    CHECK_MSG(cudaMemcpy(host->view().data, view_.data, bytes_, cudaMemcpyDeviceToHost) ==
                  cudaSuccess, "cudaMemcpy from the GPU");
  }

 private:
  size_t bytes_;
  dilattn_tensor view_{};
};

struct GpuRing {
  std::vector<dilattn_comm> comms;  // rank r's end
  std::vector<int> device;          // rank r's GPU
  std::vector<cudaStream_t> stream; // rank r's stream (the NCCL comm's), or null
  dilattn_ring_split split = DILATTN_RING_CONTIGUOUS;
  int32_t P() const { return static_cast<int32_t>(comms.size()); }
};

// Runs body(rank) on one thread per rank, each with its GPU current.
std::vector<dilattn_status> run_gpu_ranks(const GpuRing& ring,
                                          const std::function<dilattn_status(int32_t)>& body) {
  std::vector<dilattn_status> status(ring.comms.size(), DILATTN_ERROR_COMM);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ring.P(); ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(ring.device[r]);
      status[r] = body(r);
    });
  for (auto& t : threads) t.join();
  return status;
}

void check_forward(const AttentionCase& c, const Inputs& in, const GpuRing& ring,
                   const std::string& name) {
  CaseScope scope(name);
  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  Forward got{c.q_like(c.dtype), c.lse_like(DILATTN_F64)};
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CUDA))) return;
  const ringtest::Ring layout{ring.P(), ring.split, DILATTN_BACKEND_CUDA};
  std::vector<std::string> messages(ring.comms.size());
  const auto status = run_gpu_ranks(ring, [&](int32_t r) {
    const ringtest::Rows rows = ringtest::rows_of(c.Nq, layout, r);
    Tensor o = ringtest::shard_like(got.o, c.dtype, rows.total(), false);
    Tensor lse = ringtest::shard_like(got.lse, DILATTN_F64, rows.total(), true);
    const int dev = ring.device[r];
    const DeviceTensor q(ringtest::shard_of(in.q, rows, false), dev),
        k(ringtest::shard_of(in.k, rows, false), dev), v(ringtest::shard_of(in.v, rows, false), dev),
        o_d(o, dev), lse_d(lse, dev);
    const dilattn_status s = dilattn_ring_forward(plan.get(), ring.comms[r], ring.split, q.view(),
                                                  k.view(), v.view(), o_d.view(), lse_d.view());
    messages[r] = dilattn_last_error();
    o_d.copy_to(&o);
    lse_d.copy_to(&lse);
    ringtest::copy_rows(o, &got.o, rows, false, false);
    ringtest::copy_rows(lse, &got.lse, rows, true, false);
    return s;
  });
  ringtest::check_ranks_succeeded(ringtest::ThreadRanks{}, status, messages);
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse());
}

void check_backward(const AttentionCase& c, const Inputs& in, const GpuRing& ring,
                    const std::string& name) {
  CaseScope scope(name);
  const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
  Gradients got{c.q_like(c.dtype), c.kv_like(c.dtype), c.kv_like(c.dtype)};
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CUDA))) return;
  const ringtest::Ring layout{ring.P(), ring.split, DILATTN_BACKEND_CUDA};
  std::vector<std::string> messages(ring.comms.size());
  const auto status = run_gpu_ranks(ring, [&](int32_t r) {
    const ringtest::Rows rows = ringtest::rows_of(c.Nq, layout, r);
    const int dev = ring.device[r];
    auto on_gpu = [&](const Tensor& full, bool lse) {
      return std::make_unique<DeviceTensor>(ringtest::shard_of(full, rows, lse), dev);
    };
    const auto q = on_gpu(in.q, false), k = on_gpu(in.k, false), v = on_gpu(in.v, false);
    const auto o = on_gpu(fwd.o, false), d_o = on_gpu(in.d_o, false);
    const auto lse = on_gpu(fwd.lse.converted(DILATTN_F32), true);
    Tensor dq = ringtest::shard_like(got.dq, c.dtype, rows.total(), false);
    Tensor dk = ringtest::shard_like(got.dk, c.dtype, rows.total(), false);
    Tensor dv = ringtest::shard_like(got.dv, c.dtype, rows.total(), false);
    const DeviceTensor dq_d(dq, dev), dk_d(dk, dev), dv_d(dv, dev);
    const dilattn_status s = dilattn_ring_backward(
        plan.get(), ring.comms[r], ring.split, q->view(), k->view(), v->view(), o->view(),
        lse->view(), d_o->view(), dq_d.view(), dk_d.view(), dv_d.view());
    messages[r] = dilattn_last_error();
    dq_d.copy_to(&dq);
    dk_d.copy_to(&dk);
    dv_d.copy_to(&dv);
    ringtest::copy_rows(dq, &got.dq, rows, false, false);
    ringtest::copy_rows(dk, &got.dk, rows, false, false);
    ringtest::copy_rows(dv, &got.dv, rows, false, false);
    return s;
  });
  ringtest::check_ranks_succeeded(ringtest::ThreadRanks{}, status, messages);
  CHECK_CLOSE("dQ", got.dq, want.dq, spec8::of(c.dtype));
  CHECK_CLOSE("dK", got.dk, want.dk, spec8::of(c.dtype));
  CHECK_CLOSE("dV", got.dv, want.dv, spec8::of(c.dtype));
}

std::vector<AttentionCase> gpu_cases() {
  std::vector<AttentionCase> picked;
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32))
    if (c.name == "dense_causal" || c.name == "dilated_mod_short_and_long_segments" ||
        c.name == "sparse_causal")
      picked.push_back(c);
  return picked;
}

void run_cases(const GpuRing& ring, const std::string& transport) {
  for (const AttentionCase& c : gpu_cases()) {
    if (!ringtest::ring_supports(c, ring.P())) continue;
    const std::string name = c.name + " " + transport + " P=" + std::to_string(ring.P()) + " " +
                             ringtest::split_name(ring.split);
    const Inputs in = make_inputs(c, 7, 2.0);
    check_forward(c, in, ring, name);
    check_backward(c, in, ring, name);
  }
}

void threads_transport(int gpus) {
  CaseScope scope("ring_cuda_threads_within_spec8");
  for (int32_t P = 1; P <= 4; ++P)
    for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
      GpuRing ring;
      ring.split = split;
      ring.comms.assign(static_cast<size_t>(P), nullptr);
      if (!CHECK_OK(dilattn_comm_create_threads(P, 60000, ring.comms.data()))) return;
      for (int32_t r = 0; r < P; ++r) ring.device.push_back(r % gpus);
      run_cases(ring, "threads");
      for (dilattn_comm comm : ring.comms) dilattn_comm_destroy(comm);
    }
}

#if DILATTN_HAVE_NCCL
void nccl_transport(int gpus) {
  CaseScope scope("ring_nccl_within_spec8");
  std::vector<ncclComm_t> nccl(static_cast<size_t>(gpus));
  if (!CHECK_MSG(ncclCommInitAll(nccl.data(), gpus, nullptr) == ncclSuccess, "ncclCommInitAll"))
    return;
  for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
    GpuRing ring;
    ring.split = split;
    for (int r = 0; r < gpus; ++r) {
      cudaSetDevice(r);
      cudaStream_t stream = nullptr;
      CHECK_MSG(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
      dilattn_comm comm = nullptr;
      CHECK_OK(dilattn_comm_create_nccl(&nccl[r], stream, 60000, &comm));
      ring.comms.push_back(comm);
      ring.device.push_back(r);
      ring.stream.push_back(stream);
    }
    run_cases(ring, "nccl");
    for (int r = 0; r < gpus; ++r) {
      dilattn_comm_destroy(ring.comms[r]);
      cudaSetDevice(r);
      cudaStreamDestroy(ring.stream[r]);
    }
  }
  for (ncclComm_t comm : nccl) ncclCommDestroy(comm);
}
#endif

}  // namespace

int main() {
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus == 0) {
    std::printf("ring_cuda: SKIPPED, no GPU available (%s): the ring on the cuda backend and the "
                "NCCL transport did not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkip;
  }
  {
    AttentionCase probe = gpu_cases().front();
    Plan plan;
    if (plan.create(probe, DILATTN_BACKEND_CUDA) != DILATTN_SUCCESS) {
      std::printf("ring_cuda: SKIPPED, the cuda backend cannot run here: %s\n",
                  dilattn_last_error());
      return kSkip;
    }
  }
  threads_transport(gpus);
#if DILATTN_HAVE_NCCL
  nccl_transport(gpus);
#else
  std::printf("ring_cuda: this build has no NCCL; the NCCL transport was not run\n");
#endif
  return finish("ring_cuda");
}
