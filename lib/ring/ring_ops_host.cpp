// ring_ops_host.cpp - the ring's element work in host memory (ref and cpu backends): the
// loops of ring_tensor_ops.h behind the interface of ring_ops.h. Every call finishes before it
// returns, so wait() has nothing to wait for.
// Checked by tests/ring (the ring on ref and cpu against the reference).
#include <cstdlib>
#include <cstring>

#include "errors.h"
#include "ring_ops.h"
#include "ring_tensor_ops.h"

namespace dilattn {

namespace {

class HostRingOps final : public RingOps {
 public:
  dilattn_status allocate(size_t bytes, void** p) override {
    *p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (*p != nullptr) return DILATTN_SUCCESS;
    return set_error(DILATTN_ERROR_OUT_OF_MEMORY, "out of host memory: ring buffer of %zu bytes",
                     bytes);
  }
  void release(void* p) override { std::free(p); }
  dilattn_status copy(const dilattn_tensor& src, const dilattn_tensor& dst) override {
    copy_view(src, dst);
    return DILATTN_SUCCESS;
  }
  dilattn_status add(const dilattn_tensor& part, const dilattn_tensor& acc) override {
    add_view(part, acc);
    return DILATTN_SUCCESS;
  }
  dilattn_status fill(const dilattn_tensor& t, double x) override {
    fill_view(t, x);
    return DILATTN_SUCCESS;
  }
  dilattn_status merge(const dilattn_tensor& o_b, const dilattn_tensor& lse_b,
                       const dilattn_tensor& o, const dilattn_tensor& lse) override {
    merge_partial(o_b, lse_b, o, lse);
    return DILATTN_SUCCESS;
  }
  dilattn_status pack_rows(const dilattn_tensor& full, const RowRuns& runs,
                           void* packed) override {
    pack_row_runs(full, runs, packed);
    return DILATTN_SUCCESS;
  }
  dilattn_status unpack_rows(const void* packed, const RowRuns& runs,
                             const dilattn_tensor& full, bool add) override {
    unpack_row_runs(packed, runs, full, add);
    return DILATTN_SUCCESS;
  }
  dilattn_status copy_bytes(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return DILATTN_SUCCESS;
  }
  dilattn_status wait() override { return DILATTN_SUCCESS; }
  StreamArgs stream_args() const override { return StreamArgs{}; }  // CPU backends ignore it
};

}  // namespace

dilattn_status make_host_ring_ops(int32_t, void*, std::unique_ptr<RingOps>* ops) {
  *ops = std::make_unique<HostRingOps>();
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
