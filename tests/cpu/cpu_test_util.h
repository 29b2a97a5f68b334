// cpu_test_util.h - runs the cpu backend and the f64 reference on the same inputs through the
// public C ABI and compares them with SPEC 8's tolerances (tests/cpu/).
//
// A Case describes one problem (kind, shapes, dtype, causal, threads, output layout). Inputs
// are fixed-seed uniform numbers stored in the case's dtype, so f16/bf16 inputs are already
// rounded when the reference reads them. Outputs may be written through a permuted view
// ([B, H, N, D] memory seen as [B, N, H, D]) to check arbitrary strides. A failed call or
// comparison prints the case and counts a failure; main returns failures() != 0.
// Header-only so each test stays one file.
#ifndef DILATTN_TESTS_CPU_TEST_UTIL_H
#define DILATTN_TESTS_CPU_TEST_UTIL_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dilattn.h"
#include "../common/spec_tolerance.h"
#include "dtype_convert.h"

namespace cputest {

inline int& failure_count() {
  static int n = 0;
  return n;
}

#define CPU_CHECK_OK(call, what)                                                            \
  do {                                                                                      \
    const dilattn_status s_ = (call);                                                       \
    if (s_ != DILATTN_SUCCESS) {                                                            \
      std::fprintf(stderr, "%s:%d: FAILED [%s]: %s -> %s (%s)\n", __FILE__, __LINE__, what, \
                   #call, dilattn_status_string(s_), dilattn_last_error());                 \
      ++::cputest::failure_count();                                                         \
    }                                                                                       \
  } while (0)

struct Case {
  std::string name;
  int64_t B = 1, Nq = 0, Nk = 0, H = 1, Hkv = 1, D = 0;
  dilattn_kind kind = DILATTN_KIND_DENSE;
  std::vector<int64_t> segments, dilations;  // dilated
  dilattn_head_mode mode = DILATTN_HEADS_MOD;
  int64_t bq = 64, bk = 64, mask_heads = 1;  // block-sparse: random mask
  double density = 0.5;
  bool causal = false;
  dilattn_dtype dtype = DILATTN_F32;
  bool permuted_outputs = false;  // O, dQ, dK, dV through [B, H, N, D] memory
  double scale = 0;               // 0: the default 1/sqrt(D)
};

// A tensor [d0, N, heads, D] (or an LSE [B, H, N, 1]) owning its bytes.
struct Buffer {
  std::vector<unsigned char> bytes;
  dilattn_tensor view{};
  dilattn_dtype dtype = DILATTN_F32;

  void make(dilattn_dtype t, int64_t d0, int64_t d1, int64_t d2, int64_t d3, bool permuted) {
    dtype = t;
    bytes.assign(static_cast<size_t>(d0 * d1 * d2 * d3) * dilattn::dtype_size(t), 0);
    view = dilattn_tensor_contiguous(bytes.data(), t, d0, d1, d2, d3);
    if (permuted) {  // memory [d0, d2, d1, d3], seen as [d0, d1, d2, d3]
      view.strides[3] = 1;
      view.strides[1] = d3;
      view.strides[2] = d1 * d3;
      view.strides[0] = d1 * d2 * d3;
    }
  }
  int64_t count() const { return view.shape[0] * view.shape[1] * view.shape[2] * view.shape[3]; }
  // Element [a, b, c, d] as double.
  double at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return dilattn::load_element(view.data, dtype, dilattn::element_offset(view, a, b, c, d));
  }
  void fill_random(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t x = 0; x < count(); ++x) dilattn::store_element(view.data, dtype, x, u(rng));
  }
};

inline dilattn_desc make_desc(const Case& c, int32_t threads, dilattn_mask* mask_out) {
  dilattn_desc desc = nullptr;
  CPU_CHECK_OK(dilattn_desc_create(&desc), c.name.c_str());
  if (c.kind == DILATTN_KIND_DILATED) {
    CPU_CHECK_OK(dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.segments.size()),
                                          c.segments.data(), c.dilations.data(), c.mode),
                 c.name.c_str());
  } else if (c.kind == DILATTN_KIND_BLOCK_SPARSE) {
    CPU_CHECK_OK(dilattn_mask_random(mask_out, c.Nq, c.Nk, c.bq, c.bk, c.mask_heads, c.density,
                                     12345, c.causal ? 1 : 0),
                 c.name.c_str());
    CPU_CHECK_OK(dilattn_desc_set_block_sparse(desc, *mask_out), c.name.c_str());
  }
  CPU_CHECK_OK(dilattn_desc_set_causal(desc, c.causal ? 1 : 0), c.name.c_str());
  if (c.scale != 0) CPU_CHECK_OK(dilattn_desc_set_scale(desc, c.scale), c.name.c_str());
  CPU_CHECK_OK(dilattn_desc_set_num_threads(desc, threads), c.name.c_str());
  return desc;
}

inline dilattn_plan make_plan(const Case& c, dilattn_backend backend, int32_t threads) {
  dilattn_mask mask = nullptr;
  dilattn_desc desc = make_desc(c, threads, &mask);
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
  CPU_CHECK_OK(dilattn_plan_create(&plan, desc, &shape, c.dtype, backend),
               c.name.c_str());
  dilattn_desc_destroy(desc);
  if (mask) dilattn_mask_destroy(mask);
  return plan;
}

struct Inputs {
  Buffer q, k, v, d_o;
};

inline Inputs make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q.make(c.dtype, c.B, c.Nq, c.H, c.D, false);
  in.k.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, false);
  in.v.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, false);
  in.d_o.make(c.dtype, c.B, c.Nq, c.H, c.D, false);
  // Q spread wider than K so that softmax rows are far from uniform.
  in.q.fill_random(rng, -2.0, 2.0);
  in.k.fill_random(rng, -1.0, 1.0);
  in.v.fill_random(rng, -1.0, 1.0);
  in.d_o.fill_random(rng, -1.0, 1.0);
  return in;
}

using Tolerance = spec8::Tolerance;
inline Tolerance tolerance_of(dilattn_dtype t) { return spec8::of(t); }  // SPEC 8

// |got - want| <= atol + rtol |want| elementwise; reports the first few misses. Where the
// reference is NaN the backend must be NaN too, and only there (README "Decisions": a NaN
// score makes its row NaN in every backend); infinities must match exactly.
inline void expect_close(const Case& c, const char* what, const Buffer& got, const Buffer& want,
                         Tolerance tol) {
  int misses = 0;
  double worst = 0;
  const int64_t* s = got.view.shape;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t d = 0; d < s[3]; ++d) {
          const double g = got.at(a, b, h, d), w = want.at(a, b, h, d);
          bool ok;
          if (std::isnan(w) || std::isnan(g))
            ok = std::isnan(w) && std::isnan(g);
          else if (std::isinf(w) || std::isinf(g))
            ok = g == w;
          else
            ok = std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
          if (!ok) {
            worst = std::fmax(worst, std::fabs(g - w));
            if (misses++ < 3)
              std::fprintf(stderr, "FAILED [%s] %s[%lld,%lld,%lld,%lld] = %.9g, reference %.9g\n",
                           c.name.c_str(), what, static_cast<long long>(a),
                           static_cast<long long>(b), static_cast<long long>(h),
                           static_cast<long long>(d), g, w);
          }
        }
  if (misses) {
    std::fprintf(stderr, "FAILED [%s] %s: %d elements out of tolerance, worst |diff| %g\n",
                 c.name.c_str(), what, misses, worst);
    ++failure_count();
  }
}

// How many elements of a buffer are NaN.
inline int64_t nan_count(const Buffer& b) {
  int64_t n = 0;
  const int64_t* s = b.view.shape;
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t x = 0; x < s[1]; ++x)
      for (int64_t y = 0; y < s[2]; ++y)
        for (int64_t d = 0; d < s[3]; ++d) n += std::isnan(b.at(a, x, y, d)) ? 1 : 0;
  return n;
}

struct ForwardOut {
  Buffer o, lse;
};

inline ForwardOut run_forward(const Case& c, const Inputs& in, dilattn_backend backend,
                              int32_t threads, dilattn_dtype lse_dtype) {
  ForwardOut out;
  out.o.make(c.dtype, c.B, c.Nq, c.H, c.D, c.permuted_outputs && backend == DILATTN_BACKEND_CPU);
  out.lse.make(lse_dtype, c.B, c.H, c.Nq, 1, false);
  dilattn_plan plan = make_plan(c, backend, threads);
  CPU_CHECK_OK(dilattn_forward(plan, &in.q.view, &in.k.view, &in.v.view, &out.o.view,
                               &out.lse.view, nullptr, 0),
               c.name.c_str());
  dilattn_plan_destroy(plan);
  return out;
}

struct Gradients {
  Buffer dq, dk, dv;
};

// Backward of `backend` from the given forward outputs (the same O, LSE for every backend).
inline Gradients run_backward(const Case& c, const Inputs& in, const ForwardOut& fwd,
                              dilattn_backend backend, int32_t threads) {
  Gradients g;
  const bool perm = c.permuted_outputs && backend == DILATTN_BACKEND_CPU;
  g.dq.make(c.dtype, c.B, c.Nq, c.H, c.D, perm);
  g.dk.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, perm);
  g.dv.make(c.dtype, c.B, c.Nk, c.Hkv, c.D, perm);
  // Poison the outputs: every element must be written.
  std::memset(g.dq.bytes.data(), 0x7f, g.dq.bytes.size());
  std::memset(g.dk.bytes.data(), 0x7f, g.dk.bytes.size());
  std::memset(g.dv.bytes.data(), 0x7f, g.dv.bytes.size());
  dilattn_plan plan = make_plan(c, backend, threads);
  CPU_CHECK_OK(dilattn_backward(plan, &in.q.view, &in.k.view, &in.v.view, &fwd.o.view,
                                &fwd.lse.view, &in.d_o.view, &g.dq.view, &g.dk.view, &g.dv.view,
                                nullptr, 0),
               c.name.c_str());
  dilattn_plan_destroy(plan);
  return g;
}

// The cases every cpu test walks: each kind, head mode, odd head dims (1, 40, 72, 100, 256),
// N not a multiple of any tile (64 keys, 64 rows, 256..1024-row blocks), GQA, causal, Nq != Nk,
// every dtype, permuted outputs. Small enough for the f64 reference under ASan.
inline std::vector<Case> standard_cases() {
  std::vector<Case> cases;
  auto dense = [&](const char* name, int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv,
                   int64_t D, bool causal, dilattn_dtype t) {
    Case c;
    c.name = name; c.B = B; c.Nq = Nq; c.Nk = Nk; c.H = H; c.Hkv = Hkv; c.D = D;
    c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  dense("dense_gqa_d40", 2, 77, 77, 2, 1, 40, false, DILATTN_F32);
  dense("dense_causal_nq_lt_nk_d72", 1, 70, 300, 2, 2, 72, true, DILATTN_F32);
  dense("dense_causal_nq_gt_nk_empty_rows_d1", 1, 300, 70, 2, 1, 1, true, DILATTN_F32);
  dense("dense_nq_ne_nk_d100", 1, 45, 131, 1, 1, 100, false, DILATTN_F32)->permuted_outputs = true;
  dense("dense_d256", 1, 90, 90, 1, 1, 256, true, DILATTN_F32);
  dense("dense_f16_causal_d100", 1, 130, 130, 2, 2, 100, true, DILATTN_F16);
  dense("dense_bf16_gqa_d64", 1, 100, 100, 4, 2, 64, false, DILATTN_BF16);
  dense("dense_f64_d40", 1, 65, 65, 2, 1, 40, true, DILATTN_F64);

  auto dilated = [&](const char* name, int64_t N, int64_t H, int64_t Hkv, int64_t D,
                     std::vector<int64_t> w, std::vector<int64_t> r, dilattn_head_mode mode,
                     bool causal, dilattn_dtype t) {
    Case c;
    c.name = name; c.B = 1; c.Nq = c.Nk = N; c.H = H; c.Hkv = Hkv; c.D = D;
    c.kind = DILATTN_KIND_DILATED; c.segments = w; c.dilations = r; c.mode = mode;
    c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  dilated("dilated_mod_d40", 300, 4, 4, 40, {64, 128, 300}, {1, 2, 4}, DILATTN_HEADS_MOD, false,
          DILATTN_F32);
  dilated("dilated_block_causal_d72", 333, 5, 5, 72, {100, 333}, {2, 3}, DILATTN_HEADS_BLOCK,
          true, DILATTN_F32);
  dilated("dilated_groups_causal_gqa_d64", 520, 3, 1, 64, {128, 256, 520}, {1, 2, 2},
          DILATTN_HEADS_GROUPS, true, DILATTN_F32)->permuted_outputs = true;
  dilated("dilated_clipped_segment_f16_d100", 200, 2, 1, 100, {1000, 50}, {3, 5},
          DILATTN_HEADS_MOD, false, DILATTN_F16);
  // Dilation 1 only: 256-row blocks, so segments of 200 straddle block edges.
  dilated("dilated_r1_segments_cross_blocks_d16", 600, 2, 1, 16, {200, 600}, {1, 1},
          DILATTN_HEADS_MOD, true, DILATTN_F32);
  dilated("dilated_bf16_causal_d1", 150, 2, 2, 1, {40, 150}, {1, 2}, DILATTN_HEADS_MOD, true,
          DILATTN_BF16);
  dilated("dilated_f64_block_d40", 130, 4, 2, 40, {32, 64}, {2, 4}, DILATTN_HEADS_BLOCK, false,
          DILATTN_F64);

  auto sparse = [&](const char* name, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D,
                    int64_t bq, int64_t bk, int64_t mask_heads, double density, bool causal,
                    dilattn_dtype t) {
    Case c;
    c.name = name; c.B = 1; c.Nq = Nq; c.Nk = Nk; c.H = H; c.Hkv = Hkv; c.D = D;
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.bq = bq; c.bk = bk; c.mask_heads = mask_heads;
    c.density = density; c.causal = causal; c.dtype = t;
    cases.push_back(c);
    return &cases.back();
  };
  sparse("sparse_per_head_causal_d40", 300, 300, 2, 1, 40, 64, 64, 2, 0.4, true, DILATTN_F32);
  sparse("sparse_odd_blocks_gqa_d100", 200, 330, 4, 2, 100, 32, 48, 1, 0.3, false, DILATTN_F32);
  sparse("sparse_big_blocks_bf16_causal_d72", 300, 300, 1, 1, 72, 100, 100, 1, 0.6, true,
         DILATTN_BF16);
  return cases;
}

}  // namespace cputest

#endif  // DILATTN_TESTS_CPU_TEST_UTIL_H
