// cpu_isa_target.h - which instruction set one compilation of the cpu backend's per-ISA code is
// for: its namespace, its vector width, and the instructions switched on from here to the end
// of the file.
//
// The per-ISA code (cpu_forward.cpp, cpu_backward.cpp, cpu_isa_kernels.cpp and the headers
// cpu_microkernel.h, cpu_tile_loop.h, cpu_tile_io.h, cpu_workspace.h) is compiled once per
// target (cpu/meson.build passes -DDILATTN_CPU_TARGET_<NAME>) into namespace
// dilattn::cpu::DILATTN_CPU_ISA_NS, so the copies never meet at link time; cpu_isa_dispatch.cpp
// picks one at run time (cpu_isa.h).
//
// The target's instructions are switched on by `#pragma GCC target` below, *after* every header
// the per-ISA code uses from outside it has been included here, with the baseline target. Why
// not -mavx512f on the whole file: inline functions and template instances of shared headers
// (std, index_rules.h, dtype_convert.h, ...) would then be compiled for AVX-512 too, and the
// linker keeps one copy of each for the whole library, so the reference backend could end up
// running AVX-512 code on a CPU without it. Rule: a per-ISA file includes this header first,
// and anything it needs from outside the per-ISA files is added to the list below.
//
// GCC's C++ front end does not redefine __AVX512F__ & co. after the pragma, so the vector code
// selects on the DILATTN_CPU_* macros defined here:
//   DILATTN_CPU_ISA_NS        namespace of this compilation
//   DILATTN_CPU_ISA_NAME      what dilattn_cpu_isa() and DILATTN_CPU_ISA call it
//   DILATTN_CPU_VEC_BYTES     vector width: 64, 32 or 16 bytes
//   DILATTN_CPU_AVX512        1 when the 64-byte vectors are AVX-512 registers (0 for bf16emu's,
//                             which GCC splits into AVX2 halves)
//   DILATTN_CPU_FMA           1 when a*b+c is one fused instruction
//   DILATTN_CPU_REQUIRED      CpuFeature bits (cpu_isa.h) the CPU must have
//   DILATTN_CPU_PDEP          1 where BMI2's pdep spreads bits (cpu_dropout.h): the AVX-512
//                             targets (every AVX-512 CPU has BMI2; cpu_isa_dispatch.cpp counts
//                             AVX-512 only with it) and a baseline compiled with -mbmi2
//   DILATTN_CPU_PAIR_DOT      how bf16 inputs are multiplied (cpu_pair_dot.h): 0 widened to f32
//                             (f32 products), 1 by vdpbf16ps, 2 by an exact emulation of it
//   DILATTN_CPU_AMX           where the bf16 pair products' full 16-row blocks run
//                             (cpu_amx_tiles.h): 0 on vectors, 1 on AMX tiles, 2 on emulated
//                             tiles
// Targets: amx (avx512bf16 with AMX-TILE + AMX-BF16: bf16 products on AMX tiles where whole
// 16-row blocks allow), avx512bf16 (AVX-512F + AVX512BW + AVX512_BF16 + AVX2 + FMA: bf16
// products by vdpbf16ps),
// avx512 (AVX-512F + AVX2 + FMA), avx2 (AVX2 + FMA), baseline (the compiler's default: SSE2 on
// x86-64, NEON on aarch64), native (-Dnative=true: -march=native for everything), and bf16emu,
// a test path never chosen on its own (cpu_isa.h): avx512bf16's code, vector width included, on
// AVX2 instructions, with vdpbf16ps emulated exactly, so machines without AVX512_BF16 run the
// same arithmetic bit for bit (and machines without AVX-512 that of avx512 for other dtypes);
// amxemu, bf16emu with amx's tile products on emulated tiles (another test path).
#ifndef DILATTN_CPU_ISA_TARGET_H
#define DILATTN_CPU_ISA_TARGET_H

// ---------------------------------------------------------------- shared headers, baseline
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // every intrinsic, each carrying its own target attribute
#endif

#include "backend.h"
#include "cpu_isa.h"
#include "cpu_thread_pool.h"
#include "dropout_rng.h"
#include "dtype_convert.h"
#include "index_rules.h"
#include "problem.h"
#include "softmax_rules.h"

// ---------------------------------------------------------------- the target
#if defined(DILATTN_CPU_TARGET_AMX)
// avx512bf16's code with the full 16-row blocks of the bf16 products on AMX tiles
// (cpu_amx_tiles.h); every other product, and every other dtype, as avx512bf16.
#define DILATTN_CPU_ISA_NS amx
#define DILATTN_CPU_ISA_NAME "amx"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 1
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_PAIR_DOT 1
#define DILATTN_CPU_AMX 1
#define DILATTN_CPU_REQUIRED                                                           \
  (kFeatureAvx | kFeatureAvx2 | kFeatureFma | kFeatureAvx512f | kFeatureAvx512bf16 | \
   kFeatureAmxBf16)
#define DILATTN_CPU_PDEP 1
#pragma GCC target("avx512f,avx512bw,avx512bf16,avx2,fma,bmi2,amx-tile,amx-bf16")
#elif defined(DILATTN_CPU_TARGET_AVX512BF16)
#define DILATTN_CPU_ISA_NS avx512bf16
#define DILATTN_CPU_ISA_NAME "avx512bf16"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 1
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_PAIR_DOT 1
#define DILATTN_CPU_REQUIRED \
  (kFeatureAvx | kFeatureAvx2 | kFeatureFma | kFeatureAvx512f | kFeatureAvx512bf16)
#define DILATTN_CPU_PDEP 1
#pragma GCC target("avx512f,avx512bw,avx512bf16,avx2,fma,bmi2")
#elif defined(DILATTN_CPU_TARGET_AMXEMU)
// amx's code on bf16emu's footing: the tile instructions emulated (cpu_amx_tiles.h), vdpbf16ps
// too, 64-byte vectors on AVX2; a test path, chosen by name only.
#define DILATTN_CPU_ISA_NS amxemu
#define DILATTN_CPU_ISA_NAME "amxemu"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 0
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_PAIR_DOT 2
#define DILATTN_CPU_AMX 2
#define DILATTN_CPU_REQUIRED (kFeatureAvx | kFeatureAvx2 | kFeatureFma)
#pragma GCC target("avx2,fma")
#elif defined(DILATTN_CPU_TARGET_BF16EMU)
#define DILATTN_CPU_ISA_NS bf16emu
#define DILATTN_CPU_ISA_NAME "bf16emu"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 0
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_PAIR_DOT 2
#define DILATTN_CPU_REQUIRED (kFeatureAvx | kFeatureAvx2 | kFeatureFma)
#pragma GCC target("avx2,fma")
#elif defined(DILATTN_CPU_TARGET_AVX512)
#define DILATTN_CPU_ISA_NS avx512
#define DILATTN_CPU_ISA_NAME "avx512"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 1
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_REQUIRED (kFeatureAvx | kFeatureAvx2 | kFeatureFma | kFeatureAvx512f)
#define DILATTN_CPU_PDEP 1
#pragma GCC target("avx512f,avx2,fma,bmi2")
#elif defined(DILATTN_CPU_TARGET_AVX2)
#define DILATTN_CPU_ISA_NS avx2
#define DILATTN_CPU_ISA_NAME "avx2"
#define DILATTN_CPU_VEC_BYTES 32
#define DILATTN_CPU_FMA 1
#define DILATTN_CPU_REQUIRED (kFeatureAvx | kFeatureAvx2 | kFeatureFma)
#pragma GCC target("avx2,fma")
#else  // the compiler's own target (baseline or -march=native): its macros say what it is
#if defined(DILATTN_CPU_TARGET_NATIVE)
#define DILATTN_CPU_ISA_NS native
#else
#define DILATTN_CPU_ISA_NS baseline
#endif
#if defined(__AVX512F__)
#define DILATTN_CPU_ISA_NAME "avx512"
#define DILATTN_CPU_VEC_BYTES 64
#define DILATTN_CPU_AVX512 1
#define DILATTN_CPU_FMA 1
#elif defined(__AVX__)
#if defined(__AVX2__) && defined(__FMA__)
#define DILATTN_CPU_ISA_NAME "avx2"
#else
#define DILATTN_CPU_ISA_NAME "avx"
#endif
#define DILATTN_CPU_VEC_BYTES 32
#if defined(__FMA__)
#define DILATTN_CPU_FMA 1
#else
#define DILATTN_CPU_FMA 0
#endif
#elif defined(__x86_64__) || defined(__i386__)
#define DILATTN_CPU_ISA_NAME "sse"
#define DILATTN_CPU_VEC_BYTES 16
#define DILATTN_CPU_FMA 0
#elif defined(__aarch64__)
#define DILATTN_CPU_ISA_NAME "neon"
#define DILATTN_CPU_VEC_BYTES 16
#define DILATTN_CPU_FMA 0
#else
#define DILATTN_CPU_ISA_NAME "generic"
#define DILATTN_CPU_VEC_BYTES 16
#define DILATTN_CPU_FMA 0
#endif
// What the compiler was told it may use: the CPU must have it too.
#define DILATTN_CPU_REQUIRED compiler_features()
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define DILATTN_CPU_PAIR_DOT 1
#endif
#endif
#if !defined(DILATTN_CPU_PAIR_DOT)
#define DILATTN_CPU_PAIR_DOT 0
#endif
#if !defined(DILATTN_CPU_PDEP) && defined(__BMI2__)
#define DILATTN_CPU_PDEP 1
#endif
#if !defined(DILATTN_CPU_PDEP)
#define DILATTN_CPU_PDEP 0
#endif
#if !defined(DILATTN_CPU_AVX512)
#define DILATTN_CPU_AVX512 0
#endif
#if !defined(DILATTN_CPU_AMX)
#define DILATTN_CPU_AMX 0
#endif

#endif  // DILATTN_CPU_ISA_TARGET_H
