// test_dropout_kernels.cpp - attention dropout (SPEC 11) in the CUDA kernels, forward and
// backward, run on the backend DILATTN_TEST_BACKEND names (emu, the default: the SIMT emulator;
// cuda: a GPU) and compared with the f64 reference (backend ref), which draws the same
// decisions (lib/dropout_rng.h) from the same seed and offset.
//
//   against the reference: O and LSE, then dQ, dK, dV of a backward from the forward's own O and
//     LSE, within SPEC 8 (the f16/bf16 tensor-core backward's dQ and dK within SPEC 12's
//     dropout bound, SPEC 8's times 1.25 / (1 - p)), for every kind (dense, causal with Nq < Nk
//     and Nq > Nk, GQA with strided views, dilated with several branches in two head modes,
//     dilations 1, 2 and 4 over several runs of 16 keys (the kernels' quad draws and their
//     lane-by-lane fallback), causal dilated, block-sparse with an empty BSR row), every dtype
//     of the kernel, p = 0.1 and 0.5, and on SIMT with the SPEC 10 options the kernels run (window, softcap, ALiBi,
//     sinks) at once; each case in the emulator's three thread orders, the same bits in each
//     (SPEC 6);
//   the same pairs as the reference, exactly: V's rows are the unit vectors (v_j = e_j), so
//     O_i[j] = P_ij M_ij, zero exactly where pair (i, j) is dropped (or unseen); dO's rows too
//     (dO_i = e_i), so dV_j[i] = P_ij M_ij: the backward's regenerated decisions, transposed.
//     Each such case must drop some pairs a row sees and keep others;
//   p = 0 is no dropout, bitwise: a plan with p = 0 called through the _ex calls with a seed
//     gives the plain calls' bits; and p = 2^-40 (threshold 1, 1 / (1 - p) = 1 in f32), which
//     runs the dropout kernels, gives the bits of the kernels without dropout.
// The argument names the kernel: simt, mma (f16, bf16) or mma_tf32 (f32, 3xTF32), each case's
// choice asserted (kernel_choice.h: dropout is no input; the SPEC 10 options send a problem to
// SIMT, so the SIMT list has one at D = 64); the tensor-core lists run D = 64 and 128 and add a
// case of several key and query chunks.
//
// DILATTN_TEST_CASES=NAME[,NAME...] keeps only the cases of those names (the part after the
// last '/').
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_cases.h"
#include "kernel_choice.h"

namespace {

using Case = harness::AttentionCase;

constexpr uint64_t kSeed = 0x0123456789abcdefull;
constexpr uint64_t kOffset = 5;

struct DropoutCase {
  Case c;
  std::vector<double> sinks;  // H logits when c.sinks
  bool unit_rows = false;     // V and dO rows unit vectors: the pairs compared exactly
};

using Outputs = kcase::OptionOutputs;

// Forward, then backward from that forward's O and LSE, through the _ex calls with the seed and
// offset (and the sinks) in dilattn_call_options; plain = true: the plain calls, no options.
Outputs run_on(const DropoutCase& dc, const harness::Inputs& in, dilattn_backend backend,
               bool plain = false) {
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_seed = kSeed;
  options.dropout_offset = kOffset;
  return kcase::run_with_options(dc.c, in, backend, plain ? nullptr : &options, dc.sinks);
}

// The case's inputs: random, or with V's and dO's rows unit vectors (unit_rows; D >= Nk, Nq).
harness::Inputs inputs_of(const DropoutCase& dc) {
  const Case& c = dc.c;
  harness::Inputs in = kcase::random_inputs(c);
  if (!dc.unit_rows) return in;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t d = 0; d < c.D; ++d) {
      for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t j = 0; j < c.Nk; ++j) in.v.set(b, j, h, d, j == d ? 1.0 : 0.0);
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.Nq; ++i) in.d_o.set(b, i, h, d, i == d ? 1.0 : 0.0);
    }
  return in;
}

// unit_rows: the zeros of O and dV (the dropped and the unseen pairs) are the reference's,
// exactly; and the reference without dropout shows pairs dropped and pairs kept.
void check_same_pairs(const DropoutCase& dc, const Outputs& got, const Outputs& ref,
                      const harness::Inputs& wide) {
  DropoutCase none = dc;
  none.c.dropout_p = 0;
  const Outputs all = run_on(none, wide, DILATTN_BACKEND_REF);
  const harness::Tensor* pairs[2][3] = {{&got.o, &ref.o, &all.o}, {&got.dv, &ref.dv, &all.dv}};
  const char* names[2] = {"O", "dV"};
  for (int n = 0; n < 2; ++n) {
    const std::vector<double> g = pairs[n][0]->values(), r = pairs[n][1]->values(),
                              a = pairs[n][2]->values();
    int64_t differ = 0, dropped = 0, kept = 0;
    for (size_t e = 0; e < r.size(); ++e) {
      if ((g[e] == 0) != (r[e] == 0)) ++differ;
      if (a[e] != 0) (r[e] == 0 ? dropped : kept) += 1;
    }
    CHECK_MSG(differ == 0, "%s: %lld elements zero in one of the kernels and the reference only",
              names[n], static_cast<long long>(differ));
    CHECK_MSG(dropped > 0 && kept > 0, "%s: the reference drops %lld pairs and keeps %lld",
              names[n], static_cast<long long>(dropped), static_cast<long long>(kept));
  }
}

// The case runs the kernel named (dropout with a window, softcap or ALiBi runs SIMT,
// kernel_choice.h; sinks do not change the kernel: the tensor-core kernels' dropout instances
// join them too).
void check_kernel(const Case& c, const std::string& kernel) {
  const bool variants = c.window_left >= 0 || c.window_right >= 0 || c.softcap != 0 ||
                        !c.alibi_slopes.empty();
  const bool dropout = c.dropout_p > 0;
  for (int cc : {8, 9}) {
    CHECK(dilattn::kernel_name(dilattn::forward_kernel_for(c.dtype, c.D, cc, variants, dropout)) ==
          kernel);
    CHECK(dilattn::kernel_name(dilattn::backward_kernel_for(c.dtype, c.D, cc, variants,
                                                            dropout)) == kernel);
  }
}

void run_case(const DropoutCase& dc, const std::string& kernel, dilattn_backend backend) {
  const Case& c = dc.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  check_kernel(c, kernel);
  const harness::Inputs in = inputs_of(dc);
  const harness::Inputs wide = harness::widened_to_f64(in);
  const Outputs ref = run_on(dc, wide, DILATTN_BACKEND_REF);
  std::vector<Outputs> runs;
  kcase::repeated(backend, [&](int) { runs.push_back(run_on(dc, in, backend)); });
  for (size_t r = 1; r < runs.size(); ++r)
    CHECK_MSG(kcase::bits_of(runs[r]) == kcase::bits_of(runs[0]),
              "%s run %zu gives other bits than the first",
              dilattn_backend_name(backend), r);
  const Outputs& got = runs[0];
  const spec8::Tolerance tol = spec8::of(c.dtype);
  // SPEC 12: the f16/bf16 tensor-core backward rounds dS to the input dtype for dQ = dS K and
  // dK = dS^T Q. With dropout a kept pair's dS holds M dP, up to 1 / (1 - p) times the dS
  // without dropout, and a dropped pair's -P D, while the sums keep their size (E[M] = 1), so
  // the rounding error of those sums grows; their bound is SPEC 8's times 1.25 / (1 - p).
  // Measured in this list: at most 1.15 of SPEC 8's own bound at p = 0.1 (gqa_causal_strided's
  // dK), 1.06 at p = 0.3 to 0.5 (0.71 without dropout).
  // The 3xTF32 backward on a GPU: dQ and dK to atol 2e-5 (SPEC 12; as test_variant_kernels.cpp).
  const double widen = kernel == "mma" ? spec8::dropout_ds_widening(c.dropout_p) : 1.0;
  const double atol = kernel == "mma_tf32" && backend == DILATTN_BACKEND_CUDA ? 2e-5 : tol.atol;
  const spec8::Tolerance ds_tol{atol * widen, tol.rtol * widen};
  CHECK_CLOSE("O", got.o, ref.o, tol);
  CHECK_CLOSE("LSE", got.lse, ref.lse, spec8::lse());
  CHECK_CLOSE("dQ", got.dq, ref.dq, ds_tol);
  CHECK_CLOSE("dK", got.dk, ref.dk, ds_tol);
  CHECK_CLOSE("dV", got.dv, ref.dv, tol);
  if (c.sinks) CHECK_CLOSE("d_sinks", got.d_sinks, ref.d_sinks, tol);
  if (dc.unit_rows) check_same_pairs(dc, got, ref, wide);
  // A case must check something: some finite LSE, some nonzero reference gradient.
  int64_t finite = 0, nonzero = 0;
  for (double x : ref.lse.values()) finite += std::isfinite(x) ? 1 : 0;
  for (const harness::Tensor* g : {&ref.dq, &ref.dk, &ref.dv})
    for (double x : g->values()) nonzero += x != 0 && std::isfinite(x) ? 1 : 0;
  CHECK_MSG(finite > 0 && nonzero > 0, "the reference has no finite LSE or no gradient");
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

// p = 0 and p = 2^-40 against the plain calls of a plan without dropout, bit for bit.
void run_no_dropout_case(const DropoutCase& dc, const std::string& kernel,
                         dilattn_backend backend) {
  const Case& c = dc.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  check_kernel(c, kernel);
  const harness::Inputs in = inputs_of(dc);
  DropoutCase none = dc;
  none.c.dropout_p = 0;
  const Outputs plain = run_on(none, in, backend, true);
  const Outputs zero = run_on(none, in, backend);  // p = 0 with a seed and an offset
  CHECK_MSG(kcase::bits_of(zero) == kcase::bits_of(plain),
            "p = 0 through the _ex calls changes the bits");
  DropoutCase tiny = dc;
  tiny.c.dropout_p = std::ldexp(1.0, -40);
  const Outputs almost = run_on(tiny, in, backend);
  if (backend == DILATTN_BACKEND_CUDA) {
    // On a GPU nvcc compiles the dropout instance apart from the plain one and may fuse other
    // multiply-adds there (-fmad), so only SPEC 8 holds; the emulator's host build keeps the bits.
    const spec8::Tolerance tol = spec8::of(c.dtype);
    CHECK_CLOSE("O, p = 2^-40 against no dropout", almost.o, plain.o, tol);
    CHECK_CLOSE("dQ, p = 2^-40 against no dropout", almost.dq, plain.dq, tol);
    CHECK_CLOSE("dK, p = 2^-40 against no dropout", almost.dk, plain.dk, tol);
    CHECK_CLOSE("dV, p = 2^-40 against no dropout", almost.dv, plain.dv, tol);
  } else {
    CHECK_MSG(kcase::bits_of(almost) == kcase::bits_of(plain),
              "p = 2^-40 (every pair kept, factor 1) gives other bits than no dropout");
  }
  std::printf("%-60s %s\n", c.name.c_str(), harness::failures() == failed_before ? "ok" : "FAILED");
}

// The cases of one kernel: simt (f32, f16, bf16 at head dims the tensor-core kernels do not
// take, and with the SPEC 10 options at D = 64, which go to SIMT), mma (f16, bf16) or mma_tf32
// (f32) at D = 64 and 128.
std::vector<DropoutCase> dropout_cases(const std::string& kernel) {
  const bool tensor_core = kernel != "simt";
  std::vector<DropoutCase> out;
  for (dilattn_dtype t : kcase::dtypes_of(kernel)) {
    for (double p : {0.1, 0.5}) {
      int variant = 0;
      // SIMT's head dim, or the tensor-core kernels' 64 and 128 in turn.
      auto base = [&](const char* name, int64_t simt_d) {
        DropoutCase dc;
        dc.c.name = kernel + "/" + dilattn::dtype_name(t) + "/p" + (p == 0.1 ? "0.1" : "0.5") +
                    "/" + name;
        dc.c.dtype = t;
        dc.c.D = tensor_core ? (variant++ % 2 == 0 ? 64 : 128) : simt_d;
        dc.c.dropout_p = p;
        return dc;
      };
      DropoutCase dc = base("dense", 16);
      dc.c.B = 2; dc.c.Nq = dc.c.Nk = 19; dc.c.H = dc.c.Hkv = 2;
      out.push_back(dc);
      dc = base("causal_nq_lt_nk", 8);
      dc.c.Nq = 13; dc.c.Nk = 22; dc.c.causal = true;
      out.push_back(dc);
      dc = base("causal_nq_gt_nk_empty_rows", 8);
      dc.c.Nq = 22; dc.c.Nk = 13; dc.c.causal = true;
      out.push_back(dc);
      dc = base("gqa_causal_strided", 12);
      dc.c.Nq = dc.c.Nk = 19; dc.c.H = 4; dc.c.Hkv = 2; dc.c.causal = true;
      dc.c.input_layout = dc.c.output_layout = {false, 8};
      out.push_back(dc);
      dc = base("dilated_mod_branches_gqa", 8);
      dc.c.kind = DILATTN_KIND_DILATED; dc.c.Nq = dc.c.Nk = 27; dc.c.H = 4; dc.c.Hkv = 2;
      dc.c.segments = {8, 16, 27}; dc.c.dilations = {1, 2, 3};
      dc.c.head_mode = DILATTN_HEADS_MOD;
      out.push_back(dc);
      dc = base("dilated_block_causal", 8);
      dc.c.kind = DILATTN_KIND_DILATED; dc.c.Nq = dc.c.Nk = 23; dc.c.H = dc.c.Hkv = 2;
      dc.c.causal = true; dc.c.segments = {8, 23}; dc.c.dilations = {1, 2};
      dc.c.head_mode = DILATTN_HEADS_BLOCK;
      out.push_back(dc);
      // Branches of dilation 1, 2 and 4 with rows of several runs of 16 keys: segments that
      // start a run (whose keys the kernels draw by quads, cuda/dropout_tile.cuh) and segments
      // of 24 that start mid-run (drawn lane by lane).
      dc = base("dilated_dilations_1_2_4", 8);
      dc.c.kind = DILATTN_KIND_DILATED; dc.c.Nq = dc.c.Nk = 80; dc.c.H = 4; dc.c.Hkv = 2;
      dc.c.segments = {24, 48, 80}; dc.c.dilations = {1, 2, 4};
      dc.c.head_mode = DILATTN_HEADS_MOD;
      out.push_back(dc);
      dc = base("sparse_local_sink_empty_row", 8);
      dc.c.kind = DILATTN_KIND_BLOCK_SPARSE; dc.c.Nq = dc.c.Nk = 40; dc.c.H = 2; dc.c.Hkv = 1;
      dc.c.mask.bq = dc.c.mask.bk = 8;
      kcase::local_sink_mask(dc.c, 2, 0);
      out.push_back(dc);
      if (tensor_core) {  // several chunks of keys and of query rows, a partial last one
        dc = base("dense_causal_several_chunks", 0);
        dc.c.Nq = 70; dc.c.Nk = 150; dc.c.H = 2; dc.c.Hkv = 1; dc.c.causal = true;
        out.push_back(dc);
        // With sinks, on the dropout instance: each row joins its head's sink as it finishes.
        dc.c.name += "_sinks";
        dc.c.sinks = true;
        dc.sinks = {0.5, -1.0};
        out.push_back(dc);
      } else {  // SPEC 10's options the kernels run, all at once, with dropout; at D = 64
        dc = base("window_softcap_alibi_sinks_d64", 64);
        dc.c.Nq = 18; dc.c.Nk = 21; dc.c.H = 2; dc.c.Hkv = 1; dc.c.causal = true;
        dc.c.window_left = 6; dc.c.window_right = 2; dc.c.softcap = 1.5;
        dc.c.alibi_slopes = {0.5, 0.25};
        dc.c.sinks = true;
        dc.sinks = {0.5, -1.0};
        out.push_back(dc);
      }
      if (p != 0.5 || t == DILATTN_BF16) continue;
      // The pairs themselves (p = 0.5): unit rows of V and dO, D >= Nq, Nk.
      dc = base("pairs_dense_causal", 28);
      dc.c.D = tensor_core ? 64 : 28;
      dc.c.Nq = 20; dc.c.Nk = 28; dc.c.H = dc.c.Hkv = 2; dc.c.causal = true;
      dc.unit_rows = true;
      out.push_back(dc);
      dc = base("pairs_dilated_branches", 24);
      dc.c.D = tensor_core ? 64 : 24;
      dc.c.kind = DILATTN_KIND_DILATED; dc.c.B = 2; dc.c.Nq = dc.c.Nk = 24; dc.c.H = 2;
      dc.c.Hkv = 2; dc.c.segments = {8, 24}; dc.c.dilations = {1, 3};
      dc.c.head_mode = DILATTN_HEADS_MOD;
      dc.unit_rows = true;
      out.push_back(dc);
      dc = base("pairs_sparse", 24);
      dc.c.D = tensor_core ? 64 : 24;
      dc.c.kind = DILATTN_KIND_BLOCK_SPARSE; dc.c.Nq = dc.c.Nk = 24; dc.c.H = dc.c.Hkv = 1;
      dc.c.mask.bq = dc.c.mask.bk = 8;
      kcase::local_sink_mask(dc.c, -1, 0);
      dc.unit_rows = true;
      out.push_back(dc);
    }
  }
  return out;
}

// The bitwise p = 0 cases of one kernel: each of its dtypes, dense and dilated with several
// branches.
std::vector<DropoutCase> no_dropout_cases(const std::string& kernel) {
  const bool tensor_core = kernel != "simt";
  std::vector<DropoutCase> out;
  for (dilattn_dtype t : kcase::dtypes_of(kernel)) {
    DropoutCase dc;
    dc.c.name = kernel + "/" + dilattn::dtype_name(t) + "/p0/dense_causal";
    dc.c.dtype = t;
    dc.c.D = tensor_core ? 64 : 16;
    dc.c.Nq = 17; dc.c.Nk = 21; dc.c.H = 2; dc.c.Hkv = 1; dc.c.causal = true;
    out.push_back(dc);
    dc.c.name = kernel + "/" + dilattn::dtype_name(t) + "/p0/dilated_branches";
    dc.c.D = tensor_core ? 128 : 16;
    dc.c.kind = DILATTN_KIND_DILATED; dc.c.Nq = dc.c.Nk = 27; dc.c.causal = false;
    dc.c.segments = {8, 16}; dc.c.dilations = {1, 2}; dc.c.head_mode = DILATTN_HEADS_MOD;
    out.push_back(dc);
  }
  return out;
}

// DILATTN_TEST_CASES: keep the cases named (kernel_case.h, case_asked_for).
std::vector<DropoutCase> only_named(std::vector<DropoutCase> cases) {
  std::vector<DropoutCase> kept;
  for (const DropoutCase& dc : cases)
    if (kcase::case_asked_for(dc.c.name)) kept.push_back(dc);
  return kept;
}

}  // namespace

int main(int argc, char** argv) {
  const char* kernel_arg = kcase::kernel_argument(argc, argv);
  if (kernel_arg == nullptr) return 2;
  const std::string kernel = kernel_arg;
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  for (const DropoutCase& dc : only_named(dropout_cases(kernel))) run_case(dc, kernel, backend);
  for (const DropoutCase& dc : only_named(no_dropout_cases(kernel)))
    run_no_dropout_case(dc, kernel, backend);
  return harness::finish(
      ("kernels_dropout_" + kernel + " on " + dilattn_backend_name(backend)).c_str());
}
