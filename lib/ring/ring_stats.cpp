// ring_stats.cpp - the timed exchanges of a ring call and the bare replay (see ring_stats.h).
#include "ring_stats.h"

#include <algorithm>
#include <chrono>

#include "ring_call.h"

namespace dilattn {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

dilattn_status RingCall::exchange_begin(const MessageHalves& send, int32_t to, void* recv,
                                       size_t recv_bytes, int32_t from) {
  const auto t0 = std::chrono::steady_clock::now();
  const dilattn_status s = transport->exchange_begin(send, to, recv, recv_bytes, from);
  shifts.exposed_s += seconds_since(t0);
  shifts.exchanges.push_back({send.bytes(), recv_bytes, to, from});
  shifts.sent_bytes += send.bytes();
  return s;
}

dilattn_status RingCall::exchange_end() {
  const auto t0 = std::chrono::steady_clock::now();
  const dilattn_status s = transport->exchange_end();
  shifts.exposed_s += seconds_since(t0);
  return s;
}

void record_ring_call(dilattn_comm comm, RingCall& call) {
  comm->peak_bytes = call.memory.peak() + comm->transport->buffer_bytes() +
                     (call.ops != nullptr ? call.ops->own_bytes() : 0);
  call.shifts.call_s = seconds_since(call.started);
  comm->last_shifts = call.shifts;
}

dilattn_status time_bare_shifts(RingTransport& transport,
                                const std::vector<ExchangeRecord>& exchanges, double* seconds) {
  size_t largest = 0;
  for (const ExchangeRecord& e : exchanges)
    largest = std::max(largest, std::max(e.send_bytes, e.recv_bytes));
  std::vector<unsigned char> send(largest), recv(largest);
  const auto t0 = std::chrono::steady_clock::now();
  for (const ExchangeRecord& e : exchanges) {
    const MessageHalves message = MessageHalves::of(send.data(), e.send_bytes);
    if (dilattn_status s =
            transport.exchange_begin(message, e.to, recv.data(), e.recv_bytes, e.from))
      return s;
    if (dilattn_status s = transport.exchange_end()) return s;
  }
  *seconds = seconds_since(t0);
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
