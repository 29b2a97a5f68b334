// ring_mpi.cpp - `--ring mpi` (see ring_mpi.h): MPI world, the ranks' agreement on the command,
// rank 0's facts to every rank, shards scattered, one ring call per process, output rows
// gathered to rank 0. Every message is posted non-blocking and waited for by MpiWait against
// --ring-timeout.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "ring_mpi.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_error.h"
#include "library_status.h"
#include "output_files.h"
#include "shard_copy.h"

namespace dilattn_cli {

// The waits of MpiWorld and of the exchanges below (a friend of MpiWorld: its timeout, rank and
// command). Each posts non-blocking operations and waits for them with wait(), which polls
// against the world's timeout (ring_mpi.h says what happens past it).
class MpiWait {
 public:
  explicit MpiWait(const MpiWorld& world) : world_(world) {}

  void wait(std::vector<MPI_Request>& requests, const std::string& what) const {
    const auto deadline = Clock::now() + std::chrono::milliseconds(world_.timeout_ms_);
    for (int poll = 0;; ++poll) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) stop("MPI failed " + what);  // MPI_ERRORS_ARE_FATAL: not reached
      if (done) return;
      if (Clock::now() >= deadline)
        stop("waited " + std::to_string(world_.timeout_ms_ / 1000) + " s " + what +
             " (--ring-timeout); another rank stopped, hangs, or runs another command");
      // A ready peer answers within microseconds; then leave the core to the ranks computing.
      if (poll >= 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  void wait(MPI_Request request, const std::string& what) const {
    std::vector<MPI_Request> one(1, request);
    wait(one, what);
  }

  // `bytes` at `data` to rank `to` (from rank `from`), in pieces of at most kPieceBytes.
  void send(const unsigned char* data, size_t bytes, int to, const std::string& what) const {
    std::vector<MPI_Request> requests;
    for (size_t off = 0; off < bytes; off += kPieceBytes) {
      requests.push_back(MPI_REQUEST_NULL);
      MPI_Isend(data + off, piece(bytes, off), MPI_BYTE, to, 0, MPI_COMM_WORLD, &requests.back());
    }
    wait(requests, what);
  }
  void recv(unsigned char* data, size_t bytes, int from, const std::string& what) const {
    std::vector<MPI_Request> requests;
    for (size_t off = 0; off < bytes; off += kPieceBytes) {
      requests.push_back(MPI_REQUEST_NULL);
      MPI_Irecv(data + off, piece(bytes, off), MPI_BYTE, from, 0, MPI_COMM_WORLD,
                &requests.back());
    }
    wait(requests, what);
  }
  // Rank 0's `bytes` at `data` on every rank.
  void broadcast(void* data, size_t bytes, const std::string& what) const {
    std::vector<MPI_Request> requests;
    auto* p = static_cast<unsigned char*>(data);
    for (size_t off = 0; off < bytes; off += kPieceBytes) {
      requests.push_back(MPI_REQUEST_NULL);
      MPI_Ibcast(p + off, piece(bytes, off), MPI_BYTE, 0, MPI_COMM_WORLD, &requests.back());
    }
    wait(requests, what);
  }
  // Every rank's `bytes` at `mine`, in rank order at `all` (world size x bytes), on every rank.
  void allgather(const void* mine, void* all, int bytes, const std::string& what) const {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, MPI_COMM_WORLD, &request);
    wait(request, what);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static int piece(size_t bytes, size_t off) {
    return static_cast<int>(bytes - off < kPieceBytes ? bytes - off : kPieceBytes);
  }
  // Past the deadline a posted operation may still read or write its buffers, and no one may
  // cancel a collective: this rank makes no MPI call again and does not unwind (which would free
  // those buffers); it removes the command's temporaries and ends here.
  [[noreturn]] void stop(const std::string& why) const {
    remove_temporaries_now();
    std::fprintf(stderr, "dilattn %s: ring rank %d: %s\n", world_.command_, world_.rank_,
                 printable(why).c_str());
    std::fflush(stderr);
    std::_Exit(kExitRuntime);
  }
  static constexpr size_t kPieceBytes = size_t{1} << 30;  // MPI counts are int
  const MpiWorld& world_;
};

namespace {

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

class CommHandle {
 public:
  explicit CommHandle(int32_t timeout_ms) {
    MPI_Comm world = MPI_COMM_WORLD;
    check_status(dilattn_comm_create_mpi(&world, timeout_ms, &comm_), "--ring mpi");
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
  Scatter(const MpiWorld& world, const RingOptions& ring, int64_t seqlen)
      : mpi_(world), rank_(world_rank()), P_(world_size()) {
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
        mpi_.recv(own.data() + at, bytes, 0, "for rank 0 to send this rank's rows");
      });
      return;
    }
    const auto* data = static_cast<const unsigned char*>(full.data);
    for (int r = 1; r < P_; ++r)
      for_each_piece(full, rows_[static_cast<size_t>(r)], lse, [&](size_t at, size_t, size_t bytes) {
        mpi_.send(data + at, bytes, r, "for rank " + std::to_string(r) + " to take its rows");
      });
  }
  // Rank 0 writes every rank's rows of `shard` into its full tensor.
  void gather(Shard& shard, const dilattn_tensor& full, bool lse) const {
    if (rank_ != 0) {
      for_each_piece(full, mine(), lse, [&](size_t, size_t at, size_t bytes) {
        mpi_.send(shard.data() + at, bytes, 0, "for rank 0 to take this rank's results");
      });
      return;
    }
    shard.copy_out();
    auto* data = static_cast<unsigned char*>(full.data);
    for (int r = 1; r < P_; ++r)
      for_each_piece(full, rows_[static_cast<size_t>(r)], lse, [&](size_t at, size_t, size_t bytes) {
        mpi_.recv(data + at, bytes, r, "for rank " + std::to_string(r) + "'s results");
      });
  }

  // Every rank's status reaches every rank; rank 0 throws for the first failure, a rank's own
  // error before the DILATTN_ERROR_COMM of the ranks that saw it fail; the other ranks leave
  // quietly (QuietExit).
  void agree(dilattn_status mine, const char* what) const {
    RankOutcome out{};
    out.status = mine;
    std::snprintf(out.message, sizeof out.message, "%s", mine ? dilattn_last_error() : "");
    std::vector<RankOutcome> all(static_cast<size_t>(P_));
    mpi_.allgather(&out, all.data(), sizeof out, "for every rank to finish the ring call");
    int32_t worst = -1;
    for (int32_t r = 0; r < P_; ++r)
      if (all[r].status != DILATTN_SUCCESS &&
          (worst < 0 || (all[worst].status == DILATTN_ERROR_COMM && all[r].status != DILATTN_ERROR_COMM)))
        worst = r;
    const int32_t failed_status = worst >= 0 ? all[worst].status : DILATTN_SUCCESS;
    if (failed_status == DILATTN_SUCCESS) return;
    if (rank_ != 0) throw QuietExit{};
    check_status(static_cast<dilattn_status>(failed_status),
                 std::string(what) + " (ring rank " + std::to_string(worst) + ")", all[worst].message);
  }

 private:
  MpiWait mpi_;
  int rank_, P_;
  std::vector<Rows> rows_;
};

}  // namespace

MpiWorld::MpiWorld(const char* command, const RingOptions& ring)
    : command_(command), timeout_ms_(ring.timeout_ms), active_(ring.mpi) {
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

namespace {

// A command as one string: the subcommand, then each flag's name and value, each ended by a NUL
// (a flag's value has none: it came from argv).
std::string encode_command(const char* command, const std::map<std::string, std::string>& flags) {
  std::string out = std::string(command) + '\0';
  for (const auto& [name, value] : flags) out += name + '\0' + value + '\0';
  return out;
}

std::vector<std::string> split_at_nul(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\0', at);
    out.push_back(text.substr(at, end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

// How this rank's command differs from rank 0's, naming the first flag that does; "" when not.
std::string first_difference(const std::string& mine_text, const std::string& root_text) {
  const std::vector<std::string> mine = split_at_nul(mine_text), root = split_at_nul(root_text);
  if (mine.empty() || root.empty() || mine[0] != root[0])
    return "runs '" + (mine.empty() ? std::string() : mine[0]) + "', rank 0 runs '" +
           (root.empty() ? std::string() : root[0]) + "'";
  std::map<std::string, std::string> a, b;
  for (size_t i = 1; i + 1 < mine.size(); i += 2) a[mine[i]] = mine[i + 1];
  for (size_t i = 1; i + 1 < root.size(); i += 2) b[root[i]] = root[i + 1];
  for (const auto& [name, value] : a) {
    const auto it = b.find(name);
    if (it == b.end()) return "flag --" + name + " is given here, not on rank 0";
    if (it->second != value)
      return "flag --" + name + " is '" + value + "' here, '" + it->second + "' on rank 0";
  }
  for (const auto& [name, value] : b)
    if (!a.count(name)) return "flag --" + name + " is missing here, given on rank 0";
  return "";
}

}  // namespace

void MpiWorld::agree_on_command(const std::map<std::string, std::string>& flags) const {
  if (!active_) return;
  const MpiWait mpi(*this);
  const std::string mine = encode_command(command_, flags);
  uint64_t root_bytes = mine.size();
  mpi.broadcast(&root_bytes, sizeof root_bytes, "for rank 0's command");
  // A command is a few hundred bytes; a length past this is no command (kept from allocating).
  constexpr uint64_t kMaxCommandBytes = uint64_t{1} << 24;
  if (root_bytes > kMaxCommandBytes)
    throw CliError(kExitRuntime, "flag --ring mpi: rank 0 sent a command of " +
                                     std::to_string(root_bytes) + " bytes");
  std::string root_text = root() ? mine : std::string(root_bytes, '\0');
  mpi.broadcast(&root_text[0], root_text.size(), "for rank 0's command");
  RankOutcome verdict{};
  const std::string difference = root() ? std::string() : first_difference(mine, root_text);
  verdict.status = difference.empty() ? kExitOk : kExitBadInput;
  std::snprintf(verdict.message, sizeof verdict.message, "%s", difference.c_str());
  std::vector<RankOutcome> all(static_cast<size_t>(world_size()));
  mpi.allgather(&verdict, all.data(), sizeof verdict, "for every rank to compare its command");
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].status == kExitOk) continue;
    if (!root()) throw QuietExit{};
    throw CliError(kExitBadInput, "ring rank " + std::to_string(r) + ": " + all[r].message +
                                      " (every rank of --ring mpi needs the same command and flags)");
  }
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
  MpiWait(*this).allgather(&mine, all.data(), sizeof mine, "for every rank to finish a step");
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
  MpiWait(*this).broadcast(header, sizeof header, "for rank 0's file shapes");
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
  const MpiWait mpi(*this);
  mpi.broadcast(sizes, sizeof sizes, "for rank 0's mask");
  together([&] {  // every rank's memory before rank 0 sends
    for (int i = 0; i < 3; ++i) arrays[i].resize(sizes[i]);
  });
  for (std::vector<int64_t>& v : arrays)
    mpi.broadcast(v.data(), v.size() * 8, "for rank 0's mask");
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
    scatter = std::make_unique<Scatter>(world, ring, seqlen);
    for (const Operand& t : inputs)
      shards.inputs.push_back(std::make_unique<Shard>(*t.full, scatter->mine(), t.lse, world.root()));
    for (const Operand& t : outputs)
      shards.outputs.push_back(std::make_unique<Shard>(*t.full, scatter->mine(), t.lse, false));
  });
  std::unique_ptr<CommHandle> comm;
  world.together([&] { comm = std::make_unique<CommHandle>(ring.timeout_ms); });
  size_t i = 0;
  for (const Operand& t : inputs) scatter->send_rows(*t.full, t.lse, *shards.inputs[i++]);
  scatter->agree(call(comm->get(), shards), what);
  i = 0;
  for (const Operand& t : outputs) scatter->gather(*shards.outputs[i++], *t.full, t.lse);
}

}  // namespace

void ring_forward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                      const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                      const dilattn_tensor& o, const dilattn_tensor& lse,
                      const dilattn_call_options* call) {
  run_process(world, ring, q.shape[1], "forward", {{&q}, {&k}, {&v}}, {{&o}, {&lse, true}},
              [&](dilattn_comm comm, const ProcessShards& s) {
                return dilattn_ring_forward_ex(plan, comm, ring.split, s.in(0), s.in(1),
                                               s.in(2), s.out(0), s.out(1), call);
              });
}

void ring_backward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                       const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                       const dilattn_tensor& o, const dilattn_tensor& lse,
                       const dilattn_tensor& d_o, const dilattn_tensor& dq,
                       const dilattn_tensor& dk, const dilattn_tensor& dv,
                       const dilattn_call_options* call) {
  run_process(world, ring, q.shape[1], "backward",
              {{&q}, {&k}, {&v}, {&o}, {&lse, true}, {&d_o}}, {{&dq}, {&dk}, {&dv}},
              [&](dilattn_comm comm, const ProcessShards& s) {
                return dilattn_ring_backward_ex(plan, comm, ring.split, s.in(0), s.in(1),
                                                s.in(2), s.in(3), s.in(4), s.in(5), s.out(0),
                                                s.out(1), s.out(2), call);
              });
}

}  // namespace dilattn_cli
