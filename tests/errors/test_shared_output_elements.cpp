// test_shared_output_elements.cpp - SPEC 1 and 7: an output (O, LSE, dQ, dK, dV) whose strides
// let two of its elements share memory is refused by every backend alike (ref, cpu, emu) with
// DILATTN_ERROR_INVALID_VALUE naming the tensor, before any byte is written: a zero stride on a
// dimension of size > 1, two dimensions with one stride, a row stride shorter than a row.
// What stays accepted: a zero stride on a dimension of size 1, padded rows, and inputs that
// share memory (K and V broadcast from one row by a zero stride give the same O as the same
// rows written out).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../common/check.h"
#include "error_fixture.h"
#include "dilattn.h"

namespace {

constexpr float kSentinel = -77.0f;
constexpr int64_t B = 1, N = 4, H = 2, Hkv = 1, D = 8;

struct Case {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  dilattn_tensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
  Case()
      : q(B * N * H * D), k(B * N * Hkv * D), v(k.size()), o(q.size() * 2, kSentinel),
        lse(B * H * N * 2, kSentinel), d_o(q.size()), dq(q.size() * 2, kSentinel),
        dk(k.size() * 2, kSentinel), dv(k.size() * 2, kSentinel) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = d_o[i] = 0.1f * static_cast<float>(i % 7);
    for (size_t i = 0; i < k.size(); ++i) k[i] = 0.2f * static_cast<float>(i % 5);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f * static_cast<float>(i % 3) - 0.2f;
    tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, B, N, H, D);
    tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, B, N, Hkv, D);
    tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, B, N, Hkv, D);
    to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, B, N, H, D);
    tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, B, H, N, 1);
    tdo = dilattn_tensor_contiguous(d_o.data(), DILATTN_F32, B, N, H, D);
    tdq = dilattn_tensor_contiguous(dq.data(), DILATTN_F32, B, N, H, D);
    tdk = dilattn_tensor_contiguous(dk.data(), DILATTN_F32, B, N, Hkv, D);
    tdv = dilattn_tensor_contiguous(dv.data(), DILATTN_F32, B, N, Hkv, D);
  }
  static bool all_sentinel(const std::vector<float>& x) {
    for (float f : x)
      if (f != kSentinel) return false;
    return true;
  }
  bool gradients_untouched() const {
    return all_sentinel(dq) && all_sentinel(dk) && all_sentinel(dv);
  }
  dilattn_status forward(dilattn_plan plan) {
    return dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0);
  }
  dilattn_status backward(dilattn_plan plan) {
    return dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, 0);
  }
};

dilattn_plan make_plan(dilattn_backend backend) {
  dilattn_desc desc = nullptr;
  CHECK_OK(dilattn_desc_create(&desc));
  const dilattn_shape shape = dilattn_shape_make(B, N, N, H, Hkv, D);
  dilattn_plan plan = nullptr;
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, backend));
  dilattn_desc_destroy(desc);
  return plan;
}

// Forward: O and LSE views whose elements share memory.
void forward_outputs_refused(dilattn_plan plan) {
  struct Bad {
    const char* what;
    bool is_lse;
    int64_t strides[4];
  };
  const Bad bad[] = {
      {"O rows on one address (stride 0 over Nq)", false, {N * H * D, 0, D, 1}},
      {"O heads and rows on one stride", false, {N * H * D, D, D, 1}},
      {"O rows overlapping by half a row", false, {N * H * D, H * D / 2, D, 1}},
      {"O elements of a row on one address", false, {N * H * D, H * D, D, 0}},
      {"LSE rows on one address", true, {H * N, N, 0, 1}},
      {"LSE heads on one address", true, {H * N, 0, 1, 1}},
  };
  for (const Bad& b : bad) {
    harness::CaseScope scope(b.what);
    Case c;
    dilattn_tensor& t = b.is_lse ? c.tl : c.to;
    std::memcpy(t.strides, b.strides, sizeof t.strides);
    CHECK_ERROR(c.forward(plan), DILATTN_ERROR_INVALID_VALUE, b.is_lse ? "'lse'" : "'o'",
                "share memory");
    CHECK_MSG(Case::all_sentinel(c.o) && Case::all_sentinel(c.lse), "a refused call wrote O or LSE");
  }
}

// Backward: dQ, dK, dV views whose elements share memory; O and LSE (inputs here) may.
void backward_outputs_refused(dilattn_plan plan) {
  Case good;
  if (!CHECK_OK(good.forward(plan))) return;
  const std::pair<const char*, int> grads[] = {{"'dq'", 0}, {"'dk'", 1}, {"'dv'", 2}};
  for (const auto& [name, which] : grads) {
    harness::CaseScope scope(std::string("backward ") + name);
    Case c;
    c.o = good.o;
    c.lse = good.lse;
    dilattn_tensor& t = which == 0 ? c.tdq : which == 1 ? c.tdk : c.tdv;
    t.strides[1] = 0;
    CHECK_ERROR(c.backward(plan), DILATTN_ERROR_INVALID_VALUE, name, "share memory",
                "stride 0");
    CHECK_MSG(c.gradients_untouched(), "a refused backward wrote a gradient");
  }
}

// Accepted: stride 0 on a size-1 dimension of an output, padded rows, and inputs broadcast by
// a zero stride, which give bitwise the O of the same rows written out.
void what_stays_accepted(dilattn_plan plan) {
  harness::CaseScope scope("accepted views");
  Case plain;
  if (!CHECK_OK(plain.forward(plan))) return;

  Case padded;
  padded.to.strides[0] = 0;               // B = 1: no second batch to collide with
  padded.to.strides[1] = 2 * H * D;       // every row padded to twice its length
  padded.to.strides[2] = D;
  CHECK_OK(padded.forward(plan));
  bool same = true;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < H * D; ++j)
      same = same && padded.o[static_cast<size_t>(i * 2 * H * D + j)] ==
                         plain.o[static_cast<size_t>(i * H * D + j)];
  CHECK_MSG(same, "padded O differs from the contiguous one");

  // Every key and value row is row 0: broadcast (stride 0 over Nk) against written out.
  Case broadcast, written_out;
  broadcast.tk.strides[1] = 0;
  broadcast.tv.strides[1] = 0;
  for (int64_t j = 1; j < N; ++j)
    for (int64_t d = 0; d < Hkv * D; ++d) {
      written_out.k[static_cast<size_t>(j * Hkv * D + d)] = written_out.k[static_cast<size_t>(d)];
      written_out.v[static_cast<size_t>(j * Hkv * D + d)] = written_out.v[static_cast<size_t>(d)];
    }
  CHECK_OK(broadcast.forward(plan));
  CHECK_OK(written_out.forward(plan));
  CHECK_MSG(std::memcmp(broadcast.o.data(), written_out.o.data(), N * H * D * sizeof(float)) == 0,
            "K, V broadcast by a zero stride give another O than the rows written out");
}

}  // namespace

int main() {
  for (dilattn_backend backend : errtest::cpu_side_backends()) {
    const char* name = dilattn_backend_name(backend);
    harness::CaseScope scope(name);
    dilattn_plan plan = make_plan(backend);
    if (plan == nullptr) continue;
    forward_outputs_refused(plan);
    backward_outputs_refused(plan);
    what_stays_accepted(plan);
    dilattn_plan_destroy(plan);
  }
  return harness::finish("shared_output_elements_refused");
}
