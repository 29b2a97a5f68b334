// kernel_case.h - one attention case run through the public C ABI on two backends: emu (the
// CUDA backend's kernels in the SIMT emulator) and ref (the f64 reference), for the tests in
// tests/kernels/. Header-only so each test stays one file.
//
// Inputs are fixed-seed random numbers rounded to the case's dtype; the reference receives the
// same rounded values widened to f64 (exact), so the comparison sees only the kernel's error.
// Q, K, V and O may be padded views (row stride D + pad) to exercise strided gathers.
#ifndef DILATTN_TESTS_KERNEL_CASE_H
#define DILATTN_TESTS_KERNEL_CASE_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dilattn.h"
#include "../common/spec_tolerance.h"
#include "dtype_convert.h"
#include "simt.h"

namespace kcase {

struct Case {
  std::string name;
  dilattn_dtype dtype = DILATTN_F32;
  int64_t B = 1, Nq = 16, Nk = 16, H = 1, Hkv = 1, D = 8;
  dilattn_kind kind = DILATTN_KIND_DENSE;
  bool causal = false;
  std::vector<int64_t> segments, dilations;  // dilated
  dilattn_head_mode head_mode = DILATTN_HEADS_MOD;
  // Block-sparse: BSR arrays as dilattn_bsr_view takes them (int64).
  int64_t bq = 16, bk = 16, mask_heads = 1;
  std::vector<int64_t> row_ptr, col_idx, head_ptr;
  int64_t pad = 0;  // extra elements after each row of D in Q, K, V, O
  double scale = 0;  // 0: the default 1/sqrt(D)
};

// Storage for a [d0, d1, d2, D] view whose rows of D are `pad` elements apart.
struct Buffer {
  std::vector<unsigned char> bytes;
  dilattn_tensor view{};
};

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline Buffer make_buffer(dilattn_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t D,
                          int64_t pad) {
  Buffer b;
  const int64_t row = D + pad;
  b.bytes.assign(static_cast<size_t>(d0 * d1 * d2 * row) * dilattn::dtype_size(dtype), 0);
  b.view = dilattn_tensor_contiguous(b.bytes.data(), dtype, d0, d1, d2, D);
  b.view.strides[2] = row;
  b.view.strides[1] = d2 * row;
  b.view.strides[0] = d1 * d2 * row;
  return b;
}

// Fills a view with uniform values in [-2, 2) rounded to its dtype; returns them as f64
// contiguous [d0, d1, d2, D] (what the reference receives).
inline std::vector<double> fill_random(Buffer& b, uint64_t seed) {
  const dilattn_tensor& t = b.view;
  std::vector<double> exact;
  for (int64_t i0 = 0; i0 < t.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < t.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < t.shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < t.shape[3]; ++i3) {
          const double x = static_cast<double>(splitmix64(seed) >> 11) * 0x1.0p-53 * 4.0 - 2.0;
          const int64_t at = dilattn::element_offset(t, i0, i1, i2, i3);
          dilattn::store_element(t.data, t.dtype, at, x);
          exact.push_back(dilattn::load_element(t.data, t.dtype, at));
        }
  return exact;
}

inline std::vector<double> read_all(const dilattn_tensor& t) {
  std::vector<double> out;
  for (int64_t i0 = 0; i0 < t.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < t.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < t.shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < t.shape[3]; ++i3)
          out.push_back(dilattn::load_element(t.data, t.dtype, dilattn::element_offset(t, i0, i1, i2, i3)));
  return out;
}

struct Outputs {
  std::vector<double> o, lse;
  std::vector<unsigned char> o_bytes, lse_bytes;  // raw, for bitwise comparisons
};

inline bool check(dilattn_status s, const char* what, const std::string& name) {
  if (s == DILATTN_SUCCESS) return true;
  std::fprintf(stderr, "%s: %s: %s: %s\n", name.c_str(), what, dilattn_status_string(s),
               dilattn_last_error());
  return false;
}

// A description of the case (the caller destroys it).
inline bool make_desc(const Case& c, dilattn_desc* desc) {
  if (!check(dilattn_desc_create(desc), "desc_create", c.name)) return false;
  if (!check(dilattn_desc_set_causal(*desc, c.causal ? 1 : 0), "set_causal", c.name)) return false;
  if (c.scale != 0 && !check(dilattn_desc_set_scale(*desc, c.scale), "set_scale", c.name))
    return false;
  if (c.kind == DILATTN_KIND_DILATED)
    return check(dilattn_desc_set_dilated(*desc, static_cast<int32_t>(c.segments.size()),
                                          c.segments.data(), c.dilations.data(), c.head_mode),
                 "set_dilated", c.name);
  if (c.kind == DILATTN_KIND_BLOCK_SPARSE) {
    dilattn_bsr_view v{};
    v.struct_size = sizeof(v);
    v.seqlen_q = c.Nq;
    v.seqlen_k = c.Nk;
    v.block_q = c.bq;
    v.block_k = c.bk;
    v.num_heads = c.mask_heads;
    v.index_type = DILATTN_INDEX_INT64;
    v.row_ptr = c.row_ptr.data();
    v.col_idx = c.col_idx.data();
    v.head_ptr = c.mask_heads > 1 ? c.head_ptr.data() : nullptr;
    dilattn_mask mask = nullptr;
    if (!check(dilattn_mask_create(&mask, &v), "mask_create", c.name)) return false;
    const bool ok = check(dilattn_desc_set_block_sparse(*desc, mask), "set_block_sparse", c.name);
    dilattn_mask_destroy(mask);
    return ok;
  }
  return true;
}

// Runs the case on `backend` with inputs q, k, v (already filled); O in the input dtype (or
// f64 for ref), LSE f32 (f64 for ref).
inline bool run(const Case& c, dilattn_backend backend, const dilattn_tensor& q,
                const dilattn_tensor& k, const dilattn_tensor& v, Outputs* out,
                dilattn_status* status = nullptr) {
  dilattn_desc desc = nullptr;
  if (!make_desc(c, &desc)) {
    dilattn_desc_destroy(desc);
    return false;
  }
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
  bool ok = check(dilattn_plan_create(&plan, desc, &shape, q.dtype, backend),
                  "plan_create", c.name);
  dilattn_desc_destroy(desc);
  if (!ok) return false;
  const dilattn_dtype lse_dtype = q.dtype == DILATTN_F64 ? DILATTN_F64 : DILATTN_F32;
  Buffer o = make_buffer(q.dtype, c.B, c.Nq, c.H, c.D, backend == DILATTN_BACKEND_REF ? 0 : c.pad);
  Buffer lse = make_buffer(lse_dtype, c.B, c.H, c.Nq, 1, 0);
  // Poison the outputs: every element must be written.
  std::memset(o.bytes.data(), 0x7f, o.bytes.size());
  std::memset(lse.bytes.data(), 0x7f, lse.bytes.size());
  const dilattn_status s = dilattn_forward(plan, &q, &k, &v, &o.view, &lse.view, nullptr, 0);
  dilattn_plan_destroy(plan);
  if (status != nullptr) *status = s;
  if (!check(s, "forward", c.name)) return false;
  out->o = read_all(o.view);
  out->lse = read_all(lse.view);
  out->o_bytes = o.bytes;
  out->lse_bytes = lse.bytes;
  return true;
}

// Runs the case on emu under the emulator's ascending, descending and shuffled thread orders;
// *asc receives the ascending run. False when a run fails or the three differ in any bit (a
// race, or a sum whose order depends on the thread order).
inline bool run_emu_in_thread_orders(const Case& c, const dilattn_tensor& q,
                                     const dilattn_tensor& k, const dilattn_tensor& v,
                                     Outputs* asc) {
  Outputs desc, shuffled;
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::ascending);
    if (!run(c, DILATTN_BACKEND_EMU, q, k, v, asc)) return false;
  }
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::descending);
    if (!run(c, DILATTN_BACKEND_EMU, q, k, v, &desc)) return false;
  }
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::shuffled, 12345);
    if (!run(c, DILATTN_BACKEND_EMU, q, k, v, &shuffled)) return false;
  }
  const bool same = asc->o_bytes == desc.o_bytes && asc->lse_bytes == desc.lse_bytes &&
                    asc->o_bytes == shuffled.o_bytes && asc->lse_bytes == shuffled.lse_bytes;
  if (!same) std::fprintf(stderr, "%s: thread orders give different bits\n", c.name.c_str());
  return same;
}

// Widens f64 values into a new contiguous f64 view.
inline Buffer f64_copy(const std::vector<double>& x, int64_t d0, int64_t d1, int64_t d2, int64_t D) {
  Buffer b = make_buffer(DILATTN_F64, d0, d1, d2, D, 0);
  std::memcpy(b.bytes.data(), x.data(), x.size() * sizeof(double));
  return b;
}

// SPEC 8 tolerances by dtype.
inline void tolerances(dilattn_dtype t, double* atol, double* rtol) {
  const spec8::Tolerance tol = spec8::of(t);
  *atol = tol.atol;
  *rtol = tol.rtol;
}

// Counts elements outside |x - ref| <= atol + rtol |ref| (infinities must match exactly),
// printing the first few.
inline int64_t count_bad(const std::string& what, const std::vector<double>& got,
                         const std::vector<double>& want, double atol, double rtol) {
  int64_t bad = 0;
  if (got.size() != want.size()) {
    std::fprintf(stderr, "%s: %zu values, reference has %zu\n", what.c_str(), got.size(), want.size());
    return 1;
  }
  for (size_t n = 0; n < got.size(); ++n) {
    const double g = got[n], w = want[n];
    bool ok;
    if (std::isinf(w) || std::isinf(g)) ok = g == w;
    else ok = std::fabs(g - w) <= atol + rtol * std::fabs(w);  // false for NaN
    if (!ok && bad++ < 5)
      std::fprintf(stderr, "%s[%zu]: got %.9g, reference %.9g\n", what.c_str(), n, g, w);
  }
  return bad;
}

// ---------------------------------------------------------------- backward (SPEC 6)
struct Gradients {
  std::vector<double> dq, dk, dv;
  std::vector<unsigned char> bytes;  // dq, dk, dv raw, for bitwise comparisons
};

// Runs the case's forward and then its backward on `backend` (O and LSE from that backend's
// own forward, as a training step would), with upstream gradient d_o; gradients in the input
// dtype, written into poisoned buffers so every element must be written.
inline bool run_backward(const Case& c, dilattn_backend backend, const dilattn_tensor& q,
                         const dilattn_tensor& k, const dilattn_tensor& v,
                         const dilattn_tensor& d_o, Gradients* out) {
  dilattn_desc desc = nullptr;
  if (!make_desc(c, &desc)) {
    dilattn_desc_destroy(desc);
    return false;
  }
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
  bool ok = check(dilattn_plan_create(&plan, desc, &shape, q.dtype, backend), "plan_create",
                  c.name);
  dilattn_desc_destroy(desc);
  if (!ok) return false;
  const dilattn_dtype lse_dtype = q.dtype == DILATTN_F64 ? DILATTN_F64 : DILATTN_F32;
  const int64_t pad = backend == DILATTN_BACKEND_REF ? 0 : c.pad;
  Buffer o = make_buffer(q.dtype, c.B, c.Nq, c.H, c.D, pad);
  Buffer lse = make_buffer(lse_dtype, c.B, c.H, c.Nq, 1, 0);
  Buffer dq = make_buffer(q.dtype, c.B, c.Nq, c.H, c.D, pad);
  Buffer dk = make_buffer(q.dtype, c.B, c.Nk, c.Hkv, c.D, pad);
  Buffer dv = make_buffer(q.dtype, c.B, c.Nk, c.Hkv, c.D, pad);
  for (Buffer* b : {&dq, &dk, &dv}) std::memset(b->bytes.data(), 0x7f, b->bytes.size());
  ok = check(dilattn_forward(plan, &q, &k, &v, &o.view, &lse.view, nullptr, 0), "forward",
             c.name) &&
       check(dilattn_backward(plan, &q, &k, &v, &o.view, &lse.view, &d_o, &dq.view, &dk.view,
                              &dv.view, nullptr, 0),
             "backward", c.name);
  dilattn_plan_destroy(plan);
  if (!ok) return false;
  out->dq = read_all(dq.view);
  out->dk = read_all(dk.view);
  out->dv = read_all(dv.view);
  out->bytes = dq.bytes;
  out->bytes.insert(out->bytes.end(), dk.bytes.begin(), dk.bytes.end());
  out->bytes.insert(out->bytes.end(), dv.bytes.begin(), dv.bytes.end());
  return true;
}

// run_backward on emu in the ascending, descending and shuffled thread orders; *asc receives
// the ascending run. False when a run fails or the three differ in any bit.
inline bool run_backward_in_thread_orders(const Case& c, const dilattn_tensor& q,
                                          const dilattn_tensor& k, const dilattn_tensor& v,
                                          const dilattn_tensor& d_o, Gradients* asc) {
  Gradients desc, shuffled;
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::ascending);
    if (!run_backward(c, DILATTN_BACKEND_EMU, q, k, v, d_o, asc)) return false;
  }
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::descending);
    if (!run_backward(c, DILATTN_BACKEND_EMU, q, k, v, d_o, &desc)) return false;
  }
  {
    simt::ScopedThreadOrder order(simt::ThreadOrder::shuffled, 12345);
    if (!run_backward(c, DILATTN_BACKEND_EMU, q, k, v, d_o, &shuffled)) return false;
  }
  const bool same = asc->bytes == desc.bytes && asc->bytes == shuffled.bytes;
  if (!same) std::fprintf(stderr, "%s: thread orders give different gradient bits\n", c.name.c_str());
  return same;
}

}  // namespace kcase

#endif  // DILATTN_TESTS_KERNEL_CASE_H
