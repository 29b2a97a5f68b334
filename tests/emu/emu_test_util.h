// emu_test_util.h - the SIMT emulator layer shared by the emulator tests (tests/emu/); their
// checks go through the common harness (tests/common/check.h: CHECK_MSG, harness::finish).
//
// run_in_orders() runs one computation under ascending, descending and a shuffled thread order
// and reports whether all three gave bitwise identical bytes (memcmp, never ==, so NaN and -0.0
// count as differences); DeviceVector is memory aligned as cudaMalloc's; as_bytes / from_bytes
// move values to and from the compared bytes; launched_ok reports the last launch's status and
// launch_failed_with whether it failed with a given message.
#ifndef DILATTN_TESTS_EMU_TEST_UTIL_H
#define DILATTN_TESTS_EMU_TEST_UTIL_H

#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "../common/check.h"
#include "simt.h"

namespace emu_test {

// Runs `launch` (which launches kernels and returns the bytes it wants compared) under each
// order; returns the ascending result and sets *agree to whether all orders matched bitwise.
inline std::vector<unsigned char> run_in_orders(
    const std::function<std::vector<unsigned char>()>& launch, bool* agree) {
  const simt::ThreadOrder orders[] = {simt::ThreadOrder::ascending, simt::ThreadOrder::descending,
                                      simt::ThreadOrder::shuffled};
  std::vector<unsigned char> first;
  *agree = true;
  for (simt::ThreadOrder order : orders) {
    simt::ScopedThreadOrder scope(order, 12345);
    std::vector<unsigned char> bytes = launch();
    if (order == simt::ThreadOrder::ascending) {
      first = bytes;
    } else if (bytes.size() != first.size() ||
               std::memcmp(bytes.data(), first.data(), bytes.size()) != 0) {
      *agree = false;
    }
  }
  return first;
}

// Memory aligned as cudaMalloc's (256 bytes): WMMA pointers must be 32-byte aligned, and
// std::vector's default allocator only promises 16.
template <class T>
struct DeviceAllocator {
  using value_type = T;
  DeviceAllocator() = default;
  template <class U>
  DeviceAllocator(const DeviceAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{256}));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{256}); }
  template <class U>
  bool operator==(const DeviceAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const DeviceAllocator<U>&) const { return false; }
};
template <class T>
using DeviceVector = std::vector<T, DeviceAllocator<T>>;

template <class T, class A>
std::vector<unsigned char> as_bytes(const std::vector<T, A>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <class T>
std::vector<T> from_bytes(const std::vector<unsigned char>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Whether the last launch on this thread failed with a message containing `expected`; prints
// what it got otherwise.
inline bool launch_failed_with(const char* what, const char* expected) {
  const cudaError_t e = cudaGetLastError();
  const std::string msg = simt::last_error_message();
  if (e == cudaErrorLaunchFailure && msg.find(expected) != std::string::npos) return true;
  std::fprintf(stderr, "%s: got %s (%s), want a launch failure with \"%s\"\n", what,
               cudaGetErrorName(e), msg.c_str(), expected);
  return false;
}

// Launch status of the last launch on this thread: cudaSuccess or prints the message.
inline bool launched_ok(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: launch failed: %s (%s)\n", what, cudaGetErrorString(e),
                 simt::last_error_message());
    return false;
  }
  return true;
}

}  // namespace emu_test

#endif  // DILATTN_TESTS_EMU_TEST_UTIL_H
