// ring_run.h - `--ring-threads P`: run the plan's forward or backward as ring attention
// (dilattn_ring.h, SPEC 5) on P threads of this process, each rank with copies of its own rows
// (on the plan's device for cuda and emu: shard_copy.h), and gather the ranks' outputs into the
// full arrays. The result equals the single-device run within SPEC 8 (tests/ring/test_cli_ring.py).
#ifndef DILATTN_TOOLS_RING_RUN_H
#define DILATTN_TOOLS_RING_RUN_H

#include <cstdint>

#include "dilattn_ring.h"
#include "shard_copy.h"

namespace dilattn_cli {

struct RingOptions {
  int32_t ranks = 0;  // --ring-threads P; 0: no ring on threads
  bool mpi = false;   // --ring mpi: one rank per MPI process (ring_mpi.h)
  bool any() const { return ranks > 0 || mpi; }
  dilattn_ring_split split = DILATTN_RING_CONTIGUOUS;
  // --ring-timeout S: how long a rank waits for another (the communicator's timeout, and
  // under --ring mpi every step where the ranks meet, ring_mpi.h).
  int32_t timeout_ms = 600000;
};

// The largest --ring-timeout whose milliseconds fit the communicator's int32_t.
constexpr int64_t kMaxRingTimeoutSeconds = 2147483;

// Every tensor is a contiguous host array of the full sequence; LSE is [B, H, N, 1]. `place`
// is where the plan's backend reads the shards (shard_place).
// A failing rank becomes a CliError naming it (the first rank with its own error, else the first).
// `call`: the call's options (dropout seed and offset, sinks; SPEC 10.3, 11.2) for
// dilattn_ring_forward_ex / _backward_ex, or null for the plain calls. In the backward each rank
// writes its own copy of d_sinks; rank 0's (every rank's is the same) goes to call->d_sinks.
void ring_forward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                  const dilattn_tensor& q, const dilattn_tensor& k, const dilattn_tensor& v,
                  const dilattn_tensor& o, const dilattn_tensor& lse,
                  const dilattn_call_options* call);
void ring_backward(dilattn_plan plan, const RingOptions& ring, ShardPlace place,
                   const dilattn_tensor& q,
                   const dilattn_tensor& k, const dilattn_tensor& v, const dilattn_tensor& o,
                   const dilattn_tensor& lse, const dilattn_tensor& d_o, const dilattn_tensor& dq,
                   const dilattn_tensor& dk, const dilattn_tensor& dv,
                   const dilattn_call_options* call, int64_t heads);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_RING_RUN_H
