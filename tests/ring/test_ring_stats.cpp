// test_ring_stats.cpp - the overlap hook of bench/ring (lib/ring/ring_stats.h), white-box:
//   ring_stats_record_every_shift: after a dense ring call (every rank needs every row) each
//     rank's last_shifts lists its exchanges in order, with peers and byte counts (forward:
//     step s sends its K/V to rank + s and receives from rank - s; backward: those, and after
//     step s >= 1 the dK/dV partial back to rank - s while rank + s's comes in, interleaved as
//     ring_backward.cpp sends them), sent_bytes is their sum, and the exposed time lies
//     within the call's time;
//   ring_stats_bare_replay: time_bare_shifts replays that list on every rank and succeeds;
//   ring_stats_hidden_fraction: 1 - exposed / bare, clamped to [0, 1], 0 without shifts.
// No time is asserted beyond ordering (exposed <= whole call).
#include "ring_stats.h"
#include "ring_test_util.h"
#include "ring_transport.h"

using namespace harness;

namespace {

AttentionCase small_case() {
  AttentionCase c;
  c.name = "stats";
  c.Nq = c.Nk = 12;
  c.H = 2;
  c.Hkv = 1;
  c.D = 4;
  return c;
}

void record_every_shift(bool backward) {
  CaseScope scope(backward ? "ring_stats_record_every_shift backward" : "ring_stats_record_every_shift forward");
  const AttentionCase c = small_case();
  const int32_t P = 3;
  Plan plan;
  if (!CHECK_OK(plan.create(c, DILATTN_BACKEND_REF, 1))) return;
  // Every shard has 4 rows: a chunk tensor is [1, 4, 1, 4] f32 = 64 bytes.
  const size_t chunk = 4 * 4 * 4;
  std::vector<dilattn::ShiftStats> stats(P);
  std::vector<double> bare(P, -1.0);
  const auto status = ringtest::run_ranks({P, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_REF},
                                          [&](int32_t r, dilattn_comm comm) {
    Tensor q(DILATTN_F32, 1, 4, 2, 4), k(DILATTN_F32, 1, 4, 1, 4), v(DILATTN_F32, 1, 4, 1, 4),
        o(DILATTN_F32, 1, 4, 2, 4), lse(DILATTN_F32, 1, 2, 4, 1), d_o(DILATTN_F32, 1, 4, 2, 4),
        dq(DILATTN_F32, 1, 4, 2, 4), dk(DILATTN_F32, 1, 4, 1, 4), dv(DILATTN_F32, 1, 4, 1, 4);
    dilattn_status s = dilattn_ring_forward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(),
                                            &k.view(), &v.view(), &o.view(), &lse.view());
    if (s == DILATTN_SUCCESS && backward)
      s = dilattn_ring_backward(plan.get(), comm, DILATTN_RING_CONTIGUOUS, &q.view(), &k.view(),
                                &v.view(), &o.view(), &lse.view(), &d_o.view(), &dq.view(),
                                &dk.view(), &dv.view());
    if (s != DILATTN_SUCCESS) return s;
    stats[r] = comm->last_shifts;
    return dilattn::time_bare_shifts(*comm->transport, comm->last_shifts.exchanges, &bare[r]);
  });
  for (int32_t r = 0; r < P; ++r) {
    // Peers at distance d: (to, from) = (r + d, r - d) mod P.
    auto peers = [&](int32_t d) {
      return std::make_pair((r + d + P) % P, (r - d + P) % P);
    };
    std::vector<dilattn::ExchangeRecord> want;
    for (int32_t step = 0; step < P; ++step) {
      if (step + 1 < P)  // K and V rows for the next step
        want.push_back({2 * chunk, 2 * chunk, peers(step + 1).first, peers(step + 1).second});
      if (backward && step > 0)  // the dK and dV partial (f32) back to its owner
        want.push_back({2 * chunk, 2 * chunk, peers(-step).first, peers(-step).second});
    }
    CHECK_MSG(status[r] == DILATTN_SUCCESS, "rank %d: %s", static_cast<int>(r),
              dilattn_status_string(status[r]));
    CHECK_MSG(stats[r].exchanges.size() == want.size(), "rank %d: %zu exchanges recorded, want %zu",
              static_cast<int>(r), stats[r].exchanges.size(), want.size());
    size_t sent = 0;
    for (size_t i = 0; i < want.size() && i < stats[r].exchanges.size(); ++i) {
      const dilattn::ExchangeRecord& got = stats[r].exchanges[i];
      sent += want[i].send_bytes;
      CHECK_MSG(got.send_bytes == want[i].send_bytes && got.recv_bytes == want[i].recv_bytes &&
                    got.to == want[i].to && got.from == want[i].from,
                "rank %d exchange %zu: sent %zu B to %d, received %zu B from %d; want %zu B to "
                "%d, %zu B from %d", static_cast<int>(r), i, got.send_bytes, got.to,
                got.recv_bytes, got.from, want[i].send_bytes, want[i].to, want[i].recv_bytes,
                want[i].from);
    }
    CHECK_MSG(stats[r].sent_bytes == sent, "rank %d: sent_bytes %zu, want %zu",
              static_cast<int>(r), stats[r].sent_bytes, sent);
    CHECK_MSG(stats[r].exposed_s >= 0 && stats[r].exposed_s <= stats[r].call_s,
              "rank %d: exposed %g s outside the call's %g s", static_cast<int>(r),
              stats[r].exposed_s, stats[r].call_s);
    CHECK_MSG(bare[r] >= 0, "rank %d: bare replay gave %g s", static_cast<int>(r), bare[r]);
  }
}

void hidden_fraction() {
  CaseScope scope("ring_stats_hidden_fraction");
  CHECK_EQ(dilattn::hidden_fraction(0.25, 1.0), 0.75);
  CHECK_EQ(dilattn::hidden_fraction(2.0, 1.0), 0.0);
  CHECK_EQ(dilattn::hidden_fraction(0.0, 1.0), 1.0);
  CHECK_EQ(dilattn::hidden_fraction(0.0, 0.0), 0.0);
}

}  // namespace

int main() {
  record_every_shift(false);
  record_every_shift(true);
  hidden_fraction();
  return finish("ring_stats_record_every_shift");
}
