// ring_test_util.h - runs ring attention (dilattn_ring.h) on P threads of this process and
// assembles the ranks' shards into full tensors, to compare with a single-device run of the
// same plan (tests/cpu/cpu_test_util.h's cases, inputs and comparison).
//
// Each rank gets its own copies of its rows (dilattn_ring_shard_rows), as a rank of a real
// ring would; its outputs are copied back into the full tensors after every rank returned.
#ifndef DILATTN_TESTS_RING_TEST_UTIL_H
#define DILATTN_TESTS_RING_TEST_UTIL_H

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "../cpu/cpu_test_util.h"
#include "dilattn_ring.h"

namespace ringtest {

using cputest::Buffer;
using cputest::Case;
using cputest::ForwardOut;
using cputest::Gradients;
using cputest::Inputs;

struct Ring {
  int32_t P = 1;
  dilattn_ring_split split = DILATTN_RING_CONTIGUOUS;
  dilattn_backend backend = DILATTN_BACKEND_REF;
  int32_t timeout_ms = 60000;
};

inline const char* split_name(dilattn_ring_split s) {
  return s == DILATTN_RING_ZIGZAG ? "zigzag" : "contiguous";
}

// Rows of rank r: up to two ranges, first[i] .. first[i] + count[i].
struct Rows {
  int64_t first[2] = {0, 0}, count[2] = {0, 0};
  int64_t total() const { return count[0] + count[1]; }
};

inline Rows rows_of(int64_t N, const Ring& ring, int32_t rank) {
  Rows rows;
  CPU_CHECK_OK(dilattn_ring_shard_rows(N, ring.P, rank, ring.split, rows.first, rows.count),
               "shard rows");
  return rows;
}

// A buffer [d0, n, d2, d3] (or an LSE [B, H, n, 1]: lse = true) that is never empty, so its
// data pointer is valid even for a rank without rows.
inline void make_shard(Buffer* b, dilattn_dtype t, const Buffer& full, int64_t n, bool lse) {
  const int64_t* s = full.view.shape;
  if (lse)
    b->make(t, s[0], s[1], n, 1, false);
  else
    b->make(t, s[0], n, s[2], s[3], false);
  if (b->bytes.empty()) {
    b->bytes.resize(16);
    b->view.data = b->bytes.data();
  }
}

// Calls f(full row, shard row) for the rows of `rows`.
template <class F>
void for_each_row(const Rows& rows, F&& f) {
  int64_t local = 0;
  for (int i = 0; i < 2; ++i)
    for (int64_t t = 0; t < rows.count[i]; ++t) f(rows.first[i] + t, local++);
}

// Copies rows between a full tensor and a shard; row axis 1 (lse: axis 2).
inline void copy_rows(const Buffer& from, Buffer* to, const Rows& rows, bool lse, bool to_shard) {
  const int64_t* s = from.view.shape;
  for_each_row(rows, [&](int64_t full, int64_t local) {
    const int64_t src_row = to_shard ? full : local, dst_row = to_shard ? local : full;
    const int64_t n1 = lse ? s[1] : s[2];
    for (int64_t a = 0; a < s[0]; ++a)
      for (int64_t x = 0; x < n1; ++x)
        for (int64_t d = 0; d < (lse ? 1 : s[3]); ++d) {
          const double value = lse ? from.at(a, x, src_row, 0) : from.at(a, src_row, x, d);
          const int64_t at = lse ? dilattn::element_offset(to->view, a, x, dst_row, 0)
                                 : dilattn::element_offset(to->view, a, dst_row, x, d);
          dilattn::store_element(to->view.data, to->dtype, at, value);
        }
  });
}

inline Buffer shard_of(const Buffer& full, const Rows& rows, bool lse) {
  Buffer b;
  make_shard(&b, full.dtype, full, rows.total(), lse);
  copy_rows(full, &b, rows, lse, true);
  return b;
}

// Runs body(rank, comm) on P threads of one communicator; returns each rank's status.
inline std::vector<dilattn_status> run_ranks(const Ring& ring,
                                             const std::function<dilattn_status(int32_t, dilattn_comm)>& body) {
  std::vector<dilattn_comm> comms(static_cast<size_t>(ring.P), nullptr);
  CPU_CHECK_OK(dilattn_comm_create_threads(ring.P, ring.timeout_ms, comms.data()), "comm");
  std::vector<dilattn_status> status(static_cast<size_t>(ring.P), DILATTN_SUCCESS);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ring.P; ++r)
    threads.emplace_back([&, r] { status[r] = body(r, comms[r]); });
  for (auto& t : threads) t.join();
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  return status;
}

inline std::string label(const Case& c, const Ring& ring) {
  return c.name + " P=" + std::to_string(ring.P) + " " + split_name(ring.split) + " " +
         dilattn_backend_name(ring.backend);
}

// The ring forward of case c on the given inputs, assembled: O in c.dtype, LSE in f64.
inline ForwardOut ring_forward(const Case& c, const Inputs& in, const Ring& ring) {
  ForwardOut out;
  out.o.make(c.dtype, c.B, c.Nq, c.H, c.D, false);
  out.lse.make(DILATTN_F64, c.B, c.H, c.Nq, 1, false);
  dilattn_plan plan = cputest::make_plan(c, ring.backend, 1);
  const std::string name = label(c, ring);
  std::vector<Buffer> o_shards(static_cast<size_t>(ring.P)), lse_shards(static_cast<size_t>(ring.P));
  std::vector<Rows> rows(static_cast<size_t>(ring.P));
  for (int32_t r = 0; r < ring.P; ++r) rows[r] = rows_of(c.Nq, ring, r);
  const auto status = run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Buffer q = shard_of(in.q, rows[r], false), k = shard_of(in.k, rows[r], false),
           v = shard_of(in.v, rows[r], false);
    make_shard(&o_shards[r], c.dtype, out.o, rows[r].total(), false);
    make_shard(&lse_shards[r], DILATTN_F64, out.lse, rows[r].total(), true);
    const dilattn_status s = dilattn_ring_forward(plan, comm, ring.split, &q.view, &k.view,
                                                  &v.view, &o_shards[r].view, &lse_shards[r].view);
    if (s != DILATTN_SUCCESS)
      std::fprintf(stderr, "FAILED [%s] rank %d: %s (%s)\n", name.c_str(), static_cast<int>(r),
                   dilattn_status_string(s), dilattn_last_error());
    return s;
  });
  for (int32_t r = 0; r < ring.P; ++r) {
    if (status[r] != DILATTN_SUCCESS) ++cputest::failure_count();
    copy_rows(o_shards[r], &out.o, rows[r], false, false);
    copy_rows(lse_shards[r], &out.lse, rows[r], true, false);
  }
  dilattn_plan_destroy(plan);
  return out;
}

// The ring backward from the given forward outputs, assembled. delay_rank >= 0 starts that
// rank late (another schedule, for the determinism test).
inline Gradients ring_backward(const Case& c, const Inputs& in, const ForwardOut& fwd,
                               const Ring& ring, int32_t delay_rank = -1) {
  Gradients g;
  g.dq.make(c.dtype, c.B, c.Nq, c.H, c.D, false);
  g.dk.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, false);
  g.dv.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, false);
  dilattn_plan plan = cputest::make_plan(c, ring.backend, 1);
  const std::string name = label(c, ring);
  const size_t P = static_cast<size_t>(ring.P);
  std::vector<Buffer> dq(P), dk(P), dv(P);
  std::vector<Rows> rows(P);
  for (int32_t r = 0; r < ring.P; ++r) rows[r] = rows_of(c.Nq, ring, r);
  const auto status = run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    if (r == delay_rank) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Buffer q = shard_of(in.q, rows[r], false), k = shard_of(in.k, rows[r], false),
           v = shard_of(in.v, rows[r], false), o = shard_of(fwd.o, rows[r], false),
           lse = shard_of(fwd.lse, rows[r], true), d_o = shard_of(in.d_o, rows[r], false);
    make_shard(&dq[r], c.dtype, g.dq, rows[r].total(), false);
    make_shard(&dk[r], c.dtype, g.dk, rows[r].total(), false);
    make_shard(&dv[r], c.dtype, g.dv, rows[r].total(), false);
    const dilattn_status s = dilattn_ring_backward(plan, comm, ring.split, &q.view, &k.view,
                                                   &v.view, &o.view, &lse.view, &d_o.view,
                                                   &dq[r].view, &dk[r].view, &dv[r].view);
    if (s != DILATTN_SUCCESS)
      std::fprintf(stderr, "FAILED [%s] rank %d: %s (%s)\n", name.c_str(), static_cast<int>(r),
                   dilattn_status_string(s), dilattn_last_error());
    return s;
  });
  for (int32_t r = 0; r < ring.P; ++r) {
    if (status[r] != DILATTN_SUCCESS) ++cputest::failure_count();
    copy_rows(dq[r], &g.dq, rows[r], false, false);
    copy_rows(dk[r], &g.dk, rows[r], false, false);
    copy_rows(dv[r], &g.dv, rows[r], false, false);
  }
  dilattn_plan_destroy(plan);
  return g;
}

// The cases of tests/ring: each kind, GQA, causal, dilated segments shorter and longer than a
// shard (and one longer than N), uneven N, N < P (ranks without rows), block-sparse with
// blocks that divide every shard of P = 1, 2, 4.
inline std::vector<Case> ring_cases(dilattn_dtype dtype) {
  std::vector<Case> cases;
  auto add = [&](const char* name, int64_t B, int64_t N, int64_t H, int64_t Hkv, int64_t D,
                 bool causal) {
    Case c;
    c.name = name; c.B = B; c.Nq = c.Nk = N; c.H = H; c.Hkv = Hkv; c.D = D;
    c.causal = causal; c.dtype = dtype;
    cases.push_back(c);
    return &cases.back();
  };
  add("dense_gqa", 2, 77, 2, 1, 16, false);
  add("dense_causal", 1, 100, 2, 2, 8, true);
  add("dense_n_below_p", 1, 3, 2, 1, 4, true);
  Case* c = add("dilated_mod_short_and_long_segments", 1, 120, 4, 2, 8, false);
  c->kind = DILATTN_KIND_DILATED; c->segments = {16, 48, 200}; c->dilations = {1, 2, 4};
  c = add("dilated_block_causal", 1, 99, 3, 1, 8, true);
  c->kind = DILATTN_KIND_DILATED; c->segments = {10, 64}; c->dilations = {2, 3};
  c->mode = DILATTN_HEADS_BLOCK;
  c = add("dilated_groups_causal", 1, 90, 3, 3, 8, true);
  c->kind = DILATTN_KIND_DILATED; c->segments = {8, 30, 90}; c->dilations = {1, 2, 3};
  c->mode = DILATTN_HEADS_GROUPS;
  c = add("sparse_per_head", 1, 128, 2, 1, 8, false);
  c->kind = DILATTN_KIND_BLOCK_SPARSE; c->bq = c->bk = 16; c->mask_heads = 2; c->density = 0.4;
  c = add("sparse_causal", 1, 128, 2, 2, 8, true);
  c->kind = DILATTN_KIND_BLOCK_SPARSE; c->bq = c->bk = 16; c->density = 0.5;
  return cases;
}

// Block-sparse cases need every shard boundary on a block boundary: 128 rows in 16-row blocks
// split into 1, 2 or 4 ranks (2, 4 or 8 zigzag chunks). The others run every P.
inline bool ring_supports(const Case& c, int32_t P) {
  return c.kind != DILATTN_KIND_BLOCK_SPARSE || P != 3;
}

}  // namespace ringtest

#endif  // DILATTN_TESTS_RING_TEST_UTIL_H
