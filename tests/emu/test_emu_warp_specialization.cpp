// test_emu_warp_specialization.cpp - the emulator's mbarriers (cuda/mbarrier.cuh,
// emu/simt_mbarrier.h), named barriers and setmaxnreg (cuda/warp_specialization.cuh,
// emu/simt_named_barrier.h, emu/simt_setmaxnreg.h): the synchronisation a warp-specialised
// kernel is made of.
//
// Properties:
//   (1) a producer warpgroup fills a two-slot ring of shared tiles, one mbarrier "full" and one
//       "empty" per slot; two consumer warpgroups wait for each tile by phase parity, add it up
//       and release the slot. Eight tiles, so each slot's barriers run four phases: the sums
//       are exact and the same bytes in three thread orders. The producer gives registers back
//       (setmaxnreg.dec 40) and the consumers take them (setmaxnreg.inc 232), after the
//       producer has first waited at a named barrier, so the consumers' requests wait for room;
//   (2) two consumer warpgroups take turns through named barriers (one syncs, the other arrives)
//       and write a log: it alternates 1, 2, 1, 2, ... in every thread order;
//   (3) defects fail the launch with a message naming them: an mbarrier that gets fewer
//       arrivals than its count (a deadlock, where the GPU hangs), a wait for the wrong parity,
//       an mbarrier used before init, more arrivals than its count in a phase held open by
//       transaction bytes (arrivals past a completed phase count toward the next), a named
//       barrier short of its thread count, threads disagreeing on a named barrier's count, a
//       barrier id out of range, a setmaxnreg.inc the block's registers can never hold, a
//       warpgroup missing a thread at setmaxnreg, and a .dec that raises the count.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "mbarrier.cuh"
#include "warp_specialization.cuh"

namespace {

using namespace dilattn::cuda;

constexpr int kTiles = 8, kSlots = 2, kTileFloats = 128;

enum Mode : int {
  kRing,
  kTurns,
  kMissingArrival,
  kWrongParity,
  kNoInit,
  kExtraArrival,
  kNamedShort,
  kNamedCountsDiffer,
  kNamedBadId,
  kRegistersNeverFit,
  kRegistersThreadMissing,
  kRegistersDecRaises,
};

// Shared memory: barriers (2 x kSlots uint64) then the ring of kSlots tiles.
constexpr size_t kSmem = 64 + kSlots * kTileFloats * sizeof(float);

// (1): threads 0..127 produce (each copies one float of a tile), 128..383 consume: consumer
// thread t adds column t % 128 of every tile, times its warpgroup's number (1 or 2). "full"
// counts the 128 producer threads, "empty" the 256 consumers.
__device__ void ring(const float* src, float* out, uint64_t* full, uint64_t* empty, float* tiles) {
  const unsigned tid = threadIdx.x;
  if (tid < 128) {
    named_barrier_sync(1, 128);  // the producer's own barrier: delays its .dec a round
    warpgroup_registers_dec<40>();
    for (int t = 0; t < kTiles; ++t) {
      const int slot = t % kSlots, use = t / kSlots;
      if (use > 0) mbarrier_wait_parity(&empty[slot], (use - 1) & 1);
      tiles[slot * kTileFloats + tid] = src[t * kTileFloats + tid];
      mbarrier_arrive(&full[slot]);
    }
    return;
  }
  warpgroup_registers_inc<232>();
  const unsigned c = tid % 128;
  float sum = 0.0f;
  for (int t = 0; t < kTiles; ++t) {
    const int slot = t % kSlots, use = t / kSlots;
    mbarrier_wait_parity(&full[slot], use & 1);
    sum += tiles[slot * kTileFloats + c] * static_cast<float>(tid / 128);
    mbarrier_arrive(&empty[slot]);
  }
  out[tid - 128] = sum;
}

// (2): warpgroup 1 goes first; each waits for its turn (barrier 2 or 3, 256 threads: its own
// 128 syncing and the other's 128 arriving) and hands the turn over.
__device__ void turns(float* out, int* log) {
  const unsigned tid = threadIdx.x, group = tid / 128;  // 1 or 2
  if (group == 0) return;
  for (int round = 0; round < 4; ++round) {
    if (group == 2 || round > 0) named_barrier_sync(group + 1, 256);
    if (tid % 128 == 0) log[2 * round + group - 1] = static_cast<int>(group);
    named_barrier_arrive(group == 1 ? 3 : 2, 256);
  }
  out[tid] = 1.0f;
}

__global__ void specialized_kernel(const float* src, float* out, int* log, int mode) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* full = reinterpret_cast<uint64_t*>(align_shared(smem, 16));
  uint64_t* empty = full + kSlots;
  float* tiles = reinterpret_cast<float*>(full + 2 * kSlots);
  const unsigned tid = threadIdx.x;
  if (tid == 0 && mode != kNoInit) {
    for (int s = 0; s < kSlots; ++s) {
      mbarrier_init(&full[s], 128);
      mbarrier_init(&empty[s], mode == kMissingArrival ? 257 : 256);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  switch (mode) {
    case kRing:
    case kMissingArrival:
      ring(src, out, full, empty, tiles);
      return;
    case kTurns:
      turns(out, log);
      return;
    case kWrongParity:
      if (tid < 128) mbarrier_arrive(&full[0]);
      mbarrier_wait_parity(&full[0], 1);  // phase 0 completes; phase 1 never does
      return;
    case kNoInit:
      mbarrier_wait_parity(&full[0], 0);
      return;
    case kExtraArrival:
      // Thread 0's arrival also expects 16 bytes, so the phase stays open when the other 127
      // arrivals are in: the 128th of them is one more than the phase counts.
      if (tid == 0) mbarrier_arrive_expect_tx(&full[0], 16);
      __syncthreads();
      if (tid >= 1 && tid <= 128) mbarrier_arrive(&full[0]);
      return;
    case kNamedShort:
      if (tid < 128) named_barrier_sync(4, 256);
      return;
    case kNamedCountsDiffer:
      named_barrier_sync(4, tid < 128 ? 256 : 384);
      return;
    case kNamedBadId:
      named_barrier_sync(0, 384);
      return;
    case kRegistersNeverFit:
      if (tid >= 128) warpgroup_registers_inc<256>();
      return;
    case kRegistersThreadMissing:
      if (tid == 200) return;
      if (tid >= 128) warpgroup_registers_inc<232>();
      return;
    case kRegistersDecRaises:
      if (tid < 128) warpgroup_registers_dec<256>();
      return;
  }
}

}  // namespace

int main() {
  emu_test::DeviceVector<float> src(kTiles * kTileFloats), out(384);
  emu_test::DeviceVector<int> log(8);
  for (int i = 0; i < kTiles * kTileFloats; ++i) src[i] = static_cast<float>(i % 97) * 0.25f;
  auto run = [&](int mode) {
    std::fill(out.begin(), out.end(), -1.0f);
    std::fill(log.begin(), log.end(), 0);
    DILATTN_LAUNCH(specialized_kernel, dim3(1), dim3(384), kSmem, nullptr)(
        src.data(), out.data(), log.data(), mode);
  };

  // (1) the ring: exact sums, the same bytes in every order.
  bool agree = false;
  emu_test::run_in_orders(
      [&] {
        run(kRing);
        CHECK_MSG(emu_test::launched_ok("(1)"), "(1) launch");
        return emu_test::as_bytes(out);
      },
      &agree);
  CHECK_MSG(agree, "(1) thread orders disagree");
  for (int t = 128; t < 384; ++t) {
    double want = 0.0;
    for (int k = 0; k < kTiles; ++k) want += src[k * kTileFloats + t % 128] * (t / 128);
    CHECK_MSG(out[t - 128] == static_cast<float>(want), "(1) consumer %d: %g, want %g", t,
              double(out[t - 128]), want);
  }

  // (2) turns through named barriers.
  emu_test::run_in_orders(
      [&] {
        run(kTurns);
        CHECK_MSG(emu_test::launched_ok("(2)"), "(2) launch");
        return emu_test::as_bytes(log);
      },
      &agree);
  CHECK_MSG(agree, "(2) thread orders disagree");
  for (int i = 0; i < 8; ++i)
    CHECK_MSG(log[i] == 1 + i % 2, "(2) log[%d] = %d, want %d", i, log[i], 1 + i % 2);

  // (3) defects.
  run(kMissingArrival);
  CHECK_MSG(emu_test::launch_failed_with("(3) 256 arrivals at a count of 257", "1 of 257 arrivals"),
            "(3) missing arrival");
  run(kWrongParity);
  CHECK_MSG(emu_test::launch_failed_with("(3) wait for parity 1 first", "the phase of parity 1"),
            "(3) wrong parity");
  run(kNoInit);
  CHECK_MSG(emu_test::launch_failed_with("(3) no init", "no mbarrier was initialised"), "(3) no init");
  run(kExtraArrival);
  CHECK_MSG(emu_test::launch_failed_with("(3) 129 arrivals in an open phase", "more arrivals than the count"),
            "(3) extra arrival");
  run(kNamedShort);
  CHECK_MSG(emu_test::launch_failed_with("(3) 128 of 256 at a named barrier",
                       "named barrier 4, which 128 of the 256"),
            "(3) named barrier short");
  run(kNamedCountsDiffer);
  CHECK_MSG(emu_test::launch_failed_with("(3) counts 256 and 384", "earlier arrivals of the phase"),
            "(3) named barrier counts");
  run(kNamedBadId);
  CHECK_MSG(emu_test::launch_failed_with("(3) barrier id 0", "barrier id 0 outside 1 .. 15"), "(3) barrier id");
  run(kRegistersNeverFit);
  CHECK_MSG(emu_test::launch_failed_with("(3) 168 + 2 x 256 registers", "setmaxnreg.inc 256"),
            "(3) registers never fit");
  run(kRegistersThreadMissing);
  CHECK_MSG(emu_test::launch_failed_with("(3) 127 threads at setmaxnreg", "reached by 127 of the 128 threads"),
            "(3) thread missing");
  run(kRegistersDecRaises);
  CHECK_MSG(emu_test::launch_failed_with("(3) .dec to 256", "so this raises them"), "(3) dec raises");
  return harness::finish("emu_warp_specialization");
}
