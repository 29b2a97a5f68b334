// test_backward_nonfinite_kernels.cpp - the SIMT backward kernels (SPEC 6, run by the SIMT
// emulator as backend emu) with one NaN element in one K or Q row, against the f64 reference
// backward (backend ref). The rule (lib/softmax_rules.h, README "Decisions"): a NaN in a row's
// scores makes that row's forward NaN, so its LSE is NaN and every gradient term of that row is
// NaN (dQ_i, and dK_j, dV_j of every key j it sees); a row that does not see the NaN key keeps
// finite gradients, and so does a key no NaN row sees. The gradients must be NaN exactly where
// the reference's are, and within SPEC 8 elsewhere.
//
// Cases: dense causal with the NaN key in a later key chunk than the first (rows before it
// must stay finite: the dQ pass leaves out pairs a row does not see, never 0 * NaN), dense
// causal with a NaN query row (keys after it must keep finite dK: the dK/dV pass leaves the
// pairs out too), dilated with three branches, block-sparse with a local band. Every case runs under ascending,
// descending and shuffled thread order, which must agree bit for bit.
// Only SIMT: the WMMA kernels multiply whole tiles, so a NaN K, Q or dO row reaches the rows of
// its tile that do not see it as 0 * NaN (cuda/backward_wmma.cu says so).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_case.h"

namespace {

using kcase::Case;

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
  n.c.kind = DILATTN_KIND_BLOCK_SPARSE; n.c.Nq = n.c.Nk = 64; n.c.bq = n.c.bk = 16;
  // Row block ib lists key blocks ib - 1 and ib: the NaN key (block 2) reaches row blocks 2, 3.
  n.c.row_ptr = {0, 1, 3, 5, 7};
  n.c.col_idx = {0, 0, 1, 1, 2, 2, 3};
  n.nan_key = 40;
  out.push_back(n);
  return out;
}

// Elements where NaN-ness differs from the reference's, or a non-NaN value is outside SPEC 8.
// Counts the reference's NaNs and finite values.
int64_t count_bad(const std::string& what, const std::vector<double>& got,
                  const std::vector<double>& want, double atol, double rtol, int64_t* nans,
                  int64_t* finite) {
  if (got.size() != want.size()) return 1;
  int64_t bad = 0;
  for (size_t n = 0; n < got.size(); ++n) {
    const double g = got[n], w = want[n];
    const bool ok = (std::isnan(w) || std::isnan(g)) ? std::isnan(w) && std::isnan(g)
                                                     : std::fabs(g - w) <= atol + rtol * std::fabs(w);
    *nans += std::isnan(w) ? 1 : 0;
    *finite += std::isfinite(w) ? 1 : 0;
    if (!ok && bad++ < 5)
      std::fprintf(stderr, "%s[%zu]: got %.9g, reference %.9g\n", what.c_str(), n, g, w);
  }
  return bad;
}

int run_case(const NanCase& n) {
  const Case& c = n.c;
  kcase::Buffer q = kcase::make_buffer(c.dtype, c.B, c.Nq, c.H, c.D, 0);
  kcase::Buffer k = kcase::make_buffer(c.dtype, c.B, c.Nk, c.Hkv, c.D, 0);
  kcase::Buffer v = kcase::make_buffer(c.dtype, c.B, c.Nk, c.Hkv, c.D, 0);
  kcase::Buffer d_o = kcase::make_buffer(c.dtype, c.B, c.Nq, c.H, c.D, 0);
  const std::vector<double> vx = kcase::fill_random(v, 3), dox = kcase::fill_random(d_o, 4);
  std::vector<double> qx = kcase::fill_random(q, 1), kx = kcase::fill_random(k, 2);
  kcase::Buffer& target = n.nan_key >= 0 ? k : q;
  std::vector<double>& exact = n.nan_key >= 0 ? kx : qx;
  const int64_t at =
      dilattn::element_offset(target.view, 0, n.nan_key >= 0 ? n.nan_key : n.nan_query, 0, 1);
  dilattn::store_element(target.view.data, c.dtype, at, NAN);
  exact[static_cast<size_t>(at)] = NAN;  // contiguous: the view's offset is the vector's index
  kcase::Buffer q64 = kcase::f64_copy(qx, c.B, c.Nq, c.H, c.D);
  kcase::Buffer k64 = kcase::f64_copy(kx, c.B, c.Nk, c.Hkv, c.D);
  kcase::Buffer v64 = kcase::f64_copy(vx, c.B, c.Nk, c.Hkv, c.D);
  kcase::Buffer do64 = kcase::f64_copy(dox, c.B, c.Nq, c.H, c.D);

  kcase::Gradients ref, emu;
  if (!kcase::run_backward(c, DILATTN_BACKEND_REF, q64.view, k64.view, v64.view, do64.view, &ref))
    return 1;
  const bool same = kcase::run_backward_in_thread_orders(c, q.view, k.view, v.view, d_o.view, &emu);
  double atol = 0, rtol = 0;
  kcase::tolerances(c.dtype, &atol, &rtol);
  int64_t nans = 0, finite = 0;
  int64_t bad = count_bad(c.name + " dq", emu.dq, ref.dq, atol, rtol, &nans, &finite);
  bad += count_bad(c.name + " dk", emu.dk, ref.dk, atol, rtol, &nans, &finite);
  bad += count_bad(c.name + " dv", emu.dv, ref.dv, atol, rtol, &nans, &finite);
  // The case must check what it is about: NaN gradients next to finite ones.
  const bool meaningful = nans > 0 && finite > 0;
  if (!meaningful)
    std::fprintf(stderr, "%s: the reference has %lld NaN and %lld finite gradient values\n",
                 c.name.c_str(), static_cast<long long>(nans), static_cast<long long>(finite));
  const bool ok = bad == 0 && same && meaningful;
  std::printf("%-60s %s (%lld elements off, reference %lld NaN)\n", c.name.c_str(),
              ok ? "ok" : "FAILED", static_cast<long long>(bad), static_cast<long long>(nans));
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  int failures = 0, count = 0;
  for (const NanCase& n : cases()) {
    failures += run_case(n);
    ++count;
  }
  std::printf("%d of %d cases failed\n", failures, count);
  return failures == 0 && count > 0 ? 0 : 1;
}
