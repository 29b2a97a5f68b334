// simt_launch.h - DILATTN_LAUNCH and DILATTN_DYNAMIC_SHARED for the emulator; the launch error;
// the emulated device.
//
// Part of the SIMT emulator (emu/README.md). A launch checks the configuration as the
// CUDA runtime does (block <= 1024 threads, z <= 64, grid y/z <= 65535, dynamic shared memory
// <= the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize, 48 KB by default, and never
// above the emulated device's opt-in limit: 163 KB on sm_80, 227 KB on sm_90), then runs
// every block (at once, or when its stream is waited for: simt_streams.h):
// block order follows the thread order (descending reverses it),
// each block gets its dynamic shared memory filled with 0xFF (NaN as floats, so a read before
// a write shows), and the first failing block stops the grid. The outcome is the calling OS
// thread's last error (cudaGetLastError) with a precise text in simt::last_error_message().
// Launches from several OS threads at once are independent: all state is per launch, the
// fiber stacks are per OS thread, and the two process-wide tables are behind mutexes.
// Checked by tests/emu/test_emu_host_shims.cpp, test_emu_negative_divergent_barrier.cpp, test_emu_threads.cpp,
// test_emu_streams.cpp.
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
#include "simt_streams.h"

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

// The device the emulator pretends to be: its compute capability decides the opt-in shared
// memory per block (CUDA C++ Programming Guide, "Technical Specifications per Compute
// Capability") and whether the emulated binary has a kernel image for it (simt_runtime.h).
struct EmulatedDevice {
  int major = 8;
  int minor = 0;
};
inline std::mutex& device_mutex() {
  static std::mutex m;
  return m;
}
inline EmulatedDevice& device_setting() {  // guarded by device_mutex()
  static EmulatedDevice d;
  return d;
}
inline EmulatedDevice emulated_device() {
  std::lock_guard<std::mutex> lock(device_mutex());
  return device_setting();
}
inline size_t optin_shared_bytes(const EmulatedDevice& d) {
  if (d.major >= 9) return 227 * 1024;                                 // sm_90
  if (d.major == 8) return d.minor == 0 || d.minor == 7 ? 163 * 1024  // sm_80, sm_87
                                                        : 99 * 1024;  // sm_86, sm_89
  if (d.major == 7) return d.minor == 5 ? 64 * 1024 : 96 * 1024;      // sm_75; sm_70, sm_72
  return kDefaultSharedBytes;
}

// Fault injection: the launch after `launches_left` more launches fails at enqueue.
inline std::atomic<int64_t>& launches_before_failure() {
  static std::atomic<int64_t> n{-1};  // -1: none planned
  return n;
}

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
  // 128-byte aligned dynamic shared memory (as cuda_compat.cuh declares it under nvcc), one
  // buffer reused by every block, allocated at its exact size so ASan flags an access one byte
  // past the end.
  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete(p, std::align_val_t{128}); }
  };
  std::unique_ptr<unsigned char, AlignedDelete> shared_storage(
      static_cast<unsigned char*>(::operator new(w.shared_bytes, std::align_val_t{128})));
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

// The runtime's checks at enqueue: configuration, shared memory, an injected failure.
inline cudaError_t check_launch(KernelKey key, const char* name, dim3 grid, dim3 block,
                                size_t shared_bytes) {
  char buf[256];
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
    std::snprintf(buf, sizeof buf,
                  "launch of %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)", name,
                  grid.x, grid.y, grid.z, block.x, block.y, block.z);
    return set_last_error(cudaErrorInvalidConfiguration, buf);
  }
  const size_t limit = std::min(kernel_shared_limit(key), optin_shared_bytes(emulated_device()));
  if (shared_bytes > limit) {
    std::snprintf(buf, sizeof buf,
                  "launch of %s: %zu bytes of dynamic shared memory exceed the kernel's limit of "
                  "%zu (cudaFuncAttributeMaxDynamicSharedMemorySize, at most the device's "
                  "opt-in limit)",
                  name, shared_bytes, limit);
    return set_last_error(cudaErrorInvalidValue, buf);
  }
  int64_t left = launches_before_failure().load();
  while (left >= 0 && !launches_before_failure().compare_exchange_weak(left, left - 1)) {
  }
  if (left == 0) {
    std::snprintf(buf, sizeof buf, "launch of %s: injected failure (simt::fail_launch_after)",
                  name);
    return set_last_error(cudaErrorLaunchFailure, buf);
  }
  return cudaSuccess;
}

// Runs every block of a checked launch; a failure becomes this OS thread's last error.
inline cudaError_t execute_grid(KernelBody body, const char* name, dim3 grid, dim3 block,
                                size_t shared_bytes) {
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
  cudaStream_t stream;
  const char* name;

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong argument count");
    const KernelKey key = reinterpret_cast<KernelKey>(kernel);
    log_launch(stream);
    if (check_launch(key, name, grid, block, shared_bytes) != cudaSuccess) return;
    // Each thread calls the kernel with its own copies of the arguments, as on the GPU; the
    // launch keeps one copy of them until it runs (now, or when its stream is waited for).
    struct Call {
      void (*kernel)(P...);
      std::tuple<typename std::decay<P>::type...> args;
      static void run(void* self) {
        Call* c = static_cast<Call*>(self);
        std::apply(c->kernel, c->args);
      }
    };
    auto call = std::make_shared<Call>(
        Call{kernel, std::tuple<typename std::decay<P>::type...>(std::forward<A>(args)...)});
    const char* kernel_name = name;
    const dim3 g = grid, b = block;
    const size_t smem = shared_bytes;
    submit(stream, [call, kernel_name, g, b, smem] {
      execute_grid(KernelBody{&Call::run, call.get()}, kernel_name, g, b, smem);
    });
  }
};

template <class... P>
inline Launcher<P...> make_launcher(void (*kernel)(P...), dim3 grid, dim3 block,
                                    size_t shared_bytes, cudaStream_t stream, const char* name) {
  return Launcher<P...>{kernel, grid, block, shared_bytes, stream, name};
}

inline unsigned char* dynamic_shared() { return current_fiber().block->shared; }

}  // namespace detail

// The precise text of this OS thread's last launch error ("" after a success).
inline const char* last_error_message() { return detail::last_error().message.c_str(); }

// The emulated device's compute capability for later calls (process-wide; default 8.0):
// cudaGetDeviceProperties reports it, launches are held to its opt-in shared memory, and
// cudaFuncGetAttributes says whether the emulated binary has a kernel image for it.
inline void set_emulated_device(int major, int minor) {
  std::lock_guard<std::mutex> lock(detail::device_mutex());
  detail::device_setting().major = major;
  detail::device_setting().minor = minor;
}

// The launch after the next `launches` launches (of any kernel, on any OS thread) fails at
// enqueue with cudaErrorLaunchFailure; a negative count cancels it.
inline void fail_launch_after(int64_t launches) {
  detail::launches_before_failure().store(launches < 0 ? -1 : launches);
}

}  // namespace simt

#define DILATTN_DYNAMIC_SHARED(type, name) \
  type* name = reinterpret_cast<type*>(::simt::detail::dynamic_shared())

// Guard bytes after every tile a kernel carves out of its dynamic shared memory
// (SmemCarver, cuda/smem_carver.cuh): filled when carved, checked at every barrier.
#define DILATTN_SMEM_GUARD_BYTES 128
#define DILATTN_SMEM_GUARD(ptr, bytes) ::simt::detail::guard_shared(ptr, bytes)

#define DILATTN_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::simt::detail::make_launcher(kernel, grid, block, shared_bytes, stream, #kernel)

#endif  // DILATTN_SIMT_LAUNCH_H
