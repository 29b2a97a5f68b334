// mask_builders.cpp - block-sparse pattern builders (SPEC 4): local, sink, strided, random,
// union, hierarchical and content-adaptive top-k masks, each a C ABI call returning a new mask.
//
// What each builder keeps is defined, pair by pair, in dilattn_mask.h; this file follows those
// definitions literally. Every builder works the same way: for each (head, row block) it lists
// the kept key blocks in ascending order, then finish() packs the lists into a BsrMask (SPEC 4's
// BSR layout). Cost is O(nnz) for local/sink/strided/union, O(I*J) for random and top-k, and
// O(I*J + anchor rows) for hierarchical; I*J and the anchor rows are each bounded by 2^34 so a
// huge size is refused (SIZE_OVERFLOW) instead of running for hours. Sizes up to INT64_MAX are
// accepted, so no sum or product below may pass it: each is written from a value known to be
// in range (a block's first row, a clipped window) rather than clamped after it is formed.
//
// Checked by tests/sparse/test_sparse_masks.cpp (hand-computed masks) and
// tests/sparse/test_sparse_masks.py (every builder against a brute-force definition, random against an
// independent splitmix64).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "dtype_convert.h"
#include "errors.h"
#include "handles.h"
#include "index_rules.h"
#include "tensor_checks.h"

using dilattn::set_error;

namespace {

#define LL(x) static_cast<long long>(x)

// ---------------------------------------------------------------- block geometry
// The shared vocabulary of dilattn_mask.h: last(ib), diag(ib) = [dlo, dhi], causal filter.
struct Geometry {
  int64_t Nq = 0, Nk = 0, bq = 0, bk = 0, I = 0, J = 0;

  // min((ib+1)*bq, Nq) - 1, written from the block's first row ib*bq < Nq so that (ib+1)*bq,
  // which can pass INT64_MAX when Nq is near it, is never formed.
  int64_t last_row(int64_t ib) const {
    const int64_t r0 = ib * bq;
    return r0 + dilattn::min_i64(bq, Nq - r0) - 1;
  }
  int64_t aligned_block(int64_t i) const {  // key block of clamp(i + off, 0, Nk - 1)
    const int64_t a = dilattn::causal_last_key(i, Nq, Nk);
    return dilattn::max_i64(0, dilattn::min_i64(a, Nk - 1)) / bk;
  }
  int64_t diag_lo(int64_t ib) const { return aligned_block(ib * bq); }
  int64_t diag_hi(int64_t ib) const { return aligned_block(last_row(ib)); }
  // Some (i, j) of the pair has j <= i + off: the block's first key is within the last row's limit.
  bool causal_ok(int64_t ib, int64_t jb) const {
    return jb * bk <= dilattn::causal_last_key(last_row(ib), Nq, Nk);
  }
};

// Limit on the anchor rows the hierarchical builder visits, as 2^34 bounds block pairs.
constexpr int64_t kMaxAnchorRows = int64_t{1} << 34;

dilattn_status make_geometry(int64_t Nq, int64_t Nk, int64_t bq, int64_t bk, Geometry* g) {
  const struct { const char* name; int64_t value; } dims[] = {
      {"seqlen_q", Nq}, {"seqlen_k", Nk}, {"block_q", bq}, {"block_k", bk}};
  for (const auto& d : dims)
    if (d.value < 1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s' = %lld: must be >= 1", d.name,
                       LL(d.value));
  g->Nq = Nq; g->Nk = Nk; g->bq = bq; g->bk = bk;
  // ceil_div's a + b - 1 could overflow for sizes near 2^63; this form cannot.
  g->I = Nq / bq + (Nq % bq != 0);
  g->J = Nk / bk + (Nk % bk != 0);
  // Builders may visit every (ib, jb) pair; 2^34 of them is minutes of work, not a typo.
  if (g->I > (int64_t{1} << 34) / g->J)
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW,
                     "mask of %lld x %lld blocks (Nq=%lld, Nk=%lld, bq=%lld, bk=%lld) exceeds 2^34 "
                     "block pairs", LL(g->I), LL(g->J), LL(Nq), LL(Nk), LL(bq), LL(bk));
  return DILATTN_SUCCESS;
}

// ---------------------------------------------------------------- packing into BSR
// rows[h * I + ib] lists the kept key blocks of (head h, row block ib), ascending, no repeats.
dilattn_status finish(const Geometry& g, int64_t heads, const std::vector<std::vector<int64_t>>& rows,
                      dilattn_mask* out) {
  auto m = std::make_shared<dilattn::BsrMask>();
  m->Nq = g.Nq; m->Nk = g.Nk; m->bq = g.bq; m->bk = g.bk; m->I = g.I; m->J = g.J;
  m->num_heads = heads;
  m->row_ptr.assign(static_cast<size_t>(heads * (g.I + 1)), 0);
  m->head_ptr.assign(static_cast<size_t>(heads + 1), 0);
  for (int64_t h = 0; h < heads; ++h) {
    int64_t* rp = m->row_ptr.data() + h * (g.I + 1);
    for (int64_t ib = 0; ib < g.I; ++ib) {
      const auto& r = rows[static_cast<size_t>(h * g.I + ib)];
      rp[ib + 1] = rp[ib] + static_cast<int64_t>(r.size());
      m->col_idx.insert(m->col_idx.end(), r.begin(), r.end());
    }
    m->head_ptr[static_cast<size_t>(h + 1)] = m->head_ptr[static_cast<size_t>(h)] + rp[g.I];
  }
  auto* made = new dilattn_mask_s();
  made->mask = std::move(m);
  *out = made;
  return DILATTN_SUCCESS;
}

// A one-head mask whose pair (ib, jb) is kept iff keep(ib, jb), visiting only jb in
// [range(ib).first, range(ib).second] (clipped to [0, J)), so the cost is that range's size.
template <class Range, class Keep>
dilattn_status build_1head(const Geometry& g, bool causal, Range range, Keep keep,
                           dilattn_mask* out) {
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(g.I));
  for (int64_t ib = 0; ib < g.I; ++ib) {
    const auto lr = range(ib);
    const int64_t lo = dilattn::max_i64(0, lr.first), hi = dilattn::min_i64(g.J - 1, lr.second);
    for (int64_t jb = lo; jb <= hi; ++jb)
      if (keep(ib, jb) && (!causal || g.causal_ok(ib, jb))) rows[static_cast<size_t>(ib)].push_back(jb);
  }
  return finish(g, 1, rows, out);
}

// ---------------------------------------------------------------- splitmix64
// One step of splitmix64 from state z: its output (Steele, Lea, Flood 2014; Vigna's reference).
uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// u(seed, h, ib, jb) in [0, 1): a pure function of its arguments, so every platform agrees.
double random_uniform(uint64_t seed, int64_t h, int64_t ib, int64_t jb) {
  uint64_t x = splitmix64(seed);
  x = splitmix64(x ^ static_cast<uint64_t>(h));
  x = splitmix64(x ^ static_cast<uint64_t>(ib));
  x = splitmix64(x ^ static_cast<uint64_t>(jb));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

dilattn_status check_out(const dilattn_mask* mask) {
  return mask == nullptr ? set_error(DILATTN_ERROR_NULL_POINTER, "argument 'mask' is NULL")
                         : DILATTN_SUCCESS;
}

}  // namespace

// ---------------------------------------------------------------- geometric builders
extern "C" dilattn_status dilattn_mask_local(dilattn_mask* mask, int64_t seqlen_q, int64_t seqlen_k,
                                             int64_t block_q, int64_t block_k,
                                             int64_t window_blocks, int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  Geometry g;
  if (dilattn_status s = make_geometry(seqlen_q, seqlen_k, block_q, block_k, &g)) return s;
  if (window_blocks < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'window_blocks' = %lld: must be >= 0",
                     LL(window_blocks));
  const int64_t W = dilattn::min_i64(window_blocks, g.J);  // wider than J changes nothing
  return build_1head(
      g, causal != 0,
      [&](int64_t ib) {
        return std::make_pair(g.diag_lo(ib) - W, causal ? g.diag_hi(ib) : g.diag_hi(ib) + W);
      },
      [](int64_t, int64_t) { return true; }, mask);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_mask_sink(dilattn_mask* mask, int64_t seqlen_q, int64_t seqlen_k,
                                            int64_t block_q, int64_t block_k,
                                            int64_t global_blocks, int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  Geometry g;
  if (dilattn_status s = make_geometry(seqlen_q, seqlen_k, block_q, block_k, &g)) return s;
  if (global_blocks < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'global_blocks' = %lld: must be >= 0",
                     LL(global_blocks));
  const int64_t G = global_blocks;
  return build_1head(
      g, causal != 0,
      [&](int64_t ib) { return std::make_pair(int64_t{0}, ib < G ? g.J - 1 : G - 1); },
      [](int64_t, int64_t) { return true; }, mask);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_mask_strided(dilattn_mask* mask, int64_t seqlen_q,
                                               int64_t seqlen_k, int64_t block_q, int64_t block_k,
                                               int64_t stride, int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  Geometry g;
  if (dilattn_status s = make_geometry(seqlen_q, seqlen_k, block_q, block_k, &g)) return s;
  if (stride < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'stride' = %lld: must be >= 1",
                     LL(stride));
  // Visit only dhi - t*S, t in Z, inside [0, J): start at the smallest such jb >= 0. A stride
  // above J keeps the diagonal alone, as S = J does, and cannot overflow jb + S.
  const int64_t S = dilattn::min_i64(stride, g.J);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(g.I));
  for (int64_t ib = 0; ib < g.I; ++ib) {
    const int64_t first = g.diag_hi(ib) % S;  // dhi >= 0, so this is the least jb >= 0
    for (int64_t jb = first; jb < g.J; jb += S)
      if (!causal || g.causal_ok(ib, jb)) rows[static_cast<size_t>(ib)].push_back(jb);
  }
  return finish(g, 1, rows, mask);
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_mask_random(dilattn_mask* mask, int64_t seqlen_q,
                                              int64_t seqlen_k, int64_t block_q, int64_t block_k,
                                              int64_t num_heads, double density, uint64_t seed,
                                              int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  Geometry g;
  if (dilattn_status s = make_geometry(seqlen_q, seqlen_k, block_q, block_k, &g)) return s;
  if (!(density >= 0.0 && density <= 1.0))  // also rejects NaN
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'density' = %g: must be in [0, 1]",
                     density);
  if (num_heads < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'num_heads' = %lld: must be >= 1",
                     LL(num_heads));
  // The same bound on the work as every builder's I * J <= 2^34, counted over the heads.
  if (num_heads > (int64_t{1} << 34) / (g.I * g.J))
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW,
                     "argument 'num_heads' = %lld: num_heads * I * J exceeds 2^34 block pairs "
                     "(I = %lld, J = %lld)",
                     LL(num_heads), LL(g.I), LL(g.J));
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(num_heads * g.I));
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t ib = 0; ib < g.I; ++ib)
      for (int64_t jb = 0; jb < g.J; ++jb)
        if (random_uniform(seed, h, ib, jb) < density && (!causal || g.causal_ok(ib, jb)))
          rows[static_cast<size_t>(h * g.I + ib)].push_back(jb);
  return finish(g, num_heads, rows, mask);
  DILATTN_ABI_END
}

// ---------------------------------------------------------------- union
extern "C" dilattn_status dilattn_mask_union(dilattn_mask* mask, const dilattn_mask* masks,
                                             int32_t count) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  if (masks == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'masks' is NULL");
  if (count < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'count' = %d: must be >= 1", count);
  int64_t heads = 1;
  for (int32_t t = 0; t < count; ++t) {
    char what[24];
    std::snprintf(what, sizeof what, "masks[%d]", static_cast<int>(t));
    if (dilattn_status s = dilattn::check_handle(masks[t], what)) return s;
    const dilattn::BsrMask& a = *masks[t]->mask;
    const dilattn::BsrMask& m0 = *masks[0]->mask;
    if (a.Nq != m0.Nq || a.Nk != m0.Nk || a.bq != m0.bq || a.bk != m0.bk)
      return set_error(DILATTN_ERROR_BAD_MASK,
                       "masks[%d] is Nq=%lld Nk=%lld bq=%lld bk=%lld, masks[0] is Nq=%lld Nk=%lld "
                       "bq=%lld bk=%lld", t, LL(a.Nq), LL(a.Nk), LL(a.bq), LL(a.bk), LL(m0.Nq),
                       LL(m0.Nk), LL(m0.bq), LL(m0.bk));
    if (a.num_heads > 1 && heads > 1 && a.num_heads != heads)
      return set_error(DILATTN_ERROR_BAD_MASK, "masks[%d] has %lld heads, an earlier mask %lld",
                       t, LL(a.num_heads), LL(heads));
    heads = dilattn::max_i64(heads, a.num_heads);
  }
  const dilattn::BsrMask& m0 = *masks[0]->mask;
  Geometry g;
  g.Nq = m0.Nq; g.Nk = m0.Nk; g.bq = m0.bq; g.bk = m0.bk; g.I = m0.I; g.J = m0.J;
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(heads * g.I));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t ib = 0; ib < g.I; ++ib) {
      auto& r = rows[static_cast<size_t>(h * g.I + ib)];
      for (int32_t t = 0; t < count; ++t) {
        int64_t n = 0;
        const int64_t* cols = masks[t]->mask->row_cols(h, ib, &n);  // 1-head masks broadcast
        r.insert(r.end(), cols, cols + n);
      }
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
    }
  return finish(g, heads, rows, mask);
  DILATTN_ABI_END
}

// ---------------------------------------------------------------- hierarchical
extern "C" dilattn_status dilattn_mask_hierarchical(dilattn_mask* mask, int64_t seqlen_q,
                                                    int64_t seqlen_k, int64_t block_q,
                                                    int64_t block_k, int32_t levels,
                                                    const int64_t* strides, const int64_t* windows,
                                                    const int64_t* block_sizes, int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  Geometry g;
  if (dilattn_status s = make_geometry(seqlen_q, seqlen_k, block_q, block_k, &g)) return s;
  if (levels < 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'levels' = %d: must be >= 1", levels);
  if (strides == nullptr || windows == nullptr || block_sizes == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s' is NULL",
                     strides == nullptr ? "strides" : windows == nullptr ? "windows" : "block_sizes");
  for (int32_t l = 0; l < levels; ++l) {
    if (strides[l] < 1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "strides[%d] = %lld: must be >= 1", l,
                       LL(strides[l]));
    if (windows[l] < -1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "windows[%d] = %lld: must be >= 0 or -1", l,
                       LL(windows[l]));
    if (block_sizes[l] < 1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "block_sizes[%d] = %lld: must be >= 1", l,
                       LL(block_sizes[l]));
  }
  // Every anchor row is visited once, so bound their number as make_geometry bounds block
  // pairs: sum over levels of ceil(Nq / s) <= 2^34 (strides >= 1 were checked above).
  int64_t anchors = 0;
  for (int32_t l = 0; l < levels; ++l) {
    const int64_t level_anchors = dilattn::ceil_div(g.Nq, strides[l]);
    if (level_anchors > kMaxAnchorRows - anchors)  // not anchors + level_anchors: may overflow
      return set_error(DILATTN_ERROR_SIZE_OVERFLOW,
                       "strides[%d] = %lld: the levels anchor more than 2^34 query rows of "
                       "seqlen_q = %lld (each anchor row is visited; raise the strides)",
                       l, LL(strides[l]), LL(g.Nq));
    anchors += level_anchors;
  }
  // Per row block, mark the key blocks each anchor reaches with a difference array over [0, J].
  // Sizes may be near INT64_MAX, so every sum below is ordered to stay inside [0, Nk) or
  // (-Nq, Nk) instead of being clamped after it is formed.
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(g.I));
  std::vector<int64_t> diff(static_cast<size_t>(g.J + 1));
  for (int64_t ib = 0; ib < g.I; ++ib) {
    std::fill(diff.begin(), diff.end(), 0);
    const int64_t r0 = ib * g.bq, r1 = g.last_row(ib);
    for (int32_t l = 0; l < levels; ++l) {
      const int64_t s = strides[l], half = windows[l] < 0 ? -1 : windows[l] / 2;
      const int64_t c = block_sizes[l];
      // The first anchor i >= r0 with i mod s == 0, if it is <= r1.
      const int64_t to_next = (s - r0 % s) % s;
      if (to_next > r1 - r0) continue;
      for (int64_t i = r0 + to_next;; i += s) {
        int64_t lo = 0, hi = g.Nk - 1;  // keys reached, inclusive; w = -1: every key
        if (half >= 0) {
          const int64_t a = dilattn::causal_last_key(i, g.Nq, g.Nk);  // in (-Nq, Nk)
          lo = a <= half ? 0 : a - half;
          hi = a >= 0 && half >= g.Nk - 1 - a ? g.Nk - 1 : dilattn::min_i64(g.Nk - 1, a + half);
          if (lo <= hi) {  // else the window lies wholly outside [0, Nk)
            lo = lo / c * c;  // widened outward to multiples of c, clipped to [0, Nk)
            const int64_t hi_start = hi / c * c;
            hi = g.Nk - 1 - hi_start < c ? g.Nk - 1 : hi_start + c - 1;
          }
        }
        if (lo <= hi) {
          ++diff[static_cast<size_t>(lo / g.bk)];
          --diff[static_cast<size_t>(hi / g.bk + 1)];
        }
        if (r1 - i < s) break;  // the next anchor is past the block (i + s may pass INT64_MAX)
      }
    }
    int64_t run = 0;
    for (int64_t jb = 0; jb < g.J; ++jb) {
      run += diff[static_cast<size_t>(jb)];
      if (run > 0 && (!causal || g.causal_ok(ib, jb))) rows[static_cast<size_t>(ib)].push_back(jb);
    }
  }
  return finish(g, 1, rows, mask);
  DILATTN_ABI_END
}

// ---------------------------------------------------------------- content-adaptive top-k
namespace {

// Mean over the batch and the rows of each block of x ([B, N, heads, D]): out[hd][blk][d].
std::vector<double> block_means(const dilattn_tensor& x, int64_t B, int64_t N, int64_t heads,
                                int64_t D, int64_t bsz, int64_t nblocks) {
  std::vector<double> out(static_cast<size_t>(heads * nblocks * D), 0.0);
  for (int64_t hd = 0; hd < heads; ++hd)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      double* acc = out.data() + (hd * nblocks + blk) * D;
      const int64_t n0 = blk * bsz, n1 = n0 + dilattn::min_i64(bsz, N - n0);  // no n0 + bsz
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t d = 0; d < D; ++d)
            acc[d] += dilattn::load_element(x.data, x.dtype, dilattn::element_offset(x, b, n, hd, d));
      const double count = static_cast<double>(B) * static_cast<double>(n1 - n0);
      for (int64_t d = 0; d < D; ++d) acc[d] /= count;
    }
  return out;
}

}  // namespace

extern "C" dilattn_status dilattn_mask_topk(dilattn_mask* mask, const dilattn_tensor* q,
                                            const dilattn_tensor* k, int64_t block_q,
                                            int64_t block_k, int64_t k_keep, int32_t causal) {
  DILATTN_ABI_BEGIN
  if (dilattn_status s = check_out(mask)) return s;
  // q's dtype becomes the one k must match, so q's own fields are checked first and a bad q
  // dtype is blamed on q.
  if (dilattn_status s = dilattn::check_tensor_view(q, "q")) return s;
  if (dilattn_status s = dilattn::check_tensor_view(k, "k")) return s;
  if (k->dtype != q->dtype)
    return set_error(DILATTN_ERROR_DTYPE_MISMATCH, "argument 'k': dtype %s, q has %s",
                     dilattn::dtype_name(k->dtype), dilattn::dtype_name(q->dtype));
  for (int a = 0; a < 4; ++a)
    if (q->shape[a] < 1 || k->shape[a] < 1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s' shape[%d] = %lld: must be >= 1",
                       q->shape[a] < 1 ? "q" : "k", a,
                       LL(q->shape[a] < 1 ? q->shape[a] : k->shape[a]));
  dilattn::Problem p;  // only to reuse the tensor checks of SPEC 1 / 7
  p.B = q->shape[0]; p.Nq = q->shape[1]; p.H = q->shape[2]; p.D = q->shape[3];
  p.Nk = k->shape[1]; p.Hkv = k->shape[2]; p.dtype = q->dtype;
  if (p.H % p.Hkv != 0)
    return set_error(DILATTN_ERROR_HEADS_NOT_DIVISIBLE, "k shape[2] = %lld does not divide q shape[2] = %lld",
                     LL(p.Hkv), LL(p.H));
  if (dilattn_status s = dilattn::check_tensor(p, q, "q", dilattn::TensorRole::q)) return s;
  if (dilattn_status s = dilattn::check_tensor(p, k, "k", dilattn::TensorRole::kv)) return s;
  if (q->device != DILATTN_DEVICE_CPU || k->device != DILATTN_DEVICE_CPU)
    return set_error(DILATTN_ERROR_DEVICE_MISMATCH, "argument '%s' is not in host memory",
                     q->device != DILATTN_DEVICE_CPU ? "q" : "k");
  Geometry g;
  if (dilattn_status s = make_geometry(p.Nq, p.Nk, block_q, block_k, &g)) return s;
  if (k_keep < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'k_keep' = %lld: must be >= 0",
                     LL(k_keep));
  if (p.H > (int64_t{1} << 34) / (g.I * g.J))
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "top-k over %lld heads x %lld x %lld blocks",
                     LL(p.H), LL(g.I), LL(g.J));
  const std::vector<double> qbar = block_means(*q, p.B, p.Nq, p.H, p.D, g.bq, g.I);
  const std::vector<double> kbar = block_means(*k, p.B, p.Nk, p.Hkv, p.D, g.bk, g.J);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(p.H * g.I));
  std::vector<std::pair<double, int64_t>> cand;
  for (int64_t h = 0; h < p.H; ++h) {
    const int64_t hk = dilattn::kv_head_of(h, p.H, p.Hkv);
    for (int64_t ib = 0; ib < g.I; ++ib) {
      cand.clear();
      const double* qv = qbar.data() + (h * g.I + ib) * p.D;
      for (int64_t jb = 0; jb < g.J; ++jb) {
        if (causal && !g.causal_ok(ib, jb)) continue;
        const double* kv = kbar.data() + (hk * g.J + jb) * p.D;
        double s = 0;
        for (int64_t d = 0; d < p.D; ++d) s += qv[d] * kv[d];
        if (std::isnan(s)) s = -HUGE_VAL;  // a NaN input ranks last, keeping the order total
        cand.push_back({s, jb});
      }
      // Best first; equal scores keep the lower key block (a total order: same result everywhere).
      const size_t keep = static_cast<size_t>(dilattn::min_i64(k_keep, static_cast<int64_t>(cand.size())));
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                        [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
                          return a.first != b.first ? a.first > b.first : a.second < b.second;
                        });
      auto& r = rows[static_cast<size_t>(h * g.I + ib)];
      for (size_t t = 0; t < keep; ++t) r.push_back(cand[t].second);
      for (int64_t jb = g.diag_lo(ib); jb <= g.diag_hi(ib); ++jb)
        if (!causal || g.causal_ok(ib, jb)) r.push_back(jb);
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
    }
  }
  return finish(g, p.H, rows, mask);
  DILATTN_ABI_END
}
