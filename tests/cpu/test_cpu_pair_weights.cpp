// test_cpu_pair_weights.cpp - the cpu backend computes a pair that several dilated branches
// hold once, weighted by how many hold it (cpu/cpu_pair_weights.h, SPEC 3's multiset
// union). Property, for every pair (i, j) of every head: the weights the pair gets over all
// the tiles that meet it, in every branch, sum to its multiplicity in A(i), as the f64
// reference lists A(i) (reference_key_sets.h) - whatever the tiles, since the forward and the
// two backward schedules cut them differently. Also: a tile pairs_computed_earlier says to
// skip has weight 0 for every pair, and no weight is negative or fractional. In LongNet's
// configuration with mod heads (each branch's selected rows inside the denser ones'), with
// the forward's tiles, no pair is computed twice. (Block heads may select rows of a sparse
// branch that only the densest branch shares; a tile then straddles two of its segments and
// computes some pairs with weight 0.)
// The weights are checked in both compute types (f32, and f64 for f64 inputs: the f64 path
// compares int32 segment numbers a half-width vector at a time and widens the result).
// Configurations: LongNet's nested geometric ones (tiles then hold all or none of another
// branch's pairs: skipped and uniform tiles), repeated branches, segments that do not nest
// (pair-by-pair weights with zeros), clipped segments, each head mode, random ones.
// Internal: includes the baseline copy of the per-ISA headers (cpu_isa_target.h).
#include <cstdio>
#include <random>
#include <vector>

#include "../common/check.h"
#include "cpu_isa_target.h"  // first: see there
#include "cpu_pair_weights.h"
#include "cpu_tile_loop.h"
#include "pair_sharing.h"
#include "reference_key_sets.h"

using namespace dilattn;
using namespace dilattn::cpu::DILATTN_CPU_ISA_NS;

namespace {

struct Config {
  const char* name;
  int64_t N, H;
  std::vector<Branch> branches;
  int32_t mode;
  // Tiles nest in the branches' segments: every pair is computed exactly once.
  bool computes_distinct_pairs_only = false;
};

// Multiplicity of every pair (i, j) of head h, from the reference's key groups.
std::vector<int> multiplicity(const Problem& p, int64_t h) {
  const int64_t N = p.Nq;
  std::vector<int> m(static_cast<size_t>(N * N), 0);
  std::vector<ref::KeyGroup> groups;
  for (int64_t i = 0; i < N; ++i) {
    groups.clear();
    ref::row_key_groups(p, h, i, &groups);
    for (const ref::KeyGroup& g : groups)
      for (const KeyProgression& kp : g)
        for (int64_t t = 0; t < kp.count; ++t) ++m[static_cast<size_t>(i * N + progression_at(kp, t))];
  }
  return m;
}

// Sum of the weights of every pair over every tile, tiles cut as the forward cuts them (work
// items of `block` rows, row tiles of up to `tile_rows`, key tiles of up to `tile_keys`), with
// weights in the compute type T.
// Each computed pair's weight is also checked against lib/pair_sharing.h's rule, pair by pair
// (shared_pair_weight, which the CUDA forwards apply too): the cpu backend's tiles apply exactly
// that rule (*rule_violations counts the pairs that differ).
template <class T>
std::vector<double> weight_sums(const Problem& p, int64_t h, int64_t block, int64_t tile_rows,
                                int64_t tile_keys, int* skip_violations, int* bad_values,
                                int64_t* rule_violations, int64_t* computed) {
  const int64_t N = p.Nq;
  const int64_t m = p.num_branches();
  // The head's branches as the rule reads them (it takes up to kMaxSharingBranches).
  SharedBranch shared[kMaxSharingBranches];
  bool used_flags[kMaxSharingBranches] = {};
  for (int64_t c = 0; c < m && c < kMaxSharingBranches; ++c) {
    const BranchView v = branch_view(p, h, c);
    shared[c] = SharedBranch{v.wc, v.r, v.o};
    used_flags[c] = head_uses_branch(p.head_mode, h, c, p.H, m);
  }
  std::vector<double> sum(static_cast<size_t>(N * N), 0.0);
  alignas(64) static T weights[kBR * kBC];
  alignas(64) static int32_t key[kMemoInts];
  key[0] = -1;
  const PairWeightsMemo<T> buffer{weights, key};
  for (int64_t i0 = 0; i0 < N; i0 += block) {
    for_each_piece(p, h, i0, std::min(i0 + block, N), true, [&](const Piece& piece) {
      const KeyProgression& own = piece.own;
      for_each_other_range(p, h, piece, true, [&](const KeyProgression& keys) {
        for (int64_t k0 = 0; k0 < keys.count; k0 += tile_keys) {
          const int64_t kc = std::min(tile_keys, keys.count - k0);
          const bool whole_skip =
              pairs_computed_earlier(p, h, piece.branch, own, 0, own.count, keys, k0, kc);
          for (int64_t t0 = 0; t0 < own.count; t0 += tile_rows) {
            const int64_t rows = std::min(tile_rows, own.count - t0);
            const PairWeights<T> pw =
                pair_weights(p, h, piece.branch, own, t0, rows, keys, k0, kc, buffer);
            if (whole_skip && !pw.skip) ++*skip_violations;
            if (pw.skip) continue;
            *computed += rows * kc;
            for (int64_t t = 0; t < rows; ++t)
              for (int64_t c = 0; c < kc; ++c) {
                const T w = pw.per_pair ? pw.per_pair[t * kBC + c] : pw.uniform;
                if (w < 0 || w != static_cast<T>(static_cast<int>(w))) ++*bad_values;
                const int64_t i = progression_at(own, t0 + t), j = progression_at(keys, k0 + c);
                sum[static_cast<size_t>(i * N + j)] += w;
                if (m <= kMaxSharingBranches &&
                    static_cast<int64_t>(w) != shared_pair_weight(shared, used_flags, m,
                                                                  piece.branch, i, j))
                  ++*rule_violations;
              }
          }
        }
      });
    });
  }
  return sum;
}

template <class T>
void check_config(const Config& c) {
  harness::CaseScope scope(sizeof(T) == sizeof(double) ? "f64 weights" : "f32 weights");
  Problem p;
  p.B = 1; p.Nq = p.Nk = c.N; p.H = c.H; p.Hkv = 1; p.D = 16;
  p.kind = DILATTN_KIND_DILATED;
  p.branches = c.branches;
  p.head_mode = c.mode;
  // Cuts: the forward's (block_rows, kBR, kBC), and smaller odd ones as the backward's
  // key-side walk or another block size would make.
  const int64_t cuts[3][3] = {{block_rows(p), kBR, kBC}, {96, 17, 23}, {50, 64, 5}};
  for (int64_t h = 0; h < p.H; ++h) {
    const std::vector<int> want = multiplicity(p, h);
    for (int n = 0; n < 3; ++n) {
      const int64_t* cut = cuts[n];
      int skip_violations = 0, bad_values = 0;
      int64_t computed = 0, rule_violations = 0;
      const std::vector<double> got = weight_sums<T>(p, h, cut[0], cut[1], cut[2],
                                                     &skip_violations, &bad_values,
                                                     &rule_violations, &computed);
      CHECK_MSG(rule_violations == 0,
                "[%s h=%lld cut %lld/%lld/%lld] %lld pairs weighted other than "
                "lib/pair_sharing.h's rule", c.name, (long long)h, (long long)cut[0],
                (long long)cut[1], (long long)cut[2], (long long)rule_violations);
      if (c.computes_distinct_pairs_only && n == 0) {
        int64_t distinct = 0;
        for (int x : want) distinct += x > 0;
        CHECK_MSG(computed == distinct, "[%s h=%lld] %lld pairs computed, %lld distinct", c.name,
                  (long long)h, (long long)computed, (long long)distinct);
      }
      int64_t wrong = 0, first = -1;
      for (size_t x = 0; x < want.size(); ++x)
        if (got[x] != want[x]) {
          ++wrong;
          if (first < 0) first = static_cast<int64_t>(x);
        }
      CHECK_MSG(wrong == 0, "[%s h=%lld cut %lld/%lld/%lld] %lld pairs' weights do not sum to "
                "their multiplicity; first (%lld, %lld): %g, want %d", c.name, (long long)h,
                (long long)cut[0], (long long)cut[1], (long long)cut[2], (long long)wrong,
                (long long)(first < 0 ? 0 : first / c.N), (long long)(first < 0 ? 0 : first % c.N),
                first < 0 ? 0.0 : got[first], first < 0 ? 0 : want[first]);
      CHECK_MSG(skip_violations == 0, "[%s h=%lld] %d tiles inside a skipped key tile not skipped",
                c.name, (long long)h, skip_violations);
      CHECK_MSG(bad_values == 0, "[%s h=%lld] %d weights negative or fractional", c.name,
                (long long)h, bad_values);
    }
  }
}

// progression_segments (additions only) against selected_segment term by term: steps below,
// equal to and above the segment length, offsets of every kind, a step near INT64_MAX.
void check_progression_segments() {
  std::mt19937_64 rng(7);
  int64_t wrong = 0;
  for (int n = 0; n < 20000; ++n) {
    const int64_t wc = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t r = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(wc));
    const BranchView c{wc, r, static_cast<int64_t>(rng() % static_cast<uint64_t>(r))};
    const KeyProgression kp{static_cast<int64_t>(rng() % 5000),
                            1 + static_cast<int64_t>(rng() % 700), 1 + static_cast<int64_t>(rng() % 64)};
    const int64_t seg0 = kp.first / wc - static_cast<int64_t>(rng() % 2) * (kp.first / wc);
    int32_t got[64];
    progression_segments(c, kp, 0, kp.count, seg0, -7, got);
    for (int64_t t = 0; t < kp.count; ++t) {
      const int64_t s = selected_segment(progression_at(kp, t), wc, r, c.o);
      if (got[t] != (s < 0 ? -7 : s - seg0)) ++wrong;
    }
  }
  const KeyProgression huge{5, INT64_MAX - 3, 1};  // one term: the step is never added
  int32_t one[1];
  progression_segments(BranchView{4, 2, 1}, huge, 0, 1, 0, -7, one);
  CHECK_EQ(one[0], 1);  // 5 is selected (offset 1 in segment [4, 8)), segment 1
  CHECK_MSG(wrong == 0, "progression_segments: %lld terms differ from selected_segment",
            (long long)wrong);
}

}  // namespace

int main() {
  check_progression_segments();
  std::vector<Config> configs = {
      {"longnet_mod", 1024, 4, {{128, 1}, {256, 2}, {512, 4}}, kHeadsMod, true},
      {"longnet_block", 1024, 5, {{128, 1}, {256, 2}, {512, 4}}, kHeadsBlock},
      {"longnet_groups", 600, 3, {{128, 1}, {256, 2}, {512, 4}}, kHeadsGroups},
      {"reversed_order", 700, 4, {{512, 4}, {256, 2}, {128, 1}}, kHeadsMod},
      {"repeated_branch", 300, 2, {{64, 1}, {64, 1}, {300, 3}}, kHeadsMod},
      {"not_nested", 333, 5, {{100, 2}, {333, 3}}, kHeadsBlock},
      {"not_nested_mod", 300, 4, {{64, 1}, {128, 2}, {300, 4}}, kHeadsMod},
      {"clipped", 200, 2, {{1000, 3}, {50, 5}, {70, 1}}, kHeadsMod},
      // More branches set pair by pair than the memo keeps: the one-by-one path.
      {"eleven_branches", 260, 2, {{30, 1}, {41, 2}, {52, 3}, {63, 1}, {74, 2}, {85, 3},
                                   {96, 1}, {107, 2}, {118, 3}, {129, 1}, {260, 2}}, kHeadsMod},
  };
  std::mt19937_64 rng(2026);
  for (int n = 0; n < 6; ++n) {
    Config c{"random", static_cast<int64_t>(100 + rng() % 500), static_cast<int64_t>(1 + rng() % 5),
             {}, static_cast<int32_t>(rng() % 2 == 0 ? kHeadsMod : kHeadsBlock)};
    const int m = 2 + static_cast<int>(rng() % 3);
    for (int b = 0; b < m; ++b) {
      const int64_t w = 1 + static_cast<int64_t>(rng() % 400);
      c.branches.push_back(Branch{w, 1 + static_cast<int64_t>(rng() % std::min<int64_t>(w, 6))});
    }
    configs.push_back(c);
  }
  for (const Config& c : configs) {
    check_config<float>(c);
    check_config<double>(c);
  }
  return harness::finish("cpu_pair_weights_sum_to_multiplicity");
}
