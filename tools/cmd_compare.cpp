// cmd_compare.cpp - `dilattn compare A.npy B.npy [--atol X --rtol Y]`: SPEC 8's elementwise test.
//
// B is the reference. An element passes when |a - b| <= atol + rtol * |b|; equal values pass
// (so -inf == -inf in an LSE passes) and NaN passes only against NaN. Prints
// "max_abs_err=... max_rel_err=... (atol=... rtol=...)" (max_rel_err over elements with b != 0;
// NaN or infinite differences count as inf), then, when some element fails, a second line with
// the count and the first failing index; exits 1 then, 0 when all pass, 2 on unreadable files or
// shapes that differ. Defaults are SPEC 8's f32 values. Checked by tests/cli/test_cli.py.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "cli_error.h"
#include "commands.h"
#include "flags.h"
#include "npy.h"

namespace dilattn_cli {

namespace {

std::string index_string(int64_t e, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = e % shape[d];
    e /= shape[d];
  }
  return shape_string(idx);
}

}  // namespace

int cmd_compare(int argc, char** argv, int first) {
  const Flags f(argc, argv, first, {{"atol", true}, {"rtol", true}}, 2);
  if (f.positional().size() != 2)
    fail_input("compare needs two files: dilattn compare A.npy B.npy [--atol X --rtol Y]");
  const double atol = f.get_double("atol", 1e-5, true);
  const double rtol = f.get_double("rtol", 1e-4, true);
  const std::string& pa = f.positional()[0];
  const std::string& pb = f.positional()[1];
  const NpyArray a = read_npy_file(pa);
  const NpyArray b = read_npy_file(pb);
  if (a.shape != b.shape)
    fail_input(pa + ": shape " + shape_string(a.shape) + " differs from " + pb + "'s " +
               shape_string(b.shape));

  const double inf = std::numeric_limits<double>::infinity();
  double max_abs = 0.0, max_rel = 0.0;
  int64_t failures = 0, first_failure = -1;
  for (int64_t e = 0; e < a.numel(); ++e) {
    const double x = a.get(e), ref = b.get(e);
    bool ok;
    double diff;
    if (std::isnan(x) || std::isnan(ref)) {
      ok = std::isnan(x) && std::isnan(ref);
      diff = ok ? 0.0 : inf;
    } else if (x == ref) {
      ok = true;
      diff = 0.0;
    } else {
      diff = std::fabs(x - ref);  // inf when either is infinite and they differ
      ok = diff <= atol + rtol * std::fabs(ref);
    }
    if (diff > max_abs) max_abs = diff;
    if (ref != 0.0 && !std::isnan(ref)) {
      const double rel = std::isinf(ref) ? (diff == 0.0 ? 0.0 : inf) : diff / std::fabs(ref);
      if (rel > max_rel) max_rel = rel;
    }
    if (!ok && failures++ == 0) first_failure = e;
  }
  std::printf("max_abs_err=%.6g max_rel_err=%.6g (atol=%g rtol=%g)\n", max_abs, max_rel, atol, rtol);
  if (failures == 0) return kExitOk;
  std::printf("out of tolerance: %lld of %lld elements, first at %s (a=%.9g b=%.9g)\n",
              static_cast<long long>(failures), static_cast<long long>(a.numel()),
              index_string(first_failure, a.shape).c_str(), a.get(first_failure),
              b.get(first_failure));
  return kExitOutOfTolerance;
}

}  // namespace dilattn_cli
