// ring_comm.cpp - the communicator handles of dilattn_ring.h: create (threads and NCCL
// transports), destroy, rank, peak bytes; and dilattn_ring_shard_rows.
#include <vector>

#include "abi_enum.h"
#include "errors.h"
#include "ring_shard.h"
#include "ring_transport.h"

using dilattn::set_error;

namespace {

dilattn_status check_comm(dilattn_comm comm) { return dilattn::check_live(comm, dilattn_comm_s::kKind, "comm"); }

}  // namespace

extern "C" dilattn_status dilattn_comm_create_threads(int32_t num_ranks, int32_t timeout_ms,
                                                      dilattn_comm* comms) {
  DILATTN_ABI_BEGIN
  if (comms == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'comms' is NULL");
  if (num_ranks < 1 || num_ranks > dilattn::kMaxRingRanks)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'num_ranks' = %d: must be in [1, %d]",
                     static_cast<int>(num_ranks), static_cast<int>(dilattn::kMaxRingRanks));
  if (timeout_ms < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'timeout_ms' = %d: must be >= 1",
                     static_cast<int>(timeout_ms));
  std::vector<std::unique_ptr<dilattn::RingTransport>> transports(static_cast<size_t>(num_ranks));
  dilattn_status s = dilattn::make_thread_transports(num_ranks, timeout_ms, transports.data());
  if (s != DILATTN_SUCCESS) return s;
  std::vector<std::unique_ptr<dilattn_comm_s>> made;
  for (auto& t : transports) {
    made.push_back(std::make_unique<dilattn_comm_s>());
    made.back()->transport = std::move(t);
  }
  for (int32_t r = 0; r < num_ranks; ++r) comms[r] = made[r].release();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_comm_create_nccl(const void* nccl_comm, void* cuda_stream,
                                                   int32_t timeout_ms, dilattn_comm* comm) {
  DILATTN_ABI_BEGIN
  if (comm == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'comm' is NULL");
  if (nccl_comm == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER,
                     "argument 'nccl_comm' is NULL (pass the address of your ncclComm_t)");
  if (timeout_ms < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'timeout_ms' = %d: must be >= 1",
                     static_cast<int>(timeout_ms));
  std::unique_ptr<dilattn::RingTransport> transport;
  dilattn_status s = dilattn::make_nccl_transport(nccl_comm, cuda_stream, timeout_ms, &transport);
  if (s != DILATTN_SUCCESS) return s;
  auto made = std::make_unique<dilattn_comm_s>();
  made->transport = std::move(transport);
  *comm = made.release();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_comm_destroy(dilattn_comm comm) {
  DILATTN_ABI_BEGIN
  if (comm == nullptr) return DILATTN_SUCCESS;
  if (dilattn_status s = dilattn::release_live(comm, dilattn_comm_s::kKind, "comm")) return s;
  delete comm;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_comm_rank(dilattn_comm comm, int32_t* rank, int32_t* num_ranks) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_comm(comm)) return s;
  if (rank == nullptr && num_ranks == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "arguments 'rank' and 'num_ranks' are both NULL");
  if (rank) *rank = comm->transport->rank();
  if (num_ranks) *num_ranks = comm->transport->size();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_comm_peak_bytes(dilattn_comm comm, size_t* bytes) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_comm(comm)) return s;
  if (bytes == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'bytes' is NULL");
  *bytes = comm->peak_bytes;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_ring_shard_rows(int64_t seqlen, int32_t num_ranks, int32_t rank,
                                                  dilattn_ring_split split, int64_t first[2],
                                                  int64_t count[2]) {
  DILATTN_ABI_BEGIN
  if (first == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'first' is NULL");
  if (count == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'count' is NULL");
  if (seqlen < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'seqlen' = %lld: must be >= 1",
                     static_cast<long long>(seqlen));
  if (num_ranks < 1 || num_ranks > dilattn::kMaxRingRanks)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'num_ranks' = %d: must be in [1, %d]",
                     static_cast<int>(num_ranks), static_cast<int>(dilattn::kMaxRingRanks));
  if (rank < 0 || rank >= num_ranks)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'rank' = %d: must be in [0, %d)",
                     static_cast<int>(rank), static_cast<int>(num_ranks));
  const int32_t split_value = dilattn::enum_value(split);
  if (split_value != DILATTN_RING_CONTIGUOUS && split_value != DILATTN_RING_ZIGZAG)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'split' = %d is not a ring split",
                     static_cast<int>(split_value));
  const dilattn::ShardRows rows = dilattn::shard_rows(seqlen, num_ranks, rank, split_value);
  for (int r = 0; r < 2; ++r) {
    first[r] = rows.range[r].first;
    count[r] = rows.range[r].count;
  }
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
