// mpi_ranks.h - the ranks of a ring test as MPI processes (run under mpirun): this process
// runs its own rank over dilattn_comm_create_mpi on MPI_COMM_WORLD, and every rank's output
// shards are broadcast so that each process assembles the full tensors and checks them with
// the same code as the threads tests (ring_test_util.h, ring_checks.h).
#ifndef DILATTN_TESTS_RING_MPI_RANKS_H
#define DILATTN_TESTS_RING_MPI_RANKS_H

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <memory>

#include "../ring_test_util.h"
#include "ring_transport.h"

namespace ringtest {

// MPI_Init_thread / MPI_Finalize around main's body.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// A communicator over MPI_COMM_WORLD: the public dilattn_comm_create_mpi, or (piece_bytes > 0)
// the transport itself with shifts cut into pieces of piece_bytes, so that a test sees chunks
// travel in many messages without allocating the 1 GiB pieces of a real run.
inline dilattn_status create_world_comm(int32_t timeout_ms, size_t piece_bytes, dilattn_comm* comm) {
  MPI_Comm world = MPI_COMM_WORLD;
  if (piece_bytes == 0) return dilattn_comm_create_mpi(&world, timeout_ms, comm);
  std::unique_ptr<dilattn::RingTransport> transport;
  if (dilattn_status s = dilattn::make_mpi_transport(&world, timeout_ms, piece_bytes, &transport))
    return s;
  auto made = std::make_unique<dilattn_comm_s>();
  made->transport = std::move(transport);
  *comm = made.release();
  return DILATTN_SUCCESS;
}

class MpiRanks final : public RankHost {
 public:
  explicit MpiRanks(size_t piece_bytes = 0) : piece_bytes_(piece_bytes) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  }
  std::vector<dilattn_status> run(const Ring& ring, const RankBody& body) const override {
    std::vector<dilattn_status> status(static_cast<size_t>(ring.P), DILATTN_SUCCESS);
    dilattn_comm comm = nullptr;
    if (!CHECK_OK(create_world_comm(ring.timeout_ms, piece_bytes_, &comm))) {
      status[static_cast<size_t>(rank_)] = DILATTN_ERROR_COMM;
      return status;
    }
    status[static_cast<size_t>(rank_)] = body(rank_, comm);
    CHECK_OK(dilattn_comm_destroy(comm));
    return status;
  }
  bool hosts(int32_t rank) const override { return rank == rank_; }
  void share(int32_t rank, Tensor* t) const override {
    MPI_Bcast(t->view().data, static_cast<int>(t->bytes().size()), MPI_BYTE, rank, MPI_COMM_WORLD);
  }

 private:
  size_t piece_bytes_;
  int rank_ = 0;
};

}  // namespace ringtest

#endif  // DILATTN_TESTS_RING_MPI_RANKS_H
