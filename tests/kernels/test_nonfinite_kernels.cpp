// test_nonfinite_kernels.cpp - the CUDA forward kernels (on the backend DILATTN_TEST_BACKEND
// names: emu, the SIMT emulator, by default; cuda on a GPU) on inputs where a softmax that
// hides NaN or overflows f32 gives a wrong answer, against the f64 reference (backend ref).
// The rules (lib/softmax_rules.h, SPEC 13):
//   - a NaN anywhere in a row's scores makes that row's O and LSE NaN, in every backend;
//   - a row is empty (O = 0, LSE = -inf, SPEC 2) only when the index rules give it no key,
//     never because its sum underflowed;
//   - huge finite scores are handled by subtracting the max, as the reference does.
//
// Usage: test_nonfinite_kernels simt|mma|mma_tf32|wgmma (mma: f16, mma_tf32: f32 split in
// 3xTF32, simt: f32; wgmma: f16 on the Hopper kernel, an emulated sm_90 with
// DILATTN_CUDA_WGMMA=1). Cases:
//   nan_*   one NaN element in one K row, for dense, causal (the NaN key in a later chunk than
//           the first, so the running max goes from finite to NaN), dilated with three
//           branches (the LSE merge meets a NaN branch) and block-sparse: O and LSE must be NaN
//           exactly where the reference's are, and within SPEC 8 elsewhere;
//   *_v_*   one NaN or +inf element in one V row inside the first chunk (and, later_chunk,
//           in a later one), causal: the rows before it share its chunk but do not see it, and
//           must stay finite (on tensor cores that takes the NaN rule's exact path,
//           cuda/mma_unseen_pairs.cuh);
//   inf_*   one +inf element in one K row (dense, causal): rows whose q has a negative element
//           there score -inf for that key (probability 0, the row stays finite), the others
//           +inf (NaN, as the reference); a 3xTF32 split that made inf - inf = NaN of the
//           small part would turn the finite rows NaN;
//   scale_* scale = +1e38 and -1e38, dense and causal: scale * <q, k> overflows f32 although
//           the reference is finite; O within SPEC 8, LSE (f32) within a relative bound of the
//           reference rounded to f32 (+-inf where the reference lies outside f32's range).
// Every case is repeated (kernel_case.h: emu in three thread orders, cuda twice, the second on a
// stream of its own), and the repeats must agree bit for bit.
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "hopper_launches.h"
#include "kernel_case.h"

namespace {

using Case = harness::AttentionCase;

// A NaN (or `value`) at element d = 1 of key row j, batch 0, kv head kv_head: in K, or in V
// when in_v.
struct NanAt {
  int64_t j = -1, kv_head = 0;
  double value = NAN;
  bool in_v = false;
};

struct NonfiniteCase {
  Case c;
  NanAt nan;
};

std::vector<NonfiniteCase> cases_for(const std::string& kernel) {
  const bool mma = kernel == "mma" || kernel == "wgmma", tf32 = kernel == "mma_tf32";
  const dilattn_dtype dtype = mma ? DILATTN_F16 : DILATTN_F32;
  std::vector<NonfiniteCase> out;
  int variant = 0;
  auto base = [&](const char* name) {
    NonfiniteCase n;
    n.c.name = kernel + "/" + dilattn::dtype_name(dtype) + "/" + name;
    n.c.dtype = dtype;
    n.c.D = mma ? 64 : tf32 ? (variant++ % 2 == 0 ? 64 : 128) : 8;
    return n;
  };
  NonfiniteCase n = base("nan_dense");
  n.c.B = 2; n.c.Nq = n.c.Nk = 33; n.c.H = n.c.Hkv = 2;
  n.nan = {5, 1};
  out.push_back(n);
  n = base("nan_causal_in_second_chunk");
  n.c.Nq = n.c.Nk = 80; n.c.causal = true;
  n.nan = {70, 0};  // chunks are 32 (SIMT, MMA_TF32 at D = 128) and 64 (MMA) keys
  out.push_back(n);
  n = base("inf_dense");
  n.c.B = 2; n.c.Nq = n.c.Nk = 33; n.c.H = n.c.Hkv = 2;
  n.nan = {5, 1, INFINITY};
  out.push_back(n);
  n = base("inf_causal_in_second_chunk");
  n.c.Nq = n.c.Nk = 80; n.c.causal = true;
  n.nan = {70, 0, INFINITY};
  out.push_back(n);
  // A V row that is not finite inside the first chunk, causal: the rows before it do not see
  // it and share its chunk (the tensor-core kernels' NaN rule, cuda/mma_unseen_pairs.cuh).
  n = base("nan_v_causal_same_chunk");
  n.c.Nq = n.c.Nk = 80; n.c.causal = true;
  n.nan = {20, 0, NAN, true};
  out.push_back(n);
  n = base("inf_v_causal_same_chunk");
  n.c.Nq = n.c.Nk = 80; n.c.causal = true;
  n.nan = {20, 0, INFINITY, true};
  out.push_back(n);
  // The same in a later chunk, after chunks every row takes whole: there the exact path
  // follows the fast one (the Hopper kernel starts a chunk's P V with the next chunk's S).
  n = base("inf_v_causal_later_chunk");
  n.c.Nq = n.c.Nk = 200; n.c.causal = true;
  n.nan = {150, 0, INFINITY, true};
  out.push_back(n);
  n = base("nan_dilated_three_branches");
  n.c.kind = DILATTN_KIND_DILATED; n.c.Nq = n.c.Nk = 50; n.c.H = 4; n.c.Hkv = 2;
  n.c.segments = {8, 16, 32}; n.c.dilations = {1, 2, 4}; n.c.head_mode = DILATTN_HEADS_MOD;
  n.nan = {21, 0};
  out.push_back(n);
  n = base("nan_sparse_local_band");
  n.c.kind = DILATTN_KIND_BLOCK_SPARSE; n.c.Nq = n.c.Nk = 64; n.c.mask.bq = n.c.mask.bk = 16;
  // Row block ib lists key blocks ib - 1 and ib: the NaN key (block 2) reaches row blocks 2, 3.
  n.c.mask.row_ptr = {0, 1, 3, 5, 7};
  n.c.mask.col_idx = {0, 0, 1, 1, 2, 2, 3};
  n.nan = {40, 0};
  out.push_back(n);
  for (double scale : {1e38, -1e38}) {
    const std::string sign = scale > 0 ? "plus" : "minus";
    n = base(("scale_" + sign + "1e38_dense").c_str());
    n.c.B = 2; n.c.Nq = n.c.Nk = 33; n.c.H = n.c.Hkv = 2; n.c.scale = scale;
    out.push_back(n);
    n = base(("scale_" + sign + "1e38_causal").c_str());
    n.c.Nq = n.c.Nk = 80; n.c.causal = true; n.c.scale = scale;
    out.push_back(n);
  }
  return out;
}

void run_case(const NonfiniteCase& n, dilattn_backend backend, bool hopper) {
  const Case& c = n.c;
  harness::CaseScope scope(c.name);
  const int64_t failed_before = harness::failures();
  harness::Inputs in = kcase::random_inputs(c);
  if (n.nan.j >= 0)
    (n.nan.in_v ? in.v : in.k).set(0, n.nan.j, n.nan.kv_head, 1, n.nan.value);
  const harness::Forward ref =
      harness::run_forward(c, harness::widened_to_f64(in), DILATTN_BACKEND_REF);
  const uint64_t wgmma_before = hopper_launches(backend);
  const harness::Forward got = kcase::run_forward_repeated(c, in, backend);
  if (hopper)
    CHECK_MSG(hopper_launches(backend) > wgmma_before, "forward_wgmma.cu did not run");

  // NaN exactly where the reference's O is NaN, SPEC 8 elsewhere (compare.h).
  CHECK_CLOSE("O", got.o, ref.o, spec8::of(c.dtype));
  std::vector<double> ref_lse = ref.lse.values();
  spec8::Tolerance lse_tol = spec8::lse();
  if (c.scale != 0) {
    // LSE is about scale * max <q, k>, up to 1e38 or beyond: the f32 LSE holds the reference's
    // value rounded to f32 (+-inf outside f32's range), and no absolute bound can hold at that
    // size, so the bound is relative: rtol 1e-4 (SPEC 8's f32 O bound) covers the f32 dot
    // product's rounding, which the huge scale multiplies.
    for (double& x : ref_lse) x = static_cast<float>(x);
    lse_tol.rtol = 1e-4;
  }
  CHECK_CLOSE("LSE", got.lse.values(), ref_lse, lse_tol);
  // The case must check what it is about: NaN rows next to finite ones, or (scale) no NaN.
  const int64_t lse_nans = harness::nan_count(ref.lse), o_nans = harness::nan_count(ref.o);
  int64_t finite = 0;
  for (double x : ref.lse.values()) finite += std::isfinite(x) ? 1 : 0;
  int64_t o_nonfinite = 0, o_finite = 0;
  for (double x : ref.o.values()) (std::isfinite(x) ? o_finite : o_nonfinite) += 1;
  if (n.nan.in_v)  // V reaches O alone: O not finite in the rows that see it, finite elsewhere
    CHECK_MSG(o_nonfinite > 0 && o_finite > 0, "the reference has %lld O values not finite and "
              "%lld finite", static_cast<long long>(o_nonfinite), static_cast<long long>(o_finite));
  else if (n.nan.j >= 0)
    CHECK_MSG(lse_nans > 0 && finite > 0, "the reference has %lld NaN and %lld finite LSE values",
              static_cast<long long>(lse_nans), static_cast<long long>(finite));
  else
    CHECK_MSG(o_nans == 0 && finite > 0, "the reference has %lld NaN O and %lld finite LSE values",
              static_cast<long long>(o_nans), static_cast<long long>(finite));
  std::printf("%-60s %s (reference %lld NaN LSE)\n", c.name.c_str(),
              harness::failures() == failed_before ? "ok" : "FAILED",
              static_cast<long long>(lse_nans));
}

}  // namespace

int main(int argc, char** argv) {
  if (kcase::kernel_argument(argc, argv) == nullptr) return 2;
  dilattn_backend backend = DILATTN_BACKEND_EMU;
  if (!harness::test_backend_from_env(&backend)) return 1;
  if (std::string(argv[1]) == "wgmma") {  // before the first call: device facts are cached
    setenv("DILATTN_CUDA_WGMMA", "1", 1);
    if (backend == DILATTN_BACKEND_EMU) simt::set_emulated_device(9, 0);
  }
  for (const NonfiniteCase& n : cases_for(argv[1]))
    run_case(n, backend, std::string(argv[1]) == "wgmma");
  return harness::finish(
      (std::string("kernels_nonfinite_") + argv[1] + " on " +
       dilattn_backend_name(backend)).c_str());
}
