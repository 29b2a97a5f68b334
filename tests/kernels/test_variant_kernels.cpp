// test_variant_kernels.cpp - the CUDA kernels' SPEC 10.1 and 10.3 options (sliding window,
// softcap, ALiBi per head and per batch x head, sinks), forward and backward, run on the
// backend DILATTN_TEST_BACKEND names (emu, the default: the SIMT emulator; cuda: a GPU) and
// compared with the f64 reference (backend ref): O and LSE, then dQ, dK, dV and d_sinks of a
// backward from the forward's own O and LSE, each within SPEC 8.
//
// Every option alone and together, over dense, causal (with rows the window or causal rule
// empties), GQA with strided views, dilated (several branches: the sink joins each row once;
// one branch with r > 1: the rows it does not select get LSE = the sink), block-sparse with an
// empty BSR row, in f32, f16 and bf16, on each kernel that runs them: the SIMT variant
// instances (head dims 8 to 16), and the tensor-core kernels' (forward_mma.cu and
// backward_mma.cu for f16 and bf16, forward_mma_tf32.cu and backward_mma_tf32.cu for f32, D = 64
// and 128, cuda/mma_variants.cuh) with every option
// alone and all together, causal with Nq != Nk, GQA, dilated, block-sparse and windows whose
// tiles skip whole key chunks; every case asserts the kernels kernel_choice.h picks for it.
// Several cases put a NaN in one K and V row, or one Q row: NaN exactly where the reference has
// it, so a row whose window leaves the key out stays finite, and so does the dK of a key the NaN
// row's window leaves out (no 0 * NaN from a pair of a tile's chunk that is not seen). Each case
// runs in the emulator's three thread orders (kernel_case.h) and every output, d_sinks
// included, must be the same bits in each (SPEC 6: deterministic).
//
// Argument wgmma: the f16 and bf16 cases with sinks alone on the Hopper forward
// (cuda/forward_wgmma.cu: the emulated device set to 9.0 and DILATTN_CUDA_WGMMA=1), which joins
// each row's sink as it finishes (dense, causal with empty rows, dilated with one branch and
// its gaps, two branches); the calls must have launched it (hopper_launches.h).
//
// DILATTN_TEST_CASES=NAME[,NAME...] keeps only the cases of those names (the part after the
// last '/').
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hopper_launches.h"
#include "kernel_cases.h"
#include "kernel_choice.h"

namespace {

using Case = harness::AttentionCase;
using dilattn::KernelChoice;

struct VariantCase {
  Case c;
  std::vector<double> sinks;  // H logits when c.sinks
  int64_t nan_key = -1;       // >= 0: K[0, nan_key, 0, 0] = V[0, nan_key, 0, 0] = NaN
  int64_t nan_query = -1;     // >= 0: Q[0, nan_query, 0, 0] = NaN
  // The kernels kernel_choice.h must pick for the case on sm_80 (the emulator's device).
  KernelChoice forward = KernelChoice::simt, backward = KernelChoice::simt;
};

using Outputs = kcase::OptionOutputs;

// Forward, then backward from that forward's O and LSE, through the _ex calls (the sinks ride
// in dilattn_call_options).
Outputs run_on(const VariantCase& vc, const harness::Inputs& in, dilattn_backend backend) {
  const dilattn_call_options options = dilattn_call_options_make();
  return kcase::run_with_options(vc.c, in, backend, &options, vc.sinks);
}

void run_case(const VariantCase& vc, dilattn_backend backend) {
  const Case& c = vc.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  // The kernels this case is about are the ones that run it.
  CHECK(dilattn::forward_kernel_for(c.dtype, c.D, 8, true) == vc.forward);
  CHECK(dilattn::backward_kernel_for(c.dtype, c.D, 8, true) == vc.backward);
  harness::Inputs in = kcase::random_inputs(c);
  if (vc.nan_key >= 0) {
    in.k.set(0, vc.nan_key, 0, 0, NAN);
    in.v.set(0, vc.nan_key, 0, 0, NAN);
  }
  if (vc.nan_query >= 0) in.q.set(0, vc.nan_query, 0, 0, NAN);
  const Outputs ref = run_on(vc, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  std::vector<Outputs> runs;
  kcase::repeated(backend, [&](int) { runs.push_back(run_on(vc, in, backend)); });
  for (size_t r = 1; r < runs.size(); ++r)
    CHECK_MSG(kcase::bits_of(runs[r]) == kcase::bits_of(runs[0]),
              "%s run %zu gives other bits than the first",
              dilattn_backend_name(backend), r);
  const Outputs& got = runs[0];
  const spec8::Tolerance tol = spec8::of(c.dtype);
  // SPEC 12: the 3xTF32 backward on a GPU holds dQ and dK to atol 2e-5 (tensor cores sum an
  // mma's products their own way, not by the emulator's IEEE steps).
  const spec8::Tolerance grad_tol =
      backend == DILATTN_BACKEND_CUDA && vc.backward == dilattn::KernelChoice::mma_tf32
          ? spec8::Tolerance{2e-5, tol.rtol}
          : tol;
  CHECK_CLOSE("O", got.o, ref.o, tol);
  CHECK_CLOSE("LSE", got.lse, ref.lse, spec8::lse());
  CHECK_CLOSE("dQ", got.dq, ref.dq, grad_tol);
  CHECK_CLOSE("dK", got.dk, ref.dk, grad_tol);
  CHECK_CLOSE("dV", got.dv, ref.dv, tol);
  if (c.sinks) CHECK_CLOSE("d_sinks", got.d_sinks, ref.d_sinks, tol);
  // A case must check something: some finite LSE, some nonzero reference gradient.
  int64_t finite = 0, nonzero = 0;
  for (double x : ref.lse.values()) finite += std::isfinite(x) ? 1 : 0;
  for (const harness::Tensor* g : {&ref.dq, &ref.dk, &ref.dv})
    for (double x : g->values()) nonzero += x != 0 && std::isfinite(x) ? 1 : 0;
  CHECK_MSG(finite > 0 && nonzero > 0, "the reference has no finite LSE or no gradient");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

std::vector<VariantCase> variant_cases() {
  std::vector<VariantCase> out;
  for (dilattn_dtype t : {DILATTN_F32, DILATTN_F16, DILATTN_BF16}) {
    const bool f32 = t == DILATTN_F32;
    auto base = [&](const char* name, int64_t D) {
      VariantCase vc;
      vc.c.name = std::string("simt/") + dilattn::dtype_name(t) + "/" + name;
      vc.c.dtype = t;
      vc.c.D = D;
      return vc;
    };
    auto with_sinks = [](VariantCase& vc, std::vector<double> sinks) {
      vc.c.sinks = true;
      vc.sinks = std::move(sinks);
    };
    // All four together on each kind, every dtype.
    VariantCase vc = base("all_dense_causal_gqa_strided", 16);
    vc.c.B = 2; vc.c.Nq = 21; vc.c.Nk = 27; vc.c.H = 4; vc.c.Hkv = 2; vc.c.causal = true;
    vc.c.input_layout = vc.c.output_layout = {false, 8};
    vc.c.window_left = 6; vc.c.softcap = 1.5;
    vc.c.alibi_slopes = {0.5, 0.25, 0.125, 0.0625, 0.3, 0.2, 0.1, -0.05};  // B x H
    with_sinks(vc, {0.5, -INFINITY, 1.25, -0.75});
    out.push_back(vc);
    vc = base("all_dilated_two_branches", 8);
    vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 30; vc.c.H = 2; vc.c.Hkv = 1;
    vc.c.segments = {8, 16}; vc.c.dilations = {1, 2}; vc.c.head_mode = DILATTN_HEADS_MOD;
    vc.c.window_left = 3; vc.c.window_right = 4; vc.c.softcap = 2.0;
    vc.c.alibi_slopes = {0.25, 0.5};
    with_sinks(vc, {0.3, -1.0});
    out.push_back(vc);
    vc = base("all_sparse_empty_row", 8);
    vc.c.kind = DILATTN_KIND_BLOCK_SPARSE; vc.c.Nq = vc.c.Nk = 36; vc.c.H = 2; vc.c.Hkv = 1;
    vc.c.mask.bq = vc.c.mask.bk = 8;
    kcase::local_sink_mask(vc.c, 2, 0);
    vc.c.window_left = 5; vc.c.window_right = 2; vc.c.softcap = 3.0;
    vc.c.alibi_slopes = {0.2, 0.4};
    with_sinks(vc, {0.0, 2.0});
    out.push_back(vc);
    if (!f32) continue;
    // Each option alone (f32).
    vc = base("window_dense_nq_lt_nk", 12);
    vc.c.B = 2; vc.c.Nq = 17; vc.c.Nk = 40; vc.c.H = 2; vc.c.Hkv = 1;
    vc.c.window_left = 3; vc.c.window_right = 5;  // several key chunks, most skipped per tile
    out.push_back(vc);
    vc = base("window_causal_empty_rows", 8);
    vc.c.Nq = 30; vc.c.Nk = 20; vc.c.H = vc.c.Hkv = 2; vc.c.causal = true;
    vc.c.window_left = 0;  // each row sees one key; the first 10 rows none (causal)
    out.push_back(vc);
    vc = base("window_left_only_dilated_block", 8);
    vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 40; vc.c.H = vc.c.Hkv = 2;
    vc.c.segments = {16, 40}; vc.c.dilations = {2, 4}; vc.c.head_mode = DILATTN_HEADS_BLOCK;
    vc.c.window_left = 9;
    out.push_back(vc);
    vc = base("softcap_causal", 12);
    vc.c.Nq = vc.c.Nk = 25; vc.c.H = vc.c.Hkv = 2; vc.c.causal = true; vc.c.softcap = 0.75;
    vc.c.scale = 2.0;  // scores beyond the softcap, where tanh bends
    out.push_back(vc);
    vc = base("alibi_per_head_gqa", 8);
    vc.c.Nq = 19; vc.c.Nk = 23; vc.c.H = 4; vc.c.Hkv = 2;
    vc.c.alibi_slopes = {0.5, 0.25, 0.0, -0.125};
    out.push_back(vc);
    vc = base("alibi_per_batch_head_dilated_groups", 8);
    vc.c.kind = DILATTN_KIND_DILATED; vc.c.B = 2; vc.c.Nq = vc.c.Nk = 24; vc.c.H = 3;
    vc.c.Hkv = 3; vc.c.segments = {8, 12, 24}; vc.c.dilations = {1, 2, 3};
    vc.c.head_mode = DILATTN_HEADS_GROUPS;
    vc.c.alibi_slopes = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
    out.push_back(vc);
    vc = base("sinks_dense", 8);
    vc.c.B = 2; vc.c.Nq = vc.c.Nk = 18; vc.c.H = 2; vc.c.Hkv = 1;
    with_sinks(vc, {1.5, -2.0});
    out.push_back(vc);
    vc = base("sinks_dilated_one_branch_gaps", 8);  // unselected rows: O = 0, LSE = the sink
    vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 26; vc.c.H = 3; vc.c.Hkv = 1;
    vc.c.segments = {12}; vc.c.dilations = {3}; vc.c.head_mode = DILATTN_HEADS_MOD;
    with_sinks(vc, {0.25, -INFINITY, -1.0});
    out.push_back(vc);
    vc = base("sinks_causal_empty_rows", 8);  // rows with no key: O = 0, LSE = the sink
    vc.c.Nq = 24; vc.c.Nk = 16; vc.c.causal = true; vc.c.H = vc.c.Hkv = 1;
    with_sinks(vc, {0.5});
    out.push_back(vc);
    // NaN in K and V row 10: the rows that see it are NaN, the others (the window leaves it
    // out) are not, forward and backward.
    vc = base("nan_key_window", 8);
    vc.c.Nq = vc.c.Nk = 30; vc.c.window_left = 2; vc.c.window_right = 1;
    vc.nan_key = 10;
    out.push_back(vc);
    vc = base("nan_key_all_options_sinks", 8);
    vc.c.Nq = vc.c.Nk = 30; vc.c.causal = true; vc.c.window_left = 4; vc.c.softcap = 2.0;
    vc.c.alibi_slopes = {0.2};
    with_sinks(vc, {0.1});
    vc.nan_key = 12;
    out.push_back(vc);
  }
  // The tensor-core kernels' variant instances: f16 and bf16 on forward_mma.cu and
  // backward_mma.cu, f32 on the _tf32 ones, D = 64 and 128 (forward tiles of 64 rows and 64
  // keys, f32: 128 rows at D = 64, 32 keys at D = 128; backward: 64-row query tiles, 64-key key
  // tiles).
  for (dilattn_dtype t : {DILATTN_F16, DILATTN_BF16, DILATTN_F32}) {
    for (int64_t D : {64, 128}) {
      const KernelChoice fwd = t == DILATTN_F32 ? KernelChoice::mma_tf32 : KernelChoice::mma;
      auto base = [&](const char* name) {
        VariantCase vc;
        vc.c.name = std::string(dilattn::kernel_name(fwd)) + "/" + dilattn::dtype_name(t) +
                    "/d" + std::to_string(D) + "/" + name;
        vc.c.dtype = t;
        vc.c.D = D;
        vc.forward = fwd;
        vc.backward = fwd;
        return vc;
      };
      auto with_sinks = [](VariantCase& vc, std::vector<double> sinks) {
        vc.c.sinks = true;
        vc.sinks = std::move(sinks);
      };
      // All four together: causal with Nq < Nk (rows see keys 60 and on: a tile's span starts
      // past the first chunk), GQA, strided views, ALiBi per batch x head.
      VariantCase vc = base("all_causal_gqa_nq_lt_nk_strided");
      vc.c.B = 2; vc.c.Nq = 70; vc.c.Nk = 150; vc.c.H = 4; vc.c.Hkv = 2; vc.c.causal = true;
      vc.c.input_layout = vc.c.output_layout = {false, 8};
      vc.c.window_left = 20; vc.c.softcap = 1.5;
      vc.c.alibi_slopes = {0.5, 0.25, 0.125, 0.0625, 0.3, 0.2, 0.1, -0.05};
      with_sinks(vc, {0.5, -INFINITY, 1.25, -0.75});
      out.push_back(vc);
      // A window of 9 keys over 260: each query tile walks two or three of the five chunks, each
      // key tile of the dK/dV pass the query rows of two or three of the five query tiles.
      vc = base("window_skips_chunks");
      vc.c.Nq = vc.c.Nk = 260; vc.c.window_left = 5; vc.c.window_right = 3;
      out.push_back(vc);
      // Nq > Nk, causal, one key a row: the first 60 rows see none, empty warps and tiles.
      vc = base("window_zero_causal_nq_gt_nk");
      vc.c.Nq = 150; vc.c.Nk = 90; vc.c.causal = true; vc.c.window_left = 0;
      out.push_back(vc);
      vc = base("softcap_dense");
      vc.c.Nq = 90; vc.c.Nk = 100; vc.c.softcap = 0.75;
      vc.c.scale = 0.5;  // scores beyond the softcap, where tanh bends
      out.push_back(vc);
      vc = base("alibi_per_head_gqa");
      vc.c.Nq = 80; vc.c.Nk = 100; vc.c.H = 4; vc.c.Hkv = 2;
      vc.c.alibi_slopes = {0.5, 0.25, 0.0, -0.125};
      out.push_back(vc);
      vc = base("sinks_causal_empty_rows");  // rows with no key: O = 0, LSE = the sink
      vc.c.Nq = 90; vc.c.Nk = 70; vc.c.causal = true;
      with_sinks(vc, {0.5});
      out.push_back(vc);
      // Sinks alone run the plain instances (launch.cu's pick_kernel): the sink joins each row
      // as it finishes (one branch, its gaps' LSE the sink) or starts the workspace (two).
      vc = base("sinks_dilated_one_branch_gaps");
      vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 100; vc.c.H = 3; vc.c.Hkv = 1;
      vc.c.segments = {48}; vc.c.dilations = {3}; vc.c.head_mode = DILATTN_HEADS_MOD;
      with_sinks(vc, {0.25, -INFINITY, -1.0});
      out.push_back(vc);
      vc = base("sinks_dilated_two_branches");
      vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 150; vc.c.H = 2; vc.c.Hkv = 1;
      vc.c.segments = {64, 150}; vc.c.dilations = {1, 2}; vc.c.head_mode = DILATTN_HEADS_MOD;
      with_sinks(vc, {0.3, -1.0});
      out.push_back(vc);
      vc = base("all_dilated_two_branches");  // the sink joins each row once (workspace)
      vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 150; vc.c.H = 2; vc.c.Hkv = 1;
      vc.c.segments = {64, 150}; vc.c.dilations = {1, 2}; vc.c.head_mode = DILATTN_HEADS_MOD;
      vc.c.window_left = 10; vc.c.window_right = 6; vc.c.softcap = 2.0;
      vc.c.alibi_slopes = {0.25, 0.5};
      with_sinks(vc, {0.3, -1.0});
      out.push_back(vc);
      vc = base("sinks_window_dilated_one_branch_gaps");  // unselected rows: LSE = the sink
      vc.c.kind = DILATTN_KIND_DILATED; vc.c.Nq = vc.c.Nk = 100; vc.c.H = 3; vc.c.Hkv = 1;
      vc.c.segments = {40}; vc.c.dilations = {3}; vc.c.head_mode = DILATTN_HEADS_MOD;
      vc.c.window_left = 4;
      with_sinks(vc, {0.25, -INFINITY, -1.0});
      out.push_back(vc);
      vc = base("all_sparse_empty_row");
      vc.c.kind = DILATTN_KIND_BLOCK_SPARSE; vc.c.Nq = vc.c.Nk = 200; vc.c.H = 2; vc.c.Hkv = 1;
      vc.c.mask.bq = 64; vc.c.mask.bk = 32;
      kcase::local_sink_mask(vc.c, 1, 0);
      vc.c.window_left = 40; vc.c.window_right = 8; vc.c.softcap = 3.0;
      vc.c.alibi_slopes = {0.2, 0.4};
      with_sinks(vc, {0.0, 2.0});
      out.push_back(vc);
      // NaN in K and V row 70: the rows whose window holds it are NaN, their tile neighbours
      // (the same chunk, keys before or after their window) are not.
      vc = base("nan_key_window");
      vc.c.Nq = vc.c.Nk = 150; vc.c.window_left = 2; vc.c.window_right = 1;
      vc.nan_key = 70;
      out.push_back(vc);
      // NaN in Q row 70: its dK and dV terms reach the keys of its window only, though the
      // dK/dV pass's tiles hold its row next to keys it does not see.
      vc = base("nan_query_window");
      vc.c.Nq = vc.c.Nk = 150; vc.c.window_left = 3; vc.c.window_right = 2;
      vc.nan_query = 70;
      out.push_back(vc);
      // One key a row, 15 keys to the right of the diagonal (Nk - Nq = 15): the first query row
      // of a dK/dV chunk sees only the last key of a warp's 16 (key 15), so no warp may skip a
      // chunk whose rows reach its keys with the last one.
      vc = base("window_one_key_warp_edge");
      vc.c.Nq = 100; vc.c.Nk = 115; vc.c.window_left = 0; vc.c.window_right = 0;
      out.push_back(vc);
      vc = base("nan_key_all_options_sinks");
      vc.c.Nq = vc.c.Nk = 150; vc.c.causal = true; vc.c.window_left = 4; vc.c.softcap = 2.0;
      vc.c.alibi_slopes = {0.2};
      with_sinks(vc, {0.1});
      vc.nan_key = 70;
      out.push_back(vc);
    }
  }
  // DILATTN_TEST_CASES: keep the cases named (kernel_case.h, case_asked_for).
  std::vector<VariantCase> kept;
  for (const VariantCase& vc : out)
    if (kcase::case_asked_for(vc.c.name)) kept.push_back(vc);
  return kept;
}

}  // namespace

// The cases with sinks and no other option, f16 and bf16 (the Hopper forward's dtypes).
bool sinks_alone_on_hopper(const VariantCase& vc) {
  const Case& c = vc.c;
  return c.sinks && c.window_left < 0 && c.window_right < 0 && c.softcap == 0 &&
         c.alibi_slopes.empty() && vc.forward == KernelChoice::mma &&
         c.kind != DILATTN_KIND_BLOCK_SPARSE;
}

int main(int argc, char** argv) {
  const bool hopper = argc == 2 && std::string(argv[1]) == "wgmma";
  if (argc > 2 || (argc == 2 && !hopper)) {
    std::fprintf(stderr, "usage: %s [wgmma]\n", argv[0]);
    return 2;
  }
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  if (hopper) {  // before the first call: device facts are cached
    setenv("DILATTN_CUDA_WGMMA", "1", 1);
    if (backend == DILATTN_BACKEND_EMU) simt::set_emulated_device(9, 0);
    int ran = 0;
    for (const VariantCase& vc : variant_cases()) {
      if (!sinks_alone_on_hopper(vc)) continue;
      const uint64_t before = hopper_launches(backend);
      run_case(vc, backend);
      CHECK_MSG(hopper_launches(backend) > before, "%s: forward_wgmma.cu never launched",
                vc.c.name.c_str());
      ++ran;
    }
    CHECK_MSG(ran >= 4, "%d cases with sinks alone for the Hopper forward", ran);
    return harness::finish(
        (std::string("kernels_variants_wgmma on ") + dilattn_backend_name(backend)).c_str());
  }
  // The choice itself: options do not change it (every kernel has a variant instance).
  CHECK(dilattn::forward_kernel_for(DILATTN_F16, 64, 8, true) == KernelChoice::mma);
  CHECK(dilattn::forward_kernel_for(DILATTN_F32, 128, 9, true) == KernelChoice::mma_tf32);
  CHECK(dilattn::forward_kernel_for(DILATTN_BF16, 32, 9, true) == KernelChoice::simt);
  CHECK(dilattn::backward_kernel_for(DILATTN_F32, 128, 9, true) == KernelChoice::mma_tf32);
  CHECK(dilattn::backward_kernel_for(DILATTN_BF16, 64, 8, true) == KernelChoice::mma);
  CHECK(dilattn::forward_kernel_for(DILATTN_F16, 64, 8, false) == KernelChoice::mma);
  CHECK(dilattn::backward_kernel_for(DILATTN_F32, 128, 9, false) == KernelChoice::mma_tf32);
  for (const VariantCase& vc : variant_cases()) run_case(vc, backend);
  return harness::finish(
      (std::string("kernels_variants on ") + dilattn_backend_name(backend)).c_str());
}
