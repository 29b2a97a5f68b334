// test_stream_argument_on_cpu_backends.cpp - dilattn.h: CPU backends (ref, cpu, and emu, whose
// tensors are host memory) ignore the stream of dilattn_forward_on_stream and
// dilattn_backward_on_stream and finish before returning. Whatever the caller passes as the
// stream (NULL, a pointer to 0xff bytes, (void*)0x10, (void*)-1, a pointer to a live object),
// each call returns SUCCESS with O, LSE, dQ, dK and dV bitwise those of dilattn_forward and
// dilattn_backward, written before it returns, and the memory the pointer points at unchanged.
// For a dense, a causal two-branch dilated (a pool workspace) and a block-sparse plan.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../common/check.h"
#include "error_fixture.h"
#include "dilattn.h"
#include "dilattn_mask.h"

namespace {

constexpr int64_t B = 1, N = 32, H = 2, Hkv = 1, D = 16;
constexpr float kPoison = -77.0f;

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  Outputs() : o(B * N * H * D, kPoison), lse(B * H * N, kPoison), dq(o.size(), kPoison),
              dk(B * N * Hkv * D, kPoison), dv(dk.size(), kPoison) {}
};

struct Inputs {
  std::vector<float> q, k, v, d_o;
  Inputs() : q(B * N * H * D), k(B * N * Hkv * D), v(k.size()), d_o(q.size()) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(std::sin(0.37 * double(i)));
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(std::cos(0.11 * double(i)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.05 * double(i) + 1));
    for (size_t i = 0; i < d_o.size(); ++i) d_o[i] = static_cast<float>(std::cos(0.23 * double(i)));
  }
};

// One forward and one backward, plain (stream not given) or on `stream`.
Outputs run(dilattn_plan plan, const Inputs& in, bool on_stream, void* stream) {
  Outputs out;
  auto view = [](const std::vector<float>& x, int64_t heads, int64_t rows) {
    return dilattn_tensor_contiguous(const_cast<float*>(x.data()), DILATTN_F32, B, rows, heads, D);
  };
  const dilattn_tensor tq = view(in.q, H, N), tk = view(in.k, Hkv, N), tv = view(in.v, Hkv, N),
                       tdo = view(in.d_o, H, N), to = view(out.o, H, N), tdq = view(out.dq, H, N),
                       tdk = view(out.dk, Hkv, N), tdv = view(out.dv, Hkv, N);
  const dilattn_tensor tl = dilattn_tensor_contiguous(out.lse.data(), DILATTN_F32, B, H, N, 1);
  if (on_stream) {
    CHECK_OK(dilattn_forward_on_stream(plan, stream, &tq, &tk, &tv, &to, &tl, nullptr, 0));
    CHECK_OK(dilattn_backward_on_stream(plan, stream, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk,
                                        &tdv, nullptr, 0));
  } else {
    CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0));
    CHECK_OK(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, 0));
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

enum class Kind { dense, dilated, sparse };

dilattn_plan make_plan(dilattn_backend backend, Kind kind) {
  dilattn_desc desc = nullptr;
  CHECK_OK(dilattn_desc_create(&desc));
  if (kind == Kind::dilated) {
    const int64_t segments[] = {8, 32}, dilations[] = {1, 2};
    CHECK_OK(dilattn_desc_set_dilated(desc, 2, segments, dilations, DILATTN_HEADS_MOD));
    CHECK_OK(dilattn_desc_set_causal(desc, 1));
  }
  if (kind == Kind::sparse) {
    dilattn_mask mask = nullptr;
    CHECK_OK(dilattn_mask_from_pattern(&mask, "local:1+sink:1", N, N, 16, 8));
    CHECK_OK(dilattn_desc_set_block_sparse(desc, mask));
    dilattn_mask_destroy(mask);
  }
  const dilattn_shape shape = dilattn_shape_make(B, N, N, H, Hkv, D);
  dilattn_plan plan = nullptr;
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, backend));
  dilattn_desc_destroy(desc);
  return plan;
}

}  // namespace

int main() {
  // What a caller may pass: memory of 0xff bytes (read as an emulator stream, its "capturing"
  // flag would be set), small and all-ones integers, a live object of another kind.
  std::vector<unsigned char> ff_bytes(4096, 0xff);
  std::vector<unsigned char> ff_copy = ff_bytes;
  double unrelated = 1.5;
  const std::pair<void*, const char*> streams[] = {
      {nullptr, "NULL"},
      {ff_bytes.data(), "0xff bytes"},
      {reinterpret_cast<void*>(uintptr_t{0x10}), "(void*)0x10"},
      {reinterpret_cast<void*>(~uintptr_t{0}), "(void*)-1"},
      {&unrelated, "a double"},
  };
  const std::pair<Kind, const char*> kinds[] = {
      {Kind::dense, "dense"}, {Kind::dilated, "dilated causal"}, {Kind::sparse, "block-sparse"}};
  const Inputs in;
  for (dilattn_backend backend : errtest::cpu_side_backends())
    for (const auto& [kind, kind_name] : kinds) {
      const char* backend_name = dilattn_backend_name(backend);
      dilattn_plan plan = make_plan(backend, kind);
      if (plan == nullptr) continue;
      const Outputs plain = run(plan, in, false, nullptr);
      for (const auto& [stream, stream_name] : streams) {
        harness::CaseScope scope(std::string(backend_name) + " " + kind_name + " stream " +
                                 stream_name);
        const Outputs got = run(plan, in, true, stream);
        CHECK_MSG(same_bits(got.o, plain.o) && same_bits(got.lse, plain.lse),
                  "O or LSE differ from dilattn_forward's (O[0] %g, want %g)",
                  static_cast<double>(got.o[0]), static_cast<double>(plain.o[0]));
        CHECK_MSG(same_bits(got.dq, plain.dq) && same_bits(got.dk, plain.dk) &&
                      same_bits(got.dv, plain.dv),
                  "dQ, dK or dV differ from dilattn_backward's (dV[0] %g, want %g)",
                  static_cast<double>(got.dv[0]), static_cast<double>(plain.dv[0]));
      }
      CHECK_MSG(ff_bytes == ff_copy, "the memory a stream pointer points at was written");
      CHECK_MSG(unrelated == 1.5, "the double passed as a stream was written");
      dilattn_plan_destroy(plan);
    }
  return harness::finish("stream_argument_ignored_by_cpu_backends");
}
