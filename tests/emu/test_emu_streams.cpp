// test_emu_streams.cpp - the emulator's streams in deferred mode, its runtime call counters, the
// launch log per stream and launch fault injection (emu/simt_streams.h).
//
// Properties: (1) in deferred mode a launch, an async copy and a host function on a created
// stream run only when the stream is synchronised, in the order given; (2) work on the legacy
// stream 0 first runs what other streams hold; (3) cudaStreamDestroy runs what is left;
// (4) the counters count exactly the calls made (one cudaMalloc, one stream sync, ...) and
// launches_on counts the launches of each stream; (5) fail_launch_after(1) lets one launch
// through and fails the next at enqueue with cudaErrorLaunchFailure, then launches work again;
// (6) outside deferred mode everything runs at once.
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace {

__global__ void add_kernel(int* p, int n, int v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += v;
}

void record(void* data) { static_cast<std::vector<int>*>(data)->push_back(7); }

}  // namespace

int main() {
  const int n = 64;
  std::vector<int> a(n, 0), b(n, 0), copy(n, -1), host_calls;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_MSG(cudaStreamCreate(&s1) == cudaSuccess && cudaStreamCreate(&s2) == cudaSuccess,
            "streams");
  const simt::RuntimeCalls before = simt::runtime_calls();
  const uint64_t on_s1 = simt::launches_on(s1), on_null = simt::launches_on(nullptr);
  {
    simt::ScopedDeferredStreams deferred;
    // (1) queued, in order: +1, copy, +10, host function
    DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 1);
    CHECK_MSG(cudaMemcpyAsync(copy.data(), a.data(), n * sizeof(int), cudaMemcpyDefault, s1) ==
                  cudaSuccess, "memcpyAsync");
    DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 10);
    CHECK_MSG(cudaLaunchHostFunc(s1, record, &host_calls) == cudaSuccess, "host func");
    CHECK_MSG(a[0] == 0 && copy[0] == -1 && host_calls.empty(), "(1) ran before the sync: %d %d",
              a[0], copy[0]);
    CHECK_MSG(cudaStreamSynchronize(s1) == cudaSuccess, "sync");
    CHECK_MSG(a[0] == 11 && a[n - 1] == 11 && copy[0] == 1 && host_calls.size() == 1,
              "(1) after sync a = %d, copy = %d", a[0], copy[0]);
    // (2) the legacy stream waits for the others
    DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s2)(b.data(), n, 5);
    CHECK_MSG(b[0] == 0, "(2) s2 ran early");
    DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, 0)(b.data(), n, 100);
    CHECK_MSG(b[0] == 105, "(2) legacy stream: b = %d, want 105", b[0]);
    // (3) destroy runs what is left
    DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s2)(b.data(), n, 1000);
    CHECK_MSG(cudaStreamDestroy(s2) == cudaSuccess && b[0] == 1105, "(3) b = %d", b[0]);
  }
  // (4) counters
  int* d = nullptr;
  CHECK_MSG(cudaMalloc(&d, 16) == cudaSuccess, "malloc");
  CHECK_MSG(cudaFree(d) == cudaSuccess, "free");
  CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "device sync");
  const simt::RuntimeCalls after = simt::runtime_calls();
  CHECK_MSG(after.mallocs - before.mallocs == 1 && after.frees - before.frees == 1, "malloc/free");
  CHECK_MSG(after.stream_syncs - before.stream_syncs == 1, "stream syncs %llu",
            static_cast<unsigned long long>(after.stream_syncs - before.stream_syncs));
  CHECK_MSG(after.device_syncs - before.device_syncs == 1, "device syncs");
  CHECK_MSG(
      after.async_copies - before.async_copies == 1 && after.sync_copies == before.sync_copies,
      "copies");
  CHECK_MSG(after.host_funcs - before.host_funcs == 1, "host funcs");
  CHECK_MSG(after.launches - before.launches == 5, "launches %llu",
            static_cast<unsigned long long>(after.launches - before.launches));
  CHECK_MSG(simt::launches_on(s1) - on_s1 == 2 && simt::launches_on(nullptr) - on_null == 1,
            "launches per stream");
  // (5) fault injection
  simt::fail_launch_after(1);
  DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 1);
  CHECK_MSG(emu_test::launched_ok("the launch before the injected failure"), "(5) first");
  DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 1);
  CHECK_MSG(
      cudaGetLastError() == cudaErrorLaunchFailure &&
          std::string(simt::last_error_message()).find("injected failure") != std::string::npos,
      "(5) the second launch must fail: %s", simt::last_error_message());
  CHECK_MSG(a[0] == 12, "(5) the failed launch ran: a = %d", a[0]);
  DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 1);
  CHECK_MSG(emu_test::launched_ok("after the injected failure") && a[0] == 13, "(5) later");
  // (6) not deferred: at once
  DILATTN_LAUNCH(add_kernel, dim3(1), dim3(n), 0, s1)(a.data(), n, 1);
  CHECK_MSG(a[0] == 14, "(6) a = %d", a[0]);
  CHECK_MSG(cudaStreamDestroy(s1) == cudaSuccess, "destroy");
  return harness::finish("emu_streams");
}
