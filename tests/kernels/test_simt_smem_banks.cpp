// test_simt_smem_banks.cpp - the shared-memory layout of the forward kernels' K tile
// (cuda/forward_tile_loop.cuh's KeyPitch) against the bank rule of NVIDIA GPUs: 32 banks of
// 4 bytes, a warp's loads serialize over the distinct 4-byte words that fall in one bank.
//
//   SIMT (forward_simt.cu): in S = Q K^T the 32 lanes of a warp read element d of keys
//     c = 0 .. 31 at once (thread idx owns S[idx / BC][idx % BC], BC = 32), word c * pitch + d.
//     Every head dim 1 .. kMaxHeadDim must put those 32 words in 32 distinct banks (with
//     pitch = D that is 32 / gcd(D, 32) banks: 1 bank, a 32-way conflict, for D = 64).
//   WMMA (forward_wmma.cu): K is a col_major B operand with leading dimension pitch, which WMMA
//     needs a multiple of 8 16-bit elements; the pitch must stay D there.
//
// The tile base is 128-byte aligned (SmemCarver), so it adds the same bank to every lane.
#define DILATTN_BACKEND_NS banks_test
#include <cstdint>
#include <set>

#include "../common/check.h"
#include "forward_simt.cu"
#include "forward_wmma.cu"

namespace {

using dilattn::banks_test::KeyPitch;
using dilattn::banks_test::SimtProducts;
using dilattn::banks_test::WmmaProducts;

constexpr int kBanks = 32, kBankBytes = 4, kWarp = 32;

// Distinct banks the 32 lanes of a warp hit when lane c reads f32 element d of K row c.
int banks_of_key_column(int64_t pitch, int64_t d) {
  std::set<int64_t> banks;
  for (int64_t c = 0; c < kWarp; ++c)
    banks.insert((c * pitch + d) * static_cast<int64_t>(sizeof(float)) / kBankBytes % kBanks);
  return static_cast<int>(banks.size());
}

}  // namespace

int main() {
  static_assert(SimtProducts<float>::kBc == kWarp, "one warp reads one column of K");
  for (int64_t D = 1; D <= dilattn::kMaxHeadDim; ++D) {
    const int64_t pitch = KeyPitch<SimtProducts<float>>::of(D);
    CHECK_MSG(pitch >= D, "SIMT K pitch %lld below D = %lld", static_cast<long long>(pitch),
              static_cast<long long>(D));
    for (int64_t d = 0; d < D; ++d) {
      const int banks = banks_of_key_column(pitch, d);
      if (!CHECK_MSG(banks == kBanks, "SIMT D = %lld pitch %lld d = %lld: %d banks, %d-way",
                     static_cast<long long>(D), static_cast<long long>(pitch),
                     static_cast<long long>(d), banks, kBanks / banks))
        break;
    }
  }
  CHECK_EQ(KeyPitch<SimtProducts<__half>>::of(64), KeyPitch<SimtProducts<float>>::of(64));
  CHECK_EQ((KeyPitch<WmmaProducts<__half, 64>>::of(64)), 64);
  CHECK_EQ((KeyPitch<WmmaProducts<__half, 128>>::of(128)), 128);
  CHECK_EQ((KeyPitch<WmmaProducts<__nv_bfloat16, 64>>::of(64)), 64);
  CHECK_EQ((KeyPitch<WmmaProducts<__nv_bfloat16, 128>>::of(128)), 128);
  return harness::finish("kernels_simt_smem_banks");
}
