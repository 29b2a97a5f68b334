// test_emu_wgmma.cpp - wgmma.mma_async m64nNk16 (f16, bf16; f32 accumulators) with shared-memory
// descriptors, wgmma.fence, wgmma.commit_group and wgmma.wait_group (cuda/wgmma.cuh) in the
// emulator (emu/simt_wgmma.h).
//
// The tiles are written by ordinary stores from byte images that the host builds with its own
// model of each layout: the PTX ISA's canonical CuTe layouts (section "Canonical Layouts",
// shapes and strides as printed there) and the swizzle Swizzle<B,4,3> on the byte address, an
// independent statement of what emu/simt_wgmma.h implements.
// Properties:
//   (1) D = A B (+ C) against the f64 product, within the f32 summation bound, for K-major and
//       MN-major tiles with no swizzle and 32B/64B/128B swizzles, f16 and bf16, N = 8, 64, 128
//       and 256, A from shared memory and from registers, scale-d 0 (D's NaN input ignored) and
//       1; each case is K / 16 chained wgmmas (start advanced along K, e.g. 4 x 32 bytes in a
//       128B-swizzled K-major tile) under one commit and one wait; the same bytes in three
//       thread orders;
//   (2) imm-scale-a = -1 negates the product; two warpgroups of a 256-thread block each compute
//       their own 64 rows;
//   (3) wait_group 1 completes the older group only; a wait completes no uncommitted wgmma;
//   (4) the descriptor's fields (host-side encoding); the host model reproduces the PTX ISA's
//       worked examples of MN-major layouts;
//   negative: D read before the wait is NaN; no wgmma.fence, a shared-memory operand
//   overwritten before the wait, a thread of the warpgroup returning early, threads passing
//   different descriptors, no wait before returning, a nonzero base offset, a start address
//   outside shared memory, a swizzled start 128 bytes into its repeat, a stride offset not a
//   multiple of the repeat, reserved descriptor bits, an operand on a tile guard, a misaligned
//   descriptor address and a block of 64 threads fail the launch with a message naming the
//   defect; a descriptor with the wrong swizzle gives wrong numbers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "mma_sync.cuh"
#include "wgmma.cuh"

namespace {

using dilattn::cuda::load_pair;
using dilattn::cuda::make_wgmma_descriptor;
using dilattn::cuda::wgmma_commit_group;
using dilattn::cuda::wgmma_fence;
using dilattn::cuda::wgmma_fence_operand;
using dilattn::cuda::fence_proxy_async_shared;
using dilattn::cuda::wgmma_rs;
using dilattn::cuda::shared_address;
using dilattn::cuda::wgmma_ss;
using dilattn::cuda::wgmma_wait_group;
using dilattn::cuda::WgmmaSwizzle;

// ---------------------------------------------------------------- host model of the layouts

// One operand tile: `rows` along M (A) or N (B), `k` along K, in a canonical layout.
struct TileLayout {
  bool mn_major = false;
  WgmmaSwizzle swizzle = WgmmaSwizzle::none;
  uint32_t rows = 0, k = 0;
  uint32_t lbo = 0, sbo = 0;  // bytes
  uint32_t bytes = 0;         // the image, a multiple of 1024
};

// The width in bytes of a swizzled row; 16 (one core-matrix row) without swizzle.
uint32_t swizzle_width(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::bytes128 ? 128 : s == WgmmaSwizzle::bytes64 ? 64
                                         : s == WgmmaSwizzle::bytes32   ? 32
                                                                        : 16;
}

// A CuTe mode: a coordinate's digit of base `shape` (0: the last, unbounded) times `stride`.
struct Mode {
  uint32_t shape, stride;
};
uint32_t evaluate(const Mode* modes, size_t count, uint32_t coordinate) {
  uint32_t offset = 0;
  for (size_t i = 0; i < count; ++i) {
    if (modes[i].shape == 0) return offset + coordinate * modes[i].stride;
    offset += (coordinate % modes[i].shape) * modes[i].stride;
    coordinate /= modes[i].shape;
  }
  return offset;
}
uint32_t evaluate(std::initializer_list<Mode> modes, uint32_t coordinate) {
  return evaluate(modes.begin(), modes.size(), coordinate);
}

// Byte offset of element (r, k) before the swizzle: the PTX ISA's canonical layouts with T = 8
// (16-bit elements), LBO and SBO in elements, written as printed (MN modes, K modes):
//   MN-major none  ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
//   MN-major 32B   ((T,2,m),(8,k)):((1,T,LBO),(2T,SBO))    64B: 4 and 4T, 128B: 8 and 8T
//   K-major  none  ((8,m),(T,2k)):((1T,SBO),(1,LBO))
//   K-major  32B   ((8,m),(T,2k)):((2T,SBO),(1,T))          64B: 4T, 128B: 8T
uint32_t canonical_offset(const TileLayout& t, uint32_t r, uint32_t k) {
  const uint32_t T = 8, lbo = t.lbo / 2, sbo = t.sbo / 2;
  const uint32_t w = swizzle_width(t.swizzle) / 16;  // 1 (none), 2, 4, 8
  uint32_t elements;
  if (t.mn_major) {
    elements = t.swizzle == WgmmaSwizzle::none
                   ? evaluate({{T, 1}, {1, T}, {0, sbo}}, r) + evaluate({{8, T}, {0, lbo}}, k)
                   : evaluate({{T, 1}, {w, T}, {0, lbo}}, r) + evaluate({{8, w * T}, {0, sbo}}, k);
  } else {
    elements = t.swizzle == WgmmaSwizzle::none
                   ? evaluate({{8, T}, {0, sbo}}, r) + evaluate({{T, 1}, {0, lbo}}, k)
                   : evaluate({{8, w * T}, {0, sbo}}, r) + evaluate({{T, 1}, {0, T}}, k);
  }
  return 2 * elements;
}

// CuTe's Swizzle<B,4,3> on a byte address (B = 3, 2, 1 for 128B, 64B, 32B): bits [4, 4 + B)
// XOR bits [7, 7 + B). The tiles start at a multiple of 1024, so offsets within them do.
uint32_t swizzle_bytes(WgmmaSwizzle s, uint32_t a) {
  const uint32_t bits = s == WgmmaSwizzle::bytes128 ? 3 : s == WgmmaSwizzle::bytes64 ? 2
                                                      : s == WgmmaSwizzle::bytes32   ? 1
                                                                                     : 0;
  const uint32_t mask = (1u << bits) - 1;
  return a ^ (((a >> 7) & mask) << 4);
}

uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

// A tile of rows x k with strides of my choosing: K-major none puts the K core-matrix columns
// after all rows (LBO large, SBO one core matrix); MN-major none the K groups after all MN
// groups; swizzled MN-major puts the MN atoms side by side (LBO one atom) and the K groups
// after them (SBO large); swizzled K-major has dense rows (SBO = 8 rows).
TileLayout make_tile(bool mn_major, WgmmaSwizzle s, uint32_t rows, uint32_t k) {
  TileLayout t;
  t.mn_major = mn_major;
  t.swizzle = s;
  t.rows = rows;
  t.k = k;
  const uint32_t width = swizzle_width(s);
  if (s == WgmmaSwizzle::none) {
    t.sbo = 128;
    t.lbo = (rows + 7) / 8 * 128;
  } else if (mn_major) {
    t.lbo = 8 * width;
    t.sbo = (rows + width / 2 - 1) / (width / 2) * 8 * width;
  } else {
    t.sbo = 8 * width;
    t.lbo = 16;  // unused
  }
  uint32_t end = 0;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t kk = 0; kk < k; ++kk) {
      const uint32_t o = canonical_offset(t, r, kk) + 2;
      end = o > end ? o : end;
    }
  t.bytes = round_up(end, 1024);
  return t;
}

// The image of values[r * k + kk] (16-bit patterns) in the tile's layout.
std::vector<uint32_t> tile_image(const TileLayout& t, const std::vector<uint16_t>& values) {
  std::vector<uint32_t> image(t.bytes / 4, 0);
  unsigned char* bytes = reinterpret_cast<unsigned char*>(image.data());
  for (uint32_t r = 0; r < t.rows; ++r)
    for (uint32_t kk = 0; kk < t.k; ++kk)
      std::memcpy(bytes + swizzle_bytes(t.swizzle, canonical_offset(t, r, kk)),
                  &values[r * t.k + kk], 2);
  return image;
}

// ---------------------------------------------------------------- the kernel

enum Defect : int {
  kNone = 0,
  kReadBeforeWait,      // stores D's first register between the commit and the wait
  kNoFence,             // no wgmma.fence before the first wgmma
  kOverwriteOperand,    // thread 0 changes B's first element before the wait
  kThreadReturnsEarly,  // thread 127 returns before the fence
  kDisagreeingThread,   // thread 37 passes B's descriptor advanced by 16 bytes
  kNoWait,              // returns without wgmma.wait_group
  kBaseOffset,          // B's descriptor with base offset 1
  kStartOutside,        // B's descriptor starts past the dynamic shared memory
  kOnGuard,             // B's descriptor one repeat past its tile, onto a guard
  kMisalignedStart,     // a descriptor built for an address 8 bytes into the tile
  kWrongSwizzle,        // B's descriptor says 64B where the tile is 128B-swizzled
  kStartIntoRepeat,     // B's start 128 bytes into its 1024-byte swizzle repeat
  kStrideNotRepeat,     // B's SBO 512 in a 128B-swizzled layout
  kReservedBits,        // B's descriptor with bit 46 set (tcgen05's fixed 0b001)
};

struct Params {
  uint32_t a_bytes = 0, b_bytes = 0;  // images; a_bytes 0 when A comes from registers
  uint32_t a_lbo = 0, a_sbo = 0, b_lbo = 0, b_sbo = 0;
  WgmmaSwizzle swizzle = WgmmaSwizzle::none;
  int k_steps = 1;
  uint32_t a_step[4] = {}, b_step[4] = {};  // start offset of each k-step's 16 columns
  uint32_t a_warpgroup_offset = 0;  // start offset of the next warpgroup's 64 rows of A
  int k = 16;                       // the product's K (A rows in global memory are this long)
  int scale_d = 0;
  int defect = kNone;
};

// out (64 x N per warpgroup, row-major) = A B (+ C), A and B from their images (or A from the
// row-major a_global into registers), through the fragment layouts of the PTX ISA.
template <class T, int N, int Trans, int ScaleA, bool ARegisters>
__global__ void wgmma_kernel(const uint32_t* a_image, const uint32_t* b_image, const T* a_global,
                             const float* c, float* out, Params p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  const unsigned t = threadIdx.x, group = t / 128, lt = t % 128;
  const unsigned w = lt / 32, g = (lt % 32) / 4, q = lt % 4;

  // The tiles at a multiple of 1024 window bytes: swizzle patterns repeat there.
  const uint32_t base = shared_address(smem);
  unsigned char* a_tile = smem + (1024 - base % 1024) % 1024;
  unsigned char* b_tile = a_tile + p.a_bytes;
  for (unsigned i = t; i < p.a_bytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(a_tile)[i] = a_image[i];
  for (unsigned i = t; i < p.b_bytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(b_tile)[i] = b_image[i];
  if (p.defect == kOnGuard) DILATTN_SMEM_GUARD(b_tile + p.b_bytes, 128);
  fence_proxy_async_shared();
  __syncthreads();
  if (p.defect == kThreadReturnsEarly && t == 127) return;

  float d[N / 2];
  const unsigned row0 = 64 * group + 16 * w + g;  // this thread's rows: row0 and row0 + 8
  for (int i = 0; i < N / 2; ++i) {
    const unsigned row = row0 + ((i % 4) >= 2 ? 8 : 0), col = 8 * (i / 4) + 2 * q + (i % 2);
    d[i] = p.scale_d ? c[row * N + col] : __int_as_float(0x7fc00000);  // NaN: unread
  }
  const uint32_t a_address = shared_address(a_tile) + group * p.a_warpgroup_offset;
  const uint32_t b_address = shared_address(b_tile);
  uint32_t a[4][4];  // each k-step's A fragment, kept until the wait
  if (p.defect != kNoFence) wgmma_fence();
  for (int s = 0; s < p.k_steps; ++s) {
    WgmmaSwizzle b_swizzle = p.swizzle;
    uint32_t b_start = b_address + p.b_step[s];
    if (p.defect == kDisagreeingThread && t == 37) b_start += 16;
    if (p.defect == kOnGuard) b_start += 1024;
    if (p.defect == kStartOutside) b_start = (base + 0x10000u) / 1024 * 1024;
    if (p.defect == kWrongSwizzle) b_swizzle = WgmmaSwizzle::bytes64;
    if (p.defect == kStartIntoRepeat) b_start += 128;
    const uint32_t b_sbo = p.defect == kStrideNotRepeat ? 512 : p.b_sbo;
    uint64_t desc_b = make_wgmma_descriptor(b_start, p.b_lbo, b_sbo, b_swizzle);
    if (p.defect == kBaseOffset) desc_b |= uint64_t(1) << 49;
    if (p.defect == kReservedBits) desc_b |= uint64_t(1) << 46;
    const int scale_d = s == 0 ? p.scale_d : 1;
    if (ARegisters) {
      const T* r0 = a_global + row0 * p.k + 16 * s + 2 * q;
      const T* r8 = r0 + 8 * p.k;
      a[s][0] = load_pair(r0);
      a[s][1] = load_pair(r8);
      a[s][2] = load_pair(r0 + 8);
      a[s][3] = load_pair(r8 + 8);
      wgmma_rs<T, N, ScaleA, 1, Trans>(d, a[s], desc_b, scale_d);
    } else {
      const uint32_t a_start = a_address + p.a_step[s] + (p.defect == kMisalignedStart ? 8 : 0);
      const uint64_t desc_a = make_wgmma_descriptor(a_start, p.a_lbo, p.a_sbo, p.swizzle);
      wgmma_ss<T, N, ScaleA, 1, Trans, Trans>(d, desc_a, desc_b, scale_d);
    }
  }
  wgmma_commit_group();
  float early = 0.0f;
  if (p.defect == kReadBeforeWait) early = d[0];
  if (p.defect == kOverwriteOperand && t == 0) b_tile[0] ^= 1;
  if (p.defect == kNoWait) return;
  wgmma_wait_group<0>();
  wgmma_fence_operand<N / 2>(d);
  for (int i = 0; i < N / 2; ++i) {
    const unsigned row = row0 + ((i % 4) >= 2 ? 8 : 0), col = 8 * (i / 4) + 2 * q + (i % 2);
    out[row * N + col] = d[i];
  }
  if (p.defect == kReadBeforeWait) out[row0 * N + 2 * q] = early;
}

// ---------------------------------------------------------------- host side

float to_f(__half x) { return __half2float(x); }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> T from_f(float x);
template <> __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <class T>
uint16_t bits_of(T x) {
  uint16_t b;
  std::memcpy(&b, static_cast<const void*>(&x), 2);
  return b;
}

struct Case {
  bool mn_major = false;
  WgmmaSwizzle swizzle = WgmmaSwizzle::none;
  bool a_registers = false;
  int scale_d = 0;
  int scale_a = 1;
  int warpgroups = 1;
  int defect = kNone;
};

std::string case_name(const char* type, int n, const Case& c) {
  static const char* const swizzles[4] = {"none", "128B", "64B", "32B"};
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s N=%d %s-major %s A-%s scale-d=%d scale-a=%d wg=%d defect=%d",
                type, n, c.mn_major ? "MN" : "K", swizzles[static_cast<int>(c.swizzle)],
                c.a_registers ? "regs" : "smem", c.scale_d, c.scale_a, c.warpgroups, c.defect);
  return buf;
}

// One case: its operands, their tile images and strides, and its launch (out: 64 rows per
// warpgroup x N, row-major).
template <class T, int N>
struct Runner {
  Case c;
  int k = 16;
  TileLayout a_tile, b_tile;
  emu_test::DeviceVector<T> A, B;  // A: rows x k row-major, B: N x k (B[n][k])
  emu_test::DeviceVector<float> C, out;
  emu_test::DeviceVector<uint32_t> a_image, b_image;
  Params p;

  explicit Runner(const Case& cs, uint64_t seed) : c(cs) {
    const uint32_t width = swizzle_width(c.swizzle);
    // A K-major swizzled tile is one swizzle row wide; others hold two groups of 16 along K.
    k = (!c.mn_major && c.swizzle != WgmmaSwizzle::none) ? static_cast<int>(width / 2) : 32;
    const uint32_t rows = 64 * static_cast<uint32_t>(c.warpgroups);
    a_tile = make_tile(c.mn_major, c.swizzle, rows, static_cast<uint32_t>(k));
    b_tile = make_tile(c.mn_major, c.swizzle, N, static_cast<uint32_t>(k));
    uint64_t state = seed;
    auto uniform = [&] {  // [-2, 2)
      return static_cast<float>(simt::detail::splitmix64(state) >> 11) * 0x1p-53f * 4.0f - 2.0f;
    };
    A.resize(rows * k);
    B.resize(N * k);
    C.resize(rows * N);
    out.assign(rows * N, 0.0f);
    for (T& x : A) x = from_f<T>(uniform());
    for (T& x : B) x = from_f<T>(uniform());
    for (float& x : C) x = uniform();
    std::vector<uint16_t> a_bits(A.size()), b_bits(B.size());
    for (size_t i = 0; i < A.size(); ++i) a_bits[i] = bits_of(A[i]);
    for (size_t i = 0; i < B.size(); ++i) b_bits[i] = bits_of(B[i]);
    const std::vector<uint32_t> ai = tile_image(a_tile, a_bits), bi = tile_image(b_tile, b_bits);
    a_image.assign(ai.begin(), ai.end());
    b_image.assign(bi.begin(), bi.end());

    p.a_bytes = c.a_registers ? 0 : a_tile.bytes;
    p.b_bytes = b_tile.bytes;
    p.a_lbo = a_tile.lbo;
    p.a_sbo = a_tile.sbo;
    p.b_lbo = b_tile.lbo;
    p.b_sbo = b_tile.sbo;
    p.swizzle = c.swizzle;
    p.k_steps = k / 16;
    for (int s = 0; s < p.k_steps; ++s) {  // where column 16 s starts: the start's advance
      p.a_step[s] = canonical_offset(a_tile, 0, 16 * s);
      p.b_step[s] = canonical_offset(b_tile, 0, 16 * s);
    }
    p.a_warpgroup_offset = canonical_offset(a_tile, 64, 0);
    p.k = k;
    p.scale_d = c.scale_d;
    p.defect = c.defect;
  }

  size_t shared_bytes() const { return 1024 + p.a_bytes + p.b_bytes + 1024; }

  template <int Trans, int ScaleA>
  void launch_with() {
    const dim3 block(128 * c.warpgroups);
    if (c.a_registers) {
      DILATTN_LAUNCH((wgmma_kernel<T, N, Trans, ScaleA, true>), dim3(1), block, shared_bytes(),
                     nullptr)(a_image.data(), b_image.data(), A.data(), C.data(), out.data(), p);
    } else {
      DILATTN_LAUNCH((wgmma_kernel<T, N, Trans, ScaleA, false>), dim3(1), block, shared_bytes(),
                     nullptr)(a_image.data(), b_image.data(), A.data(), C.data(), out.data(), p);
    }
  }
  void launch() {
    if (c.mn_major) {
      c.scale_a < 0 ? launch_with<1, -1>() : launch_with<1, 1>();
    } else {
      c.scale_a < 0 ? launch_with<0, -1>() : launch_with<0, 1>();
    }
  }

  // Elements of out differing from the f64 product by more than the f32 summation bound.
  int64_t wrong_elements(const std::vector<float>& got, bool report, const std::string& name) {
    int64_t wrong = 0;
    const int rows = 64 * c.warpgroups;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < N; ++j) {
        double exact = c.scale_d ? C[i * N + j] : 0.0;
        double magnitude = std::fabs(exact);
        for (int kk = 0; kk < k; ++kk) {
          const double term = c.scale_a * static_cast<double>(to_f(A[i * k + kk])) *
                              to_f(B[j * k + kk]);
          exact += term;
          magnitude += std::fabs(term);
        }
        const float v = got[i * N + j];
        // K + 1 roundings of at most 2^-24 of a partial sum, each below `magnitude`.
        const bool ok = std::fabs(v - exact) <= (k + 1) * 0x1p-24 * magnitude + 1e-30;
        if (!ok && report && wrong < 3)
          CHECK_MSG(false, "%s: D[%d][%d] = %.9g, f64 product %.9g", name.c_str(), i, j,
                    double(v), exact);
        wrong += !ok;
      }
    return wrong;
  }
};

// (1), (2): a positive case in three thread orders.
template <class T, int N>
void check_case(const char* type, const Case& cs, uint64_t seed) {
  Runner<T, N> r(cs, seed);
  const std::string name = case_name(type, N, cs);
  bool launched = true, agree = false;
  const std::vector<float> got = emu_test::from_bytes<float>(emu_test::run_in_orders(
      [&] {
        std::fill(r.out.begin(), r.out.end(), 0.0f);
        r.launch();
        launched = emu_test::launched_ok(name.c_str()) && launched;
        return emu_test::as_bytes(r.out);
      },
      &agree));
  CHECK_MSG(launched, "%s: launch failed", name.c_str());
  CHECK_MSG(agree, "%s: thread orders disagree", name.c_str());
  const int64_t wrong = r.wrong_elements(got, true, name);
  CHECK_MSG(wrong == 0, "%s: %lld elements off the f64 product", name.c_str(),
            static_cast<long long>(wrong));
}

// Every layout, A from shared memory and from registers; scale-d 0 and 1 each (both_scale_d),
// or alternating over the cases.
template <class T, int N>
void check_layouts(const char* type, uint64_t seed, bool both_scale_d) {
  const WgmmaSwizzle swizzles[] = {WgmmaSwizzle::none, WgmmaSwizzle::bytes32,
                                   WgmmaSwizzle::bytes64, WgmmaSwizzle::bytes128};
  int index = 0;
  for (bool mn_major : {false, true})
    for (WgmmaSwizzle s : swizzles)
      for (bool a_registers : {false, true}) {
        Case c;
        c.mn_major = mn_major;
        c.swizzle = s;
        c.a_registers = a_registers;
        c.scale_d = (index + index / 2) % 2;
        check_case<T, N>(type, c, seed++);
        if (both_scale_d) {
          c.scale_d = 1 - c.scale_d;
          check_case<T, N>(type, c, seed++);
        }
        ++index;
      }
}

// A negative case: the launch fails and the message names `phrase`.
template <int N = 64>
void check_fails(int defect, const char* phrase, bool a_registers = false, int threads = 128) {
  Case c;
  c.swizzle = WgmmaSwizzle::bytes128;
  c.a_registers = a_registers;
  c.scale_d = 1;
  c.defect = defect;
  Runner<__nv_bfloat16, N> r(c, 99);
  const std::string name = case_name("bf16", N, c);
  if (threads == 128) {
    r.launch();
  } else {
    DILATTN_LAUNCH((wgmma_kernel<__nv_bfloat16, N, 0, 1, false>), dim3(1), dim3(threads),
                   r.shared_bytes(), nullptr)(r.a_image.data(), r.b_image.data(), r.A.data(),
                                              r.C.data(), r.out.data(), r.p);
  }
  const cudaError_t e = cudaGetLastError();
  const std::string message = simt::last_error_message();
  CHECK_MSG(e == cudaErrorLaunchFailure && message.find(phrase) != std::string::npos,
            "%s: want a failed launch naming \"%s\", got %s (%s)", name.c_str(), phrase,
            cudaGetErrorName(e), message.c_str());
  std::printf("  defect %d: %s\n", defect, message.c_str());
}

void check_negative() {
  // D read before the wait: NaN in every thread, and the rest of D still right.
  {
    Case c;
    c.swizzle = WgmmaSwizzle::bytes128;
    c.scale_d = 1;
    c.defect = kReadBeforeWait;
    Runner<__half, 64> r(c, 7);
    r.launch();
    CHECK(emu_test::launched_ok("read before wait"));
    // Threads store their early read at (16w + g, 2q): rows 0-7 of each 16, columns 0, 2, 4, 6.
    int64_t nan_reads = 0;
    for (int row = 0; row < 64; ++row)
      for (int col = 0; col < 8; col += 2)
        nan_reads += (row % 16 < 8 && std::isnan(r.out[row * 64 + col])) ? 1 : 0;
    CHECK_MSG(nan_reads == 128, "read before wait: %lld of 128 early reads of D were NaN",
              static_cast<long long>(nan_reads));
    const std::vector<float> got(r.out.begin(), r.out.end());
    const int64_t wrong = r.wrong_elements(got, false, "read before wait");
    CHECK_MSG(wrong == 128, "read before wait: %lld elements wrong, want the 128 early reads",
              static_cast<long long>(wrong));
  }
  check_fails(kNoFence, "wgmma.mma_async.m64n64k16.f32.bf16.bf16 without a wgmma.fence before it");
  check_fails(kOverwriteOperand,
              "shared-memory operand of a wgmma overwritten before its wgmma.wait_group");
  check_fails(kThreadReturnsEarly, "wgmma.fence reached by 127 of the 128 threads 0..127");
  check_fails(kDisagreeingThread, "threads 0 and 37 of the warpgroup 0..127 disagree on the B "
                                  "descriptor");
  check_fails(kDisagreeingThread, "disagree on the B descriptor", true);
  check_fails(kNoWait, "returned with 4 wgmma.mma_async operations of its warpgroup never "
                       "waited for");
  check_fails(kBaseOffset, "has matrix base offset 1; the emulator needs 0");
  check_fails(kStartOutside, "is outside the block's dynamic shared memory");
  check_fails(kStartIntoRepeat, "is 128 bytes into its 1024-byte swizzle repeat; the emulator "
                                "needs < 128");
  check_fails(kStrideNotRepeat, "stride dimension byte offset 512 is not a multiple of the "
                                "1024-byte swizzle repeat");
  check_fails(kReservedBits, "sets bits outside its fields (0x0000400000000000");
  check_fails(kOnGuard, "lies in the guard after a carved tile");
  check_fails(kMisalignedStart, "must be multiples of 16");
  check_fails(kNone, "the block's 64 threads end inside the warpgroup of threads 0..127", false,
              64);

  // A descriptor with the wrong swizzle reads the tile in the wrong order: wrong numbers.
  {
    Case c;
    c.swizzle = WgmmaSwizzle::bytes128;
    c.scale_d = 0;
    c.defect = kWrongSwizzle;
    Runner<__half, 64> r(c, 8);
    r.launch();
    CHECK(emu_test::launched_ok("wrong swizzle"));
    const std::vector<float> got(r.out.begin(), r.out.end());
    const int64_t wrong = r.wrong_elements(got, false, "wrong swizzle");
    CHECK_MSG(wrong >= 64 * 64 / 2, "wrong swizzle: only %lld of 4096 elements wrong",
              static_cast<long long>(wrong));
  }
}

// (3) wait_group 1 completes the older of two groups; a wait completes no uncommitted wgmma.
template <class T>
__global__ void wait_group_kernel(const uint32_t* image, float* out) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  const unsigned t = threadIdx.x;
  const uint32_t base = shared_address(smem);
  unsigned char* tile = smem + (1024 - base % 1024) % 1024;  // 64 x 16, K-major, no swizzle
  for (unsigned i = t; i < 2048 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(tile)[i] = image[i];
  fence_proxy_async_shared();
  __syncthreads();
  const uint64_t desc = make_wgmma_descriptor(shared_address(tile), 1024, 128,
                                              WgmmaSwizzle::none);
  float first[4], second[4], third[4];
  wgmma_fence();
  wgmma_ss<T, 8>(first, desc, desc, 0);
  wgmma_commit_group();
  wgmma_ss<T, 8>(second, desc, desc, 0);
  wgmma_commit_group();
  wgmma_wait_group<1>();
  out[t * 12 + 0] = first[0];   // complete
  out[t * 12 + 1] = second[0];  // still pending: NaN
  wgmma_fence();
  wgmma_ss<T, 8>(third, desc, desc, 0);  // not committed
  wgmma_wait_group<0>();
  out[t * 12 + 2] = second[0];  // complete
  out[t * 12 + 3] = third[0];   // never committed: NaN
  wgmma_commit_group();
  wgmma_wait_group<0>();
  out[t * 12 + 4] = third[0];
}

void check_wait_groups() {
  std::vector<uint16_t> bits(64 * 16);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = bits_of(from_f<__half>(0.25f * (i % 7)));
  const TileLayout tile = [] {
    TileLayout t;
    t.rows = 64;
    t.k = 16;
    t.lbo = 1024;
    t.sbo = 128;
    t.bytes = 2048;
    return t;
  }();
  const std::vector<uint32_t> image_host = tile_image(tile, bits);
  emu_test::DeviceVector<uint32_t> image(image_host.begin(), image_host.end());
  emu_test::DeviceVector<float> out(128 * 12, 0.0f);
  DILATTN_LAUNCH(wait_group_kernel<__half>, dim3(1), dim3(128), 1024 + 2048, nullptr)(
      image.data(), out.data());
  CHECK(emu_test::launched_ok("wait groups"));
  bool first_done = true, second_pending = true, second_done = true, third_pending = true,
       third_done = true;
  for (int t = 0; t < 128; ++t) {
    first_done = first_done && !std::isnan(out[t * 12]);
    second_pending = second_pending && std::isnan(out[t * 12 + 1]);
    second_done = second_done && out[t * 12 + 2] == out[t * 12];
    third_pending = third_pending && std::isnan(out[t * 12 + 3]);
    third_done = third_done && out[t * 12 + 4] == out[t * 12];
  }
  CHECK_MSG(first_done && second_pending, "wait_group 1: the older group done, the newer not");
  CHECK_MSG(second_done && third_pending, "wait_group 0 completes no uncommitted wgmma");
  CHECK_MSG(third_done, "the uncommitted wgmma completes after its commit and wait");
}

// (4) The descriptor's fields, as the PTX ISA's Matrix Descriptor Format places them.
void check_descriptor_bits() {
  const uint64_t d = make_wgmma_descriptor(0x12340, 0x1230, 0x3ff0, WgmmaSwizzle::bytes64);
  const uint64_t fields = 0x3fffull | (0x3fffull << 16) | (0x3fffull << 32) | (7ull << 49) |
                          (3ull << 62);
  CHECK_MSG((d & 0x3fff) == 0x1234 && ((d >> 16) & 0x3fff) == 0x123 &&
                ((d >> 32) & 0x3fff) == 0x3ff && ((d >> 49) & 7) == 0 && (d >> 62) == 2 &&
                (d & ~fields) == 0,
            "descriptor 0x%016llx: want start 0x1234, LBO 0x123, SBO 0x3ff, base offset 0, "
            "layout 2 (encoded), nothing else",
            static_cast<unsigned long long>(d));
}

// The host model against the PTX ISA's worked examples (section "Canonical Layouts", bf16,
// MN-major; exact layouts in elements, LBO and SBO as given there).
void check_ptx_examples() {
  struct Example {
    WgmmaSwizzle swizzle;
    uint32_t lbo, sbo, rows;  // elements
    std::vector<Mode> mn, k;
  };
  const Example examples[] = {
      // ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128, SBO 64
      {WgmmaSwizzle::none, 128, 64, 16, {{8, 1}, {1, 8}, {2, 64}}, {{8, 8}, {2, 128}}},
      // ((8,2,2),(8,2)):((1,8,128),(16,256)), LBO 128, SBO 256
      {WgmmaSwizzle::bytes32, 128, 256, 32, {{8, 1}, {2, 8}, {2, 128}}, {{8, 16}, {2, 256}}},
      // ((8,4,2),(8,2)):((1,8,256),(32,512)), LBO 256, SBO 512
      {WgmmaSwizzle::bytes64, 256, 512, 64, {{8, 1}, {4, 8}, {2, 256}}, {{8, 32}, {2, 512}}},
  };
  for (const Example& e : examples) {
    TileLayout t;
    t.mn_major = true;
    t.swizzle = e.swizzle;
    t.lbo = 2 * e.lbo;
    t.sbo = 2 * e.sbo;
    int64_t differ = 0;
    for (uint32_t r = 0; r < e.rows; ++r)
      for (uint32_t kk = 0; kk < 16; ++kk)
        differ += canonical_offset(t, r, kk) != 2 * (evaluate(e.mn.data(), e.mn.size(), r) +
                                                     evaluate(e.k.data(), e.k.size(), kk));
    CHECK_MSG(differ == 0, "the host model misses the PTX ISA's example (swizzle %d) at %lld "
              "elements", static_cast<int>(e.swizzle), static_cast<long long>(differ));
  }
}

}  // namespace

int main() {
  check_ptx_examples();
  check_descriptor_bits();
  check_layouts<__half, 64>("f16", 100, true);
  check_layouts<__nv_bfloat16, 64>("bf16", 200, true);
  check_layouts<__half, 8>("f16", 300, false);
  check_layouts<__nv_bfloat16, 8>("bf16", 350, false);
  check_layouts<__nv_bfloat16, 128>("bf16", 400, false);
  check_layouts<__half, 128>("f16", 450, false);
  check_layouts<__half, 256>("f16", 500, false);
  check_layouts<__nv_bfloat16, 256>("bf16", 550, false);
  {
    Case c;  // (2) imm-scale-a = -1, with A from shared memory and from registers
    c.swizzle = WgmmaSwizzle::bytes128;
    c.scale_d = 1;
    c.scale_a = -1;
    check_case<__nv_bfloat16, 64>("bf16", c, 600);
    c.a_registers = true;
    c.mn_major = true;
    check_case<__half, 128>("f16", c, 601);
  }
  {
    Case c;  // (2) two warpgroups, each its own 64 rows of A
    c.swizzle = WgmmaSwizzle::bytes128;
    c.scale_d = 1;
    c.warpgroups = 2;
    check_case<__half, 64>("f16", c, 700);
    c.a_registers = true;
    c.mn_major = true;
    c.swizzle = WgmmaSwizzle::bytes32;
    check_case<__nv_bfloat16, 64>("bf16", c, 701);
  }
  check_wait_groups();
  check_negative();
  return harness::finish("emu_wgmma");
}
