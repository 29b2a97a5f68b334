// simt_wmma.h - nvcuda::wmma for the emulator: 16x16x16 fragments, fill, load, mma, store.
//
// Part of the SIMT emulator (emu/README.md). The emulator's own element layout: lane l
// holds elements l*8 .. l*8+7 of the fragment's 16x16 matrix in row-major order (matrix_a is
// M x K, matrix_b is K x N, accumulator is M x N). Kernels that only use fill/load/mma/store
// and elementwise loops over x[] (as CUDA requires: the GPU layout is unspecified) see no
// difference. load/store/mma are warp collectives: all 32 lanes must call them together, as on
// the GPU, or the launch fails. mma_sync is resolved by the scheduler for the whole warp: it
// gathers A, B, C from the lanes' fragments, computes D = A*B + C with f32 products summed in
// k order 0..15, and scatters D.
// Checked by tests/emu/emu_wmma.cpp (f16 and bf16 against a host matmul).
#ifndef DILATTN_SIMT_WMMA_H
#define DILATTN_SIMT_WMMA_H

#include "simt_device.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator supports the 16x16x16 shape only");

 public:
  using element_type = T;
  static constexpr int num_elements = 8;  // 256 elements over 32 lanes
  T x[num_elements];
};

}  // namespace wmma
}  // namespace nvcuda

namespace simt {
namespace detail {

inline float wmma_to_float(float v) { return v; }
inline float wmma_to_float(__half v) { return __half2float(v); }
inline float wmma_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
inline T wmma_from_float(float v);
template <>
inline float wmma_from_float<float>(float v) { return v; }
template <>
inline __half wmma_from_float<__half>(float v) { return __float2half_rn(v); }
template <>
inline __nv_bfloat16 wmma_from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Load/store synchronize the warp (they are warp-wide on the GPU) and need all 32 lanes.
inline void resolve_full_warp(BlockRun& b, WarpState& w, unsigned group) {
  if (group != 0xffffffffu) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s needs all 32 lanes of the warp (got mask 0x%08x)",
                  w.slot[0].name, group);
    collective_error(b, w, 0, buf);
  }
}
inline void wmma_sync(const char* name) {
  LaneSlot post;
  post.resolve = &resolve_full_warp;
  post.name = name;
  post.mask = 0xffffffffu;
  warp_collective(post);
}

template <class FD, class FA, class FB, class FC>
inline void resolve_mma(BlockRun& b, WarpState& w, unsigned group) {
  resolve_full_warp(b, w, group);
  if (!b.error.empty()) return;
  float a[256], bm[256], c[256];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const LaneSlot& s = w.slot[lane];
    const FA& fa = *static_cast<const FA*>(s.ptr[1]);
    const FB& fb = *static_cast<const FB*>(s.ptr[2]);
    const FC& fc = *static_cast<const FC*>(s.ptr[3]);
    for (int e = 0; e < 8; ++e) {
      a[lane * 8 + e] = wmma_to_float(fa.x[e]);
      bm[lane * 8 + e] = wmma_to_float(fb.x[e]);
      c[lane * 8 + e] = wmma_to_float(fc.x[e]);
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    FD& fd = *static_cast<FD*>(const_cast<void*>(w.slot[lane].ptr[0]));
    for (int e = 0; e < 8; ++e) {
      const int i = static_cast<int>(lane) * 8 + e, row = i / 16, col = i % 16;
      float acc = c[i];
      for (int k = 0; k < 16; ++k) acc += a[row * 16 + k] * bm[k * 16 + col];
      fd.x[e] = wmma_from_float<typename FD::element_type>(acc);
    }
  }
}

template <class Layout>
struct LayoutIs {
  static constexpr bool row = std::is_same<Layout, nvcuda::wmma::row_major>::value;
};

}  // namespace detail
}  // namespace simt

namespace nvcuda {
namespace wmma {

template <class Use, int M, int N, int K, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = static_cast<T>(v);
}

// matrix_a / matrix_b: the layout is part of the fragment type.
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value, "accumulators take a layout_t");
  ::simt::detail::wmma_sync("nvcuda::wmma::load_matrix_sync");
  const unsigned lane = ::simt::detail::current_fiber().lane;
  const bool row = ::simt::detail::LayoutIs<Layout>::row;
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = lane * 8 + e, r = i / 16, c = i % 16;
    f.x[e] = row ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm,
                             layout_t layout) {
  ::simt::detail::wmma_sync("nvcuda::wmma::load_matrix_sync");
  const unsigned lane = ::simt::detail::current_fiber().lane;
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = lane * 8 + e, r = i / 16, c = i % 16;
    f.x[e] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                              layout_t layout) {
  const unsigned lane = ::simt::detail::current_fiber().lane;
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = lane * 8 + e, r = i / 16, c = i % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
  ::simt::detail::wmma_sync("nvcuda::wmma::store_matrix_sync");
}

template <class TD, class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, 16, 16, 16, TD>& d,
                     const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
                     const fragment<accumulator, 16, 16, 16, TC>& c) {
  using FD = fragment<accumulator, 16, 16, 16, TD>;
  using FA = fragment<matrix_a, 16, 16, 16, TA, LA>;
  using FB = fragment<matrix_b, 16, 16, 16, TB, LB>;
  using FC = fragment<accumulator, 16, 16, 16, TC>;
  ::simt::detail::LaneSlot post;
  post.resolve = &::simt::detail::resolve_mma<FD, FA, FB, FC>;
  post.name = "nvcuda::wmma::mma_sync";
  post.mask = 0xffffffffu;
  post.ptr[0] = &d;
  post.ptr[1] = &a;
  post.ptr[2] = &b;
  post.ptr[3] = &c;
  ::simt::detail::warp_collective(post);
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // DILATTN_SIMT_WMMA_H
