// test_smem_banks.cpp - the shared-memory layout of the forward kernels' K and V tiles against
// the bank rule of NVIDIA GPUs: 32 banks of 4 bytes; a warp's access serializes over the
// distinct 4-byte words that fall in one bank (one word read by several lanes is broadcast).
//
//   SIMT (forward_simt.cu): in S = Q K^T the 32 lanes of a warp read element d of keys
//     c = 0 .. 31 at once (thread idx owns S[idx / BC][idx % BC], BC = 32), word c * pitch + d.
//     Every head dim 1 .. kMaxHeadDim must put those 32 words in 32 distinct banks (with
//     pitch = D that is 32 / gcd(D, 32) banks: 1 bank, a 32-way conflict, for D = 64).
//   MMA (forward_mma.cu): rows of MmaTile::kStride 16-bit elements, read by ldmatrix x4 (Q and
//     K plain, V .trans): each of its four 8x8 matrices is one shared-memory access of the 8
//     rows the lanes 8i .. 8i + 7 address (frag_rows_first, frag_cols_first), 16 bytes each:
//     32 words that must fill the 32 banks, at every 16x16 block corner the kernel reads (key or
//     query row 16x, column 16y). With the rows unpadded (kStride = D, 128 or 256 bytes) every
//     row starts in bank 0: 8-way.
//   MMA_TF32 (forward_mma_tf32.cu): rows of Tf32Tile::kStride floats. Lane (g, t) loads K's
//     word at row g, column t (then t + 4) and V's at row 2t (then 2t + 1), column g: each of
//     the four warp-wide loads must hit 32 distinct banks. Unpadded (kStride = D) K is 8-way,
//     V 4-way.
//   Per-lane tables (attention_tile.cuh lane_table_word: the forward's log weights, the dQ
//     pass's shifts, dq_shift_word): lane (g, t) of warp w reads two adjacent floats,
//     lane_table_word<kRows>(slot, 16 w + g, 2 t) (and the row 8 further): an 8-byte read, which
//     the hardware serves a half-warp at a time; each half-warp's 32 words must fill the 32
//     banks, at the tiles' 64 rows (forward_mma, the dQ pass, forward_mma_tf32 at D = 128) and
//     128 (forward_mma_tf32 at D = 64).
//
// The tile bases are 128-byte aligned (SmemCarver), so they add the same bank to every lane.
#define DILATTN_BACKEND_NS banks_test
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "../common/check.h"
#include "../common/test_backend.h"
#include "forward_mma.cu"
#include "forward_mma_tf32.cu"
#include "forward_simt.cu"
#include "mma_backward_loop.cuh"

namespace {

using dilattn::banks_test::MmaTile;
using dilattn::banks_test::SimtProducts;
using dilattn::banks_test::Tf32Tile;

constexpr int64_t kBanks = 32, kBankBytes = 4, kWarp = 32;

// The most distinct 4-byte words one bank serves for a warp's accesses at these byte addresses:
// 1 is conflict-free, n an n-way conflict.
int conflict_ways(const std::vector<int64_t>& byte_addrs) {
  std::map<int64_t, std::set<int64_t>> words_in_bank;
  for (const int64_t a : byte_addrs) words_in_bank[a / kBankBytes % kBanks].insert(a / kBankBytes);
  size_t most = 0;
  for (const auto& [bank, words] : words_in_bank) most = words.size() > most ? words.size() : most;
  return static_cast<int>(most);
}

void check_simt_key_column() {
  static_assert(SimtProducts<float>::kBc == kWarp, "one warp reads one column of K");
  for (int64_t D = 1; D <= dilattn::kMaxHeadDim; ++D) {
    const int64_t pitch = SimtProducts<float>::key_pitch(D);
    CHECK_MSG(pitch >= D, "SIMT K pitch %lld below D = %lld", static_cast<long long>(pitch),
              static_cast<long long>(D));
    for (int64_t d = 0; d < D; ++d) {
      std::vector<int64_t> addrs;  // lane c reads f32 element d of K row c
      for (int64_t c = 0; c < kWarp; ++c)
        addrs.push_back((c * pitch + d) * static_cast<int64_t>(sizeof(float)));
      const int ways = conflict_ways(addrs);
      if (!CHECK_MSG(ways == 1, "SIMT D = %lld pitch %lld d = %lld: %d-way conflict",
                     static_cast<long long>(D), static_cast<long long>(pitch),
                     static_cast<long long>(d), ways))
        break;
    }
  }
}

template <class T, int D>
void check_mma_fragments(const char* name) {
  using dilattn::banks_test::frag_cols_first;
  using dilattn::banks_test::frag_rows_first;
  using Tile = MmaTile<T, D>;
  constexpr int64_t stride = Tile::kStride, elem = sizeof(T);
  const char* rules[2] = {"rows first (Q, V)", "columns first (K)"};
  for (int rule = 0; rule < 2; ++rule)
    for (int64_t corner_row = 0; corner_row < Tile::kBc; corner_row += 16)
      for (int64_t corner_col = 0; corner_col < D; corner_col += 16)
        for (int64_t matrix = 0; matrix < 4; ++matrix) {
          std::vector<int64_t> words;  // the 8 rows of one matrix, 16 bytes each
          for (int64_t lane = 8 * matrix; lane < 8 * matrix + 8; ++lane) {
            const int off = rule == 0 ? frag_rows_first<T, D>(static_cast<int>(lane))
                                      : frag_cols_first<T, D>(static_cast<int>(lane));
            const int64_t row = (corner_row * stride + corner_col + off) * elem;
            for (int64_t w = 0; w < 4; ++w) words.push_back(row + w * kBankBytes);
          }
          const int ways = conflict_ways(words);
          if (!CHECK_MSG(ways == 1,
                         "MMA %s D = %d stride %lld: ldmatrix %s, block (%lld, %lld) matrix %lld: "
                         "%d-way conflict",
                         name, D, static_cast<long long>(stride), rules[rule],
                         static_cast<long long>(corner_row), static_cast<long long>(corner_col),
                         static_cast<long long>(matrix), ways))
            return;
        }
}

template <int D>
void check_tf32_fragments() {
  constexpr int64_t stride = Tf32Tile<D>::kStride;
  for (int64_t shift = 0; shift < 2; ++shift) {  // K: columns t, t + 4; V: rows 2t, 2t + 1
    std::vector<int64_t> k, v;
    for (int64_t lane = 0; lane < kWarp; ++lane) {
      const int64_t g = lane / 4, t = lane % 4;
      k.push_back((g * stride + t + 4 * shift) * 4);
      v.push_back(((2 * t + shift) * stride + g) * 4);
    }
    const int k_ways = conflict_ways(k), v_ways = conflict_ways(v);
    CHECK_MSG(k_ways == 1 && v_ways == 1,
              "MMA_TF32 D = %d stride %lld: K fragment %d-way, V fragment %d-way conflict", D,
              static_cast<long long>(stride), k_ways, v_ways);
  }
}

template <int kRows>
void check_lane_table(const char* what) {
  using dilattn::banks_test::lane_table_word;
  for (int slot = 0; slot < 2; ++slot)
    for (int warp = 0; warp < kRows / 16; ++warp)
      for (int row_half = 0; row_half < 2; ++row_half)
        for (int half = 0; half < 2; ++half) {
          std::vector<int64_t> words;  // lanes 16 half .. 16 half + 15, two floats each
          for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
            const int g = lane / 4, t = lane % 4;
            const int64_t word =
                lane_table_word<kRows>(slot, 16 * warp + g + 8 * row_half, 2 * t);
            words.push_back(word * kBankBytes);
            words.push_back((word + 1) * kBankBytes);
          }
          const int ways = conflict_ways(words);
          CHECK_MSG(ways == 1, "%s slot %d warp %d rows +%d half-warp %d: %d-way conflict", what,
                    slot, warp, 8 * row_half, half, ways);
        }
}

}  // namespace

int main() {
  // On cuda this test says it is emu-only and is not counted as run (test_backend.h).
  if (!harness::runs_only_on_emu(
          "kernels_smem_banks",
          "the shared-memory bank model of the emulated tile layouts"))
    return harness::kExitSkip;
  check_simt_key_column();
  check_mma_fragments<__half, 64>("f16");
  check_mma_fragments<__half, 128>("f16");
  check_mma_fragments<__nv_bfloat16, 64>("bf16");
  check_mma_fragments<__nv_bfloat16, 128>("bf16");
  check_tf32_fragments<64>();
  check_tf32_fragments<128>();
  // The dQ pass's shift table is this layout at its 64 rows.
  static_assert(dilattn::banks_test::dq_shift_word(1, 9, 3) ==
                    dilattn::banks_test::lane_table_word<64>(1, 9, 3),
                "dq_shift_word is lane_table_word");
  check_lane_table<MmaTile<__half, 64>::kBr>("forward_mma log weights and dQ shifts");
  check_lane_table<Tf32Tile<64>::kBr>("forward_mma_tf32 (D = 64) log weights");
  return harness::finish("kernels_smem_banks");
}
