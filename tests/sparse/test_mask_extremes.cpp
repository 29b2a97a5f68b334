// test_mask_extremes.cpp - SPEC 4 builders and pattern grammar at sizes near 2^63.
//
// Every builder gets sequence lengths, block sizes, windows, strides, block counts and seeds from
// 1 up to INT64_MAX. Each call must either be refused where dilattn_mask.h says so (I * J > 2^34
// block pairs, or for hier more than 2^34 anchor rows, both SIZE_OVERFLOW) or return exactly the
// mask the definitions in dilattn_mask.h give, evaluated here by brute force in 128-bit
// arithmetic (so this file cannot overflow where the library might). A mask is also checked for
// SPEC 4's form: I + 1 row pointers from 0, strictly ascending col_idx in [0, J). The ASan+UBSan
// build reports any signed overflow on the way.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "../common/check.h"
#include "dilattn.h"

namespace {

__extension__ typedef __int128 i128;  // GCC and Clang; -pedantic wants the marker
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr i128 kPairLimit = i128{1} << 34;  // dilattn_mask.h: I * J <= 2^34
constexpr i128 kAnchorLimit = i128{1} << 34;  // dilattn_mask.h: hierarchical anchor rows

int g_checked = 0, g_refused = 0;

// What one test case calls: every failure names it (check.h).
std::string& g_case = harness::current_case();

i128 ceil_div(i128 a, i128 b) { return (a + b - 1) / b; }
i128 min128(i128 a, i128 b) { return a < b ? a : b; }
i128 max128(i128 a, i128 b) { return a > b ? a : b; }
// Floor modulo, for (dhi - jb) mod S with a negative difference.
i128 mod_floor(i128 a, i128 m) { return ((a % m) + m) % m; }

// dilattn_mask.h's block geometry, in 128 bits.
struct Geo {
  i128 Nq, Nk, bq, bk, I, J, off;
  Geo(int64_t nq, int64_t nk, int64_t q, int64_t k)
      : Nq(nq), Nk(nk), bq(q), bk(k), I(ceil_div(nq, q)), J(ceil_div(nk, k)), off(i128{nk} - nq) {}
  bool too_large() const { return I * J > kPairLimit; }
  i128 last(i128 ib) const { return min128((ib + 1) * bq, Nq) - 1; }
  i128 aligned_block(i128 i) const { return max128(0, min128(i + off, Nk - 1)) / bk; }
  i128 dlo(i128 ib) const { return aligned_block(ib * bq); }
  i128 dhi(i128 ib) const { return aligned_block(last(ib)); }
  bool causal_ok(i128 ib, i128 jb) const { return jb * bk <= last(ib) + off; }
};

using Rows = std::vector<std::set<int64_t>>;  // per head * I + row block: kept key blocks

// Checks SPEC 4's form and returns the mask's rows.
bool read_mask(dilattn_mask mask, const Geo& g, int64_t heads, Rows* rows) {
  dilattn_bsr_view v{};
  int64_t nnz = -1;
  if (!CHECK_OK(dilattn_mask_get(mask, &v, &nnz))) return false;
  if (!CHECK_MSG(v.num_heads == heads && v.index_type == DILATTN_INDEX_INT64 &&
                     i128{v.seqlen_q} == g.Nq && i128{v.seqlen_k} == g.Nk &&
                     i128{v.block_q} == g.bq && i128{v.block_k} == g.bk,
                 "mask shape differs from the request"))
    return false;
  const int64_t I = static_cast<int64_t>(g.I), J = static_cast<int64_t>(g.J);
  const int64_t* rp = static_cast<const int64_t*>(v.row_ptr);
  const int64_t* ci = static_cast<const int64_t*>(v.col_idx);
  const int64_t* hp = static_cast<const int64_t*>(v.head_ptr);
  rows->assign(static_cast<size_t>(heads * I), {});
  int64_t total = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t* r = rp + h * (I + 1);
    const int64_t base = heads > 1 ? hp[h] : 0;
    if (!CHECK_MSG(r[0] == 0, "row_ptr[0] = %lld", static_cast<long long>(r[0]))) return false;
    for (int64_t ib = 0; ib < I; ++ib) {
      if (!CHECK_MSG(r[ib + 1] >= r[ib] && r[ib + 1] - r[ib] <= J, "row_ptr not ascending"))
        return false;
      for (int64_t e = r[ib]; e < r[ib + 1]; ++e) {
        const int64_t c = ci[base + e];
        if (!CHECK_MSG(c >= 0 && c < J, "col_idx %lld outside [0, J)", static_cast<long long>(c)))
          return false;
        if (!CHECK_MSG(e == r[ib] || c > ci[base + e - 1], "col_idx not strictly ascending"))
          return false;
        (*rows)[static_cast<size_t>(h * I + ib)].insert(c);
      }
    }
    total += r[I];
  }
  return CHECK_MSG(nnz == total, "nnz_total disagrees with row_ptr");
}

// The call's status and mask against the expectation: refused with SIZE_OVERFLOW iff
// `expect_refused`, else exactly `want`.
void check(dilattn_status s, dilattn_mask mask, const Geo& g, int64_t heads, bool expect_refused,
           const Rows* want) {
  if (expect_refused) {
    ++g_refused;
    CHECK_MSG(s == DILATTN_ERROR_SIZE_OVERFLOW, "expected SIZE_OVERFLOW, got %s %s",
              dilattn_status_string(s), dilattn_last_error());
    CHECK_MSG(mask == nullptr, "mask slot written on refusal");
    return;
  }
  if (!CHECK_MSG(s == DILATTN_SUCCESS, "refused: %s", dilattn_last_error())) return;
  ++g_checked;
  Rows got;
  if (read_mask(mask, g, heads, &got) && want != nullptr) {
    size_t r = 0;  // the first row that differs, for the message
    while (r < got.size() && r < want->size() && got[r] == (*want)[r]) ++r;
    CHECK_MSG(got == *want, "row %zu: %zu blocks, want %zu", r,
              r < got.size() ? got[r].size() : 0, r < want->size() ? (*want)[r].size() : 0);
  }
  dilattn_mask_destroy(mask);
}

// One-head expectation from a per-pair predicate.
template <class Keep>
Rows expected_rows(const Geo& g, bool causal, Keep keep) {
  Rows rows(static_cast<size_t>(g.I));
  for (i128 ib = 0; ib < g.I; ++ib)
    for (i128 jb = 0; jb < g.J; ++jb)
      if (keep(ib, jb) && (!causal || g.causal_ok(ib, jb)))
        rows[static_cast<size_t>(ib)].insert(static_cast<int64_t>(jb));
  return rows;
}

std::string fmt(int64_t x) {
  if (x == kMax) return "MAX";
  if (x == kMax - 1) return "MAX-1";
  return std::to_string(x);
}

const int64_t kLengths[] = {1, 3, (int64_t{1} << 62) + 1, kMax - 1, kMax};
const int64_t kBlocks[] = {1, 2, 3, int64_t{1} << 61, int64_t{1} << 62, kMax / 2, kMax};
const int64_t kCounts[] = {0, 1, 2, int64_t{1} << 62, kMax};  // windows, global blocks

struct Level {
  int64_t s, w, c;
};

// Hierarchical by brute force over anchors (only called when their number is small).
Rows expected_hier(const Geo& g, const std::vector<Level>& levels, bool causal) {
  std::vector<std::set<int64_t>> reach(static_cast<size_t>(g.I));
  for (const Level& L : levels)
    for (i128 i = 0; i < g.Nq; i += L.s) {
      i128 lo = 0, hi = g.Nk - 1;
      if (L.w >= 0) {
        const i128 a = i + g.off;
        lo = max128(0, a - L.w / 2);
        hi = min128(g.Nk - 1, a + L.w / 2);
        if (lo > hi) continue;
        lo = lo / L.c * L.c;
        hi = min128(g.Nk - 1, (hi / L.c + 1) * L.c - 1);
      }
      for (i128 jb = lo / g.bk; jb <= hi / g.bk; ++jb)
        reach[static_cast<size_t>(i / g.bq)].insert(static_cast<int64_t>(jb));
    }
  return expected_rows(g, causal, [&](i128 ib, i128 jb) {
    return reach[static_cast<size_t>(ib)].count(static_cast<int64_t>(jb)) != 0;
  });
}

void geometric_builders(const Geo& g, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk) {
  const bool big = g.too_large();
  for (int causal = 0; causal <= 1; ++causal) {
    for (int64_t W : kCounts) {
      g_case = "local Nq=" + fmt(Nq) + " Nk=" + fmt(Nk) + " bq=" + fmt(bq) + " bk=" + fmt(bk) +
               " W=" + fmt(W) + " causal=" + std::to_string(causal);
      dilattn_mask m = nullptr;
      const dilattn_status s = dilattn_mask_local(&m, Nq, Nk, bq, bk, W, causal);
      if (big) { check(s, m, g, 1, true, nullptr); continue; }
      const Rows want = expected_rows(g, causal, [&](i128 ib, i128 jb) {
        return jb >= g.dlo(ib) - W && jb <= (causal ? g.dhi(ib) : g.dhi(ib) + W);
      });
      check(s, m, g, 1, false, &want);

      g_case = "sink" + g_case.substr(5);
      m = nullptr;
      const dilattn_status s2 = dilattn_mask_sink(&m, Nq, Nk, bq, bk, W, causal);
      const Rows want2 = expected_rows(g, causal, [&](i128 ib, i128 jb) { return jb < W || ib < W; });
      check(s2, m, g, 1, false, &want2);

      if (W < 1) continue;
      g_case = "strided" + g_case.substr(4);
      m = nullptr;
      const dilattn_status s3 = dilattn_mask_strided(&m, Nq, Nk, bq, bk, W, causal);
      const Rows want3 = expected_rows(
          g, causal, [&](i128 ib, i128 jb) { return mod_floor(g.dhi(ib) - jb, W) == 0; });
      check(s3, m, g, 1, false, &want3);
    }
    // Hierarchical: one level at a time, then all of them together.
    const int64_t strides[] = {1, 3, int64_t{1} << 61, kMax};
    const int64_t windows[] = {-1, 0, 1, int64_t{1} << 62, kMax};
    const int64_t sizes[] = {1, 3, int64_t{1} << 62, kMax};
    std::vector<Level> all;
    for (int64_t st : strides)
      for (int64_t w : windows)
        for (int64_t c : sizes) {
          const std::vector<Level> one = {{st, w, c}};
          if (w == 1 && c == 3) all.push_back(one[0]);
          const std::vector<Level>* level_sets[2] = {&one, &all};
          for (const std::vector<Level>* levels : level_sets) {
            if (levels == &all && (st != kMax || w != kMax || c != kMax)) continue;  // once
            i128 anchors = 0;
            for (const Level& L : *levels) anchors += ceil_div(g.Nq, L.s);
            g_case = "hier Nq=" + fmt(Nq) + " Nk=" + fmt(Nk) + " bq=" + fmt(bq) + " bk=" +
                     fmt(bk) + " levels=" + std::to_string(levels->size()) + " s=" + fmt(st) +
                     " w=" + fmt(w) + " c=" + fmt(c) + " causal=" + std::to_string(causal);
            std::vector<int64_t> S, Wv, C;
            for (const Level& L : *levels) {
              S.push_back(L.s); Wv.push_back(L.w); C.push_back(L.c);
            }
            dilattn_mask m = nullptr;
            const dilattn_status s =
                dilattn_mask_hierarchical(&m, Nq, Nk, bq, bk, static_cast<int32_t>(levels->size()),
                                          S.data(), Wv.data(), C.data(), causal);
            const bool refused = big || anchors > kAnchorLimit;
            if (refused || anchors > 100000) {  // too many anchors to enumerate here
              check(s, m, g, 1, refused, nullptr);
              continue;
            }
            const Rows want = expected_hier(g, *levels, causal != 0);
            check(s, m, g, 1, false, &want);
          }
        }
  }
}

void random_builder(const Geo& g, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk) {
  for (uint64_t seed : {uint64_t{0}, std::numeric_limits<uint64_t>::max()})
    for (double density : {0.0, 0.5, 1.0})
      for (int64_t heads : {int64_t{1}, int64_t{2}, kMax}) {
        g_case = "random Nq=" + fmt(Nq) + " Nk=" + fmt(Nk) + " bq=" + fmt(bq) + " bk=" + fmt(bk) +
                 " density=" + std::to_string(density) + " heads=" + fmt(heads);
        dilattn_mask m = nullptr;
        const dilattn_status s = dilattn_mask_random(&m, Nq, Nk, bq, bk, heads, density, seed, 1);
        if (g.too_large()) { check(s, m, g, heads, true, nullptr); continue; }
        if (heads == kMax) {  // num_heads * I * J > 2^34: SIZE_OVERFLOW, naming num_heads
          CHECK_MSG(s == DILATTN_ERROR_SIZE_OVERFLOW &&
                        std::strstr(dilattn_last_error(), "num_heads") != nullptr,
                    "num_heads = MAX not refused: %s", dilattn_last_error());
          continue;
        }
        if (density == 0.5) {  // no closed form: SPEC 4's form only
          check(s, m, g, heads, false, nullptr);
          continue;
        }
        Rows want;
        for (int64_t h = 0; h < heads; ++h) {
          const Rows one = expected_rows(g, true, [&](i128, i128) { return density == 1.0; });
          want.insert(want.end(), one.begin(), one.end());
        }
        check(s, m, g, heads, false, &want);
      }
}

// The grammar builds what the builders build, and refuses the same shapes.
void patterns(const Geo& g, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk) {
  const std::string maxs = std::to_string(kMax);
  const char* names[] = {"dense", "local:", "causal_local:", "sink:", "strided:", "hier:"};
  for (const char* name : names) {
    const std::string suffix = std::strcmp(name, "dense") == 0  ? ""
                               : std::strcmp(name, "hier:") == 0 ? maxs + "/" + maxs + "/" + maxs
                                                                 : maxs;
    for (const std::string& extra : {std::string(), std::string(":causal")}) {
      const std::string pattern = name + suffix + extra + "+random:1:seed=18446744073709551615";
      g_case = "pattern '" + pattern + "' Nq=" + fmt(Nq) + " Nk=" + fmt(Nk) + " bq=" + fmt(bq) +
               " bk=" + fmt(bk);
      dilattn_mask m = nullptr;
      const dilattn_status s = dilattn_mask_from_pattern(&m, pattern.c_str(), Nq, Nk, bq, bk);
      if (g.too_large()) { check(s, m, g, 1, true, nullptr); continue; }
      // random:1 keeps every pair, so the union is the full mask.
      const Rows want = expected_rows(g, false, [](i128, i128) { return true; });
      check(s, m, g, 1, false, &want);
    }
  }
}

// Shapes the geometry refuses before any builder arithmetic: block sizes < 1, and the dense
// term, which divides by the block size (it must not divide by zero).
void bad_shapes() {
  for (int64_t b : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    g_case = "pattern 'dense' with block_q = " + std::to_string(b);
    dilattn_mask m = nullptr;
    const dilattn_status s = dilattn_mask_from_pattern(&m, "dense", 8, 8, b, 4);
    CHECK_MSG(s == DILATTN_ERROR_INVALID_VALUE &&
                  std::strstr(dilattn_last_error(), "block_q") != nullptr,
              "not refused naming block_q: %s", dilattn_last_error());
    CHECK_MSG(m == nullptr, "mask slot written");
  }
}

// The hierarchical anchor bound has its own message, distinct from the block-pair bound.
void hier_anchor_message() {
  g_case = "pattern 'hier:1/0/1' with n = 10^12, block 2^30";
  dilattn_mask m = nullptr;
  const dilattn_status s =
      dilattn_mask_from_pattern(&m, "hier:1/0/1", 1000000000000, 1000000000000, 1 << 30, 1 << 30);
  const std::string message = dilattn_last_error();
  std::printf("  %s: \"%s\"\n", dilattn_status_string(s), message.c_str());
  CHECK_MSG(s == DILATTN_ERROR_SIZE_OVERFLOW && message.find("anchor") != std::string::npos &&
                message.find("strides[0] = 1") != std::string::npos,
            "not refused with the anchor message: %s", message.c_str());
  CHECK_MSG(m == nullptr, "mask slot written");
}

// topk with block sizes up to INT64_MAX on a small tensor: the geometry must not overflow.
void topk_blocks() {
  float q[2 * 5 * 2 * 3], k[2 * 5 * 1 * 3];
  for (size_t i = 0; i < sizeof q / sizeof q[0]; ++i) q[i] = static_cast<float>((i * 7) % 11) - 5;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) k[i] = static_cast<float>((i * 5) % 9) - 4;
  const dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F32, 2, 5, 2, 3);
  const dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F32, 2, 5, 1, 3);
  for (int64_t bq : kBlocks)
    for (int64_t bk : kBlocks)
      for (int64_t keep : {int64_t{0}, int64_t{1}, kMax})
        for (int causal = 0; causal <= 1; ++causal) {
          const Geo g(5, 5, bq, bk);
          g_case = "topk bq=" + fmt(bq) + " bk=" + fmt(bk) + " k_keep=" + fmt(keep);
          dilattn_mask m = nullptr;
          const dilattn_status s = dilattn_mask_topk(&m, &tq, &tk, bq, bk, keep, causal);
          if (keep != kMax) {  // which blocks win depends on scores: SPEC 4's form only
            check(s, m, g, 2, false, nullptr);
            continue;
          }
          Rows want;  // keeping every candidate: all (causally allowed) pairs
          for (int h = 0; h < 2; ++h) {
            const Rows one = expected_rows(g, causal, [](i128, i128) { return true; });
            want.insert(want.end(), one.begin(), one.end());
          }
          check(s, m, g, 2, false, &want);
        }
}

}  // namespace

int main() {
  for (int64_t Nq : kLengths)
    for (int64_t Nk : kLengths)
      for (int64_t bq : kBlocks)
        for (int64_t bk : kBlocks) {
          const Geo g(Nq, Nk, bq, bk);
          geometric_builders(g, Nq, Nk, bq, bk);
          random_builder(g, Nq, Nk, bq, bk);
          patterns(g, Nq, Nk, bq, bk);
        }
  bad_shapes();
  hier_anchor_message();
  topk_blocks();
  std::printf("%d masks checked against the definitions, %d refusals checked\n", g_checked,
              g_refused);
  return harness::finish("mask_extremes");
}
