// simt_launch.h - DILATTN_LAUNCH and DILATTN_DYNAMIC_SHARED for the emulator; the launch error.
//
// Part of the SIMT emulator (emu/README.md). A launch checks the configuration as the
// CUDA runtime does (block <= 1024 threads, z <= 64, grid y/z <= 65535, dynamic shared memory
// <= the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize, 48 KB by default), then runs
// every block before it returns: block order follows the thread order (descending reverses it),
// each block gets its dynamic shared memory filled with 0xFF (NaN as floats, so a read before
// a write shows), and the first failing block stops the grid. The outcome is the calling OS
// thread's last error (cudaGetLastError) with a precise text in simt::last_error_message().
// Launches from several OS threads at once are independent: all state is per launch, the
// fiber stacks are per OS thread, and the two process-wide tables are behind mutexes.
// Checked by tests/emu/emu_host_shims.cpp, emu_negative_divergent_barrier.cpp, emu_threads.cpp.
#ifndef DILATTN_SIMT_LAUNCH_H
#define DILATTN_SIMT_LAUNCH_H

#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <thread>
#include <tuple>
#include <utility>

#include "simt_scheduler.h"

namespace simt {
namespace detail {

struct LastError {
  cudaError_t code = cudaSuccess;
  std::string message;
};
inline LastError& last_error() {
  static thread_local LastError e;
  return e;
}
inline cudaError_t set_last_error(cudaError_t code, std::string message) {
  last_error().code = code;
  last_error().message = std::move(message);
  return code;
}

constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kOptInSharedBytes = 228 * 1024;

using KernelKey = void (*)();
inline std::mutex& attribute_mutex() {
  static std::mutex m;
  return m;
}
inline std::map<KernelKey, size_t>& max_dynamic_shared() {  // guarded by attribute_mutex()
  static std::map<KernelKey, size_t> m;
  return m;
}
inline size_t kernel_shared_limit(KernelKey k) {
  std::lock_guard<std::mutex> lock(attribute_mutex());
  auto it = max_dynamic_shared().find(k);
  return it == max_dynamic_shared().end() ? kDefaultSharedBytes : it->second;
}

struct GridWork {
  KernelBody body;
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  OrderSetting order;
  uint64_t blocks = 0;
  std::atomic<uint64_t> next{0};           // blocks are handed out in block order
  std::atomic<uint64_t> first_failure{~uint64_t(0)};
  std::mutex mutex;                          // guards error and error_code
  std::string error;
  cudaError_t error_code = cudaSuccess;
};
constexpr uint64_t kNoFailure = ~uint64_t(0);

inline void record_failure(GridWork& w, uint64_t i, cudaError_t code, const std::string& what) {
  std::lock_guard<std::mutex> lock(w.mutex);
  if (i < w.first_failure.load()) {
    w.first_failure.store(i);
    w.error = what;
    w.error_code = code;
  }
}

// Runs blocks taken in order from w.next on the calling OS thread, with this thread's fiber
// stacks and its own shared-memory buffer, until none is left or an earlier block failed.
inline void grid_worker(GridWork& w) {
  const unsigned n = w.block.x * w.block.y * w.block.z;
  StackPool& pool = stack_pool();
  const bool have_stacks = pool.reserve(n);
  // 16-byte aligned dynamic shared memory (the contract), one buffer reused by every block,
  // allocated at its exact size so ASan flags an access one byte past the end.
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete(p, std::align_val_t{16}); }
  };
  std::unique_ptr<unsigned char, AlignedDelete> shared_storage(
      static_cast<unsigned char*>(::operator new(w.shared_bytes, std::align_val_t{16})));
  unsigned char* shared = shared_storage.get();

  BlockRun b;
  b.block_dim = w.block;
  b.grid_dim = w.grid;
  b.shared = shared;
  b.shared_bytes = w.shared_bytes;
  b.body = w.body;
  if (have_stacks) {
    b.fibers.resize(n);
    for (unsigned t = 0; t < n; ++t) {
      Fiber& f = b.fibers[t];
      f.thread_idx = make_uint3(t % w.block.x, (t / w.block.x) % w.block.y,
                                t / (w.block.x * w.block.y));
      f.linear = t;
      f.warp = t / 32;
      f.lane = t % 32;
      f.block = &b;
      f.stack = pool.stack(t);
      f.stack_size = pool.size;
    }
    b.warps.resize((n + 31) / 32);
    for (unsigned k = 0; k < b.warps.size(); ++k) {
      b.warps[k].first_thread = k * 32;
      b.warps[k].lanes = std::min(32u, n - k * 32);
      b.warps[k].existing =
          b.warps[k].lanes == 32 ? 0xffffffffu : (1u << b.warps[k].lanes) - 1u;
    }
  }
  for (;;) {
    const uint64_t i = w.next.fetch_add(1);
    if (i >= w.blocks || i > w.first_failure.load()) return;
    if (!have_stacks) {
      record_failure(w, i, cudaErrorMemoryAllocation,
                     "cannot map " + std::to_string(n) + " fiber stacks");
      return;
    }
    const uint64_t linear = w.order.order == ThreadOrder::descending ? w.blocks - 1 - i : i;
    b.block_idx = make_uint3(static_cast<unsigned>(linear % w.grid.x),
                             static_cast<unsigned>((linear / w.grid.x) % w.grid.y),
                             static_cast<unsigned>(linear / (uint64_t(w.grid.x) * w.grid.y)));
    if (w.shared_bytes > 0) std::memset(shared, 0xFF, w.shared_bytes);
    if (!run_block(b, w.order, linear)) {
      record_failure(w, i, cudaErrorLaunchFailure, b.error);
      return;
    }
  }
}

inline cudaError_t run_grid(KernelBody body, KernelKey key, const char* name, dim3 grid,
                            dim3 block, size_t shared_bytes) {
  char buf[256];
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
    std::snprintf(buf, sizeof buf,
                  "launch of %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)", name,
                  grid.x, grid.y, grid.z, block.x, block.y, block.z);
    return set_last_error(cudaErrorInvalidConfiguration, buf);
  }
  const size_t limit = kernel_shared_limit(key);
  if (shared_bytes > limit) {
    std::snprintf(buf, sizeof buf,
                  "launch of %s: %zu bytes of dynamic shared memory exceed the kernel's limit of "
                  "%zu (cudaFuncAttributeMaxDynamicSharedMemorySize)",
                  name, shared_bytes, limit);
    return set_last_error(cudaErrorInvalidValue, buf);
  }
  GridWork work;
  work.body = body;
  work.grid = grid;
  work.block = block;
  work.shared_bytes = shared_bytes;
  work.order = current_order();
  work.blocks = uint64_t(grid.x) * grid.y * grid.z;
  // SIMT_THREADS=k runs blocks on k OS threads (this one included). Results do not depend on
  // it for kernels whose blocks do not race, and the reported failure is always the first
  // failing block in block order, as with one thread.
  uint64_t workers = 1;
  if (const char* env = std::getenv("SIMT_THREADS")) {
    const long v = std::atol(env);
    if (v > 1) workers = static_cast<uint64_t>(v > 64 ? 64 : v);
  }
  if (workers > work.blocks) workers = work.blocks;
  std::vector<std::thread> helpers;
  for (uint64_t i = 1; i < workers; ++i) {
    try {
      helpers.emplace_back(grid_worker, std::ref(work));
    } catch (...) {
      break;  // fewer helpers: same result
    }
  }
  grid_worker(work);
  for (std::thread& t : helpers) t.join();
  if (work.first_failure.load() != kNoFailure) {
    return set_last_error(work.error_code, "kernel " + std::string(name) + ", " + work.error);
  }
  return cudaSuccess;  // as in CUDA, a success does not clear an earlier error
}

template <class... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  const char* name;

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    // Each thread calls the kernel with its own copies of the arguments, as on the GPU.
    struct Call {
      void (*kernel)(P...);
      std::tuple<typename std::decay<P>::type...> args;
      static void run(void* self) {
        Call* c = static_cast<Call*>(self);
        std::apply(c->kernel, c->args);
      }
    };
    Call call{kernel, std::tuple<typename std::decay<P>::type...>(std::forward<A>(args)...)};
    run_grid(KernelBody{&Call::run, &call}, reinterpret_cast<KernelKey>(kernel), name, grid,
             block, shared_bytes);
  }
};

template <class... P>
inline Launcher<P...> make_launcher(void (*kernel)(P...), dim3 grid, dim3 block,
                                    size_t shared_bytes, cudaStream_t, const char* name) {
  return Launcher<P...>{kernel, grid, block, shared_bytes, name};
}

inline unsigned char* dynamic_shared() { return current_fiber().block->shared; }

}  // namespace detail

// The precise text of this OS thread's last launch error ("" after a success).
inline const char* last_error_message() { return detail::last_error().message.c_str(); }

}  // namespace simt

#define DILATTN_DYNAMIC_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::simt::detail::dynamic_shared())

#define DILATTN_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::simt::detail::make_launcher(kernel, grid, block, shared_bytes, stream, #kernel)

#endif  // DILATTN_SIMT_LAUNCH_H
