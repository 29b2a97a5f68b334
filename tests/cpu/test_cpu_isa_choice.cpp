// test_cpu_isa_choice.cpp - the cpu backend's choice of instruction set (cpu/cpu_isa.h,
// choose_isa) for CPUs this machine is not: with the feature bits of an SSE2-only, an AVX2 and
// an AVX-512 CPU, the default is the widest built table that CPU runs, DILATTN_CPU_ISA picks a
// narrower one (avx512 on an AVX512_BF16 CPU; bf16emu, the test path, only by name), and a
// wider one than the CPU has, or an unknown name, is refused with a
// message naming the value (so it never runs: no illegal instruction). x86-64 GCC builds only
// (the others hold one table). The ISAs this machine runs are run for real by test_cpu_isa.cpp.
#include <cstdio>
#include <string>

#include "cpu_isa.h"
#include "cpu_isas_built.h"

using namespace dilattn::cpu;

namespace {

int failures = 0;

void expect_choice(const char* requested, uint32_t features, const char* want) {
  const IsaChoice c = choose_isa(requested, features);
  const std::string got = c.kernels != nullptr ? c.kernels->name : "(refused)";
  if (got != want) {
    std::fprintf(stderr, "FAILED DILATTN_CPU_ISA='%s', features 0x%x: chose %s, expected %s (%s)\n",
                 requested ? requested : "", features, got.c_str(), want, c.refusal.c_str());
    ++failures;
  }
  if (c.kernels == nullptr && requested != nullptr &&
      c.refusal.find(std::string("DILATTN_CPU_ISA = '") + requested + "'") == std::string::npos) {
    std::fprintf(stderr, "FAILED refusal of '%s' does not name it: %s\n", requested,
                 c.refusal.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
#if !(defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__))
  std::printf("skipped: one instruction set is built here\n");
  return 77;
#else
  if (choose_isa("sse", 0).kernels == nullptr) {  // -Dnative=true: one table, -march=native
    std::printf("skipped: this build holds one instruction set (-Dnative=true)\n");
    return 77;
  }
  const uint32_t sse2_cpu = 0;
  const uint32_t avx2_cpu = kFeatureAvx | kFeatureAvx2 | kFeatureFma;
  const uint32_t avx512_cpu = avx2_cpu | kFeatureAvx512f;
  // What each CPU gets where the build holds the table (-Dcpu_isas may leave any but the
  // baseline out): the widest built one it runs by default, a built one by name.
  const char* const widest_avx512 = first_cpu_isa_built({"avx512", "avx2", "sse"});
  const char* const widest_avx2 = first_cpu_isa_built({"avx2", "sse"});
  const char* const avx512_named = first_cpu_isa_built({"avx512"});
  const char* const avx2_named = first_cpu_isa_built({"avx2"});
  expect_choice(nullptr, sse2_cpu, "sse");
  expect_choice("", avx2_cpu, widest_avx2);
  expect_choice(nullptr, avx512_cpu, widest_avx512);
  expect_choice(nullptr, kFeatureAvx | kFeatureAvx2, "sse");  // AVX2 without FMA
  expect_choice("sse", avx512_cpu, "sse");
  expect_choice("avx2", avx512_cpu, avx2_named);
  expect_choice("avx512", avx512_cpu, avx512_named);
  expect_choice("avx512", avx2_cpu, "(refused)");
  expect_choice("avx2", sse2_cpu, "(refused)");
  expect_choice("avx512", sse2_cpu, "(refused)");
  expect_choice("AVX2", avx512_cpu, "(refused)");  // names are exact
  expect_choice("neon", avx512_cpu, "(refused)");
  // AVX512_BF16: avx512 by default where vdpbf16ps gains nothing (Intel), avx512bf16 where it
  // doubles the bf16 product rate (AMD: kFeatureFastPairDot), cpu_isa_dispatch.cpp; avx512 by
  // name on both; avx512bf16 by name where the compiler could build it (tests/cpu/meson.build).
  // bf16emu, the emulation for tests, only by name, on any AVX2 CPU.
  const uint32_t bf16_cpu = avx512_cpu | kFeatureAvx512bf16;
  const uint32_t fast_bf16_cpu = bf16_cpu | kFeatureFastPairDot;
  const char* const fast_bf16_default = first_cpu_isa_built({"avx512bf16", "avx512", "avx2", "sse"});
  const char* const avx512bf16_named = first_cpu_isa_built({"avx512bf16"});
  const char* const bf16emu_named = first_cpu_isa_built({"bf16emu"});
  expect_choice(nullptr, bf16_cpu, widest_avx512);
  expect_choice(nullptr, fast_bf16_cpu, fast_bf16_default);
  expect_choice("", fast_bf16_cpu, fast_bf16_default);
  expect_choice("avx512", bf16_cpu, avx512_named);
  expect_choice("avx512", fast_bf16_cpu, avx512_named);
  expect_choice("avx2", fast_bf16_cpu, avx2_named);
  expect_choice("avx512bf16", fast_bf16_cpu, avx512bf16_named);
  expect_choice("avx512bf16", bf16_cpu, avx512bf16_named);
  expect_choice("avx512bf16", avx512_cpu, "(refused)");
  expect_choice("avx512bf16", avx2_cpu, "(refused)");
  expect_choice("bf16emu", avx2_cpu, bf16emu_named);
  expect_choice("bf16emu", bf16_cpu, bf16emu_named);
  expect_choice("bf16emu", sse2_cpu, "(refused)");
  expect_choice("bf16emu", kFeatureAvx | kFeatureAvx2, "(refused)");  // no FMA
  // AMX-BF16 with the tiles granted (kFeatureAmxBf16): amx by name only (cpu_isa_dispatch.cpp:
  // not yet run on a CPU with AMX), where the build holds it and the CPU has both AVX512_BF16
  // and the tiles; the default as without the bit.
  const char* const amx_named = first_cpu_isa_built({"amx"});
  const uint32_t amx_cpu = bf16_cpu | kFeatureAmxBf16;
  expect_choice(nullptr, amx_cpu, widest_avx512);
  expect_choice("", amx_cpu | kFeatureFastPairDot, fast_bf16_default);
  expect_choice("amx", amx_cpu, amx_named);
  expect_choice("avx512bf16", amx_cpu, avx512bf16_named);
  expect_choice("avx512", amx_cpu, avx512_named);
  expect_choice("amx", bf16_cpu, "(refused)");
  expect_choice("amx", fast_bf16_cpu, "(refused)");
  expect_choice("amx", avx512_cpu | kFeatureAmxBf16, "(refused)");  // tiles but no AVX512_BF16
  // amxemu, the emulation for tests, by name only, on any AVX2 CPU.
  const char* const amxemu_named = first_cpu_isa_built({"amxemu"});
  expect_choice(nullptr, avx2_cpu, widest_avx2);
  expect_choice("amxemu", avx2_cpu, amxemu_named);
  expect_choice("amxemu", amx_cpu, amxemu_named);
  expect_choice("amxemu", sse2_cpu, "(refused)");
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
#endif
}
