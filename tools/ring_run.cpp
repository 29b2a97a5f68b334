// ring_run.cpp - `--ring-threads P` (see ring_run.h): shards in, ring call per rank thread,
// shards out.
#include "ring_run.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli_error.h"
#include "library_status.h"

namespace dilattn_cli {

namespace {

// Every wait inside one process ends long before this unless a rank is stuck.
constexpr int32_t kRingTimeoutMs = 600000;

// One rank's shards: its rows of every input, and its rows of every output to fill.
struct RankShards {
  std::vector<std::unique_ptr<Shard>> inputs, outputs;
  const dilattn_tensor* in(size_t i) const { return inputs[i]->view(); }
  const dilattn_tensor* out(size_t i) const { return outputs[i]->view(); }
};

// Makes every rank's shards here, then runs call(comm, shards) on one thread per rank, then
// copies every rank's output rows into the full outputs. The shards come first so that a rank
// failing to make them (out of memory, a CUDA error) stops the command before any rank enters
// the ring, where the others would wait for it until the timeout. A failed call throws for the
// first failure, preferring a rank's own error over the DILATTN_ERROR_COMM of the ranks that saw
// it fail; no output is touched then.
template <class Call>
void run_ranks(const RingOptions& ring, ShardPlace place, int64_t seqlen, const char* what,
               std::initializer_list<Operand> inputs, std::initializer_list<Operand> outputs,
               Call call) {
  std::vector<RankShards> shards(static_cast<size_t>(ring.ranks));
  for (int32_t r = 0; r < ring.ranks; ++r) {
    Rows rows;
    check_status(dilattn_ring_shard_rows(seqlen, ring.ranks, r, ring.split, rows.first, rows.count),
                 "--ring-threads");
    for (const Operand& t : inputs)
      shards[r].inputs.push_back(std::make_unique<Shard>(*t.full, rows, t.lse, true, place));
    for (const Operand& t : outputs)
      shards[r].outputs.push_back(std::make_unique<Shard>(*t.full, rows, t.lse, false, place));
  }
  std::vector<dilattn_comm> comms(static_cast<size_t>(ring.ranks), nullptr);
  check_status(dilattn_comm_create_threads(ring.ranks, kRingTimeoutMs, comms.data()), "--ring-threads");
  std::vector<dilattn_status> status(comms.size(), DILATTN_SUCCESS);
  std::vector<std::string> message(comms.size());
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ring.ranks; ++r)
    threads.emplace_back([&, r] {
      status[r] = call(comms[r], shards[r]);
      message[r] = dilattn_last_error();
    });
  for (std::thread& t : threads) t.join();
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  int32_t worst = -1;
  for (int32_t r = 0; r < ring.ranks; ++r)
    if (status[r] != DILATTN_SUCCESS && (worst < 0 || (status[worst] == DILATTN_ERROR_COMM &&
                                                       status[r] != DILATTN_ERROR_COMM)))
      worst = r;
  if (worst >= 0)
    check_status(status[worst], std::string(what) + " (ring rank " + std::to_string(worst) + ")",
                 message[worst]);
  for (RankShards& s : shards)  // each rank's own rows of the full outputs
    for (std::unique_ptr<Shard>& out : s.outputs) out->copy_out();
}

}  // namespace

void ring_forward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                  const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                  const dilattn_tensor& o, const dilattn_tensor& lse) {
  run_ranks(ring, place, q.shape[1], "forward", {{&q}, {&k}, {&v}}, {{&o}, {&lse, true}},
            [&](dilattn_comm comm, const RankShards& s) {
              return dilattn_ring_forward(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                          s.out(0), s.out(1));
            });
}

void ring_backward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                   const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                   const dilattn_tensor& o, const dilattn_tensor& lse, const dilattn_tensor& d_o,
                   const dilattn_tensor& dq, const dilattn_tensor& dk, const dilattn_tensor& dv) {
  run_ranks(ring, place, q.shape[1], "backward", {{&q}, {&k}, {&v}, {&o}, {&lse, true}, {&d_o}},
            {{&dq}, {&dk}, {&dv}}, [&](dilattn_comm comm, const RankShards& s) {
              return dilattn_ring_backward(plan, comm, ring.split, s.in(0), s.in(1), s.in(2),
                                           s.in(3), s.in(4), s.in(5), s.out(0), s.out(1),
                                           s.out(2));
            });
}

}  // namespace dilattn_cli
