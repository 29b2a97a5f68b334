// test_backward_nonfinite_kernels.cpp - the backward kernels (SPEC 6, on the backend
// DILATTN_TEST_BACKEND names: emu, the SIMT emulator, by default; cuda on a GPU) with one NaN
// element in one K, Q or dO row, against the f64 reference backward (backend ref). The rule
// (lib/softmax_rules.h, SPEC 13): a NaN in a row's scores makes that row's forward NaN, so its
// LSE is NaN and every gradient term of that row is NaN (dQ_i, and dK_j, dV_j of every key j it
// sees); a row that does not see the NaN key keeps finite gradients, and so does a key no NaN
// row sees. The gradients must be NaN exactly where the reference's are, and within SPEC 8
// elsewhere.
//
// Usage: [DILATTN_TEST_BACKEND=emu|cuda] test_backward_nonfinite_kernels simt|mma|mma_tf32.
// Cases: dense causal with the NaN key in a later key chunk than the first (rows before it
// must stay finite: the dQ pass leaves out pairs a row does not see, never 0 * NaN), dense
// causal with a NaN query row, a NaN dO row and a NaN V row (keys after it must keep finite dK
// and dV: the dK/dV pass leaves the pairs out too), dilated with three branches, dilated
// branches whose shared pairs the tensor-core kernels compute once (a NaN key and a NaN query
// row among the pairs one branch cuts and the other weighs), block-sparse with a local band. For simt the shapes are small (f32, D = 8, chunks of 16); for mma (f16,
// bf16) and mma_tf32 (f32), D = 64 and 128, they put the NaN row inside a chunk of 64 that rows
// or keys which do not meet it share, which the tensor-core kernels must compute without tensor
// cores (cuda/mma_backward_loop.cuh, the NaN rule). Every case is repeated (kernel_case.h: emu
// in three thread orders, cuda twice, the second on a stream of its own), and the repeats must
// agree bit for bit.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_case.h"

namespace {

using Case = harness::AttentionCase;

struct NanCase {
  Case c;
  int64_t nan_key = -1;    // NaN at element d = 1 of this key row, batch 0, kv head 0
  int64_t nan_query = -1;  // or of this query row, batch 0, head 0
  int64_t nan_d_o = -1;    // or of this dO row, batch 0, head 0
  int64_t nan_v = -1;      // or of this V row, batch 0, kv head 0
};

std::vector<NanCase> cases(const std::string& kernel) {
  std::vector<NanCase> out;
  const bool mma = kernel != "simt";  // the tensor-core kernels: chunks of 64
  // Sizes scale with the kernels' chunks: 16 (simt) or 64 (mma).
  const int64_t x = mma ? 4 : 1;
  for (dilattn_dtype t : kernel == "mma" ? std::vector<dilattn_dtype>{DILATTN_F16, DILATTN_BF16}
                                         : std::vector<dilattn_dtype>{DILATTN_F32}) {
    int variant = 0;
    auto base = [&](const char* name) {
      NanCase n;
      n.c.name = kernel + "/" + dilattn::dtype_name(t) + "/" + name;
      n.c.dtype = t;
      n.c.D = mma ? (variant++ % 2 == 0 ? 64 : 128) : 8;
      return n;
    };
    NanCase n = base("nan_causal_in_second_chunk");
    n.c.Nq = n.c.Nk = 40 * x; n.c.causal = true;
    n.nan_key = 25 * x;  // rows 0 .. nan_key - 1 do not see it; chunk 1 holds it and them
    out.push_back(n);
    n = base("nan_query_causal");
    n.c.Nq = n.c.Nk = 40 * x; n.c.causal = true;
    n.nan_query = 3;  // keys 4 .. do not meet it
    out.push_back(n);
    if (mma) {
      n = base("nan_d_o_causal");
      n.c.Nq = n.c.Nk = 40 * x; n.c.causal = true;
      n.nan_d_o = 5;  // keys 6 .. do not meet it
      out.push_back(n);
      n = base("nan_v_causal");
      n.c.Nq = n.c.Nk = 40 * x; n.c.causal = true;
      n.nan_v = 20;  // rows 0 .. 19 do not see it, in the first chunk with it
      out.push_back(n);
    }
    n = base("nan_dilated_three_branches");
    n.c.kind = DILATTN_KIND_DILATED; n.c.Nq = n.c.Nk = 40 * x; n.c.H = 2; n.c.Hkv = 1;
    n.c.segments = {8 * x, 16 * x, 32 * x}; n.c.dilations = {1, 2, 4};
    n.c.head_mode = DILATTN_HEADS_MOD; n.c.causal = mma;  // causal: pairs unseen inside a chunk
    n.nan_key = 21 * x;
    out.push_back(n);
    // Dilated branches whose shared pairs the tensor-core kernels compute once (SPEC 3.4): the
    // NaN key lies in branch 0's first segment, so branch 1 cuts it from the query tiles there
    // (and cuts those rows from its key tile) and meets it, weighted 1, from the second on;
    // a NaN query row of head 0 in the same place, whose pairs branch 1 cuts or weighs.
    for (const bool query : {false, true}) {
      n = base(query ? "nan_query_dilated_shared_pairs" : "nan_dilated_shared_pairs");
      n.c.kind = DILATTN_KIND_DILATED; n.c.Nq = n.c.Nk = 128 * x; n.c.H = 2; n.c.Hkv = 1;
      n.c.segments = {64 * x, 128 * x}; n.c.dilations = {1, 2};
      n.c.head_mode = DILATTN_HEADS_MOD; n.c.causal = true;
      (query ? n.nan_query : n.nan_key) = 32 * x + 2;
      out.push_back(n);
    }
    n = base("nan_sparse_local_band");
    n.c.kind = DILATTN_KIND_BLOCK_SPARSE; n.c.Nq = n.c.Nk = 64 * x;
    n.c.mask.bq = n.c.mask.bk = 16 * x; n.c.causal = mma;
    // Row block ib lists key blocks ib - 1 and ib: the NaN key (block 2) reaches row blocks 2, 3.
    n.c.mask.row_ptr = {0, 1, 3, 5, 7};
    n.c.mask.col_idx = {0, 0, 1, 1, 2, 2, 3};
    n.nan_key = 40 * x;
    out.push_back(n);
  }
  return out;
}

void run_case(const NanCase& n, dilattn_backend backend) {
  const Case& c = n.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  harness::Inputs in = kcase::random_inputs(c);
  if (n.nan_key >= 0) in.k.set(0, n.nan_key, 0, 1, NAN);
  if (n.nan_query >= 0) in.q.set(0, n.nan_query, 0, 1, NAN);
  if (n.nan_d_o >= 0) in.d_o.set(0, n.nan_d_o, 0, 1, NAN);
  if (n.nan_v >= 0) in.v.set(0, n.nan_v, 0, 1, NAN);
  const harness::Gradients ref =
      kcase::run_forward_backward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const harness::Gradients got = kcase::run_backward_repeated(c, in, backend);
  // NaN exactly where the reference's gradients are NaN, SPEC 8 elsewhere (compare.h).
  const spec8::Tolerance tol = spec8::of(c.dtype);
  CHECK_CLOSE("dQ", got.dq, ref.dq, tol);
  CHECK_CLOSE("dK", got.dk, ref.dk, tol);
  CHECK_CLOSE("dV", got.dv, ref.dv, tol);
  // The case must check what it is about: NaN gradients next to finite ones.
  int64_t nans = 0, finite = 0;
  for (const harness::Tensor* g : {&ref.dq, &ref.dk, &ref.dv}) {
    nans += harness::nan_count(*g);
    for (double x : g->values()) finite += std::isfinite(x) ? 1 : 0;
  }
  CHECK_MSG(nans > 0 && finite > 0, "the reference has %lld NaN and %lld finite gradient values",
            static_cast<long long>(nans), static_cast<long long>(finite));
  std::printf("%-60s %s (reference %lld NaN)\n", c.name.c_str(),
              harness::failures() == failed_before ? "ok" : "FAILED",
              static_cast<long long>(nans));
}

}  // namespace

int main(int argc, char** argv) {
  if (kcase::kernel_argument(argc, argv) == nullptr) return 2;
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  for (const NanCase& n : cases(argv[1])) run_case(n, backend);
  return harness::finish((std::string("kernels_backward_nonfinite_") + argv[1] + " on " +
                          dilattn_backend_name(backend)).c_str());
}
