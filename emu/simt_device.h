// simt_device.h - device functions for the host: barriers, warp shuffles/votes, atomics, math.
//
// Part of the SIMT emulator (emu/README.md).
//   - __syncthreads / __syncwarp / shuffles / votes are collectives of the block scheduler
//     (simt_scheduler.h): a lane posts its value, the scheduler resolves the group once every
//     lane of the mask arrived, using CUDA's rules for srcLane, delta, laneMask and width.
//     Reading a lane outside the mask (or beyond a partial warp) fails the launch.
//   - Atomics are real atomic read-modify-writes (__atomic builtins), so they stay correct if
//     blocks ever run on several OS threads.
//   - The fast-math intrinsics map to the correctly rounded libm/IEEE operations; the GPU's
//     approximations differ in the last bits, which the kernels' tolerances absorb.
// Checked by tests/emu/test_emu_shuffle_reduce.cpp, test_emu_vote_atomics.cpp, emu_negative_*.cpp.
#ifndef DILATTN_SIMT_DEVICE_H
#define DILATTN_SIMT_DEVICE_H

#include <cmath>
#include <cstring>
#include <type_traits>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

// Values cross lanes as raw bytes. __half2 and __nv_bfloat162 have user-written copy
// assignments (so are not "trivially copyable") but are plain bytes, as on the GPU.
template <class T>
inline uint64_t to_bits(const T& v) {
  static_assert(std::is_standard_layout<T>::value && sizeof(T) <= 8,
                "shuffled values are plain types of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const void*>(&v), sizeof(T));
  return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));
  return v;
}

inline void collective_error(BlockRun& b, WarpState& w, unsigned lane, const std::string& what) {
  b.error = thread_name(b, w.first_thread + lane) + ": " + what;
}

inline bool valid_width(BlockRun& b, WarpState& w, unsigned lane, int width, const char* name) {
  if (width >= 1 && width <= 32 && (width & (width - 1)) == 0) return true;
  collective_error(b, w, lane, std::string(name) + ": width " + std::to_string(width) +
                                   " is not a power of two in [1, 32]");
  return false;
}

enum class ShuffleKind { idx, up, down, bfly };

// Source lane of `lane` under CUDA's shuffle rules; `lane` itself where CUDA returns the
// caller's own value.
inline unsigned shuffle_source(ShuffleKind kind, unsigned lane, int arg, int width) {
  const unsigned w = static_cast<unsigned>(width);
  const unsigned seg = lane & ~(w - 1);
  const unsigned in_seg = lane & (w - 1);
  switch (kind) {
    case ShuffleKind::idx:
      return seg + (static_cast<unsigned>(arg) & (w - 1));
    case ShuffleKind::up:
      return in_seg >= static_cast<unsigned>(arg) ? lane - static_cast<unsigned>(arg) : lane;
    case ShuffleKind::down:
      return in_seg + static_cast<unsigned>(arg) < w ? lane + static_cast<unsigned>(arg) : lane;
    case ShuffleKind::bfly: {
      unsigned src = lane ^ static_cast<unsigned>(arg);
      return src >= seg + w ? lane : src;  // later groups give the caller's own value
    }
  }
  return lane;
}

template <ShuffleKind K>
inline void resolve_shuffle(BlockRun& b, WarpState& w, unsigned group) {
  for (unsigned lane = 0; lane < w.lanes; ++lane) {
    if ((group & (1u << lane)) == 0) continue;
    LaneSlot& s = w.slot[lane];
    if (!valid_width(b, w, lane, s.arg1, s.name)) return;
    if (K != ShuffleKind::idx && (s.arg0 < 0 || s.arg0 > 31)) {
      collective_error(b, w, lane, std::string(s.name) + ": lane argument " +
                                       std::to_string(s.arg0) + " is out of range [0, 31]");
      return;
    }
    const unsigned src = shuffle_source(K, lane, s.arg0, s.arg1);
    if (src >= 32 || (group & (1u << src)) == 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "%s: out-of-range shuffle lane %u (mask 0x%08x, warp of %u)",
                    s.name, src, s.mask, w.lanes);
      collective_error(b, w, lane, buf);
      return;
    }
  }
  for (unsigned lane = 0; lane < w.lanes; ++lane) {
    if ((group & (1u << lane)) == 0) continue;
    LaneSlot& s = w.slot[lane];
    s.result = w.slot[shuffle_source(K, lane, s.arg0, s.arg1)].value;
  }
}

inline void resolve_ballot(BlockRun&, WarpState& w, unsigned group) {
  unsigned bits = 0;
  for (unsigned lane = 0; lane < w.lanes; ++lane)
    if ((group & (1u << lane)) && w.slot[lane].value != 0) bits |= 1u << lane;
  for (unsigned lane = 0; lane < w.lanes; ++lane)
    if (group & (1u << lane)) w.slot[lane].result = bits;
}

inline void resolve_nothing(BlockRun&, WarpState&, unsigned) {}

template <ShuffleKind K, class T>
inline T shuffle(const char* name, unsigned mask, T var, int arg, int width) {
  LaneSlot post;
  post.resolve = &resolve_shuffle<K>;
  post.name = name;
  post.mask = mask;
  post.value = to_bits(var);
  post.arg0 = arg;
  post.arg1 = width;
  return from_bits<T>(warp_collective(post));
}

inline unsigned ballot(const char* name, unsigned mask, int predicate) {
  LaneSlot post;
  post.resolve = &resolve_ballot;
  post.name = name;
  post.mask = mask;
  post.value = predicate != 0;
  return static_cast<unsigned>(warp_collective(post));
}

}  // namespace detail
}  // namespace simt

// ---------------------------------------------------------------- barriers and warp collectives

// Each barrier records its call site (the caller's file and line, through GCC/Clang's
// __builtin_FILE/__builtin_LINE default arguments), so threads at two different
// __syncthreads fail the launch instead of passing each other.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::simt::detail::block_barrier(0, file, line);
}
// The block's count of non-zero predicates, read after the barrier opened (stable until the
// next barrier opens, which needs this thread again).
inline int __syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  ::simt::detail::block_barrier(predicate, file, line);
  return static_cast<int>(::simt::detail::current_fiber().block->barrier_count);
}
inline int __syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  ::simt::detail::block_barrier(predicate, file, line);
  const ::simt::detail::BlockRun& b = *::simt::detail::current_fiber().block;
  return b.barrier_count == b.fibers.size();
}
inline int __syncthreads_or(int predicate, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  ::simt::detail::block_barrier(predicate, file, line);
  return ::simt::detail::current_fiber().block->barrier_count > 0;
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::simt::detail::LaneSlot post;
  post.resolve = &::simt::detail::resolve_nothing;
  post.name = "__syncwarp";
  post.mask = mask;
  ::simt::detail::warp_collective(post);
}

template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
  using namespace ::simt::detail;
  return shuffle<ShuffleKind::idx>("__shfl_sync", mask, var, srcLane, width);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ::simt::detail;
  return shuffle<ShuffleKind::up>("__shfl_up_sync", mask, var, static_cast<int>(delta), width);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ::simt::detail;
  return shuffle<ShuffleKind::down>("__shfl_down_sync", mask, var, static_cast<int>(delta),
                                    width);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
  using namespace ::simt::detail;
  return shuffle<ShuffleKind::bfly>("__shfl_xor_sync", mask, var, laneMask, width);
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::simt::detail::ballot("__ballot_sync", mask, predicate);
}
inline int __any_sync(unsigned mask, int predicate) {
  return ::simt::detail::ballot("__any_sync", mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  const unsigned group = mask & ::simt::detail::current_fiber()
                                    .block->warps[::simt::detail::current_fiber().warp]
                                    .existing;
  return ::simt::detail::ballot("__all_sync", mask, predicate) == group;
}
// The lanes of the caller's warp that exist (the emulator has no intra-warp divergence).
inline unsigned __activemask() {
  ::simt::detail::Fiber& f = ::simt::detail::current_fiber();
  return f.block->warps[f.warp].existing;
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap() { ::simt::detail::fail_thread("__trap() called"); }

// ---------------------------------------------------------------- atomics

namespace simt {
namespace detail {
template <class T, class Op>
inline T atomic_update(T* address, Op op) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired;
  do {
    desired = op(old);
  } while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED));
  return old;
}
}  // namespace detail
}  // namespace simt

inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* a, float v) {
  return ::simt::detail::atomic_update(a, [v](float x) { return x + v; });
}
inline double atomicAdd(double* a, double v) {
  return ::simt::detail::atomic_update(a, [v](double x) { return x + v; });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) {
  return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);
}
inline int atomicMax(int* a, int v) {
  return ::simt::detail::atomic_update(a, [v](int x) { return x > v ? x : v; });
}
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return ::simt::detail::atomic_update(a, [v](unsigned x) { return x > v ? x : v; });
}
// float atomicMax: not a CUDA built-in, but the contract asks for it (kernels emulate it with
// atomicCAS on the GPU otherwise); NaN-free max.
inline float atomicMax(float* a, float v) {
  return ::simt::detail::atomic_update(a, [v](float x) { return x > v ? x : v; });
}
inline int atomicMin(int* a, int v) {
  return ::simt::detail::atomic_update(a, [v](int x) { return x < v ? x : v; });
}
inline unsigned atomicMin(unsigned* a, unsigned v) {
  return ::simt::detail::atomic_update(a, [v](unsigned x) { return x < v ? x : v; });
}
inline int atomicCAS(int* a, int compare, int val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value either way
}
inline unsigned atomicCAS(unsigned* a, unsigned compare, unsigned val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare,
                                    unsigned long long val) {
  __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) {
  return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicExch(float* a, float v) {
  float old;
  __atomic_exchange(a, &v, &old, __ATOMIC_SEQ_CST);
  return old;
}

// ---------------------------------------------------------------- math and bit intrinsics

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
// Round half to even, as cvt.rni: nearbyint under the default rounding mode.
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline unsigned __float2uint_rn(float x) { return static_cast<unsigned>(std::nearbyint(x)); }
inline float __int_as_float(int i) { return ::simt::detail::from_bits<float>(static_cast<uint32_t>(i)); }
inline int __float_as_int(float f) {
  return static_cast<int>(static_cast<uint32_t>(::simt::detail::to_bits(f)));
}
inline float __uint_as_float(unsigned i) { return ::simt::detail::from_bits<float>(i); }
inline unsigned __float_as_uint(float f) {
  return static_cast<unsigned>(::simt::detail::to_bits(f));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// CUDA's integer min/max overloads, which device code calls unqualified.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

#endif  // DILATTN_SIMT_DEVICE_H
