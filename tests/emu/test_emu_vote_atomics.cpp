// test_emu_vote_atomics.cpp - __ballot_sync/__any_sync/__all_sync and the atomics in the emulator.
//
// Property: votes over a 96-thread block (a partial-mask vote among the even lanes included)
// and __syncthreads_count/_and/_or equal the host's bit patterns and counts; atomicAdd (int, unsigned, float with exact small integers),
// atomicMax (int, unsigned, float), atomicCAS and atomicExch over a 4-block grid equal the host's
// totals; all bitwise identical under ascending, descending and shuffled thread orders.
#include <cstdint>
#include <vector>

#include "emu_test_util.h"

namespace {

struct Totals {
  int isum;
  unsigned usum;
  float fsum;
  int imax;
  unsigned umax;
  float fmax;
  int cas_winners;
  int exch_count;
  unsigned exch_last_seen;
};

__global__ void vote_kernel(const int* in, unsigned* ballots, int* any, int* all, unsigned* even,
                            int* block_votes) {
  const unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int v = in[blockIdx.x * blockDim.x + t];
  const unsigned b = __ballot_sync(0xffffffffu, v > 0);
  const int a = __any_sync(0xffffffffu, v > 900);
  const int l = __all_sync(0xffffffffu, v > -1000);
  if (lane == 0) {
    ballots[warp] = b;
    any[warp] = a;
    all[warp] = l;
  }
  if (lane % 2 == 0) {  // a vote among the even lanes only
    const unsigned e = __ballot_sync(0x55555555u, v % 3 == 0);
    if (lane == 0) even[warp] = e;
  }
  const int count = __syncthreads_count(v > 0);
  const int and_all = __syncthreads_and(v > -1000);
  const int and_some = __syncthreads_and(v > 0);
  const int or_some = __syncthreads_or(v > 900);
  if (t == 95) {
    block_votes[0] = count;
    block_votes[1] = and_all;
    block_votes[2] = and_some;
    block_votes[3] = or_some;
  }
}

__global__ void atomic_kernel(const int* in, Totals* tot, int* cas_slot) {
  const int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  atomicAdd(&tot->isum, v);
  atomicAdd(&tot->usum, static_cast<unsigned>(v & 0xff));
  atomicAdd(&tot->fsum, static_cast<float>(v % 16));  // small integers: exact in any order
  atomicMax(&tot->imax, v);
  atomicMax(&tot->umax, static_cast<unsigned>(v & 0xfff));
  atomicMax(&tot->fmax, static_cast<float>(v) * 0.5f);
  if (atomicCAS(cas_slot, 0, 1) == 0) atomicAdd(&tot->cas_winners, 1);
  const unsigned old = atomicExch(&tot->exch_last_seen, 7u);
  if (old == 7u || old == 0u) atomicAdd(&tot->exch_count, 1);
}

}  // namespace

int main() {
  const int n = 4 * 96;
  std::vector<int> in(n);
  uint32_t s = 3;
  for (int& x : in) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<int>(s >> 21) - 1000;
  }

  bool agree = false;
  auto votes = emu_test::from_bytes<unsigned>(emu_test::run_in_orders(
      [&] {
        std::vector<unsigned> out(16, 0xdeadu);  // ballots[3] any[3] all[3] even[3] block[4]
        DILATTN_LAUNCH(vote_kernel, dim3(1), dim3(96), 0, nullptr)
        (in.data(), out.data(), reinterpret_cast<int*>(out.data() + 3),
         reinterpret_cast<int*>(out.data() + 6), out.data() + 9,
         reinterpret_cast<int*>(out.data() + 12));
        CHECK_MSG(emu_test::launched_ok("vote_kernel"), "launch");
        return emu_test::as_bytes(out);
      },
      &agree));
  CHECK_MSG(agree, "votes differ between thread orders");
  for (int w = 0; w < 3; ++w) {
    unsigned b = 0, e = 0;
    int any = 0, all = 1;
    for (int l = 0; l < 32; ++l) {
      const int v = in[w * 32 + l];
      b |= static_cast<unsigned>(v > 0) << l;
      any |= v > 900;
      all &= v > -1000;
      if (l % 2 == 0) e |= static_cast<unsigned>(v % 3 == 0) << l;
    }
    CHECK_MSG(votes[w] == b, "ballot warp %d: %08x vs %08x", w, votes[w], b);
    CHECK_MSG(votes[3 + w] == static_cast<unsigned>(any), "any warp %d", w);
    CHECK_MSG(votes[6 + w] == static_cast<unsigned>(all), "all warp %d", w);
    CHECK_MSG(votes[9 + w] == e, "even ballot warp %d: %08x vs %08x", w, votes[9 + w], e);
  }

  unsigned positives = 0, over900 = 0;
  for (int t = 0; t < 96; ++t) {
    positives += in[t] > 0;
    over900 += in[t] > 900;
  }
  CHECK_MSG(votes[12] == positives, "__syncthreads_count %u vs %u", votes[12], positives);
  CHECK_MSG(votes[13] == 1u && votes[14] == static_cast<unsigned>(positives == 96),
            "__syncthreads_and %u %u", votes[13], votes[14]);
  CHECK_MSG(votes[15] == static_cast<unsigned>(over900 > 0), "__syncthreads_or %u", votes[15]);

  auto tot = emu_test::from_bytes<Totals>(emu_test::run_in_orders(
      [&] {
        std::vector<Totals> t(1);
        t[0] = Totals{0, 0u, 0.0f, -2147483647, 0u, -1e30f, 0, 0, 0u};
        std::vector<int> cas(1, 0);
        DILATTN_LAUNCH(atomic_kernel, dim3(4), dim3(96), 0, nullptr)
        (in.data(), t.data(), cas.data());
        CHECK_MSG(emu_test::launched_ok("atomic_kernel"), "launch");
        return emu_test::as_bytes(t);
      },
      &agree));
  CHECK_MSG(agree, "atomics differ between thread orders");
  int isum = 0, imax = -2147483647;
  unsigned usum = 0, umax = 0;
  float fsum = 0.0f, fmax = -1e30f;
  for (int v : in) {
    isum += v;
    usum += static_cast<unsigned>(v & 0xff);
    fsum += static_cast<float>(v % 16);
    imax = v > imax ? v : imax;
    umax = static_cast<unsigned>(v & 0xfff) > umax ? static_cast<unsigned>(v & 0xfff) : umax;
    fmax = static_cast<float>(v) * 0.5f > fmax ? static_cast<float>(v) * 0.5f : fmax;
  }
  CHECK_MSG(tot[0].isum == isum, "isum %d vs %d", tot[0].isum, isum);
  CHECK_MSG(tot[0].usum == usum, "usum %u vs %u", tot[0].usum, usum);
  CHECK_MSG(tot[0].fsum == fsum, "fsum %g vs %g", tot[0].fsum, fsum);
  CHECK_MSG(tot[0].imax == imax, "imax %d vs %d", tot[0].imax, imax);
  CHECK_MSG(tot[0].umax == umax, "umax %u vs %u", tot[0].umax, umax);
  CHECK_MSG(tot[0].fmax == fmax, "fmax %g vs %g", tot[0].fmax, fmax);
  CHECK_MSG(tot[0].cas_winners == 1, "atomicCAS winners %d", tot[0].cas_winners);
  CHECK_MSG(tot[0].exch_count == n, "atomicExch count %d", tot[0].exch_count);
  CHECK_MSG(tot[0].exch_last_seen == 7u, "atomicExch value %u", tot[0].exch_last_seen);
  return harness::finish("emu_vote_atomics");
}
