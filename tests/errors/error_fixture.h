// error_fixture.h - what every SPEC 7 error test needs: a small valid f32 problem on backend ref
// whose output buffers are filled with a sentinel byte, so a test can make one argument bad,
// check the status and the message (CHECK_ERROR, check.h), and prove that no output byte
// changed; a plan slot of sentinel bytes for the *_create calls; a fresh description.
#ifndef DILATTN_TESTS_ERROR_FIXTURE_H
#define DILATTN_TESTS_ERROR_FIXTURE_H

#include <cstring>
#include <vector>

#include "../common/check.h"
#include "dilattn.h"

namespace errtest {

// The backends whose tensors live in host memory, as this build has them: ref, cpu, and emu when
// the test is compiled with DILATTN_TEST_EMU (tests/errors/meson.build sets it where the
// emulator is built). The tests that hold every CPU-side backend to one rule loop over these.
inline std::vector<dilattn_backend> cpu_side_backends() {
  return {DILATTN_BACKEND_REF, DILATTN_BACKEND_CPU,
#ifdef DILATTN_TEST_EMU
          DILATTN_BACKEND_EMU,
#endif
  };
}

constexpr unsigned char kSentinel = 0xA5;  // f32 0xA5A5A5A5 = -2.87e-16: not a value we write

// B=1, Nq=Nk=4, H=2, Hkv=1, D=3, f32, dense, backend ref. Inputs are small numbers; outputs
// (o, lse, dq, dk, dv) and the d_o input start as sentinel bytes except d_o.
struct Problem {
  static constexpr int64_t B = 1, N = 4, H = 2, Hkv = 1, D = 3;
  std::vector<float> q, k, v, d_o, o, lse, dq, dk, dv;
  dilattn_tensor tq{}, tk{}, tv{}, tdo{}, to{}, tlse{}, tdq{}, tdk{}, tdv{};
  dilattn_desc desc = nullptr;
  dilattn_plan plan = nullptr;

  Problem() : q(B * N * H * D), k(B * N * Hkv * D), v(k.size()), d_o(q.size()) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = d_o[i] = 0.1f * static_cast<float>(i % 7);
    for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = 0.2f * static_cast<float>(i % 5);
    o.resize(q.size()); lse.resize(B * H * N); dq.resize(q.size());
    dk.resize(k.size()); dv.resize(k.size());
    fill_sentinel();
    tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, B, N, H, D);
    tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, B, N, Hkv, D);
    tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, B, N, Hkv, D);
    tdo = dilattn_tensor_contiguous(d_o.data(), DILATTN_F32, B, N, H, D);
    to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, B, N, H, D);
    tlse = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, B, H, N, 1);
    tdq = dilattn_tensor_contiguous(dq.data(), DILATTN_F32, B, N, H, D);
    tdk = dilattn_tensor_contiguous(dk.data(), DILATTN_F32, B, N, Hkv, D);
    tdv = dilattn_tensor_contiguous(dv.data(), DILATTN_F32, B, N, Hkv, D);
    CHECK_OK(dilattn_desc_create(&desc));
    const dilattn_shape shape = dilattn_shape_make(B, N, N, H, Hkv, D);
    CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF));
  }
  ~Problem() {
    dilattn_plan_destroy(plan);
    dilattn_desc_destroy(desc);
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  void fill_sentinel() {
    for (std::vector<float>* x : {&o, &lse, &dq, &dk, &dv})
      std::memset(x->data(), kSentinel, x->size() * sizeof(float));
  }
  // Every output byte still holds the sentinel.
  bool outputs_untouched() const {
    for (const std::vector<float>* x : {&o, &lse, &dq, &dk, &dv}) {
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(x->data());
      for (size_t i = 0; i < x->size() * sizeof(float); ++i)
        if (bytes[i] != kSentinel) return false;
    }
    return true;
  }
  dilattn_status forward() { return dilattn_forward(plan, &tq, &tk, &tv, &to, &tlse, nullptr, 0); }
  dilattn_status backward(void* ws = nullptr, size_t ws_bytes = 0) {
    return dilattn_backward(plan, &tq, &tk, &tv, &to, &tlse, &tdo, &tdq, &tdk, &tdv, ws, ws_bytes);
  }
};

// A plan slot holding sentinel bytes, which a failed *_create must leave as they are.
struct PlanSlot {
  dilattn_plan plan;
  PlanSlot() { std::memset(&plan, kSentinel, sizeof plan); }
  bool untouched() const {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&plan);
    for (size_t i = 0; i < sizeof plan; ++i)
      if (b[i] != kSentinel) return false;
    return true;
  }
};

// A fresh (dense, unscaled) description that outlives the failing call, so its message is read
// before dilattn_desc_destroy (a successful call) clears it.
struct FreshDesc {
  dilattn_desc d = nullptr;
  FreshDesc() { CHECK_OK(dilattn_desc_create(&d)); }
  ~FreshDesc() { dilattn_desc_destroy(d); }
  FreshDesc(const FreshDesc&) = delete;
  FreshDesc& operator=(const FreshDesc&) = delete;
};

// dilattn_plan_create in f32 with the shape [B, Nq, Nk, H, Hkv, D].
inline dilattn_status create_plan(dilattn_plan* slot, const FreshDesc& desc, int64_t B, int64_t Nq,
                                  int64_t Nk, int64_t H, int64_t Hkv, int64_t D,
                                  dilattn_backend backend = DILATTN_BACKEND_REF) {
  const dilattn_shape shape = dilattn_shape_make(B, Nq, Nk, H, Hkv, D);
  return dilattn_plan_create(slot, desc.d, &shape, DILATTN_F32, backend);
}

}  // namespace errtest

#endif  // DILATTN_TESTS_ERROR_FIXTURE_H
