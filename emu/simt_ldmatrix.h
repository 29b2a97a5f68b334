// simt_ldmatrix.h - the PTX warp-level matrix load ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}
// .shared.b16 for the emulator, with the PTX ISA's address and fragment layout (emu/README.md,
// "ldmatrix").
//
// Part of the SIMT emulator (emu/README.md). cuda/ldmatrix.cuh calls simt::ldmatrix_m8n8 where
// nvcc would emit the PTX instruction. The instruction loads N = 1, 2 or 4 matrices of 8x8
// 16-bit elements from shared memory; the PTX ISA (section "Warp-level matrix load
// instruction: ldmatrix") fixes who supplies what and who gets what:
//   addresses  lane 8i + r (i < N, r < 8) gives the shared-memory address of row r of matrix i:
//              8 contiguous elements (16 bytes), 16-byte aligned. Lanes 8N .. 31 give none (their
//              operand is ignored: sm_80 and newer, the emulated devices);
//   results    lane l gets in r[i] two elements of matrix i, row l / 4, columns 2 (l % 4) and
//              2 (l % 4) + 1 (the lower column in the low half: mma.sync's A and B fragments);
//              with .trans the same of the transposed matrix: rows 2 (l % 4) and 2 (l % 4) + 1
//              of column l / 4 of the matrix as stored.
// A warp collective: all 32 lanes must reach it together with the same N and .trans (.aligned),
// or the launch fails; so does an address lane whose row is not 16-byte aligned or not inside
// the block's dynamic shared memory (a lane that forgot its address). Every row is read before
// any lane's registers are written.
// Checked by tests/emu/test_emu_ldmatrix.cpp (every form against a host model of the layout; a
// wrong address rule gives wrong numbers; missing, misaligned and global addresses and a
// partial warp fail the launch).
#ifndef DILATTN_SIMT_LDMATRIX_H
#define DILATTN_SIMT_LDMATRIX_H

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "simt_device.h"

namespace simt {
namespace detail {

// What each lane posts: ptr[0] = uint32_t r[N] (its registers), ptr[1] = its row address.
template <int N, bool Trans>
inline void resolve_ldmatrix(BlockRun& b, WarpState& w, unsigned group) {
  const char* name = w.slot[0].name;
  char buf[192];
  if (group != 0xffffffffu || w.lanes != 32) {
    std::snprintf(buf, sizeof buf, "%s needs all 32 lanes of the warp (got mask 0x%08x)", name,
                  group);
    collective_error(b, w, 0, buf);
    return;
  }
  uint16_t m[N][8][8];  // [matrix][row][column]
  for (unsigned lane = 0; lane < 8 * N; ++lane) {
    const unsigned char* row = static_cast<const unsigned char*>(w.slot[lane].ptr[1]);
    if (row < b.shared || row + 16 > b.shared + b.shared_bytes) {
      std::snprintf(buf, sizeof buf,
                    "%s: row address %p of lane %u (matrix %u, row %u) is not in the block's "
                    "dynamic shared memory",
                    name, static_cast<const void*>(row), lane, lane / 8, lane % 8);
      collective_error(b, w, lane, buf);
      return;
    }
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
      std::snprintf(buf, sizeof buf,
                    "%s: row address %p of lane %u (matrix %u, row %u) is not 16-byte aligned",
                    name, static_cast<const void*>(row), lane, lane / 8, lane % 8);
      collective_error(b, w, lane, buf);
      return;
    }
    std::memcpy(m[lane / 8][lane % 8], row, 16);
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned g = lane / 4, t = lane % 4;
    uint32_t* r = static_cast<uint32_t*>(const_cast<void*>(w.slot[lane].ptr[0]));
    for (int i = 0; i < N; ++i) {
      const uint16_t lo = Trans ? m[i][2 * t][g] : m[i][g][2 * t];
      const uint16_t hi = Trans ? m[i][2 * t + 1][g] : m[i][g][2 * t + 1];
      r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
}

template <int N, bool Trans>
constexpr const char* ldmatrix_name() {
  return N == 1 ? (Trans ? "ldmatrix.m8n8.x1.trans" : "ldmatrix.m8n8.x1")
         : N == 2 ? (Trans ? "ldmatrix.m8n8.x2.trans" : "ldmatrix.m8n8.x2")
                  : (Trans ? "ldmatrix.m8n8.x4.trans" : "ldmatrix.m8n8.x4");
}

}  // namespace detail

// r[0 .. N): this lane's fragments of the warp's N matrices; row: the row this lane addresses
// (lanes 0 .. 8N - 1), anything for the others.
template <int N, bool Trans>
inline void ldmatrix_m8n8(uint32_t* r, const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  detail::LaneSlot post;
  post.resolve = &detail::resolve_ldmatrix<N, Trans>;
  post.name = detail::ldmatrix_name<N, Trans>();
  post.mask = 0xffffffffu;
  post.ptr[0] = r;
  post.ptr[1] = row;
  detail::warp_collective(post);
}

}  // namespace simt

#endif  // DILATTN_SIMT_LDMATRIX_H
