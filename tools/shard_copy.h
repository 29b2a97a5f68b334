// shard_copy.h - one rank's rows of a full contiguous tensor, copied in and out: the shards of
// ring attention (SPEC 5) for `--ring-threads` (ring_run.cpp) and `--ring mpi` (ring_mpi.cpp).
// For a device backend the rank's rows go on to the plan's device (device_memory.h), so each
// rank holds its own shards there, as a multi-GPU program would.
#ifndef DILATTN_TOOLS_SHARD_COPY_H
#define DILATTN_TOOLS_SHARD_COPY_H

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli_error.h"
#include "device_memory.h"
#include "dilattn_ring.h"

namespace dilattn_cli {

inline size_t element_size(dilattn_dtype t) { return t == DILATTN_F64 ? 8 : t == DILATTN_F32 ? 4 : 2; }

// The rows of one rank (dilattn_ring_shard_rows): up to two ranges of the full sequence.
struct Rows {
  int64_t first[2] = {0, 0}, count[2] = {0, 0};
  int64_t total() const { return count[0] + count[1]; }
};

// Where the plan's backend reads a rank's shard: host memory (ref, cpu), a GPU (cuda, device 0
// as the single-device path), or the emulator's device memory (emu).
enum class ShardPlace { host, gpu, emulated_device };

// A full tensor of the command; `lse`: its rows are on axis 2 ([B, H, N, 1]), else on axis 1.
struct Operand {
  const dilattn_tensor* full;
  bool lse = false;
};

// Calls piece(full_offset, shard_offset, bytes) for every run of contiguous bytes that `rows`
// of the full tensor `full` make, in shard order: where the run starts in the full tensor and
// in a shard of those rows. Only shape and dtype are read, so a rank without the data (--ring
// mpi) walks the same pieces as rank 0 and every send meets a receive of its size.
template <class Piece>
void for_each_piece(const dilattn_tensor& full, const Rows& rows, bool lse, Piece piece) {
  const int axis = lse ? 2 : 1;
  const int64_t outer = lse ? full.shape[0] * full.shape[1] : full.shape[0];
  const int64_t inner = lse ? full.shape[3] : full.shape[2] * full.shape[3];
  const size_t row_bytes = static_cast<size_t>(inner) * element_size(full.dtype);
  const int64_t n = full.shape[axis];
  for (int64_t a = 0; a < outer; ++a) {
    int64_t local = 0;
    for (int r = 0; r < 2; ++r) {
      const size_t bytes = static_cast<size_t>(rows.count[r]) * row_bytes;
      if (bytes != 0)
        piece(static_cast<size_t>(a * n + rows.first[r]) * row_bytes,
              static_cast<size_t>(a * rows.total() + local) * row_bytes, bytes);
      local += rows.count[r];
    }
  }
}

// One rank's copy of the rows of a full contiguous tensor. The row axis is 1 ([B, N, H, D])
// or 2 (LSE, [B, H, N, 1]); the copy has the same layout with N replaced by the row count.
// On a device the host copy stages the rows: copied in, then uploaded; downloaded, then out.
class Shard {
 public:
  Shard(const dilattn_tensor& full, const Rows& rows, bool lse, bool copy_in,
        ShardPlace place = ShardPlace::host)
      : full_(full), rows_(rows), axis_(lse ? 2 : 1) {
    // The command checks the operands' row counts first (cmd_attention.cpp); this keeps a copy
    // from ever reading or writing outside `full`.
    for (int r = 0; r < 2; ++r)
      if (rows.first[r] < 0 || rows.count[r] < 0 || rows.first[r] > full.shape[axis_] ||
          rows.count[r] > full.shape[axis_] - rows.first[r])
        throw CliError(kExitRuntime, "internal error: a ring shard's rows [" +
                                         std::to_string(rows.first[r]) + ", +" +
                                         std::to_string(rows.count[r]) + ") exceed the tensor's " +
                                         std::to_string(full.shape[axis_]));
    view_ = full;
    view_.shape[axis_] = rows.total();
    view_ = dilattn_tensor_contiguous(nullptr, full.dtype, view_.shape[0], view_.shape[1],
                                      view_.shape[2], view_.shape[3]);
    const int64_t per_row = lse ? full.shape[0] * full.shape[1] * full.shape[3]
                                : full.shape[0] * full.shape[2] * full.shape[3];
    bytes_.resize(static_cast<size_t>(rows.total() * per_row) * element_size(full.dtype) + 16);
    view_.data = bytes_.data();  // never NULL, even for a rank without rows
    if (copy_in) copy(true);
    if (place == ShardPlace::host) return;
    device_ = std::make_unique<DeviceBuffer>(
        size(), place == ShardPlace::gpu ? DeviceBuffer::Kind::gpu : DeviceBuffer::Kind::emulated);
    if (copy_in) device_->upload(bytes_.data());
    view_.data = device_->get();
    if (place == ShardPlace::gpu) {
      view_.device = DILATTN_DEVICE_CUDA;
      view_.device_index = 0;
    }
  }
  const dilattn_tensor* view() const { return &view_; }
  void copy_out() {
    if (device_) device_->download(bytes_.data());
    copy(false);
  }
  // The shard's own host bytes (its rows only), e.g. to send to the rank that owns them.
  unsigned char* data() { return bytes_.data(); }
  size_t size() const { return bytes_.size() - 16; }

 private:
  void copy(bool in) {
    auto* full = static_cast<unsigned char*>(full_.data);
    for_each_piece(full_, rows_, axis_ == 2, [&](size_t full_at, size_t shard_at, size_t bytes) {
      if (in) std::memcpy(bytes_.data() + shard_at, full + full_at, bytes);
      else std::memcpy(full + full_at, bytes_.data() + shard_at, bytes);
    });
  }
  dilattn_tensor full_, view_;
  Rows rows_;
  int axis_;
  std::vector<unsigned char> bytes_;
  std::unique_ptr<DeviceBuffer> device_;  // the rows on the plan's device, if not on the host
};

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_SHARD_COPY_H
