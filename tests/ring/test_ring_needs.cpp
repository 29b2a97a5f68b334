// test_ring_needs.cpp - the ring sends only the key rows a rank needs (lib/ring/ring_needs.h,
// SPEC 5), white-box:
//   needed_rows_equal_sub_call_reads: needed_key_rows(p, queries, owner) is exactly the set of
//     (kv head, row) of the owner's shard that the sub-problems of for_each_sub_call read
//     (k_rows of their kv heads; for block-sparse only the rows of the sub-mask's listed
//     blocks, per query head of its kv head), as runs inside the shard that neither overlap
//     nor touch, for every case of ring_cases() (dense, GQA, causal, N < P, dilated in three
//     head modes, block-sparse per head and causal), P = 1..4, both splits, every pair of ranks.
//   dilated_inside_shards_sends_nothing: segments no longer than a shard: 0 bytes on every
//     rank, forward and backward still equal the reference.
//   block_diagonal_mask_sends_nothing: a mask listing only the blocks of a rank's own rows.
//   causal_contiguous_sends_to_later_ranks_only: rank p sends its K/V to the P-1-p ranks after
//     it (the last rank sends nothing).
//   dense_sends_every_shard_to_every_rank: (P-1) x the rank's K/V bytes forward; backward adds
//     a dK/dV partial (f32) of every other rank's shard.
//   dilated_seeds_like_sends_exactly_the_selected_rows: the bytes each rank sends, computed here
//     from the reference's key rule (index_rules.h dilated_keys, per query row, head, branch:
//     the (kv head, row) pairs some query attends), strictly fewer than dense.
//   window_sends_only_rows_in_reach: with a window (8, 0) on a causal ring, each rank sends its
//     next rank only the 8 rows in reach (printed beside the bytes without the window).
//   backend_without_placed_sub_problems_refused: a backend lacking kOptionPlaced is refused
//     by name on every rank, and nothing is sent.
//   With a window, needed_rows_equal_sub_call_reads also runs each case with one, checking that
//     every key a sub-problem reads is reached by one of its queries.
//   poisoned_chunks_change_nothing: every chunk row a rank did not receive is NaN
//     (comm->poison_chunks); every case forward and backward still equals the reference (ref
//     and, for the device's pack/unpack kernels, emu).
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "handles.h"
#include "ring_checks.h"
#include "ring_needs.h"
#include "ring_pairs.h"
#include "ring_transport.h"

using namespace harness;

namespace {

// ================================================================ needed_key_rows vs sub-calls
// Whether the window of p lets some query at positions first + step * t (t < count) reach the
// key at position j (SPEC 10.1, index_rules.h window_allows).
bool reached(const dilattn::Problem& p, int64_t first, int64_t count, int64_t step, int64_t j) {
  for (int64_t t = 0; t < count; ++t)
    if (dilattn::window_allows(first + t * step, j, p.Nq, p.Nk, p.window_left, p.window_right))
      return true;
  return false;
}

// The (kv head, row) pairs of the owner's shard the sub-problems of (queries, owner) read:
// flag g * rows + row. A sub-problem reads its k_rows for its kv heads; block-sparse ones only
// the rows of the blocks its mask lists for a query head, of that head's kv head.
std::vector<char> rows_sub_calls_read(const dilattn::Problem& p, const dilattn::ShardRows& queries,
                                      const dilattn::ShardRows& owner) {
  std::vector<char> read(static_cast<size_t>(p.Hkv * owner.rows), 0);
  auto mark = [&](int64_t g, int64_t row) { read[static_cast<size_t>(g * owner.rows + row)] = 1; };
  for (const dilattn::RowRange& qr : queries.range)
    for (const dilattn::RowRange& kr : owner.range) {
      const dilattn_status s = dilattn::for_each_sub_call(
          p, qr, kr, nullptr, [&](const dilattn::SubCall& call) {
            const dilattn::KeyProgression& k = call.k_rows;
            if (call.sub.kind != DILATTN_KIND_BLOCK_SPARSE) {
              // With a window, every key the sub-problem reads is one some query reaches (at
              // the positions its placement gives), so nothing beyond the window is sent.
              if (p.has_window()) {
                const dilattn::Placement& at = call.sub.place;
                CHECK_MSG(call.sub.placed, "a sub-problem of a window plan is not placed");
                for (int64_t t = 0; t < k.count; ++t)
                  CHECK_MSG(reached(p, at.q_first, call.sub.Nq, at.q_step, at.k_first + t * at.k_step),
                            "key at %lld is read, but no query of the sub-problem reaches it",
                            static_cast<long long>(at.k_first + t * at.k_step));
              }
              for (int64_t g = call.g0; g < call.g0 + call.sub.Hkv; ++g)
                for (int64_t t = 0; t < k.count; ++t) mark(g, k.first + t * k.step);
              return DILATTN_SUCCESS;
            }
            const dilattn::BsrMask& m = *call.sub.mask;
            for (int64_t h = 0; h < call.sub.H; ++h)
              for (int64_t ib = 0; ib < m.I; ++ib) {
                int64_t count;
                const int64_t* cols = m.row_cols(h, ib, &count);
                for (int64_t c = 0; c < count; ++c)
                  for (int64_t j = cols[c] * m.bk; j < (cols[c] + 1) * m.bk && j < k.count; ++j)
                    // With a window, a key only some query of the mask row reaches.
                    if (!p.has_window() ||
                        reached(p, qr.first + ib * m.bq,
                                std::min((ib + 1) * m.bq, call.sub.Nq) - ib * m.bq, 1,
                                kr.first + j))
                      mark(dilattn::kv_head_of(h, p.H, p.Hkv), k.first + j);
              }
            return DILATTN_SUCCESS;
          });
      CHECK_OK(s);
    }
  return read;
}

// The cases of ring_cases(), then each with a window that reaches across some shards.
std::vector<AttentionCase> cases_with_and_without_window() {
  std::vector<AttentionCase> cases = ringtest::ring_cases(DILATTN_F64);
  for (AttentionCase c : ringtest::ring_cases(DILATTN_F64)) {
    c.name += " + window";
    c.window_left = c.Nq / 5;
    c.window_right = c.causal ? 0 : c.Nq / 9;
    cases.push_back(c);
  }
  return cases;
}

void needed_rows_equal_sub_call_reads() {
  CaseScope scope("needed_rows_equal_sub_call_reads");
  for (const AttentionCase& c : cases_with_and_without_window()) {
    Plan plan;
    if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) continue;
    const dilattn::Problem& p = plan.get()->problem;
    for (int32_t P = 1; P <= 4; ++P)
      for (int32_t split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
        if (!ringtest::ring_supports(c, P)) continue;
        for (int32_t qrank = 0; qrank < P; ++qrank)
          for (int32_t orank = 0; orank < P; ++orank) {
            const dilattn::ShardRows queries = dilattn::shard_rows(p.Nq, P, qrank, split);
            const dilattn::ShardRows owner = dilattn::shard_rows(p.Nq, P, orank, split);
            const dilattn::RowRuns runs = dilattn::needed_key_rows(p, queries, owner);
            std::vector<char> needed(static_cast<size_t>(p.Hkv * owner.rows), 0);
            // Runs inside the shard, never overlapping, none touching the one before.
            bool well_formed = true;
            const dilattn::RowRun* before = nullptr;
            for (const dilattn::RowRun& run : runs) {
              well_formed = well_formed && run.count > 0 && run.first >= 0 &&
                            run.first + run.count <= owner.rows && run.head >= 0 &&
                            run.heads > 0 && run.head + run.heads <= p.Hkv &&
                            (before == nullptr || run.head > before->head ||
                             run.first > before->first + before->count);
              before = &run;
              for (int64_t g = run.head; g < run.head + run.heads && well_formed; ++g)
                for (int64_t i = run.first; i < run.first + run.count; ++i) {
                  char& flag = needed[static_cast<size_t>(g * owner.rows + i)];
                  well_formed = well_formed && flag == 0;
                  flag = 1;
                }
            }
            CHECK_MSG(well_formed, "%s P=%d split %d: queries of rank %d, owner %d: runs overlap, "
                      "touch or leave the shard", c.name.c_str(), static_cast<int>(P),
                      static_cast<int>(split), static_cast<int>(qrank), static_cast<int>(orank));
            const std::vector<char> read = rows_sub_calls_read(p, queries, owner);
            for (size_t i = 0; i < read.size(); ++i)
              if (!CHECK_MSG(needed[i] == read[i], "%s P=%d split %d: queries of rank %d, owner "
                             "%d, kv head %lld, shard row %lld: needed %d, read by the "
                             "sub-calls %d", c.name.c_str(), static_cast<int>(P),
                             static_cast<int>(split), static_cast<int>(qrank),
                             static_cast<int>(orank), static_cast<long long>(i / owner.rows),
                             static_cast<long long>(i % owner.rows), needed[i], read[i]))
                break;
          }
      }
  }
}

// ================================================================ ranks with the hooks
// Ranks on threads whose communicators may poison chunk rows not received, and which record
// each rank's bytes sent in its last ring call.
class HookedRanks final : public ringtest::RankHost {
 public:
  explicit HookedRanks(bool poison) : poison_(poison) {}
  std::vector<dilattn_status> run(const ringtest::Ring& ring,
                                  const ringtest::RankBody& body) const override {
    sent.assign(static_cast<size_t>(ring.P), 0);
    return ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
      comm->poison_chunks = poison_;
      const dilattn_status s = body(r, comm);
      sent[static_cast<size_t>(r)] = comm->last_shifts.sent_bytes;
      return s;
    });
  }
  bool hosts(int32_t) const override { return true; }
  void share(int32_t, Tensor*) const override {}
  mutable std::vector<size_t> sent;  // of the last run, per rank

 private:
  bool poison_;
};

// Runs c forward (and backward) on `ring` with hooked ranks; checks both against the
// reference; returns each rank's bytes sent forward (and backward).
struct Sent {
  std::vector<size_t> forward, backward;
};
Sent run_and_check(const AttentionCase& c, ringtest::Ring ring) {
  HookedRanks host(false);
  ring.host = &host;
  const Inputs in = make_inputs(c, 5, 2.0);
  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  Sent sent;
  const Forward got = ringtest::ring_forward(c, in, ring);
  sent.forward = host.sent;
  const Gradients want_g = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
  const Gradients got_g = ringtest::ring_backward(c, in, want, ring);
  sent.backward = host.sent;
  CaseScope named(ringtest::label(c, ring));
  const Tolerance o_tol{1e-13, 1e-12}, lse_tol{1e-12, 0}, grad_tol{1e-11, 1e-11};
  CHECK_CLOSE("O", got.o, want.o, o_tol);
  CHECK_CLOSE("LSE", got.lse, want.lse, lse_tol);
  CHECK_CLOSE("dQ", got_g.dq, want_g.dq, grad_tol);
  CHECK_CLOSE("dK", got_g.dk, want_g.dk, grad_tol);
  CHECK_CLOSE("dV", got_g.dv, want_g.dv, grad_tol);
  return sent;
}

AttentionCase f64_case(const char* name, int64_t N, int64_t H, int64_t Hkv, int64_t D) {
  AttentionCase c;
  c.name = name;
  c.Nq = c.Nk = N;
  c.H = H;
  c.Hkv = Hkv;
  c.D = D;
  c.dtype = DILATTN_F64;
  return c;
}

// Bytes of `rows` K/V rows (or dK/dV rows) of case c in dtype size `esize`: K and V.
size_t kv_bytes(const AttentionCase& c, int64_t rows, size_t esize) {
  return 2 * static_cast<size_t>(c.B * rows * c.Hkv * c.D) * esize;
}
// The same for `pairs` (kv head, row) pairs.
size_t kv_bytes_of_pairs(const AttentionCase& c, int64_t pairs, size_t esize) {
  return 2 * static_cast<size_t>(c.B * pairs * c.D) * esize;
}

void expect_sent(const char* what, const std::vector<size_t>& got, const std::vector<size_t>& want) {
  for (size_t r = 0; r < want.size() && r < got.size(); ++r)
    CHECK_MSG(got[r] == want[r], "%s: rank %zu sent %zu bytes, want %zu", what, r, got[r], want[r]);
}

// ================================================================ bytes sent
void dilated_inside_shards_sends_nothing() {
  CaseScope scope("dilated_inside_shards_sends_nothing");
  AttentionCase c = f64_case("dilated_segments_within_shards", 64, 3, 1, 8);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {8, 16};
  c.dilations = {1, 2};
  for (int32_t split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
    const ringtest::Ring ring{split == DILATTN_RING_ZIGZAG ? 2 : 4,
                              static_cast<dilattn_ring_split>(split), DILATTN_BACKEND_REF};
    const Sent sent = run_and_check(c, ring);
    const std::vector<size_t> none(static_cast<size_t>(ring.P), 0);
    expect_sent("forward", sent.forward, none);
    expect_sent("backward", sent.backward, none);
  }
}

void block_diagonal_mask_sends_nothing() {
  CaseScope scope("block_diagonal_mask_sends_nothing");
  AttentionCase c = f64_case("sparse_block_diagonal", 64, 2, 2, 8);
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.mask.bq = c.mask.bk = 16;
  c.mask.row_ptr = {0, 1, 2, 3, 4};
  c.mask.col_idx = {0, 1, 2, 3};
  // Contiguous P = 4: one block per rank; zigzag P = 2: rank 0 holds blocks 0 and 3.
  for (const ringtest::Ring ring : {ringtest::Ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF},
                                    ringtest::Ring{2, DILATTN_RING_ZIGZAG, DILATTN_BACKEND_REF}}) {
    const Sent sent = run_and_check(c, ring);
    const std::vector<size_t> none(static_cast<size_t>(ring.P), 0);
    expect_sent("forward", sent.forward, none);
    expect_sent("backward", sent.backward, none);
  }
}

void causal_contiguous_sends_to_later_ranks_only() {
  CaseScope scope("causal_contiguous_sends_to_later_ranks_only");
  AttentionCase c = f64_case("dense_causal_uneven", 30, 2, 1, 4);
  c.causal = true;
  const ringtest::Ring ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
  const Sent sent = run_and_check(c, ring);
  std::vector<size_t> want;
  for (int32_t r = 0; r < ring.P; ++r)
    want.push_back(static_cast<size_t>(ring.P - 1 - r) *
                   kv_bytes(c, ringtest::rows_of(c.Nq, ring, r).total(), sizeof(double)));
  expect_sent("forward", sent.forward, want);
  CHECK_MSG(sent.forward.back() == 0, "the last rank sent %zu bytes", sent.forward.back());
}

void dense_sends_every_shard_to_every_rank() {
  CaseScope scope("dense_sends_every_shard_to_every_rank");
  const AttentionCase c = f64_case("dense_gqa_uneven", 23, 4, 2, 4);
  for (int32_t split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
    const ringtest::Ring ring{3, static_cast<dilattn_ring_split>(split), DILATTN_BACKEND_REF};
    const Sent sent = run_and_check(c, ring);
    std::vector<size_t> forward, backward;
    for (int32_t r = 0; r < ring.P; ++r) {
      const int64_t mine = ringtest::rows_of(c.Nq, ring, r).total();
      forward.push_back(static_cast<size_t>(ring.P - 1) * kv_bytes(c, mine, sizeof(double)));
      size_t partials = 0;  // f64 plan: f64 partials of every other rank's shard
      for (int32_t o = 0; o < ring.P; ++o)
        if (o != r) partials += kv_bytes(c, ringtest::rows_of(c.Nq, ring, o).total(), sizeof(double));
      backward.push_back(forward.back() + partials);
    }
    expect_sent("forward", sent.forward, forward);
    expect_sent("backward", sent.backward, backward);
  }
}

// The (kv head, row) pairs of rank `owner`'s shard that the queries of rank `t` attend, by
// SPEC 3's rule per query row, head and branch (the reference's dilated_keys): no ring code.
int64_t dilated_rows_needed(const AttentionCase& c, const ringtest::Ring& ring, int32_t t,
                            int32_t owner) {
  std::set<int64_t> theirs;
  std::set<std::pair<int64_t, int64_t>> needed;
  ringtest::for_each_row(ringtest::rows_of(c.Nq, ring, owner),
                         [&](int64_t row, int64_t) { theirs.insert(row); });
  const int64_t m = static_cast<int64_t>(c.segments.size());
  ringtest::for_each_row(ringtest::rows_of(c.Nq, ring, t), [&](int64_t i, int64_t) {
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t b = 0; b < m; ++b) {
        if (!dilattn::head_uses_branch(c.head_mode, h, b, c.H, m)) continue;
        const int64_t r = c.dilations[b];
        const int64_t o = dilattn::head_offset(c.head_mode, h, b, r, c.H);
        const dilattn::KeyProgression keys =
            dilattn::dilated_keys(i, c.Nq, c.segments[b], r, o, c.causal);
        for (int64_t k = 0; k < keys.count; ++k)
          if (theirs.count(keys.first + k * r))
            needed.insert({dilattn::kv_head_of(h, c.H, c.Hkv), keys.first + k * r});
      }
  });
  return static_cast<int64_t>(needed.size());
}

void dilated_seeds_like_sends_exactly_the_selected_rows() {
  CaseScope scope("dilated_seeds_like_sends_exactly_the_selected_rows");
  // The seeds' configuration (bench/ring: segments 2048, 4096, 8192, dilations 1, 2, 4, mod
  // heads, N = 8192) scaled down 128 times.
  AttentionCase c = f64_case("dilated_seeds_like", 64, 4, 4, 4);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {16, 32, 64};
  c.dilations = {1, 2, 4};
  for (int32_t P = 2; P <= 4; ++P) {
    const ringtest::Ring ring{P, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
    const Sent sent = run_and_check(c, ring);
    std::vector<size_t> want;
    for (int32_t r = 0; r < P; ++r) {
      size_t bytes = 0;
      for (int32_t t = 0; t < P; ++t)
        if (t != r) bytes += kv_bytes_of_pairs(c, dilated_rows_needed(c, ring, t, r), sizeof(double));
      want.push_back(bytes);
      const size_t dense =
          static_cast<size_t>(P - 1) * kv_bytes(c, ringtest::rows_of(c.Nq, ring, r).total(), sizeof(double));
      CHECK_MSG(sent.forward[r] < dense, "P=%d rank %d: sent %zu bytes, dense sends %zu",
                static_cast<int>(P), static_cast<int>(r), sent.forward[r], dense);
    }
    expect_sent("forward", sent.forward, want);
  }
}

// SPEC 5 with a window: a rank sends only the rows some query of the receiver reaches. Dense
// causal, N = 64, P = 4 contiguous, window (8, 0): rank r < 3 sends rank r + 1 its last 8 rows
// and nobody else anything, where without the window it sends all 16 rows to every later rank.
// The backward also sends the dK/dV partial of exactly the rows received back (f64, as many
// bytes).
void window_sends_only_rows_in_reach() {
  CaseScope scope("window_sends_only_rows_in_reach");
  AttentionCase c = f64_case("dense_causal_window", 64, 2, 1, 4);
  c.causal = true;
  const ringtest::Ring ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
  const Sent without = run_and_check(c, ring);
  c.window_left = 8;
  c.window_right = 0;
  const Sent with = run_and_check(c, ring);
  std::vector<size_t> want, want_back;
  for (int32_t r = 0; r < ring.P; ++r) {
    want.push_back(r + 1 < ring.P ? kv_bytes(c, 8, sizeof(double)) : 0);
    // Those rows forward, and the partial of the 8 rows received from r - 1 back to it.
    want_back.push_back(want.back() + (r > 0 ? kv_bytes(c, 8, sizeof(double)) : 0));
  }
  expect_sent("forward with a window", with.forward, want);
  expect_sent("backward with a window", with.backward, want_back);
  for (int32_t r = 0; r < ring.P; ++r) {
    std::printf("rank %d sends %zu bytes forward with window (8, 0), %zu without\n",
                static_cast<int>(r), with.forward[r], without.forward[r]);
    CHECK_MSG(without.forward[r] ==
                  static_cast<size_t>(ring.P - 1 - r) * kv_bytes(c, 16, sizeof(double)),
              "rank %d sent %zu bytes without a window", static_cast<int>(r), without.forward[r]);
  }
}

// SPEC 5: a backend that runs an option for a whole problem but not the ring's placed
// sub-problems (problem.h kOptionPlaced) is refused by name on every rank before any row moves.
void backend_without_placed_sub_problems_refused() {
  CaseScope scope("backend_without_placed_sub_problems_refused");
  AttentionCase c = f64_case("dense_window", 16, 2, 1, 4);
  c.window_left = 3;
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return;
  dilattn::Backend fake = *plan.get()->backend;
  fake.name = "fake";
  fake.runs_options = dilattn::kOptionsAll;  // every option of a whole problem, not placed
  const dilattn::Backend* real = plan.get()->backend;
  plan.get()->backend = &fake;
  const ringtest::Ring ring{2, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF};
  const Inputs in = make_inputs(c, 3, 1.0);
  std::vector<std::string> messages(2);
  HookedRanks host(false);
  const auto status = host.run(ring, [&](int32_t r, dilattn_comm comm) {
    const ringtest::Rows rows = ringtest::rows_of(c.Nq, ring, r);
    const Tensor q = ringtest::shard_of(in.q, rows, false), k = ringtest::shard_of(in.k, rows, false),
                 v = ringtest::shard_of(in.v, rows, false);
    Tensor o = ringtest::shard_of(in.q, rows, false);
    const dilattn_status s = dilattn_ring_forward(plan.get(), comm, ring.split, &q.view(),
                                                  &k.view(), &v.view(), &o.view(), nullptr);
    messages[static_cast<size_t>(r)] = dilattn_last_error();
    return s;
  });
  plan.get()->backend = real;
  for (size_t r = 0; r < 2; ++r) {
    CHECK_MSG(status[r] == DILATTN_ERROR_UNSUPPORTED &&
                  messages[r].find("backend 'fake'") != std::string::npos &&
                  messages[r].find("ring sub-problems at whole-sequence positions") != std::string::npos,
              "rank %zu: %s (%s)", r, dilattn_status_string(status[r]), messages[r].c_str());
    CHECK_MSG(host.sent[r] == 0, "rank %zu sent %zu bytes", r, host.sent[r]);
  }
}

// ================================================================ poisoned chunks
void poisoned_chunks_change_nothing() {
  CaseScope scope("poisoned_chunks_change_nothing");
  const HookedRanks poisoned(true);
  ringtest::check_forward_cases(DILATTN_F64, ringtest::rings(1, 4, DILATTN_BACKEND_REF, &poisoned),
                                {1e-13, 1e-12}, {1e-12, 0});
  // With a window (rows beyond it are not sent, so they are NaN in the chunks).
  for (const AttentionCase& c : cases_with_and_without_window()) {
    if (c.window_left < 0) continue;
    const Inputs in = make_inputs(c, 9, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients want_g = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
    for (ringtest::Ring ring : ringtest::rings(2, 4, DILATTN_BACKEND_REF, &poisoned)) {
      if (!ringtest::ring_supports(c, ring.P)) continue;
      const Forward got = ringtest::ring_forward(c, in, ring);
      const Gradients got_g = ringtest::ring_backward(c, in, want, ring);
      CaseScope named(ringtest::label(c, ring));
      CHECK_CLOSE("O", got.o, want.o, Tolerance({1e-13, 1e-12}));
      CHECK_CLOSE("LSE", got.lse, want.lse, Tolerance({1e-12, 0}));
      CHECK_CLOSE("dQ", got_g.dq, want_g.dq, Tolerance({1e-11, 1e-11}));
      CHECK_CLOSE("dK", got_g.dk, want_g.dk, Tolerance({1e-11, 1e-11}));
      CHECK_CLOSE("dV", got_g.dv, want_g.dv, Tolerance({1e-11, 1e-11}));
    }
  }
  ringtest::check_backward_cases(DILATTN_F64, ringtest::rings(1, 4, DILATTN_BACKEND_REF, &poisoned),
                                 {1e-11, 1e-11});
#if RING_TEST_EMU
  // The device path: pack, unpack and the NaN fill as cuda/ring_ops.cu's kernels (emu).
  for (AttentionCase c : ringtest::ring_cases(DILATTN_F32)) {
    if (c.kind == DILATTN_KIND_DENSE || c.Nq * c.H > 512) continue;
    CaseScope named(c.name + " emu");
    const Inputs in = make_inputs(c, 7, 2.0);
    const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients want_g = run_backward(c, in, want, DILATTN_BACKEND_REF, 1);
    ringtest::Ring ring{3, DILATTN_RING_ZIGZAG, DILATTN_BACKEND_EMU};
    if (!ringtest::ring_supports(c, ring.P)) ring.P = 2;
    ring.host = &poisoned;
    const Forward got = ringtest::ring_forward(c, in, ring);
    CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
    CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse());
    const Gradients got_g = ringtest::ring_backward(c, in, want, ring);
    CHECK_CLOSE("dQ", got_g.dq, want_g.dq, spec8::of(c.dtype));
    CHECK_CLOSE("dK", got_g.dk, want_g.dk, spec8::of(c.dtype));
    CHECK_CLOSE("dV", got_g.dv, want_g.dv, spec8::of(c.dtype));
  }
#endif
}

}  // namespace

int main() {
  needed_rows_equal_sub_call_reads();
  dilated_inside_shards_sends_nothing();
  block_diagonal_mask_sends_nothing();
  causal_contiguous_sends_to_later_ranks_only();
  dense_sends_every_shard_to_every_rank();
  dilated_seeds_like_sends_exactly_the_selected_rows();
  window_sends_only_rows_in_reach();
  backend_without_placed_sub_problems_refused();
  poisoned_chunks_change_nothing();
  return finish("ring_sends_only_needed_rows");
}
