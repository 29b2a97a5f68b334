// test_ring_emu.cpp - SPEC 5 + 6 on the device path: the ring with its sub-problems on the emu
// backend, so its buffers are the emulated device's memory and its element work (copies, sums,
// SPEC 5's merge) runs as the kernels of cuda/ring_ops.cu under the SIMT emulator, the code
// the cuda backend runs on a GPU.
//   ring_emu_forward_within_spec8: every rank's O and LSE against the reference, for every case
//     of ring_test_util.h (dense, causal, GQA, dilated mod/block/groups, block-sparse), P = 1..4,
//     contiguous and zigzag; f32, SPEC 8.
//   ring_emu_backward_within_spec8: dQ, dK, dV the same way.
//   ring_emu_bf16_within_spec8: two bf16 cases, forward and backward, P = 3: the kernels'
//     conversions between the f32 accumulators and bf16 outputs.
//   ring_emu_backward_bitwise_same_for_any_schedule: P = 4, a rank starting late and the
//     emulator's threads in descending and shuffled order give the same bits.
//   ring_emu_options_within_spec8: SPEC 5.5, the options of SPEC 10 and 11 each and all together
//     (ring_checks.h check_option_cases) on rings of P = 3 (zigzag) and 4 (contiguous): O, LSE,
//     dQ, dK, dV and d_sinks against the single-process ref call with the same options. The
//     window, ALiBi and dropout make the ring's sub-problems placed (cuda/placed_positions.cuh);
//     the f32 cases run the SIMT kernels, the D = 64 cases the tensor-core kernels' variant and
//     dropout instances (f32: 3xTF32; f16: mma) where the option is alone.
//   ring_emu_hopper_within_spec8 (argument "hopper", a process of its own: the launcher reads
//     the device once): the emulated device an sm_90, so the ring's f16 and bf16 dense and
//     dilated sub-problems at D = 64 run the Hopper forward (cuda/forward_wgmma.cu, docs/spec.md
//     14.5); forward and backward against the reference on rings of P = 2 (contiguous) and 3
//     (zigzag), and the Hopper kernel's launches counted.
#include "../common/thread_orders.h"
#include "ring_checks.h"
#include "simt.h"

using namespace harness;

namespace dilattn::emu {
uint64_t wgmma_launch_count();  // cuda/launch.cu's count of Hopper forwards (cuda/kernels.h)
}

namespace {

// Cases small enough for the emulator (a fiber per CUDA thread) in a few seconds each.
bool emu_sized(const AttentionCase& c) { return c.Nq * c.H <= 512; }

void check_forward(const AttentionCase& c, const Inputs& in, int32_t P,
                   dilattn_ring_split split) {
  const Forward want = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  const ringtest::Ring ring{P, split, DILATTN_BACKEND_EMU};
  const Forward got = ringtest::ring_forward(c, in, ring);
  CaseScope named(ringtest::label(c, ring));
  CHECK_CLOSE("O", got.o, want.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", got.lse, want.lse, spec8::lse());
}

void check_backward(const AttentionCase& c, const Inputs& in, int32_t P,
                    dilattn_ring_split split) {
  const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
  const Gradients want = run_backward(c, in, fwd, DILATTN_BACKEND_REF, 1);
  const ringtest::Ring ring{P, split, DILATTN_BACKEND_EMU};
  const Gradients got = ringtest::ring_backward(c, in, fwd, ring);
  CaseScope named(ringtest::label(c, ring));
  CHECK_CLOSE("dQ", got.dq, want.dq, spec8::of(c.dtype));
  CHECK_CLOSE("dK", got.dk, want.dk, spec8::of(c.dtype));
  CHECK_CLOSE("dV", got.dv, want.dv, spec8::of(c.dtype));
}

void every_case(bool backward) {
  CaseScope scope(backward ? "ring_emu_backward_within_spec8" : "ring_emu_forward_within_spec8");
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32)) {
    if (!emu_sized(c)) continue;
    CaseScope named(c.name);
    const Inputs in = make_inputs(c, backward ? 11 : 7, 2.0);
    for (int32_t P = 1; P <= 4; ++P)
      for (dilattn_ring_split split : {DILATTN_RING_CONTIGUOUS, DILATTN_RING_ZIGZAG}) {
        if (!ringtest::ring_supports(c, P)) continue;
        if (backward)
          check_backward(c, in, P, split);
        else
          check_forward(c, in, P, split);
      }
  }
}

void bf16_cases() {
  CaseScope scope("ring_emu_bf16_within_spec8");
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_BF16)) {
    if (c.name != "dense_causal" && c.name != "dilated_block_causal") continue;
    CaseScope named(c.name);
    const Inputs in = make_inputs(c, 5, 2.0);
    check_forward(c, in, 3, DILATTN_RING_ZIGZAG);
    check_backward(c, in, 3, DILATTN_RING_ZIGZAG);
  }
}

void schedule_independent() {
  CaseScope scope("ring_emu_backward_bitwise_same_for_any_schedule");
  const ringtest::Ring ring{4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_EMU};
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32)) {
    if (!emu_sized(c) || !ringtest::ring_supports(c, ring.P)) continue;
    CaseScope named(c.name);
    const Inputs in = make_inputs(c, 13, 2.0);
    const Forward fwd = run_forward(c, in, DILATTN_BACKEND_REF, 1);
    const Gradients first = ringtest::ring_backward(c, in, fwd, ring);
    const struct {
      simt::ThreadOrder order;
      int32_t late;
      const char* name;
    } schedules[] = {{simt::ThreadOrder::descending, 0, "descending threads, rank 0 late"},
                     {simt::ThreadOrder::shuffled, 3, "shuffled threads, rank 3 late"}};
    for (const auto& s : schedules) {
      if (!harness::every_thread_order()) break;  // ../common/thread_orders.h
      simt::ScopedThreadOrder order(s.order, 99);
      const Gradients again = ringtest::ring_backward(c, in, fwd, ring, s.late);
      CHECK_MSG(first.dq.bytes() == again.dq.bytes(), "dQ differs in bits with %s", s.name);
      CHECK_MSG(first.dk.bytes() == again.dk.bytes(), "dK differs in bits with %s", s.name);
      CHECK_MSG(first.dv.bytes() == again.dv.bytes(), "dV differs in bits with %s", s.name);
    }
  }
}

// Cases at D = 64 small enough for the emulator: the tensor-core kernels' sizes.
std::vector<AttentionCase> tensor_core_cases(dilattn_dtype dtype) {
  std::vector<AttentionCase> cases;
  AttentionCase c;
  c.name = "dense_causal_d64";
  c.Nq = c.Nk = 64;
  c.H = 2;
  c.Hkv = 1;
  c.D = 64;
  c.causal = true;
  c.dtype = dtype;
  cases.push_back(c);
  c.name = "dilated_d64";
  c.Hkv = 2;
  c.causal = false;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {16, 64};
  c.dilations = {1, 2};
  cases.push_back(c);
  return cases;
}

// SPEC 8's bounds for `dtype`; with dropout dQ and dK within them times 1.25 / (1 - p) (SPEC 12:
// the tensor-core backward's dQ and dK); d_sinks by SPEC 8's relative bound.
ringtest::OptionBounds spec8_bounds(dilattn_dtype dtype) {
  const spec8::Tolerance t = spec8::of(dtype);
  ringtest::OptionBounds b;
  b.o = t;
  b.lse = spec8::lse();
  b.grad = t;
  b.d_sinks = t.rtol;
  b.dropout_widens_dq_dk = true;
  return b;
}

void each_option() {
  CaseScope scope("ring_emu_options_within_spec8");
  std::vector<ringtest::Ring> rings{{3, DILATTN_RING_ZIGZAG, DILATTN_BACKEND_EMU},
                                    {4, DILATTN_RING_CONTIGUOUS, DILATTN_BACKEND_EMU}};
  std::vector<AttentionCase> f32 = tensor_core_cases(DILATTN_F32);
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32))
    if (emu_sized(c)) f32.push_back(c);
  ringtest::check_option_cases(rings, spec8_bounds(DILATTN_F32), f32);
  ringtest::check_option_cases(rings, spec8_bounds(DILATTN_F16), tensor_core_cases(DILATTN_F16));
}

void hopper_cases() {
  CaseScope scope("ring_emu_hopper_within_spec8");
  const uint64_t before = dilattn::emu::wgmma_launch_count();
  for (dilattn_dtype dtype : {DILATTN_F16, DILATTN_BF16})
    for (const AttentionCase& c : tensor_core_cases(dtype)) {
      CaseScope named(c.name + (dtype == DILATTN_F16 ? "/f16" : "/bf16"));
      const Inputs in = make_inputs(c, 17, 2.0);
      check_forward(c, in, 2, DILATTN_RING_CONTIGUOUS);
      check_forward(c, in, 3, DILATTN_RING_ZIGZAG);
      check_backward(c, in, 3, DILATTN_RING_ZIGZAG);
    }
  const uint64_t launched = dilattn::emu::wgmma_launch_count() - before;
  CHECK_MSG(launched > 0, "the ring's sub-problems launched forward_wgmma.cu %llu times",
            static_cast<unsigned long long>(launched));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "hopper") {
    simt::set_emulated_device(9, 0);  // before the first call (the launcher reads it once)
    hopper_cases();
    return finish("ring_emu_hopper_within_spec8");
  }
  each_option();
  every_case(false);
  every_case(true);
  bf16_cases();
  schedule_independent();
  return finish("ring_emu_matches_reference");
}
