// test_ring_device_errors.cpp - SPEC 7 for the device side of ring attention, the parts that
// need no GPU:
//   nccl_comm_arguments_checked: dilattn_comm_create_nccl with NULL pointers, a bad timeout, a
//     pointer to a NULL ncclComm_t (a build with NCCL), or any call in a build without NCCL
//     (UNSUPPORTED, saying so); nothing written to *comm.
//   nccl_comm_needs_cuda_plan: a communicator whose transport moves device memory only (as
//     NCCL's; here a one-rank stand-in) with a plan on the ref backend is refused with
//     UNSUPPORTED naming NCCL and the cuda backend, outputs untouched.
//   comm_device_must_hold_every_tensor: a communicator bound to one GPU (as NCCL's, from
//     ncclCommCuDevice; here a one-rank stand-in bound to device 1, which moves host memory
//     too so that an emu plan reaches the check) refuses a call whose tensors are elsewhere
//     with DEVICE_MISMATCH naming the first such tensor and both devices, outputs untouched
//     (built where the emu backend is: RING_TEST_EMU).
//   cuda_ring_ops_in_build_without_cuda: in a build without CUDA the cuda backend's ring ops
//     answer DEVICE_NOT_BUILT (a cuda plan cannot be made there either).
#include <cstring>
#include <memory>

#include "dilattn_config.h"
#include "ring_ops.h"
#include "ring_test_util.h"
#include "ring_transport.h"

using namespace harness;

namespace {

void nccl_comm_arguments() {
  CaseScope scope("nccl_comm_arguments_checked");
  const dilattn_comm untouched_comm = reinterpret_cast<dilattn_comm>(0x1234);
  dilattn_comm comm = untouched_comm;
  void* nccl_comm = nullptr;  // the caller's ncclComm_t, NULL here
  CHECK_ERROR(dilattn_comm_create_nccl(&nccl_comm, nullptr, 1000, nullptr),
              DILATTN_ERROR_NULL_POINTER, "'comm'");
  CHECK_ERROR(dilattn_comm_create_nccl(nullptr, nullptr, 1000, &comm), DILATTN_ERROR_NULL_POINTER,
              "'nccl_comm'");
  CHECK_ERROR(dilattn_comm_create_nccl(&nccl_comm, nullptr, 0, &comm), DILATTN_ERROR_INVALID_VALUE,
              "'timeout_ms' = 0");
#if DILATTN_HAVE_NCCL
  CHECK_ERROR(dilattn_comm_create_nccl(&nccl_comm, nullptr, 1000, &comm),
              DILATTN_ERROR_NULL_POINTER, "NULL ncclComm_t");
#else
  CHECK_ERROR(dilattn_comm_create_nccl(&nccl_comm, nullptr, 1000, &comm),
              DILATTN_ERROR_UNSUPPORTED, "this build has no NCCL");
#endif
  CHECK_MSG(comm == untouched_comm, "dilattn_comm_create_nccl wrote *comm on an error");
}

// One rank of a stand-in for the NCCL transport: the memory it moves, whether it is
// stream-ordered, the GPU it is bound to (-1: none). Its exchanges move nothing (P = 1).
class StandInTransport final : public dilattn::RingTransport {
 public:
  StandInTransport(Memory memory, bool stream_ordered, int32_t device_index)
      : memory_(memory), stream_ordered_(stream_ordered), device_index_(device_index) {}
  int32_t rank() const override { return 0; }
  int32_t size() const override { return 1; }
  dilattn_status allgather(const dilattn::RingVote& mine, dilattn::RingVote* all) override {
    all[0] = mine;
    return DILATTN_SUCCESS;
  }
  dilattn_status exchange_begin(const dilattn::MessageHalves&, int32_t, void*, size_t,
                                int32_t) override {
    return DILATTN_SUCCESS;
  }
  dilattn_status exchange_end() override { return DILATTN_SUCCESS; }
  Memory memory() const override { return memory_; }
  bool stream_ordered() const override { return stream_ordered_; }
  int32_t device_index() const override { return device_index_; }

 private:
  Memory memory_;
  bool stream_ordered_;
  int32_t device_index_;
};

// Dense, N = 8, one head of 4: the calls below are refused before any work.
AttentionCase tiny_dense_case() {
  AttentionCase c;
  c.name = "dense";
  c.Nq = c.Nk = 8;
  c.H = c.Hkv = 1;
  c.D = 4;
  return c;
}

void nccl_comm_needs_cuda_plan() {
  CaseScope scope("nccl_comm_needs_cuda_plan");
  const AttentionCase c = tiny_dense_case();
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return;
  auto* comm = new dilattn_comm_s;
  // Device memory only, as the NCCL transport moves.
  comm->transport = std::make_unique<StandInTransport>(
      dilattn::RingTransport::Memory::device, true, -1);
  Tensor q(DILATTN_F32, 1, 8, 1, 4), k(DILATTN_F32, 1, 8, 1, 4), v(DILATTN_F32, 1, 8, 1, 4);
  Tensor o(DILATTN_F32, 1, 8, 1, 4), lse(DILATTN_F32, 1, 1, 8, 1);
  o.poison();
  lse.poison();
  CHECK_ERROR(dilattn_ring_forward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(), &k.view(),
                                   &v.view(), &o.view(), &lse.view()),
              DILATTN_ERROR_UNSUPPORTED, "NCCL", "cuda backend", "ref");
  CHECK_MSG(o.is_poisoned() && lse.is_poisoned(), "the refused ring call wrote its outputs");
  CHECK_OK(dilattn_comm_destroy(comm));
}

#if RING_TEST_EMU
void comm_device_must_hold_every_tensor() {
  CaseScope scope("comm_device_must_hold_every_tensor");
  const AttentionCase c = tiny_dense_case();
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_EMU, 1))) return;
  auto* comm = new dilattn_comm_s;
  // Bound to GPU 1, as an NCCL communicator on that GPU, that also moves host memory.
  comm->transport = std::make_unique<StandInTransport>(
      dilattn::RingTransport::Memory::host_or_device, false, 1);
  Tensor q(DILATTN_F32, 1, 8, 1, 4), k(DILATTN_F32, 1, 8, 1, 4), v(DILATTN_F32, 1, 8, 1, 4);
  Tensor o(DILATTN_F32, 1, 8, 1, 4), lse(DILATTN_F32, 1, 1, 8, 1);
  o.poison();
  lse.poison();
  CHECK_ERROR(dilattn_ring_forward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(), &k.view(),
                                   &v.view(), &o.view(), &lse.view()),
              DILATTN_ERROR_DEVICE_MISMATCH, "'q'", "cpu device 0", "cuda device 1");
  CHECK_MSG(o.is_poisoned() && lse.is_poisoned(), "the refused ring call wrote its outputs");
  Tensor d_o(DILATTN_F32, 1, 8, 1, 4), dq(DILATTN_F32, 1, 8, 1, 4), dk(DILATTN_F32, 1, 8, 1, 4),
      dv(DILATTN_F32, 1, 8, 1, 4);
  dq.poison();
  CHECK_ERROR(dilattn_ring_backward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(),
                                    &k.view(), &v.view(), &o.view(), &lse.view(), &d_o.view(),
                                    &dq.view(), &dk.view(), &dv.view()),
              DILATTN_ERROR_DEVICE_MISMATCH, "'q'", "cuda device 1");
  CHECK_MSG(dq.is_poisoned(), "the refused ring backward wrote dq");
  CHECK_OK(dilattn_comm_destroy(comm));
}
#endif

void cuda_ring_ops_without_cuda() {
  CaseScope scope("cuda_ring_ops_in_build_without_cuda");
#if DILATTN_HAVE_CUDA
  std::printf("cuda_ring_ops_in_build_without_cuda: not checked, this build has CUDA\n");
#else
  std::unique_ptr<dilattn::RingOps> ops;
  CHECK_ERROR(dilattn::find_backend(DILATTN_BACKEND_CUDA)->ring_ops(0, nullptr, &ops),
              DILATTN_ERROR_DEVICE_NOT_BUILT, "no CUDA");
  CHECK_MSG(ops == nullptr, "the stub made ring ops");
#endif
}

}  // namespace

int main() {
  nccl_comm_arguments();
  nccl_comm_needs_cuda_plan();
#if RING_TEST_EMU
  comm_device_must_hold_every_tensor();
#else
  std::printf("comm_device_must_hold_every_tensor: not built, this build has no emu backend\n");
#endif
  cuda_ring_ops_without_cuda();
  return finish("ring_device_errors");
}
