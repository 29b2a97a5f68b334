// simt_tma.h - tensor maps (cuTensorMapEncodeTiled) and tensor-memory-access tile copies (PTX
// cp.async.bulk.tensor, global -> shared with mbarrier completion, shared -> global with bulk
// async-groups) for the emulator.
//
// Part of the SIMT emulator (emu/README.md). cuda/tensor_map.h calls the encoder where the CUDA
// build asks the driver, and cuda/tma_copy.cuh calls the copies where nvcc emits the PTX. It
// follows the CUDA Driver API, section "Tensor Map Object Managment" (cuTensorMapEncodeTiled),
// and the PTX ISA, sections "Tensors" (Bounding Box, Traversal-Stride, Out of Boundary Access,
// Swizzling Modes), "Restriction on Tensor Copy instructions" and "cp.async.bulk.tensor".
//
//   encode    checks every requirement the driver documents (rank 1..5, globalAddress 16-byte
//             aligned, globalDim 1..2^32, globalStrides multiples of 16 below 2^40, boxDim
//             1..256 with boxDim[0] * element size a multiple of 16 bytes, elementStrides 1..8,
//             the inner box bytes within the swizzle span, NaN fill only for float types) and
//             returns CUDA_ERROR_INVALID_VALUE with a message (simt::last_tensor_map_error())
//             otherwise. What the emulator does not model is refused the same way, saying
//             "is not emulated": interleaved layouts, the 128B_ATOM swizzles, the packed 4- and
//             6-bit types, the TF32/FTZ types (the PTX ISA does not say what a copy does to
//             their bits), elementStrides[0] != 1 (the driver ignores it without interleave,
//             so a kernel that sets it expects a stride it does not get), and a swizzled box
//             whose inner bytes are below the swizzle span (its shared layout is not
//             documented). The 128 opaque bytes hold the emulator's own encoding: a magic
//             number and a checksum, so a map not made here, or changed since, is caught.
//   load      (one thread issues it) checks the map, that its rank is the instruction's, that
//             the destination lies in the block's dynamic shared memory, 128-byte aligned and,
//             when swizzled, aligned to the pattern's repeat (256/512/1024 bytes of window
//             address: conservative, newer PTX ISA versions allow an offset from it), and that
//             the mbarrier is initialised. It reads the box now (coordinates are signed; along
//             dimension i it takes ceil(boxDim[i] / elementStrides[i]) elements, elementStrides[i]
//             apart; elements outside the tensor are 0, or the OOB NaN), fills the destination
//             with 0xFF (NaN as f32, f16 and bf16), and at the end of the round after this one
//             (the scheduler's round_end; in the descending order only once a thread waits
//             for the mbarrier, or nothing else can move) writes the box,
//             dimension 0 fastest and densely packed, each 16-byte chunk at window address a
//             moved to a ^ (((a >> 7) & m) << 4) (m = 1, 3, 7 for 32B, 64B, 128B: CuTe's
//             Swizzle<1,4,3>, <2,4,3>, <3,4,3> on byte addresses), then completes the whole
//             box's bytes (the fill included) on the mbarrier. A read before the wait sees
//             poison in every thread order (in the descending one, whatever other waits and
//             barriers stand between); expect_tx with other than the box's bytes leaves
//             the phase incomplete, reported as a deadlock where the GPU would hang or race.
//   store     checks the source as a load checks its destination, and the coordinates are
//             non-negative (the PTX ISA's restriction for .global.shared::cta); the shared bytes
//             are read, and the in-bounds elements written to global memory, only at the
//             cp.async.bulk.wait_group(.read) that covers the store's group, so a kernel that
//             reuses the source before that wait stores the new bytes. A thread that returns
//             with stores it never waited for fails the launch.
// Checked by tests/emu/test_emu_tma.cpp.
#ifndef DILATTN_SIMT_TMA_H
#define DILATTN_SIMT_TMA_H

#include <cuda.h>  // CUtensorMap and the encoder's enums (types only: nothing is linked)

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "simt_mbarrier.h"
#include "simt_scheduler.h"

namespace simt {
namespace detail {

constexpr int kTensorMaxRank = 5;
constexpr uint32_t kTensorMapMagic = 0x50414D54u;  // "TMAP"

// What cuTensorMapEncodeTiled stores in the map's opaque bytes. Only the emulator reads it.
struct TensorMapEncoding {
  uint64_t global_address;
  uint64_t global_dim[kTensorMaxRank];
  uint64_t global_stride[kTensorMaxRank - 1];  // bytes between indices of dimension i + 1
  uint16_t box_dim[kTensorMaxRank];
  uint8_t element_stride[kTensorMaxRank];
  uint8_t rank;
  uint8_t element_bytes;
  uint8_t data_type;
  uint8_t swizzle;
  uint8_t nan_fill;
  uint32_t magic;
  uint32_t checksum;  // of every byte before it
};
static_assert(sizeof(TensorMapEncoding) <= sizeof(CUtensorMap), "the encoding must fit the map");

inline uint32_t fnv1a(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}
inline uint32_t encoding_checksum(const TensorMapEncoding& e) {
  return fnv1a(&e, offsetof(TensorMapEncoding, checksum));
}

inline std::string& tensor_map_error_text() {
  thread_local std::string text;
  return text;
}

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline CUresult reject_tensor_map(const char* format, ...) {
  char buf[320];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  tensor_map_error_text() = std::string("cuTensorMapEncodeTiled: ") + buf;
  return CUDA_ERROR_INVALID_VALUE;
}

// Bytes per element of the types the emulator copies; 0 for the others.
inline int tensor_element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

inline bool tensor_type_is_float(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return true;
    default:
      return false;
  }
}

// The span in bytes of a swizzle mode the emulator models (0: none), -1 for the others.
inline int swizzle_span_bytes(int swizzle) {
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_NONE:
      return 0;
    case CU_TENSOR_MAP_SWIZZLE_32B:
      return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B:
      return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B:
      return 128;
    default:
      return -1;
  }
}

// The window address a 16-byte chunk at window address `a` lands at: bits 4.. of the address
// XORed with bits 7.., as many as the span has 16-byte chunks (log2(span / 16)). The pattern
// repeats every 8 spans (256, 512, 1024 bytes), which is why the destination is aligned to that.
inline uint64_t swizzled_address(uint64_t a, int span) {
  const uint64_t mask = span == 32 ? 1 : span == 64 ? 3 : span == 128 ? 7 : 0;
  return a ^ (((a >> 7) & mask) << 4);
}

// The OOB-NaN of each float type. The PTX ISA ("Out of Boundary Access") calls it "a special
// NaN" without its bits; the emulator uses the quiet NaN with every other bit set (the GPU's
// canonical f32 NaN), which differs from the 0xFF poison of a copy not yet landed.
inline void write_oob_nan(unsigned char* dst, int element_bytes) {
  // f16 and bf16 alike: 0x7FFF sets every exponent and mantissa bit of either.
  const uint64_t pattern = element_bytes == 8   ? 0x7FFFFFFFFFFFFFFFull
                           : element_bytes == 4 ? 0x7FFFFFFFull
                                                : 0x7FFFull;
  std::memcpy(dst, &pattern, static_cast<size_t>(element_bytes));  // little-endian low bytes
}

}  // namespace detail

// The reason the calling OS thread's last cuTensorMapEncodeTiled failed ("" after a success).
inline const char* last_tensor_map_error() { return detail::tensor_map_error_text().c_str(); }

// cuTensorMapEncodeTiled with the driver's signature: validates as the driver API documents and
// stores the emulator's encoding. Returns CUDA_ERROR_INVALID_VALUE (message in
// last_tensor_map_error()) for what the driver rejects and for what the emulator does not model.
inline CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                       cuuint32_t tensorRank, void* globalAddress,
                                       const cuuint64_t* globalDim,
                                       const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                       const cuuint32_t* elementStrides,
                                       CUtensorMapInterleave interleave,
                                       CUtensorMapSwizzle swizzle,
                                       CUtensorMapL2promotion l2Promotion,
                                       CUtensorMapFloatOOBfill oobFill) {
  using detail::reject_tensor_map;
  detail::tensor_map_error_text().clear();
  if (tensorMap == nullptr) return reject_tensor_map("tensorMap is null");
  if (reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0)
    return reject_tensor_map("tensorMap %p is not 64-byte aligned", static_cast<void*>(tensorMap));
  const int element_bytes = detail::tensor_element_bytes(tensorDataType);
  if (element_bytes == 0) {
    return reject_tensor_map("tensorDataType %d is not emulated (only the integer, f16, bf16, "
                             "f32 and f64 types: a copy's effect on TF32, FTZ and packed types "
                             "is not documented)",
                             static_cast<int>(tensorDataType));
  }
  if (tensorRank < 1 || tensorRank > detail::kTensorMaxRank)
    return reject_tensor_map("tensorRank %u is outside 1..5", tensorRank);
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) {
    return reject_tensor_map("interleave %d is not emulated (only CU_TENSOR_MAP_INTERLEAVE_NONE)",
                             static_cast<int>(interleave));
  }
  if (globalAddress == nullptr) return reject_tensor_map("globalAddress is null");
  if (reinterpret_cast<uintptr_t>(globalAddress) % 16 != 0)
    return reject_tensor_map("globalAddress %p is not 16-byte aligned", globalAddress);
  if (globalDim == nullptr || boxDim == nullptr || elementStrides == nullptr ||
      (tensorRank > 1 && globalStrides == nullptr))
    return reject_tensor_map("globalDim, globalStrides, boxDim or elementStrides is null");
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    if (globalDim[i] == 0 || globalDim[i] > (cuuint64_t(1) << 32)) {
      return reject_tensor_map("globalDim[%u] = %llu is outside 1..2^32", i,
                               static_cast<unsigned long long>(globalDim[i]));
    }
  }
  for (cuuint32_t i = 0; i + 1 < tensorRank; ++i) {
    if (globalStrides[i] % 16 != 0) {
      return reject_tensor_map("globalStrides[%u] = %llu is not a multiple of 16", i,
                               static_cast<unsigned long long>(globalStrides[i]));
    }
    if (globalStrides[i] >= (cuuint64_t(1) << 40)) {
      return reject_tensor_map("globalStrides[%u] = %llu is not below 2^40", i,
                               static_cast<unsigned long long>(globalStrides[i]));
    }
  }
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    if (boxDim[i] == 0 || boxDim[i] > 256)
      return reject_tensor_map("boxDim[%u] = %u is outside 1..256", i, boxDim[i]);
  }
  const unsigned inner_bytes = boxDim[0] * static_cast<unsigned>(element_bytes);
  if (inner_bytes % 16 != 0) {
    return reject_tensor_map("boxDim[0] * element size = %u bytes is not a multiple of 16",
                             inner_bytes);
  }
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    if (elementStrides[i] == 0 || elementStrides[i] > 8)
      return reject_tensor_map("elementStrides[%u] = %u is outside 1..8", i, elementStrides[i]);
  }
  if (elementStrides[0] != 1) {
    return reject_tensor_map("elementStrides[0] = %u is not emulated: without interleave the "
                             "driver ignores it (dimension 0 has no traversal stride), so a "
                             "kernel setting it would not get the stride it asks for",
                             elementStrides[0]);
  }
  const int span = detail::swizzle_span_bytes(swizzle);
  if (span < 0) {
    return reject_tensor_map("swizzle %d is not emulated (only NONE, 32B, 64B and 128B)",
                             static_cast<int>(swizzle));
  }
  if (span > 0 && inner_bytes > static_cast<unsigned>(span)) {
    return reject_tensor_map("boxDim[0] * element size = %u bytes exceeds the %d-byte span of "
                             "the swizzle mode",
                             inner_bytes, span);
  }
  if (span > 0 && inner_bytes != static_cast<unsigned>(span)) {
    return reject_tensor_map("a swizzled box whose inner %u bytes are below the %d-byte span is "
                             "not emulated (its shared-memory layout is not documented)",
                             inner_bytes, span);
  }
  if (static_cast<int>(l2Promotion) < CU_TENSOR_MAP_L2_PROMOTION_NONE ||
      static_cast<int>(l2Promotion) > CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
    return reject_tensor_map("l2Promotion %d is not a CUtensorMapL2promotion",
                             static_cast<int>(l2Promotion));
  }
  if (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
      oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    return reject_tensor_map("oobFill %d is not a CUtensorMapFloatOOBfill",
                             static_cast<int>(oobFill));
  }
  if (oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA &&
      !detail::tensor_type_is_float(tensorDataType)) {
    return reject_tensor_map("CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA needs a "
                             "floating-point tensorDataType, not %d",
                             static_cast<int>(tensorDataType));
  }

  detail::TensorMapEncoding e;
  std::memset(&e, 0, sizeof e);  // the checksum covers the padding too
  e.global_address = reinterpret_cast<uintptr_t>(globalAddress);
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    e.global_dim[i] = globalDim[i];
    e.box_dim[i] = static_cast<uint16_t>(boxDim[i]);
    e.element_stride[i] = static_cast<uint8_t>(elementStrides[i]);
    if (i + 1 < tensorRank) e.global_stride[i] = globalStrides[i];
  }
  e.rank = static_cast<uint8_t>(tensorRank);
  e.element_bytes = static_cast<uint8_t>(element_bytes);
  e.data_type = static_cast<uint8_t>(tensorDataType);
  e.swizzle = static_cast<uint8_t>(span);
  e.nan_fill = oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  e.magic = detail::kTensorMapMagic;
  e.checksum = detail::encoding_checksum(e);
  std::memset(tensorMap, 0, sizeof *tensorMap);
  std::memcpy(tensorMap, &e, sizeof e);
  return CUDA_SUCCESS;
}

namespace detail {

// Fails the launch with `text` from the calling thread. The message goes into the block's error
// in a function that returns, and fail_thread gets that string: the thread never returns from
// fail_thread, so a temporary std::string made for it would never be freed.
[[gnu::noinline]] inline void set_tensor_copy_error(const char* text) {
  Fiber& f = current_fiber();
  if (f.block->error.empty()) f.block->error = thread_name(*f.block, f.linear) + ": " + text;
}
[[noreturn]] inline void fail_tensor_copy(const char* text) {
  set_tensor_copy_error(text);
  fail_thread(current_fiber().block->error);
}

// The map a copy names, checked. `what` is the instruction, for messages; fails the thread.
[[gnu::noinline]] inline TensorMapEncoding thread_tensor_map(const void* tensor_map, int rank,
                                                             const char* what) {
  char buf[256];
  if (tensor_map == nullptr || reinterpret_cast<uintptr_t>(tensor_map) % 64 != 0) {
    std::snprintf(buf, sizeof buf, "%s: tensor map address %p is not 64-byte aligned", what,
                  tensor_map);
    fail_tensor_copy(buf);
  }
  if (in_shared(*current_fiber().block, tensor_map, sizeof(CUtensorMap))) {
    std::snprintf(buf, sizeof buf, "%s: the tensor map is in shared memory (the PTX ISA wants it "
                  "in .param, .const or .global space)", what);
    fail_tensor_copy(buf);
  }
  TensorMapEncoding e;
  std::memcpy(&e, tensor_map, sizeof e);
  if (e.magic != kTensorMapMagic) {
    std::snprintf(buf, sizeof buf,
                  "%s: %p is not a tensor map made by cuTensorMapEncodeTiled", what, tensor_map);
    fail_tensor_copy(buf);
  }
  if (e.checksum != encoding_checksum(e)) {
    std::snprintf(buf, sizeof buf,
                  "%s: the tensor map at %p was changed after cuTensorMapEncodeTiled made it",
                  what, tensor_map);
    fail_tensor_copy(buf);
  }
  if (e.rank != rank) {
    std::snprintf(buf, sizeof buf, "%s: the tensor map has rank %d, the instruction %d", what,
                  static_cast<int>(e.rank), rank);
    fail_tensor_copy(buf);
  }
  return e;
}

// Elements a box takes along each dimension (ceil(boxDim / elementStrides)), and its bytes.
inline void box_extent(const TensorMapEncoding& e, uint32_t count[kTensorMaxRank],
                       size_t* bytes) {
  size_t elements = 1;
  for (int i = 0; i < kTensorMaxRank; ++i) {
    count[i] = i < e.rank ? (e.box_dim[i] + e.element_stride[i] - 1u) / e.element_stride[i] : 1u;
    elements *= count[i];
  }
  *bytes = elements * e.element_bytes;
}

// Checks a copy's shared-memory side (the load's destination, the store's source): in the
// block's dynamic shared memory, 128-byte aligned, and aligned to the swizzle pattern's repeat.
// Returns its window address; fails the thread otherwise.
[[gnu::noinline]] inline uint32_t tensor_shared_side(const void* p, size_t bytes,
                                                     const TensorMapEncoding& e,
                                                     const char* what) {
  const uint32_t address = shared_address_of(p, bytes, what);
  char buf[256];
  if (address % 128 != 0) {
    std::snprintf(buf, sizeof buf, "%s: shared address 0x%x is not 128-byte aligned", what,
                  address);
    fail_tensor_copy(buf);
  }
  const uint32_t repeat = 8u * e.swizzle;
  if (repeat != 0 && address % repeat != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: shared address 0x%x is not aligned to %u bytes, where the %dB swizzle "
                  "pattern repeats",
                  what, address, repeat, static_cast<int>(e.swizzle));
    fail_tensor_copy(buf);
  }
  return address;
}

// Calls visit(offset, source, first, last) for every row of the box (dimension 0 varies
// along a row; `offset` is the row's byte offset in the packed box): the row's elements
// [first, last) are inside the tensor, element `first` at `source`; the others, or all when
// `source` is null, are outside it.
template <class Visit>
void for_each_box_row(const TensorMapEncoding& e, const int32_t* coords,
                      const uint32_t count[kTensorMaxRank], Visit&& visit) {
  const size_t row_bytes = static_cast<size_t>(count[0]) * e.element_bytes;
  const int64_t start0 = coords[0];
  const int64_t first = start0 < 0 ? -start0 : 0;
  int64_t last = static_cast<int64_t>(e.global_dim[0]) - start0;
  if (last > static_cast<int64_t>(count[0])) last = count[0];
  size_t offset = 0;
  uint32_t k[kTensorMaxRank] = {0, 0, 0, 0, 0};
  for (;;) {
    bool inside = first < last;
    uint64_t source = e.global_address + static_cast<uint64_t>(start0 + first) * e.element_bytes;
    for (int i = 1; i < e.rank && inside; ++i) {
      const int64_t c = static_cast<int64_t>(coords[i]) +
                        static_cast<int64_t>(k[i]) * e.element_stride[i];
      inside = c >= 0 && c < static_cast<int64_t>(e.global_dim[i]);
      source += static_cast<uint64_t>(c) * e.global_stride[i - 1];
    }
    visit(offset, inside ? reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(source))
                         : nullptr,
          static_cast<size_t>(first), inside ? static_cast<size_t>(last) : size_t(0));
    offset += row_bytes;
    int i = 1;
    for (; i < kTensorMaxRank; ++i) {
      if (++k[i] < count[i]) break;
      k[i] = 0;
    }
    if (i == kTensorMaxRank) return;
  }
}

// A tile store a thread issued: the bytes are read from shared memory and written at the wait
// that covers its group (-1 until committed).
struct PendingTensorStore {
  TensorMapEncoding map;
  int32_t coords[kTensorMaxRank];
  uint32_t source_address;
  int group;
};

struct TensorStoreState : BlockExtension {
  std::vector<std::vector<PendingTensorStore>> stores;  // per thread
  std::vector<int> committed_groups;                     // per thread
  void ensure(size_t threads) {
    if (stores.size() < threads) {
      stores.resize(threads);
      committed_groups.resize(threads, 0);
    }
  }
  void thread_exit(BlockRun& b, const Fiber& f) override {
    if (f.linear >= stores.size() || stores[f.linear].empty()) return;
    b.error = thread_name(b, f.linear) + ": returned with " +
              std::to_string(stores[f.linear].size()) +
              " cp.async.bulk.tensor stores never waited for (missing "
              "cp.async.bulk.commit_group or cp.async.bulk.wait_group)";
  }
};

// Writes a store's in-bounds elements from shared memory (read through the swizzle) to global.
inline void complete_tensor_store(BlockRun& b, const PendingTensorStore& s) {
  uint32_t count[kTensorMaxRank];
  size_t bytes = 0;
  box_extent(s.map, count, &bytes);
  std::vector<unsigned char> box(bytes);
  const int span = s.map.swizzle;
  for (size_t o = 0; o < bytes; o += 16) {
    const unsigned char* chunk =
        shared_window_pointer(b, swizzled_address(s.source_address + o, span), 16);
    if (chunk != nullptr) std::memcpy(&box[o], chunk, 16);  // checked in range at the issue
  }
  const size_t element = s.map.element_bytes;
  for_each_box_row(s.map, s.coords, count,
                   [&](size_t offset, unsigned char* row, size_t first, size_t last) {
                     if (row == nullptr) return;  // out-of-bounds elements are not written
                     std::memcpy(row, &box[offset + first * element], (last - first) * element);
                   });
}

}  // namespace detail

// cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// [dst_shared], [tensor_map, {coords}], [mbarrier], issued by the calling thread.
inline void tma_load(void* dst_shared, const void* tensor_map, const int32_t* coords, int rank,
                     void* mbarrier) {
  using namespace detail;
  constexpr const char* what = "cp.async.bulk.tensor (load)";
  BlockRun& b = *current_fiber().block;
  const TensorMapEncoding e = thread_tensor_map(tensor_map, rank, what);
  uint32_t count[kTensorMaxRank];
  size_t bytes = 0;
  box_extent(e, count, &bytes);
  const uint32_t dst_address = tensor_shared_side(dst_shared, bytes, e, what);
  const uint32_t bar_address = thread_mbarrier(mbarrier, what).address;

  // The box as it will land, read now: the GPU reads global memory at some point before the
  // completion, and a kernel must not write the source meanwhile.
  std::vector<unsigned char> box(bytes);
  const size_t element = e.element_bytes;
  for_each_box_row(e, coords, count,
                   [&](size_t offset, const unsigned char* row, size_t first, size_t last) {
                     unsigned char* out = &box[offset];
                     if (row != nullptr)
                       std::memcpy(out + first * element, row, (last - first) * element);
                     for (size_t x = 0; x < count[0]; ++x) {
                       if (row != nullptr && x >= first && x < last) continue;
                       if (e.nan_fill)
                         write_oob_nan(out + x * element, e.element_bytes);
                       else
                         std::memset(out + x * element, 0, element);
                     }
                   });
  std::memset(dst_shared, 0xFF, bytes);
  const int span = e.swizzle;
  BlockRun::AsyncWork work;
  work.mbarrier = bar_address;
  work.land = [box = std::move(box), dst_address, bar_address, span](BlockRun& run) {
    for (size_t o = 0; o < box.size(); o += 16) {
      unsigned char* chunk =
          shared_window_pointer(run, swizzled_address(dst_address + o, span), 16);
      if (chunk == nullptr) {  // unreachable: the issue checked the aligned range
        mbarrier_set_error(run, "cp.async.bulk.tensor (load): destination left shared memory");
        return;
      }
      std::memcpy(chunk, &box[o], 16);
    }
    mbarrier_add_tx(run, bar_address, -static_cast<int64_t>(box.size()),
                    "cp.async.bulk.tensor (load) complete_tx");
  };
  b.round_end.push_back(std::move(work));
}

// cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [tensor_map, {coords}],
// [src_shared], issued by the calling thread; completed by tma_store_wait.
inline void tma_store(const void* tensor_map, const int32_t* coords, int rank,
                      const void* src_shared) {
  using namespace detail;
  constexpr const char* what = "cp.async.bulk.tensor (store)";
  Fiber& f = current_fiber();
  BlockRun& b = *f.block;
  PendingTensorStore s;
  s.map = thread_tensor_map(tensor_map, rank, what);
  uint32_t count[kTensorMaxRank];
  size_t bytes = 0;
  box_extent(s.map, count, &bytes);
  s.source_address = tensor_shared_side(src_shared, bytes, s.map, what);
  for (int i = 0; i < kTensorMaxRank; ++i) s.coords[i] = i < rank ? coords[i] : 0;
  for (int i = 0; i < rank; ++i) {
    if (coords[i] < 0) {
      char buf[192];
      std::snprintf(buf, sizeof buf,
                    "%s: coordinate %d of the box is %d: a store's box must start inside the "
                    "tensor (non-negative coordinates)",
                    what, i, coords[i]);
      fail_tensor_copy(buf);
    }
  }
  s.group = -1;
  TensorStoreState& state = block_extension<TensorStoreState>(b);
  state.ensure(b.fibers.size());
  state.stores[f.linear].push_back(s);
}

// cp.async.bulk.commit_group: the calling thread's uncommitted stores become a group.
inline void tma_store_commit() {
  detail::Fiber& f = detail::current_fiber();
  detail::TensorStoreState& state = detail::block_extension<detail::TensorStoreState>(*f.block);
  state.ensure(f.block->fibers.size());
  for (detail::PendingTensorStore& s : state.stores[f.linear])
    if (s.group < 0) s.group = state.committed_groups[f.linear];
  ++state.committed_groups[f.linear];
}

// cp.async.bulk.wait_group.read n and cp.async.bulk.wait_group n (the emulator completes both
// the source reads and the global writes here): every committed group but the newest n.
inline void tma_store_wait(int pending) {
  detail::Fiber& f = detail::current_fiber();
  detail::BlockRun& b = *f.block;
  detail::TensorStoreState& state = detail::block_extension<detail::TensorStoreState>(b);
  state.ensure(b.fibers.size());
  std::vector<detail::PendingTensorStore>& mine = state.stores[f.linear];
  const int complete_below = state.committed_groups[f.linear] - pending;
  size_t kept = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].group >= 0 && mine[i].group < complete_below)
      detail::complete_tensor_store(b, mine[i]);
    else
      mine[kept++] = mine[i];
  }
  mine.resize(kept);
}

}  // namespace simt

#endif  // DILATTN_SIMT_TMA_H
