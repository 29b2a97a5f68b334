// simt_mbarrier.h - mbarrier objects in shared memory (PTX mbarrier.init, arrive,
// arrive.expect_tx, expect_tx, try_wait.parity) for the emulator, and the transaction bytes
// a tensor-memory copy completes on one (mbarrier_add_tx).
//
// Part of the SIMT emulator (emu/README.md). The PTX ISA, section "Parallel Synchronization and
// Communication Instructions: mbarrier", defines an mbarrier by its current phase, a pending
// arrival count and a transaction count (tx-count):
//   init(count)        phase 0, pending = expected = count (1 .. 2^20 - 1), tx-count 0;
//   arrive             pending - 1, returns a state token (here the phase number);
//   expect_tx(bytes)   tx-count + bytes;  arrive.expect_tx(bytes): expect_tx, then arrive;
//   complete_tx(bytes) tx-count - bytes (a tensor-memory copy's bytes landing in shared memory);
//   the phase completes when pending and tx-count are both 0: the phase number advances and
//   pending is reset to the expected count;
//   try_wait.parity(P) true once the phase of parity P has completed, that is while the current
//   phase's parity differs from P.
// The emulator keeps the state beside the block (the 8 bytes in shared memory are zeroed at
// init and otherwise unused) and checks what the GPU leaves undefined: an mbarrier used before
// init or outside shared memory, an 8-byte misalignment, a tx-count outside +-(2^20 - 1), and a
// wait that nothing can complete (more bytes expected than copied, an arrival missing), which
// is reported as a deadlock naming the barrier, where the GPU would hang.
// A wait yields to the other threads until its phase completes, so the spin loop of the GPU
// code (cuda/mbarrier.cuh) is one call here.
// Checked by tests/emu/test_emu_warp_specialization.cpp.
#ifndef DILATTN_SIMT_MBARRIER_H
#define DILATTN_SIMT_MBARRIER_H

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

struct Mbarrier {
  uint32_t address = 0;    // window address
  uint32_t expected = 0;   // arrivals a phase needs
  uint32_t pending = 0;    // arrivals still missing in the current phase
  int64_t tx_count = 0;    // transaction bytes still expected in the current phase
  uint64_t phase = 0;      // phases completed
};

struct MbarrierState : BlockExtension {
  std::vector<Mbarrier> barriers;
  Mbarrier* find(uint32_t address) {
    for (Mbarrier& m : barriers)
      if (m.address == address) return &m;
    return nullptr;
  }
};

constexpr int64_t kMaxTxCount = (int64_t(1) << 20) - 1;

inline std::string describe_mbarrier(const Mbarrier& m) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "the mbarrier at shared 0x%x, phase %llu: %u of %u arrivals and %lld "
                "transaction bytes pending",
                m.address, static_cast<unsigned long long>(m.phase), m.pending, m.expected,
                static_cast<long long>(m.tx_count));
  return buf;
}

// Completes the phase when nothing is pending.
inline void mbarrier_try_complete(Mbarrier& m) {
  if (m.pending == 0 && m.tx_count == 0) {
    ++m.phase;
    m.pending = m.expected;
  }
}

inline void mbarrier_set_error(BlockRun& b, const std::string& what) {
  if (b.error.empty()) b.error = block_name(b) + ": " + what;
}

// Adds `delta` transaction bytes (negative: bytes that landed) to the barrier at `address`.
// Returns false (b.error set) on an unknown barrier or a tx-count out of range. Called by
// threads (expect_tx) and by the scheduler's round-end work (a copy's complete_tx).
inline bool mbarrier_add_tx(BlockRun& b, uint32_t address, int64_t delta, const char* what) {
  Mbarrier* m = block_extension<MbarrierState>(b).find(address);
  char buf[200];
  if (m == nullptr) {
    std::snprintf(buf, sizeof buf, "%s: no mbarrier was initialised at shared 0x%x", what,
                  address);
    mbarrier_set_error(b, buf);
    return false;
  }
  m->tx_count += delta;
  if (m->tx_count > kMaxTxCount || m->tx_count < -kMaxTxCount) {
    std::snprintf(buf, sizeof buf, "%s: transaction count %lld out of the range +-(2^20 - 1)",
                  what, static_cast<long long>(m->tx_count));
    mbarrier_set_error(b, buf + std::string(" at ") + describe_mbarrier(*m));
    return false;
  }
  mbarrier_try_complete(*m);
  return true;
}

// The calling thread's barrier at `bar`: fails the launch unless it is an initialised mbarrier.
inline Mbarrier& thread_mbarrier(const void* bar, const char* what) {
  const uint32_t address = shared_address_of(bar, 8, what);
  char buf[160];
  if (address % 8 != 0) {
    std::snprintf(buf, sizeof buf, "%s: mbarrier address 0x%x not 8-byte aligned", what, address);
    fail_thread(buf);
  }
  Mbarrier* m = block_extension<MbarrierState>(*current_fiber().block).find(address);
  if (m == nullptr) {
    std::snprintf(buf, sizeof buf, "%s: no mbarrier was initialised at shared 0x%x", what,
                  address);
    fail_thread(buf);
  }
  return *m;
}

inline bool mbarrier_phase_done(BlockRun& b, const Fiber& f) {
  const Mbarrier* m = block_extension<MbarrierState>(b).find(static_cast<uint32_t>(
      reinterpret_cast<uintptr_t>(f.wait.ptr)));
  return m != nullptr && (m->phase & 1u) != (f.wait.value & 1u);
}
inline std::string mbarrier_wait_text(BlockRun& b, const Fiber& f) {
  const uint32_t address = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f.wait.ptr));
  const Mbarrier* m = block_extension<MbarrierState>(b).find(address);
  const std::string parity = "the phase of parity " + std::to_string(f.wait.value & 1u) + " of ";
  return m ? parity + describe_mbarrier(*m) : parity + "a barrier no longer initialised";
}

}  // namespace detail

// mbarrier.init.shared::cta.b64 [bar], count
inline void mbarrier_init(void* bar, unsigned count) {
  detail::BlockRun& b = *detail::current_fiber().block;
  const uint32_t address = detail::shared_address_of(bar, 8, "mbarrier.init");
  if (address % 8 != 0) detail::fail_thread("mbarrier.init: address not 8-byte aligned");
  if (count == 0 || count > detail::kMaxTxCount) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "mbarrier.init: count %u outside 1 .. 2^20 - 1", count);
    detail::fail_thread(buf);
  }
  detail::MbarrierState& s = detail::block_extension<detail::MbarrierState>(b);
  detail::Mbarrier* m = s.find(address);
  if (m == nullptr) {
    s.barriers.emplace_back();
    m = &s.barriers.back();
  }
  *m = detail::Mbarrier{};
  m->address = address;
  m->expected = m->pending = count;
  std::memset(bar, 0, 8);
}

// mbarrier.expect_tx.shared::cta.b64 [bar], bytes
inline void mbarrier_expect_tx(void* bar, unsigned bytes) {
  detail::Mbarrier& m = detail::thread_mbarrier(bar, "mbarrier.expect_tx");
  detail::BlockRun& b = *detail::current_fiber().block;
  if (!detail::mbarrier_add_tx(b, m.address, bytes, "mbarrier.expect_tx"))
    detail::fail_thread(b.error);
}

// mbarrier.arrive.shared::cta.b64 token, [bar]: returns the phase the arrival counted in.
inline uint64_t mbarrier_arrive(void* bar) {
  detail::Mbarrier& m = detail::thread_mbarrier(bar, "mbarrier.arrive");
  const uint64_t token = m.phase;
  if (m.pending == 0) {
    detail::BlockRun& b = *detail::current_fiber().block;
    detail::mbarrier_set_error(
        b, "mbarrier.arrive: more arrivals than the count in one phase at " +
               detail::describe_mbarrier(m));
    detail::fail_thread(b.error);
  }
  --m.pending;
  detail::mbarrier_try_complete(m);
  return token;
}

// mbarrier.arrive.expect_tx.shared::cta.b64 token, [bar], bytes
inline uint64_t mbarrier_arrive_expect_tx(void* bar, unsigned bytes) {
  mbarrier_expect_tx(bar, bytes);
  return mbarrier_arrive(bar);
}

// The loop around mbarrier.try_wait.parity.shared::cta.b64 until it succeeds: returns once the
// phase of parity `parity` has completed; other threads run meanwhile.
inline void mbarrier_wait_parity(void* bar, unsigned parity) {
  detail::Mbarrier& m = detail::thread_mbarrier(bar, "mbarrier.try_wait.parity");
  detail::WaitPost post;
  post.ready = detail::mbarrier_phase_done;
  post.describe = detail::mbarrier_wait_text;
  post.ptr = reinterpret_cast<const void*>(static_cast<uintptr_t>(m.address));
  post.value = parity & 1u;
  post.mbarrier = m.address;
  detail::wait_until(post);
}

}  // namespace simt

#endif  // DILATTN_SIMT_MBARRIER_H
