// simt_scheduler.h - runs one thread block as fibers: barriers, warp collectives, thread order.
//
// Part of the SIMT emulator (emu/README.md). Algorithm:
//   - Each CUDA thread of a block is a fiber on a reused 256 KB stack (SIMT_STACK_KB overrides).
//     On x86-64 a switch is a few instructions (callee-saved registers, MXCSR and the x87
//     control word; about 10 ns); elsewhere, or with -DSIMT_USE_UCONTEXT, it is ucontext
//     (correct but ~1-2 us, as glibc's swapcontext makes a signal-mask system call). A fiber runs without interruption until it reaches a block barrier
//     (__syncthreads), a warp collective (shuffle, ballot, __syncwarp, WMMA) or returns.
//   - A round resumes every runnable fiber once, in the thread order of the launch (ascending,
//     descending or a seeded shuffle, reshuffled every round), so a missing barrier changes
//     which thread sees which value and the results differ between orders. In the descending
//     order a round resumes one warp's fibers only (the first warp in that order with one to
//     run): each warp runs as far as it can before the next starts, so a warp's collective
//     resolves before later warps have stored anything, and a read of their stores with a
//     collective but no barrier between sees them missing.
//   - After a round, a warp collective whose mask lanes have all arrived is resolved by the
//     scheduler (it computes every lane's result from the lanes' posted values) and those lanes
//     run again. When no warp can progress, a lane still waiting at a collective is an error;
//     otherwise, if every live thread waits at __syncthreads the barrier opens, and if some have
//     returned it is an error ("__syncthreads reached by 31 of 32 threads"). Nothing can hang.
//   - An error abandons the block's fibers (their stacks are reused) and fails the launch.
// ASan: every switch is wrapped in __sanitizer_start/finish_switch_fiber.
//   - Threads waiting for a condition (an mbarrier phase, a named barrier, registers:
//     wait_until) are tested after every round, after the asynchronous work due then
//     (BlockRun::round_end: issued the round before) has landed. In the descending order a
//     copy that completes on an mbarrier lands late instead: only once a thread waits for that
//     mbarrier, or when nothing else can move, so a read its own mbarrier's wait does not
//     order sees poison even after other waits and barriers; warpgroup collectives
//     (group_collective) resolve when their whole range of threads has posted. A wait or
//     collective still open when nothing can move is reported as a deadlock, naming what it
//     waits for.
//   - A barrier opens only when every thread waits at the same call site (file and line), and
//     the guard bytes between carved shared-memory tiles (guard_shared) are checked there.
// Checked by tests/emu/test_emu_negative_divergent_barrier.cpp,
// test_emu_negative_missing_barrier.cpp, test_emu_negative_barrier_sites.cpp,
// test_emu_negative_smem_overrun.cpp,
// test_emu_warp_specialization.cpp and every positive emulator test (each runs under several
// thread orders).
#ifndef DILATTN_SIMT_SCHEDULER_H
#define DILATTN_SIMT_SCHEDULER_H

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#ifdef SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(SIMT_USE_UCONTEXT)
#define SIMT_FAST_SWITCH 1
// void simt_detail_switch_stack_x86_64(void** save_sp, void* new_sp): pushes the callee-saved
// registers, MXCSR and the x87 control word, saves the stack pointer to *save_sp, loads new_sp
// and pops the same from there. Weak + hidden: every translation unit that includes this
// header emits the same definition, the linker keeps one, and no shared library exports it.
asm(R"(
  .pushsection .text
  .p2align 4
  .weak simt_detail_switch_stack_x86_64
  .hidden simt_detail_switch_stack_x86_64
  .type simt_detail_switch_stack_x86_64, @function
simt_detail_switch_stack_x86_64:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_detail_switch_stack_x86_64, .-simt_detail_switch_stack_x86_64
  .popsection
)");
extern "C" void simt_detail_switch_stack_x86_64(void** save_sp, void* new_sp);
#endif

namespace simt {

enum class ThreadOrder { ascending, descending, shuffled };

namespace detail {

// ---------------------------------------------------------------- thread order (process-wide)

struct OrderSetting {
  ThreadOrder order = ThreadOrder::ascending;
  uint64_t seed = 0;
};
inline std::mutex& order_mutex() {
  static std::mutex m;
  return m;
}
inline OrderSetting& order_setting() {  // guarded by order_mutex()
  static OrderSetting s;
  return s;
}
inline OrderSetting current_order() {
  std::lock_guard<std::mutex> lock(order_mutex());
  return order_setting();
}

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------- fibers and their stacks

// A suspended execution context and the switch between two of them.
#ifdef SIMT_FAST_SWITCH
struct Context {
  void* sp = nullptr;
};
inline void context_switch(Context& save, const Context& to) {
  simt_detail_switch_stack_x86_64(&save.sp, to.sp);
}
// Lays out a fresh stack as the switch routine pops it: control words, six callee-saved
// registers, then `entry` as the return address, aligned as if `entry` had been called.
inline void context_init(Context& c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                            // entry's return address: it never returns
  *--sp = reinterpret_cast<void*>(entry);     // popped by `ret`; rsp+8 is then 16-aligned
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
  uint32_t csr[2] = {0, 0};
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
  --sp;
  std::memcpy(sp, csr, sizeof csr);  // the fiber starts with the launcher's FP modes
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void context_switch(Context& save, const Context& to) { swapcontext(&save.uc, &to.uc); }
// getcontext "returns twice" for the compiler; kept out of the callers so their locals are
// not flagged (-Wclobbered) or pessimized.
[[gnu::noinline]] inline void context_init(Context& c, char* stack, size_t size,
                                           void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

enum class FiberState {
  runnable,
  at_block_barrier,
  at_warp_collective,
  at_group_collective,  // a warpgroup instruction (wgmma, setmaxnreg): group_collective()
  at_wait,              // an mbarrier phase, a named barrier: wait_until()
  done
};

struct BlockRun;
struct WarpState;
struct Fiber;

// A condition a thread waits for (an mbarrier phase, a named barrier's generation, free
// registers). The scheduler tests `ready` after every round; a wait still not ready when nothing
// else can move is a deadlock, reported with `describe`.
using WaitReadyFn = bool (*)(BlockRun&, const Fiber&);
using WaitDescribeFn = std::string (*)(BlockRun&, const Fiber&);
struct WaitPost {
  WaitReadyFn ready = nullptr;
  WaitDescribeFn describe = nullptr;
  const void* ptr = nullptr;  // what is waited for (the mbarrier's address, ...)
  uint64_t value = 0;         // and which phase or generation
  uint32_t mbarrier = 0;      // the shared address of the mbarrier waited for, if one
};

// A collective of a contiguous range of threads (a warpgroup's 128): every thread posts and
// waits; when all of [first, first + count) have posted the same `resolve`, the scheduler calls
// it once and resumes them. `data` points at the posting thread's own arguments (on its stack,
// which stays put while it waits).
using GroupResolveFn = void (*)(BlockRun&, unsigned first, unsigned count);
struct GroupPost {
  GroupResolveFn resolve = nullptr;
  const char* name = "";
  unsigned first = 0;
  unsigned count = 0;
  const void* data = nullptr;
};

// Per-block state of an emulated feature (mbarriers, tensor-memory copies, wgmma groups): made
// on first use in a block, dropped at the block's end. thread_exit runs when a thread returns
// (a thread that leaves asynchronous work behind fails there), block_end after the last one.
struct BlockExtension {
  virtual ~BlockExtension() = default;
  virtual void thread_exit(BlockRun&, const Fiber&) {}
  virtual void block_end(BlockRun&) {}
};

// What a lane posts when it reaches a warp collective. The scheduler calls `resolve` once for
// the whole group of lanes named by `mask`; it writes each lane's `result` (or sets an error).
using ResolveFn = void (*)(BlockRun&, WarpState&, unsigned mask);
struct LaneSlot {
  ResolveFn resolve = nullptr;
  const char* name = "";
  unsigned mask = 0;
  uint64_t value = 0;
  int arg0 = 0;
  int arg1 = 0;
  const void* ptr[4] = {nullptr, nullptr, nullptr, nullptr};
  uint64_t result = 0;
};

struct WarpState {
  unsigned first_thread = 0;  // linear index of lane 0
  unsigned lanes = 0;         // 32, fewer in a partial last warp
  unsigned existing = 0;      // bit mask of the lanes that exist
  LaneSlot slot[32];
};

// A 16-byte cp.async copy a thread issued and has not waited for (simt_async_copy.h): the
// source bytes taken at the issue, written to dst at the matching wait; group -1 until the
// thread commits it.
struct PendingCopy {
  unsigned char* dst = nullptr;
  unsigned char bytes[16] = {};
  int size = 16;  // 4 or 16 bytes
  int group = -1;
};

struct Fiber {
  Context ctx;
  uint3 thread_idx;
  unsigned linear = 0;
  unsigned warp = 0;
  unsigned lane = 0;
  FiberState state = FiberState::done;
  int barrier_predicate = 0;  // this thread's vote at __syncthreads_count/_and/_or
  const char* barrier_file = "";  // the call site of the __syncthreads it waits at
  int barrier_line = 0;
  BlockRun* block = nullptr;
  char* stack = nullptr;
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // ASan's bookkeeping across switches
  std::vector<PendingCopy> copies;  // cp.async copies not yet waited for
  int committed_groups = 0;         // cp.async groups this thread committed
  WaitPost wait;                    // what an at_wait fiber waits for
  GroupPost group;                  // what an at_group_collective fiber posted
};

// The kernel call with its arguments, type-erased: every fiber calls fn(ctx).
struct KernelBody {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
};

struct BlockRun {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  KernelBody body;
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  std::vector<unsigned> order;
  Context sched_ctx;
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  unsigned barrier_count = 0;  // predicates counted at the last __syncthreads released
  std::string error;           // non-empty: the block failed
  // Guard bytes between carved shared-memory tiles (offset, bytes), filled with kGuardByte
  // when first carved in this block and checked at every __syncthreads and at the block's end.
  std::vector<std::pair<size_t, size_t>> guards;
  // Work that completes asynchronously (tensor-memory copies): it lands at the end of the
  // round after the one it was issued in, so neither the issuing round nor a __syncthreads
  // right after the issue (which opens at that round's end) makes it visible; only what waits
  // for it (an mbarrier phase) does. round_end_due: how many of round_end are due this round.
  // mbarrier: the shared address of the mbarrier the work completes on (0: none; the window
  // starts at kSharedWindowBase). held_back:
  // work due, kept back by the descending order's late landing (finish_round_work).
  struct AsyncWork {
    std::function<void(BlockRun&)> land;
    uint32_t mbarrier = 0;
  };
  std::vector<AsyncWork> round_end;
  size_t round_end_due = 0;
  std::vector<AsyncWork> held_back;
  // Emulated features' per-block state, keyed by a tag (block_extension<T>).
  std::vector<std::pair<const void*, std::unique_ptr<BlockExtension>>> extensions;
};

// The emulated shared window. A kernel's descriptors and tensor-memory copies name shared
// memory by its address in the shared window (PTX's .shared state space, cvta.to.shared), not
// by a generic pointer. The block's dynamic shared memory starts at window address
// kSharedWindowBase: 128 bytes past a multiple of 1024, so a kernel that needs a tile aligned to
// 1024 bytes (a swizzled tensor-memory copy, a wgmma operand) must align it itself, as on the
// GPU, which promises 16 bytes.
constexpr uint32_t kSharedWindowBase = 128;
inline bool in_shared(const BlockRun& b, const void* p, size_t bytes) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  return c >= b.shared && c + bytes <= b.shared + b.shared_bytes;
}
inline uint32_t shared_window_address(const BlockRun& b, const void* p) {
  return kSharedWindowBase +
         static_cast<uint32_t>(static_cast<const unsigned char*>(p) - b.shared);
}
// The bytes at window address `address`, or nullptr when [address, address + bytes) is not in
// the block's dynamic shared memory.
inline unsigned char* shared_window_pointer(BlockRun& b, uint64_t address, size_t bytes) {
  if (address < kSharedWindowBase || address - kSharedWindowBase + bytes > b.shared_bytes)
    return nullptr;
  return b.shared + (address - kSharedWindowBase);
}

// The block's state of type T (a BlockExtension), made on first use in this block.
template <class T>
inline const void* extension_tag() {
  static const char tag = 0;
  return &tag;
}
template <class T>
T& block_extension(BlockRun& b) {
  const void* tag = extension_tag<T>();
  for (auto& e : b.extensions)
    if (e.first == tag) return static_cast<T&>(*e.second);
  b.extensions.emplace_back(tag, std::unique_ptr<BlockExtension>(new T()));
  return static_cast<T&>(*b.extensions.back().second);
}

// Guard bytes hold this value; the poison of fresh shared memory is 0xFF, so they differ.
constexpr unsigned char kGuardByte = 0xA5;

inline std::string block_name(const BlockRun& b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u)", b.block_idx.x, b.block_idx.y, b.block_idx.z);
  return buf;
}
inline std::string thread_name(const BlockRun& b, unsigned linear) {
  const Fiber& f = b.fibers[linear];
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s thread %u (%u,%u,%u)", block_name(b).c_str(), linear,
                f.thread_idx.x, f.thread_idx.y, f.thread_idx.z);
  return buf;
}

// The fiber running on this OS thread. Fibers of a block share one OS thread, so threadIdx
// cannot be thread_local itself; it reads this pointer, which the scheduler sets per switch.
inline thread_local Fiber* tl_current = nullptr;

inline Fiber& current_fiber() {
  if (tl_current == nullptr) {
    std::fprintf(stderr, "simt: a device intrinsic was called outside a kernel launch\n");
    std::abort();  // a programming error in a test, never reachable through a launch
  }
  return *tl_current;
}

// Stacks are mmap'd once per OS thread and reused by every later block and launch; the lowest
// page is a guard so an overflow faults instead of corrupting a neighbour.
struct StackPool {
  size_t size = 0;
  std::vector<char*> stacks;
  ~StackPool() {
    for (char* s : stacks) munmap(s, size + guard());
  }
  static size_t guard() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  static size_t wanted_size() {
    size_t kb = 256;
    if (const char* env = std::getenv("SIMT_STACK_KB")) {
      long v = std::atol(env);
      if (v >= 64) kb = static_cast<size_t>(v);
    }
    return kb * 1024;
  }
  // Returns false when the memory cannot be had.
  bool reserve(size_t count) {
    if (size == 0) size = wanted_size();
    while (stacks.size() < count) {
      void* p = mmap(nullptr, size + guard(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return false;
      mprotect(p, guard(), PROT_NONE);
      stacks.push_back(static_cast<char*>(p));
    }
    return true;
  }
  char* stack(size_t i) const { return stacks[i] + guard(); }
};
inline StackPool& stack_pool() {
  static thread_local StackPool pool;
  return pool;
}

inline void asan_start_switch(void** fake_save, const void* bottom, size_t size) {
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(fake_save, bottom, size);
#else
  (void)fake_save, (void)bottom, (void)size;
#endif
}
inline void asan_finish_switch(void* fake, const void** bottom_old, size_t* size_old) {
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
  (void)fake, (void)bottom_old, (void)size_old;
#endif
}

// Fiber side: give control back to the scheduler; returns when the scheduler resumes us.
inline void yield_to_scheduler(Fiber& f) {
  BlockRun& b = *f.block;
  asan_start_switch(&f.fake_stack, b.sched_stack_bottom, b.sched_stack_size);
  context_switch(f.ctx, b.sched_ctx);
  asan_finish_switch(f.fake_stack, &b.sched_stack_bottom, &b.sched_stack_size);
}

// A thread that returns with cp.async copies it never waited for fails the block: the GPU
// would finish them, but nothing the kernel did can rely on them, and a forgotten commit or
// wait usually means a read of unfinished data. Not inlined: fiber_entry never returns, so a
// local with ASan redzones in its frame would leave the reused stack poisoned.
[[gnu::noinline]] inline void check_copies_waited(BlockRun& b, const Fiber& f) {
  if (f.copies.empty() || !b.error.empty()) return;
  b.error = thread_name(b, f.linear) + ": returned with " + std::to_string(f.copies.size()) +
            " cp.async copies never waited for (missing commit or wait_group)";
}

// The emulated features' checks on a returning thread (asynchronous work it left behind).
// Not inlined, as check_copies_waited.
[[gnu::noinline]] inline void run_thread_exit_hooks(BlockRun& b, const Fiber& f) {
  for (auto& e : b.extensions)
    if (b.error.empty()) e.second->thread_exit(b, f);
}

inline void fiber_entry() {
  Fiber& f = *tl_current;
  BlockRun& b = *f.block;
  asan_finish_switch(nullptr, &b.sched_stack_bottom, &b.sched_stack_size);
  b.body.fn(b.body.ctx);
  check_copies_waited(b, f);
  run_thread_exit_hooks(b, f);
  f.state = FiberState::done;
  asan_start_switch(nullptr, b.sched_stack_bottom, b.sched_stack_size);  // this fiber ends
  context_switch(f.ctx, b.sched_ctx);  // never resumed
}

// Scheduler side: run fiber f until it blocks or returns.
inline void switch_to(BlockRun& b, Fiber& f) {
  tl_current = &f;
  void* fake = nullptr;
  asan_start_switch(&fake, f.stack, f.stack_size);
  context_switch(b.sched_ctx, f.ctx);
  asan_finish_switch(fake, nullptr, nullptr);
  tl_current = nullptr;
}

// ---------------------------------------------------------------- collectives (lane side)

// Posts this lane's part of a warp collective and waits until the scheduler resolved it.
inline uint64_t warp_collective(const LaneSlot& post) {
  Fiber& f = current_fiber();
  WarpState& w = f.block->warps[f.warp];
  w.slot[f.lane] = post;
  f.state = FiberState::at_warp_collective;
  yield_to_scheduler(f);
  return w.slot[f.lane].result;
}

// Posts this thread's part of a group collective and waits until the scheduler resolved it.
inline void group_collective(const GroupPost& post) {
  Fiber& f = current_fiber();
  f.group = post;
  f.state = FiberState::at_group_collective;
  yield_to_scheduler(f);
}

// Returns when post.ready holds (at once if it already does). Other threads run meanwhile.
inline void wait_until(const WaitPost& post) {
  Fiber& f = current_fiber();
  f.wait = post;
  if (post.ready(*f.block, f)) return;
  f.state = FiberState::at_wait;
  yield_to_scheduler(f);
}

inline void block_barrier(int predicate, const char* file, int line) {
  Fiber& f = current_fiber();
  f.barrier_predicate = predicate != 0;
  f.barrier_file = file;
  f.barrier_line = line;
  f.state = FiberState::at_block_barrier;
  yield_to_scheduler(f);
}

// Stops the calling thread for good and fails the launch with `what`. The thread's stack is
// abandoned, so nothing on it may own heap memory: pass the block's own error string or text in
// a char array (the const char* overload builds the message in a function that returns).
[[noreturn]] inline void fail_thread(const std::string& what) {
  Fiber& f = current_fiber();
  BlockRun& b = *f.block;
  if (b.error.empty()) b.error = thread_name(b, f.linear) + ": " + what;
  f.state = FiberState::done;
  yield_to_scheduler(f);
  std::abort();  // unreachable: a failed block's fibers are never resumed
}
[[gnu::noinline]] inline void record_thread_error(const char* what) {
  Fiber& f = current_fiber();
  BlockRun& b = *f.block;
  if (b.error.empty()) b.error = thread_name(b, f.linear) + ": " + what;
}
[[noreturn]] inline void fail_thread(const char* what) {
  record_thread_error(what);
  fail_thread(current_fiber().block->error);
}

// cvta.to.shared: the window address of a pointer into the block's dynamic shared memory
// (`bytes` of it). Any other pointer fails the launch: on the GPU it would name other memory.
inline uint32_t shared_address_of(const void* p, size_t bytes, const char* what) {
  BlockRun& b = *current_fiber().block;
  if (!in_shared(b, p, bytes)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %p is not in the block's dynamic shared memory", what,
                  p);
    fail_thread(buf);
  }
  return shared_window_address(b, p);
}

// ---------------------------------------------------------------- shared-memory guards

// Registers [ptr, ptr + bytes) of the block's dynamic shared memory as a guard (every thread
// of the block carves the same tiles, so the first registration in a block fills it).
inline void guard_shared(unsigned char* ptr, size_t bytes) {
  BlockRun& b = *current_fiber().block;
  if (ptr < b.shared || ptr + bytes > b.shared + b.shared_bytes) {
    fail_thread("shared-memory guard outside the launch's dynamic shared memory: tiles carved "
                "past the size the launch asked for");
  }
  const size_t offset = static_cast<size_t>(ptr - b.shared);
  for (const auto& g : b.guards)
    if (g.first == offset) return;
  b.guards.emplace_back(offset, bytes);
  std::memset(ptr, kGuardByte, bytes);
}

// Sets b.error when a thread wrote into a guard: a tile written past its end.
inline bool guards_intact(BlockRun& b, const char* when) {
  for (const auto& g : b.guards) {
    for (size_t k = 0; k < g.second; ++k) {
      if (b.shared[g.first + k] == kGuardByte) continue;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    ": shared-memory overrun: guard byte %zu of the guard at offset %zu (after "
                    "the tile ending there) was written (0x%02x), seen %s",
                    k, g.first, static_cast<unsigned>(b.shared[g.first + k]), when);
      b.error = block_name(b) + buf;
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------- the block scheduler

inline void make_order(BlockRun& b, const OrderSetting& s, uint64_t& rng) {
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  b.order.resize(n);
  for (unsigned i = 0; i < n; ++i)
    b.order[i] = s.order == ThreadOrder::descending ? n - 1 - i : i;
  if (s.order == ThreadOrder::shuffled) {
    for (unsigned i = n; i > 1; --i) {
      unsigned j = static_cast<unsigned>(splitmix64(rng) % i);
      std::swap(b.order[i - 1], b.order[j]);
    }
  }
}

// Resolves every complete collective group of warp w. Returns true when some lanes were
// released; sets b.error on a malformed collective.
inline bool resolve_warp(BlockRun& b, WarpState& w) {
  bool progress = false;
  for (unsigned lane = 0; lane < w.lanes; ++lane) {
    Fiber& f = b.fibers[w.first_thread + lane];
    if (f.state != FiberState::at_warp_collective) continue;
    const LaneSlot& s = w.slot[lane];
    const unsigned group = s.mask & w.existing;
    if ((group & (1u << lane)) == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": %s with mask 0x%08x that excludes the calling lane %u",
                    s.name, s.mask, lane);
      b.error = thread_name(b, f.linear) + buf;
      return false;
    }
    bool ready = true;
    for (unsigned m = 0; m < w.lanes; ++m) {
      if ((group & (1u << m)) == 0) continue;
      const Fiber& g = b.fibers[w.first_thread + m];
      if (g.state != FiberState::at_warp_collective) {
        ready = false;
        continue;
      }
      const LaneSlot& t = w.slot[m];
      if (t.resolve != s.resolve || t.mask != s.mask) {
        char buf[192];
        std::snprintf(buf, sizeof buf,
                      " warp %u: lanes disagree on the collective: lane %u at %s (mask 0x%08x), "
                      "lane %u at %s (mask 0x%08x)",
                      f.warp, lane, s.name, s.mask, m, t.name, t.mask);
        b.error = block_name(b) + buf;
        return false;
      }
    }
    if (!ready) continue;
    s.resolve(b, w, group);
    if (!b.error.empty()) return false;
    for (unsigned m = 0; m < w.lanes; ++m)
      if (group & (1u << m)) b.fibers[w.first_thread + m].state = FiberState::runnable;
    progress = true;
  }
  return progress;
}

// Resolves every group collective whose threads have all posted. Returns true when some
// threads were released; sets b.error when the threads of one group are at different ones.
inline bool resolve_groups(BlockRun& b) {
  bool progress = false;
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  for (unsigned t = 0; t < n; ++t) {
    const Fiber& f = b.fibers[t];
    if (f.state != FiberState::at_group_collective || f.group.first != t) continue;
    const GroupPost& g = f.group;
    if (g.first + g.count > n) {
      b.error = thread_name(b, t) + ": " + g.name + " names threads past the block's end";
      return false;
    }
    bool ready = true;
    for (unsigned m = g.first; m < g.first + g.count; ++m) {
      const Fiber& o = b.fibers[m];
      if (o.state != FiberState::at_group_collective) {
        ready = false;
        continue;
      }
      if (o.group.resolve != g.resolve || o.group.first != g.first || o.group.count != g.count) {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      ": threads %u..%u disagree on the collective: thread %u at %s, thread %u "
                      "at %s",
                      g.first, g.first + g.count - 1, t, g.name, m, o.group.name);
        b.error = block_name(b) + buf;
        return false;
      }
    }
    if (!ready) continue;
    g.resolve(b, g.first, g.count);
    if (!b.error.empty()) return false;
    for (unsigned m = g.first; m < g.first + g.count; ++m)
      b.fibers[m].state = FiberState::runnable;
    progress = true;
  }
  return progress;
}

// Whether every thread of the block has returned.
inline bool at_block_all_done(const BlockRun& b) {
  for (const Fiber& f : b.fibers)
    if (f.state != FiberState::done) return false;
  return true;
}

inline bool mbarrier_waited_for(const BlockRun& b, uint32_t mbarrier) {
  for (const Fiber& f : b.fibers)
    if (f.state == FiberState::at_wait && f.wait.mbarrier == mbarrier) return true;
  return false;
}

inline bool release_ready_waits(BlockRun& b) {
  bool progress = false;
  for (Fiber& f : b.fibers) {
    if (f.state == FiberState::at_wait && f.wait.ready(b, f)) {
      f.state = FiberState::runnable;
      progress = true;
    }
  }
  return progress;
}

// Runs the asynchronous work due this round (issued in the round before), marks the work issued
// in this one due next round, then releases the waits now ready. late (the descending order):
// work that completes on an mbarrier no thread waits for yet is held back, and lands once one
// does (or land_held_back, when nothing else can move).
inline bool finish_round_work(BlockRun& b, bool late) {
  bool progress = false;
  std::vector<BlockRun::AsyncWork> due;
  if (b.round_end_due > 0) {
    const auto end = b.round_end.begin() + static_cast<std::ptrdiff_t>(b.round_end_due);
    due.assign(std::make_move_iterator(b.round_end.begin()), std::make_move_iterator(end));
    b.round_end.erase(b.round_end.begin(), end);
  }
  for (auto& w : b.held_back) due.push_back(std::move(w));
  b.held_back.clear();
  for (auto& w : due) {
    if (late && w.mbarrier != 0 && !mbarrier_waited_for(b, w.mbarrier)) {
      b.held_back.push_back(std::move(w));
      continue;
    }
    w.land(b);
    if (!b.error.empty()) return false;
    progress = true;
  }
  b.round_end_due = b.round_end.size();
  if (b.round_end_due > 0) progress = true;  // another round lands it
  progress = release_ready_waits(b) || progress;
  return progress;
}

// All the work finish_round_work held back, now: before a wait is called a deadlock, and when
// the block's threads have returned. False on an error.
inline bool land_held_back(BlockRun& b) {
  std::vector<BlockRun::AsyncWork> rest = std::move(b.held_back);
  b.held_back.clear();
  for (auto& w : rest) {
    w.land(b);
    if (!b.error.empty()) return false;
  }
  release_ready_waits(b);
  return true;
}

// After an error: the block's fibers are dropped mid-kernel. ASan's shadow of their stacks
// still marks the frames they left, so it is cleared before the stacks are reused.
inline void abandon_block(BlockRun& b) {
#ifdef SIMT_ASAN
  for (Fiber& f : b.fibers) __asan_unpoison_memory_region(f.stack, f.stack_size);
#else
  (void)b;
#endif
}

inline void start_fiber(Fiber& f) {
  f.state = FiberState::runnable;
  f.copies.clear();
  f.committed_groups = 0;
  f.fake_stack = nullptr;
  context_init(f.ctx, f.stack, f.stack_size, fiber_entry);
}

// Runs all threads of block b to completion. Returns false (b.error says why) on a defect.
inline bool run_block(BlockRun& b, const OrderSetting& s, uint64_t block_linear) {
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  b.error.clear();
  b.guards.clear();
  b.round_end.clear();
  b.round_end_due = 0;
  b.held_back.clear();
  b.extensions.clear();
  for (Fiber& f : b.fibers) start_fiber(f);
  uint64_t rng = s.seed ^ (block_linear * 0xD1B54A32D192ED03ull);
  make_order(b, s, rng);
  // The descending order runs one warp a round (warp_serial): the first in the order with a
  // thread to run, until every thread of it waits. So a warp's collective resolves, and the warp
  // goes on, before the warps after it have run at all: a read of another warp's shared-memory
  // stores that no block barrier orders sees them missing, even where a warp collective (an
  // ldmatrix, a shuffle) stands between the stores and the read in every thread.
  const bool warp_serial = s.order == ThreadOrder::descending;
  for (;;) {
    unsigned chosen_warp = 0;
    for (unsigned idx : b.order) {
      if (b.fibers[idx].state != FiberState::runnable) continue;
      chosen_warp = b.fibers[idx].warp;
      break;
    }
    for (unsigned idx : b.order) {
      Fiber& f = b.fibers[idx];
      if (f.state != FiberState::runnable) continue;
      if (warp_serial && f.warp != chosen_warp) continue;
      switch_to(b, f);
      if (!b.error.empty()) {
        abandon_block(b);
        return false;
      }
    }
    bool progress = false;
    for (WarpState& w : b.warps) {
      progress = resolve_warp(b, w) || progress;
      if (!b.error.empty()) {
        abandon_block(b);
        return false;
      }
    }
    progress = resolve_groups(b) || progress;
    if (b.error.empty())
      progress = finish_round_work(b, s.order == ThreadOrder::descending) || progress;
    if (!b.error.empty()) {
      abandon_block(b);
      return false;
    }
    if (progress) {
      if (s.order == ThreadOrder::shuffled) make_order(b, s, rng);
      continue;
    }
    if (warp_serial) {  // the other warps' turns
      bool runnable = false;
      for (const Fiber& f : b.fibers) runnable = runnable || f.state == FiberState::runnable;
      if (runnable) continue;
    }
    unsigned at_block = 0, done = 0;
    for (const WarpState& w : b.warps) {
      unsigned waiting = 0, first = 0;
      for (unsigned lane = 0; lane < w.lanes; ++lane) {
        if (b.fibers[w.first_thread + lane].state == FiberState::at_warp_collective) {
          if (waiting++ == 0) first = lane;
        }
      }
      if (waiting > 0) {
        const LaneSlot& sl = w.slot[first];
        const unsigned group = sl.mask & w.existing;
        char buf[160];
        std::snprintf(buf, sizeof buf, " warp %u: %s (mask 0x%08x) reached by %u of %d lanes",
                      w.first_thread / 32, sl.name, sl.mask, waiting, __builtin_popcount(group));
        b.error = block_name(b) + buf;
        abandon_block(b);
        return false;
      }
    }
    // Late landing (finish_round_work): threads that wait while copies are held back may be
    // waiting for what those copies complete (or for threads that do), so they land first.
    bool waiting = false;
    for (const Fiber& f : b.fibers) waiting = waiting || f.state == FiberState::at_wait;
    if ((waiting || at_block_all_done(b)) && !b.held_back.empty()) {
      if (!land_held_back(b)) {
        abandon_block(b);
        return false;
      }
      continue;
    }
    for (const Fiber& f : b.fibers) {
      if (f.state == FiberState::at_wait) {
        b.error = thread_name(b, f.linear) + ": waits for " + f.wait.describe(b, f) +
                  ", which nothing left running can complete";
      } else if (f.state == FiberState::at_group_collective) {
        unsigned posted = 0;
        for (unsigned m = f.group.first; m < f.group.first + f.group.count; ++m)
          posted += b.fibers[m].state == FiberState::at_group_collective;
        char buf[160];
        std::snprintf(buf, sizeof buf, ": %s reached by %u of the %u threads %u..%u",
                      f.group.name, posted, f.group.count, f.group.first,
                      f.group.first + f.group.count - 1);
        b.error = block_name(b) + buf;
      }
      if (!b.error.empty()) {
        abandon_block(b);
        return false;
      }
      at_block += f.state == FiberState::at_block_barrier;
      done += f.state == FiberState::done;
    }
    if (!guards_intact(b, at_block == 0 ? "at the end of the block" : "at a __syncthreads")) {
      abandon_block(b);
      return false;
    }
    if (at_block == 0) {  // every thread returned
      for (auto& e : b.extensions)
        if (b.error.empty()) e.second->block_end(b);
      if (!b.error.empty()) {
        abandon_block(b);
        return false;
      }
      return true;
    }
    if (done > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": __syncthreads reached by %u of %u threads", at_block, n);
      b.error = block_name(b) + buf;
      abandon_block(b);
      return false;
    }
    // One barrier, one call site: threads waiting at two different __syncthreads calls is
    // undefined behaviour on the GPU (the barrier counts arrivals, not sites).
    const Fiber& lead = b.fibers[0];
    for (const Fiber& f : b.fibers) {
      if (f.barrier_line == lead.barrier_line && std::strcmp(f.barrier_file, lead.barrier_file) == 0)
        continue;
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    ": __syncthreads at different call sites: thread %u at %s:%d, thread %u at "
                    "%s:%d",
                    lead.linear, lead.barrier_file, lead.barrier_line, f.linear, f.barrier_file,
                    f.barrier_line);
      b.error = block_name(b) + buf;
      abandon_block(b);
      return false;
    }
    b.barrier_count = 0;
    for (Fiber& f : b.fibers) {
      b.barrier_count += static_cast<unsigned>(f.barrier_predicate);
      f.state = FiberState::runnable;
    }
    if (s.order == ThreadOrder::shuffled) make_order(b, s, rng);
  }
}

}  // namespace detail

// Process-wide thread order for later launches (tests run each kernel under two or more).
inline void set_thread_order(ThreadOrder order, uint64_t seed = 0) {
  std::lock_guard<std::mutex> lock(detail::order_mutex());
  detail::order_setting().order = order;
  detail::order_setting().seed = seed;
}
inline ThreadOrder thread_order() { return detail::current_order().order; }

// Sets the order for a scope and restores the previous one.
class ScopedThreadOrder {
 public:
  explicit ScopedThreadOrder(ThreadOrder order, uint64_t seed = 0)
      : saved_(detail::current_order()) {
    set_thread_order(order, seed);
  }
  ~ScopedThreadOrder() { set_thread_order(saved_.order, saved_.seed); }
  ScopedThreadOrder(const ScopedThreadOrder&) = delete;
  ScopedThreadOrder& operator=(const ScopedThreadOrder&) = delete;

 private:
  detail::OrderSetting saved_;
};

}  // namespace simt

// The built-in variables read the running fiber.
#define threadIdx (::simt::detail::current_fiber().thread_idx)
#define blockIdx (::simt::detail::current_fiber().block->block_idx)
#define blockDim (::simt::detail::current_fiber().block->block_dim)
#define gridDim (::simt::detail::current_fiber().block->grid_dim)

#endif  // DILATTN_SIMT_SCHEDULER_H
