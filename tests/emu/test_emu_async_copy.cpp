// test_emu_async_copy.cpp - asynchronous 16-byte and 4-byte copies (cuda/async_copy.cuh) in the
// emulator: data is visible only after the matching wait (emu/simt_async_copy.h).
//
// Each of 32 threads copies 16 bytes (4 floats) of a source into shared memory, then every
// thread reads its neighbour's 16 bytes after a __syncthreads. Properties:
//   (1) commit, wait<0>, __syncthreads: the neighbour's data, in three thread orders;
//   (2) reading before the wait (commit, __syncthreads, read, then wait): poison (NaN), not data;
//   (3) no commit: a wait completes nothing (poison read), and the launch fails at return
//       ("never waited for");
//   (4) two groups, wait<1>: the older group is visible, the newer is still poison; wait<0>
//       then shows both (double buffering);
//   (5) a source or destination that is not 16-byte aligned, or a destination outside shared
//       memory, fails the launch;
//   (6) the same 16 bytes as four 4-byte copies (async_copy_4): the data after the wait, poison
//       before it, and a source not 4-byte aligned fails the launch.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "async_copy.cuh"
#include "emu_test_util.h"

namespace {

using namespace dilattn::cuda;

enum Mode : int { kCorrect, kReadBeforeWait, kNoCommit, kTwoGroups, kMisalignedSrc,
                  kMisalignedDst, kGlobalDst, kWords, kWordsBeforeWait, kMisalignedWord };

// out[0 .. 128): what each thread read of its neighbour's 4 floats (in kTwoGroups: the first
// buffer after wait<1>); out[128 .. 256): kTwoGroups' second buffer after wait<1>;
// out[256 .. 384): both after wait<0>.
__global__ void copy_kernel(const float* src, float* out, int mode) {
  DILATTN_DYNAMIC_SHARED(float, smem);  // 2 buffers of 32 x 4 floats
  const int tid = static_cast<int>(threadIdx.x), next = (tid + 1) % 32;
  float* buf0 = smem;
  float* buf1 = smem + 128;
  if (mode == kMisalignedSrc) async_copy_16(buf0 + 4 * tid, src + 4 * tid + 2);
  if (mode == kMisalignedDst) async_copy_16(buf0 + 4 * tid + 1, src + 4 * tid);
  if (mode == kGlobalDst) async_copy_16(out + 4 * tid, src + 4 * tid);
  if (mode == kMisalignedWord)
    async_copy_4(buf0 + 4 * tid, reinterpret_cast<const char*>(src + 4 * tid) + 2);
  if (mode == kWords || mode == kWordsBeforeWait) {
    for (int e = 0; e < 4; ++e) async_copy_4(buf0 + 4 * tid + e, src + 4 * tid + e);
  } else {
    async_copy_16(buf0 + 4 * tid, src + 4 * tid);
  }
  if (mode == kTwoGroups) {
    async_copy_commit();
    async_copy_16(buf1 + 4 * tid, src + 128 + 4 * tid);
    async_copy_commit();
    async_copy_wait<1>();
    __syncthreads();
    for (int e = 0; e < 4; ++e) {
      out[4 * tid + e] = buf0[4 * next + e];
      out[128 + 4 * tid + e] = buf1[4 * next + e];
    }
    __syncthreads();  // every read above happens before any thread's next wait
    async_copy_wait<0>();
    __syncthreads();
    for (int e = 0; e < 4; ++e) {
      out[256 + 4 * tid + e] = buf0[4 * next + e];
      out[384 + 4 * tid + e] = buf1[4 * next + e];
    }
    return;
  }
  if (mode != kNoCommit) async_copy_commit();
  const bool before_wait = mode == kReadBeforeWait || mode == kWordsBeforeWait;
  if (!before_wait) async_copy_wait<0>();
  __syncthreads();
  for (int e = 0; e < 4; ++e) out[4 * tid + e] = buf0[4 * next + e];
  if (before_wait) {
    __syncthreads();  // every read above happens before any thread's wait
    async_copy_wait<0>();
  }
}

constexpr size_t kSmem = 256 * sizeof(float);

}  // namespace

int main() {
  emu_test::DeviceVector<float> src(256), out(512);
  for (int i = 0; i < 256; ++i) src[i] = static_cast<float>(i) + 0.5f;
  auto want = [&](int i, int base) { return src[base + (4 * ((i / 4 + 1) % 32) + i % 4)]; };
  auto run = [&](int mode) {
    std::fill(out.begin(), out.end(), -1.0f);
    DILATTN_LAUNCH(copy_kernel, dim3(1), dim3(32), kSmem, nullptr)(src.data(), out.data(), mode);
  };

  // (1) the data after commit, wait, barrier; the same in every thread order.
  bool agree = false;
  emu_test::run_in_orders(
      [&] {
        run(kCorrect);
        CHECK_MSG(emu_test::launched_ok("(1)"), "(1) launch");
        return emu_test::as_bytes(out);
      },
      &agree);
  CHECK_MSG(agree, "(1) thread orders disagree");
  for (int i = 0; i < 128; ++i)
    CHECK_MSG(out[i] == want(i, 0), "(1) out[%d] = %g, want %g", i, double(out[i]),
              double(want(i, 0)));

  // (2) read before the wait: poison in every element.
  run(kReadBeforeWait);
  CHECK_MSG(emu_test::launched_ok("(2)"), "(2) launch");
  for (int i = 0; i < 128; ++i) CHECK_MSG(std::isnan(out[i]), "(2) out[%d] = %g, want NaN", i,
                                          double(out[i]));

  // (3) no commit: the wait completes nothing, and the thread returns with copies pending.
  run(kNoCommit);
  CHECK_MSG(emu_test::launch_failed_with("(3)", "never waited for"), "(3) missing commit");
  CHECK_MSG(std::isnan(out[0]), "(3) out[0] = %g, want NaN (read before any copy completed)",
            double(out[0]));

  // (4) groups complete oldest first.
  run(kTwoGroups);
  CHECK_MSG(emu_test::launched_ok("(4)"), "(4) launch");
  for (int i = 0; i < 128; ++i) {
    CHECK_MSG(out[i] == want(i, 0), "(4) first buffer after wait<1>: out[%d] = %g", i,
              double(out[i]));
    CHECK_MSG(std::isnan(out[128 + i]), "(4) second buffer after wait<1>: out[%d] = %g, want "
              "NaN", i, double(out[128 + i]));
    CHECK_MSG(out[256 + i] == want(i, 0) && out[384 + i] == want(i, 128),
              "(4) after wait<0>: %g %g", double(out[256 + i]), double(out[384 + i]));
  }

  // (5) alignment and the destination's memory space.
  run(kMisalignedSrc);
  CHECK_MSG(emu_test::launch_failed_with("(5) source 8 bytes off", "must be 16-byte aligned"), "(5) source");
  run(kMisalignedDst);
  CHECK_MSG(emu_test::launch_failed_with("(5) destination 4 bytes off", "must be 16-byte aligned"),
            "(5) destination");
  run(kGlobalDst);
  CHECK_MSG(emu_test::launch_failed_with("(5) global destination", "not in the block's dynamic shared memory"),
            "(5) global destination");

  // (6) 4-byte copies: the data after the wait, poison before it, alignment to 4 bytes.
  run(kWords);
  CHECK_MSG(emu_test::launched_ok("(6)"), "(6) launch");
  for (int i = 0; i < 128; ++i)
    CHECK_MSG(out[i] == want(i, 0), "(6) out[%d] = %g, want %g", i, double(out[i]),
              double(want(i, 0)));
  run(kWordsBeforeWait);
  CHECK_MSG(emu_test::launched_ok("(6) before the wait"), "(6) launch before the wait");
  for (int i = 0; i < 128; ++i)
    CHECK_MSG(std::isnan(out[i]), "(6) before the wait: out[%d] = %g, want NaN", i,
              double(out[i]));
  run(kMisalignedWord);
  CHECK_MSG(emu_test::launch_failed_with("(6) source 2 bytes off", "must be 4-byte aligned"), "(6) source");
  return harness::finish("emu_async_copy");
}
