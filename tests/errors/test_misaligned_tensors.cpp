// test_misaligned_tensors.cpp - SPEC 15 (with SPEC 1 and 7): every backend needs each tensor's
// data pointer aligned to its element size (2 bytes f16/bf16, 4 f32, 8 f64). For ref, cpu and emu
// and each dtype the backend takes (emu has no f64), each tensor of dilattn_forward (q, k, v, o,
// lse) and of dilattn_backward (q, k, v, o, lse, d_o, dq, dk, dv) in turn is moved one byte off
// its alignment: the call returns DILATTN_ERROR_INVALID_VALUE, the message names the tensor and
// its address, and no byte of any output changes. The same calls with every pointer aligned
// succeed, so the refusal is the pointer's. f64 tensors four bytes off (aligned for f32 only),
// an LSE in f64 off by four, and the other entry points taking tensors (dilattn_reference_rows,
// with its own int64 and f64 arrays, and dilattn_mask_topk) are refused the same way.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../common/check.h"
#include "error_fixture.h"
#include "dilattn.h"
#include "dilattn_mask.h"

namespace {

constexpr unsigned char kSentinel = 0xA5;
constexpr int64_t B = 1, N = 4, H = 2, Hkv = 1, D = 8;

size_t element_size(dilattn_dtype t) {
  return t == DILATTN_F64 ? 8 : t == DILATTN_F32 ? 4 : 2;
}

const char* dtype_text(dilattn_dtype t) {
  return t == DILATTN_F64 ? "f64" : t == DILATTN_F32 ? "f32" : t == DILATTN_F16 ? "f16" : "bf16";
}

// One tensor's memory: 8-byte aligned storage with room for a shift of up to 8 bytes; the
// view's data pointer starts at `shift`. Inputs hold zeros (a valid value in every dtype),
// outputs the sentinel.
struct Buffer {
  std::vector<double> storage;  // 8-byte aligned
  dilattn_tensor view{};
  Buffer(dilattn_dtype t, int64_t d0, int64_t d1, int64_t d2, int64_t d3, bool output)
      : storage(static_cast<size_t>(d0 * d1 * d2 * d3) + 2, 0.0) {
    if (output) std::memset(storage.data(), kSentinel, storage.size() * sizeof(double));
    view = dilattn_tensor_contiguous(storage.data(), t, d0, d1, d2, d3);
  }
  void shift(size_t bytes) { view.data = reinterpret_cast<unsigned char*>(storage.data()) + bytes; }
  bool untouched() const {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(storage.data());
    for (size_t i = 0; i < storage.size() * sizeof(double); ++i)
      if (b[i] != kSentinel) return false;
    return true;
  }
  void reset_output() { std::memset(storage.data(), kSentinel, storage.size() * sizeof(double)); }
};

struct Tensors {
  Buffer q, k, v, o, lse, d_o, dq, dk, dv;
  Tensors(dilattn_dtype t, dilattn_dtype lse_dtype)
      : q(t, B, N, H, D, false), k(t, B, N, Hkv, D, false), v(t, B, N, Hkv, D, false),
        o(t, B, N, H, D, true), lse(lse_dtype, B, H, N, 1, true), d_o(t, B, N, H, D, false),
        dq(t, B, N, H, D, true), dk(t, B, N, Hkv, D, true), dv(t, B, N, Hkv, D, true) {}
  std::vector<Buffer*> outputs() { return {&o, &lse, &dq, &dk, &dv}; }
  // In backward, o and lse are inputs: zeros are a valid O, and an LSE of 0 a valid one.
  void backward_inputs() {
    for (Buffer* b : {&o, &lse}) std::memset(b->storage.data(), 0, b->storage.size() * sizeof(double));
  }
  bool gradients_untouched() { return dq.untouched() && dk.untouched() && dv.untouched(); }
  dilattn_status forward(dilattn_plan plan) {
    return dilattn_forward(plan, &q.view, &k.view, &v.view, &o.view, &lse.view, nullptr, 0);
  }
  dilattn_status backward(dilattn_plan plan) {
    return dilattn_backward(plan, &q.view, &k.view, &v.view, &o.view, &lse.view, &d_o.view,
                            &dq.view, &dk.view, &dv.view, nullptr, 0);
  }
};

dilattn_plan make_plan(dilattn_backend backend, dilattn_dtype t) {
  dilattn_desc desc = nullptr;
  CHECK_OK(dilattn_desc_create(&desc));
  const dilattn_shape shape = dilattn_shape_make(B, N, N, H, Hkv, D);
  dilattn_plan plan = nullptr;
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, t, backend));
  dilattn_desc_destroy(desc);
  return plan;
}

std::string address_of(const void* p) {
  char text[64];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// Each tensor of forward, then of backward, `shift` bytes off: refused, named, untouched.
void each_tensor_refused(dilattn_backend backend, const char* backend_name, dilattn_dtype t,
                         dilattn_dtype lse_dtype, size_t shift) {
  harness::CaseScope scope(std::string(backend_name) + " " + dtype_text(t) + " lse " +
                           dtype_text(lse_dtype) + " shift " + std::to_string(shift));
  dilattn_plan plan = make_plan(backend, t);
  if (plan == nullptr) return;
  {
    Tensors x(t, lse_dtype);
    const std::pair<const char*, Buffer*> forward_tensors[] = {
        {"'q'", &x.q}, {"'k'", &x.k}, {"'v'", &x.v}, {"'o'", &x.o}, {"'lse'", &x.lse}};
    for (const auto& [name, buffer] : forward_tensors) {
      // A shift the tensor's own dtype tolerates (an f64 LSE shifted 4 bytes is misaligned,
      // an f32 one is not) is not a case.
      if (shift % element_size(buffer->view.dtype) == 0) continue;
      buffer->shift(shift);
      CHECK_ERROR(x.forward(plan), DILATTN_ERROR_INVALID_VALUE, name, "aligned",
                  address_of(buffer->view.data).c_str());
      buffer->shift(0);
      for (Buffer* out : x.outputs())
        CHECK_MSG(out->untouched(), "forward with %s misaligned wrote an output", name);
    }
    CHECK_OK(x.forward(plan));  // the same call, aligned
    CHECK_MSG(!x.o.untouched(), "the aligned forward left O as it was");
  }
  {
    Tensors x(t, lse_dtype);
    x.backward_inputs();
    const std::pair<const char*, Buffer*> backward_tensors[] = {
        {"'q'", &x.q},   {"'k'", &x.k},     {"'v'", &x.v},   {"'o'", &x.o},  {"'lse'", &x.lse},
        {"'d_o'", &x.d_o}, {"'dq'", &x.dq}, {"'dk'", &x.dk}, {"'dv'", &x.dv}};
    for (const auto& [name, buffer] : backward_tensors) {
      if (shift % element_size(buffer->view.dtype) == 0) continue;
      buffer->shift(shift);
      CHECK_ERROR(x.backward(plan), DILATTN_ERROR_INVALID_VALUE, name, "aligned",
                  address_of(buffer->view.data).c_str());
      buffer->shift(0);
      CHECK_MSG(x.gradients_untouched(), "backward with %s misaligned wrote a gradient", name);
    }
    CHECK_OK(x.backward(plan));
    CHECK_MSG(!x.dv.untouched(), "the aligned backward left dV as it was");
  }
  dilattn_plan_destroy(plan);
}

// dilattn_reference_rows and dilattn_mask_topk check their tensors with the same rule, and
// dilattn_reference_rows its rows, o_rows and lse_rows arrays.
void other_entry_points_refused() {
  harness::CaseScope scope("reference_rows and mask_topk");
  dilattn_plan plan = make_plan(DILATTN_BACKEND_REF, DILATTN_F32);
  if (plan == nullptr) return;
  Tensors x(DILATTN_F32, DILATTN_F32);
  const int64_t rows[] = {0, 3};
  std::vector<double> o_rows(static_cast<size_t>(2 * H * D), -5.0);
  x.v.shift(2);
  CHECK_ERROR(dilattn_reference_rows(plan, &x.q.view, &x.k.view, &x.v.view, rows, 2,
                                     o_rows.data(), nullptr),
              DILATTN_ERROR_INVALID_VALUE, "'v'", address_of(x.v.view.data).c_str());
  x.v.shift(0);
  for (double o : o_rows) CHECK_MSG(o == -5.0, "refused reference_rows wrote o_rows");
  // Its own arrays too: rows (int64) and o_rows, lse_rows (f64), each 4 bytes off.
  std::vector<double> lse_rows(static_cast<size_t>(2 * H) + 1, -5.0);
  std::vector<int64_t> rows_storage = {0, 0, 3, 0};
  const int64_t* rows_off = reinterpret_cast<const int64_t*>(
      reinterpret_cast<const unsigned char*>(rows_storage.data()) + 4);
  double* o_off = reinterpret_cast<double*>(reinterpret_cast<unsigned char*>(o_rows.data()) + 4);
  double* lse_off =
      reinterpret_cast<double*>(reinterpret_cast<unsigned char*>(lse_rows.data()) + 4);
  CHECK_ERROR(dilattn_reference_rows(plan, &x.q.view, &x.k.view, &x.v.view, rows_off, 1,
                                     o_rows.data(), nullptr),
              DILATTN_ERROR_INVALID_VALUE, "'rows'", address_of(rows_off).c_str());
  CHECK_ERROR(dilattn_reference_rows(plan, &x.q.view, &x.k.view, &x.v.view, rows, 1, o_off,
                                     nullptr),
              DILATTN_ERROR_INVALID_VALUE, "'o_rows'", address_of(o_off).c_str());
  CHECK_ERROR(dilattn_reference_rows(plan, &x.q.view, &x.k.view, &x.v.view, rows, 1,
                                     o_rows.data(), lse_off),
              DILATTN_ERROR_INVALID_VALUE, "'lse_rows'", address_of(lse_off).c_str());
  for (double o : o_rows) CHECK_MSG(o == -5.0, "refused reference_rows wrote o_rows");
  for (double l : lse_rows) CHECK_MSG(l == -5.0, "refused reference_rows wrote lse_rows");
  CHECK_OK(dilattn_reference_rows(plan, &x.q.view, &x.k.view, &x.v.view, rows, 2, o_rows.data(),
                                  lse_rows.data()));
  dilattn_plan_destroy(plan);

  dilattn_mask mask;
  std::memset(&mask, kSentinel, sizeof mask);
  x.k.shift(1);
  CHECK_ERROR(dilattn_mask_topk(&mask, &x.q.view, &x.k.view, 2, 2, 1, 0),
              DILATTN_ERROR_INVALID_VALUE, "'k'", address_of(x.k.view.data).c_str());
  const unsigned char* slot = reinterpret_cast<const unsigned char*>(&mask);
  for (size_t i = 0; i < sizeof mask; ++i)
    CHECK_MSG(slot[i] == kSentinel, "refused mask_topk wrote its mask slot");
  x.k.shift(0);
  if (CHECK_OK(dilattn_mask_topk(&mask, &x.q.view, &x.k.view, 2, 2, 1, 0)))
    dilattn_mask_destroy(mask);
}

}  // namespace

int main() {
  for (dilattn_backend backend : errtest::cpu_side_backends()) {
    const char* name = dilattn_backend_name(backend);
    for (dilattn_dtype t : {DILATTN_F32, DILATTN_F64, DILATTN_F16, DILATTN_BF16}) {
      if (backend == DILATTN_BACKEND_EMU && t == DILATTN_F64) continue;  // emu runs no f64 plan
      each_tensor_refused(backend, name, t, DILATTN_F32, 1);
      each_tensor_refused(backend, name, t, DILATTN_F64, 1);
    }
    // Four bytes off: aligned for an f32 element, not for an f64 one.
    if (backend != DILATTN_BACKEND_EMU) each_tensor_refused(backend, name, DILATTN_F64, DILATTN_F64, 4);
    each_tensor_refused(backend, name, DILATTN_F32, DILATTN_F64, 4);  // only the f64 LSE
  }
  other_entry_points_refused();
  return harness::finish("misaligned_tensors_refused");
}
