// test_ring_memory.cpp - SPEC 5 "memory per rank is O(N/P)": at P = 4, N = 65536, every rank's
// bytes (its shards of Q, K, V, O, LSE plus everything the ring allocated, dilattn_comm_peak_bytes:
// chunks in flight, running and partial O/LSE, the sub-problems' workspace) stay within 1.3x of
// its shards plus two K/V chunks in flight, the least any ring that overlaps a transfer with
// compute holds. Dilated attention with 256-row segments keeps the compute small; the ring still
// carries every chunk around. (The backend's own allocations, if any, are not counted.)
#include <vector>

#include "ring_test_util.h"

using namespace harness;

int main() {
  const int32_t P = 4;
  const int64_t N = 65536, H = 1, D = 64;
  AttentionCase c;
  c.name = "ring_memory_within_1_3x_of_shards_and_two_chunks";
  c.Nq = c.Nk = N;
  c.H = c.Hkv = H;
  c.D = D;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {256};
  c.dilations = {1};
  CaseScope scope(c.name);
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CPU, 1))) return finish("ring_memory");
  const ringtest::Ring ring{P, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_CPU};
  std::vector<size_t> peak(P, 0), shard_bytes(P, 0), chunk_bytes(P, 0);
  std::vector<std::string> messages(P);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    const int64_t rows = ringtest::rows_of(N, ring, r).total();
    SplitMix64 rng(static_cast<uint64_t>(r));
    Tensor q(DILATTN_F32, 1, rows, H, D), k(DILATTN_F32, 1, rows, H, D),
        v(DILATTN_F32, 1, rows, H, D), o(DILATTN_F32, 1, rows, H, D),
        lse(DILATTN_F32, 1, H, rows, 1);
    fill_uniform(q, rng, -1, 1);
    fill_uniform(k, rng, -1, 1);
    fill_uniform(v, rng, -1, 1);
    const dilattn_status s = dilattn_ring_forward(plan.get(), comm, ring.split, &q.view(),
                                                  &k.view(), &v.view(), &o.view(), &lse.view());
    messages[r] = dilattn_last_error();
    dilattn_comm_peak_bytes(comm, &peak[r]);
    shard_bytes[r] = q.bytes().size() + k.bytes().size() + v.bytes().size() + o.bytes().size() +
                     lse.bytes().size();
    chunk_bytes[r] = 2 * (k.bytes().size() + v.bytes().size());  // two K/V chunks in flight
    return s;
  });
  ringtest::check_ranks_succeeded(ringtest::host_of(ring), status, messages);
  for (int32_t r = 0; r < P; ++r) {
    if (status[r] != DILATTN_SUCCESS) continue;
    const double used = static_cast<double>(shard_bytes[r] + peak[r]);
    const double bound = 1.3 * static_cast<double>(shard_bytes[r] + chunk_bytes[r]);
    std::printf("rank %d: shards %zu B, ring peak %zu B, total %.0f B, bound %.0f B (%.3fx)\n",
                static_cast<int>(r), shard_bytes[r], peak[r], used, bound,
                used / static_cast<double>(shard_bytes[r] + chunk_bytes[r]));
    CHECK_MSG(peak[r] > 0, "rank %d: the ring counted no bytes", static_cast<int>(r));
    CHECK_MSG(used <= bound, "rank %d: %.0f bytes above the bound %.0f", static_cast<int>(r), used,
              bound);
  }
  return finish("ring_memory_per_rank_bounded");
}
