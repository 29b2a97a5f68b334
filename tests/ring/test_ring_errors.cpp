// test_ring_errors.cpp - SPEC 7 for ring calls, which are collective: a bad input on one rank
// fails every rank (that rank with its own status, the others with DILATTN_ERROR_COMM naming
// it), a rank that never arrives makes the others return DILATTN_ERROR_COMM after the timeout
// (never a hang) and breaks the communicator, ranks that disagree on the call are all refused,
// and no output is written on any rank when the status is an error.
#include <atomic>
#include <cstring>
#include <string>

#include "ring_test_util.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

bool contains(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

// One rank's shards for a small dense problem, outputs poisoned.
struct Shards {
  ringtest::Buffer q, k, v, o, lse;
  Shards(int64_t rows, int64_t H, int64_t D) {
    q.make(DILATTN_F32, 1, rows, H, D, false);
    k.make(DILATTN_F32, 1, rows, H, D, false);
    v.make(DILATTN_F32, 1, rows, H, D, false);
    o.make(DILATTN_F32, 1, rows, H, D, false);
    lse.make(DILATTN_F32, 1, H, rows, 1, false);
    std::memset(o.bytes.data(), 0x5a, o.bytes.size());
    std::memset(lse.bytes.data(), 0x5a, lse.bytes.size());
  }
  bool outputs_untouched() const {
    for (unsigned char b : o.bytes) if (b != 0x5a) return false;
    for (unsigned char b : lse.bytes) if (b != 0x5a) return false;
    return true;
  }
};

cputest::Case dense_case(int64_t N) {
  cputest::Case c;
  c.name = "errors";
  c.Nq = c.Nk = N;
  c.H = c.Hkv = 1;
  c.D = 4;
  return c;
}

// bad_input_on_one_rank_fails_every_rank
void bad_input_on_one_rank() {
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  dilattn_plan plan = cputest::make_plan(dense_case(12), DILATTN_BACKEND_REF, 1);
  std::vector<std::string> messages(3);
  std::vector<bool> untouched(3);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(r == 1 ? 5 : 4, 1, 4);  // rank 1's q has one row too many
    Shards good(4, 1, 4);
    const dilattn_status st = dilattn_ring_forward(plan, comm, ring.split, &s.q.view,
                                                   &good.k.view, &good.v.view, &s.o.view,
                                                   &s.lse.view);
    messages[r] = dilattn_last_error();
    untouched[r] = s.outputs_untouched();
    return st;
  });
  expect(status[1] == DILATTN_ERROR_SHAPE_MISMATCH && contains(messages[1].c_str(), "'q'"),
         "rank 1 reports its own bad q: " + messages[1]);
  for (int r : {0, 2})
    expect(status[r] == DILATTN_ERROR_COMM && contains(messages[r].c_str(), "rank 1 failed") &&
               contains(messages[r].c_str(), "SHAPE_MISMATCH"),
           "rank " + std::to_string(r) + " names rank 1's failure: " + messages[r]);
  for (int r = 0; r < 3; ++r) expect(untouched[r], "rank " + std::to_string(r) + " left its outputs untouched");
  dilattn_plan_destroy(plan);
}

// missing_rank_times_out_and_breaks_the_communicator
void missing_rank() {
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 200};
  dilattn_plan plan = cputest::make_plan(dense_case(12), DILATTN_BACKEND_REF, 1);
  std::vector<std::string> messages(3);
  std::vector<dilattn_status> late(3, DILATTN_SUCCESS);
  std::atomic<int> done{0};
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(4, 1, 4);
    if (r == 2) {  // arrives only after the others gave up
      while (done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    dilattn_status st = dilattn_ring_forward(plan, comm, ring.split, &s.q.view, &s.k.view,
                                             &s.v.view, &s.o.view, &s.lse.view);
    messages[r] = dilattn_last_error();
    ++done;
    if (r != 2) {  // and the communicator stays broken
      late[r] = dilattn_ring_forward(plan, comm, ring.split, &s.q.view, &s.k.view, &s.v.view,
                                     &s.o.view, &s.lse.view);
    }
    expect(s.outputs_untouched(), "rank " + std::to_string(r) + " outputs untouched after a timeout");
    return st;
  });
  for (int r : {0, 1}) {
    expect(status[r] == DILATTN_ERROR_COMM && contains(messages[r].c_str(), "rank(s) 2") &&
               contains(messages[r].c_str(), "200 ms"),
           "rank " + std::to_string(r) + " times out naming rank 2: " + messages[r]);
    expect(late[r] == DILATTN_ERROR_COMM, "a broken communicator refuses the next call");
  }
  expect(status[2] == DILATTN_ERROR_COMM && contains(messages[2].c_str(), "broken"),
         "the late rank finds the communicator broken: " + messages[2]);
  dilattn_plan_destroy(plan);
}

// ranks_called_with_different_splits_are_all_refused
void mismatched_split() {
  const ringtest::Ring ring{2, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  dilattn_plan plan = cputest::make_plan(dense_case(8), DILATTN_BACKEND_REF, 1);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(4, 1, 4);
    const dilattn_ring_split split = r == 0 ? DILATTN_RING_ZIGZAG : DILATTN_RING_CONTIGUOUS;
    const dilattn_status st = dilattn_ring_forward(plan, comm, split, &s.q.view, &s.k.view,
                                                   &s.v.view, &s.o.view, &s.lse.view);
    expect(s.outputs_untouched(), "outputs untouched after a split mismatch");
    return st;
  });
  for (int r = 0; r < 2; ++r)
    expect(status[r] == DILATTN_ERROR_INVALID_VALUE, "split mismatch refused on rank " + std::to_string(r));
  dilattn_plan_destroy(plan);
}

// block_sparse_blocks_across_shards_unsupported_on_every_rank
void unaligned_blocks() {
  cputest::Case c = dense_case(128);
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  c.bq = c.bk = 16;
  dilattn_plan plan = cputest::make_plan(c, DILATTN_BACKEND_REF, 1);
  const ringtest::Ring ring{3, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  std::vector<std::string> messages(3);
  const auto status = ringtest::run_ranks(ring, [&](int32_t r, dilattn_comm comm) {
    Shards s(ringtest::rows_of(128, ring, r).total(), 1, 4);
    const dilattn_status st = dilattn_ring_forward(plan, comm, ring.split, &s.q.view, &s.k.view,
                                                   &s.v.view, &s.o.view, &s.lse.view);
    messages[r] = dilattn_last_error();
    expect(s.outputs_untouched(), "outputs untouched when unsupported");
    return st;
  });
  for (int r = 0; r < 3; ++r)
    expect(status[r] == DILATTN_ERROR_UNSUPPORTED && contains(messages[r].c_str(), "[0, 42) cut a mask block"),
           "unaligned blocks refused on rank " + std::to_string(r) + ": " + messages[r]);
  dilattn_plan_destroy(plan);
}

// ring_arguments_checked: plan with Nq != Nk, a split that is no split, bad communicator
// arguments, a destroyed communicator, bad shard-row arguments.
void arguments() {
  cputest::Case c = dense_case(8);
  c.Nk = 9;
  dilattn_plan plan = cputest::make_plan(c, DILATTN_BACKEND_REF, 1);
  const ringtest::Ring one{1, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF, 60000};
  auto status = ringtest::run_ranks(one, [&](int32_t, dilattn_comm comm) {
    Shards s(8, 1, 4);
    return dilattn_ring_forward(plan, comm, one.split, &s.q.view, &s.k.view, &s.v.view,
                                &s.o.view, nullptr);
  });
  expect(status[0] == DILATTN_ERROR_SEQLEN_MISMATCH, "Nq != Nk refused");
  dilattn_plan_destroy(plan);

  plan = cputest::make_plan(dense_case(8), DILATTN_BACKEND_REF, 1);
  std::string message;
  status = ringtest::run_ranks(one, [&](int32_t, dilattn_comm comm) {
    Shards s(8, 1, 4);
    const dilattn_status st = dilattn_ring_forward(plan, comm, static_cast<dilattn_ring_split>(7),
                                                   &s.q.view, &s.k.view, &s.v.view, &s.o.view, nullptr);
    message = dilattn_last_error();
    return st;
  });
  expect(status[0] == DILATTN_ERROR_INVALID_VALUE && contains(message.c_str(), "'split' = 7"),
         "split 7 refused: " + message);

  dilattn_comm comms[2] = {nullptr, nullptr};
  expect(dilattn_comm_create_threads(0, 100, comms) == DILATTN_ERROR_INVALID_VALUE &&
             contains(dilattn_last_error(), "'num_ranks' = 0"),
         "0 ranks refused");
  expect(dilattn_comm_create_threads(2, 0, comms) == DILATTN_ERROR_INVALID_VALUE &&
             contains(dilattn_last_error(), "'timeout_ms' = 0"),
         "timeout 0 refused");
  expect(dilattn_comm_create_threads(2, 100, nullptr) == DILATTN_ERROR_NULL_POINTER, "NULL comms refused");
  expect(comms[0] == nullptr && comms[1] == nullptr, "nothing written on error");
  expect(dilattn_comm_create_threads(2, 100, comms) == DILATTN_SUCCESS, "2 ranks made");
  int32_t rank = -1, size = -1;
  expect(dilattn_comm_rank(comms[1], &rank, &size) == DILATTN_SUCCESS && rank == 1 && size == 2,
         "rank 1 of 2");
  dilattn_comm_destroy(comms[0]);
  dilattn_comm_destroy(comms[1]);
  expect(dilattn_comm_rank(comms[1], &rank, &size) == DILATTN_ERROR_INVALID_VALUE &&
             contains(dilattn_last_error(), "destroyed"),
         "a destroyed comm refused");
  Shards s(8, 1, 4);
  expect(dilattn_ring_forward(plan, comms[0], DILATTN_RING_CONTIGUOUS, &s.q.view, &s.k.view,
                              &s.v.view, &s.o.view, nullptr) == DILATTN_ERROR_INVALID_VALUE,
         "ring call on a destroyed comm refused");
  expect(s.outputs_untouched(), "outputs untouched with a destroyed comm");
  dilattn_plan_destroy(plan);

  int64_t first[2], count[2];
  expect(dilattn_ring_shard_rows(10, 3, 3, DILATTN_RING_CONTIGUOUS, first, count) ==
                 DILATTN_ERROR_INVALID_VALUE && contains(dilattn_last_error(), "'rank' = 3"),
         "rank 3 of 3 refused");
  expect(dilattn_ring_shard_rows(0, 3, 0, DILATTN_RING_CONTIGUOUS, first, count) ==
             DILATTN_ERROR_INVALID_VALUE, "seqlen 0 refused");
  expect(dilattn_ring_shard_rows(10, 3, 0, static_cast<dilattn_ring_split>(-1), first, count) ==
             DILATTN_ERROR_INVALID_VALUE, "split -1 refused");
}

}  // namespace

int main() {
  bad_input_on_one_rank();
  missing_rank();
  mismatched_split();
  unaligned_blocks();
  arguments();
  if (failures == 0) std::printf("ring errors: every rank fails together, nothing written\n");
  return failures != 0;
}
