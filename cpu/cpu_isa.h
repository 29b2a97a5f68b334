// cpu_isa.h - the cpu backend's runtime choice of instruction set.
//
// The per-ISA code is compiled once per target (cpu_isa_target.h, cpu/meson.build); each
// compilation publishes one IsaKernels table (cpu_isa_kernels.cpp). chosen_isa() picks one table
// for the whole process, once, at first use (thread-safe: a function-local static):
//   - DILATTN_CPU_ISA unset or empty: avx512bf16 on a CPU whose vdpbf16ps doubles the bf16
//     product rate (kFeatureFastPairDot), else the first built table, widest first, whose
//     required features this CPU has (cpuid, __builtin_cpu_supports), amx and avx512bf16 left
//     out (cpu_isa_dispatch.cpp says why);
//   - DILATTN_CPU_ISA=sse|avx2|avx512|avx512bf16|amx (neon, generic elsewhere): that table, if
//     it is built and this CPU runs it; otherwise no table, and the cpu backend refuses every
//     plan with a message naming the value (never an illegal instruction);
//   - DILATTN_CPU_ISA=bf16emu: the test table (avx512bf16's bf16 code on AVX2 vectors with
//     vdpbf16ps emulated, cpu_pair_dot.h), never chosen by default; amxemu the same with amx's
//     tile products on emulated tiles (cpu_amx_tiles.h).
// avx512bf16 differs from avx512 for bf16 inputs only: their products are bf16 pair dot
// products (SPEC 12); f16, f32 and f64 inputs run the same code as avx512. amx differs from
// avx512bf16 in where those products run: the full 16-row blocks on AMX tiles.
// Results are bitwise identical across thread counts for each ISA; different ISAs differ in
// the last bits (vector width changes the order of sums), all within SPEC 8 (SPEC 12 for f64).
// Checked by tests/cpu/test_cpu_isa.cpp (every ISA this CPU runs, and the refusals).
#ifndef DILATTN_CPU_ISA_H
#define DILATTN_CPU_ISA_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend.h"

namespace dilattn::cpu {

// CPU features a table may require (x86; other machines need none beyond their baseline).
enum CpuFeature : uint32_t {
  kFeatureAvx = 1u << 0,
  kFeatureAvx2 = 1u << 1,
  kFeatureFma = 1u << 2,
  kFeatureAvx512f = 1u << 3,
  kFeatureAvx512bf16 = 1u << 4,  // vdpbf16ps (AVX512_BF16: Zen 4 and newer, Sapphire Rapids)
  // vdpbf16ps issues at the rate of f32 FMAs, so its two products per lane double the bf16
  // product rate: AMD's AVX512_BF16 CPUs (measured on a Zen 4 EPYC). On an Intel Xeon with
  // AVX512_BF16 it measured slower than f32 products of widened bf16 (cpu_isa_dispatch.cpp).
  kFeatureFastPairDot = 1u << 5,
  // AMX-TILE and AMX-BF16 (Sapphire Rapids and newer Xeons), and the kernel lets this process
  // use the tile registers (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
  kFeatureAmxBf16 = 1u << 6,
};

// The features the compiler may use in the file that evaluates this (its -m/-march flags).
constexpr uint32_t compiler_features() {
  uint32_t f = 0;
#if defined(__AVX__)
  f |= kFeatureAvx;
#endif
#if defined(__AVX2__)
  f |= kFeatureAvx2;
#endif
#if defined(__FMA__)
  f |= kFeatureFma;
#endif
#if defined(__AVX512F__)
  f |= kFeatureAvx512f;
#endif
#if defined(__AVX512BF16__)
  f |= kFeatureAvx512bf16;
#endif
  return f;
}

// A tile of pairs (i0 + t row_step, j0 + c key_step), t < rows, c < kcount <= 64, of batch
// element b and head h (of H), with dropout p and a call's seed and offset (SPEC 11.1).
// IsaKernels::dropout_keep_bits sets bit c of keep[t] for a kept pair. product_steps > 0 asks
// for the decisions as the tiles draw them between the steps of a score product of that many
// steps (cpu_dropout.h's TileDraws, a register block of rows at a time), 0 for dropout_keep_bits.
struct DropoutTileQuery {
  uint64_t seed = 0, offset = 0;
  double p = 0;
  int64_t b = 0, h = 0, H = 1;
  int64_t i0 = 0, row_step = 1, rows = 1;
  int64_t j0 = 0, key_step = 1, kcount = 1;
  int64_t product_steps = 0;
};

// One target's compiled code. Plain data, constant-initialised: reading it runs none of the
// target's instructions, so the choice can look at every table on any CPU.
struct IsaKernels {
  const char* name;   // DILATTN_CPU_ISA's value for it: "sse", "avx2", "avx512", "neon", ...
  uint32_t required;  // CpuFeature bits the CPU must have
  int vector_bytes;
  WorkspaceBytes (*workspace_bytes)(const Problem& p);  // the plan's workspace query
  dilattn_status (*forward)(const Problem& p, const ForwardArgs& a);
  dilattn_status (*backward)(const Problem& p, const BackwardArgs& a);
  // y[i] = 2^x[i], i < n, by the vector exp2 the softmax uses (cpu_microkernel.h, exp2v), in
  // f32 and in f64 (the f64 path, SPEC 12): exposed so tests/cpu/test_cpu_exp2.cpp can sweep
  // every instruction set's copy.
  void (*exp2)(const float* x, float* y, int64_t n);
  void (*exp2_f64)(const double* x, double* y, int64_t n);
  // The keep decisions of one tile of pairs as the forward and backward draw them, a vector
  // of generator calls at a time (cpu_dropout.h): exposed so
  // tests/cpu/test_cpu_dropout_draws.cpp can check every instruction set's copy against
  // lib/dropout_rng.h's dropout_keep.
  void (*dropout_keep_bits)(const DropoutTileQuery& query, uint64_t* keep);
  // out[i] = acc[i] plus the bf16 pair dot product of words a[i] and b[i], i < n, by the
  // products bf16 inputs take (cpu_pair_dot.h's pair_dot: vdpbf16ps, or its emulation in
  // bf16emu); null where bf16 inputs are widened to f32. Exposed so
  // tests/cpu/test_cpu_bf16_emulation.cpp can hold the emulation to the instruction.
  void (*pair_dot)(const float* acc, const uint32_t* a, const uint32_t* b, float* out, int64_t n);
  // P and dS rounded to bf16 words as the tiles round them (cpu_pair_dot.h), i < n:
  // across[i] = (bf16(low[i]), bf16(high[i])) as round_columns_to_words pairs rows, and
  // in_order[i / 2] = (bf16(low[i - i % 2]), bf16(low[i - i % 2 + 1])) as round_rows_to_words
  // pairs columns (n even); null where pair_dot is. Exposed for the same test.
  void (*round_words)(const float* low, const float* high, uint32_t* across, uint32_t* in_order,
                      int64_t n);
};

// The tables a build may hold, one per target namespace (cpu_isa_target.h); which exist is
// cpu/meson.build's choice (DILATTN_CPU_BUILT_<NAME> in cpu_isa_dispatch.cpp).
namespace amx { extern const IsaKernels kKernels; }
namespace avx512bf16 { extern const IsaKernels kKernels; }
namespace avx512 { extern const IsaKernels kKernels; }
namespace bf16emu { extern const IsaKernels kKernels; }
namespace amxemu { extern const IsaKernels kKernels; }
namespace avx2 { extern const IsaKernels kKernels; }
namespace baseline { extern const IsaKernels kKernels; }
namespace native { extern const IsaKernels kKernels; }

// The choice for a DILATTN_CPU_ISA value (null or "": the default) on a CPU with the given
// CpuFeature bits, among the tables this build holds: the table, or null and why not.
struct IsaChoice {
  const IsaKernels* kernels = nullptr;
  std::string refusal;
};
IsaChoice choose_isa(const char* requested, uint32_t cpu_features);

// The table this process uses (choose_isa of DILATTN_CPU_ISA and this CPU's cpuid), or null when DILATTN_CPU_ISA asks for one it cannot use;
// isa_refusal() then says why ("" otherwise).
// The CpuFeature bits of the CPU this runs on (cpuid; 0 off x86).
uint32_t this_cpu_features();

const IsaKernels* chosen_isa();
const char* isa_refusal();

}  // namespace dilattn::cpu

#endif  // DILATTN_CPU_ISA_H
