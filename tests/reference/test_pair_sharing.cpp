// test_pair_sharing.cpp - lib/pair_sharing.h's tile-sized forms of SPEC 3.4's shared-pair rule
// against the rule itself, pair by pair. For every configuration branches_share_pairs accepts,
// the tensor-core forwards' walk (and the backward's dQ pass, the same walk) is replayed on the
// host: each branch, head and query tile (64 rows, or 128 as forward_mma_tf32.cu's at D = 64
// and forward_wgmma.cu's), each row's key spans cut by shared_skip_range, each chunk (32, 64 or
// 128 keys) and each lane (rows 16w + g and + 8, columns 8n + 2t and 8n + 2t + 1). Then
//   - every row of a tile gets the same skip range (the kernels read one span for the tile);
//   - every pair in the range has weight 0 (an earlier branch holds it);
//   - the weight a lane uses for a pair of a span (shared_span_log_weights from its columns 2t
//     and 2t + 1 of the span's start) is the pair's own weight, shared_pair_weight;
//   - a pair's weights over its branches add up to the number of branches holding it.
// check_key_walk replays the backward's dK/dV pass, the transpose, the same way (its header).
// And configurations that do not nest are refused. Internal: lib/pair_sharing.h only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../common/check.h"
#include "pair_sharing.h"

using namespace dilattn;

namespace {

struct Config {
  const char* name;
  int64_t N;
  std::vector<int64_t> w, r;
  int32_t head_mode;
  int64_t H;
  bool causal;
};

// Head h's view of the configuration's branches, as the kernels' HeadBranches gives it.
struct HeadView {
  SharedBranch branch[kMaxSharingBranches];
  bool used[kMaxSharingBranches];
};
HeadView head_view(const Config& cfg, int64_t h) {
  const int64_t m = static_cast<int64_t>(cfg.w.size());
  HeadView v{};
  for (int64_t c = 0; c < m; ++c) {
    v.branch[c] = {clipped_segment(cfg.w[c], cfg.N), cfg.r[c],
                   head_offset(cfg.head_mode, h, c, cfg.r[c], cfg.H)};
    v.used[c] = head_uses_branch(cfg.head_mode, h, c, cfg.H, m);
  }
  return v;
}

// Every head, branch it uses and segment of that branch, in order: visit(branches, used, h, b,
// s0, count), branches and used the head's view (head_view), count the segment's selected
// positions (its rows, and its keys).
template <class Visit>
void for_each_segment(const Config& cfg, Visit visit) {
  const int64_t m = static_cast<int64_t>(cfg.w.size());
  for (int64_t h = 0; h < cfg.H; ++h) {
    const HeadView view = head_view(cfg, h);
    for (int64_t b = 0; b < m; ++b) {
      if (!view.used[b]) continue;
      const SharedBranch& bb = view.branch[b];
      for (int64_t s0 = 0; s0 < cfg.N; s0 += bb.wc)
        visit(view.branch, view.used, h, b, s0,
              selected_count(s0, segment_end(s0, bb.wc, cfg.N), bb.r, bb.o));
    }
  }
}

// The weight the lane's log2 weight stands for (0 for -inf).
int64_t weight_of(float lw) { return std::isinf(lw) ? 0 : static_cast<int64_t>(std::lround(std::exp2(lw))); }

// One lane's pairs of one span against the rule: its two positions on the tile's side, `lane`
// (-1: none; rows, or keys in the dK/dV walk when span_rows), with the span's terms from + 2 t4
// + 8 n + e (e = 0, 1) below `to`, at(term) their positions; lw[r][e] the lane's log2 weights.
template <class At>
void check_lane_span(const Config& cfg, const SharedBranch* branches, const bool* used,
                     int64_t b, int64_t h, const int64_t (&lane)[2], At at, int64_t from,
                     int64_t to, int t4, bool span_rows, const float (&lw)[2][2]) {
  const int64_t m = static_cast<int64_t>(cfg.w.size());
  for (int64_t term = from + 2 * t4; term < to; term += 8)
    for (int e = 0; e < 2 && term + e < to; ++e)
      for (int r = 0; r < 2; ++r) {
        if (lane[r] < 0) continue;
        const int64_t i = span_rows ? at(term + e) : lane[r];
        const int64_t j = span_rows ? lane[r] : at(term + e);
        if (cfg.causal && j > i) continue;
        const int64_t want = shared_pair_weight(branches, used, m, b, i, j);
        CHECK_MSG(weight_of(lw[r][e]) == want,
                  "%s: branch %lld head %lld pair (%lld, %lld)%s: lane weight %lld, the rule's "
                  "%lld", cfg.name, (long long)b, (long long)h, (long long)i, (long long)j,
                  span_rows ? " in the dK/dV walk" : "", (long long)weight_of(lw[r][e]),
                  (long long)want);
      }
}

// One configuration: every check of the header. Tiles of 128 rows (forward_mma_tf32.cu at D = 64,
// forward_wgmma.cu): a range or weight the same over them is the same over their 64-row halves
// (forward_mma.cu, forward_mma_tf32.cu at D = 128). The lanes' weights do not depend on the chunk
// size; the cut's ends are checked against each kernel's chunks (32, 64 and 128 keys).
void check_walk(const Config& cfg) {
  constexpr int64_t tile_rows = 128;
  const int64_t m = static_cast<int64_t>(cfg.w.size());
  for_each_segment(cfg, [&](const SharedBranch* branches, const bool* used, int64_t h,
                            int64_t b, int64_t s0, int64_t rows) {
    const SharedBranch& bb = branches[b];
    for (int64_t t0 = 0; t0 < rows; t0 += tile_rows) {
      // The tile's skip range, the same for every row.
      int64_t lo0 = 0, hi0 = 0;
      shared_skip_range(branches, used, b, cfg.N, selected_position(s0, bb.r, bb.o, t0),
                        &lo0, &hi0);
      for (int64_t t = t0; t < t0 + tile_rows && t < rows; ++t) {
        int64_t lo = 0, hi = 0, lo_wide = 0, hi_wide = 0;
        const int64_t i = selected_position(s0, bb.r, bb.o, t);
        shared_skip_range(branches, used, b, cfg.N, i, &lo, &hi);
        shared_skip_range_as<int64_t>(SharedBranchArray{branches, used}, b, cfg.N, i,
                                      &lo_wide, &hi_wide);
        CHECK_MSG(lo == lo_wide && hi == hi_wide, "%s: 32- and 64-bit skip ranges differ",
                  cfg.name);
        CHECK_MSG(lo == lo0 && hi == hi0,
                  "%s: branch %lld head %lld row %lld: skip [%lld, %lld), the tile's [%lld, "
                  "%lld)", cfg.name, (long long)b, (long long)h, (long long)t, (long long)lo,
                  (long long)hi, (long long)lo0, (long long)hi0);
      }
      // The ends fall on whole chunks of the tile's keys, or at their end (no chunk is
      // walked in part because of the cut).
      for (int64_t chunk_keys : {int64_t{32}, int64_t{64}, int64_t{128}})
        CHECK_MSG(lo0 % chunk_keys == 0 && (hi0 % chunk_keys == 0 || hi0 == rows),
                  "%s: skip [%lld, %lld) not on %lld-key chunks", cfg.name, (long long)lo0,
                  (long long)hi0, (long long)chunk_keys);
      // Each lane of each warp of the tile (16 rows a warp).
      for (int64_t warp_row = t0; warp_row < t0 + tile_rows; warp_row += 16)
        for (int g = 0; g < 8; ++g) {
          const int64_t ta = warp_row + g, tb = ta + 8;
          const int64_t i0 = ta < rows ? selected_position(s0, bb.r, bb.o, ta) : -1;
          const int64_t i1 = tb < rows ? selected_position(s0, bb.r, bb.o, tb) : -1;
          const int64_t lane_rows[2] = {i0, i1};
          // The tile's keys: the segment's selected positions (causal: each row its own).
          const int64_t first = s0 + bb.o;
          for (int span = 0; span < 2; ++span) {
            const int64_t lo = lo0 == hi0 ? rows : lo0, hi = lo0 == hi0 ? rows : hi0;
            const int64_t from = span == 0 ? 0 : hi, to = span == 0 ? lo : rows;
            if (from >= to) continue;
            for (int t4 = 0; t4 < 4; ++t4) {
              float lw[2][2], lw_wide[2][2];
              const int64_t j0 = first + bb.r * (from + 2 * t4), j1 = j0 + bb.r;
              shared_span_log_weights(branches, used, m, b, cfg.N, i0, i1, j0, j1, lw);
              // The 64-bit form (positions past kNarrowPositions) agrees.
              shared_span_log_weights_as<int64_t>(branches, used, m, b, i0, i1, j0, j1,
                                                  lw_wide);
              for (int x = 0; x < 4; ++x)
                CHECK_MSG(lw[x / 2][x % 2] == lw_wide[x / 2][x % 2],
                          "%s: 32- and 64-bit weights differ", cfg.name);
              // The lane's keys of the span: columns 8n + 2t4 + e of every chunk.
              check_lane_span(cfg, branches, used, b, h, lane_rows,
                              [&](int64_t t) { return first + bb.r * t; }, from, to, t4, false,
                              lw);
            }
          }
          // Skipped pairs: weight 0.
          for (int64_t key = lo0; key < hi0; ++key)
            for (int r = 0; r < 2; ++r) {
              const int64_t i = lane_rows[r], j = first + bb.r * key;
              if (i < 0) continue;
              CHECK_MSG(shared_pair_weight(branches, used, m, b, i, j) == 0,
                        "%s: branch %lld skips (%lld, %lld), which no earlier branch holds",
                        cfg.name, (long long)b, (long long)i, (long long)j);
            }
        }
    }
  });
  // Over the branches, a pair's weights add up to its multiplicity (SPEC 3.4).
  for (int64_t h = 0; h < cfg.H; ++h) {
    const HeadView view = head_view(cfg, h);
    const SharedBranch* branches = view.branch;
    const bool* used = view.used;
    for (int64_t i = 0; i < cfg.N; i += 7)
      for (int64_t j = 0; j < cfg.N; j += 5) {
        int64_t holding = 0, weights = 0;
        for (int64_t c = 0; c < m; ++c) {
          if (!used[c] || !branch_holds_pair(branches[c], i, j)) continue;
          ++holding;
          weights += shared_pair_weight(branches, used, m, c, i, j);
        }
        CHECK_MSG(weights == holding, "%s: pair (%lld, %lld): weights %lld, branches %lld",
                  cfg.name, (long long)i, (long long)j, (long long)weights, (long long)holding);
      }
  }
}

// The backward's dK/dV pass walks the transpose (cuda/backward_tile.cuh key_tile_row_cut,
// cuda/mma_backward_loop.cuh key_lane_weights): each key tile of 64 selected keys, its rows cut
// by shared_skip_range read at the tile's first key, the rows before the cut (span 0) and after
// it (span 1) from the causal rule's first row on, in chunks of 8-row blocks, and each lane
// (keys 16w + g and + 8, rows 8n + 2t and 8n + 2t + 1 of a span). Then
//   - every key of a tile gets the same row cut;
//   - every pair of a cut row and a tile key has weight 0;
//   - the weight a lane uses for a pair of a span (shared_span_log_weights with its keys as
//     the rows and its columns 2t and 2t + 1 of the span's start as the keys) is the pair's own.
void check_key_walk(const Config& cfg) {
  constexpr int64_t tile_keys = 64;
  const int64_t m = static_cast<int64_t>(cfg.w.size());
  for_each_segment(cfg, [&](const SharedBranch* branches, const bool* used, int64_t h,
                            int64_t b, int64_t s0, int64_t count) {
    const SharedBranch& bb = branches[b];
    auto at = [&](int64_t term) { return selected_position(s0, bb.r, bb.o, term); };
    for (int64_t k0 = 0; k0 < count; k0 += tile_keys) {
      const int64_t first_key = at(k0);
      int64_t lo0 = 0, hi0 = 0;
      shared_skip_range(branches, used, b, cfg.N, first_key, &lo0, &hi0);
      for (int64_t k = k0; k < k0 + tile_keys && k < count; ++k) {
        int64_t lo = 0, hi = 0;
        shared_skip_range(branches, used, b, cfg.N, at(k), &lo, &hi);
        CHECK_MSG(lo == lo0 && hi == hi0,
                  "%s: branch %lld head %lld key %lld: row cut [%lld, %lld), the tile's "
                  "[%lld, %lld)", cfg.name, (long long)b, (long long)h, (long long)k,
                  (long long)lo, (long long)hi, (long long)lo0, (long long)hi0);
        for (int64_t t = lo0; t < hi0; ++t)
          CHECK_MSG(shared_pair_weight(branches, used, m, b, at(t), at(k)) == 0,
                    "%s: branch %lld cuts row %lld from key %lld, a pair no earlier "
                    "branch holds", cfg.name, (long long)b, (long long)at(t),
                    (long long)at(k));
      }
      // The rows from the causal rule's first on (rows before the tile's first key see
      // none of its keys), around the cut.
      const int64_t q_lo = cfg.causal ? (first_key - s0 - bb.o + bb.r - 1) / bb.r : 0;
      const int64_t cut_lo = lo0 == hi0 ? count : lo0, cut_hi = lo0 == hi0 ? count : hi0;
      for (int span = 0; span < 2; ++span) {
        const int64_t from = span == 0 ? q_lo : std::max(q_lo, cut_hi);
        const int64_t to = span == 0 ? std::max(q_lo, cut_lo) : count;
        if (from >= to) continue;
        for (int64_t kw = k0; kw < k0 + tile_keys; kw += 16)
          for (int g = 0; g < 8; ++g) {
            const int64_t keys[2] = {kw + g < count ? at(kw + g) : -1,
                                     kw + g + 8 < count ? at(kw + g + 8) : -1};
            for (int t4 = 0; t4 < 4; ++t4) {
              float lw[2][2];
              shared_span_log_weights(branches, used, m, b, cfg.N, keys[0], keys[1],
                                      at(from + 2 * t4), at(from + 2 * t4 + 1), lw);
              check_lane_span(cfg, branches, used, b, h, keys, at, from, to, t4, true, lw);
            }
          }
      }
    }
  });
}

}  // namespace

int main() {
  // Configurations the tensor-core forwards share pairs on.
  const std::vector<Config> nested = {
      {"seeds' kind: 512,1024,2048 x 1,2,4 mod", 4096, {512, 1024, 2048}, {1, 2, 4}, kHeadsMod, 4,
       false},
      {"the same, causal", 4096, {512, 1024, 2048}, {1, 2, 4}, kHeadsMod, 4, true},
      {"dilation 8 over 1 (a lane's keys alike mod 8)", 2048, {1024, 2048}, {1, 8}, kHeadsMod, 8,
       false},
      {"block heads, partial last segment", 3000, {512, 1024}, {1, 2}, kHeadsBlock, 4, false},
      {"smaller earlier segments cut whole tiles", 4096, {256, 1024, 4096}, {1, 1, 2}, kHeadsMod, 2,
       true},
      {"equal segments, dilations 2 and 4", 2048, {1024, 1024}, {2, 4}, kHeadsMod, 4, false},
      {"an earlier branch with the larger dilation", 2048, {1024, 1024}, {4, 1}, kHeadsMod, 4,
       true},
      {"an earlier and a later branch holding the same pairs", 2048, {1024, 1024, 1024},
       {4, 1, 2}, kHeadsMod, 4, false},
      {"a segment longer than N (clipped to it)", 2048, {512, 4096}, {1, 2}, kHeadsMod, 2, true},
      {"groups heads (no head uses two)", 2048, {512, 1024}, {1, 2}, kHeadsGroups, 4, false},
      // tests/kernels/kernel_cases.h's shared-pair cases.
      {"kernel case dilated_shared_pairs", 640, {256, 512, 512}, {1, 2, 1}, kHeadsMod, 2, false},
      {"kernel case dilated_shared_pairs_causal", 512, {256, 256}, {4, 1}, kHeadsMod, 4, true},
  };
  for (const Config& cfg : nested) {
    harness::CaseScope scope(cfg.name);
    std::vector<int64_t> w = cfg.w, r = cfg.r;
    const bool shares =
        branches_share_pairs(w.data(), r.data(), static_cast<int64_t>(w.size()), cfg.N);
    CHECK_MSG(shares, "%s: expected to share pairs", cfg.name);
    if (shares) {
      check_walk(cfg);
      check_key_walk(cfg);
    }
  }
  // Configurations that do not nest: every branch's pairs are computed in full.
  const std::vector<Config> refused = {
      {"tiles across segments of an earlier branch: 256 x 1 under 2048 x 8", 2048, {256, 2048},
       {1, 8}, kHeadsMod, 2, false},
      {"dilations 2 and 3", 2048, {512, 1024}, {2, 3}, kHeadsMod, 2, false},
      {"dilation 16 over 1 (a lane's keys differ mod 16)", 2048, {2048, 2048}, {1, 16},
       kHeadsMod, 4, false},
      {"a later branch with smaller segments", 2048, {1024, 512}, {1, 1}, kHeadsMod, 1, false},
      {"segments that do not divide", 3072, {1024, 1536}, {1, 2}, kHeadsMod, 2, false},
      {"one branch", 2048, {512}, {1}, kHeadsMod, 1, false},
      {"positions past kNarrowPositions", int64_t{1} << 31, {int64_t{1} << 20, int64_t{1} << 21},
       {1, 2}, kHeadsMod, 1, false},
      {"nine branches", 4096, {64, 128, 256, 512, 1024, 2048, 4096, 4096, 4096},
       {1, 1, 1, 1, 1, 1, 1, 2, 4}, kHeadsMod, 1, false},
  };
  for (const Config& cfg : refused) {
    std::vector<int64_t> w = cfg.w, r = cfg.r;
    CHECK_MSG(!branches_share_pairs(w.data(), r.data(), static_cast<int64_t>(w.size()), cfg.N),
              "%s: expected not to share pairs", cfg.name);
  }
  return harness::finish("pair_sharing");
}
