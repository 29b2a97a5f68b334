// ring_test_util.h - runs ring attention (dilattn_ring.h) on P threads of this process (or, with
// a RankHost, one rank per MPI process: tests/ring/mpi/) and assembles the ranks' shards into
// full tensors, to compare with a single-device run of the same plan. The ring-specific layer only: cases, inputs, plans, checks and the SPEC 8
// comparison are tests/common's (attention_case.h, attention_run.h, check.h, compare.h).
//
// Each rank gets its own copies of its rows (dilattn_ring_shard_rows), as a rank of a real
// ring would; its outputs, poisoned first (tensor.h) so an element the ring forgets to write
// fails the comparison, are copied back into the full tensors after every rank returned, and
// each rank's status is a check naming the case, the ring and the rank.
#ifndef DILATTN_TESTS_RING_TEST_UTIL_H
#define DILATTN_TESTS_RING_TEST_UTIL_H

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../common/attention_run.h"
#include "../common/check.h"
#include "../common/compare.h"
#include "dilattn_ring.h"

namespace ringtest {

using harness::AttentionCase;
using harness::Tensor;

class RankHost;

struct Ring {
  int32_t P = 1;
  dilattn_ring_split split = DILATTN_RING_CONTIGUOUS;
  dilattn_backend backend = DILATTN_BACKEND_REF;
  int32_t timeout_ms = 60000;
  const RankHost* host = nullptr;  // nullptr: P threads of this process (ThreadRanks)
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
  CHECK_OK(dilattn_ring_shard_rows(N, ring.P, rank, ring.split, rows.first, rows.count));
  return rows;
}

// A shard [d0, n, d2, d3] of `full` (an LSE [B, H, n, 1] when lse), contiguous, in dtype t.
// A rank without rows gets a view of 0 rows over one row's bytes, so its data pointer is valid.
inline Tensor shard_like(const Tensor& full, dilattn_dtype t, int64_t n, bool lse) {
  const int64_t rows = n > 0 ? n : 1;
  Tensor shard = lse ? Tensor(t, full.dim(0), full.dim(1), rows, 1)
                     : Tensor(t, full.dim(0), rows, full.dim(2), full.dim(3));
  if (n == 0) {
    dilattn_tensor& v = shard.view();
    v = lse ? dilattn_tensor_contiguous(v.data, t, full.dim(0), full.dim(1), 0, 1)
            : dilattn_tensor_contiguous(v.data, t, full.dim(0), 0, full.dim(2), full.dim(3));
  }
  return shard;
}

// Calls f(full row, shard row) for the rows of `rows`.
template <class F>
void for_each_row(const Rows& rows, F&& f) {
  int64_t local = 0;
  for (int i = 0; i < 2; ++i)
    for (int64_t t = 0; t < rows.count[i]; ++t) f(rows.first[i] + t, local++);
}

// Copies rows between a full tensor and a shard; row axis 1 (lse: axis 2).
inline void copy_rows(const Tensor& from, Tensor* to, const Rows& rows, bool lse, bool to_shard) {
  for_each_row(rows, [&](int64_t full, int64_t local) {
    const int64_t src_row = to_shard ? full : local, dst_row = to_shard ? local : full;
    const int64_t n1 = lse ? from.dim(1) : from.dim(2);
    for (int64_t a = 0; a < from.dim(0); ++a)
      for (int64_t x = 0; x < n1; ++x)
        for (int64_t d = 0; d < (lse ? 1 : from.dim(3)); ++d) {
          if (lse)
            to->set(a, x, dst_row, 0, from.at(a, x, src_row, 0));
          else
            to->set(a, dst_row, x, d, from.at(a, src_row, x, d));
        }
  });
}

// The rows of `full` as a shard of its own (the same dtype).
inline Tensor shard_of(const Tensor& full, const Rows& rows, bool lse) {
  Tensor shard = shard_like(full, full.dtype(), rows.total(), lse);
  copy_rows(full, &shard, rows, lse, true);
  return shard;
}

// The per-call options of a ring call (dilattn_ring_forward_ex / _backward_ex, SPEC 10.3,
// 11.2): the dropout seed and offset, and the sink logits (empty: none).
struct CallOptions {
  uint64_t seed = 0, offset = 0;
  std::vector<double> sinks;
  // The dilattn_call_options of a call; d_sinks (may be null) receives the sinks' gradient.
  dilattn_call_options make(double* d_sinks = nullptr) const {
    dilattn_call_options o = dilattn_call_options_make();
    o.dropout_seed = seed;
    o.dropout_offset = offset;
    o.sinks = sinks.empty() ? nullptr : sinks.data();
    o.d_sinks = sinks.empty() ? nullptr : d_sinks;
    return o;
  }
};

using RankBody = std::function<dilattn_status(int32_t, dilattn_comm)>;

// Where the ranks of a ring run: all on threads of this process (ThreadRanks), or one per MPI
// process (tests/ring/mpi/mpi_ranks.h). The ring helpers below run the same way on either.
class RankHost {
 public:
  virtual ~RankHost() = default;
  // Runs body(rank, comm) for every rank hosted here; each rank's status (SUCCESS for a rank
  // hosted elsewhere).
  virtual std::vector<dilattn_status> run(const Ring& ring, const RankBody& body) const = 0;
  virtual bool hosts(int32_t rank) const = 0;
  // Makes the bytes of rank `rank`'s tensor *t, written where that rank runs, the same here.
  virtual void share(int32_t rank, Tensor* t) const = 0;
};

// Runs body(rank, comm) on P threads of one communicator; returns each rank's status.
inline std::vector<dilattn_status> run_ranks(const Ring& ring, const RankBody& body) {
  std::vector<dilattn_comm> comms(static_cast<size_t>(ring.P), nullptr);
  std::vector<dilattn_status> status(static_cast<size_t>(ring.P), DILATTN_ERROR_COMM);
  if (!CHECK_OK(dilattn_comm_create_threads(ring.P, ring.timeout_ms, comms.data())))
    return status;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ring.P; ++r)
    threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = body(r, comms[r]); });
  for (auto& t : threads) t.join();
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  return status;
}

class ThreadRanks final : public RankHost {
 public:
  std::vector<dilattn_status> run(const Ring& ring, const RankBody& body) const override {
    return run_ranks(ring, body);
  }
  bool hosts(int32_t) const override { return true; }
  void share(int32_t, Tensor*) const override {}
};

inline const RankHost& host_of(const Ring& ring) {
  static const ThreadRanks threads;
  return ring.host != nullptr ? *ring.host : threads;
}

inline std::string label(const AttentionCase& c, const Ring& ring) {
  return c.name + " P=" + std::to_string(ring.P) + " " + split_name(ring.split) + " " +
         dilattn_backend_name(ring.backend);
}

// One check per rank hosted here: its ring call succeeded (else its status and last error).
inline void check_ranks_succeeded(const RankHost& host, const std::vector<dilattn_status>& status,
                                  const std::vector<std::string>& messages) {
  for (size_t r = 0; r < status.size(); ++r)
    if (host.hosts(static_cast<int32_t>(r))) CHECK_MSG(status[r] == DILATTN_SUCCESS, "rank %zu: %s (%s)", r,
              dilattn_status_string(status[r]), messages[r].c_str());
}

// The ring forward of case c on the given inputs, assembled: O in Q's dtype, LSE in f64 (the
// ring writes the LSE dtype it is given; f64 keeps the reference's precision for the f64 ring).
// With `call`, each rank calls dilattn_ring_forward_ex with its options.
inline harness::Forward ring_forward(const AttentionCase& c, const harness::Inputs& in,
                                     const Ring& ring, const CallOptions* call = nullptr) {
  harness::CaseScope scope(label(c, ring));
  const dilattn_dtype t = in.q.dtype();
  harness::Forward out{c.q_like(t), c.lse_like(DILATTN_F64)};
  out.o.poison();
  out.lse.poison();
  harness::Plan plan;
  if (!CHECK_OK(plan.create(c, ring.backend, 1))) return out;
  const size_t P = static_cast<size_t>(ring.P);
  std::vector<Tensor> o(P), lse(P);
  std::vector<Rows> rows(P);
  std::vector<std::string> messages(P);
  for (int32_t r = 0; r < ring.P; ++r) {
    rows[r] = rows_of(c.Nq, ring, r);
    o[r] = shard_like(out.o, t, rows[r].total(), false);
    lse[r] = shard_like(out.lse, DILATTN_F64, rows[r].total(), true);
    o[r].poison();
    lse[r].poison();
  }
  const RankHost& host = host_of(ring);
  const auto status = host.run(ring, [&](int32_t r, dilattn_comm comm) {
    const Tensor q = shard_of(in.q, rows[r], false), k = shard_of(in.k, rows[r], false),
                 v = shard_of(in.v, rows[r], false);
    const dilattn_call_options options = call != nullptr ? call->make() : dilattn_call_options{};
    const dilattn_status s =
        call != nullptr
            ? dilattn_ring_forward_ex(plan.get(), comm, ring.split, &q.view(), &k.view(),
                                      &v.view(), &o[r].view(), &lse[r].view(), &options)
            : dilattn_ring_forward(plan.get(), comm, ring.split, &q.view(), &k.view(), &v.view(),
                                   &o[r].view(), &lse[r].view());
    messages[r] = dilattn_last_error();
    return s;
  });
  check_ranks_succeeded(host, status, messages);
  for (int32_t r = 0; r < ring.P; ++r) {
    host.share(r, &o[r]);
    host.share(r, &lse[r]);
    copy_rows(o[r], &out.o, rows[r], false, false);
    copy_rows(lse[r], &out.lse, rows[r], true, false);
  }
  return out;
}

// The ring backward from the given forward outputs, assembled. delay_rank >= 0 starts that
// rank late (another schedule, for the determinism test). With `call`, each rank calls
// dilattn_ring_backward_ex with its options, and with sinks (*d_sinks)[r] is rank r's d_sinks.
inline harness::Gradients ring_backward(const AttentionCase& c, const harness::Inputs& in,
                                        const harness::Forward& fwd, const Ring& ring,
                                        int32_t delay_rank = -1,
                                        const CallOptions* call = nullptr,
                                        std::vector<std::vector<double>>* d_sinks = nullptr) {
  harness::CaseScope scope(label(c, ring));
  const dilattn_dtype t = in.q.dtype();
  harness::Gradients g{c.q_like(t), c.kv_like(t), c.kv_like(t)};
  g.dq.poison();
  g.dk.poison();
  g.dv.poison();
  harness::Plan plan;
  if (!CHECK_OK(plan.create(c, ring.backend, 1))) return g;
  const size_t P = static_cast<size_t>(ring.P);
  std::vector<Tensor> dq(P), dk(P), dv(P);
  std::vector<Rows> rows(P);
  std::vector<std::string> messages(P);
  for (int32_t r = 0; r < ring.P; ++r) {
    rows[r] = rows_of(c.Nq, ring, r);
    dq[r] = shard_like(g.dq, t, rows[r].total(), false);
    dk[r] = shard_like(g.dk, t, rows[r].total(), false);
    dv[r] = shard_like(g.dv, t, rows[r].total(), false);
    dq[r].poison();
    dk[r].poison();
    dv[r].poison();
  }
  std::vector<std::vector<double>> sink_grads(P, std::vector<double>(static_cast<size_t>(c.H), NAN));
  const RankHost& host = host_of(ring);
  const auto status = host.run(ring, [&](int32_t r, dilattn_comm comm) {
    if (r == delay_rank) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const Tensor q = shard_of(in.q, rows[r], false), k = shard_of(in.k, rows[r], false),
                 v = shard_of(in.v, rows[r], false), o = shard_of(fwd.o, rows[r], false),
                 lse = shard_of(fwd.lse, rows[r], true), d_o = shard_of(in.d_o, rows[r], false);
    const dilattn_call_options options =
        call != nullptr ? call->make(sink_grads[r].data()) : dilattn_call_options{};
    const dilattn_status s =
        call != nullptr
            ? dilattn_ring_backward_ex(plan.get(), comm, ring.split, &q.view(), &k.view(),
                                       &v.view(), &o.view(), &lse.view(), &d_o.view(),
                                       &dq[r].view(), &dk[r].view(), &dv[r].view(), &options)
            : dilattn_ring_backward(plan.get(), comm, ring.split, &q.view(), &k.view(),
                                    &v.view(), &o.view(), &lse.view(), &d_o.view(),
                                    &dq[r].view(), &dk[r].view(), &dv[r].view());
    messages[r] = dilattn_last_error();
    return s;
  });
  check_ranks_succeeded(host, status, messages);
  for (int32_t r = 0; r < ring.P; ++r) {
    for (Tensor* shard : {&dq[r], &dk[r], &dv[r]}) host.share(r, shard);
    copy_rows(dq[r], &g.dq, rows[r], false, false);
    copy_rows(dk[r], &g.dk, rows[r], false, false);
    copy_rows(dv[r], &g.dv, rows[r], false, false);
  }
  if (d_sinks != nullptr) *d_sinks = sink_grads;
  return g;
}

// The cases of tests/ring: each kind, GQA, causal, dilated segments shorter and longer than a
// shard (and one longer than N), uneven N, N < P (ranks without rows), block-sparse with
// blocks that divide every shard of P = 1, 2, 4 (random masks, seed 12345; for causal cases
// without the blocks the causal rule empties).
inline std::vector<AttentionCase> ring_cases(dilattn_dtype dtype) {
  std::vector<AttentionCase> cases;
  auto add = [&](const char* name, int64_t B, int64_t N, int64_t H, int64_t Hkv, int64_t D,
                 bool causal) {
    AttentionCase c;
    c.name = name; c.B = B; c.Nq = c.Nk = N; c.H = H; c.Hkv = Hkv; c.D = D;
    c.causal = causal; c.dtype = dtype;
    cases.push_back(c);
    return &cases.back();
  };
  add("dense_gqa", 2, 77, 2, 1, 16, false);
  add("dense_causal", 1, 100, 2, 2, 8, true);
  add("dense_n_below_p", 1, 3, 2, 1, 4, true);
  AttentionCase* c = add("dilated_mod_short_and_long_segments", 1, 120, 4, 2, 8, false);
  c->kind = DILATTN_KIND_DILATED; c->segments = {16, 48, 200}; c->dilations = {1, 2, 4};
  c = add("dilated_block_causal", 1, 99, 3, 1, 8, true);
  c->kind = DILATTN_KIND_DILATED; c->segments = {10, 64}; c->dilations = {2, 3};
  c->head_mode = DILATTN_HEADS_BLOCK;
  c = add("dilated_groups_causal", 1, 90, 3, 3, 8, true);
  c->kind = DILATTN_KIND_DILATED; c->segments = {8, 30, 90}; c->dilations = {1, 2, 3};
  c->head_mode = DILATTN_HEADS_GROUPS;
  c = add("sparse_per_head", 1, 128, 2, 1, 8, false);
  c->kind = DILATTN_KIND_BLOCK_SPARSE; c->mask.bq = c->mask.bk = 16; c->mask.heads = 2;
  c->mask.density = 0.4;
  c = add("sparse_causal", 1, 128, 2, 2, 8, true);
  c->kind = DILATTN_KIND_BLOCK_SPARSE; c->mask.bq = c->mask.bk = 16; c->mask.density = 0.5;
  return cases;
}

// Block-sparse cases need every shard boundary on a block boundary: 128 rows in 16-row blocks
// split into 1, 2 or 4 ranks (2, 4 or 8 zigzag chunks). The others run every P.
inline bool ring_supports(const AttentionCase& c, int32_t P) {
  return c.kind != DILATTN_KIND_BLOCK_SPARSE || P != 3;
}

}  // namespace ringtest

#endif  // DILATTN_TESTS_RING_TEST_UTIL_H
