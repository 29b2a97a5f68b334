// error_fixture.h - what every SPEC 7 error test needs: a small valid f32 problem on backend ref
// whose output buffers are filled with a sentinel byte, so a test can make one argument bad,
// check the status and the message, and prove that no output byte changed.
#ifndef DILATTN_TESTS_ERROR_FIXTURE_H
#define DILATTN_TESTS_ERROR_FIXTURE_H

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dilattn.h"

namespace errtest {

constexpr unsigned char kSentinel = 0xA5;  // f32 0xA5A5A5A5 = -2.87e-16: not a value we write

inline int& failure_count() {
  static int n = 0;
  return n;
}

inline void expect(bool ok, const char* what, const char* file, int line) {
  if (!ok) {
    std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
    ++failure_count();
  }
}
#define EXPECT_TRUE(c) ::errtest::expect((c), #c, __FILE__, __LINE__)

// The call returned `want` and dilattn_last_error() contains every one of `needles`.
inline void expect_error(dilattn_status got, dilattn_status want,
                         std::initializer_list<const char*> needles, const char* file, int line) {
  const std::string message = dilattn_last_error();
  std::printf("  %s: \"%s\"\n", dilattn_status_string(got), message.c_str());
  if (got != want) {
    std::fprintf(stderr, "%s:%d: FAILED: status %s, want %s\n", file, line,
                 dilattn_status_string(got), dilattn_status_string(want));
    ++failure_count();
  }
  for (const char* n : needles)
    if (message.find(n) == std::string::npos) {
      std::fprintf(stderr, "%s:%d: FAILED: message \"%s\" does not name \"%s\"\n", file, line,
                   message.c_str(), n);
      ++failure_count();
    }
}
#define EXPECT_ERROR(call, want, ...) \
  ::errtest::expect_error((call), (want), {__VA_ARGS__}, __FILE__, __LINE__)

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
    EXPECT_TRUE(dilattn_desc_create(&desc) == DILATTN_SUCCESS);
    const dilattn_shape shape = dilattn_shape_make(B, N, N, H, Hkv, D);
    EXPECT_TRUE(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF) == DILATTN_SUCCESS);
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

}  // namespace errtest

#endif  // DILATTN_TESTS_ERROR_FIXTURE_H
