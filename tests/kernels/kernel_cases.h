// kernel_cases.h - the one case table of the forward and backward kernel tests
// (test_forward_kernels.cpp, test_backward_kernels.cpp): every kind a kernel must get right,
// each row with the forward tests' shape and the backward tests' (smaller, since the f64
// reference backward is the slow part), and the rows only one direction runs.
//
// Kernels, forward and backward: simt | mma (f16, bf16) | mma_tf32 (f32, 3xTF32); forward only:
// wgmma (f16, bf16, the Hopper kernel on an emulated sm_90, mma's cases). Kinds: dense,
// causal with Nq < Nk and Nq > Nk (rows with no key: O = 0, LSE = -inf, no gradient), GQA with
// strided views, dilated in each head mode (mod, block, groups) with partial and clipped
// segments, causal dilated, block-sparse with one mask and per head, an empty BSR row,
// bq != bk, causal. Head dims alternate between two per dtype: the
// tensor-core kernels take 64 and 128; SIMT runs dims they do not take.
// The tensor-core kernels' own edges, in both directions: a second, partial query tile and a
// partial last key chunk, causal GQA over several chunks, two causal dilated branches,
// block-sparse with key blocks of two chunks and causally empty spans, K and V rows that are
// not 16-byte aligned (element loads instead of cp.async), branches whose shared pairs the
// kernel computes once (SPEC 3.4, lib/pair_sharing.h); forward only, one dilated branch with
// r > 1 (rows the offset does not select are written by the kernel as empty, no workspace);
// backward only, more query rows than keys over several chunks. SIMT's largest head dims (shared
// memory above the 48 KiB default) end each SIMT list; the backward adds an odd head dim.
// DILATTN_TEST_CASES=KIND[,KIND...] keeps only the cases of those kinds (the name after the
// last '/', e.g. "dense": each kernel x dtype once), for slow runs such as compute-sanitizer
// (bench/gpu/first_light.sh); unset, every case runs. A filter that keeps nothing fails the
// test (check.h: no check ran).
#ifndef DILATTN_TESTS_KERNEL_CASES_H
#define DILATTN_TESTS_KERNEL_CASES_H

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_case.h"

namespace kcase {

enum class Direction { forward, backward };

// The cases whose kind DILATTN_TEST_CASES lists (all of them when it is unset or empty).
inline std::vector<harness::AttentionCase> only_kinds_asked_for(
    std::vector<harness::AttentionCase> cases) {
  std::vector<harness::AttentionCase> kept;
  for (const harness::AttentionCase& c : cases)
    if (case_asked_for(c.name)) kept.push_back(c);
  return kept;
}

inline std::vector<harness::AttentionCase> kernel_cases(Direction direction,
                                                        const std::string& kernel) {
  using Case = harness::AttentionCase;
  const bool bwd = direction == Direction::backward;
  // The forward's value, or the backward's.
  auto pick = [bwd](int64_t forward, int64_t backward) { return bwd ? backward : forward; };
  const bool tensor_core = kernel == "mma" || kernel == "mma_tf32" || kernel == "wgmma";
  std::vector<Case> out;
  for (dilattn_dtype t : dtypes_of(kernel)) {
    // Tensor cores: 64 and 128. SIMT: forward 40 and 8, backward 24 and 8 (dims the tensor-core
    // kernels do not take).
    const int64_t dims[2] = {tensor_core ? 64 : bwd ? 24 : 40, tensor_core ? 128 : 8};
    int variant = 0;
    auto base = [&](const char* name) {
      Case c;
      c.name = kernel + "/" + dilattn::dtype_name(t) + "/" + name;
      c.dtype = t;
      c.D = dims[variant++ % 2];
      return c;
    };
    Case c = base("dense");
    c.B = 2; c.Nq = c.Nk = pick(33, 21); c.H = c.Hkv = pick(2, 1);
    out.push_back(c);
    c = base("causal_nq_lt_nk");
    c.Nq = pick(20, 13); c.Nk = pick(37, 22); c.H = c.Hkv = pick(2, 1); c.causal = true;
    out.push_back(c);
    c = base("causal_nq_gt_nk_empty_rows");
    c.Nq = pick(37, 22); c.Nk = pick(20, 13); c.causal = true;
    out.push_back(c);
    c = base("gqa_causal_strided");
    c.Nq = c.Nk = pick(29, 19); c.H = 4; c.Hkv = 2; c.causal = true;
    c.input_layout = c.output_layout = {false, 8};
    out.push_back(c);
    c = base(bwd ? "dilated_mod_partial_gqa" : "dilated_mod_partial");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = pick(50, 27); c.H = 4; c.Hkv = 2;
    c.segments = bwd ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{8, 16, 32};
    c.dilations = bwd ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2, 4};
    c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("dilated_block");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = pick(50, 27); c.H = c.Hkv = pick(4, 2);
    c.segments = bwd ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{8, 16, 32};
    c.dilations = bwd ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2, 4};
    c.head_mode = DILATTN_HEADS_BLOCK;
    out.push_back(c);
    c = base("dilated_groups");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = pick(50, 27); c.H = 3; c.Hkv = 3;
    c.segments = {8, 16, 32}; c.dilations = {1, 2, 4}; c.head_mode = DILATTN_HEADS_GROUPS;
    out.push_back(c);
    c = base("dilated_causal_clipped_segment");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = pick(45, 23); c.H = 2; c.Hkv = 1;
    c.causal = true;
    c.segments = {pick(16, 8), 64}; c.dilations = {2, pick(4, 3)};
    c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("sparse_local_sink_empty_row");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = pick(70, 40); c.H = 2; c.Hkv = 1;
    c.mask.bq = c.mask.bk = pick(16, 8);
    local_sink_mask(c, 2, 0);
    out.push_back(c);
    c = base(bwd ? "sparse_per_head_bq16_bk8_causal" : "sparse_per_head_bq32_bk16_causal");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = pick(70, 40); c.H = 2; c.Hkv = 2;
    c.causal = true;
    c.mask.bq = pick(32, 16); c.mask.bk = pick(16, 8); c.mask.heads = 2;
    local_sink_mask(c, -1, pick(16, 8));
    out.push_back(c);
    if (!tensor_core) continue;
    // The tensor-core kernels' own edges, both directions: partial tiles and chunks (64 rows or
    // keys), several chunks, spans that end inside a chunk, element loads.
    c = base("partial_query_tile_and_key_chunk");
    c.Nq = 150; c.Nk = 150; c.H = c.Hkv = 1;
    c.D = t == DILATTN_BF16 ? 128 : 64;
    out.push_back(c);
    c = base("gqa_causal_several_chunks");
    c.Nq = 70; c.Nk = 140; c.H = 4; c.Hkv = 2; c.causal = true;
    out.push_back(c);
    if (bwd) {  // the dK/dV pass walks query chunks: more rows than keys
      c = base("causal_nq_gt_nk_several_chunks");
      c.Nq = 140; c.Nk = 75; c.causal = true;
    } else {  // the forward writes the rows one branch does not select (no workspace)
      c = base("dilated_one_branch_gaps");
      c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 100; c.H = 3; c.Hkv = 1;
      c.segments = {40}; c.dilations = {3}; c.head_mode = DILATTN_HEADS_MOD;
    }
    out.push_back(c);
    // SPEC 3.4's shared pairs (lib/pair_sharing.h), which the tensor-core kernels' plain
    // instances compute once where the branches nest: branches 1 and 2 cut their keys in their
    // rows' 256-segment of branch 0 from their span (the dK/dV pass: their rows in their keys'
    // segment), so their keys after it are a second span; branch 0 weighs its pairs by 1 + the
    // later branches holding them (3 for even rows and keys), branch 1 all its pairs by 2
    // (branch 2 holds them), branch 2 its even-even pairs by 0 (branch 1 computes them), in
    // both spans; a partial last segment.
    c = base("dilated_shared_pairs");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 640; c.H = 2; c.Hkv = 1;
    c.segments = {256, 512, 512}; c.dilations = {1, 2, 1}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    // The earlier branch with the larger dilation: no cut, branch 1 weighs the pairs branch 0
    // holds 0, and a causal row whose only key is one of them sums nothing there (l = 0). Two
    // query heads a kv head, of different offsets in branch 0 and the same in branch 1: the
    // dK/dV pass walks them in one block with weights of their own.
    c = base("dilated_shared_pairs_causal");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 512; c.H = 4; c.Hkv = 2; c.causal = true;
    c.segments = {256, 256}; c.dilations = {4, 1}; c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(c);
    c = base("dilated_two_branches_causal");
    c.kind = DILATTN_KIND_DILATED; c.Nq = c.Nk = 150; c.H = 2; c.Hkv = 2; c.causal = true;
    c.segments = {100, 150}; c.dilations = {1, 2}; c.head_mode = DILATTN_HEADS_BLOCK;
    out.push_back(c);
    c = base("sparse_two_chunk_blocks_causal");
    c.kind = DILATTN_KIND_BLOCK_SPARSE; c.Nq = c.Nk = pick(300, 200); c.H = 2; c.Hkv = 1;
    c.causal = true; c.mask.bq = 64; c.mask.bk = 128;
    local_sink_mask(c, 1, 0);
    out.push_back(c);
    c = base("unaligned_rows_element_loads");
    c.Nq = 40; c.Nk = 90; c.H = c.Hkv = 2; c.causal = true;
    c.input_layout = {false, 4};  // rows of D + 4 elements: not 16-byte multiples
    c.output_layout = {true, 2};
    out.push_back(c);
  }
  if (!tensor_core) {  // odd and largest head dims (shared memory above 48 KiB: opt-in)
    for (int64_t D : bwd ? std::vector<int64_t>{5, 192} : std::vector<int64_t>{192, 256}) {
      Case c;
      c.name = "simt/f32/dense_causal_d" + std::to_string(D);
      c.D = D; c.Nq = c.Nk = pick(20, 12); c.causal = true;
      out.push_back(c);
    }
  }
  return only_kinds_asked_for(out);
}

}  // namespace kcase

#endif  // DILATTN_TESTS_KERNEL_CASES_H
