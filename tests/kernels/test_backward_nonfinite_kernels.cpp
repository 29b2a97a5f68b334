// test_backward_nonfinite_kernels.cpp - the SIMT backward kernels (SPEC 6, on the backend
// DILATTN_TEST_BACKEND names: emu, the SIMT emulator, by default; cuda on a GPU) with one NaN
// element in one K or Q row, against the f64 reference backward (backend ref). The rule
// (lib/softmax_rules.h, SPEC 13): a NaN in a row's
// scores makes that row's forward NaN, so its LSE is NaN and every gradient term of that row is
// NaN (dQ_i, and dK_j, dV_j of every key j it sees); a row that does not see the NaN key keeps
// finite gradients, and so does a key no NaN row sees. The gradients must be NaN exactly where
// the reference's are, and within SPEC 8 elsewhere.
//
// Cases: dense causal with the NaN key in a later key chunk than the first (rows before it
// must stay finite: the dQ pass leaves out pairs a row does not see, never 0 * NaN), dense
// causal with a NaN query row (keys after it must keep finite dK: the dK/dV pass leaves the
// pairs out too), dilated with three branches, block-sparse with a local band. Every case is
// repeated (kernel_case.h: emu in three thread orders, cuda twice, the second on a stream of its
// own), and the repeats must agree bit for bit.
// Only SIMT: the WMMA kernels multiply whole tiles, so a NaN K, Q or dO row reaches the rows of
// its tile that do not see it as 0 * NaN (cuda/backward_wmma.cu says so).
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
};

std::vector<NanCase> cases() {
  std::vector<NanCase> out;
  auto base = [](const char* name) {
    NanCase n;
    n.c.name = std::string("simt/f32/") + name;
    n.c.D = 8;
    return n;
  };
  NanCase n = base("nan_causal_in_second_chunk");
  n.c.Nq = n.c.Nk = 40; n.c.causal = true;
  n.nan_key = 25;  // key chunks of 16: rows 0 .. 24 do not see it
  out.push_back(n);
  n = base("nan_query_causal");
  n.c.Nq = n.c.Nk = 40; n.c.causal = true;
  n.nan_query = 3;  // keys 4 .. 39 do not meet it
  out.push_back(n);
  n = base("nan_dilated_three_branches");
  n.c.kind = DILATTN_KIND_DILATED; n.c.Nq = n.c.Nk = 40; n.c.H = 2; n.c.Hkv = 1;
  n.c.segments = {8, 16, 32}; n.c.dilations = {1, 2, 4}; n.c.head_mode = DILATTN_HEADS_MOD;
  n.nan_key = 21;
  out.push_back(n);
  n = base("nan_sparse_local_band");
  n.c.kind = DILATTN_KIND_BLOCK_SPARSE; n.c.Nq = n.c.Nk = 64; n.c.mask.bq = n.c.mask.bk = 16;
  // Row block ib lists key blocks ib - 1 and ib: the NaN key (block 2) reaches row blocks 2, 3.
  n.c.mask.row_ptr = {0, 1, 3, 5, 7};
  n.c.mask.col_idx = {0, 0, 1, 1, 2, 2, 3};
  n.nan_key = 40;
  out.push_back(n);
  return out;
}

void run_case(const NanCase& n, dilattn_backend backend) {
  const Case& c = n.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  harness::Inputs in = kcase::random_inputs(c);
  if (n.nan_key >= 0)
    in.k.set(0, n.nan_key, 0, 1, NAN);
  else
    in.q.set(0, n.nan_query, 0, 1, NAN);
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

int main() {
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  for (const NanCase& n : cases()) run_case(n, backend);
  return harness::finish(
      (std::string("kernels_backward_nonfinite_simt on ") + dilattn_backend_name(backend)).c_str());
}
