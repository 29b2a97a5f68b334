// test_cpu_isa.cpp - the cpu backend's instruction set, as DILATTN_CPU_ISA sets it for this
// process (tests/cpu/meson.build runs this file once per value). Properties:
//   <isa> this CPU runs (own cpuid check, not the library's): dilattn_cpu_isa() names it, and
//         forward and backward match the f64 reference within SPEC 8 and are bitwise identical
//         for 1, 2 and 3 threads (SPEC 6), for dense, dense causal and dilated (GQA, causal,
//         a head dim that is no multiple of the vector width); the same with f64 inputs,
//         computed in f64, within SPEC 12's 1e-10 (O, the f64 LSE, gradients);
//   <isa> this CPU lacks, or an unknown name: the cpu backend refuses plans with
//         DILATTN_ERROR_INVALID_VALUE and a message naming the value (AUTO too), dilattn_cpu_isa() is
//         "none", and nothing runs (no illegal instruction);
//   unset: avx512bf16 on an AMD CPU with AVX512_BF16 and AVX512BW where the build holds it,
//         else the widest instruction set this CPU runs (x86-64: avx512, avx2, sse); never the
//         test paths bf16emu and amxemu, nor amx (not yet run on a CPU with AMX), which are
//         chosen by name only.
// Public ABI only (dilattn.h) and SPEC 8's and 12's tolerances.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "dilattn.h"
#include "../common/spec_tolerance.h"
#include "cpu_isas_built.h"

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "FAILED %s\n", what.c_str());
  ++failures;
}

// ---------------------------------------------------------------- what this CPU runs
// Linux's permission for the AMX tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)),
// asked here as the library asks it.
bool amx_tiles_granted() {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
  return syscall(SYS_arch_prctl, 0x1023L, 18L) == 0;
#else
  return false;
#endif
}

// The instruction set names of dilattn_cpu_isa(), checked here with cpuid independently of
// the library. Empty: not an x86-64 GCC/Clang build, where only the baseline exists.
bool cpu_runs(const std::string& isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == "sse") return true;
  if (isa == "avx2") return avx2;
  if (isa == "avx512") return avx2 && __builtin_cpu_supports("avx512f");
  if (isa == "avx512bf16")
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw");
  if (isa == "bf16emu" || isa == "amxemu") return avx2;  // vdpbf16ps (and tiles) emulated
  if (isa == "amx")  // and the kernel hands this process the tile registers
    return cpu_runs("avx512bf16") && __builtin_cpu_supports("amx-tile") &&
           __builtin_cpu_supports("amx-bf16") && amx_tiles_granted();
  return false;
#else
  (void)isa;
  return false;
#endif
}

std::string default_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  // avx512bf16 where vdpbf16ps doubles the bf16 product rate (AMD), else avx512bf16 and bf16emu
  // only by name (cpu/cpu_isa_dispatch.cpp).
  if (cpu_isa_built("avx512bf16") && cpu_runs("avx512bf16") && __builtin_cpu_is("amd"))
    return "avx512bf16";
  for (const char* isa : {"avx512", "avx2", "sse"})
    if (cpu_isa_built(isa) && cpu_runs(isa)) return isa;
#endif
  return "";
}

// ---------------------------------------------------------------- cases
struct Case {
  std::string name;
  int64_t N = 0, Nq = 0, H = 2, Hkv = 1, D = 64;  // Nq = 0: Nq = N
  bool dilated = false, causal = false;
  std::vector<int64_t> segments, dilations;
  int64_t rows_q() const { return Nq > 0 ? Nq : N; }
};

std::vector<Case> cases() {
  std::vector<Case> all(3);
  all[0].name = "dilated_mod_causal_gqa_D40";
  all[0].N = 600; all[0].H = 4; all[0].Hkv = 2; all[0].D = 40; all[0].dilated = true;
  all[0].causal = true; all[0].segments = {128, 512, 600}; all[0].dilations = {1, 2, 2};
  all[1].name = "dense_rectangular_D72";
  all[1].Nq = 300; all[1].N = 520; all[1].D = 72;
  all[2].name = "dense_causal_D64";
  all[2].N = 530; all[2].causal = true;
  return all;
}

template <class T>
struct Tensors {  // Q, K, V, O, LSE, dO, dQ, dK, dV of one case in dtype T
  std::vector<T> q, k, v, o, lse, d_o, dq, dk, dv;
};

// *error: dilattn_last_error() of plan_create (read before desc_destroy clears it).
dilattn_status make_plan(const Case& c, dilattn_dtype dtype, dilattn_backend backend,
                         int32_t threads, dilattn_plan* plan, std::string* error = nullptr) {
  dilattn_desc desc;
  if (dilattn_desc_create(&desc) != DILATTN_SUCCESS) return DILATTN_ERROR_INTERNAL;
  if (c.dilated)
    dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.segments.size()), c.segments.data(),
                             c.dilations.data(), DILATTN_HEADS_MOD);
  dilattn_desc_set_causal(desc, c.causal);
  dilattn_desc_set_num_threads(desc, threads);
  const dilattn_shape shape = dilattn_shape_make(1, c.rows_q(), c.N, c.H, c.Hkv, c.D);
  const dilattn_status s = dilattn_plan_create(plan, desc, &shape, dtype, backend);
  if (error != nullptr) *error = dilattn_last_error();
  dilattn_desc_destroy(desc);
  return s;
}

// Forward, then (with_backward) backward from the given O and LSE, on `backend`; fills t.o,
// t.lse, t.dq, t.dk, t.dv.
template <class T>
bool run(const Case& c, dilattn_dtype dtype, dilattn_backend backend, int32_t threads,
         Tensors<T>& t, const std::vector<T>& o_in, const std::vector<T>& lse_in,
         bool with_backward = true) {
  dilattn_plan plan;
  std::string error;
  if (make_plan(c, dtype, backend, threads, &plan, &error) != DILATTN_SUCCESS) {
    fail(c.name + ": plan_create: " + error);
    return false;
  }
  const int64_t Nq = c.rows_q();
  auto view = [&](std::vector<T>& x, int64_t rows, int64_t heads) {
    return dilattn_tensor_contiguous(x.data(), dtype, 1, rows, heads, c.D);
  };
  t.o.assign(o_in.size(), 0);
  t.lse.assign(lse_in.size(), 0);
  t.dq.assign(t.q.size(), 0);
  t.dk.assign(t.k.size(), 0);
  t.dv.assign(t.v.size(), 0);
  std::vector<T> o_bwd = o_in, lse_bwd = lse_in;
  dilattn_tensor q = view(t.q, Nq, c.H), k = view(t.k, c.N, c.Hkv), v = view(t.v, c.N, c.Hkv);
  dilattn_tensor o = view(t.o, Nq, c.H), d_o = view(t.d_o, Nq, c.H), dq = view(t.dq, Nq, c.H);
  dilattn_tensor dk = view(t.dk, c.N, c.Hkv), dv = view(t.dv, c.N, c.Hkv);
  dilattn_tensor ob = view(o_bwd, Nq, c.H);
  dilattn_tensor lse = dilattn_tensor_contiguous(t.lse.data(), dtype, 1, c.H, Nq, 1);
  dilattn_tensor lseb = dilattn_tensor_contiguous(lse_bwd.data(), dtype, 1, c.H, Nq, 1);
  bool ok = dilattn_forward(plan, &q, &k, &v, &o, &lse, nullptr, 0) == DILATTN_SUCCESS;
  ok = ok && (!with_backward ||
              dilattn_backward(plan, &q, &k, &v, &ob, &lseb, &d_o, &dq, &dk, &dv, nullptr, 0) ==
                  DILATTN_SUCCESS);
  if (!ok) fail(c.name + ": call: " + dilattn_last_error());  // read before plan_destroy
  dilattn_plan_destroy(plan);
  return ok;
}

template <class T>
void expect_close(const std::string& what, const std::vector<T>& got,
                  const std::vector<double>& want, double atol, double rtol) {
  size_t bad = 0, worst_at = 0;
  double worst = 0;
  for (size_t x = 0; x < got.size(); ++x) {
    const double err = std::fabs(got[x] - want[x]);
    if (!(err <= atol + rtol * std::fabs(want[x]))) {
      if (bad == 0 || !(err <= worst)) { worst = err; worst_at = x; }
      ++bad;
    }
  }
  if (bad)
    fail(what + ": " + std::to_string(bad) + " elements out of SPEC 8/12 tolerance, e.g. [" +
         std::to_string(worst_at) + "] = " + std::to_string(got[worst_at]) + ", reference " +
         std::to_string(want[worst_at]));
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

// The cpu backend with dtype T's inputs (`in`): against the reference (rf forward, r
// backward, both from rf's O and LSE), and bitwise across thread counts.
template <class T>
void check_cpu(const std::string& name, const Case& c, dilattn_dtype dtype, const Tensors<T>& in,
               const Tensors<double>& rf, const Tensors<double>& r, spec8::Tolerance tol,
               spec8::Tolerance lse_tol) {
  const std::vector<T> o_ref(rf.o.begin(), rf.o.end()), lse_ref(rf.lse.begin(), rf.lse.end());
  Tensors<T> one = in;
  if (!run(c, dtype, DILATTN_BACKEND_CPU, 1, one, o_ref, lse_ref)) return;
  expect_close(name + " O", one.o, rf.o, tol.atol, tol.rtol);
  expect_close(name + " LSE", one.lse, rf.lse, lse_tol.atol, lse_tol.rtol);
  expect_close(name + " dQ", one.dq, r.dq, tol.atol, tol.rtol);
  expect_close(name + " dK", one.dk, r.dk, tol.atol, tol.rtol);
  expect_close(name + " dV", one.dv, r.dv, tol.atol, tol.rtol);
  for (int32_t threads : {2, 3}) {
    Tensors<T> many = in;
    if (!run(c, dtype, DILATTN_BACKEND_CPU, threads, many, o_ref, lse_ref)) continue;
    const std::string at = name + " with " + std::to_string(threads) + " threads: ";
    if (!same_bytes(many.o, one.o)) fail(at + "O differs from 1 thread");
    if (!same_bytes(many.lse, one.lse)) fail(at + "LSE differs from 1 thread");
    if (!same_bytes(many.dq, one.dq)) fail(at + "dQ differs from 1 thread");
    if (!same_bytes(many.dk, one.dk)) fail(at + "dK differs from 1 thread");
    if (!same_bytes(many.dv, one.dv)) fail(at + "dV differs from 1 thread");
  }
}

// The cpu backend on this process's ISA: against the reference, and across thread counts.
void check_matches_reference_and_threads(const std::string& isa) {
  for (const Case& c : cases()) {
    const std::string name = isa + "/" + c.name;
    const size_t nq = static_cast<size_t>(c.rows_q() * c.H * c.D);
    const size_t nk = static_cast<size_t>(c.N * c.Hkv * c.D);
    const size_t nl = static_cast<size_t>(c.H * c.rows_q());
    Tensors<float> f;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* x : {&f.q, &f.d_o}) { x->resize(nq); for (float& e : *x) e = u(rng); }
    for (auto* x : {&f.k, &f.v}) { x->resize(nk); for (float& e : *x) e = u(rng); }
    Tensors<double> r;  // the same inputs in f64 for the reference
    r.q.assign(f.q.begin(), f.q.end());
    r.k.assign(f.k.begin(), f.k.end());
    r.v.assign(f.v.begin(), f.v.end());
    r.d_o.assign(f.d_o.begin(), f.d_o.end());
    // Reference forward first (its O and LSE feed both backwards), then its backward.
    Tensors<double> rf = r;
    if (!run(c, DILATTN_F64, DILATTN_BACKEND_REF, 1, rf, std::vector<double>(nq),
             std::vector<double>(nl), false))
      continue;
    if (!run(c, DILATTN_F64, DILATTN_BACKEND_REF, 1, r, rf.o, rf.lse)) continue;
    check_cpu(name, c, DILATTN_F32, f, rf, r, spec8::of(DILATTN_F32), spec8::lse());
    // The same values as f64 inputs: computed in f64 (SPEC 12).
    check_cpu(name + " f64", c, DILATTN_F64, r, rf, r, spec8::kF64, spec8::kF64);
  }
}

// DILATTN_CPU_ISA names something this process cannot use: every cpu plan is refused.
void check_refused(const std::string& value) {
  if (std::string(dilattn_cpu_isa()) != "none")
    fail("DILATTN_CPU_ISA=" + value + ": dilattn_cpu_isa() = '" + dilattn_cpu_isa() +
         "', expected 'none'");
  if (dilattn_backend_available(DILATTN_BACKEND_CPU))
    fail("DILATTN_CPU_ISA=" + value + ": the cpu backend says it is available");
  dilattn_plan plan = nullptr;
  std::string message;
  const dilattn_status s =
      make_plan(cases()[1], DILATTN_F32, DILATTN_BACKEND_CPU, 2, &plan, &message);
  if (s != DILATTN_ERROR_INVALID_VALUE) {
    fail("DILATTN_CPU_ISA=" + value + ": plan_create returned " + dilattn_status_string(s) +
         ", expected DILATTN_ERROR_INVALID_VALUE");
    if (s == DILATTN_SUCCESS) dilattn_plan_destroy(plan);
  }
  if (message.find("DILATTN_CPU_ISA") == std::string::npos ||
      message.find("'" + value + "'") == std::string::npos)
    fail("DILATTN_CPU_ISA=" + value + ": the message does not name the variable and value: " +
         message);
  // AUTO too: a setting gone wrong stops the plan instead of a silent fall back to ref.
  const dilattn_status a = make_plan(cases()[1], DILATTN_F32, DILATTN_BACKEND_AUTO, 2, &plan,
                                     &message);
  if (a != DILATTN_ERROR_INVALID_VALUE) {
    fail("DILATTN_CPU_ISA=" + value + ": an AUTO plan returned " + dilattn_status_string(a) +
         ", expected DILATTN_ERROR_INVALID_VALUE");
    if (a == DILATTN_SUCCESS) dilattn_plan_destroy(plan);
  }
}

// False when the cpu backend refuses plans because this build has no such instruction set.
bool built(const std::string& isa) {
  dilattn_plan plan = nullptr;
  std::string error;
  if (make_plan(cases()[1], DILATTN_F32, DILATTN_BACKEND_CPU, 1, &plan, &error) ==
      DILATTN_SUCCESS) {
    dilattn_plan_destroy(plan);
    return true;
  }
  return error.find("'" + isa + "' is not an instruction set this "
                                                "library was built for") == std::string::npos;
}

}  // namespace

int main() {
  const char* env = std::getenv("DILATTN_CPU_ISA");
  const std::string asked = env != nullptr ? env : "";
  const std::string in_use = dilattn_cpu_isa();
  std::printf("DILATTN_CPU_ISA='%s', dilattn_cpu_isa() = '%s'\n", asked.c_str(), in_use.c_str());
  if (asked.empty()) {
    const std::string widest = default_isa();
    if (widest.empty()) {
      std::printf("skipped: this build holds none of the x86-64 tables (-Dnative=true, or not x86-64 GCC)\n");
      return 77;
    }
    if (in_use != widest) fail("default ISA '" + in_use + "', this CPU runs '" + widest + "'");
    check_matches_reference_and_threads(in_use);
  } else if (cpu_runs(asked)) {
    if (in_use == "none" && !built(asked)) {
      std::printf("skipped: this build holds no '%s' (-Dnative=true, or not GCC)\n", asked.c_str());
      return 77;
    }
    if (in_use != asked) fail("DILATTN_CPU_ISA=" + asked + ": dilattn_cpu_isa() = '" + in_use + "'");
    else check_matches_reference_and_threads(in_use);
  } else {
    check_refused(asked);
  }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
