// test_ring_mpi_errors.cpp - SPEC 7 for ring calls over MPI, run under mpirun with P >= 2
// processes (meson: P = 2, 3):
//   mpi_bad_input_on_one_rank_fails_every_rank: rank 1's q has a row too many; it returns
//     SHAPE_MISMATCH naming 'q', every other rank DILATTN_ERROR_COMM naming rank 1, all through
//     the vote of ring_call.cpp; no rank writes its outputs; the communicator still works.
//   mpi_missing_rank_times_out: the last rank does not call; the others return
//     DILATTN_ERROR_COMM within their 300 ms timeout (never a hang), outputs untouched, the
//     communicator broken (the next call: COMM, "broken"); the late rank, calling afterwards,
//     returns COMM after its own timeout.
//   mpi_out_of_memory_inside_the_ring_call_fails_every_rank: rank 1 alone may not allocate
//     more than 8 MiB beyond its shards (RLIMIT_DATA: heap and private mappings; no test hook,
//     a real allocation failure), too little for the ring's buffers (a 32 MiB K/V chunk pair;
//     whole chunks travel: block-sparse, each query block listing a block of the next rank).
//     It returns OUT_OF_MEMORY, every other rank COMM naming rank 1's failure, all within 10 s
//     with a 20 s timeout (a hang detector: a rank waiting for rank 1's rows would return only
//     after the timeout), outputs untouched. Not run under AddressSanitizer, whose shadow
//     mappings and allocator do not live with a data limit.
//   mpi_ranks_disagreeing_refused: rank 1's plan has another scale, then (block-sparse, one
//     key block per row block) another mask of as many blocks: every rank returns
//     DILATTN_ERROR_COMM naming a rank that called with another "scale" / "block-sparse mask",
//     no rank writes its outputs, and the communicator still works.
//   mpi_create_arguments_checked: NULL arguments, timeout_ms 0, MPI_COMM_NULL.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <optional>

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

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitized = true;
#else
constexpr bool kAddressSanitized = false;
#endif
#else
constexpr bool kAddressSanitized = false;
#endif

// This process may map at most `margin` more bytes of data than it has now (RLIMIT_DATA, from
// /proc/self/status VmData); the old limit is back on destruction. ok() false: not set.
class DataLimit {
 public:
  explicit DataLimit(size_t margin) {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (f == nullptr || getrlimit(RLIMIT_DATA, &old_) != 0) {
      if (f != nullptr) std::fclose(f);
      return;
    }
    char line[256];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "VmData: %llu kB", &kib) == 1) break;
    std::fclose(f);
    if (kib == 0) return;
    rlimit limited = old_;
    limited.rlim_cur = static_cast<rlim_t>(kib * 1024 + margin);
    set_ = setrlimit(RLIMIT_DATA, &limited) == 0;
  }
  ~DataLimit() {
    if (set_) setrlimit(RLIMIT_DATA, &old_);
  }
  bool ok() const { return set_; }

 private:
  rlimit old_{};
  bool set_ = false;
};

// Block-sparse, 256-row blocks, P * 65536 rows: each query block lists the block at the same
// place in the next rank's shard, so whole 16 MiB K and V shards travel and little is computed.
AttentionCase whole_chunks_case(int32_t P) {
  AttentionCase c;
  c.name = "mpi_out_of_memory";
  c.Nq = c.Nk = int64_t{65536} * P;
  c.H = c.Hkv = 1;
  c.D = 64;
  c.kind = DILATTN_KIND_BLOCK_SPARSE;
  const int64_t blocks = c.Nq / 256, per_rank = blocks / P;
  c.mask.bq = c.mask.bk = 256;
  for (int64_t i = 0; i < blocks; ++i) {
    c.mask.row_ptr.push_back(i);
    c.mask.col_idx.push_back((i + per_rank) % blocks);
  }
  c.mask.row_ptr.push_back(blocks);
  return c;
}

void out_of_memory_inside_the_ring_call(int32_t rank, int32_t P) {
  CaseScope scope("mpi_out_of_memory_inside_the_ring_call_fails_every_rank");
  const AttentionCase c = whole_chunks_case(P);
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_CPU, 1))) return;
  MPI_Comm world = MPI_COMM_WORLD;
  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_mpi(&world, 20000, &comm))) return;
  const int64_t rows = c.Nq / P;
  Tensor q(DILATTN_F32, 1, rows, 1, c.D), k(DILATTN_F32, 1, rows, 1, c.D),
      v(DILATTN_F32, 1, rows, 1, c.D), o(DILATTN_F32, 1, rows, 1, c.D),
      lse(DILATTN_F32, 1, 1, rows, 1);
  o.poison();
  lse.poison();
  MPI_Barrier(MPI_COMM_WORLD);
  dilattn_status st;
  std::string message;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::optional<DataLimit> limit;
    if (rank == 1) {
      limit.emplace(size_t{8} << 20);
      CHECK_MSG(limit->ok(), "rank 1 could not limit its data segment");
    }
    st = dilattn_ring_forward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(), &k.view(),
                              &v.view(), &o.view(), &lse.view());
    message = dilattn_last_error();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank == 1) {
    CHECK_MSG(st == DILATTN_ERROR_OUT_OF_MEMORY, "rank 1: %s (%s)", dilattn_status_string(st),
              message.c_str());
  } else {
    CHECK_MSG(st == DILATTN_ERROR_COMM && message.find("rank 1 failed") != std::string::npos &&
                  message.find("OUT_OF_MEMORY") != std::string::npos,
              "rank %d: %s (%s)", static_cast<int>(rank), dilattn_status_string(st),
              message.c_str());
  }
  CHECK_MSG(took < 10.0, "rank %d returned after %.1f s (timeout 20 s)", static_cast<int>(rank),
            took);
  CHECK_MSG(o.is_poisoned() && lse.is_poisoned(), "rank %d wrote its outputs",
            static_cast<int>(rank));
  CHECK_OK(dilattn_comm_destroy(comm));
}

void ranks_disagreeing(int32_t rank, int32_t P) {
  CaseScope scope("mpi_ranks_disagreeing_refused");
  MPI_Comm world = MPI_COMM_WORLD;
  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_mpi(&world, 60000, &comm))) return;
  AttentionCase scaled = dense_case(P);
  if (rank == 1) scaled.scale = 0.25;
  AttentionCase sparse = dense_case(P);  // N = 4 P: blocks of 4 rows, one per rank's shard
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.mask.bq = sparse.mask.bk = 4;
  for (int64_t i = 0; i <= P; ++i) sparse.mask.row_ptr.push_back(i);
  for (int64_t i = 0; i < P; ++i)  // rank 1: each row block lists the next key block instead
    sparse.mask.col_idx.push_back(rank == 1 ? (i + 1) % P : i);
  const std::pair<const AttentionCase*, const char*> cases[] = {{&scaled, "scale"},
                                                                 {&sparse, "block-sparse mask"}};
  for (const auto& [c, field] : cases) {
    Plan plan;
    if (!CHECK_OK(plan.create(*c, DILATTN_BACKEND_REF, 1))) continue;
    Shards s(4);
    const dilattn_status st = s.forward(plan.get(), comm);
    const std::string message = dilattn_last_error();
    CHECK_MSG(st == DILATTN_ERROR_COMM && message.find("called with another") != std::string::npos &&
                  message.find(field) != std::string::npos,
              "rank %d: %s (%s), want COMM naming another %s", static_cast<int>(rank),
              dilattn_status_string(st), message.c_str(), field);
    CHECK_MSG(s.outputs_untouched(), "rank %d wrote its outputs", static_cast<int>(rank));
  }
  Plan plan;
  if (CHECK_OK(plan.create(dense_case(P), DILATTN_BACKEND_REF, 1))) {
    Shards good(4);
    CHECK_OK(good.forward(plan.get(), comm));
  }
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
  ranks_disagreeing(mpi.rank(), mpi.size());
  missing_rank(mpi.rank(), mpi.size());
  if (kAddressSanitized)
    std::printf("mpi_out_of_memory_inside_the_ring_call_fails_every_rank: not run under "
                "AddressSanitizer (no data limit there)\n");
  else
    out_of_memory_inside_the_ring_call(mpi.rank(), mpi.size());
  const std::string name = "ring_mpi_errors rank " + std::to_string(mpi.rank()) + " of " +
                           std::to_string(mpi.size());
  return finish(name.c_str());
}
