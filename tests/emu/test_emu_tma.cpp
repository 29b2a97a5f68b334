// test_emu_tma.cpp - tensor maps and TMA tile copies (cuda/tensor_map.h, cuda/tma_copy.cuh) in
// the emulator (emu/simt_tma.h): the box's bytes are visible only after the mbarrier phase
// their complete_tx finishes, laid out and swizzled as the PTX ISA defines.
//
// A load kernel (64 threads, 2 blocks): thread 0 initialises an mbarrier, __syncthreads, thread
// 0 names the box's bytes with arrive.expect_tx and issues the copy into a tile it aligned to
// 1024 bytes of shared window address, every thread waits for phase 0 and copies the tile's raw
// bytes out. The host builds the box from the global tensor (its own odometer walk, dimension 0
// fastest) and compares bitwise. Properties:
//   (1) boxes inside the tensor: 2D f32 (with a typed spot check), 3D f16, 4D f64, 5D u16;
//   (2) boxes partly outside (negative coordinates too): zero fill (bf16, 1D u8 with a
//       256-element box), OOB-NaN fill (f32: every outside element is NaN);
//   (3) elementStrides > 1: ceil(boxDim / elementStrides) elements, elementStrides apart;
//   (4) each swizzle (32B, 64B, 128B): the raw tile read through the inverse swizzle is the box,
//       and chunks did move (spot checks from the documented pattern);
//   (5) two phases of one mbarrier (parity 0, then 1), the second copy in flight while the
//       first tile is read (double buffering);
//   (6) stores: the box written back to global memory at the wait (partly outside the tensor,
//       swizzled; 3D plain), the outside elements skipped;
// every positive case bitwise identical in three thread orders. Defects, each shown by a failed
// launch whose message names it unless said otherwise: (7) expect_tx of 16 bytes fewer / more
// than the box: the phase never completes, reported as a deadlock (on the GPU fewer would let
// the phase complete before the last bytes land, more would hang); (8) reading the tile before
// the wait: NaN in every order (the launch succeeds); (9) a destination not 128-byte aligned,
// not aligned to the swizzle repeat, or in global memory; (10) a map not from the encoder, a map
// changed after encoding, a map of another rank, no mbarrier; (11) the encoder's rejections
// (CUDA_ERROR_INVALID_VALUE and the argument named); (12) stores: a negative coordinate, a
// thread returning with stores not waited for, and a source overwritten before the wait (the
// launch succeeds; the new bytes land, so the race shows in the output).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "tensor_map.h"
#include "tma_copy.cuh"

namespace {

using namespace dilattn::cuda;

constexpr int kThreads = 64;
constexpr int kBlocks = 2;

enum Mode : int {
  kLoad,
  kReadBeforeWait,
  kReadAfterOtherWait,
  kTwoPhases,
  kDstGlobal,
  kNoBarrier,
  kStore,
  kStoreReuseBeforeWait,
  kStoreNoWait,
};

// What a launch does; copied into the kernel by value.
struct CopyCase {
  int rank = 2;
  int32_t coords[5] = {0, 0, 0, 0, 0};
  int32_t coords2[5] = {0, 0, 0, 0, 0};  // the second phase's box (kTwoPhases)
  int32_t block_step = 0;                // block b adds b * block_step to coordinate rank - 1
  uint32_t box_bytes = 0;
  uint32_t expect_bytes = 0;  // what arrive.expect_tx names: the box's bytes unless a test lies
  int mode = kLoad;
  int dst_offset = 0;         // bytes past the 1024-aligned tile
  int load_rank = 0;          // the instruction's rank when a test lies about it (0: rank)
};

__device__ uint32_t round_up_1024(uint32_t bytes) { return (bytes + 1023u) / 1024u * 1024u; }

// The first address 1024-aligned in the shared window at least 16 bytes into the dynamic shared
// memory (the mbarrier takes the first 8): a swizzled box needs its pattern's repeat, and
// dynamic shared memory is promised 16 bytes (the emulator's starts 128 past a multiple of 1024).
__device__ unsigned char* aligned_tile(unsigned char* smem) {
  const uint32_t a = shared_address(smem + 16);
  return smem + 16 + (1024u - a % 1024u) % 1024u;
}

__device__ void issue_load(void* dst, const CUtensorMap* map, const int32_t* c, int rank,
                           uint64_t* bar) {
  switch (rank) {
    case 1: tma_load_1d(dst, map, c[0], bar); break;
    case 2: tma_load_2d(dst, map, c[0], c[1], bar); break;
    case 3: tma_load_3d(dst, map, c[0], c[1], c[2], bar); break;
    case 4: tma_load_4d(dst, map, c[0], c[1], c[2], c[3], bar); break;
    default: tma_load_5d(dst, map, c[0], c[1], c[2], c[3], c[4], bar); break;
  }
}

__device__ void issue_store(const CUtensorMap* map, const int32_t* c, int rank,
                            const void* src) {
  switch (rank) {
    case 1: tma_store_1d(map, c[0], src); break;
    case 2: tma_store_2d(map, c[0], c[1], src); break;
    case 3: tma_store_3d(map, c[0], c[1], c[2], src); break;
    case 4: tma_store_4d(map, c[0], c[1], c[2], c[3], src); break;
    default: tma_store_5d(map, c[0], c[1], c[2], c[3], c[4], src); break;
  }
}

// out: per block, the tile's raw bytes after the wait (before it in kReadBeforeWait; in
// kReadAfterOtherWait after two block barriers and a second mbarrier's phase, before the copy's
// own), then in kTwoPhases the second tile's.
__global__ void load_kernel(const __grid_constant__ CUtensorMap map, CopyCase c,
                            unsigned char* out, unsigned char* global_scratch) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  unsigned char* tile = aligned_tile(smem);
  unsigned char* tile2 = tile + round_up_1024(c.box_bytes);
  const int tid = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  unsigned char* my_out = out + blockIdx.x * 2u * c.box_bytes;
  int32_t coords[5], coords2[5];
  for (int i = 0; i < 5; ++i) {
    const int32_t step = i == c.rank - 1 ? static_cast<int32_t>(blockIdx.x) * c.block_step : 0;
    coords[i] = c.coords[i] + step;
    coords2[i] = c.coords2[i] + step;
  }
  const int load_rank = c.load_rank != 0 ? c.load_rank : c.rank;
  uint64_t* other = bar + 1;  // kReadAfterOtherWait's mbarrier, no copy on it
  if (tid == 0 && c.mode != kNoBarrier) {
    simt::mbarrier_init(bar, 1);
    if (c.mode == kReadAfterOtherWait) simt::mbarrier_init(other, 1);
  }
  __syncthreads();
  if (tid == 0) {
    if (c.mode != kNoBarrier) simt::mbarrier_arrive_expect_tx(bar, c.expect_bytes);
    unsigned char* dst = c.mode == kDstGlobal ? global_scratch : tile + c.dst_offset;
    issue_load(dst, &map, coords, load_rank, bar);
  }
  if (c.mode == kReadBeforeWait)
    for (uint32_t i = tid; i < c.box_bytes; i += n) my_out[i] = tile[i];
  if (c.mode == kReadAfterOtherWait) {
    __syncthreads();
    __syncthreads();
    if (tid == 0) simt::mbarrier_arrive(other);
    simt::mbarrier_wait_parity(other, 0);
    for (uint32_t i = tid; i < c.box_bytes; i += n) my_out[i] = tile[i];
    __syncthreads();  // every thread read before any waits for the copy
  }
  simt::mbarrier_wait_parity(bar, 0);
  if (c.mode == kTwoPhases) {
    __syncthreads();  // every thread has seen phase 0 complete before phase 1 can
    if (tid == 0) {
      simt::mbarrier_arrive_expect_tx(bar, c.expect_bytes);
      issue_load(tile2, &map, coords2, load_rank, bar);
    }
  }
  if (c.mode != kReadBeforeWait && c.mode != kReadAfterOtherWait)
    for (uint32_t i = tid; i < c.box_bytes; i += n) my_out[i] = tile[i];
  if (c.mode == kTwoPhases) {
    simt::mbarrier_wait_parity(bar, 1);
    for (uint32_t i = tid; i < c.box_bytes; i += n) my_out[c.box_bytes + i] = tile2[i];
  }
}

// Every thread writes its share of `in` (a box's shared-memory image, swizzled already) into
// the tile; thread 0 stores it (block b at coordinate rank - 1 plus b * block_step), commits and
// waits for the reads.
__global__ void store_kernel(const __grid_constant__ CUtensorMap map, CopyCase c,
                             const unsigned char* in) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  unsigned char* tile = aligned_tile(smem);
  const int tid = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  const unsigned char* my_in = in + blockIdx.x * c.box_bytes;
  int32_t coords[5];
  for (int i = 0; i < 5; ++i)
    coords[i] = c.coords[i] + (i == c.rank - 1 ? static_cast<int32_t>(blockIdx.x) * c.block_step
                                               : 0);
  for (uint32_t i = tid; i < c.box_bytes; i += n) tile[i] = my_in[i];
  fence_proxy_async_shared();
  __syncthreads();
  if (tid != 0) return;
  issue_store(&map, coords, c.rank, tile + c.dst_offset);
  tma_store_commit();
  if (c.mode == kStoreReuseBeforeWait)
    for (uint32_t i = 0; i < c.box_bytes; ++i) tile[i] = 0x11;  // a race on the GPU
  if (c.mode != kStoreNoWait) tma_store_wait_read<0>();
}

// ---------------------------------------------------------------- host side

// A global tensor with padded strides and distinct element values (never NaN, never the 0xFF
// poison), its padding bytes 0xEE so that a copy reading them shows.
struct Tensor {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  int rank = 2;
  int element = 4;
  cuuint64_t dims[5] = {1, 1, 1, 1, 1};
  cuuint64_t strides[4] = {0, 0, 0, 0};  // bytes, dimensions 1..rank-1
  emu_test::DeviceVector<unsigned char> bytes;

  size_t offset(const int64_t* c) const {
    size_t o = static_cast<size_t>(c[0]) * element;
    for (int i = 1; i < rank; ++i) o += static_cast<size_t>(c[i]) * strides[i - 1];
    return o;
  }
};

Tensor make_tensor(CUtensorMapDataType type, int element, std::vector<cuuint64_t> dims) {
  Tensor t;
  t.type = type;
  t.element = element;
  t.rank = static_cast<int>(dims.size());
  for (int i = 0; i < t.rank; ++i) t.dims[i] = dims[i];
  if (t.rank > 1) t.strides[0] = (dims[0] * element + 15) / 16 * 16 + 16;
  for (int i = 1; i + 1 < t.rank; ++i) t.strides[i] = t.strides[i - 1] * dims[i] + 32;
  const size_t total =
      t.rank == 1 ? dims[0] * element : t.strides[t.rank - 2] * dims[t.rank - 1];
  t.bytes.assign(total, 0xEE);
  int64_t c[5] = {0, 0, 0, 0, 0};
  for (uint64_t k = 0;; ++k) {
    unsigned char* p = &t.bytes[t.offset(c)];
    if (element == 1) {
      p[0] = static_cast<unsigned char>(k * 7 + 3);
    } else if (element == 2) {  // finite as f16 (below 0x7C00) and as bf16 (below 0x7F80)
      const uint16_t v = static_cast<uint16_t>(k * 13 % 0x7000 + 1);
      std::memcpy(p, &v, 2);
    } else if (element == 4) {
      const float v = static_cast<float>(k) + 0.5f;
      std::memcpy(p, &v, 4);
    } else {
      const double v = static_cast<double>(k) + 0.25;
      std::memcpy(p, &v, 8);
    }
    int i = 0;
    for (; i < t.rank; ++i) {
      if (++c[i] < static_cast<int64_t>(dims[i])) break;
      c[i] = 0;
    }
    if (i == t.rank) break;
  }
  return t;
}

struct MapSpec {
  cuuint32_t box[5] = {1, 1, 1, 1, 1};
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapFloatOOBfill fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

CUresult encode(CUtensorMap* map, Tensor& t, const MapSpec& s) {
  return encode_tensor_map_tiled(map, t.type, static_cast<cuuint32_t>(t.rank), t.bytes.data(),
                                 t.dims, t.strides, s.box, s.element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle,
                                 CU_TENSOR_MAP_L2_PROMOTION_NONE, s.fill);
}

uint32_t box_bytes(const Tensor& t, const MapSpec& s) {
  uint32_t n = static_cast<uint32_t>(t.element);
  for (int i = 0; i < t.rank; ++i)
    n *= (s.box[i] + s.element_strides[i] - 1) / s.element_strides[i];
  return n;
}

// The OOB-NaN the emulator writes (the PTX ISA does not give its bits): the quiet NaN with
// every bit but the sign set.
void write_nan(unsigned char* p, int element) {
  const uint64_t bits = element == 8 ? 0x7FFFFFFFFFFFFFFFull
                                     : element == 4 ? 0x7FFFFFFFull : 0x7FFFull;
  std::memcpy(p, &bits, static_cast<size_t>(element));
}

// The box at `coords` as the PTX ISA defines it, walked element by element: dimension 0
// fastest, ceil(box / elementStrides) elements along each dimension, elementStrides apart;
// outside elements 0 or the OOB-NaN.
std::vector<unsigned char> reference_box(const Tensor& t, const MapSpec& s,
                                         const int32_t* coords) {
  int64_t count[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < t.rank; ++i)
    count[i] = (s.box[i] + s.element_strides[i] - 1) / s.element_strides[i];
  std::vector<unsigned char> box(box_bytes(t, s));
  int64_t k[5] = {0, 0, 0, 0, 0};
  for (size_t o = 0; o < box.size(); o += t.element) {
    int64_t c[5] = {0, 0, 0, 0, 0};
    bool inside = true;
    for (int i = 0; i < t.rank; ++i) {
      c[i] = coords[i] + k[i] * static_cast<int64_t>(s.element_strides[i]);
      inside = inside && c[i] >= 0 && c[i] < static_cast<int64_t>(t.dims[i]);
    }
    if (inside)
      std::memcpy(&box[o], &t.bytes[t.offset(c)], static_cast<size_t>(t.element));
    else if (s.fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
      write_nan(&box[o], t.element);
    else
      std::memset(&box[o], 0, static_cast<size_t>(t.element));
    for (int i = 0; i < 5; ++i) {
      if (++k[i] < count[i]) break;
      k[i] = 0;
    }
  }
  return box;
}

int swizzle_span(CUtensorMapSwizzle s) {
  return s == CU_TENSOR_MAP_SWIZZLE_32B ? 32 : s == CU_TENSOR_MAP_SWIZZLE_64B ? 64
       : s == CU_TENSOR_MAP_SWIZZLE_128B ? 128 : 0;
}

// Where the 16-byte chunk at byte offset o of a tile aligned to the pattern's repeat lands:
// the PTX ISA's swizzling modes (CuTe's Swizzle<1,4,3>, <2,4,3>, <3,4,3>).
size_t swizzled_offset(size_t o, int span) {
  const size_t mask = span == 32 ? 1 : span == 64 ? 3 : span == 128 ? 7 : 0;
  return o ^ (((o >> 7) & mask) << 4);
}

std::vector<unsigned char> unswizzle(const unsigned char* raw, size_t bytes, int span) {
  std::vector<unsigned char> linear(bytes);
  for (size_t o = 0; o < bytes; o += 16)
    std::memcpy(&linear[o], raw + swizzled_offset(o, span), 16);
  return linear;
}

size_t shared_bytes_for(uint32_t box) { return 2048 + 2 * ((box + 1023) / 1024 * 1024); }

struct Launch {
  CUtensorMap map;
  CopyCase c;
  emu_test::DeviceVector<unsigned char> out;
  emu_test::DeviceVector<unsigned char> scratch;
  void run() {
    out.assign(kBlocks * 2 * c.box_bytes, 0x5A);
    scratch.assign(c.box_bytes + 1024, 0);
    DILATTN_LAUNCH(load_kernel, dim3(kBlocks), dim3(kThreads), shared_bytes_for(c.box_bytes),
                   nullptr)(map, c, out.data(), scratch.data());
  }
};

// Runs a load case in three thread orders; checks they agree, that it launched, and that each
// block's first (and in kTwoPhases second) tile, read through the inverse swizzle, is the
// reference box. Returns the ascending order's output.
std::vector<unsigned char> check_load(const char* name, Tensor& t, const MapSpec& s,
                                      CopyCase c) {
  harness::CaseScope scope(name);
  Launch l;
  c.box_bytes = box_bytes(t, s);
  if (c.expect_bytes == 0) c.expect_bytes = c.box_bytes;
  l.c = c;
  CHECK_MSG(encode(&l.map, t, s) == CUDA_SUCCESS, "encode: %s", simt::last_tensor_map_error());
  bool agree = false, launched = true;
  const std::vector<unsigned char> out = emu_test::run_in_orders(
      [&] {
        l.run();
        launched = emu_test::launched_ok(name) && launched;
        return emu_test::as_bytes(l.out);
      },
      &agree);
  CHECK_MSG(launched, "launch failed");
  CHECK_MSG(agree, "thread orders disagree");
  const int span = swizzle_span(s.swizzle);
  for (int b = 0; b < kBlocks; ++b) {
    for (int phase = 0; phase < (c.mode == kTwoPhases ? 2 : 1); ++phase) {
      int32_t coords[5];
      for (int i = 0; i < 5; ++i)
        coords[i] = (phase == 0 ? c.coords[i] : c.coords2[i]) +
                    (i == c.rank - 1 ? b * c.block_step : 0);
      const std::vector<unsigned char> want = reference_box(t, s, coords);
      const std::vector<unsigned char> got =
          unswizzle(&out[(2 * b + phase) * c.box_bytes], c.box_bytes, span);
      size_t bad = 0;
      while (bad < want.size() && got[bad] == want[bad]) ++bad;
      CHECK_MSG(bad == want.size(), "block %d phase %d: byte %zu of %zu is 0x%02x, want 0x%02x",
                b, phase, bad, want.size(), bad < got.size() ? got[bad] : 0,
                bad < want.size() ? want[bad] : 0);
    }
  }
  return out;
}

// A store case: `image(b)` is block b's linear box; the kernel gets it swizzled. Checks the
// global tensor afterwards: the in-bounds box elements from the image, the rest untouched.
void check_store(const char* name, Tensor& t, const MapSpec& s, CopyCase c) {
  harness::CaseScope scope(name);
  c.box_bytes = box_bytes(t, s);
  c.mode = kStore;
  CUtensorMap map;
  CHECK_MSG(encode(&map, t, s) == CUDA_SUCCESS, "encode: %s", simt::last_tensor_map_error());
  const int span = swizzle_span(s.swizzle);
  std::vector<unsigned char> linear(kBlocks * c.box_bytes);
  for (size_t i = 0; i < linear.size(); ++i) linear[i] = static_cast<unsigned char>(i * 5 + 1);
  emu_test::DeviceVector<unsigned char> in(linear.size());
  for (int b = 0; b < kBlocks; ++b)
    for (size_t o = 0; o < c.box_bytes; o += 16)
      std::memcpy(&in[b * c.box_bytes + swizzled_offset(o, span)], &linear[b * c.box_bytes + o],
                  16);
  const emu_test::DeviceVector<unsigned char> before = t.bytes;
  bool agree = false, launched = true;
  emu_test::run_in_orders(
      [&] {
        t.bytes = before;
        DILATTN_LAUNCH(store_kernel, dim3(kBlocks), dim3(kThreads),
                       shared_bytes_for(c.box_bytes), nullptr)(map, c, in.data());
        launched = emu_test::launched_ok(name) && launched;
        return emu_test::as_bytes(t.bytes);
      },
      &agree);
  CHECK_MSG(launched, "launch failed");
  CHECK_MSG(agree, "thread orders disagree");
  // The expected tensor: the sentinel everywhere, then each block's in-bounds elements.
  emu_test::DeviceVector<unsigned char> want = before;
  for (int b = 0; b < kBlocks; ++b) {
    int64_t count[5] = {1, 1, 1, 1, 1};
    for (int i = 0; i < t.rank; ++i) count[i] = s.box[i];
    int64_t k[5] = {0, 0, 0, 0, 0};
    for (size_t o = 0; o < c.box_bytes; o += t.element) {
      int64_t g[5] = {0, 0, 0, 0, 0};
      bool inside = true;
      for (int i = 0; i < t.rank; ++i) {
        g[i] = c.coords[i] + k[i] + (i == t.rank - 1 ? b * c.block_step : 0);
        inside = inside && g[i] < static_cast<int64_t>(t.dims[i]);
      }
      if (inside) std::memcpy(&want[t.offset(g)], &linear[b * c.box_bytes + o], t.element);
      for (int i = 0; i < 5; ++i) {
        if (++k[i] < count[i]) break;
        k[i] = 0;
      }
    }
  }
  size_t bad = 0;
  while (bad < want.size() && want[bad] == t.bytes[bad]) ++bad;
  CHECK_MSG(bad == want.size(), "tensor byte %zu of %zu is 0x%02x, want 0x%02x", bad,
            want.size(), bad < want.size() ? t.bytes[bad] : 0, bad < want.size() ? want[bad] : 0);
}

MapSpec box_of(std::vector<cuuint32_t> box) {
  MapSpec s;
  for (size_t i = 0; i < box.size(); ++i) s.box[i] = box[i];
  return s;
}

CopyCase at(int rank, std::vector<int32_t> coords, int32_t block_step = 0) {
  CopyCase c;
  c.rank = rank;
  for (size_t i = 0; i < coords.size(); ++i) c.coords[i] = coords[i];
  c.block_step = block_step;
  return c;
}

void positive_loads() {
  // (1) inside the tensor.
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {40, 24});
    const MapSpec s = box_of({16, 8});
    const std::vector<unsigned char> out = check_load("2D f32", t, s, at(2, {8, 4}, 8));
    // Typed spot check, independent of the reference walk: block 1, row 3, column 5 is the
    // tensor's row 4 + 8 + 3, column 8 + 5.
    float got = 0, want = 0;
    std::memcpy(&got, &out[2 * 512 + (3 * 16 + 5) * 4], 4);
    std::memcpy(&want, &t.bytes[15 * t.strides[0] + 13 * 4], 4);
    CHECK_MSG(got == want, "2D f32 block 1 (3, 5) = %g, want %g", double(got), double(want));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, {32, 10, 6});
    check_load("3D f16", t, box_of({16, 4, 3}), at(3, {16, 3, 2}, 1));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT64, 8, {6, 5, 3, 2});
    check_load("4D f64", t, box_of({2, 2, 2, 2}), at(4, {4, 3, 1, 0}));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, {16, 3, 3, 2, 3});
    check_load("5D u16", t, box_of({8, 2, 2, 2, 2}), at(5, {8, 1, 1, 0, 0}, 1));
  }
  // (2) partly outside: zero fill, negative coordinates, a 256-element box; OOB-NaN fill.
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, {24, 12});
    // block 0 at (-8, 8): 8 columns left of the tensor, 4 rows below it; block 1 at (-8, -2).
    check_load("2D bf16 zero fill", t, box_of({16, 8}), at(2, {-8, 8}, -10));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, {300});
    check_load("1D u8 256-element box", t, box_of({256}), at(1, {100}, -150));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {20, 9});
    MapSpec s = box_of({8, 4});
    s.fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
    const std::vector<unsigned char> out = check_load("2D f32 NaN fill", t, s, at(2, {16, 7}));
    // Block 0: columns 16..23 of 20, rows 7..10 of 9: NaN exactly where outside.
    for (int r = 0; r < 4; ++r) {
      for (int x = 0; x < 8; ++x) {
        float v = 0;
        std::memcpy(&v, &out[(r * 8 + x) * 4], 4);
        const bool outside = 16 + x >= 20 || 7 + r >= 9;
        CHECK_MSG(std::isnan(v) == outside, "NaN fill (%d, %d) = %g", r, x, double(v));
      }
    }
  }
  // (3) elementStrides (1, 2, 3) over a box (8, 7, 5): 8 x 4 x 2 elements, rows 15, 17, 19
  // and 21 (outside: 20 rows), planes 3 and 6.
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {8, 20, 7});
    MapSpec s = box_of({8, 7, 5});
    s.element_strides[1] = 2;
    s.element_strides[2] = 3;
    CHECK_MSG(box_bytes(t, s) == 8 * 4 * 2 * 4, "elementStrides box bytes %u", box_bytes(t, s));
    const std::vector<unsigned char> out =
        check_load("3D f32 elementStrides", t, s, at(3, {0, 15, 3}));
    float got = 0, want = 0;  // box row 1, plane 1: tensor row 17, plane 6
    std::memcpy(&got, &out[((1 * 4 + 1) * 8 + 2) * 4], 4);
    std::memcpy(&want, &t.bytes[6 * t.strides[1] + 17 * t.strides[0] + 2 * 4], 4);
    CHECK_MSG(got == want, "elementStrides (plane 1, row 1, 2) = %g, want %g", double(got),
              double(want));
  }
  // (4) swizzles: a box whose rows are the span, f16.
  const CUtensorMapSwizzle swizzles[] = {CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B,
                                         CU_TENSOR_MAP_SWIZZLE_128B};
  for (CUtensorMapSwizzle sw : swizzles) {
    const int span = swizzle_span(sw);
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, {80, 40});
    MapSpec s = box_of({static_cast<cuuint32_t>(span / 2), 16});
    s.swizzle = sw;
    const std::string name = "swizzle " + std::to_string(span) + "B";
    const std::vector<unsigned char> out = check_load(name.c_str(), t, s, at(2, {8, 3}, 5));
    const std::vector<unsigned char> linear = reference_box(t, s, at(2, {8, 3}).coords);
    CHECK_MSG(std::memcmp(out.data(), linear.data(), linear.size()) != 0,
              "%s: the raw tile equals the unswizzled box", name.c_str());
    // Bytes 128..143 (the first chunk of the second 128-byte line) hold the line's chunk 1:
    // bit 7 of the address flips bit 4 in every mode.
    CHECK_MSG(std::memcmp(&out[128], &linear[144], 16) == 0, "%s: chunk 8 is not chunk 9",
              name.c_str());
    if (span == 128) {  // line 5: chunk c holds chunk c ^ 5 (0x280 + 16 * 2 holds chunk 7)
      CHECK_MSG(std::memcmp(&out[640 + 32], &linear[640 + 112], 16) == 0,
                "128B: line 5 chunk 2 is not chunk 7");
    }
  }
  // (5) two phases of one mbarrier, the second copy in flight while the first tile is read.
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {40, 24});
    CopyCase c = at(2, {0, 0}, 4);
    c.mode = kTwoPhases;
    c.coords2[0] = 16;
    c.coords2[1] = 8;
    check_load("two phases", t, box_of({16, 8}), c);
  }
}

void positive_stores() {
  // (6) partly outside at the high end, swizzled: block 0 at (64, 24) of a 100 x 30 f16
  // tensor (36 columns, 6 rows inside), block 1 at (64, 32) (wholly outside: nothing written).
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, {100, 30});
    MapSpec s = box_of({64, 8});
    s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    check_store("store 2D f16 128B swizzle", t, s, at(2, {64, 24}, 8));
  }
  {
    Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {12, 6, 4});
    check_store("store 3D f32", t, box_of({4, 3, 2}), at(3, {8, 2, 0}, 2));
  }
}

void negative_loads() {
  Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {40, 24});
  const MapSpec s = box_of({16, 8});
  Launch l;
  CHECK(encode(&l.map, t, s) == CUDA_SUCCESS);
  const CopyCase base = [&] {
    CopyCase c = at(2, {8, 4});
    c.box_bytes = c.expect_bytes = box_bytes(t, s);
    return c;
  }();

  // (7) expect_tx names 16 bytes fewer, then more, than the box: the phase never completes.
  l.c = base;
  l.c.expect_bytes = base.box_bytes - 16;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(7) fewer", "and -16 transaction bytes pending, which nothing left"),
            "(7) expect_tx of fewer bytes");
  l.c.expect_bytes = base.box_bytes + 16;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(7) more", "and 16 transaction bytes pending, which nothing left"),
            "(7) expect_tx of more bytes");

  // (8) reading the tile before the wait: poison (NaN) in every thread order.
  // nan_read: how many f32 elements of every block's first tile the launch read as NaN.
  const uint32_t elements = kBlocks * base.box_bytes / 4;
  const auto nan_read = [&] {
    size_t nan = 0;
    for (int b = 0; b < kBlocks; ++b) {
      for (uint32_t i = 0; i < base.box_bytes; i += 4) {
        float v = 0;
        std::memcpy(&v, &l.out[2 * b * base.box_bytes + i], 4);
        nan += std::isnan(v);
      }
    }
    return nan;
  };
  const simt::ThreadOrder orders[] = {simt::ThreadOrder::ascending,
                                      simt::ThreadOrder::descending,
                                      simt::ThreadOrder::shuffled};
  for (simt::ThreadOrder order : orders) {
    simt::ScopedThreadOrder scope(order, 12345);
    l.c = base;
    l.c.mode = kReadBeforeWait;
    l.run();
    CHECK_MSG(emu_test::launched_ok("(8)"), "(8) launch");
    const size_t nan = nan_read();
    CHECK_MSG(nan == elements, "(8) order %d: %zu of %u elements NaN before the wait",
              static_cast<int>(order), nan, elements);
  }
  // (8b) reading it after two __syncthreads and another mbarrier's phase, not its own: poison in
  // the descending order, where a copy lands only once its own mbarrier is waited for (the
  // other orders land it a round after the issue, so they see the data there).
  {
    simt::ScopedThreadOrder scope(simt::ThreadOrder::descending);
    l.c = base;
    l.c.mode = kReadAfterOtherWait;
    l.run();
    CHECK_MSG(emu_test::launched_ok("(8b)"), "(8b) launch");
    const size_t nan = nan_read();
    CHECK_MSG(nan == elements, "(8b) %zu of %u elements NaN after another mbarrier's wait", nan,
              elements);
  }

  // (9) destination 16 bytes off 128, in global memory; swizzled, 128 bytes off 1024.
  l.c = base;
  l.c.dst_offset = 16;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(9) misaligned", "is not 128-byte aligned"), "(9) misaligned");
  l.c = base;
  l.c.mode = kDstGlobal;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(9) global", "is not in the block's dynamic shared memory"),
            "(9) global destination");
  {
    Tensor ts = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, {80, 40});
    MapSpec ss = box_of({64, 8});
    ss.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    Launch ls;
    CHECK(encode(&ls.map, ts, ss) == CUDA_SUCCESS);
    ls.c = base;
    ls.c.box_bytes = ls.c.expect_bytes = box_bytes(ts, ss);
    ls.c.dst_offset = 128;
    ls.run();
    CHECK_MSG(emu_test::launch_failed_with("(9) swizzle repeat", "where the 128B swizzle pattern repeats"),
              "(9) swizzled destination off the repeat");
  }

  // (10) a map not made by the encoder; one changed since; one of another rank; no mbarrier.
  const CUtensorMap good = l.map;
  std::memset(&l.map, 0, sizeof l.map);
  l.c = base;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(10) forged", "is not a tensor map made by cuTensorMapEncodeTiled"),
            "(10) forged map");
  l.map = good;
  reinterpret_cast<unsigned char*>(&l.map)[8] ^= 1;  // globalDim[0]: 40 -> 41
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(10) changed", "was changed after cuTensorMapEncodeTiled"),
            "(10) changed map");
  l.map = good;
  l.c.load_rank = 3;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(10) rank", "the tensor map has rank 2, the instruction 3"),
            "(10) rank mismatch");
  l.c = base;
  l.c.mode = kNoBarrier;
  l.run();
  CHECK_MSG(emu_test::launch_failed_with("(10) no mbarrier", "no mbarrier was initialised"), "(10) no mbarrier");
}

void negative_stores() {
  Tensor t = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {12, 6, 4});
  const MapSpec s = box_of({4, 3, 2});
  CUtensorMap map;
  CHECK(encode(&map, t, s) == CUDA_SUCCESS);
  CopyCase c = at(3, {0, 0, 0});
  c.box_bytes = box_bytes(t, s);
  emu_test::DeviceVector<unsigned char> in(kBlocks * c.box_bytes, 0x22);
  auto run = [&] {
    DILATTN_LAUNCH(store_kernel, dim3(kBlocks), dim3(kThreads), shared_bytes_for(c.box_bytes),
                   nullptr)(map, c, in.data());
  };
  // (12) a negative coordinate; a thread returning with its store not waited for.
  c.coords[1] = -1;
  run();
  CHECK_MSG(emu_test::launch_failed_with("(12) negative", "must start inside the tensor"), "(12) negative");
  c.coords[1] = 0;
  c.mode = kStoreNoWait;
  run();
  CHECK_MSG(emu_test::launch_failed_with("(12) no wait", "stores never waited for"), "(12) no wait");
  // The source overwritten before the wait: the overwritten bytes are what lands (0x11, not the
  // 0x22 written before the store), so the race shows in the output.
  c.mode = kStoreReuseBeforeWait;
  run();
  CHECK_MSG(emu_test::launched_ok("(12) reuse"), "(12) reuse launch");
  CHECK_MSG(t.bytes[0] == 0x11, "(12) reuse before the wait: byte 0 = 0x%02x, want 0x11",
            t.bytes[0]);
}

// (11) the encoder refuses what the driver API documents as invalid, and says which argument.
void encoder_rejections() {
  Tensor valid = make_tensor(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, {40, 24});
  struct Bad {
    const char* want;
    void (*change)(Tensor&, MapSpec&, CUtensorMapDataType&, cuuint32_t&, int&);
  };
  const Bad bad[] = {
      {"boxDim[1] = 300 is outside 1..256",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) { s.box[1] = 300; }},
      {"globalStrides[0] = 100 is not a multiple of 16",
       [](Tensor& t, MapSpec&, CUtensorMapDataType&, cuuint32_t&, int&) { t.strides[0] = 100; }},
      {"128 bytes exceeds the 64-byte span",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) {
         s.box[0] = 32;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
       }},
      {"boxDim[0] * element size = 8 bytes is not a multiple of 16",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) { s.box[0] = 2; }},
      {"globalAddress", [](Tensor&, MapSpec&, CUtensorMapDataType&, cuuint32_t&,
                           int& offset) { offset = 4; }},
      {"tensorRank 6 is outside 1..5",
       [](Tensor&, MapSpec&, CUtensorMapDataType&, cuuint32_t& rank, int&) { rank = 6; }},
      {"globalDim[1] = 0 is outside 1..2^32",
       [](Tensor& t, MapSpec&, CUtensorMapDataType&, cuuint32_t&, int&) { t.dims[1] = 0; }},
      {"elementStrides[1] = 9 is outside 1..8",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) {
         s.element_strides[1] = 9;
       }},
      {"needs a floating-point tensorDataType",
       [](Tensor&, MapSpec& s, CUtensorMapDataType& type, cuuint32_t&, int&) {
         type = CU_TENSOR_MAP_DATA_TYPE_INT32;
         s.fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
       }},
      {"elementStrides[0] = 2 is not emulated",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) {
         s.element_strides[0] = 2;
       }},
      {"below the 128-byte span is not emulated",
       [](Tensor&, MapSpec& s, CUtensorMapDataType&, cuuint32_t&, int&) {
         s.box[0] = 16;
         s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
       }},
      {"is not emulated (only the integer",
       [](Tensor&, MapSpec&, CUtensorMapDataType& type, cuuint32_t&, int&) {
         type = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32;
       }},
  };
  for (const Bad& b : bad) {
    Tensor u = valid;
    MapSpec s = box_of({16, 8});
    CUtensorMapDataType type = u.type;
    cuuint32_t rank = 2;
    int offset = 0;
    b.change(u, s, type, rank, offset);
    CUtensorMap map;
    const CUresult r = encode_tensor_map_tiled(
        &map, type, rank, u.bytes.data() + offset, u.dims, u.strides, s.box, s.element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE, s.fill);
    const std::string msg = simt::last_tensor_map_error();
    CHECK_MSG(r == CUDA_ERROR_INVALID_VALUE && msg.find(b.want) != std::string::npos,
              "(11) want CUDA_ERROR_INVALID_VALUE naming \"%s\", got %d: \"%s\"", b.want,
              static_cast<int>(r), msg.c_str());
  }
  CUtensorMap map;
  const MapSpec s = box_of({16, 8});
  CHECK_MSG(encode(&map, valid, s) == CUDA_SUCCESS && simt::last_tensor_map_error()[0] == '\0',
            "(11) a valid map after the rejections: %s", simt::last_tensor_map_error());
  const CUresult interleaved = encode_tensor_map_tiled(
      &map, valid.type, 2, valid.bytes.data(), valid.dims, valid.strides, s.box,
      s.element_strides, CU_TENSOR_MAP_INTERLEAVE_32B, CU_TENSOR_MAP_SWIZZLE_32B,
      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK_MSG(interleaved == CUDA_ERROR_INVALID_VALUE &&
                std::string(simt::last_tensor_map_error()).find("interleave 2 is not emulated") !=
                    std::string::npos,
            "(11) interleave: %s", simt::last_tensor_map_error());
}

}  // namespace

int main() {
  positive_loads();
  positive_stores();
  negative_loads();
  negative_stores();
  encoder_rejections();
  return harness::finish("emu_tma");
}
