// test_cpu_dropout_draws.cpp - the cpu backend's vector draws of SPEC 11.1 (cpu/cpu_dropout.h),
// for every instruction set this CPU runs (cpu/cpu_isa.h), against the scalar decision
// lib/dropout_rng.h's dropout_keep, bit for bit:
//   - tiles of keys 1, 2 and 4 apart (lanes = the calls of consecutive runs of 16 keys) and
//     keys r apart (r = 3, 7: lanes = keys; r = 2^26 + 1: a key at a time), starting at every
//     position mod 16, with 1 .. 64 keys per row and rows 1 or r apart;
//   - counters near the top of their 32-bit words (i, the call 4 floor(j / 16) + j mod 4 and
//     b H + h close to 2^32,
//     the offset 2^32 - 1) and seeds with both halves set;
//   - p = 0.1, 0.5, 0.9, p whose threshold is 1 or 2^32 - 1, and p within 2^-33 of 1 (threshold
//     2^32: nothing is kept);
//   - bits past the tile's keys are 0;
//   - each tile drawn alone (dropout_keep_bits) and between the steps of score products
//     (TileDraws, as the forward and backward draw).
// Internal: includes cpu_isa.h for the per-ISA tables.
#include <cmath>
#include <cstdio>
#include <random>

#include "../common/check.h"
#include "cpu_isa.h"
#include "dropout_rng.h"

using namespace dilattn::cpu;

namespace {

// Wrong decisions of one query: every pair against dropout_keep, and the bits past kcount.
int64_t wrong_bits_of(const IsaKernels& k, const DropoutTileQuery& q) {
  uint64_t keep[64];
  for (uint64_t& word : keep) word = 0xA5A5A5A5A5A5A5A5ull;  // poisoned
  k.dropout_keep_bits(q, keep);
  const uint64_t threshold = dilattn::dropout_threshold(q.p);
  int64_t wrong = 0;
  for (int64_t t = 0; t < q.rows; ++t) {
    const int64_t i = q.i0 + t * q.row_step;
    for (int64_t c = 0; c < 64; ++c) {
      const bool got = (keep[t] >> c) & 1;
      const bool want = c < q.kcount && dilattn::dropout_keep(q.seed, q.offset, q.b, q.h, q.H,
                                                              i, q.j0 + c * q.key_step,
                                                              threshold);
      wrong += got != want;
    }
  }
  return wrong;
}

// The same tile drawn alone and inside products of 1, 7, 32 and 64 steps (TileDraws): fewer
// steps than the block has half vectors of calls, uneven shares, and the shares 4 and 8 of the
// bf16 and f32 products at D = 64, which TileDraws writes out.
int64_t wrong_bits(const IsaKernels& k, DropoutTileQuery q) {
  int64_t wrong = 0;
  for (int64_t steps : {0, 1, 7, 32, 64}) {
    q.product_steps = steps;
    wrong += wrong_bits_of(k, q);
  }
  return wrong;
}

void check_isa(const IsaKernels& k) {
  std::mt19937_64 rng(2024);
  const int64_t two32 = int64_t{1} << 32;
  int64_t queries = 0, wrong = 0, kept = 0, total = 0;
  const double ps[] = {0.1, 0.5, 0.9, 1.0 / 4294967296.0, 1.0 - 2.0 / 4294967296.0,
                       1.0 - 1.0 / 8589934592.0};
  for (double p : ps)
    for (int64_t key_step : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7},
                                 (int64_t{1} << 26) + 1})
      for (int64_t start_mod = 0; start_mod < 16; ++start_mod)
        for (int64_t kcount : {1, 3, 17, 61, 63, 64}) {
          DropoutTileQuery q;
          q.seed = rng();
          q.offset = rng() % two32;
          q.p = p;
          q.H = 1 + static_cast<int64_t>(rng() % 16);
          q.h = static_cast<int64_t>(rng() % static_cast<uint64_t>(q.H));
          q.b = static_cast<int64_t>(rng() % 8);
          q.rows = 1 + static_cast<int64_t>(rng() % 8);
          q.row_step = key_step;
          q.i0 = static_cast<int64_t>(rng() % 100000);
          q.j0 = 16 * static_cast<int64_t>(rng() % 100000) + start_mod;
          q.key_step = key_step;
          q.kcount = kcount;
          wrong += wrong_bits(k, q);
          ++queries;
          if (p == 0.5) {  // the fraction kept, a coarse check that draws are not constant
            uint64_t keep[64];
            k.dropout_keep_bits(q, keep);
            for (int64_t t = 0; t < q.rows; ++t) kept += __builtin_popcountll(keep[t]);
            total += q.rows * kcount;
          }
        }
  // Counters at the top of their words: i and the call up to 2^32 - 1, b H + h = 2^32 - 1, the
  // largest offset.
  for (int64_t start_mod = 0; start_mod < 16; ++start_mod)
    for (int64_t key_step : {1, 2, 4, 5}) {
      DropoutTileQuery q;
      q.seed = 0xFFFFFFFF00000001ull;
      q.offset = two32 - 1;
      q.p = 0.3;
      q.H = 65536;
      q.b = 65535;
      q.h = 65535;
      q.rows = 4;
      q.i0 = two32 - 4;
      q.j0 = 4 * two32 - 64 * key_step + start_mod - 16;
      q.key_step = key_step;
      q.kcount = 64;
      wrong += wrong_bits(k, q);
      ++queries;
    }
  CHECK_MSG(wrong == 0, "%s: %lld wrong decisions over %lld tiles", k.name,
            static_cast<long long>(wrong), static_cast<long long>(queries));
  const double fraction = static_cast<double>(kept) / static_cast<double>(total);
  CHECK_MSG(std::fabs(fraction - 0.5) < 5 * 0.5 / std::sqrt(static_cast<double>(total)),
            "%s: fraction kept at p = 0.5 is %.4f over %lld pairs", k.name, fraction,
            static_cast<long long>(total));
  std::printf("%s: %lld tiles, every decision equals dropout_keep; p = 0.5 keeps %.4f\n", k.name,
              static_cast<long long>(queries), fraction);
}

}  // namespace

int main() {
  const uint32_t have = this_cpu_features();
  int ran = 0;
  for (const char* name :
       {"amx", "avx512bf16", "avx512", "bf16emu", "amxemu", "avx2", "sse", "neon", "generic"}) {
    const IsaChoice c = choose_isa(name, have);
    if (c.kernels == nullptr) continue;  // not built, or this CPU lacks it
    harness::CaseScope scope(name);
    check_isa(*c.kernels);
    ++ran;
  }
  CHECK_MSG(ran > 0, "no instruction set ran (this CPU runs at least the baseline)");
  return harness::finish("cpu_dropout_draws");
}
