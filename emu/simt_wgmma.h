// simt_wgmma.h - the Hopper warpgroup matrix multiply wgmma.mma_async.sync.aligned.m64nNk16.f32.
// {f16,bf16}.{f16,bf16} with shared-memory matrix descriptors, and wgmma.fence,
// wgmma.commit_group and wgmma.wait_group, for the emulator (sm_90a).
//
// Part of the SIMT emulator (emu/README.md). cuda/wgmma.cuh calls these where nvcc emits the
// PTX. The PTX ISA sections followed: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
// Instructions" (wgmma.mma_async), "Register Fragments and Shared Memory Matrix Layouts" with
// its "Matrix Fragments for wgmma.mma_async.m64nNk16", "Shared Memory Matrix Layout",
// "Leading Dimension Byte Offset", "Stride Dimension Byte Offset", "Canonical Layouts" and
// "Matrix Descriptor Format", and the sections on wgmma.fence, wgmma.commit_group and
// wgmma.wait_group.
//
// All four are collectives of a warpgroup (128 threads whose first has a linear index that is a
// multiple of 128): every thread must reach the same one (.sync.aligned), or the launch fails
// ("... reached by 127 of the 128 threads ..."). wgmma.mma_async computes D (64 x N, f32) =
// A (64 x 16) B (16 x N) [+ D], N a multiple of 8 from 8 to 256.
//
// Register fragments (thread t of the warpgroup, w = t / 32, g = (t % 32) / 4, q = t % 4; a
// 32-bit register holds two 16-bit elements, the lower-indexed in the low half):
//   D: d[4i]   = D[16w+g][8i+2q]    d[4i+1] = D[16w+g][8i+2q+1]      (i = 0 .. N/8 - 1)
//      d[4i+2] = D[16w+g+8][8i+2q]  d[4i+3] = D[16w+g+8][8i+2q+1]
//   A in registers: a[0] = A[16w+g][2q..2q+1]    a[1] = A[16w+g+8][2q..2q+1]
//                   a[2] = A[16w+g][2q+8..2q+9]  a[3] = A[16w+g+8][2q+8..2q+9]
// That is mma.sync m16n8k16's layout per warp, warp w holding rows 16w .. 16w + 15. The PTX ISA
// gives these layouts only as figures (its text lists the registers, a0..a7 and d0..d(N/2-1),
// low to high); the table here is CUTLASS's CLayout_64xN and ALayout_64x16
// (cute/atom/mma_traits_sm90_gmma.hpp), on which CUTLASS-built Hopper kernels rely.
//
// Descriptor (64 bits): start address bits 0-13, leading dimension byte offset (LBO) bits 16-29,
// stride dimension byte offset (SBO) bits 32-45, each a byte count >> 4; base offset bits 49-51;
// layout bits 62-63 (0 no swizzle, 1 128B, 2 64B, 3 32B). Element (r, k) of an operand, r along
// M (A) or N (B), k = 0 .. 15, sits at start + offset(r, k) (16-bit elements; the PTX ISA's
// canonical CuTe layouts written out):
//   K-major  none  (r%8)*16 + (r/8)*SBO + (k%8)*2 + (k/8)*LBO
//            W-byte swizzle (W = 32, 64, 128): (r%8)*W + (r/8)*SBO + k*2   (LBO unused)
//   MN-major none  (r%8)*2 + (r/8)*SBO + (k%8)*16 + (k/8)*LBO
//            W-byte swizzle: (r%(W/2))*2 + (r/(W/2))*LBO + (k%8)*W + (k/8)*SBO
// and the swizzle XORs bits 4-6 of the shared-window byte address a with its bits 7-9:
// 128B a ^ (((a >> 7) & 7) << 4), 64B with & 3, 32B with & 1 (what TMA writes). K-major is
// imm-trans = 0, MN-major imm-trans = 1; A from registers has no transpose.
//
// Checks (the launch fails, naming the threads): threads of the warpgroup passing different
// descriptors, N, types, scale-d or immediates; immediates other than +-1 (scale) or 0/1
// (transpose); a descriptor with a nonzero base offset or reserved bits set; for a swizzled
// layout a start address 128 or more bytes into its swizzle repeat (1024, 512 or 256 bytes) or
// a stride offset it uses (SBO; LBO too for MN-major) not a multiple of the repeat - where the
// hardware's behaviour is not spelled out, so kernels start a tile at a repeat, advance the start
// by 32 bytes along K within the first 128 bytes, or by whole repeats; an operand element
// outside the block's dynamic shared memory or on a tile guard (SmemCarver); a block with no
// whole warpgroup.
//
// Asynchrony, as the PTX ISA defines it (wgmma.fence: before the first wgmma and between a
// register access and a wgmma on the same registers; commit_group: batches the thread's
// uncommitted wgmmas into a group; wait_group N: waits until at most the newest N groups are
// pending; accessing D or A's registers before the wait that covers the wgmma is undefined):
//   issue   takes A's registers and the shared-memory operand bytes, computes the product (f32
//           products of the exact operands, summed in k order from D or 0, as simt_mma.h), and
//           writes NaN into the thread's D registers, so a read before the wait sees NaN. A
//           later wgmma on the same D registers reads the pending value, not the NaN (the PTX
//           ISA orders accumulator accesses across wgmmas of one shape);
//   commit  closes the warpgroup's uncommitted wgmmas into a group (an empty one is allowed);
//   wait N  completes every committed group but the newest N: re-reads the shared-memory
//           operand bytes, failing the launch if any changed since the issue ("shared-memory
//           operand of a wgmma overwritten before its wgmma.wait_group"), and writes D.
//           Uncommitted wgmmas are never completed.
// Conservative where the PTX ISA's rule is finer: a wgmma.mma_async fails unless every thread
// executed wgmma.fence since its start or its last wgmma.wait_group ("wgmma.mma_async without a
// wgmma.fence before it"); the PTX rule asks for the fence only after an access to the same
// registers, and a wait_group is nearly always followed by one. A thread that returns while
// its warpgroup has wgmmas not waited for fails the launch. Not checked: the async-proxy fence
// the PTX ISA asks for between generic-proxy writes to an operand and the wgmma reading it
// (fence.proxy.async; the emulator has one proxy), writes to A's registers before the wait
// (they were taken at the issue), and a fence between pending wgmmas of different shapes on
// the same accumulators (they chain as if of one shape).
// Checked by tests/emu/test_emu_wgmma.cpp.
#ifndef DILATTN_SIMT_WGMMA_H
#define DILATTN_SIMT_WGMMA_H

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simt_device.h"
#include "simt_mma.h"

namespace simt {
namespace detail {

constexpr unsigned kWarpgroupThreads = 128;

// The descriptor's layout field (bits 62-63).
enum WgmmaLayoutType : int {
  wgmma_no_swizzle = 0,
  wgmma_swizzle_128b = 1,
  wgmma_swizzle_64b = 2,
  wgmma_swizzle_32b = 3
};
// The bytes of one swizzled row (the swizzle's width) and of its repeating pattern.
inline uint32_t wgmma_swizzle_width(int layout) {
  return layout == wgmma_swizzle_128b ? 128 : layout == wgmma_swizzle_64b ? 64 : 32;
}
inline uint32_t wgmma_swizzle_repeat(int layout) { return 8 * wgmma_swizzle_width(layout); }
inline const char* wgmma_layout_name(int layout) {
  static const char* const names[4] = {"no swizzle", "128B swizzle", "64B swizzle",
                                       "32B swizzle"};
  return names[layout & 3];
}

enum WgmmaElement : int { wgmma_f16 = 0, wgmma_bf16 = 1 };

// One thread's operands of a wgmma.mma_async, posted to the group collective (on its stack).
struct WgmmaIssue {
  int element = wgmma_f16;
  int n = 0;
  float* d = nullptr;
  const uint32_t* a = nullptr;  // A's four registers; nullptr: A from a_desc
  uint64_t a_desc = 0;
  uint64_t b_desc = 0;
  int scale_d = 0;
  int scale_a = 1;
  int scale_b = 1;
  int trans_a = 0;
  int trans_b = 0;
};

// A 16-bit operand element read from shared memory at the issue, compared at the completion.
struct WgmmaSharedRead {
  uint32_t address = 0;  // window address
  uint16_t bits = 0;
  uint16_t mn = 0;  // its row (A) or column (B)
  uint8_t k = 0;
  char operand = 'A';
};

// A wgmma issued and not yet completed: its result, computed at the issue, lands at the wait.
struct PendingWgmma {
  uint64_t id = 0;
  int group = -1;  // the commit group, -1 until committed
  int n = 0;
  std::string name;
  std::vector<float*> d;      // each thread's D registers
  std::vector<float> result;  // [thread][n / 2]
  std::vector<WgmmaSharedRead> reads;
};

struct WarpgroupWgmma {
  std::vector<PendingWgmma> pending;  // issue order, which is completion order
  int committed_groups = 0;
  // The value a register will hold once the newest pending wgmma writing it completes, and
  // that wgmma's id: the accumulator a chained wgmma reads.
  std::unordered_map<const float*, std::pair<float, uint64_t>> latest;
};

struct WgmmaState : BlockExtension {
  std::vector<unsigned char> fenced;  // per thread: wgmma.fence since start or the last wait
  std::vector<WarpgroupWgmma> warpgroups;
  uint64_t next_id = 1;

  void thread_exit(BlockRun& b, const Fiber& f) override {
    const unsigned wg = f.linear / kWarpgroupThreads;
    if (wg >= warpgroups.size() || warpgroups[wg].pending.empty()) return;
    size_t uncommitted = 0;
    for (const PendingWgmma& p : warpgroups[wg].pending) uncommitted += p.group < 0;
    const size_t count = warpgroups[wg].pending.size();
    b.error = thread_name(b, f.linear) + ": returned with " + std::to_string(count) +
              " wgmma.mma_async operations of its warpgroup never waited for (" +
              std::to_string(uncommitted) +
              " not committed; missing wgmma.commit_group or wgmma.wait_group)";
  }
};

inline WgmmaState& wgmma_state(BlockRun& b) {
  WgmmaState& s = block_extension<WgmmaState>(b);
  if (s.fenced.size() != b.fibers.size()) {
    s.fenced.assign(b.fibers.size(), 0);
    s.warpgroups.resize((b.fibers.size() + kWarpgroupThreads - 1) / kWarpgroupThreads);
  }
  return s;
}

inline void wgmma_error(BlockRun& b, const std::string& what) {
  if (b.error.empty()) b.error = block_name(b) + ": " + what;
}

// Fails the calling thread (built in a function that returns: see simt_async_copy.h).
[[gnu::noinline]] inline void set_wgmma_thread_error(const char* what) {
  Fiber& f = current_fiber();
  BlockRun& b = *f.block;
  if (b.error.empty()) b.error = thread_name(b, f.linear) + ": " + what;
}
[[noreturn]] inline void fail_wgmma_thread(const char* what) {
  set_wgmma_thread_error(what);
  fail_thread(current_fiber().block->error);
}

// Posts the calling thread's part of a warpgroup collective.
inline void post_wgmma(GroupResolveFn resolve, const char* name, const void* data) {
  Fiber& f = current_fiber();
  const unsigned n = static_cast<unsigned>(f.block->fibers.size());
  const unsigned first = f.linear / kWarpgroupThreads * kWarpgroupThreads;
  if (first + kWarpgroupThreads > n) {
    char buf[192];
    std::snprintf(buf, sizeof buf,
                  "%s: a warpgroup is 128 threads, and the block's %u threads end inside the "
                  "warpgroup of threads %u..%u",
                  name, n, first, first + kWarpgroupThreads - 1);
    fail_wgmma_thread(buf);
  }
  GroupPost post;
  post.resolve = resolve;
  post.name = name;
  post.first = first;
  post.count = kWarpgroupThreads;
  post.data = data;
  group_collective(post);
}

// ---------------------------------------------------------------- descriptors and layouts

struct WgmmaDescriptor {
  uint32_t start = 0;  // window byte address
  uint32_t lbo = 0;    // bytes
  uint32_t sbo = 0;    // bytes
  uint32_t base_offset = 0;
  int layout = wgmma_no_swizzle;
  uint64_t reserved = 0;  // bits outside every field
};

inline WgmmaDescriptor decode_wgmma_descriptor(uint64_t desc) {
  WgmmaDescriptor d;
  d.start = static_cast<uint32_t>(desc & 0x3fffu) << 4;
  d.lbo = static_cast<uint32_t>((desc >> 16) & 0x3fffu) << 4;
  d.sbo = static_cast<uint32_t>((desc >> 32) & 0x3fffu) << 4;
  d.base_offset = static_cast<uint32_t>((desc >> 49) & 7u);
  d.layout = static_cast<int>(desc >> 62);
  const uint64_t fields = 0x3fffull | (0x3fffull << 16) | (0x3fffull << 32) | (7ull << 49) |
                          (3ull << 62);
  d.reserved = desc & ~fields;
  return d;
}

// Byte offset from the start address of element (r, k) (r along M or N, k = 0 .. 15) of a
// 16-bit operand in the canonical layout, before the swizzle.
inline uint32_t wgmma_element_offset(const WgmmaDescriptor& d, bool mn_major, uint32_t r,
                                     uint32_t k) {
  if (d.layout == wgmma_no_swizzle) {
    return mn_major ? (r % 8) * 2 + (r / 8) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo
                    : (r % 8) * 16 + (r / 8) * d.sbo + (k % 8) * 2 + (k / 8) * d.lbo;
  }
  const uint32_t width = wgmma_swizzle_width(d.layout), along = width / 2;
  return mn_major ? (r % along) * 2 + (r / along) * d.lbo + (k % 8) * width + (k / 8) * d.sbo
                  : (r % 8) * width + (r / 8) * d.sbo + k * 2;
}

// The swizzle on the shared-window byte address: bits 4-6 XOR bits 7-9 (128B), 7-8 (64B) or 7
// (32B), the pattern TMA writes.
inline uint32_t wgmma_swizzle(int layout, uint32_t address) {
  const uint32_t mask = layout == wgmma_swizzle_128b  ? 7
                        : layout == wgmma_swizzle_64b ? 3
                        : layout == wgmma_swizzle_32b ? 1
                                                      : 0;
  return address ^ (((address >> 7) & mask) << 4);
}

// Empty when descriptor `desc` of `operand` is one the emulator reads; else why not.
inline std::string wgmma_descriptor_problem(const char* name, char operand, uint64_t desc,
                                            bool mn_major) {
  const WgmmaDescriptor d = decode_wgmma_descriptor(desc);
  char buf[320];
  buf[0] = '\0';
  if (d.reserved != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: %c descriptor 0x%016llx sets bits outside its fields (0x%016llx; a "
                  "tcgen05 descriptor?)",
                  name, operand, static_cast<unsigned long long>(desc),
                  static_cast<unsigned long long>(d.reserved));
  } else if (d.base_offset != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: %c descriptor 0x%016llx has matrix base offset %u; the emulator needs 0 "
                  "(start swizzled tiles at a repeat boundary)",
                  name, operand, static_cast<unsigned long long>(desc), d.base_offset);
  } else if (d.layout != wgmma_no_swizzle) {
    const uint32_t repeat = wgmma_swizzle_repeat(d.layout);
    const uint32_t into = d.start % repeat;
    const bool lbo_used = mn_major;
    if (into >= 128) {
      std::snprintf(buf, sizeof buf,
                    "%s: %c descriptor 0x%016llx (%s): start address 0x%x is %u bytes into its "
                    "%u-byte swizzle repeat; the emulator needs < 128 (a tile starts at a "
                    "repeat and a k-step advances the start by 32 bytes within the first 128)",
                    name, operand, static_cast<unsigned long long>(desc),
                    wgmma_layout_name(d.layout), d.start, into, repeat);
    } else if (d.sbo % repeat != 0 || (lbo_used && d.lbo % repeat != 0)) {
      std::snprintf(buf, sizeof buf,
                    "%s: %c descriptor 0x%016llx (%s, %s-major): %s %u is not a multiple of the "
                    "%u-byte swizzle repeat",
                    name, operand, static_cast<unsigned long long>(desc),
                    wgmma_layout_name(d.layout), mn_major ? "MN" : "K",
                    d.sbo % repeat != 0 ? "stride dimension byte offset"
                                        : "leading dimension byte offset",
                    d.sbo % repeat != 0 ? d.sbo : d.lbo, repeat);
    }
  }
  return buf;
}

// Reads operand `operand` (rows x 16, row-major into out) through descriptor `desc`, recording
// each element's bytes in `reads`. Returns the error, empty when none.
template <class T>
inline std::string gather_wgmma_operand(BlockRun& b, const char* name, char operand,
                                        uint64_t desc, uint32_t rows, bool mn_major, float scale,
                                        std::vector<float>& out,
                                        std::vector<WgmmaSharedRead>& reads) {
  std::string problem = wgmma_descriptor_problem(name, operand, desc, mn_major);
  if (!problem.empty()) return problem;
  const WgmmaDescriptor d = decode_wgmma_descriptor(desc);
  out.assign(rows * 16, 0.0f);
  const uint32_t shared_end = kSharedWindowBase + static_cast<uint32_t>(b.shared_bytes);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t k = 0; k < 16; ++k) {
      const uint32_t address =
          wgmma_swizzle(d.layout, d.start + wgmma_element_offset(d, mn_major, r, k));
      const unsigned char* p = shared_window_pointer(b, address, 2);
      char buf[320];
      if (p == nullptr) {
        std::snprintf(buf, sizeof buf,
                      "%s: %c element (%s %u, k %u) at shared 0x%x is outside the block's "
                      "dynamic shared memory (0x%x..0x%x); descriptor 0x%016llx",
                      name, operand, operand == 'A' ? "row" : "column", r, k, address,
                      kSharedWindowBase, shared_end, static_cast<unsigned long long>(desc));
        return buf;
      }
      const size_t offset = static_cast<size_t>(p - b.shared);
      for (const auto& g : b.guards) {
        if (offset + 2 > g.first && offset < g.first + g.second) {
          std::snprintf(buf, sizeof buf,
                        "%s: %c element (%s %u, k %u) at shared 0x%x lies in the guard after a "
                        "carved tile: the descriptor reaches past its tile",
                        name, operand, operand == 'A' ? "row" : "column", r, k, address);
          return buf;
        }
      }
      WgmmaSharedRead read;
      read.address = address;
      std::memcpy(&read.bits, p, 2);
      read.mn = static_cast<uint16_t>(r);
      read.k = static_cast<uint8_t>(k);
      read.operand = operand;
      reads.push_back(read);
      out[r * 16 + k] = scale * mma_half_to_float(read.bits, static_cast<const T*>(nullptr));
    }
  }
  return std::string();
}

inline std::string wgmma_name(const WgmmaIssue& i) {
  const char* type = i.element == wgmma_bf16 ? "bf16" : "f16";
  char buf[96];
  std::snprintf(buf, sizeof buf, "wgmma.mma_async.m64n%dk16.f32.%s.%s%s", i.n, type, type,
                i.a != nullptr ? " (A in registers)" : "");
  return buf;
}

// The first field two threads' issues differ in, or nullptr.
inline const char* wgmma_disagreement(const WgmmaIssue& x, const WgmmaIssue& y) {
  if (x.element != y.element) return "the element type";
  if (x.n != y.n) return "N";
  if ((x.a == nullptr) != (y.a == nullptr)) return "where A comes from (registers or shared)";
  if (x.a == nullptr && x.a_desc != y.a_desc) return "the A descriptor";
  if (x.b_desc != y.b_desc) return "the B descriptor";
  if ((x.scale_d != 0) != (y.scale_d != 0)) return "scale-d";
  if (x.scale_a != y.scale_a) return "imm-scale-a";
  if (x.scale_b != y.scale_b) return "imm-scale-b";
  if (x.trans_a != y.trans_a) return "imm-trans-a";
  if (x.trans_b != y.trans_b) return "imm-trans-b";
  return nullptr;
}

template <class T>
inline void resolve_wgmma_mma(BlockRun& b, unsigned first, unsigned count) {
  WgmmaState& s = wgmma_state(b);
  auto issue_of = [&](unsigned t) -> const WgmmaIssue& {
    return *static_cast<const WgmmaIssue*>(b.fibers[first + t].group.data);
  };
  const WgmmaIssue& i0 = issue_of(0);
  const std::string name = wgmma_name(i0);
  char buf[320];
  for (unsigned t = 1; t < count; ++t) {
    const WgmmaIssue& it = issue_of(t);
    if (const char* what = wgmma_disagreement(i0, it)) {
      std::snprintf(buf, sizeof buf,
                    "%s: threads %u and %u of the warpgroup %u..%u disagree on %s "
                    "(A desc 0x%llx / 0x%llx, B desc 0x%llx / 0x%llx, N %d / %d)",
                    name.c_str(), first, first + t, first, first + count - 1, what,
                    static_cast<unsigned long long>(i0.a_desc),
                    static_cast<unsigned long long>(it.a_desc),
                    static_cast<unsigned long long>(i0.b_desc),
                    static_cast<unsigned long long>(it.b_desc), i0.n, it.n);
      wgmma_error(b, buf);
      return;
    }
  }
  if (i0.n < 8 || i0.n > 256 || i0.n % 8 != 0 || (i0.scale_a != 1 && i0.scale_a != -1) ||
      (i0.scale_b != 1 && i0.scale_b != -1) || (i0.trans_a != 0 && i0.trans_a != 1) ||
      (i0.trans_b != 0 && i0.trans_b != 1) || (i0.a != nullptr && i0.trans_a != 0)) {
    std::snprintf(buf, sizeof buf,
                  "%s: invalid operands: N %d (a multiple of 8 in 8..256), imm-scale-a %d, "
                  "imm-scale-b %d (+-1), imm-trans-a %d, imm-trans-b %d (0 or 1; none for A in "
                  "registers)",
                  name.c_str(), i0.n, i0.scale_a, i0.scale_b, i0.trans_a, i0.trans_b);
    wgmma_error(b, buf);
    return;
  }
  for (unsigned t = 0; t < count; ++t) {
    if (!s.fenced[first + t]) {
      if (b.error.empty())
        b.error = thread_name(b, first + t) + ": " + name +
                  " without a wgmma.fence before it (since the thread's start or its last "
                  "wgmma.wait_group)";
      return;
    }
  }

  // The operands, as the tensor core reads them at the issue.
  const unsigned n = static_cast<unsigned>(i0.n);
  PendingWgmma op;
  op.id = s.next_id++;
  op.n = i0.n;
  op.name = name;
  std::vector<float> A, B;  // A: 64 x 16, B: n x 16 (B[col][k])
  if (i0.a == nullptr) {
    std::string e = gather_wgmma_operand<T>(b, name.c_str(), 'A', i0.a_desc, 64, i0.trans_a != 0,
                                            static_cast<float>(i0.scale_a), A, op.reads);
    if (!e.empty()) return wgmma_error(b, e);
  } else {
    A.assign(64 * 16, 0.0f);
    const float sa = static_cast<float>(i0.scale_a);
    for (unsigned t = 0; t < count; ++t) {
      const uint32_t* a = issue_of(t).a;
      const unsigned w = t / 32, g = (t % 32) / 4, q = t % 4, row = 16 * w + g, col = 2 * q;
      for (int e = 0; e < 2; ++e) {
        A[row * 16 + col + e] = sa * mma_element<T>(a[0], e);
        A[(row + 8) * 16 + col + e] = sa * mma_element<T>(a[1], e);
        A[row * 16 + col + 8 + e] = sa * mma_element<T>(a[2], e);
        A[(row + 8) * 16 + col + 8 + e] = sa * mma_element<T>(a[3], e);
      }
    }
  }
  std::string e = gather_wgmma_operand<T>(b, name.c_str(), 'B', i0.b_desc, n, i0.trans_b != 0,
                                          static_cast<float>(i0.scale_b), B, op.reads);
  if (!e.empty()) return wgmma_error(b, e);

  // D = A B (+ D), each thread's registers; a register another pending wgmma writes starts
  // from that wgmma's value.
  WarpgroupWgmma& wg = s.warpgroups[first / kWarpgroupThreads];
  const unsigned per_thread = n / 2;
  op.d.resize(count);
  op.result.resize(count * per_thread);
  for (unsigned t = 0; t < count; ++t) {
    float* d = issue_of(t).d;
    op.d[t] = d;
    const unsigned w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (unsigned j = 0; j < per_thread; ++j) {
      const unsigned row = 16 * w + g + ((j % 4) >= 2 ? 8 : 0);
      const unsigned col = 8 * (j / 4) + 2 * q + (j % 2);
      float acc = 0.0f;
      if (i0.scale_d != 0) {
        const auto it = wg.latest.find(d + j);
        acc = it != wg.latest.end() ? it->second.first : d[j];
      }
      for (unsigned k = 0; k < 16; ++k) acc += A[row * 16 + k] * B[col * 16 + k];
      op.result[t * per_thread + j] = acc;
    }
  }
  for (unsigned t = 0; t < count; ++t) {
    for (unsigned j = 0; j < per_thread; ++j) {
      wg.latest[op.d[t] + j] = std::make_pair(op.result[t * per_thread + j], op.id);
      op.d[t][j] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  wg.pending.push_back(std::move(op));
}

inline void resolve_wgmma_fence(BlockRun& b, unsigned first, unsigned count) {
  WgmmaState& s = wgmma_state(b);
  for (unsigned t = 0; t < count; ++t) s.fenced[first + t] = 1;
}

inline void resolve_wgmma_commit(BlockRun& b, unsigned first, unsigned) {
  WarpgroupWgmma& wg = wgmma_state(b).warpgroups[first / kWarpgroupThreads];
  for (PendingWgmma& p : wg.pending)
    if (p.group < 0) p.group = wg.committed_groups;
  ++wg.committed_groups;
}

// Completes `op`: its shared-memory operand must be as it was at the issue; writes D where no
// newer pending wgmma writes the same register.
inline bool complete_wgmma(BlockRun& b, WarpgroupWgmma& wg, const PendingWgmma& op) {
  for (const WgmmaSharedRead& r : op.reads) {
    const unsigned char* p = shared_window_pointer(b, r.address, 2);
    uint16_t now = 0;
    std::memcpy(&now, p, 2);
    if (now != r.bits) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%s: shared-memory operand of a wgmma overwritten before its "
                    "wgmma.wait_group: %c element (%s %u, k %u) at shared 0x%x was 0x%04x at "
                    "the issue and is 0x%04x at the wait",
                    op.name.c_str(), r.operand, r.operand == 'A' ? "row" : "column", r.mn, r.k,
                    r.address, r.bits, now);
      wgmma_error(b, buf);
      return false;
    }
  }
  const unsigned per_thread = static_cast<unsigned>(op.n) / 2;
  for (size_t t = 0; t < op.d.size(); ++t) {
    for (unsigned j = 0; j < per_thread; ++j) {
      const auto it = wg.latest.find(op.d[t] + j);
      if (it == wg.latest.end() || it->second.second != op.id) continue;
      op.d[t][j] = op.result[t * per_thread + j];
      wg.latest.erase(it);
    }
  }
  return true;
}

inline void resolve_wgmma_wait(BlockRun& b, unsigned first, unsigned count) {
  WgmmaState& s = wgmma_state(b);
  const int keep = *static_cast<const int*>(b.fibers[first].group.data);
  for (unsigned t = 1; t < count; ++t) {
    const int other = *static_cast<const int*>(b.fibers[first + t].group.data);
    if (other != keep) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "wgmma.wait_group: threads %u and %u of the warpgroup disagree on N (%d, %d)",
                    first, first + t, keep, other);
      return wgmma_error(b, buf);
    }
  }
  if (keep < 0) return wgmma_error(b, "wgmma.wait_group: N " + std::to_string(keep) + " < 0");
  WarpgroupWgmma& wg = s.warpgroups[first / kWarpgroupThreads];
  const int complete_below = wg.committed_groups - keep;
  size_t done = 0;
  while (done < wg.pending.size() && wg.pending[done].group >= 0 &&
         wg.pending[done].group < complete_below) {
    if (!complete_wgmma(b, wg, wg.pending[done])) return;
    ++done;
  }
  wg.pending.erase(wg.pending.begin(), wg.pending.begin() + static_cast<std::ptrdiff_t>(done));
  for (unsigned t = 0; t < count; ++t) s.fenced[first + t] = 0;
}

}  // namespace detail

// A descriptor (Matrix Descriptor Format) for the operand at window address `start`; `lbo` and
// `sbo` in bytes; layout 0 none, 1 128B, 2 64B, 3 32B swizzle; base offset 0. The fields hold
// each value >> 4, so a value not a multiple of 16 (or 2^18 or more) fails the calling thread,
// where the GPU would drop its low bits.
inline uint64_t wgmma_descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, int layout) {
  if (start % 16 != 0 || lbo % 16 != 0 || sbo % 16 != 0 || start >= (1u << 18) ||
      lbo >= (1u << 18) || sbo >= (1u << 18) || layout < 0 || layout > 3) {
    char buf[224];
    std::snprintf(buf, sizeof buf,
                  "wgmma descriptor: start address 0x%x, leading byte offset %u and stride byte "
                  "offset %u must be multiples of 16 below 2^18, layout %d in 0..3",
                  start, lbo, sbo, layout);
    detail::fail_wgmma_thread(buf);
  }
  return static_cast<uint64_t>(start >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (static_cast<uint64_t>(layout) << 62);
}

// wgmma.fence.sync.aligned
inline void wgmma_fence() {
  detail::post_wgmma(&detail::resolve_wgmma_fence, "wgmma.fence", nullptr);
}

// wgmma.commit_group.sync.aligned
inline void wgmma_commit_group() {
  detail::post_wgmma(&detail::resolve_wgmma_commit, "wgmma.commit_group", nullptr);
}

// wgmma.wait_group.sync.aligned n
inline void wgmma_wait_group(int n) {
  detail::post_wgmma(&detail::resolve_wgmma_wait, "wgmma.wait_group", &n);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T for T = __half or __nv_bfloat16: d (n / 2
// floats) = A B, plus d when scale_d != 0; A from the four registers `a`, or from descriptor
// a_desc when a is nullptr; B from b_desc. scale_a, scale_b: +-1; trans_a, trans_b: 0 K-major,
// 1 MN-major.
template <class T>
inline void wgmma_m64k16(int n, float* d, const uint32_t* a, uint64_t a_desc, uint64_t b_desc,
                         int scale_d, int scale_a, int scale_b, int trans_a, int trans_b) {
  detail::WgmmaIssue issue;
  issue.element = std::is_same<T, __nv_bfloat16>::value ? detail::wgmma_bf16 : detail::wgmma_f16;
  issue.n = n;
  issue.d = d;
  issue.a = a;
  issue.a_desc = a_desc;
  issue.b_desc = b_desc;
  issue.scale_d = scale_d;
  issue.scale_a = scale_a;
  issue.scale_b = scale_b;
  issue.trans_a = trans_a;
  issue.trans_b = trans_b;
  detail::post_wgmma(&detail::resolve_wgmma_mma<T>, "wgmma.mma_async", &issue);
}

}  // namespace simt

#endif  // DILATTN_SIMT_WGMMA_H
