// test_sparse_cpu.cpp - the cpu backend's block-sparse forward and backward against the f64
// reference (SPEC 4, 6, 8), through the public C ABI: random per-head and shared masks (from
// dilattn_mask_random), causal and not, GQA, N not a multiple of the block size, Nq != Nk.
// Tolerances: SPEC 8 f32 (atol 1e-5, rtol 1e-4; LSE 1e-4 absolute).
// Exits 77 (meson: SKIP, not a pass) when this build has no cpu backend.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "dilattn.h"

namespace {

int failures = 0;

struct Case {
  int64_t B, Nq, Nk, H, Hkv, D, bq, bk, mask_heads;
  double density;
  int causal;
};

bool ok(dilattn_status s, const char* what) {
  if (s == DILATTN_SUCCESS) return true;
  std::printf("FAIL %s: %s\n", what, dilattn_last_error());
  ++failures;
  return false;
}

// Worst violation of |x - ref| <= atol + rtol |ref| (> 0 means a failure).
double worst(const std::vector<float>& x, const std::vector<double>& ref, double atol, double rtol) {
  double w = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    const double r = ref[t], e = std::fabs(x[t] - r) - (atol + rtol * std::fabs(r));
    if (std::isinf(r) && x[t] == r) continue;  // -inf LSE of an empty row on both sides
    if (!(e <= w)) w = std::isnan(e) ? INFINITY : e;
  }
  return w;
}

void run_case(const Case& c, uint64_t seed) {
  dilattn_mask mask = nullptr;
  if (!ok(dilattn_mask_random(&mask, c.Nq, c.Nk, c.bq, c.bk, c.mask_heads, c.density, seed, 0),
          "mask"))
    return;
  const int64_t nq = c.B * c.Nq * c.H * c.D, nk = c.B * c.Nk * c.Hkv * c.D, nl = c.B * c.H * c.Nq;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> q(nq), k(nk), v(nk), d_o(nq);
  for (auto* a : {&q, &k, &v}) for (float& x : *a) x = normal(gen);
  for (float& x : d_o) x = normal(gen);
  std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
      dod(d_o.begin(), d_o.end());

  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  dilattn_desc_set_block_sparse(desc, mask);
  dilattn_desc_set_causal(desc, c.causal);
  dilattn_mask_destroy(mask);  // the description keeps its own reference
  dilattn_plan ref = nullptr, cpu = nullptr;
  const dilattn_shape shape = dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
  ok(dilattn_plan_create(&ref, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF), "ref plan");
  ok(dilattn_plan_create(&cpu, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU), "cpu plan");
  dilattn_desc_destroy(desc);
  if (ref == nullptr || cpu == nullptr) {  // reported by ok(); later cases still run
    dilattn_plan_destroy(ref);
    dilattn_plan_destroy(cpu);
    return;
  }

  auto T = [](void* p, dilattn_dtype t, int64_t a, int64_t b, int64_t h, int64_t d) {
    return dilattn_tensor_contiguous(p, t, a, b, h, d);
  };
  // Reference, f64.
  std::vector<double> o_r(nq), lse_r(nl), dq_r(nq), dk_r(nk), dv_r(nk);
  dilattn_tensor rq = T(qd.data(), DILATTN_F64, c.B, c.Nq, c.H, c.D), rk = T(kd.data(), DILATTN_F64, c.B, c.Nk, c.Hkv, c.D),
                 rv = T(vd.data(), DILATTN_F64, c.B, c.Nk, c.Hkv, c.D), ro = T(o_r.data(), DILATTN_F64, c.B, c.Nq, c.H, c.D),
                 rl = T(lse_r.data(), DILATTN_F64, c.B, c.H, c.Nq, 1), rdo = T(dod.data(), DILATTN_F64, c.B, c.Nq, c.H, c.D),
                 rdq = T(dq_r.data(), DILATTN_F64, c.B, c.Nq, c.H, c.D), rdk = T(dk_r.data(), DILATTN_F64, c.B, c.Nk, c.Hkv, c.D),
                 rdv = T(dv_r.data(), DILATTN_F64, c.B, c.Nk, c.Hkv, c.D);
  ok(dilattn_forward(ref, &rq, &rk, &rv, &ro, &rl, nullptr, 0), "ref forward");
  ok(dilattn_backward(ref, &rq, &rk, &rv, &ro, &rl, &rdo, &rdq, &rdk, &rdv, nullptr, 0), "ref backward");
  // cpu, f32.
  std::vector<float> o(nq), lse(nl), dq(nq), dk(nk), dv(nk);
  dilattn_tensor fq = T(q.data(), DILATTN_F32, c.B, c.Nq, c.H, c.D), fk = T(k.data(), DILATTN_F32, c.B, c.Nk, c.Hkv, c.D),
                 fv = T(v.data(), DILATTN_F32, c.B, c.Nk, c.Hkv, c.D), fo = T(o.data(), DILATTN_F32, c.B, c.Nq, c.H, c.D),
                 fl = T(lse.data(), DILATTN_F32, c.B, c.H, c.Nq, 1), fdo = T(d_o.data(), DILATTN_F32, c.B, c.Nq, c.H, c.D),
                 fdq = T(dq.data(), DILATTN_F32, c.B, c.Nq, c.H, c.D), fdk = T(dk.data(), DILATTN_F32, c.B, c.Nk, c.Hkv, c.D),
                 fdv = T(dv.data(), DILATTN_F32, c.B, c.Nk, c.Hkv, c.D);
  if (ok(dilattn_forward(cpu, &fq, &fk, &fv, &fo, &fl, nullptr, 0), "cpu forward") &&
      ok(dilattn_backward(cpu, &fq, &fk, &fv, &fo, &fl, &fdo, &fdq, &fdk, &fdv, nullptr, 0), "cpu backward")) {
    const struct { const char* name; double w; } checks[] = {
        {"O", worst(o, o_r, 1e-5, 1e-4)},   {"LSE", worst(lse, lse_r, 1e-4, 0)},
        {"dQ", worst(dq, dq_r, 1e-5, 1e-4)}, {"dK", worst(dk, dk_r, 1e-5, 1e-4)},
        {"dV", worst(dv, dv_r, 1e-5, 1e-4)}};
    for (const auto& ch : checks)
      if (ch.w > 0) {
        std::printf("FAIL B=%lld Nq=%lld Nk=%lld H=%lld Hkv=%lld bq=%lld bk=%lld causal=%d: %s off by %g\n",
                    (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H, (long long)c.Hkv,
                    (long long)c.bq, (long long)c.bk, c.causal, ch.name, ch.w);
        ++failures;
      }
  }
  dilattn_plan_destroy(ref);
  dilattn_plan_destroy(cpu);
}

}  // namespace

int main() {
  if (!dilattn_backend_available(DILATTN_BACKEND_CPU)) {
    std::printf("SKIP: the cpu backend is not in this build\n");
    return 77;
  }
  const Case cases[] = {
      {1, 64, 64, 2, 2, 16, 16, 16, 1, 0.4, 0},   {1, 64, 64, 2, 2, 16, 16, 16, 1, 0.4, 1},
      {2, 77, 77, 4, 2, 32, 16, 16, 4, 0.3, 1},   {1, 50, 90, 4, 1, 8, 8, 16, 4, 0.5, 1},
      {1, 90, 50, 2, 1, 8, 16, 8, 1, 0.5, 1},     {2, 100, 100, 3, 3, 64, 64, 64, 3, 0.6, 0},
      {1, 33, 33, 2, 1, 4, 4, 4, 2, 1.0, 0},      {1, 33, 33, 2, 1, 4, 4, 4, 2, 0.0, 1}};
  uint64_t seed = 1;
  for (const Case& c : cases) run_case(c, seed++);
  if (failures) std::printf("%d failure(s)\n", failures);
  else std::printf("test_sparse_cpu: all checks passed\n");
  return failures ? 1 : 0;
}
