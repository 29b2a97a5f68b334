// ring_mpi.cpp - `--ring mpi` (see ring_mpi.h): MPI world, rank 0's facts to every rank,
// shards scattered, one ring call per process, output rows gathered to rank 0.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "ring_mpi.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli_error.h"
#include "library_status.h"
#include "shard_copy.h"

namespace dilattn_cli {

namespace {

// Every wait for another rank inside the ring ends long before this unless a rank is stuck.
constexpr int32_t kRingTimeoutMs = 600000;
// MPI counts are int: larger buffers travel in pieces.
constexpr size_t kPieceBytes = size_t{1} << 30;

void send_bytes(const unsigned char* data, size_t bytes, int to) {
  for (size_t off = 0; off < bytes; off += kPieceBytes)
    MPI_Send(data + off, static_cast<int>(bytes - off < kPieceBytes ? bytes - off : kPieceBytes),
             MPI_BYTE, to, 0, MPI_COMM_WORLD);
}
void recv_bytes(unsigned char* data, size_t bytes, int from) {
  for (size_t off = 0; off < bytes; off += kPieceBytes)
    MPI_Recv(data + off, static_cast<int>(bytes - off < kPieceBytes ? bytes - off : kPieceBytes),
             MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// What a failure tells rank 0: its status and message.
struct RankOutcome {
  int32_t status;
  char message[512];
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void send_to_all(const std::vector<int64_t>& v) {
  for (int r = 1; r < world_size(); ++r)
    send_bytes(reinterpret_cast<const unsigned char*>(v.data()), v.size() * 8, r);
}

class CommHandle {
 public:
  CommHandle() {
    MPI_Comm world = MPI_COMM_WORLD;
    check_status(dilattn_comm_create_mpi(&world, kRingTimeoutMs, &comm_), "--ring mpi");
  }
  ~CommHandle() { dilattn_comm_destroy(comm_); }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  dilattn_comm get() const { return comm_; }

 private:
  dilattn_comm comm_ = nullptr;
};

// The shards of every rank's tensors: rank 0 sends rank r its rows of each input; each rank
// computes into its own output shards; rank 0 collects every rank's output rows.
class Scatter {
 public:
  Scatter(const RingOptions& ring, int64_t seqlen) : rank_(world_rank()), P_(world_size()) {
    rows_.resize(static_cast<size_t>(P_));
    for (int r = 0; r < P_; ++r)
      check_status(dilattn_ring_shard_rows(seqlen, P_, r, ring.split, rows_[r].first, rows_[r].count),
                   "--ring mpi");
  }
  const Rows& mine() const { return rows_[static_cast<size_t>(rank_)]; }

  // This rank's rows of the input `full` (whose data is on rank 0).
  std::unique_ptr<Shard> input(const dilattn_tensor& full, bool lse) const {
    auto own = std::make_unique<Shard>(full, mine(), lse, rank_ == 0);
    if (rank_ == 0) {
      for (int r = 1; r < P_; ++r) {
        Shard theirs(full, rows_[static_cast<size_t>(r)], lse, true);
        send_bytes(theirs.data(), theirs.size(), r);
      }
    } else {
      recv_bytes(own->data(), own->size(), 0);
    }
    return own;
  }
  std::unique_ptr<Shard> output(const dilattn_tensor& full, bool lse) const {
    return std::make_unique<Shard>(full, mine(), lse, false);
  }
  // Rank 0 writes every rank's rows of `shard` into its full tensor.
  void gather(Shard& shard, const dilattn_tensor& full, bool lse) const {
    if (rank_ != 0) {
      send_bytes(shard.data(), shard.size(), 0);
      return;
    }
    shard.copy_out();
    for (int r = 1; r < P_; ++r) {
      Shard theirs(full, rows_[static_cast<size_t>(r)], lse, false);
      recv_bytes(theirs.data(), theirs.size(), r);
      theirs.copy_out();
    }
  }

  // Every rank's status reaches rank 0, which throws for the first failure, a rank's own
  // error before the DILATTN_ERROR_COMM of the ranks that saw it fail; the other ranks leave
  // quietly (QuietExit).
  void agree(dilattn_status mine, const char* what) const {
    RankOutcome out{};
    out.status = mine;
    std::snprintf(out.message, sizeof out.message, "%s", mine ? dilattn_last_error() : "");
    std::vector<RankOutcome> all(static_cast<size_t>(rank_ == 0 ? P_ : 1));
    MPI_Gather(&out, sizeof out, MPI_BYTE, all.data(), sizeof out, MPI_BYTE, 0, MPI_COMM_WORLD);
    int32_t worst = -1;
    if (rank_ == 0)
      for (int32_t r = 0; r < P_; ++r)
        if (all[r].status != DILATTN_SUCCESS &&
            (worst < 0 || (all[worst].status == DILATTN_ERROR_COMM && all[r].status != DILATTN_ERROR_COMM)))
          worst = r;
    int32_t failed_status = worst >= 0 ? all[worst].status : DILATTN_SUCCESS;
    MPI_Bcast(&failed_status, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    if (failed_status == DILATTN_SUCCESS) return;
    if (rank_ != 0) throw QuietExit{};
    check_status(static_cast<dilattn_status>(failed_status),
                 std::string(what) + " (ring rank " + std::to_string(worst) + ")", all[worst].message);
  }

 private:
  int rank_, P_;
  std::vector<Rows> rows_;
};

}  // namespace

MpiWorld::MpiWorld(bool wanted) : active_(wanted) {
  if (!active_) return;
  int provided = 0;
  // FUNNELED: only this (main) thread calls MPI; the cpu backend's workers never do.
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw CliError(kExitRuntime, "flag --ring mpi: MPI_Init_thread failed");
  rank_ = world_rank();
}

MpiWorld::~MpiWorld() {
  if (active_) MPI_Finalize();
}

void MpiWorld::on_root(const std::function<void()>& step) const {
  if (!active_) return step();
  int32_t code = kExitOk;
  if (root()) {
    try {
      step();
    } catch (const CliError& e) {
      code = e.code();
      MPI_Bcast(&code, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
      throw;
    }
  }
  MPI_Bcast(&code, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
  if (code != kExitOk) throw QuietExit{};
}

void MpiWorld::share_header(NpyArray* a) const {
  if (!active_) return;
  int64_t header[6] = {static_cast<int64_t>(a->type), static_cast<int64_t>(a->shape.size())};
  for (size_t i = 0; i < a->shape.size() && i < 4; ++i) header[2 + i] = a->shape[i];
  MPI_Bcast(header, 6, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (root()) return;
  a->type = static_cast<NpyType>(header[0]);
  a->shape.assign(header + 2, header + 2 + header[1]);
  a->data.clear();
}

void MpiWorld::share_mask(MaskHandle* mask, int64_t seqlen_q, int64_t seqlen_k, int64_t block_q,
                          int64_t block_k) const {
  if (!active_) return;
  std::vector<int64_t> arrays[3];  // row_ptr, col_idx, head_ptr (empty: one head)
  if (root()) {
    const std::map<std::string, NpyArray> a = mask_arrays(*mask);
    const char* names[3] = {"row_ptr", "col_idx", "head_ptr"};
    for (int i = 0; i < 3; ++i) {
      const auto it = a.find(names[i]);
      if (it == a.end()) continue;
      arrays[i].resize(it->second.data.size() / 8);
      if (!arrays[i].empty()) std::memcpy(arrays[i].data(), it->second.data.data(), it->second.data.size());
    }
  }
  for (std::vector<int64_t>& v : arrays) {
    uint64_t n = v.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    v.resize(n);
    if (root()) send_to_all(v);
    else recv_bytes(reinterpret_cast<unsigned char*>(v.data()), n * 8, 0);
  }
  if (!root())
    create_mask(arrays[0], arrays[1], arrays[2], seqlen_q, seqlen_k, block_q, block_k,
                "--mask (from rank 0)", mask);
}

void ring_forward_mpi(dilattn_plan plan, const RingOptions& ring, const dilattn_tensor& q,
                      const dilattn_tensor& k, const dilattn_tensor& v, const dilattn_tensor& o,
                      const dilattn_tensor& lse) {
  const Scatter scatter(ring, q.shape[1]);
  const CommHandle comm;
  const auto sq = scatter.input(q, false), sk = scatter.input(k, false), sv = scatter.input(v, false);
  const auto so = scatter.output(o, false), sl = scatter.output(lse, true);
  const dilattn_status s = dilattn_ring_forward(plan, comm.get(), ring.split, sq->view(), sk->view(),
                                                sv->view(), so->view(), sl->view());
  scatter.agree(s, "forward");
  scatter.gather(*so, o, false);
  scatter.gather(*sl, lse, true);
}

void ring_backward_mpi(dilattn_plan plan, const RingOptions& ring, const dilattn_tensor& q,
                       const dilattn_tensor& k, const dilattn_tensor& v, const dilattn_tensor& o,
                       const dilattn_tensor& lse, const dilattn_tensor& d_o,
                       const dilattn_tensor& dq, const dilattn_tensor& dk,
                       const dilattn_tensor& dv) {
  const Scatter scatter(ring, q.shape[1]);
  const CommHandle comm;
  const auto sq = scatter.input(q, false), sk = scatter.input(k, false), sv = scatter.input(v, false);
  const auto so = scatter.input(o, false), sl = scatter.input(lse, true);
  const auto sdo = scatter.input(d_o, false);
  const auto sdq = scatter.output(dq, false), sdk = scatter.output(dk, false),
             sdv = scatter.output(dv, false);
  const dilattn_status s = dilattn_ring_backward(plan, comm.get(), ring.split, sq->view(), sk->view(),
                                                 sv->view(), so->view(), sl->view(), sdo->view(),
                                                 sdq->view(), sdk->view(), sdv->view());
  scatter.agree(s, "backward");
  scatter.gather(*sdq, dq, false);
  scatter.gather(*sdk, dk, false);
  scatter.gather(*sdv, dv, false);
}

}  // namespace dilattn_cli
