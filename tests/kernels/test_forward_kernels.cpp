// test_forward_kernels.cpp - every CUDA forward kernel x dtype x kind, run by the SIMT
// emulator (backend emu) and compared with the f64 reference (backend ref), SPEC 8 tolerances.
//
// Usage: test_forward_kernels simt|mma|mma_tf32 (mma: f16 and bf16; mma_tf32: f32, 3xTF32).
// Kinds: dense, causal with Nq < Nk and Nq > Nk (rows with no key: O = 0, LSE = -inf), GQA,
// strided views, dilated in each head mode (mod, block, groups) with partial and clipped
// segments, causal dilated, block-sparse with one mask and per head, an empty BSR row,
// bq != bk, causal. Every case runs under ascending, descending and shuffled thread order; the
// outputs must be bitwise identical (no race, no order-dependent sum), and the ascending one
// within SPEC 8 of the reference.
// forward_kernel_for (cuda/kernel_choice.h) must name the kernel this run is about for every
// case. The mma kernels' own edges: a second, partial query tile (BR = 128 rows at D = 64, 64
// at D = 128) and a partial last key chunk (64 keys; mma_tf32 at D = 128: 32); causal with GQA
// over several chunks; one dilated branch with r > 1 (rows the offset does not select are
// written by the kernel as empty, no workspace); block-sparse with key blocks of two chunks and
// causally empty spans; K and V rows that are not 16-byte aligned (element loads instead of
// cp.async).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_case.h"
#include "kernel_choice.h"

namespace {

using Case = harness::AttentionCase;

std::vector<Case> cases_for(const std::string& kernel) {
  std::vector<Case> out;
  const bool mma = kernel == "mma" || kernel == "mma_tf32";
  const std::vector<dilattn_dtype> dtypes =
      kernel == "mma"        ? std::vector<dilattn_dtype>{DILATTN_F16, DILATTN_BF16}
      : kernel == "mma_tf32" ? std::vector<dilattn_dtype>{DILATTN_F32}
                             : std::vector<dilattn_dtype>{DILATTN_F32, DILATTN_F16, DILATTN_BF16};
  for (dilattn_dtype t : dtypes) {
    // Two head dims per dtype, alternating between cases: MMA and MMA_TF32 take 64 and 128;
    // SIMT runs every dtype at dims they do not take (40, 8).
    const int64_t dims[2] = {mma ? 64 : 40, mma ? 128 : 8};
    int variant = 0;
    auto base = [&](const char* name) {
      Case c;
      c.name = std::string(kernel) + "/" + dilattn::dtype_name(t) + "/" + name;
      c.dtype = t;
      c.D = dims[variant++ % 2];
      return c;
    };
    Case c = base("dense");
    c.B = 2; c.Nq = c.Nk = 33; c.H = c.Hkv = 2;
    out.push_back(c);
    c = base("causal_nq_lt_nk");
    c.Nq = 20; c.Nk = 37; c.H = c.Hkv = 2; c.causal = true;
    out.push_back(c);
    c = base("causal_nq_gt_nk_empty_rows");
    c.Nq = 37; c.Nk = 20; c.causal = true;
    out.push_back(c);
    c = base("gqa_causal_strided");
    c.Nq = c.Nk = 29; c.H = 4; c.Hkv = 2; c.causal = true;
    c.input_layout = c.output_layout = {false, 8};
    out.push_back(c);
    c = base("dilated_mod_partial");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 50; c.H = 4; c.Hkv = 2;
    c.segments = {8, 16, 32}; c.dilations = {1, 2, 4}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("dilated_block");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 50; c.H = 4; c.Hkv = 4;
    c.segments = {8, 16, 32}; c.dilations = {1, 2, 4}; c.head_mode = DILATTN_HEADS_BLOCK;
    out.push_back(c);
    c = base("dilated_groups");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 50; c.H = 3; c.Hkv = 3;
    c.segments = {8, 16, 32}; c.dilations = {1, 2, 4}; c.head_mode = DILATTN_HEADS_GROUPS;
    out.push_back(c);
    c = base("dilated_causal_clipped_segment");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 45; c.H = 2; c.Hkv = 1; c.causal = true;
    c.segments = {16, 64}; c.dilations = {2, 4}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("sparse_local_sink_empty_row");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = 70; c.H = 2; c.Hkv = 1;
    c.mask.bq = c.mask.bk = 16;
    kcase::local_sink_mask(c, 2, 0);
    out.push_back(c);
    c = base("sparse_per_head_bq32_bk16_causal");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = 70; c.H = 2; c.Hkv = 2; c.causal = true;
    c.mask.bq = 32; c.mask.bk = 16; c.mask.heads = 2;
    kcase::local_sink_mask(c, -1, 16);
    out.push_back(c);
    if (!mma) continue;
    c = base("partial_query_tile_and_key_chunk");
    c.Nq = 150; c.Nk = 150; c.H = c.Hkv = 1;
    c.D = t == DILATTN_BF16 ? 128 : 64;
    out.push_back(c);
    c = base("gqa_causal_several_chunks");
    c.Nq = 70; c.Nk = 140; c.H = 4; c.Hkv = 2; c.causal = true;
    out.push_back(c);
    c = base("dilated_one_branch_gaps");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 100; c.H = 3; c.Hkv = 1;
    c.segments = {40}; c.dilations = {3}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("dilated_two_branches_causal");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 150; c.H = 2; c.Hkv = 2; c.causal = true;
    c.segments = {100, 150}; c.dilations = {1, 2}; c.head_mode = DILATTN_HEADS_BLOCK;
    out.push_back(c);
    c = base("sparse_two_chunk_blocks_causal");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = 300; c.H = 2; c.Hkv = 1; c.causal = true;
    c.mask.bq = 64; c.mask.bk = 128;
    kcase::local_sink_mask(c, 1, 0);
    out.push_back(c);
    c = base("unaligned_rows_element_loads");
    c.Nq = 40; c.Nk = 90; c.H = c.Hkv = 2; c.causal = true;
    c.input_layout = {false, 4};  // rows of D + 4 elements: not 16-byte multiples
    c.output_layout = {true, 2};
    out.push_back(c);
  }
  if (!mma) {  // the largest head dims: shared memory above the 48 KiB default (opt-in)
    for (int64_t D : {192, 256}) {
      Case c;
      c.name = "simt/f32/dense_causal_d" + std::to_string(D);
      c.D = D; c.Nq = c.Nk = 20; c.causal = true;
      out.push_back(c);
    }
  }
  return out;
}

void run_case(const Case& c, const std::string& kernel) {
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  const dilattn::KernelChoice expected = kernel == "mma"        ? dilattn::KernelChoice::mma
                                         : kernel == "mma_tf32" ? dilattn::KernelChoice::mma_tf32
                                                                : dilattn::KernelChoice::simt;
  const dilattn::KernelChoice chosen = dilattn::forward_kernel_for(c.dtype, c.D, 8);  // sm_80
  if (!CHECK_MSG(chosen == expected, "D = %lld runs %s, not %s", static_cast<long long>(c.D),
                 dilattn::kernel_name(chosen), kernel.c_str()))
    return;
  const harness::Inputs in = kcase::random_inputs(c);
  const harness::Forward ref =
      harness::run_forward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const harness::Forward asc = kcase::run_emu_in_thread_orders(c, in);
  CHECK_CLOSE("O", asc.o, ref.o, spec8::of(c.dtype));
  CHECK_CLOSE("LSE", asc.lse, ref.lse, spec8::lse());
  // A case whose reference has no finite LSE checks little; each case here has some.
  int64_t finite = 0;
  for (double x : ref.lse.values()) finite += std::isfinite(x) ? 1 : 0;
  CHECK_MSG(finite > 0, "no row has a key");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "simt") != 0 && std::strcmp(argv[1], "mma") != 0 &&
                    std::strcmp(argv[1], "mma_tf32") != 0)) {
    std::fprintf(stderr, "usage: %s simt|mma|mma_tf32\n", argv[0]);
    return 2;
  }
  // The choice itself (cuda/kernel_choice.h): MMA needs f16/bf16, MMA_TF32 f32, both D 64 or
  // 128 and sm_80+ (mma.sync for bf16 and tf32, cp.async); everything else runs SIMT.
  using dilattn::KernelChoice;
  using dilattn::forward_kernel_for;
  CHECK(forward_kernel_for(DILATTN_F16, 64, 8) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_BF16, 128, 9) == KernelChoice::mma);
  CHECK(forward_kernel_for(DILATTN_F16, 64, 7) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F32, 64, 9) == KernelChoice::mma_tf32);
  CHECK(forward_kernel_for(DILATTN_F32, 128, 8) == KernelChoice::mma_tf32);
  CHECK(forward_kernel_for(DILATTN_F32, 128, 7) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F32, 96, 8) == KernelChoice::simt);
  CHECK(forward_kernel_for(DILATTN_F64, 64, 8) == KernelChoice::simt);  // refused by can_run
  CHECK(forward_kernel_for(DILATTN_BF16, 96, 8) == KernelChoice::simt);
  for (const Case& c : cases_for(argv[1])) run_case(c, argv[1]);
  return harness::finish((std::string("kernels_forward_") + argv[1]).c_str());
}
