// ring_pairs.cpp - a (query range, key range) pair as backend sub-problems (see ring_pairs.h).
#include "ring_pairs.h"

#include <memory>

#include "dtype_convert.h"
#include "errors.h"

namespace dilattn {

namespace {

// The sub-problem of p with nq queries, nk keys, nh query and ng kv heads, dense.
Problem dense_sub_problem(const Problem& p, int64_t nq, int64_t nk, int64_t nh, int64_t ng,
                          bool causal) {
  Problem s = p;
  s.Nq = nq;
  s.Nk = nk;
  s.H = nh;
  s.Hkv = ng;
  s.kind = DILATTN_KIND_DENSE;
  s.branches.clear();
  s.mask.reset();
  s.causal = causal;
  s.sinks = false;  // added once per row by the ring's merge (ring_forward.cpp)
  return s;
}

// SPEC 5: p's sub-problem at queries qs and keys ks (sequence positions, equal steps) and heads
// from h0, placed in the whole problem when p has an option that depends on positions.
void place(const Problem& p, const KeyProgression& qs, const KeyProgression& ks, int64_t h0,
           Problem* sub) {
  if (!ring_places(p)) return;
  sub->placed = true;
  sub->place = Placement{qs.first, qs.step, ks.first, ks.step, p.Nq, p.Nk, h0, p.H};
}

// The mask rows of query range qr and the columns of key range kr, renumbered from 0. Both
// ranges start on block boundaries (check_ring_split).
std::shared_ptr<const BsrMask> sub_mask(const BsrMask& m, const RowRange& qr, const RowRange& kr) {
  auto s = std::make_shared<BsrMask>();
  s->Nq = qr.count;
  s->Nk = kr.count;
  s->bq = m.bq;
  s->bk = m.bk;
  s->num_heads = m.num_heads;
  s->I = ceil_div(qr.count, m.bq);
  s->J = ceil_div(kr.count, m.bk);
  const int64_t ib0 = qr.first / m.bq, jb0 = kr.first / m.bk;
  s->head_ptr.push_back(0);
  for (int64_t h = 0; h < m.num_heads; ++h) {
    int64_t nnz = 0;
    s->row_ptr.push_back(0);
    for (int64_t ib = 0; ib < s->I; ++ib) {
      int64_t count;
      const int64_t* cols = m.row_cols(h, ib0 + ib, &count);
      for (int64_t c = 0; c < count; ++c)
        if (cols[c] >= jb0 && cols[c] < jb0 + s->J) {
          s->col_idx.push_back(cols[c] - jb0);
          ++nnz;
        }
      s->row_ptr.push_back(nnz);
    }
    s->head_ptr.push_back(s->head_ptr.back() + nnz);
  }
  return s;
}

bool on_block_boundary(int64_t x, int64_t bs, int64_t N) { return x % bs == 0 || x == N; }

}  // namespace

KeyProgression key_reach(const Problem& p, const KeyProgression& qs, const KeyProgression& ks) {
  if (!p.has_window() || qs.count == 0) return ks;
  const int64_t d = p.Nk - p.Nq;
  const int64_t q_last = progression_at(qs, qs.count - 1);
  const int64_t lo = p.window_left < 0 ? ks.first
                                       : qs.first + d - window_bound(p.window_left, p.Nq, p.Nk);
  const int64_t hi = p.window_right < 0 ? progression_at(ks, ks.count - 1)
                                        : q_last + d + window_bound(p.window_right, p.Nq, p.Nk);
  return range_cut(ks, lo, hi);
}

CausalPart causal_part(const Problem& p, const RowRange& qr, const RowRange& kr) {
  if (!p.causal) return CausalPart::full;
  if (kr.first >= qr.first + qr.count) return CausalPart::skip;  // every key after every query
  if (kr.first + kr.count <= qr.first) return CausalPart::full;  // every key before every query
  if (kr.first == qr.first && kr.count == qr.count) return CausalPart::diagonal;
  return CausalPart::straddle;  // never from ring_shard.h's splits
}

dilattn_status check_ring_split(const Problem& p, int32_t num_ranks, int32_t split) {
  if (p.kind != DILATTN_KIND_BLOCK_SPARSE) return DILATTN_SUCCESS;
  const BsrMask& m = *p.mask;
  for (int32_t r = 0; r < num_ranks; ++r) {
    const ShardRows rows = shard_rows(p.Nq, num_ranks, r, split);
    for (const RowRange& range : rows.range) {
      if (range.count == 0) continue;
      const int64_t ends[2] = {range.first, range.first + range.count};
      for (int64_t x : ends)
        if (!on_block_boundary(x, m.bq, p.Nq) || !on_block_boundary(x, m.bk, p.Nk))
          return set_error(DILATTN_ERROR_UNSUPPORTED,
                           "ring attention: rank %d's rows [%lld, %lld) cut a mask block "
                           "(bq = %lld, bk = %lld); block-sparse ring attention needs every "
                           "shard boundary on a block boundary",
                           static_cast<int>(r), static_cast<long long>(ends[0]),
                           static_cast<long long>(ends[1]), static_cast<long long>(m.bq),
                           static_cast<long long>(m.bk));
    }
  }
  return DILATTN_SUCCESS;
}

dilattn_status for_each_sub_call(const Problem& p, const RowRange& qr, const RowRange& kr,
                                 dilattn_status (*prepare)(Problem& p),
                                 const std::function<dilattn_status(const SubCall&)>& run) {
  if (qr.count == 0 || kr.count == 0) return DILATTN_SUCCESS;
  const CausalPart part = causal_part(p, qr, kr);
  if (part == CausalPart::skip) return DILATTN_SUCCESS;
  if (part == CausalPart::straddle)
    return set_error(DILATTN_ERROR_INTERNAL, "ring attention: query rows [%lld, +%lld) and key "
                     "rows [%lld, +%lld) overlap without being equal",
                     static_cast<long long>(qr.first), static_cast<long long>(qr.count),
                     static_cast<long long>(kr.first), static_cast<long long>(kr.count));
  const bool causal = part == CausalPart::diagonal;

  if (p.kind != DILATTN_KIND_DILATED) {
    const KeyProgression qs{qr.first, 1, qr.count};
    // The keys the window lets the queries reach; a block-sparse pair keeps its whole key
    // range (its sub-mask starts on a block boundary), the backend cutting each row.
    KeyProgression ks = key_reach(p, qs, KeyProgression{kr.first, 1, kr.count});
    if (ks.count == 0) return DILATTN_SUCCESS;
    if (p.kind == DILATTN_KIND_BLOCK_SPARSE) ks = KeyProgression{kr.first, 1, kr.count};
    SubCall call;
    call.sub = dense_sub_problem(p, qr.count, ks.count, p.H, p.Hkv, causal);
    place(p, qs, ks, 0, &call.sub);
    if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
      call.sub.kind = DILATTN_KIND_BLOCK_SPARSE;
      call.sub.mask = sub_mask(*p.mask, qr, kr);
      call.sub.backend_state.reset();  // the plan's holds the whole mask
      if (prepare != nullptr) {
        if (dilattn_status s = prepare(call.sub)) return s;
      }
    }
    call.q_rows = {qr.local, 1, qr.count};
    call.k_rows = {ks.first - kr.first + kr.local, 1, ks.count};
    return run(call);
  }

  return for_each_dilated_pair(p, qr, kr, [&](int64_t h, const KeyProgression& qs,
                                                const KeyProgression& segment_keys) {
    const int64_t r = qs.step;
    const KeyProgression ks = key_reach(p, qs, segment_keys);
    if (ks.count == 0) return DILATTN_SUCCESS;
    SubCall call;
    call.sub = dense_sub_problem(p, qs.count, ks.count, 1, 1, causal);
    place(p, qs, ks, h, &call.sub);
    call.h0 = h;
    call.g0 = kv_head_of(h, p.H, p.Hkv);
    call.q_rows = {qs.first - qr.first + qr.local, r, qs.count};
    call.k_rows = {ks.first - kr.first + kr.local, r, ks.count};
    return run(call);
  });
}

dilattn_tensor rows_view(const dilattn_tensor& t, const KeyProgression& rows, int64_t h0,
                         int64_t nh) {
  dilattn_tensor v = t;
  const int64_t offset = rows.first * t.strides[1] + h0 * t.strides[2];
  v.data = static_cast<unsigned char*>(t.data) + offset * static_cast<int64_t>(dtype_size(t.dtype));
  v.shape[1] = rows.count;
  v.shape[2] = nh;
  // One row: its stride is never used, and step * stride may not fit (r near INT64_MAX).
  v.strides[1] = rows.count > 1 ? t.strides[1] * rows.step : t.strides[1];
  return v;
}

dilattn_tensor lse_rows_view(const dilattn_tensor& t, const KeyProgression& rows, int64_t h0,
                             int64_t nh) {
  dilattn_tensor v = t;
  const int64_t offset = h0 * t.strides[1] + rows.first * t.strides[2];
  v.data = static_cast<unsigned char*>(t.data) + offset * static_cast<int64_t>(dtype_size(t.dtype));
  v.shape[1] = nh;
  v.shape[2] = rows.count;
  v.strides[2] = rows.count > 1 ? t.strides[2] * rows.step : t.strides[2];
  return v;
}

}  // namespace dilattn
