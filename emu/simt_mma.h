// simt_mma.h - the PTX warp-level matrix multiplies mma.sync.aligned.m16n8k16.row.col.f32.
// {f16,bf16} and mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (with cvt.rna.tf32.f32) for
// the emulator, with the PTX ISA's register fragment layouts (emu/README.md, "How it works": mma.sync).
//
// Part of the SIMT emulator (emu/README.md). cuda/mma_sync.cuh calls simt::mma_m16n8k16 where
// nvcc would emit the PTX instruction. Unlike WMMA, whose layout is unspecified, mma.sync's is
// fixed by the PTX ISA (section "Matrix Fragments for mma.m16n8k16 with floating point type");
// kernels rely on it (the C fragment of S = Q K^T becomes the A fragment of P V), so the
// emulator implements exactly that layout. With g = lane / 4 and t = lane % 4:
//   A (16x16, row): a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..2t+1]
//                   a[2] = A[g][2t+8..2t+9] a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, col):  b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   C, D (16x8 f32): c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]
// Each 32-bit register holds two 16-bit elements, the lower-indexed one in the low half.
// The instruction is a warp collective: all 32 lanes must reach it together (mask 0xffffffff,
// as .aligned requires), or the launch fails. D = A B + C with f32 products summed in k order
// 0..15 (not the tensor cores' internal rounding; kernel tests compare within SPEC 8).
// Checked by tests/emu/test_emu_mma.cpp (f16 and bf16 against a host matmul; a wrong layout
// assumption gives wrong numbers).
//
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (mma_m16n8k8_tf32): one f32-bit-pattern
// .tf32 element a register, layout of the PTX ISA section "Matrix Fragments for mma.m16n8k8"
// (.tf32 rows of its tables):
//   A (16x8, row):  a[0] = A[g][t]   a[1] = A[g+8][t]   a[2] = A[g][t+4]   a[3] = A[g+8][t+4]
//   B (8x8, col):   b[0] = B[t][g]   b[1] = B[t+4][g]
//   C, D (16x8 f32): as for m16n8k16.
// The tensor core reads only the top 19 bits of each operand (sign, exponent, 10 mantissa
// bits): the low 13 bits are ignored, i.e. an f32 not rounded first is truncated toward zero
// (CUTLASS's float -> tfloat32_t round-to-nearest converter leaves those bits set and relies on
// the hardware ignoring them; its round_half_ulp_truncate adds half a TF32 ulp for the same
// reason). So an f32 passed unsplit carries TF32's error here as on the GPU. A NaN whose payload
// lies only in the low bits stays NaN (the hardware's answer is not documented).
// cvt_rna_tf32: PTX cvt.rna.tf32.f32, round to nearest with ties away from zero, low 13 bits 0;
// NaN gives the canonical NaN; a value rounding past TF32's largest finite gives +-inf.
#ifndef DILATTN_SIMT_MMA_H
#define DILATTN_SIMT_MMA_H

#include <cstring>

#include "simt_device.h"

namespace simt {
namespace detail {

inline float mma_half_to_float(uint16_t bits, const __half*) {
  __half h;
  std::memcpy(static_cast<void*>(&h), &bits, sizeof h);
  return __half2float(h);
}
inline float mma_half_to_float(uint16_t bits, const __nv_bfloat16*) {
  __nv_bfloat16 h;
  std::memcpy(static_cast<void*>(&h), &bits, sizeof h);
  return __bfloat162float(h);
}

// An mma.sync is a collective of the whole warp: any other mask fails the launch.
inline bool mma_warp_is_whole(BlockRun& b, WarpState& w, unsigned group) {
  if (group == 0xffffffffu && w.lanes == 32) return true;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s needs all 32 lanes of the warp (got mask 0x%08x)",
                w.slot[0].name, group);
  collective_error(b, w, 0, buf);
  return false;
}

// D = A B + C into each lane's d (ptr[0]) in the C fragment layout shared by m16n8k16 and
// m16n8k8 (lane g = lane / 4, t = lane % 4: d[0], d[1] row g, d[2], d[3] row g + 8, columns
// 2t, 2t + 1), products summed in k order. Every C was read before: a lane may pass the same
// array as c and d.
template <int K>
inline void write_mma_d(WarpState& w, const float (&A)[16][K], const float (&B)[K][8],
                        const float (&C)[16][8]) {
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned g = lane / 4, t = lane % 4;
    float* d = static_cast<float*>(const_cast<void*>(w.slot[lane].ptr[0]));
    for (int e = 0; e < 4; ++e) {
      const unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
      float acc = C[row][col];
      for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][col];
      d[e] = acc;
    }
  }
}

// Element `half` (0: low, 1: high) of a packed register, as f32.
template <class T>
inline float mma_element(uint32_t reg, int half) {
  const uint16_t bits = static_cast<uint16_t>(half == 0 ? reg & 0xffffu : reg >> 16);
  return mma_half_to_float(bits, static_cast<const T*>(nullptr));
}

// What each lane posts: ptr[0] = float d[4], ptr[1] = const uint32_t a[4], ptr[2] = const
// uint32_t b[2], ptr[3] = const float c[4].
template <class T>
inline void resolve_mma_m16n8k16(BlockRun& b, WarpState& w, unsigned group) {
  if (!mma_warp_is_whole(b, w, group)) return;
  float A[16][16], B[16][8], C[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned g = lane / 4, t = lane % 4;
    const uint32_t* a = static_cast<const uint32_t*>(w.slot[lane].ptr[1]);
    const uint32_t* bb = static_cast<const uint32_t*>(w.slot[lane].ptr[2]);
    const float* c = static_cast<const float*>(w.slot[lane].ptr[3]);
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = mma_element<T>(a[0], e);
      A[g + 8][2 * t + e] = mma_element<T>(a[1], e);
      A[g][2 * t + 8 + e] = mma_element<T>(a[2], e);
      A[g + 8][2 * t + 8 + e] = mma_element<T>(a[3], e);
      B[2 * t + e][g] = mma_element<T>(bb[0], e);
      B[2 * t + 8 + e][g] = mma_element<T>(bb[1], e);
      C[g][2 * t + e] = c[e];
      C[g + 8][2 * t + e] = c[2 + e];
    }
  }
  write_mma_d(w, A, B, C);
}

// An operand register as the tensor core reads a .tf32 element: its low 13 bits dropped.
inline float tf32_operand(uint32_t bits) {
  const bool nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
  const uint32_t kept = nan ? 0x7fffe000u : bits & 0xffffe000u;
  float x;
  std::memcpy(&x, &kept, sizeof x);
  return x;
}

// What each lane posts: as for m16n8k16, a[4] and b[2] holding one .tf32 element each.
inline void resolve_mma_m16n8k8_tf32(BlockRun& b, WarpState& w, unsigned group) {
  if (!mma_warp_is_whole(b, w, group)) return;
  float A[16][8], B[8][8], C[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned g = lane / 4, t = lane % 4;
    const uint32_t* a = static_cast<const uint32_t*>(w.slot[lane].ptr[1]);
    const uint32_t* bb = static_cast<const uint32_t*>(w.slot[lane].ptr[2]);
    const float* c = static_cast<const float*>(w.slot[lane].ptr[3]);
    A[g][t] = tf32_operand(a[0]);
    A[g + 8][t] = tf32_operand(a[1]);
    A[g][t + 4] = tf32_operand(a[2]);
    A[g + 8][t + 4] = tf32_operand(a[3]);
    B[t][g] = tf32_operand(bb[0]);
    B[t + 4][g] = tf32_operand(bb[1]);
    for (int e = 0; e < 2; ++e) {
      C[g][2 * t + e] = c[e];
      C[g + 8][2 * t + e] = c[2 + e];
    }
  }
  write_mma_d(w, A, B, C);
}

}  // namespace detail

// cvt.rna.tf32.f32: x rounded to TF32 (nearest, ties away from zero), as its f32 bit pattern.
inline uint32_t cvt_rna_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u)  // inf stays; NaN becomes the canonical NaN
    return (bits & 0x007fffffu) != 0 ? 0x7fffffffu : bits;
  // Sign-magnitude: adding half an ulp of the kept bits to the magnitude and truncating rounds
  // ties away from zero; a carry into the exponent is the correct next binade (or inf).
  return (bits + 0x1000u) & 0xffffe000u;
}

namespace detail {
// One lane's part of a whole-warp mma.sync: its D, A, B, C registers, resolved together.
inline void post_mma(ResolveFn resolve, const char* name, float* d, const uint32_t* a,
                     const uint32_t* b, const float* c) {
  LaneSlot post;
  post.resolve = resolve;
  post.name = name;
  post.mask = 0xffffffffu;
  post.ptr[0] = d;
  post.ptr[1] = a;
  post.ptr[2] = b;
  post.ptr[3] = c;
  warp_collective(post);
}
}  // namespace detail

// d = a b + c for the warp's 16x8 tile with .tf32 operands (one f32 bit pattern a register).
inline void mma_m16n8k8_tf32(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
  detail::post_mma(&detail::resolve_mma_m16n8k8_tf32, "mma.sync.m16n8k8.tf32", d, a, b, c);
}

// d = a b + c for the warp, T = __half or __nv_bfloat16 (the operands' element type).
template <class T>
inline void mma_m16n8k16(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
  detail::post_mma(&detail::resolve_mma_m16n8k16<T>, "mma.sync.m16n8k16", d, a, b, c);
}

}  // namespace simt

#endif  // DILATTN_SIMT_MMA_H
