// ring_stats.h - how long a ring call spent in its shifts, and how long the same shifts take
// with nothing to hide them behind: the overlap of communication with compute (SPEC 5), for
// bench/ring (an internal hook, not part of the C ABI).
//
// Method: every shift_begin + shift_end of a call is timed on the calling rank (RingCall); that
// is the communication the compute did not hide (the MPI transport's staging copies, a
// neighbour still computing, a transfer not yet done). time_bare_shifts then runs the same
// sequence of shifts, same sizes, with no compute between begin and end: the time the shifts
// take on their own. hidden = 1 - exposed / bare, clamped to [0, 1]. Waiting for a slower
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

struct ShiftStats {
  std::vector<size_t> sizes;  // bytes of each shift, in order (the same on every rank)
  double exposed_s = 0.0;     // inside shift_begin + shift_end, summed
  double call_s = 0.0;        // the whole ring call on this rank
};

// Runs `sizes` as bare shifts (begin, end at once) on every rank; *seconds = their total time
// on this rank. Collective, like a ring call.
dilattn_status time_bare_shifts(RingTransport& transport, const std::vector<size_t>& sizes,
                                double* seconds);

// The fraction of the bare shift time the compute hid.
inline double hidden_fraction(double exposed_s, double bare_s) {
  if (bare_s <= 0.0) return 0.0;
  const double f = 1.0 - exposed_s / bare_s;
  return f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f;
}

}  // namespace dilattn

#endif  // DILATTN_RING_STATS_H
