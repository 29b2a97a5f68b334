// ring_run.cpp - `--ring-threads P` (see ring_run.h): shards in, ring call per rank thread,
// shards out.
#include "ring_run.h"

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli_error.h"
#include "library_status.h"
#include "shard_copy.h"

namespace dilattn_cli {

namespace {

// Every wait inside one process ends long before this unless a rank is stuck.
constexpr int32_t kRingTimeoutMs = 600000;

// Runs body(rank, comm, rows) on one thread per rank; throws for the first failure, preferring
// a rank's own error over the DILATTN_ERROR_COMM of the ranks that saw it fail.
template <class Body>
void run_ranks(const RingOptions& ring, int64_t seqlen, const char* what, Body body) {
  std::vector<dilattn_comm> comms(static_cast<size_t>(ring.ranks), nullptr);
  check_status(dilattn_comm_create_threads(ring.ranks, kRingTimeoutMs, comms.data()), "--ring-threads");
  std::vector<Rows> rows(comms.size());
  for (int32_t r = 0; r < ring.ranks; ++r)
    check_status(dilattn_ring_shard_rows(seqlen, ring.ranks, r, ring.split, rows[r].first, rows[r].count),
                 "--ring-threads");
  std::vector<dilattn_status> status(comms.size(), DILATTN_SUCCESS);
  std::vector<std::string> message(comms.size());
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < ring.ranks; ++r)
    threads.emplace_back([&, r] {
      status[r] = body(r, comms[r], rows[r]);
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
}

}  // namespace

void ring_forward(dilattn_plan plan, const RingOptions& ring, const dilattn_tensor& q,
                  const dilattn_tensor& k, const dilattn_tensor& v, const dilattn_tensor& o,
                  const dilattn_tensor& lse) {
  run_ranks(ring, q.shape[1], "forward", [&](int32_t, dilattn_comm comm, const Rows& rows) {
    Shard sq(q, rows, false, true), sk(k, rows, false, true), sv(v, rows, false, true);
    Shard so(o, rows, false, false), sl(lse, rows, true, false);
    const dilattn_status s = dilattn_ring_forward(plan, comm, ring.split, sq.view(), sk.view(),
                                                  sv.view(), so.view(), sl.view());
    if (s == DILATTN_SUCCESS) {  // each rank writes only its own rows of the full arrays
      so.copy_out();
      sl.copy_out();
    }
    return s;
  });
}

void ring_backward(dilattn_plan plan, const RingOptions& ring, const dilattn_tensor& q,
                   const dilattn_tensor& k, const dilattn_tensor& v, const dilattn_tensor& o,
                   const dilattn_tensor& lse, const dilattn_tensor& d_o, const dilattn_tensor& dq,
                   const dilattn_tensor& dk, const dilattn_tensor& dv) {
  run_ranks(ring, q.shape[1], "backward", [&](int32_t, dilattn_comm comm, const Rows& rows) {
    Shard sq(q, rows, false, true), sk(k, rows, false, true), sv(v, rows, false, true);
    Shard so(o, rows, false, true), sl(lse, rows, true, true), sdo(d_o, rows, false, true);
    Shard sdq(dq, rows, false, false), sdk(dk, rows, false, false), sdv(dv, rows, false, false);
    const dilattn_status s = dilattn_ring_backward(plan, comm, ring.split, sq.view(), sk.view(),
                                                   sv.view(), so.view(), sl.view(), sdo.view(),
                                                   sdq.view(), sdk.view(), sdv.view());
    if (s == DILATTN_SUCCESS) {
      sdq.copy_out();
      sdk.copy_out();
      sdv.copy_out();
    }
    return s;
  });
}

}  // namespace dilattn_cli
