// ring_tensor_ops.h - the element loops of the ring in host memory (ring_ops_host.cpp; the
// device's kernels are cuda/ring_ops.cu): copy a view, add one into another, pack and unpack
// the rows another rank needs, and the SPEC 5 merge of a partial (O_b, LSE_b) into the
// running (O, LSE), all over strided views of equal shape. Arithmetic in f64, stored in each view's dtype (the accumulators are f32, or f64 for
// f64 plans, so a partial is rounded once per merge).
#ifndef DILATTN_RING_TENSOR_OPS_H
#define DILATTN_RING_TENSOR_OPS_H

#include <cstring>

#include "dtype_convert.h"
#include "ring_ops.h"
#include "softmax_rules.h"

namespace dilattn {

// Calls f(offset in a, offset in b) for every element of two views of a's shape.
template <class F>
void for_each_element(const dilattn_tensor& a, const dilattn_tensor& b, F&& f) {
  for (int64_t i0 = 0; i0 < a.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < a.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < a.shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < a.shape[3]; ++i3)
          f(element_offset(a, i0, i1, i2, i3), element_offset(b, i0, i1, i2, i3));
}

// dst = src (converted when the dtypes differ; bytes copied when they agree).
inline void copy_view(const dilattn_tensor& src, const dilattn_tensor& dst) {
  if (src.dtype == dst.dtype) {
    const size_t size = dtype_size(src.dtype);
    const auto* from = static_cast<const unsigned char*>(src.data);
    auto* to = static_cast<unsigned char*>(dst.data);
    for_each_element(src, dst, [&](int64_t s, int64_t d) {
      std::memcpy(to + d * static_cast<int64_t>(size), from + s * static_cast<int64_t>(size), size);
    });
    return;
  }
  for_each_element(src, dst, [&](int64_t s, int64_t d) {
    store_element(dst.data, dst.dtype, d, load_element(src.data, src.dtype, s));
  });
}

// acc += part.
inline void add_view(const dilattn_tensor& part, const dilattn_tensor& acc) {
  for_each_element(part, acc, [&](int64_t s, int64_t d) {
    store_element(acc.data, acc.dtype, d,
                  load_element(acc.data, acc.dtype, d) + load_element(part.data, part.dtype, s));
  });
}

// Fills every element of a view with x.
inline void fill_view(const dilattn_tensor& t, double x) {
  for_each_element(t, t, [&](int64_t d, int64_t) { store_element(t.data, t.dtype, d, x); });
}

// The view [B, count, heads, D] of run `run` of t ([B, n, Hkv, D]).
inline dilattn_tensor run_view(const dilattn_tensor& t, const RowRun& run) {
  dilattn_tensor v = t;
  v.data = static_cast<unsigned char*>(t.data) +
           (run.first * t.strides[1] + run.head * t.strides[2]) *
               static_cast<int64_t>(dtype_size(t.dtype));
  v.shape[1] = run.count;
  v.shape[2] = run.heads;
  return v;
}

// Calls f(run's view of full, its packed block as a contiguous view) for every run of
// `runs`, the blocks back to back from `packed` (ring_ops.h pack_rows / unpack_rows).
template <class F>
void for_each_packed_run(const dilattn_tensor& full, const RowRuns& runs, void* packed, F&& f) {
  auto* at = static_cast<unsigned char*>(packed);
  for (const RowRun& run : runs) {
    const dilattn_tensor part = run_view(full, run);
    const dilattn_tensor block =
        dilattn_tensor_contiguous(at, full.dtype, full.shape[0], run.count, run.heads, full.shape[3]);
    f(part, block);
    at += full.shape[0] * run.count * run.heads * full.shape[3] *
          static_cast<int64_t>(dtype_size(full.dtype));
  }
}

inline void pack_row_runs(const dilattn_tensor& full, const RowRuns& runs, void* packed) {
  for_each_packed_run(full, runs, packed,
                      [](const dilattn_tensor& part, const dilattn_tensor& block) {
                        copy_view(part, block);
                      });
}

inline void unpack_row_runs(const void* packed, const RowRuns& runs, const dilattn_tensor& full,
                            bool add) {
  for_each_packed_run(full, runs, const_cast<void*>(packed),
                      [&](const dilattn_tensor& part, const dilattn_tensor& block) {
                        if (add)
                          add_view(block, part);
                        else
                          copy_view(block, part);
                      });
}

// SPEC 5: (o, lse) <- merge of (o, lse) and (o_b, lse_b), row by row (softmax_rules.h).
// o, o_b: [B, n, nh, D]; lse, lse_b: [B, nh, n, 1].
inline void merge_partial(const dilattn_tensor& o_b, const dilattn_tensor& lse_b,
                          const dilattn_tensor& o, const dilattn_tensor& lse) {
  for (int64_t b = 0; b < o.shape[0]; ++b)
    for (int64_t h = 0; h < o.shape[2]; ++h)
      for (int64_t i = 0; i < o.shape[1]; ++i) {
        const int64_t at = element_offset(lse, b, h, i, 0);
        const double old_lse = load_element(lse.data, lse.dtype, at);
        const double part_lse = load_element(lse_b.data, lse_b.dtype, element_offset(lse_b, b, h, i, 0));
        const double merged = merge_lse(old_lse, part_lse);
        const double w_old = merge_weight(old_lse, merged), w_part = merge_weight(part_lse, merged);
        store_element(lse.data, lse.dtype, at, merged);
        for (int64_t d = 0; d < o.shape[3]; ++d) {
          const int64_t od = element_offset(o, b, i, h, d);
          const double part = load_element(o_b.data, o_b.dtype, element_offset(o_b, b, i, h, d));
          const double acc = load_element(o.data, o.dtype, od);
          store_element(o.data, o.dtype, od, merge_element(w_old, acc, w_part, part));
        }
      }
}

}  // namespace dilattn

#endif  // DILATTN_RING_TENSOR_OPS_H
