// test_ring_cuda.cpp - SPEC 5 + 6 on GPUs: the ring on the cuda backend, shards in device
// memory, against the f64 reference (SPEC 8, f32):
//   ring_cuda_threads_within_spec8: the threads transport, P = 1..4 ranks spread over the GPUs
//     (rank r on GPU r mod count), chunks copied device to device; forward and backward, both
//     splits, dense causal, dilated and block-sparse cases.
//   ring_nccl_within_spec8 (a build with NCCL): one rank per GPU (ncclCommInitAll over every
//     GPU, so P = the GPU count; P = 1 on one GPU), each on its own stream, the same checks.
//   ring_cuda_options_within_spec8: SPEC 5.5, the threads transport at P = 3 (zigzag) with
//     each option of SPEC 10 and 11 and all together (ring_checks.h) through the _ex calls:
//     O, LSE, dQ, dK, dV and every rank's d_sinks against the single-process ref call with
//     the same options. The window, ALiBi and dropout make the sub-problems placed
//     (cuda/placed_positions.cuh); sinks are summed from device O, dO and LSE.
// Without a GPU, or on a GPU this build has no kernels for, it runs nothing and exits with
// meson's skip code 77, saying why (a skip is not a pass).
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#include "dilattn_config.h"
#include "ring_checks.h"
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

// The ring's forward on the GPUs against `want` (the single-device ref result); with `call`,
// through dilattn_ring_forward_ex with its options.
void check_forward(const AttentionCase& c, const Inputs& in, const GpuRing& ring,
                   const std::string& name, const Forward& want,
                   const ringtest::CallOptions* call = nullptr) {
  CaseScope scope(name);
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
    const dilattn_call_options options = call != nullptr ? call->make() : dilattn_call_options{};
    const dilattn_status s =
        call != nullptr
            ? dilattn_ring_forward_ex(plan.get(), ring.comms[r], ring.split, q.view(), k.view(),
                                      v.view(), o_d.view(), lse_d.view(), &options)
            : dilattn_ring_forward(plan.get(), ring.comms[r], ring.split, q.view(), k.view(),
                                   v.view(), o_d.view(), lse_d.view());
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

// The ring's backward on the GPUs from the forward `fwd` against `want`; with `call`, through
// dilattn_ring_backward_ex, every rank's d_sinks against `want_d_sinks` (SPEC 8's bound).
void check_backward(const AttentionCase& c, const Inputs& in, const GpuRing& ring,
                    const std::string& name, const Forward& fwd, const Gradients& want,
                    const ringtest::CallOptions* call = nullptr,
                    const std::vector<double>* want_d_sinks = nullptr) {
  CaseScope scope(name);
  Gradients got{c.q_like(c.dtype), c.kv_like(c.dtype), c.kv_like(c.dtype)};
  std::vector<std::vector<double>> d_sinks(ring.comms.size(),
                                           std::vector<double>(static_cast<size_t>(c.H), NAN));
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
    const dilattn_call_options options =
        call != nullptr ? call->make(d_sinks[static_cast<size_t>(r)].data())
                        : dilattn_call_options{};
    const dilattn_status s =
        call != nullptr
            ? dilattn_ring_backward_ex(plan.get(), ring.comms[r], ring.split, q->view(),
                                       k->view(), v->view(), o->view(), lse->view(), d_o->view(),
                                       dq_d.view(), dk_d.view(), dv_d.view(), &options)
            : dilattn_ring_backward(plan.get(), ring.comms[r], ring.split, q->view(), k->view(),
                                    v->view(), o->view(), lse->view(), d_o->view(), dq_d.view(),
                                    dk_d.view(), dv_d.view());
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
  if (c.sinks && want_d_sinks != nullptr)
    ringtest::check_d_sinks(ringtest::ThreadRanks{}, d_sinks, *want_d_sinks,
                            spec8::of(c.dtype).rtol);
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
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    check_forward(c, in, ring, name, fwd);
    check_backward(c, in, ring, name, fwd, run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1));
  }
}

// SPEC 5.5 on the GPU: each option (and all together) on a ring of P = 3, zigzag.
void options_on_gpu(int gpus) {
  CaseScope scope("ring_cuda_options_within_spec8");
  GpuRing ring;
  ring.split = DILATTN_RING_ZIGZAG;
  ring.comms.assign(3, nullptr);
  if (!CHECK_OK(dilattn_comm_create_threads(3, 60000, ring.comms.data()))) return;
  for (int32_t r = 0; r < 3; ++r) ring.device.push_back(r % gpus);
  for (const ringtest::Option& option : ringtest::kOptions)
    for (AttentionCase c : gpu_cases()) {
      if (!ringtest::ring_supports(c, ring.P())) continue;
      ringtest::CallOptions call;
      option.apply(&c, &call);
      const std::string name = c.name + " + " + option.name + " P=3 zigzag";
      const Inputs in = make_inputs(c, 21, 2.0);
      const ringtest::Single want = ringtest::single_process(c, in, call);
      check_forward(c, in, ring, name, want.fwd, &call);
      check_backward(c, in, ring, name, want.fwd, want.grad, &call, &want.d_sinks);
    }
  for (dilattn_comm comm : ring.comms) dilattn_comm_destroy(comm);
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
  options_on_gpu(gpus);
#if DILATTN_HAVE_NCCL
  nccl_transport(gpus);
#else
  std::printf("ring_cuda: this build has no NCCL; the NCCL transport was not run\n");
#endif
  return finish("ring_cuda");
}
