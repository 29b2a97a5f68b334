// test_cpu_bf16_emulation.cpp - property: the cpu backend's bf16 pair products on avx512bf16 (the
// instruction vdpbf16ps) and on bf16emu (its emulation, cpu/cpu_pair_dot.h) agree bit for bit,
// so what DILATTN_CPU_ISA=bf16emu tests on any AVX2 machine is what avx512bf16 computes:
//   1. the primitive (IsaKernels::pair_dot of both tables): every combination of bf16 edge
//      values in the four halves (+-0, denormals, the smallest and largest normals, +-inf, NaN,
//      values whose products underflow or overflow f32) against accumulators of the same kinds
//      (an f32 denormal too), then random words; only a NaN may differ, in its payload;
//   1b. the rounding of P and dS to bf16 words (IsaKernels::round_words, both pairings): f32
//      edge values (+-0, denormals, among them those that round up to the least normal, ties
//      to even both ways, the largest finite, +-inf, quiet and signalling NaNs with payloads)
//      in every low/high combination, then random bits; every bit equal, NaNs included;
//   2. whole calls: forward and backward of bf16 cases (dense causal GQA with D = 64 and an odd
//      head dim, dilated with D = 40, block-sparse, a window with softcap and ALiBi, a packed
//      batch) in two child processes of this program, DILATTN_CPU_ISA=avx512bf16 and
//      DILATTN_CPU_ISA=bf16emu: the bytes of O, LSE, dQ, dK and dV must be equal.
// It needs a CPU with AVX512_BF16 and a build holding avx512bf16 (a compiler that knows
// -mavx512bf16). Elsewhere it prints "not run: ..." and exits 77, which meson counts as
// skipped, never as passed.
// With --model (a test of its own, run on every AVX2 CPU): bf16emu's pair_dot on the inputs of
// 1. against a scalar model written from the instruction's description (each half widened by a
// shift, denormal inputs and results flushed to zero of their sign, std::fma for the high pair
// then the low pair), bit for bit but for NaN payloads; and bf16emu's rounding on the inputs of
// 1b against vcvtneps2bf16's description (a denormal to the zero of its sign, then
// dtype_convert.h's float_to_bf16), bit for bit.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "cpu_isa.h"
#include "dtype_convert.h"
#include "../common/attention_run.h"

using namespace dilattn::cpu;

namespace {

int failures = 0;

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// ---------------------------------------------------------------- 1. the primitive
struct PairDotInputs {
  std::vector<uint32_t> a, b;
  std::vector<float> acc;
};

PairDotInputs pair_dot_inputs() {
  const std::vector<uint32_t> halves = {
      0x0000, 0x8000,          // +-0
      0x0001, 0x807F, 0x0040,  // denormals
      0x0080, 0x8080,          // +-the smallest normal
      0x3F80, 0xBF80, 0x3F81, 0x4049, 0xC0A0,  // ordinary values
      0x1F80, 0x2000,          // 2^-64, 2^-63: products at f32's denormal edge
      0x5F80, 0x5FFF,          // 2^64 and just below 2^65: products that overflow f32
      0x7F7F, 0xFF7F,          // +-the largest finite
      0x7F80, 0xFF80, 0x7FC0,  // +-inf, NaN
  };
  const std::vector<float> accs = {0.0f, -0.0f, 1.0f, -1.0f, 3.0e-39f /* denormal */,
                                   1.1754944e-38f, -2.5e-38f, 3.4e38f, INFINITY, -INFINITY,
                                   NAN, 1.5f};
  std::vector<uint32_t> a, b;
  std::vector<float> acc;
  for (uint32_t ah : halves)
    for (uint32_t al : halves)
      for (uint32_t bh : halves)
        for (uint32_t bl : halves)
          for (float c : accs) {
            a.push_back(ah << 16 | al);
            b.push_back(bh << 16 | bl);
            acc.push_back(c);
          }
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int i = 0; i < (1 << 20); ++i) {
    a.push_back(static_cast<uint32_t>(rng()));
    b.push_back(static_cast<uint32_t>(rng()));
    acc.push_back(u(rng));
  }
  return {a, b, acc};
}

// Counts (and shows a few of) the results that differ in more than a NaN's payload.
void compare_pair_dots(const char* want_name, const char* got_name, const PairDotInputs& in,
                       const std::vector<float>& want, const std::vector<float>& got) {
  const std::vector<uint32_t>& a = in.a;
  const std::vector<uint32_t>& b = in.b;
  const std::vector<float>& acc = in.acc;
  const int64_t n = static_cast<int64_t>(a.size());
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (bits_of(got[k]) == bits_of(want[k]) || (std::isnan(got[k]) && std::isnan(want[k])))
      continue;
    if (differ++ < 8)
      std::fprintf(stderr,
                   "FAILED pair_dot(acc 0x%08" PRIx32 ", a 0x%08" PRIx32 ", b 0x%08" PRIx32
                   "): %s 0x%08" PRIx32 ", %s 0x%08" PRIx32 "\n",
                   bits_of(acc[k]), a[k], b[k], want_name, bits_of(want[k]), got_name,
                   bits_of(got[k]));
  }
  std::printf("pair_dot: %" PRId64 " of %" PRId64 " results differ (%s, %s)\n", differ, n,
              want_name, got_name);
  if (differ != 0) ++failures;
}

// ---------------------------------------------------------------- 1b. the rounding
std::vector<float> float_of_bits(const std::vector<uint32_t>& bits) {
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  return x;
}

struct RoundInputs {
  std::vector<float> low, high;
};

RoundInputs round_inputs() {
  const std::vector<uint32_t> edges = {
      0x00000000, 0x80000000,                          // +-0
      0x00000001, 0x807FFFFF, 0x00400000,              // denormals
      0x007F8000, 0x007FFFFF, 0x807F8001,              // denormals rounding up to +-2^-126
      0x00800000, 0x80800000,                          // +-the least normal
      0x3F808000, 0x3F818000, 0x3F808001, 0xBF807FFF,  // ties to even (down, up), near ties
      0x7F7FFFFF, 0x7F7F7FFF, 0xFF7F8000,              // the largest finite: to inf, kept, tie
      0x7F800000, 0xFF800000,                          // +-inf
      0x7FC00000, 0xFFC12345, 0x7F800001, 0xFFA00000,  // quiet and signalling NaNs
  };
  std::vector<uint32_t> low, high;
  for (uint32_t l : edges)
    for (uint32_t h : edges) {
      low.push_back(l);
      high.push_back(h);
    }
  std::mt19937_64 rng(2025);
  for (int i = 0; i < (1 << 18); ++i) {
    low.push_back(static_cast<uint32_t>(rng()));
    high.push_back(static_cast<uint32_t>(rng()));
  }
  if (low.size() % 2 != 0) {  // in_order pairs consecutive values
    low.push_back(0);
    high.push_back(0);
  }
  return {float_of_bits(low), float_of_bits(high)};
}

struct RoundedWords {
  std::vector<uint32_t> across, in_order;
};

RoundedWords rounded_by(const IsaKernels& k, const RoundInputs& in) {
  RoundedWords w{std::vector<uint32_t>(in.low.size()), std::vector<uint32_t>(in.low.size() / 2)};
  k.round_words(in.low.data(), in.high.data(), w.across.data(), w.in_order.data(),
                static_cast<int64_t>(in.low.size()));
  return w;
}

void compare_rounding(const char* want_name, const char* got_name, const RoundInputs& in,
                      const RoundedWords& want, const RoundedWords& got) {
  int64_t differ = 0;
  for (size_t i = 0; i < want.across.size(); ++i)
    if (want.across[i] != got.across[i] && differ++ < 8)
      std::fprintf(stderr,
                   "FAILED rounding (low 0x%08" PRIx32 ", high 0x%08" PRIx32 "): %s 0x%08" PRIx32
                   ", %s 0x%08" PRIx32 "\n",
                   bits_of(in.low[i]), bits_of(in.high[i]), want_name, want.across[i], got_name,
                   got.across[i]);
  for (size_t i = 0; i < want.in_order.size(); ++i)
    if (want.in_order[i] != got.in_order[i] && differ++ < 8)
      std::fprintf(stderr,
                   "FAILED rounding in order (0x%08" PRIx32 ", 0x%08" PRIx32 "): %s 0x%08" PRIx32
                   ", %s 0x%08" PRIx32 "\n",
                   bits_of(in.low[2 * i]), bits_of(in.low[2 * i + 1]), want_name,
                   want.in_order[i], got_name, got.in_order[i]);
  std::printf("rounding: %" PRId64 " of %zu words differ (%s, %s)\n", differ,
              want.across.size() + want.in_order.size(), want_name, got_name);
  if (differ != 0) ++failures;
}

void check_primitive(const IsaKernels& real, const IsaKernels& emulated) {
  const PairDotInputs in = pair_dot_inputs();
  const int64_t n = static_cast<int64_t>(in.a.size());
  std::vector<float> want(in.a.size()), got(in.a.size());
  real.pair_dot(in.acc.data(), in.a.data(), in.b.data(), want.data(), n);
  emulated.pair_dot(in.acc.data(), in.a.data(), in.b.data(), got.data(), n);
  compare_pair_dots("vdpbf16ps", "emulation", in, want, got);
  const RoundInputs round_in = round_inputs();
  compare_rounding("vcvtne2ps2bf16", "emulation", round_in, rounded_by(real, round_in),
                   rounded_by(emulated, round_in));
}

// The scalar model of vdpbf16ps (--model).
float flushed(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float widened(uint32_t half) {
  const uint32_t u = half << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return flushed(x);
}
float model_pair_dot(float acc, uint32_t a, uint32_t b) {
  acc = flushed(std::fma(widened(a >> 16), widened(b >> 16), flushed(acc)));
  return flushed(std::fma(widened(a & 0xFFFFu), widened(b & 0xFFFFu), acc));
}

void check_model(const IsaKernels& emulated) {
  const PairDotInputs in = pair_dot_inputs();
  const int64_t n = static_cast<int64_t>(in.a.size());
  std::vector<float> want(in.a.size()), got(in.a.size());
  for (size_t i = 0; i < in.a.size(); ++i) want[i] = model_pair_dot(in.acc[i], in.a[i], in.b[i]);
  emulated.pair_dot(in.acc.data(), in.a.data(), in.b.data(), got.data(), n);
  compare_pair_dots("scalar model", "bf16emu", in, want, got);
  const RoundInputs round_in = round_inputs();
  RoundedWords model{std::vector<uint32_t>(round_in.low.size()),
                     std::vector<uint32_t>(round_in.low.size() / 2)};
  auto model_bf16 = [](float x) -> uint32_t { return dilattn::float_to_bf16(flushed(x)); };
  for (size_t i = 0; i < round_in.low.size(); ++i) {
    model.across[i] = model_bf16(round_in.low[i]) | model_bf16(round_in.high[i]) << 16;
    if (i % 2 == 1)
      model.in_order[i / 2] = model_bf16(round_in.low[i - 1]) | model_bf16(round_in.low[i]) << 16;
  }
  compare_rounding("scalar model", "bf16emu", round_in, model, rounded_by(emulated, round_in));
}

// ---------------------------------------------------------------- 2. whole calls
std::vector<harness::AttentionCase> call_cases() {
  using harness::AttentionCase;
  std::vector<AttentionCase> all;
  AttentionCase dense;
  dense.name = "dense_causal_gqa_d64";
  dense.B = 2; dense.Nq = dense.Nk = 333; dense.H = 4; dense.Hkv = 2; dense.D = 64;
  dense.causal = true; dense.dtype = DILATTN_BF16;
  all.push_back(dense);
  AttentionCase odd = dense;
  odd.name = "dense_rectangular_d23";
  odd.B = 1; odd.Nq = 70; odd.Nk = 201; odd.D = 23; odd.causal = false;
  all.push_back(odd);
  AttentionCase dilated = dense;
  dilated.name = "dilated_causal_d40";
  dilated.kind = DILATTN_KIND_DILATED;
  dilated.B = 1; dilated.Nq = dilated.Nk = 600; dilated.D = 40;
  dilated.segments = {128, 512, 600}; dilated.dilations = {1, 2, 4};
  all.push_back(dilated);
  AttentionCase sparse = dense;
  sparse.name = "block_sparse_causal";
  sparse.kind = DILATTN_KIND_BLOCK_SPARSE;
  sparse.B = 1; sparse.Nq = sparse.Nk = 256; sparse.mask.bq = sparse.mask.bk = 32;
  sparse.mask.density = 0.5;
  all.push_back(sparse);
  AttentionCase variants = dense;
  variants.name = "window_softcap_alibi";
  variants.B = 1; variants.causal = false; variants.window_left = 50; variants.window_right = 7;
  variants.softcap = 5.0; variants.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  all.push_back(variants);
  AttentionCase packed = dense;
  packed.name = "packed_causal";
  packed.B = 1; packed.Nq = packed.Nk = 300;
  packed.cu_seqlens_q = packed.cu_seqlens_k = {0, 37, 200, 300};
  all.push_back(packed);
  return all;
}

// The child: every case's outputs, byte after byte, into `path`. Exit 0 when every call ran on
// the instruction set DILATTN_CPU_ISA names.
int run_child(const char* path) {
  const char* asked = std::getenv("DILATTN_CPU_ISA");
  if (asked == nullptr || std::string(dilattn_cpu_isa()) != asked) {
    std::fprintf(stderr, "child: DILATTN_CPU_ISA='%s' but dilattn_cpu_isa() = '%s'\n",
                 asked ? asked : "", dilattn_cpu_isa());
    return 1;
  }
  std::ofstream out(path, std::ios::binary);
  for (const harness::AttentionCase& c : call_cases()) {
    const harness::Inputs in = harness::make_inputs(c, 7, 2.0);
    const harness::Forward fwd = harness::run_forward(c, in, DILATTN_BACKEND_CPU, 3);
    const harness::Gradients g = harness::run_backward(c, in, fwd, DILATTN_BACKEND_CPU, 2);
    for (const harness::Tensor* t : {&fwd.o, &fwd.lse, &g.dq, &g.dk, &g.dv})
      out.write(reinterpret_cast<const char*>(t->bytes().data()),
                static_cast<std::streamsize>(t->bytes().size()));
  }
  return harness::failures() != 0 ? 1 : 0;
}

std::vector<char> outputs_of(const std::string& self, const std::string& isa) {
  const std::string path =
      "bf16_emulation_" + isa + "_" + std::to_string(static_cast<long>(getpid())) + ".bin";
  const std::string command = "DILATTN_CPU_ISA=" + isa + " '" + self + "' --child " + path;
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "FAILED %s\n", command.c_str());
    ++failures;
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return bytes;
}

void check_calls(const std::string& self) {
  const std::vector<char> real = outputs_of(self, "avx512bf16");
  const std::vector<char> emulated = outputs_of(self, "bf16emu");
  if (real.empty() || real != emulated) {
    std::fprintf(stderr, "FAILED whole calls: %zu bytes on avx512bf16, %zu on bf16emu, %s\n",
                 real.size(), emulated.size(), real.empty() ? "none" : "not equal");
    ++failures;
    return;
  }
  std::printf("whole calls: %zu bytes of outputs equal\n", real.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--child") return run_child(argv[2]);
  const uint32_t have = this_cpu_features();
  if (argc == 2 && std::string(argv[1]) == "--model") {
    const IsaChoice emulated = choose_isa("bf16emu", have);
    if (emulated.kernels == nullptr) {
      std::printf("not run: %s\n", emulated.refusal.c_str());
      return 77;
    }
    check_model(*emulated.kernels);
    std::printf("%s\n", failures ? "FAILED" : "ok");
    return failures != 0;
  }
  if ((have & kFeatureAvx512bf16) == 0) {
    std::printf("not run: no AVX512_BF16 on this CPU\n");
    return 77;
  }
  const IsaChoice real = choose_isa("avx512bf16", have);
  const IsaChoice emulated = choose_isa("bf16emu", have);
  if (real.kernels == nullptr || emulated.kernels == nullptr) {
    std::printf("not run: this build lacks avx512bf16 or bf16emu (%s%s)\n",
                real.refusal.c_str(), emulated.refusal.c_str());
    return 77;
  }
  check_primitive(*real.kernels, *emulated.kernels);
  check_calls(argv[0]);
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
