// test_ring_mpi_errors.cpp - SPEC 7 for ring calls over MPI, run under mpirun with P >= 2
// processes (meson: P = 2, 3):
//   mpi_bad_input_on_one_rank_fails_every_rank: rank 1's q has a row too many; it returns
//     SHAPE_MISMATCH naming 'q', every other rank DILATTN_ERROR_COMM naming rank 1, all through
//     the vote of ring_call.cpp; no rank writes its outputs; the communicator still works.
//   mpi_missing_rank_times_out: the last rank does not call; the others return
//     DILATTN_ERROR_COMM within their 300 ms timeout (never a hang), outputs untouched, the
//     communicator broken (the next call: COMM, "broken"); the late rank, calling afterwards,
//     returns COMM after its own timeout.
//   mpi_create_arguments_checked: NULL arguments, timeout_ms 0, MPI_COMM_NULL.
#include <chrono>

#include "mpi_ranks.h"

using namespace harness;

namespace {

// One rank's shards of a dense f32 problem with N = 4 P, outputs poisoned.
struct Shards {
  Tensor q, k, v, o, lse;
  explicit Shards(int64_t q_rows)
      : q(DILATTN_F32, 1, q_rows, 1, 4), k(DILATTN_F32, 1, 4, 1, 4), v(DILATTN_F32, 1, 4, 1, 4),
        o(DILATTN_F32, 1, q_rows, 1, 4), lse(DILATTN_F32, 1, 1, q_rows, 1) {
    o.poison();
    lse.poison();
  }
  bool outputs_untouched() const { return o.is_poisoned() && lse.is_poisoned(); }
  dilattn_status forward(dilattn_plan plan, dilattn_comm comm) {
    return dilattn_ring_forward(plan, comm, DILATTN_RING_CONTIGUOUS, &q.view(), &k.view(),
                                &v.view(), &o.view(), &lse.view());
  }
};

AttentionCase dense_case(int32_t P) {
  AttentionCase c;
  c.name = "mpi_errors";
  c.Nq = c.Nk = 4 * P;
  c.H = c.Hkv = 1;
  c.D = 4;
  return c;
}

void bad_input_on_one_rank(int32_t rank, int32_t P) {
  CaseScope scope("mpi_bad_input_on_one_rank_fails_every_rank");
  Plan plan;
  if (!CHECK_OK(plan.create(dense_case(P), DILATTN_BACKEND_REF, 1))) return;
  MPI_Comm world = MPI_COMM_WORLD;
  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_mpi(&world, 60000, &comm))) return;
  Shards s(rank == 1 ? 5 : 4);
  const dilattn_status st = s.forward(plan.get(), comm);
  const std::string message = dilattn_last_error();
  if (rank == 1) {
    CHECK_MSG(st == DILATTN_ERROR_SHAPE_MISMATCH, "rank 1: %s (%s)", dilattn_status_string(st),
              message.c_str());
    CHECK_MSG(message.find("'q'") != std::string::npos, "rank 1: \"%s\" does not name 'q'",
              message.c_str());
  } else {
    CHECK_MSG(st == DILATTN_ERROR_COMM, "rank %d: %s (%s)", static_cast<int>(rank),
              dilattn_status_string(st), message.c_str());
    CHECK_MSG(message.find("rank 1 failed") != std::string::npos &&
                  message.find("SHAPE_MISMATCH") != std::string::npos,
              "rank %d: \"%s\" does not name rank 1's failure", static_cast<int>(rank),
              message.c_str());
  }
  CHECK_MSG(s.outputs_untouched(), "rank %d wrote its outputs", static_cast<int>(rank));
  // A refused call leaves the communicator working: the same call, good input, succeeds.
  Shards good(4);
  CHECK_OK(good.forward(plan.get(), comm));
  CHECK_OK(dilattn_comm_destroy(comm));
}

void missing_rank(int32_t rank, int32_t P) {
  CaseScope scope("mpi_missing_rank_times_out");
  Plan plan;
  if (!CHECK_OK(plan.create(dense_case(P), DILATTN_BACKEND_REF, 1))) return;
  MPI_Comm world = MPI_COMM_WORLD;
  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_mpi(&world, 300, &comm))) return;
  Shards s(4);
  const int32_t late = P - 1;
  if (rank != late) {
    const auto t0 = std::chrono::steady_clock::now();
    const dilattn_status st = s.forward(plan.get(), comm);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string message = dilattn_last_error();
    CHECK_MSG(st == DILATTN_ERROR_COMM, "rank %d: %s (%s)", static_cast<int>(rank),
              dilattn_status_string(st), message.c_str());
    CHECK_MSG(message.find("300 ms") != std::string::npos, "rank %d: \"%s\" names no timeout",
              static_cast<int>(rank), message.c_str());
    // Generous: the timeout is 300 ms; a hang would stop the test at meson's limit instead.
    CHECK_MSG(waited < 30.0, "rank %d waited %.1f s", static_cast<int>(rank), waited);
    Shards again(4);
    const dilattn_status next = again.forward(plan.get(), comm);
    CHECK_MSG(next == DILATTN_ERROR_COMM &&
                  std::string(dilattn_last_error()).find("broken") != std::string::npos,
              "rank %d: a broken communicator gave %s (%s)", static_cast<int>(rank),
              dilattn_status_string(next), dilattn_last_error());
    CHECK_MSG(again.outputs_untouched(), "rank %d wrote outputs on a broken communicator",
              static_cast<int>(rank));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the late rank calls only after every other rank gave up
  if (rank == late) {
    const dilattn_status st = s.forward(plan.get(), comm);
    const std::string message = dilattn_last_error();
    CHECK_MSG(st == DILATTN_ERROR_COMM && message.find("300 ms") != std::string::npos,
              "late rank %d: %s (%s)", static_cast<int>(rank), dilattn_status_string(st),
              message.c_str());
  }
  CHECK_MSG(s.outputs_untouched(), "rank %d wrote its outputs after a timeout",
            static_cast<int>(rank));
  CHECK_OK(dilattn_comm_destroy(comm));
}

void create_arguments() {
  CaseScope scope("mpi_create_arguments_checked");
  MPI_Comm world = MPI_COMM_WORLD, null = MPI_COMM_NULL;
  dilattn_comm comm = nullptr;
  CHECK_ERROR(dilattn_comm_create_mpi(nullptr, 100, &comm), DILATTN_ERROR_NULL_POINTER, "'mpi_comm'");
  CHECK_ERROR(dilattn_comm_create_mpi(&world, 100, nullptr), DILATTN_ERROR_NULL_POINTER, "'comm'");
  CHECK_ERROR(dilattn_comm_create_mpi(&world, 0, &comm), DILATTN_ERROR_INVALID_VALUE,
              "'timeout_ms' = 0");
  CHECK_ERROR(dilattn_comm_create_mpi(&null, 100, &comm), DILATTN_ERROR_INVALID_VALUE,
              "MPI_COMM_NULL");
  CHECK_MSG(comm == nullptr, "comm written on error");
  int32_t rank = -1, size = -1;
  if (CHECK_OK(dilattn_comm_create_mpi(&world, 1000, &comm))) {
    CHECK_OK(dilattn_comm_rank(comm, &rank, &size));
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    CHECK_EQ(rank, world_rank);
    CHECK_EQ(size, world_size);
    CHECK_OK(dilattn_comm_destroy(comm));
  }
}

}  // namespace

int main(int argc, char** argv) {
  ringtest::MpiSession mpi(&argc, &argv);
  if (mpi.size() < 2) {
    std::printf("test_ring_mpi_errors needs mpirun -n 2 or more\n");
    return 1;
  }
  create_arguments();
  bad_input_on_one_rank(mpi.rank(), mpi.size());
  missing_rank(mpi.rank(), mpi.size());
  const std::string name = "ring_mpi_errors rank " + std::to_string(mpi.rank()) + " of " +
                           std::to_string(mpi.size());
  return finish(name.c_str());
}
