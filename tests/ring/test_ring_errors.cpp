// test_ring_errors.cpp - SPEC 7 for ring calls, which are collective: a bad input on one rank
// fails every rank (that rank with its own status, the others with DILATTN_ERROR_COMM naming
// it), a rank that never arrives makes the others return DILATTN_ERROR_COMM after the timeout
// (never a hang) and breaks the communicator, ranks that disagree on the call are all refused,
// and no output is written on any rank when the status is an error; dilattn_comm_create_mpi
// outside mpirun is refused with a clear status (tests/ring/mpi/ runs it under mpirun).
#include <atomic>
#include <initializer_list>
#include <string>

#include "ring_test_util.h"

using namespace harness;

namespace {

// A rank's status and last error, captured on its thread, checked as CHECK_ERROR checks a call
// on this one: the status, then each needle in the message.
bool check_rank_error(int32_t rank, dilattn_status got, const std::string& message,
                      dilattn_status want, std::initializer_list<const char*> needles,
                      const char* file, int line) {
  bool ok = record(got == want, file, line, "rank %d: status %s, want %s (\"%s\")",
                   static_cast<int>(rank), dilattn_status_string(got),
                   dilattn_status_string(want), message.c_str());
  for (const char* needle : needles)
    ok = record(message.find(needle) != std::string::npos, file, line,
                "rank %d: message \"%s\" does not name \"%s\"", static_cast<int>(rank),
                message.c_str(), needle) && ok;
  return ok;
}
#define CHECK_RANK_ERROR(rank, got, message, want, ...) \
  check_rank_error((rank), (got), (message), (want), {__VA_ARGS__}, __FILE__, __LINE__)

// One rank's shards for a small dense f32 problem, outputs poisoned.
struct Shards {
  Tensor q, k, v, o, lse;
  Shards(int64_t rows, int64_t H, int64_t D)
      : q(DILATTN_F32, 1, rows, H, D), k(DILATTN_F32, 1, rows, H, D),
        v(DILATTN_F32, 1, rows, H, D), o(DILATTN_F32, 1, rows, H, D),
        lse(DILATTN_F32, 1, H, rows, 1) {
    o.poison();
    lse.poison();
  }
  bool outputs_untouched() const { return o.is_poisoned() && lse.is_poisoned(); }
  dilattn_status forward(dilattn_plan plan, dilattn_comm comm, dilattn_ring_split split,
                         bool with_lse = true) {
    return dilattn_ring_forward(plan, comm, split, &q.view(), &k.view(), &v.view(), &o.view(),
                                with_lse ? &lse.view() : nullptr);
  }
};

AttentionCase dense_case(const char* name, int64_t N) {
  AttentionCase c;
  c.name = name;
  c.Nq = c.Nk = N;
  c.H = c.Hkv = 1;
  c.D = 4;
  return c;
}

// bad_input_on_one_rank_fails_every_rank
void bad_input_on_one_rank() {
  CaseScope scope("bad_input_on_one_rank_fails_every_rank");
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  Plan plan;
  if (!CHECK_OK(plan.create(dense_case("errors", 12), DILATTN_BACKEND_REF, 1))) return;
  std::vector<std::string> messages(3);
  std::vector<char> outputs_untouched(3);  // a byte a rank (vector<bool>: a race)
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(r == 1 ? 5 : 4, 1, 4);  // rank 1's q has one row too many
    Shards good(4, 1, 4);
    const dilattn_status st = dilattn_ring_forward(plan.get(), comm, ring.split, &s.q.view(),
                                                   &good.k.view(), &good.v.view(), &s.o.view(),
                                                   &s.lse.view());
    messages[r] = dilattn_last_error();
    outputs_untouched[r] = s.outputs_untouched();
    return st;
  });
  CHECK_RANK_ERROR(1, status[1], messages[1], DILATTN_ERROR_SHAPE_MISMATCH, "'q'");
  for (int32_t r : {0, 2})
    CHECK_RANK_ERROR(r, status[r], messages[r], DILATTN_ERROR_COMM, "rank 1 failed",
                     "SHAPE_MISMATCH");
  for (int r = 0; r < 3; ++r) CHECK_MSG(outputs_untouched[r], "rank %d wrote its outputs", r);
}

// missing_rank_times_out_and_breaks_the_communicator
void missing_rank() {
  CaseScope scope("missing_rank_times_out_and_breaks_the_communicator");
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 200};
  Plan plan;
  if (!CHECK_OK(plan.create(dense_case("errors", 12), DILATTN_BACKEND_REF, 1))) return;
  std::vector<std::string> messages(3);
  std::vector<dilattn_status> late(3, DILATTN_SUCCESS);
  std::vector<char> outputs_untouched(3);  // a byte a rank (vector<bool>: a race)
  std::atomic<int> done{0};
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(4, 1, 4);
    if (r == 2) {  // arrives only after the others gave up
      while (done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const dilattn_status st = s.forward(plan.get(), comm, ring.split);
    messages[r] = dilattn_last_error();
    ++done;
    if (r != 2) late[r] = s.forward(plan.get(), comm, ring.split);  // still broken
    outputs_untouched[r] = s.outputs_untouched();
    return st;
  });
  for (int32_t r : {0, 1}) {
    CHECK_RANK_ERROR(r, status[r], messages[r], DILATTN_ERROR_COMM, "rank(s) 2", "200 ms");
    CHECK_MSG(late[r] == DILATTN_ERROR_COMM,
              "rank %d: a broken communicator accepted the next call (%s)", static_cast<int>(r),
              dilattn_status_string(late[r]));
  }
  CHECK_RANK_ERROR(2, status[2], messages[2], DILATTN_ERROR_COMM, "broken");
  for (int r = 0; r < 3; ++r)
    CHECK_MSG(outputs_untouched[r], "rank %d wrote its outputs after a timeout", r);
}

// ranks_called_with_different_splits_are_all_refused
void mismatched_split() {
  CaseScope scope("ranks_called_with_different_splits_are_all_refused");
  const ringtest::Ring ring{2, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  Plan plan;
  if (!CHECK_OK(plan.create(dense_case("errors", 8), DILATTN_BACKEND_REF, 1))) return;
  std::vector<char> outputs_untouched(2);  // a byte a rank (vector<bool>: a race)
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(4, 1, 4);
    const dilattn_ring_split split = r == 0 ? DILATTN_RING_ZIGZAG : DILATTN_RING_CONTIGUOUS;
    const dilattn_status st = s.forward(plan.get(), comm, split);
    outputs_untouched[r] = s.outputs_untouched();
    return st;
  });
  for (int r = 0; r < 2; ++r) {
    CHECK_MSG(status[r] == DILATTN_ERROR_COMM, "rank %d: split mismatch gave %s", r,
              dilattn_status_string(status[r]));
    CHECK_MSG(outputs_untouched[r], "rank %d wrote its outputs after a split mismatch", r);
  }
}

// block_sparse_blocks_across_shards_unsupported_on_every_rank
void unaligned_blocks() {
  CaseScope scope("block_sparse_blocks_across_shards_unsupported_on_every_rank");
  AttentionCase c = dense_case("errors", 128);
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.mask.bq = c.mask.bk = 16;
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return;
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  std::vector<std::string> messages(3);
  std::vector<char> outputs_untouched(3);  // a byte a rank (vector<bool>: a race)
  std::vector<int64_t> rows(3);
  for (int32_t r = 0; r < 3; ++r) rows[r] = ringtest::rows_of(128, ring, r).total();
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(rows[r], 1, 4);
    const dilattn_status st = s.forward(plan.get(), comm, ring.split);
    messages[r] = dilattn_last_error();
    outputs_untouched[r] = s.outputs_untouched();
    return st;
  });
  for (int32_t r = 0; r < 3; ++r) {
    CHECK_RANK_ERROR(r, status[r], messages[r], DILATTN_ERROR_UNSUPPORTED,
                     "[0, 42) cut a mask block");
    CHECK_MSG(outputs_untouched[r], "rank %d wrote its outputs when unsupported",
              static_cast<int>(r));
  }
}

// ring_arguments_checked: plan with Nq != Nk, a split that is no split, bad communicator
// arguments, a destroyed communicator, bad shard-row arguments.
void arguments() {
  CaseScope scope("ring_arguments_checked");
  const ringtest::Ring one{1, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  {
    AttentionCase c = dense_case("errors", 8);
    c.Nk = 9;
    Plan plan;
    if (CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) {
      const auto status = ringtest::run_ranks(one, [&](int32_t, dilattn_comm comm) {
        Shards s(8, 1, 4);
        return s.forward(plan.get(), comm, one.split, false);
      });
      CHECK_MSG(status[0] == DILATTN_ERROR_SEQLEN_MISMATCH, "Nq != Nk gave %s",
                dilattn_status_string(status[0]));
    }
  }

  Plan plan;
  if (!CHECK_OK(plan.create(dense_case("errors", 8), DILATTN_BACKEND_REF, 1))) return;
  std::string message;
  const auto status = ringtest::run_ranks(one, [&](int32_t, dilattn_comm comm) {
    Shards s(8, 1, 4);
    const dilattn_status st =
        s.forward(plan.get(), comm, static_cast<dilattn_ring_split>(7), false);
    message = dilattn_last_error();
    return st;
  });
  CHECK_RANK_ERROR(0, status[0], message, DILATTN_ERROR_INVALID_VALUE, "'split' = 7");

  dilattn_comm comms[2] = {nullptr, nullptr};
  CHECK_ERROR(dilattn_comm_create_threads(0, 100, comms), DILATTN_ERROR_INVALID_VALUE,
              "'num_ranks' = 0");
  CHECK_ERROR(dilattn_comm_create_threads(2, 0, comms), DILATTN_ERROR_INVALID_VALUE,
              "'timeout_ms' = 0");
  CHECK_EQ(dilattn_comm_create_threads(2, 100, nullptr), DILATTN_ERROR_NULL_POINTER);
  CHECK_MSG(comms[0] == nullptr && comms[1] == nullptr, "comms written on error");
  CHECK_OK(dilattn_comm_create_threads(2, 100, comms));
  int32_t rank = -1, size = -1;
  CHECK_OK(dilattn_comm_rank(comms[1], &rank, &size));
  CHECK_EQ(rank, 1);
  CHECK_EQ(size, 2);
  dilattn_comm_destroy(comms[0]);
  dilattn_comm_destroy(comms[1]);
  CHECK_ERROR(dilattn_comm_rank(comms[1], &rank, &size), DILATTN_ERROR_INVALID_VALUE,
              "destroyed");
  Shards s(8, 1, 4);
  CHECK_EQ(s.forward(plan.get(), comms[0], DILATTN_RING_CONTIGUOUS, false),
           DILATTN_ERROR_INVALID_VALUE);
  CHECK_MSG(s.outputs_untouched(), "outputs written with a destroyed comm");

  int64_t first[2], count[2];
  CHECK_ERROR(dilattn_ring_shard_rows(10, 3, 3, DILATTN_RING_CONTIGUOUS, first, count),
              DILATTN_ERROR_INVALID_VALUE, "'rank' = 3");
  CHECK_EQ(dilattn_ring_shard_rows(0, 3, 0, DILATTN_RING_CONTIGUOUS, first, count),
           DILATTN_ERROR_INVALID_VALUE);
  CHECK_EQ(dilattn_ring_shard_rows(10, 3, 0, static_cast<dilattn_ring_split>(-1), first, count),
           DILATTN_ERROR_INVALID_VALUE);
}

// ring_mpi_absent_unsupported / ring_mpi_without_init_refused: outside mpirun (this test), a
// library without MPI says so; one with MPI refuses because MPI is not initialised. Either
// way a clear status, nothing written, no abort.
void mpi_outside_mpirun() {
  CaseScope scope("ring_mpi_create_outside_mpi_refused");
  const bool built_with_mpi = std::string(dilattn_build_info()).find("MPI found at build: yes") !=
                              std::string::npos;
  int not_a_comm = 0;
  dilattn_comm comm = nullptr;
  if (built_with_mpi)
    CHECK_ERROR(dilattn_comm_create_mpi(&not_a_comm, 100, &comm), DILATTN_ERROR_INVALID_VALUE,
                "not initialised");
  else
    CHECK_ERROR(dilattn_comm_create_mpi(&not_a_comm, 100, &comm), DILATTN_ERROR_UNSUPPORTED,
                "built without MPI");
  CHECK_MSG(comm == nullptr, "comm written on error");
  CHECK_EQ(dilattn_comm_create_mpi(&not_a_comm, 100, nullptr), DILATTN_ERROR_NULL_POINTER);
}

}  // namespace

int main() {
  bad_input_on_one_rank();
  missing_rank();
  mismatched_split();
  unaligned_blocks();
  arguments();
  mpi_outside_mpirun();
  return finish("ring_errors_fail_every_rank");
}
