// tensor.h - a test tensor: owned bytes of any dtype (f32, f64, f16, bf16) and the
// dilattn_tensor view the library reads and writes (SPEC 1: a view is data, dtype, shape and
// strides in elements). Elements are read and written as double through lib/internal/dtype_convert.h,
// so a test never re-derives f16/bf16 rounding.
//
// The layout picks the strides, so one test can hand a backend views that are not contiguous:
//   permuted: memory [d0, d2, d1, d3] seen as [d0, d1, d2, d3] (e.g. [B, H, N, D] as [B, N, H, D])
//   pad:      `pad` unused elements after each row of d3 (rows D + pad elements apart)
// Element e of a tensor (set_flat/flat, values()) is the e-th in index order [i0, i1, i2, i3],
// whatever the layout.
#ifndef DILATTN_TESTS_TENSOR_H
#define DILATTN_TESTS_TENSOR_H

#include <cstdint>
#include <cstring>
#include <vector>

#include "dilattn.h"
#include "dtype_convert.h"

namespace harness {

struct Layout {
  bool permuted = false;
  int64_t pad = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(dilattn_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3, Layout layout = {}) {
    const int64_t row = d3 + layout.pad;
    bytes_.assign(static_cast<size_t>(d0 * d1 * d2 * row) * dilattn::dtype_size(dtype), 0);
    view_ = dilattn_tensor_contiguous(bytes_.data(), dtype, d0, d1, d2, d3);
    view_.strides[3] = 1;
    view_.strides[0] = d1 * d2 * row;
    view_.strides[1] = layout.permuted ? row : d2 * row;
    view_.strides[2] = layout.permuted ? d1 * row : row;
  }
  // Contiguous, holding `values` (index order) rounded to dtype.
  static Tensor of_values(dilattn_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                          const std::vector<double>& values) {
    Tensor t(dtype, d0, d1, d2, d3);
    for (int64_t e = 0; e < t.count() && e < static_cast<int64_t>(values.size()); ++e)
      t.set_flat(e, values[static_cast<size_t>(e)]);
    return t;
  }

  // Copies own their bytes: the copy's view points at the copy.
  Tensor(const Tensor& o) : bytes_(o.bytes_), view_(o.view_) { view_.data = bytes_.data(); }
  Tensor& operator=(const Tensor& o) {
    bytes_ = o.bytes_;
    view_ = o.view_;
    view_.data = bytes_.data();
    return *this;
  }
  Tensor(Tensor&& o) noexcept : bytes_(std::move(o.bytes_)), view_(o.view_) {
    view_.data = bytes_.data();
  }
  Tensor& operator=(Tensor&& o) noexcept {
    bytes_ = std::move(o.bytes_);
    view_ = o.view_;
    view_.data = bytes_.data();
    return *this;
  }
  ~Tensor() = default;

  const dilattn_tensor& view() const { return view_; }
  dilattn_tensor& view() { return view_; }  // for tests that break a view on purpose
  dilattn_dtype dtype() const { return view_.dtype; }
  int64_t dim(int i) const { return view_.shape[i]; }
  int64_t count() const { return dim(0) * dim(1) * dim(2) * dim(3); }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

  double at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return dilattn::load_element(view_.data, view_.dtype,
                                 dilattn::element_offset(view_, a, b, c, d));
  }
  void set(int64_t a, int64_t b, int64_t c, int64_t d, double x) {
    dilattn::store_element(view_.data, view_.dtype, dilattn::element_offset(view_, a, b, c, d), x);
  }
  double flat(int64_t e) const {
    int64_t i[4];
    unflatten(e, i);
    return at(i[0], i[1], i[2], i[3]);
  }
  void set_flat(int64_t e, double x) {
    int64_t i[4];
    unflatten(e, i);
    set(i[0], i[1], i[2], i[3], x);
  }
  // Index [i0, i1, i2, i3] of element e in index order.
  void unflatten(int64_t e, int64_t* i) const {
    for (int k = 3; k >= 0; --k) {
      i[k] = e % dim(k);
      e /= dim(k);
    }
  }
  std::vector<double> values() const {
    std::vector<double> out(static_cast<size_t>(count()));
    for (int64_t e = 0; e < count(); ++e) out[static_cast<size_t>(e)] = flat(e);
    return out;
  }
  // The same values in another dtype and layout (e.g. widened to f64 for the reference).
  Tensor converted(dilattn_dtype dtype, Layout layout = {}) const {
    Tensor t(dtype, dim(0), dim(1), dim(2), dim(3), layout);
    for (int64_t e = 0; e < count(); ++e) t.set_flat(e, flat(e));
    return t;
  }
  // Every byte (padding included) set to 0x7f: f32 and bf16 3.4e38, f16 NaN, f64 1.4e306.
  // An output element a backend forgets to write then fails any comparison.
  void poison() { std::memset(bytes_.data(), 0x7f, bytes_.size()); }
  // Every byte still poison(): nothing wrote to the tensor (SPEC 7: outputs untouched on error).
  bool is_poisoned() const {
    for (unsigned char b : bytes_)
      if (b != 0x7f) return false;
    return true;
  }

 private:
  std::vector<unsigned char> bytes_;
  dilattn_tensor view_{};
};

}  // namespace harness

#endif  // DILATTN_TESTS_TENSOR_H
