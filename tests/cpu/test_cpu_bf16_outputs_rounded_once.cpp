// test_cpu_bf16_outputs_rounded_once.cpp - property (SPEC 1: outputs are rounded once to their
// dtype): on an instruction set that widens bf16 inputs to f32 and multiplies in f32 (avx2,
// avx512; DILATTN_CPU_ISA picks it, tests/cpu/meson.build), a call with bf16 tensors computes
// exactly what the same call with f32 tensors holding the same values computes, so every bf16
// output (O, dQ, dK, dV) must be, bit for bit, the f32 output rounded by dtype_convert.h's
// float_to_bf16 (to nearest even), and the f32 LSE must be equal. (The f32 backward gets the
// f32 O rounded to bf16 values, as the bf16 backward reads its O: SPEC 6's D_i = dO . O.)
// Cases: dense with D = 64 (the stores a vector at a time), D = 40 (a vector and a tail) and
// D = 23 (tail only), dilated causal GQA; values spread over many exponents, so ties and
// carries into the exponent occur.
// An instruction set this CPU lacks, or one this build does not hold, is a skip (exit 77).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dilattn.h"
#include "dtype_convert.h"

namespace {

int failures = 0;

struct Case {
  const char* name;
  int64_t B, N, H, Hkv, D;
  bool dilated, causal;
};

struct Outputs {
  std::vector<uint16_t> o, dq, dk, dv;  // bf16 bits, or f32 outputs rounded to them
  std::vector<float> lse;
};

uint16_t bits_of_bf16(float x) { return dilattn::float_to_bf16(x); }

// Runs forward and backward with tensors of `dtype` holding the values of q, k, v, d_o (each a
// bf16 value); returns the outputs as bf16 bits (rounded by float_to_bf16 when dtype is f32).
bool run(const Case& c, dilattn_dtype dtype, const std::vector<float>& q,
         const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& d_o,
         Outputs* out) {
  dilattn_desc desc = nullptr;
  dilattn_plan plan = nullptr;
  bool ok = dilattn_desc_create(&desc) == DILATTN_SUCCESS &&
            dilattn_desc_set_causal(desc, c.causal ? 1 : 0) == DILATTN_SUCCESS;
  if (ok && c.dilated) {
    const int64_t segments[2] = {64, 128}, dilations[2] = {1, 2};
    ok = dilattn_desc_set_dilated(desc, 2, segments, dilations, DILATTN_HEADS_MOD) ==
         DILATTN_SUCCESS;
  }
  const dilattn_shape shape = dilattn_shape_make(c.B, c.N, c.N, c.H, c.Hkv, c.D);
  if (ok)
    ok = dilattn_plan_create(&plan, desc, &shape, dtype, DILATTN_BACKEND_CPU) == DILATTN_SUCCESS;
  if (!ok) {
    std::fprintf(stderr, "FAILED %s: plan: %s\n", c.name, dilattn_last_error());
    ++failures;
    dilattn_desc_destroy(desc);
    return false;
  }
  const size_t es = dtype == DILATTN_F32 ? 4 : 2;
  auto to_bytes = [&](const std::vector<float>& x) {
    std::vector<unsigned char> b(x.size() * es);
    for (size_t i = 0; i < x.size(); ++i) {
      if (dtype == DILATTN_F32) {
        std::memcpy(b.data() + 4 * i, &x[i], 4);
      } else {
        const uint16_t h = bits_of_bf16(x[i]);  // exact: x holds bf16 values
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
    return b;
  };
  std::vector<unsigned char> bq = to_bytes(q), bk = to_bytes(k), bv = to_bytes(v),
                             bdo = to_bytes(d_o);
  std::vector<unsigned char> bo(bq.size()), bdq(bq.size()), bdk(bk.size()), bdv(bv.size());
  out->lse.assign(static_cast<size_t>(c.B * c.H * c.N), 0.0f);
  const dilattn_tensor tq = dilattn_tensor_contiguous(bq.data(), dtype, c.B, c.N, c.H, c.D);
  const dilattn_tensor tk = dilattn_tensor_contiguous(bk.data(), dtype, c.B, c.N, c.Hkv, c.D);
  const dilattn_tensor tv = dilattn_tensor_contiguous(bv.data(), dtype, c.B, c.N, c.Hkv, c.D);
  const dilattn_tensor tdo = dilattn_tensor_contiguous(bdo.data(), dtype, c.B, c.N, c.H, c.D);
  const dilattn_tensor to = dilattn_tensor_contiguous(bo.data(), dtype, c.B, c.N, c.H, c.D);
  const dilattn_tensor tdq = dilattn_tensor_contiguous(bdq.data(), dtype, c.B, c.N, c.H, c.D);
  const dilattn_tensor tdk = dilattn_tensor_contiguous(bdk.data(), dtype, c.B, c.N, c.Hkv, c.D);
  const dilattn_tensor tdv = dilattn_tensor_contiguous(bdv.data(), dtype, c.B, c.N, c.Hkv, c.D);
  const dilattn_tensor tl =
      dilattn_tensor_contiguous(out->lse.data(), DILATTN_F32, c.B, c.H, c.N, 1);
  ok = dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0) == DILATTN_SUCCESS;
  if (dtype == DILATTN_F32)  // the backward reads O (D_i = dO . O): the bf16 call's O, so round
    for (size_t i = 0; i < bo.size() / 4; ++i) {
      float x;
      std::memcpy(&x, bo.data() + 4 * i, 4);
      const uint32_t u = static_cast<uint32_t>(bits_of_bf16(x)) << 16;
      std::memcpy(bo.data() + 4 * i, &u, 4);
    }
  ok = ok && dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr,
                              0) == DILATTN_SUCCESS;
  if (!ok) {
    std::fprintf(stderr, "FAILED %s: call: %s\n", c.name, dilattn_last_error());
    ++failures;
  }
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  auto to_bits = [&](const std::vector<unsigned char>& b) {
    std::vector<uint16_t> h(b.size() / es);
    for (size_t i = 0; i < h.size(); ++i) {
      if (dtype == DILATTN_F32) {
        float x;
        std::memcpy(&x, b.data() + 4 * i, 4);
        h[i] = bits_of_bf16(x);
      } else {
        std::memcpy(&h[i], b.data() + 2 * i, 2);
      }
    }
    return h;
  };
  out->o = to_bits(bo);
  out->dq = to_bits(bdq);
  out->dk = to_bits(bdk);
  out->dv = to_bits(bdv);
  return ok;
}

void compare(const Case& c, const char* what, const std::vector<uint16_t>& want,
             const std::vector<uint16_t>& got) {
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i] && differ++ == 0) first = i;
  if (differ != 0) {
    std::fprintf(stderr,
                 "FAILED %s %s: %zu of %zu elements differ from the f32 output rounded (first at "
                 "%zu: 0x%04x, want 0x%04x)\n",
                 c.name, what, differ, want.size(), first, got[first], want[first]);
    ++failures;
  }
}

// A bf16 value spread over exponents 2^-8 .. 2^4 with either sign.
float bf16_value(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-8, 4);
  const float x = std::ldexp(mantissa(rng), exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xFFFF0000u;  // truncated to a bf16 value
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

}  // namespace

int main() {
  const std::string isa = dilattn_cpu_isa();
  if (isa == "none" || !dilattn_backend_available(DILATTN_BACKEND_CPU)) {
    std::printf("not run: the cpu backend cannot run DILATTN_CPU_ISA here (%s)\n", isa.c_str());
    return 77;
  }
  if (isa == "avx512bf16" || isa == "bf16emu") {  // pair products: not the f32 computation
    std::printf("not run: '%s' multiplies bf16 pairs, not widened f32\n", isa.c_str());
    return 77;
  }
  const Case cases[] = {
      {"dense_d64", 1, 150, 2, 2, 64, false, false},
      {"dense_causal_d40", 2, 97, 2, 1, 40, false, true},
      {"dense_d23", 1, 70, 3, 3, 23, false, false},
      {"dilated_causal_gqa_d64", 1, 256, 4, 2, 64, true, true},
  };
  std::mt19937_64 rng(7);
  int checked = 0;
  for (const Case& c : cases) {
    auto values = [&](int64_t heads) {
      std::vector<float> x(static_cast<size_t>(c.B * c.N * heads * c.D));
      for (float& e : x) e = bf16_value(rng);
      return x;
    };
    const std::vector<float> q = values(c.H), k = values(c.Hkv), v = values(c.Hkv),
                             d_o = values(c.H);
    Outputs f32, bf16;
    if (!run(c, DILATTN_F32, q, k, v, d_o, &f32) || !run(c, DILATTN_BF16, q, k, v, d_o, &bf16))
      continue;
    compare(c, "O", f32.o, bf16.o);
    compare(c, "dQ", f32.dq, bf16.dq);
    compare(c, "dK", f32.dk, bf16.dk);
    compare(c, "dV", f32.dv, bf16.dv);
    if (std::memcmp(f32.lse.data(), bf16.lse.data(), f32.lse.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "FAILED %s LSE: the bf16 call's differs from the f32 call's\n", c.name);
      ++failures;
    }
    ++checked;
  }
  std::printf("%s: %d cases, %s\n", isa.c_str(), checked, failures ? "FAILED" : "ok");
  return failures != 0;
}
