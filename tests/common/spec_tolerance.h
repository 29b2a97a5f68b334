// spec_tolerance.h - SPEC 8's tolerances, in one place for every C++ test that compares a fast
// path (cpu, emu, cuda) with the f64 reference: |x - ref| <= atol + rtol * |ref|, elementwise.
// f16/bf16 inputs are rounded to the dtype before the reference runs, so these bound the
// path's own error. f64 inputs run the f32 fast paths and get the f32 bound.
#ifndef DILATTN_TESTS_SPEC_TOLERANCE_H
#define DILATTN_TESTS_SPEC_TOLERANCE_H

#include "dilattn.h"

namespace spec8 {

struct Tolerance {
  double atol, rtol;
};

inline Tolerance of(dilattn_dtype t) {
  switch (t) {
    case DILATTN_F16: return {2e-3, 2e-3};
    case DILATTN_BF16: return {1.6e-2, 1.6e-2};
    default: return {1e-5, 1e-4};
  }
}

// LSE: absolute 1e-4 in f32.
constexpr double kLseAtol = 1e-4;
inline Tolerance lse() { return {kLseAtol, 0}; }

}  // namespace spec8

#endif  // DILATTN_TESTS_SPEC_TOLERANCE_H
