// simt_setmaxnreg.h - setmaxnreg.{inc,dec}.sync.aligned.u32 (sm_90a) for the emulator: a
// warpgroup gives registers back to the block's pool or takes more from it.
//
// Part of the SIMT emulator (emu/README.md). Warp-specialised kernels shrink the producer
// warpgroup (it only issues copies) and grow the consumers (they hold the accumulators). The PTX
// ISA, section "Miscellaneous Instructions: setmaxnreg": all threads of a warpgroup execute it
// together with the same count, a multiple of 8 in 24 .. 256; .dec releases registers to the
// pool, .inc requests them and waits until the pool has enough. The emulator checks:
//   - the whole warpgroup (128 threads from a multiple of 128) executes the same instruction;
//   - the count's range, and that .inc does not lower and .dec does not raise the count;
//   - the block's registers never exceed 65536: an .inc waits (other threads run) until .decs
//     have made room, and fails as a deadlock if none will.
// The count a warpgroup starts with is not known to the emulator (nvcc chooses it); it takes
// the block's even share, 65536 / threads rounded down to a multiple of 8 (at most 256): a
// kernel launched with __launch_bounds__(threads, 1) gets about that many.
// Checked by tests/emu/test_emu_warp_specialization.cpp.
#ifndef DILATTN_SIMT_SETMAXNREG_H
#define DILATTN_SIMT_SETMAXNREG_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

constexpr unsigned kRegistersPerBlock = 65536;

struct RegisterBudget : BlockExtension {
  std::vector<unsigned> per_thread;  // each warpgroup's count
  std::vector<unsigned> wanted;      // an .inc not yet granted (0: none)
  void start(const BlockRun& b) {
    if (!per_thread.empty()) return;
    const unsigned threads = static_cast<unsigned>(b.fibers.size());
    const unsigned groups = (threads + 127) / 128;
    unsigned share = kRegistersPerBlock / (groups * 128) / 8 * 8;
    if (share > 256) share = 256;
    per_thread.assign(groups, share);
    wanted.assign(groups, 0);
  }
  unsigned in_use() const {
    unsigned sum = 0;
    for (unsigned r : per_thread) sum += r * 128;
    return sum;
  }
};

struct SetmaxnregPost {
  bool increase;
  unsigned count;
};

inline void resolve_setmaxnreg(BlockRun& b, unsigned first, unsigned count) {
  const SetmaxnregPost& lead = *static_cast<const SetmaxnregPost*>(b.fibers[first].group.data);
  char buf[200];
  for (unsigned t = first; t < first + count; ++t) {
    const SetmaxnregPost& p = *static_cast<const SetmaxnregPost*>(b.fibers[t].group.data);
    if (p.increase != lead.increase || p.count != lead.count) {
      std::snprintf(buf, sizeof buf,
                    ": setmaxnreg: thread %u asks .%s %u, thread %u .%s %u (a warpgroup executes "
                    "one count)",
                    first, lead.increase ? "inc" : "dec", lead.count, t,
                    p.increase ? "inc" : "dec", p.count);
      b.error = block_name(b) + buf;
      return;
    }
  }
  RegisterBudget& budget = block_extension<RegisterBudget>(b);
  budget.start(b);
  const unsigned group = first / 128;
  const unsigned now = budget.per_thread[group];
  if (lead.count < 24 || lead.count > 256 || lead.count % 8 != 0) {
    std::snprintf(buf, sizeof buf, ": setmaxnreg: count %u is not a multiple of 8 in 24 .. 256",
                  lead.count);
    b.error = block_name(b) + buf;
    return;
  }
  if (lead.increase ? lead.count < now : lead.count > now) {
    std::snprintf(buf, sizeof buf,
                  ": setmaxnreg.%s %u: warpgroup %u holds %u registers a thread, so this %s them",
                  lead.increase ? "inc" : "dec", lead.count, group, now,
                  lead.increase ? "lowers" : "raises");
    b.error = block_name(b) + buf;
    return;
  }
  if (lead.increase)
    budget.wanted[group] = lead.count;  // granted by setmaxnreg_granted when there is room
  else
    budget.per_thread[group] = lead.count;
}

// An .inc is granted (to its whole warpgroup, by the first of its threads to see room).
inline bool setmaxnreg_granted(BlockRun& b, const Fiber& f) {
  RegisterBudget& budget = block_extension<RegisterBudget>(b);
  const unsigned group = f.linear / 128;
  const unsigned want = budget.wanted[group];
  if (want == 0) return true;
  const unsigned grow = (want - budget.per_thread[group]) * 128;
  if (budget.in_use() + grow > kRegistersPerBlock) return false;
  budget.per_thread[group] = want;
  budget.wanted[group] = 0;
  return true;
}
inline std::string setmaxnreg_text(BlockRun& b, const Fiber& f) {
  RegisterBudget& budget = block_extension<RegisterBudget>(b);
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "setmaxnreg.inc %u for warpgroup %u: the block's warpgroups hold %u of its %u "
                "registers",
                budget.wanted[f.linear / 128], f.linear / 128, budget.in_use(),
                kRegistersPerBlock);
  return buf;
}

inline void setmaxnreg(bool increase, unsigned count) {
  Fiber& f = current_fiber();
  if (f.block->fibers.size() % 128 != 0)
    fail_thread("setmaxnreg: the block is not made of whole warpgroups (128 threads)");
  SetmaxnregPost post{increase, count};
  GroupPost g;
  g.resolve = resolve_setmaxnreg;
  g.name = increase ? "setmaxnreg.inc" : "setmaxnreg.dec";
  g.first = f.linear / 128 * 128;
  g.count = 128;
  g.data = &post;
  group_collective(g);
  if (!increase) return;
  WaitPost w;
  w.ready = setmaxnreg_granted;
  w.describe = setmaxnreg_text;
  wait_until(w);
}

}  // namespace detail

// setmaxnreg.inc.sync.aligned.u32 count / setmaxnreg.dec.sync.aligned.u32 count
inline void setmaxnreg_inc(unsigned count) { detail::setmaxnreg(true, count); }
inline void setmaxnreg_dec(unsigned count) { detail::setmaxnreg(false, count); }

}  // namespace simt

#endif  // DILATTN_SIMT_SETMAXNREG_H
