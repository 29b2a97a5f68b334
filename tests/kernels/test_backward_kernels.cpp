// test_backward_kernels.cpp - every CUDA backward kernel x dtype x kind (SPEC 6), run by the
// SIMT emulator (backend emu) and compared with the f64 reference backward (backend ref).
//
// Usage: test_backward_kernels simt|wmma. Each case runs forward then backward on each backend
// (each with its own O and LSE) and compares dQ, dK, dV. Kinds: dense, causal with Nq < Nk and
// Nq > Nk (rows with no key: no gradient), GQA (dK, dV summed over a kv head's query heads)
// with strided views, dilated in each head mode (mod, block, groups) with partial and clipped
// segments, causal dilated (keys reached by two branches count twice), block-sparse with one
// mask and per head, an empty BSR row, bq != bk, causal. Head dims 8, 64 and 128 (SIMT also an
// odd one). Every case runs under ascending, descending and shuffled thread order; the
// gradients must be bitwise identical (no race, no order-dependent sum: SPEC 6's determinism),
// and the ascending ones within SPEC 8 of the reference.
// backward_kernel_for (cuda/kernel_choice.h) must name the kernel this run is about for every
// case.
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
  const bool wmma = kernel == "wmma";
  const std::vector<dilattn_dtype> dtypes =
      wmma ? std::vector<dilattn_dtype>{DILATTN_F16, DILATTN_BF16}
           : std::vector<dilattn_dtype>{DILATTN_F32, DILATTN_F16, DILATTN_BF16};
  for (dilattn_dtype t : dtypes) {
    // Head dims alternating between cases: WMMA takes 64 and 128; SIMT runs f16/bf16 at dims
    // WMMA does not take (8, 24), f32 at 8 and 64.
    const int64_t dims[2] = {wmma ? 64 : (t == DILATTN_F32 ? 64 : 24), wmma ? 128 : 8};
    int variant = 0;
    auto base = [&](const char* name) {
      Case c;
      c.name = std::string(kernel) + "/" + dilattn::dtype_name(t) + "/" + name;
      c.dtype = t;
      c.D = dims[variant++ % 2];
      return c;
    };
    Case c = base("dense");
    c.B = 2; c.Nq = c.Nk = 21; c.H = c.Hkv = 1;
    out.push_back(c);
    c = base("causal_nq_lt_nk");
    c.Nq = 13; c.Nk = 22; c.causal = true;
    out.push_back(c);
    c = base("causal_nq_gt_nk_empty_rows");
    c.Nq = 22; c.Nk = 13; c.causal = true;
    out.push_back(c);
    c = base("gqa_causal_strided");
    c.Nq = c.Nk = 19; c.H = 4; c.Hkv = 2; c.causal = true;
    c.input_layout = c.output_layout = {false, 8};
    out.push_back(c);
    c = base("dilated_mod_partial_gqa");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 27; c.H = 4; c.Hkv = 2;
    c.segments = {8, 16}; c.dilations = {1, 2}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("dilated_block");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 27; c.H = 2; c.Hkv = 2;
    c.segments = {8, 16}; c.dilations = {1, 2}; c.head_mode = DILATTN_HEADS_BLOCK;
    out.push_back(c);
    c = base("dilated_groups");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 27; c.H = 3; c.Hkv = 3;
    c.segments = {8, 16, 32}; c.dilations = {1, 2, 4}; c.head_mode = DILATTN_HEADS_GROUPS;
    out.push_back(c);
    c = base("dilated_causal_clipped_segment");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 23; c.H = 2; c.Hkv = 1; c.causal = true;
    c.segments = {8, 64}; c.dilations = {2, 3}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("sparse_local_sink_empty_row");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = 40; c.H = 2; c.Hkv = 1;
    c.mask.bq = c.mask.bk = 8;
    kcase::local_sink_mask(c, 2, 0);
    out.push_back(c);
    c = base("sparse_per_head_bq16_bk8_causal");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = 40; c.H = 2; c.Hkv = 2; c.causal = true;
    c.mask.bq = 16; c.mask.bk = 8; c.mask.heads = 2;
    kcase::local_sink_mask(c, -1, 8);
    out.push_back(c);
  }
  if (!wmma) {  // an odd head dim, and the largest ones (shared memory above 48 KiB)
    for (int64_t D : {5, 128}) {
      Case c;
      c.name = "simt/f32/dense_causal_d" + std::to_string(D);
      c.D = D; c.Nq = c.Nk = 12; c.causal = true;
      out.push_back(c);
    }
  }
  return out;
}

void run_case(const Case& c, const std::string& kernel) {
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  const dilattn::KernelChoice expected =
      kernel == "wmma" ? dilattn::KernelChoice::wmma : dilattn::KernelChoice::simt;
  const dilattn::KernelChoice chosen = dilattn::backward_kernel_for(c.dtype, c.D, 8);  // sm_80
  if (!CHECK_MSG(chosen == expected, "D = %lld runs %s, not %s", static_cast<long long>(c.D),
                 dilattn::kernel_name(chosen), kernel.c_str()))
    return;
  const harness::Inputs in = kcase::random_inputs(c);
  const harness::Gradients ref =
      kcase::run_forward_backward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const harness::Gradients asc = kcase::run_backward_in_thread_orders(c, in);
  // SPEC 8 as for O: no looser bound needed here (at these shapes the worst f16/bf16 element
  // uses 0.7 of it).
  const spec8::Tolerance tol = spec8::of(c.dtype);
  CHECK_CLOSE("dQ", asc.dq, ref.dq, tol);
  CHECK_CLOSE("dK", asc.dk, ref.dk, tol);
  CHECK_CLOSE("dV", asc.dv, ref.dv, tol);
  // A case whose reference gradients are all zero checks little; each case here has some.
  int64_t nonzero = 0;
  for (const harness::Tensor* g : {&ref.dq, &ref.dk, &ref.dv})
    for (double x : g->values()) nonzero += x != 0 ? 1 : 0;
  CHECK_MSG(nonzero > 0, "the reference gradients are all 0");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "simt") != 0 && std::strcmp(argv[1], "wmma") != 0)) {
    std::fprintf(stderr, "usage: %s simt|wmma\n", argv[0]);
    return 2;
  }
  for (const Case& c : cases_for(argv[1])) run_case(c, argv[1]);
  return harness::finish((std::string("kernels_backward_") + argv[1]).c_str());
}
