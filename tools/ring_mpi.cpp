// ring_mpi.cpp - `--ring mpi` (see ring_mpi.h): MPI world, rank 0's facts to every rank,
// shards scattered, one ring call per process, output rows gathered to rank 0.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "ring_mpi.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <new>
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

// What a rank tells the others after a step or a ring call: its outcome and message.
struct RankOutcome {
  int32_t status;  // an exit code after MpiWorld::together, a dilattn_status after the ring
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

// The rows of every rank: rank 0 sends rank r its rows of each input and receives its rows of
// each output, piece by piece (for_each_piece) straight between the full tensor and the
// shard, so that once every rank holds its shards no step of the exchange allocates.
class Scatter {
 public:
  Scatter(const RingOptions& ring, int64_t seqlen) : rank_(world_rank()), P_(world_size()) {
    rows_.resize(static_cast<size_t>(P_));
    for (int r = 0; r < P_; ++r)
      check_status(dilattn_ring_shard_rows(seqlen, P_, r, ring.split, rows_[r].first, rows_[r].count),
                   "--ring mpi");
  }
  const Rows& mine() const { return rows_[static_cast<size_t>(rank_)]; }

  // This rank's rows of the input `full` (whose data is on rank 0; rank 0's own shard was
  // copied in when it was made) into `own`.
  void send_rows(const dilattn_tensor& full, bool lse, Shard& own) const {
    if (rank_ != 0) {
      for_each_piece(full, mine(), lse, [&](size_t, size_t at, size_t bytes) {
        recv_bytes(own.data() + at, bytes, 0);
      });
      return;
    }
    const auto* data = static_cast<const unsigned char*>(full.data);
    for (int r = 1; r < P_; ++r)
      for_each_piece(full, rows_[static_cast<size_t>(r)], lse, [&](size_t at, size_t, size_t bytes) {
        send_bytes(data + at, bytes, r);
      });
  }
  // Rank 0 writes every rank's rows of `shard` into its full tensor.
  void gather(Shard& shard, const dilattn_tensor& full, bool lse) const {
    if (rank_ != 0) {
      for_each_piece(full, mine(), lse, [&](size_t, size_t at, size_t bytes) {
        send_bytes(shard.data() + at, bytes, 0);
      });
      return;
    }
    shard.copy_out();
    auto* data = static_cast<unsigned char*>(full.data);
    for (int r = 1; r < P_; ++r)
      for_each_piece(full, rows_[static_cast<size_t>(r)], lse, [&](size_t at, size_t, size_t bytes) {
        recv_bytes(data + at, bytes, r);
      });
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

void MpiWorld::together(const std::function<void()>& step) const {
  if (!active_) return step();
  RankOutcome mine{};
  mine.status = kExitOk;
  try {
    step();
  } catch (const CliError& e) {
    mine.status = e.code();
    std::snprintf(mine.message, sizeof mine.message, "%s", e.what());
  } catch (const std::bad_alloc&) {
    mine.status = kExitRuntime;  // as main() reports it on one process
    std::snprintf(mine.message, sizeof mine.message, "out of memory");
  }
  std::vector<RankOutcome> all(static_cast<size_t>(world_size()));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].status == kExitOk) continue;
    if (!root()) throw QuietExit{};
    throw CliError(all[r].status, r == 0 ? std::string(all[r].message)
                                         : "ring rank " + std::to_string(r) + ": " + all[r].message);
  }
}

void MpiWorld::on_root(const std::function<void()>& step) const {
  together([&] {
    if (root()) step();
  });
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
  uint64_t sizes[3] = {arrays[0].size(), arrays[1].size(), arrays[2].size()};
  MPI_Bcast(sizes, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  together([&] {  // every rank's memory before rank 0 sends
    for (int i = 0; i < 3; ++i) arrays[i].resize(sizes[i]);
  });
  for (std::vector<int64_t>& v : arrays) {
    if (root()) send_to_all(v);
    else recv_bytes(reinterpret_cast<unsigned char*>(v.data()), v.size() * 8, 0);
  }
  together([&] {
    if (!root())
      create_mask(arrays[0], arrays[1], arrays[2], seqlen_q, seqlen_k, block_q, block_k,
                  "--mask (from rank 0)", mask);
  });
}

namespace {

// This process's shards: its rows of every input and of every output.
struct ProcessShards {
  std::vector<std::unique_ptr<Shard>> inputs, outputs;
  const dilattn_tensor* in(size_t i) const { return inputs[i]->view(); }
  const dilattn_tensor* out(size_t i) const { return outputs[i]->view(); }
};

// Every rank makes its shards and its end of the communicator (agreeing that all did), rank 0
// scatters the input rows, every rank runs call(comm, shards), the ranks agree on its status,
// and rank 0 gathers the output rows.
template <class Call>
void run_process(const MpiWorld& world, const RingOptions& ring, int64_t seqlen, const char* what,
                 std::initializer_list<Operand> inputs, std::initializer_list<Operand> outputs,
                 Call call) {
  std::unique_ptr<Scatter> scatter;
  ProcessShards shards;
  world.together([&] {
    scatter = std::make_unique<Scatter>(ring, seqlen);
    for (const Operand& t : inputs)
      shards.inputs.push_back(std::make_unique<Shard>(*t.full, scatter->mine(), t.lse, world.root()));
    for (const Operand& t : outputs)
      shards.outputs.push_back(std::make_unique<Shard>(*t.full, scatter->mine(), t.lse, false));
  });
  std::unique_ptr<CommHandle> comm;
  world.together([&] { comm = std::make_unique<CommHandle>(); });
  size_t i = 0;
  for (const Operand& t : inputs) scatter->send_rows(*t.full, t.lse, *shards.inputs[i++]);
  scatter->agree(call(comm->get(), shards), what);
  i = 0;
  for (const Operand& t : outputs) scatter->gather(*shards.outputs[i++], *t.full, t.lse);
}

}  // namespace

void ring_forward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                      const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                      const dilattn_tensor& o, const dilattn_tensor& lse) {
  run_process(world, ring, q.shape[1], "forward", {{&q}, {&k}, {&v}}, {{&o}, {&lse, true}},
              [&](dilattn_comm comm, const ProcessShards& s) {
                return dilattn_ring_forward(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                            s.out(0), s.out(1));
              });
}

void ring_backward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                       const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                       const dilattn_tensor& o, const dilattn_tensor& lse,
                       const dilattn_tensor& d_o, const dilattn_tensor& dq,
                       const dilattn_tensor& dk, const dilattn_tensor& dv) {
  run_process(world, ring, q.shape[1], "backward",
              {{&q}, {&k}, {&v}, {&o}, {&lse, true}, {&d_o}}, {{&dq}, {&dk}, {&dv}},
              [&](dilattn_comm comm, const ProcessShards& s) {
                return dilattn_ring_backward(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                             s.in(3), s.in(4), s.in(5), s.out(0), s.out(1),
                                             s.out(2));
              });
}

}  // namespace dilattn_cli
