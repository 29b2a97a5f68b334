// test_ring_memory.cpp - SPEC 5 "memory per rank is O(N/P)": at P = 4, N = 65536, every rank's
// bytes (its shards of Q, K, V, O, LSE plus everything the ring allocated, dilattn_comm_peak_bytes:
// chunks in flight, running and partial O/LSE, the sub-problems' workspace) stay within 1.3x of
// its shards plus the K/V chunks the ring holds. (The backend's own allocations, if any, are not
// counted.) Two cases, both with little compute:
//   ring_memory_nothing_sent_within_1_3x_of_shards_and_two_chunks: dilated attention with 256-row segments.
//     Its segments lie inside the shards, so the ring sends nothing and needs no chunk buffer
//     (lib/ring/ring_needs.h); the bound keeps the two chunks of a ring that overlaps a
//     transfer with compute.
//   ring_memory_whole_chunks_within_1_3x_of_shards_and_two_chunks: block-sparse, each 256-row
//     query block listing one key block of every other rank's shard, so at every step the whole
//     K/V chunk of the owner travels: the ring holds two (the chunk it computes on, the next
//     arriving; lib/ring/ring_kv_chunks.h), sending straight from the caller's K and V and
//     computing where the rows arrived. The threads transport holds no staging buffer (the MPI
//     transport's two staging messages, counted in dilattn_comm_peak_bytes there, are not in
//     this bound).
// The backward, on the same two cases: within 1.5x of its shards (Q, K, V, O, LSE, dO, dQ, dK,
// dV) plus two K/V chunks and one dK/dV partial (1.43x with whole chunks travelling, as
// lib/ring/ring_backward.cpp counts).
#include <string>
#include <vector>

#include "ring_test_util.h"

using namespace harness;

namespace {

// Forward: the bound is 1.3x of shards + `chunks` K/V chunks. Backward (backward = true): the
// shards are Q, K, V, O, LSE, dO, dQ, dK, dV; the ring holds two K/V chunks, this step's dK/dV
// partial of the rows received (a chunk pair) and, as lib/ring/ring_backward.cpp lists, dQ and
// dK/dV accumulators and the sub-problems' gradients besides: 1.5x of shards + `chunks` chunk
// pairs (two K/V chunks and one partial: chunks = 3).
void check_peak(const AttentionCase& c, int64_t chunks, bool backward = false) {
  const int32_t P = 4;
  CaseScope scope(c.name);
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CPU, 1))) return;
  const ringtest::Ring ring{P, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_CPU};
  std::vector<size_t> peak(P, 0), shard_bytes(P, 0), chunk_bytes(P, 0);
  std::vector<std::string> messages(P);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    const int64_t rows = ringtest::rows_of(c.Nq, ring, r).total();
    SplitMix64 rng(static_cast<uint64_t>(r));
    Tensor q(DILATTN_F32, 1, rows, c.H, c.D), k(DILATTN_F32, 1, rows, c.Hkv, c.D),
        v(DILATTN_F32, 1, rows, c.Hkv, c.D), o(DILATTN_F32, 1, rows, c.H, c.D),
        lse(DILATTN_F32, 1, c.H, rows, 1);
    fill_uniform(q, rng, -1, 1);
    fill_uniform(k, rng, -1, 1);
    fill_uniform(v, rng, -1, 1);
    dilattn_status s = DILATTN_SUCCESS;
    shard_bytes[r] = q.bytes().size() + k.bytes().size() + v.bytes().size() + o.bytes().size() +
                     lse.bytes().size();
    if (!backward) {
      s = dilattn_ring_forward(plan.get(), comm, ring.split, &q.view(), &k.view(), &v.view(),
                               &o.view(), &lse.view());
    } else {
      // Values do not change what is allocated: O and LSE need not be the forward's.
      Tensor d_o(DILATTN_F32, 1, rows, c.H, c.D), dq(DILATTN_F32, 1, rows, c.H, c.D),
          dk(DILATTN_F32, 1, rows, c.Hkv, c.D), dv(DILATTN_F32, 1, rows, c.Hkv, c.D);
      fill_uniform(o, rng, -1, 1);
      fill_uniform(lse, rng, 1, 2);
      fill_uniform(d_o, rng, -1, 1);
      s = dilattn_ring_backward(plan.get(), comm, ring.split, &q.view(), &k.view(), &v.view(),
                                &o.view(), &lse.view(), &d_o.view(), &dq.view(), &dk.view(),
                                &dv.view());
      shard_bytes[r] += d_o.bytes().size() + dq.bytes().size() + dk.bytes().size() +
                        dv.bytes().size();
    }
    messages[r] = dilattn_last_error();
    dilattn_comm_peak_bytes(comm, &peak[r]);
    chunk_bytes[r] = static_cast<size_t>(chunks) * (k.bytes().size() + v.bytes().size());
    return s;
  });
  ringtest::check_ranks_succeeded(ringtest::host_of(ring), status, messages);
  for (int32_t r = 0; r < P; ++r) {
    if (status[r] != DILATTN_SUCCESS) continue;
    const double used = static_cast<double>(shard_bytes[r] + peak[r]);
    const double bound = (backward ? 1.5 : 1.3) * static_cast<double>(shard_bytes[r] + chunk_bytes[r]);
    std::printf("%s rank %d: shards %zu B, ring peak %zu B, total %.0f B, bound %.0f B (%.3fx)\n",
                c.name.c_str(), static_cast<int>(r), shard_bytes[r], peak[r], used, bound,
                used / static_cast<double>(shard_bytes[r] + chunk_bytes[r]));
    CHECK_MSG(peak[r] > 0, "rank %d: the ring counted no bytes", static_cast<int>(r));
    CHECK_MSG(used <= bound, "rank %d: %.0f bytes above the bound %.0f", static_cast<int>(r), used,
              bound);
  }
}

AttentionCase memory_case(const char* name) {
  AttentionCase c;
  c.name = name;
  c.Nq = c.Nk = 65536;
  c.H = c.Hkv = 1;
  c.D = 64;
  return c;
}

}  // namespace

int main() {
  AttentionCase dilated =
      memory_case("ring_memory_nothing_sent_within_1_3x_of_shards_and_two_chunks");
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.segments = {256};
  dilated.dilations = {1};
  check_peak(dilated, 2);

  AttentionCase sparse =
      memory_case("ring_memory_whole_chunks_within_1_3x_of_shards_and_two_chunks");
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  const int64_t blocks = 256, per_rank = blocks / 4;
  sparse.mask.bq = sparse.mask.bk = sparse.Nq / blocks;
  for (int64_t i = 0; i < blocks; ++i) {
    sparse.mask.row_ptr.push_back(static_cast<int64_t>(sparse.mask.col_idx.size()));
    // The block at the same place in every other rank's shard, ascending.
    for (int64_t at = i % per_rank; at < blocks; at += per_rank)
      if (at / per_rank != i / per_rank) sparse.mask.col_idx.push_back(at);
  }
  sparse.mask.row_ptr.push_back(static_cast<int64_t>(sparse.mask.col_idx.size()));
  check_peak(sparse, 2);

  dilated.name = "ring_memory_backward_nothing_sent_within_1_5x_of_shards_and_three_chunks";
  check_peak(dilated, 3, true);
  sparse.name = "ring_memory_backward_whole_chunks_within_1_5x_of_shards_and_three_chunks";
  check_peak(sparse, 3, true);
  return finish("ring_memory_per_rank_bounded");
}
