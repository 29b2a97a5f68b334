// simt_wmma.h - nvcuda::wmma for the emulator: 16x16x16 fragments, fill, load, mma, store.
//
// Part of the SIMT emulator (emu/README.md). Fragments have the hardware's element counts
// (num_elements): 16 per lane for 16-bit matrix_a / matrix_b, 8 for accumulators. The
// emulator's own element layout (the GPU's is unspecified, so kernels only loop over x[]):
//   matrix_a (M x K) / matrix_b (K x N): lanes r and r + 16 both hold row r, lane r column c
//     in x[c], lane r + 16 column c in x[(c + 8) % 16]; so every element is held twice, as on
//     the GPU. mma_sync fails the launch when the two copies of an element differ (a kernel
//     that updated only some of the num_elements, e.g. assumed 8).
//   accumulator (M x N): lane l holds elements 8 l .. 8 l + 7.
// load/store/mma are warp collectives: all 32 lanes must call them together, with the same
// pointer, ldm and layout, or the launch fails; pointers must be 32-byte aligned and ldm a
// multiple of 16 bytes (8 elements of __half/__nv_bfloat16, 4 of float), as CUDA requires.
// store_matrix_sync does not synchronise the warp (the GPU's does not either): each lane
// writes its elements only when it runs on after the store, so a lane that reads another
// lane's stored elements without a __syncwarp sees them or not depending on the thread order.
// mma_sync is resolved by the scheduler for the whole warp: it gathers A, B, C from the lanes'
// fragments, computes D = A*B + C with f32 products summed in k order 0..15, and scatters D.
// Checked by tests/emu/test_emu_wmma.cpp (f16 and bf16 against a host matmul) and
// tests/emu/test_emu_negative_wmma.cpp (each misuse above fails the launch or changes the result).
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
  // 256 elements over 32 lanes; 16-bit A and B operands are held twice (the hardware's counts).
  static constexpr int num_elements = std::is_same<Use, accumulator>::value ? 8 : 16;
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

inline uint32_t wmma_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
inline uint32_t wmma_bits(__half v) {
  uint16_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
inline uint32_t wmma_bits(__nv_bfloat16 v) {
  uint16_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// The column of a matrix_a / matrix_b operand row that slot e of `lane` holds (row lane % 16).
inline unsigned operand_column(unsigned lane, unsigned e) { return (e + (lane < 16 ? 0 : 8)) % 16; }

// What a load or store posts: the pointer in ptr[0], ldm in arg0, the layout in arg1 and the
// element size in value. Resolved for the warp: every lane agrees and the arguments are legal.
inline void resolve_wmma_memory(BlockRun& b, WarpState& w, unsigned group) {
  char buf[224];
  const LaneSlot& first = w.slot[0];
  if (group != 0xffffffffu) {
    std::snprintf(buf, sizeof buf, "%s needs all 32 lanes of the warp (got mask 0x%08x)",
                  first.name, group);
    collective_error(b, w, 0, buf);
    return;
  }
  for (unsigned lane = 1; lane < 32; ++lane) {
    const LaneSlot& s = w.slot[lane];
    if (s.ptr[0] != first.ptr[0] || s.arg0 != first.arg0 || s.arg1 != first.arg1) {
      std::snprintf(buf, sizeof buf,
                    "%s: lanes disagree: lane 0 passed pointer %p, ldm %d, layout %d; lane %u "
                    "pointer %p, ldm %d, layout %d (all lanes must pass the same)",
                    first.name, first.ptr[0], first.arg0, first.arg1, lane, s.ptr[0], s.arg0,
                    s.arg1);
      collective_error(b, w, lane, buf);
      return;
    }
  }
  if (reinterpret_cast<uintptr_t>(first.ptr[0]) % 32 != 0) {
    std::snprintf(buf, sizeof buf, "%s: pointer %p is not 32-byte aligned", first.name,
                  first.ptr[0]);
    collective_error(b, w, 0, buf);
    return;
  }
  const int multiple = static_cast<int>(16 / first.value);  // ldm: a multiple of 16 bytes
  if (first.arg0 <= 0 || first.arg0 % multiple != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: ldm = %d is not a positive multiple of %d (16 bytes of %d-byte elements)",
                  first.name, first.arg0, multiple, static_cast<int>(first.value));
    collective_error(b, w, 0, buf);
  }
}
template <class T>
inline void wmma_memory_sync(const char* name, const T* p, unsigned ldm, int layout) {
  LaneSlot post;
  post.resolve = &resolve_wmma_memory;
  post.name = name;
  post.mask = 0xffffffffu;
  post.ptr[0] = p;
  post.arg0 = static_cast<int>(ldm);
  post.arg1 = layout;
  post.value = sizeof(T);
  warp_collective(post);
}

template <class FD, class FA, class FB, class FC>
inline void resolve_mma(BlockRun& b, WarpState& w, unsigned group) {
  if (group != 0xffffffffu) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s needs all 32 lanes of the warp (got mask 0x%08x)",
                  w.slot[0].name, group);
    collective_error(b, w, 0, buf);
    return;
  }
  float a[256], bm[256], c[256];
  const char* names[2] = {"matrix_a", "matrix_b"};
  for (int operand = 0; operand < 2; ++operand) {
    for (unsigned r = 0; r < 16; ++r) {
      for (unsigned col = 0; col < 16; ++col) {
        const unsigned lane = r, twin = r + 16, twin_slot = (col + 8) % 16;
        uint32_t bits, twin_bits;
        float value;
        if (operand == 0) {
          const FA& f = *static_cast<const FA*>(w.slot[lane].ptr[1]);
          const FA& g = *static_cast<const FA*>(w.slot[twin].ptr[1]);
          value = wmma_to_float(f.x[col]);
          bits = wmma_bits(f.x[col]);
          twin_bits = wmma_bits(g.x[twin_slot]);
        } else {
          const FB& f = *static_cast<const FB*>(w.slot[lane].ptr[2]);
          const FB& g = *static_cast<const FB*>(w.slot[twin].ptr[2]);
          value = wmma_to_float(f.x[col]);
          bits = wmma_bits(f.x[col]);
          twin_bits = wmma_bits(g.x[twin_slot]);
        }
        if (bits != twin_bits) {
          char buf[256];
          std::snprintf(buf, sizeof buf,
                        "nvcuda::wmma::mma_sync: %s fragment element (%u,%u) differs between its "
                        "two copies (lane %u x[%u], lane %u x[%u]): an elementwise update must "
                        "cover all num_elements",
                        names[operand], r, col, lane, col, twin, twin_slot);
          collective_error(b, w, lane, buf);
          return;
        }
        (operand == 0 ? a : bm)[r * 16 + col] = value;
      }
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    const FC& fc = *static_cast<const FC*>(w.slot[lane].ptr[3]);
    for (int e = 0; e < 8; ++e) c[lane * 8 + e] = wmma_to_float(fc.x[e]);
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
  const bool row = ::simt::detail::LayoutIs<Layout>::row;
  ::simt::detail::wmma_memory_sync("nvcuda::wmma::load_matrix_sync", p, ldm, row ? 0 : 1);
  const unsigned lane = ::simt::detail::current_fiber().lane, r = lane % 16;
  for (unsigned e = 0; e < 16; ++e) {
    const unsigned c = ::simt::detail::operand_column(lane, e);
    f.x[e] = row ? p[r * ldm + c] : p[c * ldm + r];
  }
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm,
                             layout_t layout) {
  ::simt::detail::wmma_memory_sync("nvcuda::wmma::load_matrix_sync", p, ldm,
                                   static_cast<int>(layout));
  const unsigned lane = ::simt::detail::current_fiber().lane;
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = lane * 8 + e, r = i / 16, c = i % 16;
    f.x[e] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}

// The collective only checks the arguments; each lane writes its own elements afterwards, when
// it runs on, so the store does not make other lanes' elements visible (no warp sync).
template <class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                              layout_t layout) {
  ::simt::detail::wmma_memory_sync("nvcuda::wmma::store_matrix_sync", p, ldm,
                                   static_cast<int>(layout));
  const unsigned lane = ::simt::detail::current_fiber().lane;
  for (unsigned e = 0; e < 8; ++e) {
    const unsigned i = lane * 8 + e, r = i / 16, c = i % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
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
