// spec_tolerance.h - SPEC 8's and SPEC 12's tolerances, in one place for every C++ test that
// compares a fast path (cpu, emu, cuda) with the f64 reference: |x - ref| <= atol + rtol * |ref|,
// elementwise. f16/bf16 inputs are rounded to the dtype before the reference runs, so these
// bound the path's own error. f64 inputs are computed in f64 (the cpu backend; cuda and emu
// refuse them) and get SPEC 12's f64 bound, for every output, the LSE included.
#ifndef DILATTN_TESTS_SPEC_TOLERANCE_H
#define DILATTN_TESTS_SPEC_TOLERANCE_H

#include "dilattn.h"

namespace spec8 {

struct Tolerance {
  double atol, rtol;
};

// SPEC 12: f64 inputs on a fast path.
constexpr Tolerance kF64 = {1e-10, 1e-10};

inline Tolerance of(dilattn_dtype t) {
  switch (t) {
    case DILATTN_F16: return {2e-3, 2e-3};
    case DILATTN_BF16: return {1.6e-2, 1.6e-2};
    case DILATTN_F64: return kF64;
    default: return {1e-5, 1e-4};
  }
}

// LSE: absolute 1e-4 (computed in f32), whatever the input dtype but f64 (SPEC 12's bound).
constexpr double kLseAtol = 1e-4;
inline Tolerance lse() { return {kLseAtol, 0}; }
inline Tolerance lse(dilattn_dtype t) { return t == DILATTN_F64 ? kF64 : lse(); }

// SPEC 12: with dropout p, a backward that rounds dS to f16 or bf16 before dS K and dS^T Q (the
// tensor-core kernels) holds dQ and dK to SPEC 8's bound times this.
inline double dropout_ds_widening(double p) { return 1.25 / (1.0 - p); }

}  // namespace spec8

#endif  // DILATTN_TESTS_SPEC_TOLERANCE_H
