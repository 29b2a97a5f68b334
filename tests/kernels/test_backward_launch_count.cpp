// test_backward_launch_count.cpp - how many kernels a dilated backward launches on the emu
// backend (cuda/launch_backward.cu, docs/architecture.md "Launches per call"), counted by the
// emulator's runtime (emu/simt_streams.h), and what those launches compute:
//   backward_launches_per_call: b dilated branches and G query heads a kv head (mod, block and
//     groups head modes, G = 4 or 3) take 8 + 2b launches on the tensor-core kernels (f16,
//     D = 64) and on the SIMT ones (f32, D = 16; plain and ALiBi's variant instance): one dK/dV
//     launch a branch walks every head of a kv head, the block of the first head of each offset
//     running the heads of that offset; 8 + b + b G on the tensor-core variant instances (ALiBi
//     here: one dK/dV launch a branch and head, as walking the heads would spill their
//     registers at D = 128);
//   ... and dQ, dK, dV against the reference within SPEC 8, the same bits with the emulator's
//     threads in descending and shuffled order.
#include <cstdio>
#include <string>
#include <vector>

#include "../common/attention_run.h"
#include "../common/check.h"
#include "../common/compare.h"
#include "simt.h"

using namespace harness;

namespace {

struct Launches {
  const char* kernel;
  dilattn_dtype dtype;
  int64_t D;
  bool per_head;  // one dK/dV launch a (branch, query head)
  bool alibi;     // ALiBi slopes: the kernel's variant instance
};

AttentionCase dilated_case(const std::string& name, dilattn_head_mode mode, int64_t H,
                           int64_t Hkv, dilattn_dtype dtype, int64_t D) {
  AttentionCase c;
  c.name = name;
  c.kind = DILATTN_KIND_DILATED;
  c.Nq = c.Nk = 40;
  c.H = H;
  c.Hkv = Hkv;
  c.D = D;
  c.dtype = dtype;
  c.segments = {16, 40};
  c.dilations = {1, 2};
  c.head_mode = mode;
  c.causal = true;
  return c;
}

void check(const AttentionCase& c, const Launches& k) {
  CaseScope scope(c.name + " " + k.kernel + (k.alibi ? " variant" : ""));
  const Inputs in = make_inputs(c, 5, 2.0);
  const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
  Forward fwd_in{fwd.o.converted(c.dtype), fwd.lse.converted(DILATTN_F32)};
  const uint64_t before = simt::runtime_calls().launches;
  const Gradients got = run_backward(c, in, fwd_in, DILATTN_BACKEND_EMU);
  const int64_t launched = static_cast<int64_t>(simt::runtime_calls().launches - before);
  const int64_t b = static_cast<int64_t>(c.segments.size()), G = c.H / c.Hkv;
  const int64_t expected = k.per_head ? 8 + b + b * G : 8 + 2 * b;
  CHECK_MSG(launched == expected, "%lld launches, expected %lld (b = %lld, G = %lld)",
            static_cast<long long>(launched), static_cast<long long>(expected),
            static_cast<long long>(b), static_cast<long long>(G));
  CHECK_CLOSE("dQ", got.dq, want.dq, spec8::of(c.dtype));
  CHECK_CLOSE("dK", got.dk, want.dk, spec8::of(c.dtype));
  CHECK_CLOSE("dV", got.dv, want.dv, spec8::of(c.dtype));
  for (simt::ThreadOrder order : {simt::ThreadOrder::descending, simt::ThreadOrder::shuffled}) {
    simt::ScopedThreadOrder scoped(order, 7);
    const Gradients again = run_backward(c, in, fwd_in, DILATTN_BACKEND_EMU);
    CHECK_MSG(again.dq.bytes() == got.dq.bytes() && again.dk.bytes() == got.dk.bytes() &&
                  again.dv.bytes() == got.dv.bytes(),
              "the gradients differ in bits with the threads in another order");
  }
}

}  // namespace

int main() {
  CaseScope scope("backward_launches_per_call");
  const Launches kernels[] = {{"mma", DILATTN_F16, 64, false, false},
                              {"simt", DILATTN_F32, 16, false, false},
                              {"simt", DILATTN_F32, 16, false, true},
                              {"mma", DILATTN_F16, 64, true, true}};
  for (const Launches& k : kernels) {
    // mod: offsets h mod r, so with r = 2 heads 0, 2 and 1, 3 share their rows; block: heads
    // 0, 1 and 2, 3; groups: each head uses one branch.
    AttentionCase cases[] = {dilated_case("mod_gqa4", DILATTN_HEADS_MOD, 4, 1, k.dtype, k.D),
                             dilated_case("block_gqa4", DILATTN_HEADS_BLOCK, 8, 2, k.dtype, k.D),
                             dilated_case("groups_gqa3", DILATTN_HEADS_GROUPS, 3, 1, k.dtype, k.D)};
    for (AttentionCase& c : cases) {
      if (k.alibi)
        for (int64_t h = 0; h < c.H; ++h) c.alibi_slopes.push_back(0.05 * double(h + 1));
      check(c, k);
    }
  }
  return finish("backward_launches_per_call");
}
