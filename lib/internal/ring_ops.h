// ring_ops.h - the element work of one ring call (SPEC 5), where the plan's backend keeps its
// tensors: the ring's buffers, copies, sums and SPEC 5's merge of a partial (O_b, LSE_b).
//
// The ring algorithm (lib/ring/ring_forward.cpp, ring_backward.cpp) is written once against
// this interface; the backend table (backend_table.cpp, Backend::ring_ops) picks the
// implementation for the plan's backend:
//   host    lib/ring/ring_ops_host.cpp: loops over host memory (ref, cpu), ring_tensor_ops.h;
//   device  cuda/ring_ops.cu: small kernels queued on one stream, built by nvcc for the cuda
//           backend (device memory) and run by the SIMT emulator for the emu backend.
// Both do the same arithmetic (f64, stored in each view's dtype; the merge is softmax_rules.h
// merge_lse / merge_weight / merge_element), so a ring gives the same results on either.
//
// Views are dilattn_tensor views of equal shape, [B, n, heads, D] or, for an LSE, [B, heads,
// n, 1]. Work may still be queued when a call returns; wait() returns once it is done. A call
// that fails sets the last error and returns its status.
// Checked by tests/ring (the ring on ref, cpu and emu against the reference).
#ifndef DILATTN_RING_OPS_H
#define DILATTN_RING_OPS_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend.h"
#include "dilattn.h"

namespace dilattn {

// Rows [first, first + count) of kv heads [head, head + heads) of a shard: what of it another
// rank needs (lib/ring/ring_needs.h) is a list of disjoint runs; packed, they travel back to
// back, each a contiguous [B, count, heads, D] block.
struct RowRun {
  int64_t first = 0, count = 0, head = 0, heads = 1;
};
using RowRuns = std::vector<RowRun>;

class RingOps {
 public:
  virtual ~RingOps() = default;
  // *p = `bytes` of zeroed memory where the backend reads and writes its tensors.
  virtual dilattn_status allocate(size_t bytes, void** p) = 0;
  virtual void release(void* p) = 0;
  // dst = src, converted when the dtypes differ (bytes copied when they agree).
  virtual dilattn_status copy(const dilattn_tensor& src, const dilattn_tensor& dst) = 0;
  // acc += part.
  virtual dilattn_status add(const dilattn_tensor& part, const dilattn_tensor& acc) = 0;
  // Every element of t = x.
  virtual dilattn_status fill(const dilattn_tensor& t, double x) = 0;
  // SPEC 5: (o, lse) <- the merge of (o, lse) and (o_b, lse_b), row by row.
  // o, o_b: [B, n, nh, D]; lse, lse_b: [B, nh, n, 1].
  virtual dilattn_status merge(const dilattn_tensor& o_b, const dilattn_tensor& lse_b,
                               const dilattn_tensor& o, const dilattn_tensor& lse) = 0;
  // Packs the runs of `full` ([B, n, Hkv, D]) into `packed`, one after another, each a
  // contiguous [B, count, heads, D] block in full's dtype.
  virtual dilattn_status pack_rows(const dilattn_tensor& full, const RowRuns& runs,
                                   void* packed) = 0;
  // Unpacks: the reverse, `packed` in full's dtype; with `add`, full += packed. Rows and
  // heads outside the runs are not touched.
  virtual dilattn_status unpack_rows(const void* packed, const RowRuns& runs,
                                     const dilattn_tensor& full, bool add) = 0;
  // Bytes the ops hold themselves (the device's row map for pack/unpack), for
  // dilattn_comm_peak_bytes beside the ring's RingMemory.
  virtual size_t own_bytes() const { return 0; }
  // `bytes` from src to dst (memory of this kind, or of another rank of the same process),
  // finished when it returns: how the threads transport receives a chunk.
  virtual dilattn_status copy_bytes(void* dst, const void* src, size_t bytes) = 0;
  // Returns once every piece of work queued so far is done (host: at once).
  virtual dilattn_status wait() = 0;
  // How the ring calls the backend's forward and backward: on the ops' stream, not waiting.
  virtual StreamArgs stream_args() const = 0;
};

}  // namespace dilattn

#endif  // DILATTN_RING_OPS_H
