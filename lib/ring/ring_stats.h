// ring_stats.h - how many bytes a ring call sent, how long it spent in its exchanges, and how
// long the same exchanges take with nothing to hide them behind: the overlap of communication
// with compute (SPEC 5), for bench/ring and the tests (an internal hook, not part of the C ABI).
//
// Method: every exchange_begin + exchange_end of a call is timed on the calling rank
// (RingCall) and recorded (peers and sizes); that time is the communication the compute did
// not hide (the MPI transport's staging copies, a peer still computing, a transfer not yet
// done). time_bare_shifts then runs the same exchanges, same peers and sizes, with no compute
// between begin and end: the time they take on their own. hidden = 1 - exposed / bare, clamped to [0, 1]. Waiting for a slower
// neighbour counts as exposed, so load imbalance lowers the figure too (it is time the ring
// loses either way).
// Checked by tests/ring/test_ring_stats.cpp (what is recorded; no timing is asserted).
#ifndef DILATTN_RING_STATS_H
#define DILATTN_RING_STATS_H

#include <cstddef>
#include <vector>

#include "dilattn.h"

namespace dilattn {

class RingTransport;

// One exchange of a ring call on this rank.
struct ExchangeRecord {
  size_t send_bytes = 0, recv_bytes = 0;
  int32_t to = 0, from = 0;
};

struct ShiftStats {
  std::vector<ExchangeRecord> exchanges;  // in order
  size_t sent_bytes = 0;                  // the sum of their send_bytes
  double exposed_s = 0.0;                 // inside exchange_begin + exchange_end, summed
  double call_s = 0.0;                    // the whole ring call on this rank
};

// Runs `exchanges` bare (begin, end at once) on every rank; *seconds = their total time on
// this rank. Collective, like a ring call (every rank passes its own record of one call).
dilattn_status time_bare_shifts(RingTransport& transport,
                                const std::vector<ExchangeRecord>& exchanges, double* seconds);

// The fraction of the bare shift time the compute hid.
inline double hidden_fraction(double exposed_s, double bare_s) {
  if (bare_s <= 0.0) return 0.0;
  const double f = 1.0 - exposed_s / bare_s;
  return f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f;
}

}  // namespace dilattn

#endif  // DILATTN_RING_STATS_H
