// cpu_isa_dispatch.cpp - chosen_isa(): the cpu backend's instruction set for this process
// (cpu_isa.h). Compiled for the baseline target only: it runs before anything is known about
// the CPU.
// Checked by tests/cpu/test_cpu_isa.cpp.
#include <cstdlib>
#include <iterator>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <string>
#include <vector>

#include "cpu_isa.h"

namespace dilattn::cpu {

namespace {

// The built tables, widest first: the default is the first one the CPU runs.
const IsaKernels* const kBuilt[] = {
#if defined(DILATTN_CPU_BUILT_NATIVE)
    &native::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_AVX512)
    &avx512::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_AVX2)
    &avx2::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_BASELINE)
    &baseline::kKernels,
#endif
};

// Tables the default passes over (DILATTN_CPU_ISA names them): amx, which has run only with its
// tile instructions emulated (tests/cpu/test_cpu_amx_tiles.cpp), never on a CPU with AMX, so it
// is chosen by name until it has (bench/gpu/first_light.sh runs it where the GPU machine's host
// has AMX); avx512bf16, the default only
// where vdpbf16ps doubles the bf16 product rate (kFeatureFastPairDot: on a 2-core AMD EPYC
// with AVX512_BF16 its bf16 calls ran at about 1.6x avx512's f32 products of widened bf16,
// docs/performance.md), while on an Intel Xeon with AVX512_BF16 they ran at 0.48-0.77x
// (bench/results/cpu_bench_bf16.xeon-emr-2threads.txt); and bf16emu, which emulates
// vdpbf16ps (cpu_pair_dot.h) so the avx512bf16 code runs in tests on CPUs without it, and
// amxemu, which emulates the tiles too (cpu_amx_tiles.h) so the amx code does.
const IsaKernels* const kOutsideWidestOrder[] = {
#if defined(DILATTN_CPU_BUILT_AMX)
    &amx::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_AVX512BF16)
    &avx512bf16::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_BF16EMU)
    &bf16emu::kKernels,
#endif
#if defined(DILATTN_CPU_BUILT_AMXEMU)
    &amxemu::kKernels,
#endif
    nullptr,
};

// Linux hands a process the AMX tile registers only when it asks (they enlarge the state the
// kernel saves on each switch): arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Asked once,
// here, before the amx table can be chosen; a refusal (an older kernel, a sandbox) leaves the
// CPU without kFeatureAmxBf16, so the choice falls to the tables below it.
bool os_grants_amx_tiles() {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

uint32_t this_cpu_features() {
  uint32_t f = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx")) f |= kFeatureAvx;
  if (__builtin_cpu_supports("avx2")) f |= kFeatureAvx2;
  if (__builtin_cpu_supports("fma")) f |= kFeatureFma;
  // The AVX-512 tables use BMI2's pdep too (cpu_isa_target.h), which every AVX-512 CPU has.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("bmi2")) f |= kFeatureAvx512f;
  // (Every CPU with AVX512_BF16 has AVX512BW, which the avx512bf16 table uses too.)
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw"))
    f |= kFeatureAvx512bf16;
  if ((f & kFeatureAvx512bf16) && __builtin_cpu_is("amd")) f |= kFeatureFastPairDot;
  if ((f & kFeatureAvx512bf16) && __builtin_cpu_supports("amx-tile") &&
      __builtin_cpu_supports("amx-bf16") && os_grants_amx_tiles())
    f |= kFeatureAmxBf16;
#endif
  return f;
}

namespace {

bool runs_here(const IsaKernels& k, uint32_t have) { return (k.required & ~have) == 0; }

}  // namespace

IsaChoice choose_isa(const char* requested, uint32_t have) {
  IsaChoice c;
  if (requested == nullptr || requested[0] == '\0') {
#if defined(DILATTN_CPU_BUILT_AVX512BF16)
    if ((have & kFeatureFastPairDot) && runs_here(avx512bf16::kKernels, have)) {
      c.kernels = &avx512bf16::kKernels;
      return c;
    }
#endif
    for (const IsaKernels* k : kBuilt)
      if (runs_here(*k, have)) {
        c.kernels = k;
        return c;
      }
    c.refusal = "backend 'cpu': no instruction set it was built for runs on this CPU";
    return c;
  }
  std::string built;
  std::vector<const IsaKernels*> named(std::begin(kBuilt), std::end(kBuilt));
  for (const IsaKernels* k : kOutsideWidestOrder)
    if (k != nullptr) named.push_back(k);
  for (const IsaKernels* k : named) {
    built += std::string(built.empty() ? "" : ", ") + k->name;
    if (std::string(requested) != k->name) continue;
    if (runs_here(*k, have)) {
      c.kernels = k;
      return c;
    }
    c.refusal =
        std::string("DILATTN_CPU_ISA = '") + requested + "': this CPU lacks its instructions";
    return c;
  }
  c.refusal = std::string("DILATTN_CPU_ISA = '") + requested + "' is not an instruction set this "
              "library was built for (" + built + ")";
  return c;
}

namespace {

const IsaChoice& choice() {
  // Once per process, thread-safe.
  static const IsaChoice once = choose_isa(std::getenv("DILATTN_CPU_ISA"), this_cpu_features());
  return once;
}

}  // namespace

const IsaKernels* chosen_isa() { return choice().kernels; }
const char* isa_refusal() { return choice().refusal.c_str(); }

}  // namespace dilattn::cpu
