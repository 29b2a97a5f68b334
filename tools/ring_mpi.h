// ring_mpi.h - `mpirun -n P dilattn forward|backward ... --ring mpi`: ring attention (SPEC 5)
// with one rank per MPI process over the library's MPI transport (dilattn_comm_create_mpi).
// Rank 0 reads every input file, tells the other ranks the shapes, scatters each rank its own
// rows (--ring-split), gathers the ranks' output rows and writes the output files; the other
// ranks read and write no file. Every step where one rank can fail alone (rank 0's files, each
// rank's mask, plan, output arrays, shards and communicator) ends with the ranks agreeing on
// its outcome (MpiWorld::together), so a failure on any rank stops every rank before the next
// step: rank 0 reports the first failing rank's message with its exit code, the other ranks
// exit 0 and print nothing (cli_error.h QuietExit). A failing ring call is reported the same
// way (a rank's own error before the DILATTN_ERROR_COMM of the others). All memory a rank
// needs is allocated before the scatter, which then only moves bytes. Before all that, the
// ranks agree on the command itself (MpiWorld::agree_on_command), and no exchange waits past
// --ring-timeout. The result equals
// --ring-threads P bitwise and the single-device run within SPEC 8
// (tests/ring/mpi/test_cli_ring_mpi.py). A build without MPI refuses --ring mpi (exit 3).
#ifndef DILATTN_TOOLS_RING_MPI_H
#define DILATTN_TOOLS_RING_MPI_H

#include <functional>
#include <map>
#include <string>

#include "mask_input.h"
#include "npy.h"
#include "ring_run.h"

namespace dilattn_cli {

// The MPI world of one command: MPI_Init_thread when ring.mpi (--ring mpi), MPI_Finalize when
// it goes. Not wanted: a world of one rank, and every call below is free.
//
// Every exchange between ranks here is non-blocking and waited for with a deadline
// (ring.timeout_ms, --ring-timeout): a rank that waits longer (another rank stopped, hangs, or
// runs a command that posts different messages) cannot go on, since MPI may still write into
// the buffers of what it posted; it removes the command's temporaries, prints one line and
// ends its process at once with exit 3, and mpirun stops the other ranks.
class MpiWorld {
 public:
  // `command`: "forward" or "backward", for messages.
  MpiWorld(const char* command, const RingOptions& ring);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;
  bool root() const { return rank_ == 0; }
  // The first step of every rank: rank 0 sends its command and flags (`flags`, every flag given
  // with its value as written) to all; each rank compares them with its own, and the first
  // rank that differs stops every rank: rank 0 reports it (exit 2, naming the rank and the
  // flag), the others exit quietly. An MPMD launch (mpirun -n 1 A : -n 1 B) with different
  // flags would otherwise post messages of other sizes, or in another order, than rank 0.
  void agree_on_command(const std::map<std::string, std::string>& flags) const;
  // Runs step on every rank, then every rank learns every rank's outcome. When step failed
  // anywhere (a CliError, or out of memory), every rank stops: rank 0 with the error of the
  // first failing rank (named when it is not rank 0), the others with a QuietExit (rank 0
  // prints the one line). Not wanted: step alone.
  void together(const std::function<void()>& step) const;
  // together() with step on rank 0 alone.
  void on_root(const std::function<void()>& step) const;
  // Rank 0's dtype and shape of *a, on every rank (the data stays on rank 0).
  void share_header(NpyArray* a) const;
  // Rank 0's mask (read from --mask), made on every rank from its BSR arrays.
  void share_mask(MaskHandle* mask, int64_t seqlen_q, int64_t seqlen_k, int64_t block_q,
                  int64_t block_k) const;

 private:
  friend class MpiWait;
  const char* command_;
  int32_t timeout_ms_;
  bool active_ = false;
  int rank_ = 0;
};

// As ring_forward / ring_backward (ring_run.h) with one rank per process: every full tensor
// has its data on rank 0 only (elsewhere its data may be NULL; only its shape is read). `call`
// as there; this process's rank writes call->d_sinks itself (the same on every rank).
void ring_forward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                      const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                      const dilattn_tensor& o, const dilattn_tensor& lse,
                      const dilattn_call_options* call);
void ring_backward_mpi(const MpiWorld& world, dilattn_plan plan, const RingOptions& ring,
                       const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                       const dilattn_tensor& o, const dilattn_tensor& lse,
                       const dilattn_tensor& d_o, const dilattn_tensor& dq,
                       const dilattn_tensor& dk, const dilattn_tensor& dv,
                       const dilattn_call_options* call);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_RING_MPI_H
