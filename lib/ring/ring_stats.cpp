// ring_stats.cpp - the timed shifts of a ring call and the bare replay (see ring_stats.h).
#include "ring_stats.h"

#include <chrono>

#include "ring_call.h"

namespace dilattn {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

dilattn_status RingCall::shift_begin(const void* send, void* recv, size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  const dilattn_status s = transport->shift_begin(send, recv, bytes);
  shifts.exposed_s += seconds_since(t0);
  shifts.sizes.push_back(bytes);
  return s;
}

dilattn_status RingCall::shift_end() {
  const auto t0 = std::chrono::steady_clock::now();
  const dilattn_status s = transport->shift_end();
  shifts.exposed_s += seconds_since(t0);
  return s;
}

void record_ring_call(dilattn_comm comm, RingCall& call) {
  comm->peak_bytes = call.memory.peak() + comm->transport->buffer_bytes();
  call.shifts.call_s = seconds_since(call.started);
  comm->last_shifts = call.shifts;
}

dilattn_status time_bare_shifts(RingTransport& transport, const std::vector<size_t>& sizes,
                                double* seconds) {
  size_t largest = 0;
  for (size_t b : sizes) largest = b > largest ? b : largest;
  std::vector<unsigned char> send(largest), recv(largest);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b : sizes) {
    if (dilattn_status s = transport.shift_begin(send.data(), recv.data(), b)) return s;
    if (dilattn_status s = transport.shift_end()) return s;
  }
  *seconds = seconds_since(t0);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
