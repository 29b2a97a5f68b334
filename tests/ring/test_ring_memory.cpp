// test_ring_memory.cpp - SPEC 5 "memory per rank is O(N/P)": at P = 4, N = 65536, every rank's
// bytes (its shards of Q, K, V, O, LSE plus everything the ring allocated, dilattn_comm_peak_bytes:
// chunks in flight, running and partial O/LSE, the sub-problems' workspace) stay within 1.3x of
// its shards plus two K/V chunks in flight, the least any ring that overlaps a transfer with
// compute holds. Dilated attention with 256-row segments keeps the compute small; the ring still
// carries every chunk around. (The backend's own allocations, if any, are not counted.)
#include <random>
#include <thread>
#include <vector>

#include "ring_test_util.h"

int main() {
  const int32_t P = 4;
  const int64_t N = 65536, H = 1, D = 64;
  cputest::Case c;
  c.name = "ring_memory_within_1_3x_of_shards_and_two_chunks";
  c.Nq = c.Nk = N;
  c.H = c.Hkv = H;
  c.D = D;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {256};
  c.dilations = {1};
  dilattn_plan plan = cputest::make_plan(c, DILATTN_BACKEND_CPU, 1);
  const ringtest::Ring ring{P, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_CPU};
  std::vector<size_t> peak(P, 0), shard_bytes(P, 0), chunk_bytes(P, 0);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    const int64_t rows = ringtest::rows_of(N, ring, r).total();
    std::mt19937_64 rng(static_cast<uint64_t>(r));
    cputest::Buffer q, k, v, o, lse;
    q.make(DILATTN_F32, 1, rows, H, D, false);
    k.make(DILATTN_F32, 1, rows, H, D, false);
    v.make(DILATTN_F32, 1, rows, H, D, false);
    o.make(DILATTN_F32, 1, rows, H, D, false);
    lse.make(DILATTN_F32, 1, H, rows, 1, false);
    q.fill_random(rng, -1, 1);
    k.fill_random(rng, -1, 1);
    v.fill_random(rng, -1, 1);
    const dilattn_status s = dilattn_ring_forward(plan, comm, ring.split, &q.view, &k.view,
                                                  &v.view, &o.view, &lse.view);
    dilattn_comm_peak_bytes(comm, &peak[r]);
    shard_bytes[r] = q.bytes.size() + k.bytes.size() + v.bytes.size() + o.bytes.size() +
                     lse.bytes.size();
    chunk_bytes[r] = 2 * (k.bytes.size() + v.bytes.size());  // two K/V chunks in flight
    return s;
  });
  for (int32_t r = 0; r < P; ++r) {
    if (status[r] != DILATTN_SUCCESS) {
      std::fprintf(stderr, "FAILED rank %d: %s (%s)\n", static_cast<int>(r),
                   dilattn_status_string(status[r]), dilattn_last_error());
      ++cputest::failure_count();
      continue;
    }
    const double used = static_cast<double>(shard_bytes[r] + peak[r]);
    const double bound = 1.3 * static_cast<double>(shard_bytes[r] + chunk_bytes[r]);
    std::printf("rank %d: shards %zu B, ring peak %zu B, total %.0f B, bound %.0f B (%.3fx)\n",
                static_cast<int>(r), shard_bytes[r], peak[r], used, bound,
                used / static_cast<double>(shard_bytes[r] + chunk_bytes[r]));
    if (peak[r] == 0 || used > bound) {
      std::fprintf(stderr, "FAILED rank %d: %.0f bytes above the bound %.0f (or none counted)\n",
                   static_cast<int>(r), used, bound);
      ++cputest::failure_count();
    }
  }
  dilattn_plan_destroy(plan);
  return cputest::failure_count() != 0;
}
