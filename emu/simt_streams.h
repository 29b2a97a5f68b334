// simt_streams.h - streams for the emulator: what runs when, and counters of the runtime calls.
//
// Part of the SIMT emulator (emu/README.md). By default every launch, copy, memset and host
// function runs when it is called, whatever its stream. In *deferred* mode
// (simt::ScopedDeferredStreams) work given to a stream the program created is queued there and
// runs only when something waits for it: cudaStreamSynchronize of that stream,
// cudaDeviceSynchronize, cudaEventSynchronize, a synchronous copy, or work on the legacy
// stream 0 (which waits for the other streams first, as the legacy default stream does). So a
// library call that returns before its work is done, or gives memory back while kernels still
// use it, can be seen by a test: the outputs are not written yet when the call returns.
//
// Counters of runtime calls (simt::runtime_calls(), process-wide) and of launches per stream
// (simt::launches_on) let a test assert "no cudaMalloc, no synchronisation between these two
// points, every kernel on the caller's stream" (what a CUDA graph capture needs).
// Checked by tests/emu/test_emu_streams.cpp and tests/kernels/test_launch_stream.cpp.
#ifndef DILATTN_SIMT_STREAMS_H
#define DILATTN_SIMT_STREAMS_H

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace simt {

// How often each runtime entry point was called since the process started (all OS threads).
struct RuntimeCalls {
  uint64_t mallocs = 0;            // cudaMalloc, cudaMallocHost
  uint64_t frees = 0;              // cudaFree, cudaFreeHost
  uint64_t device_syncs = 0;       // cudaDeviceSynchronize
  uint64_t stream_syncs = 0;       // cudaStreamSynchronize
  uint64_t event_syncs = 0;        // cudaEventSynchronize
  uint64_t sync_copies = 0;        // cudaMemcpy, cudaMemset (synchronous)
  uint64_t async_copies = 0;       // cudaMemcpyAsync, cudaMemsetAsync
  uint64_t device_properties = 0;  // cudaGetDeviceProperties
  uint64_t func_attributes = 0;    // cudaFuncGetAttributes
  uint64_t host_funcs = 0;         // cudaLaunchHostFunc
  uint64_t launches = 0;           // kernel launches, any stream
};

namespace detail {

struct Counters {
  std::atomic<uint64_t> mallocs{0}, frees{0}, device_syncs{0}, stream_syncs{0}, event_syncs{0},
      sync_copies{0}, async_copies{0}, device_properties{0}, func_attributes{0}, host_funcs{0},
      launches{0};
};
inline Counters& counters() {
  static Counters c;
  return c;
}
inline void count(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

// A stream the program created (cudaStreamCreate); stream 0 has none.
struct EmuStream {
  std::deque<std::function<void()>> pending;  // deferred mode only; guarded by stream_mutex()
  std::atomic<bool> capturing{false};  // between cudaStreamBeginCapture and EndCapture
  uint64_t captured = 0;  // work given while capturing (recorded for a graph, not run)
};

inline std::mutex& stream_mutex() {
  static std::mutex m;
  return m;
}
inline std::map<const void*, uint64_t>& launch_log() {  // launches per stream, stream_mutex()
  static std::map<const void*, uint64_t> m;
  return m;
}
inline std::map<EmuStream*, bool>& live_streams() {  // guarded by stream_mutex()
  static std::map<EmuStream*, bool> m;
  return m;
}
inline std::atomic<bool>& deferred_mode() {
  static std::atomic<bool> on{false};
  return on;
}

// Runs the queued work of one stream, in order, outside the lock (work may queue more).
inline void flush_stream(EmuStream* s) {
  for (;;) {
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(stream_mutex());
      if (live_streams().count(s) == 0 || s->pending.empty()) return;
      work = std::move(s->pending.front());
      s->pending.pop_front();
    }
    work();
  }
}
inline void flush_all_streams() {
  std::vector<EmuStream*> streams;
  {
    std::lock_guard<std::mutex> lock(stream_mutex());
    for (const auto& entry : live_streams()) streams.push_back(entry.first);
  }
  for (EmuStream* s : streams) flush_stream(s);
}

// Runs `work` now, or queues it when `stream` is a created stream and deferred mode is on.
// Work for stream 0 first waits for every other stream (the legacy default stream's rule).
// Work given to a capturing stream is only counted, as CUDA records it into the graph
// instead of running it (the emulator builds no graph).
inline void submit(cudaStream_t stream, std::function<void()> work) {
  auto* s = reinterpret_cast<EmuStream*>(stream);
  if (s != nullptr && s->capturing.load()) {
    std::lock_guard<std::mutex> lock(stream_mutex());
    ++s->captured;
    return;
  }
  if (s != nullptr && deferred_mode().load()) {
    std::lock_guard<std::mutex> lock(stream_mutex());
    if (live_streams().count(s) != 0) {
      s->pending.push_back(std::move(work));
      return;
    }
  }
  if (s == nullptr) flush_all_streams();
  work();
}

inline void log_launch(cudaStream_t stream) {
  count(counters().launches);
  std::lock_guard<std::mutex> lock(stream_mutex());
  ++launch_log()[static_cast<const void*>(stream)];
}

}  // namespace detail

// A snapshot of the runtime call counters; compare two to see what happened in between.
inline RuntimeCalls runtime_calls() {
  const detail::Counters& c = detail::counters();
  RuntimeCalls r;
  r.mallocs = c.mallocs.load();
  r.frees = c.frees.load();
  r.device_syncs = c.device_syncs.load();
  r.stream_syncs = c.stream_syncs.load();
  r.event_syncs = c.event_syncs.load();
  r.sync_copies = c.sync_copies.load();
  r.async_copies = c.async_copies.load();
  r.device_properties = c.device_properties.load();
  r.func_attributes = c.func_attributes.load();
  r.host_funcs = c.host_funcs.load();
  r.launches = c.launches.load();
  return r;
}

// Whether `stream` is one cudaStreamCreate made and cudaStreamDestroy has not destroyed yet:
// a value the emulator may read as its stream object. The value is looked up, never read
// through, so any pointer may be asked about (the legacy stream 0 is none).
inline bool is_live_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(detail::stream_mutex());
  return detail::live_streams().count(reinterpret_cast<detail::EmuStream*>(stream)) != 0;
}

// Kernel launches given to `stream` so far (nullptr: the legacy default stream).
inline uint64_t launches_on(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(detail::stream_mutex());
  auto it = detail::launch_log().find(static_cast<const void*>(stream));
  return it == detail::launch_log().end() ? 0 : it->second;
}

// Work items (launches, copies, host functions) given to `stream` while it was capturing.
inline uint64_t captured_on(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(detail::stream_mutex());
  return stream == nullptr ? 0 : reinterpret_cast<detail::EmuStream*>(stream)->captured;
}

// Deferred mode on for a scope (process-wide); leaving it runs whatever is still queued.
class ScopedDeferredStreams {
 public:
  ScopedDeferredStreams() : saved_(detail::deferred_mode().exchange(true)) {}
  ~ScopedDeferredStreams() {
    detail::flush_all_streams();
    detail::deferred_mode().store(saved_);
  }
  ScopedDeferredStreams(const ScopedDeferredStreams&) = delete;
  ScopedDeferredStreams& operator=(const ScopedDeferredStreams&) = delete;

 private:
  bool saved_;
};

}  // namespace simt

#endif  // DILATTN_SIMT_STREAMS_H
