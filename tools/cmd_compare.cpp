// cmd_compare.cpp - `dilattn compare A.npy B.npy [--atol X --rtol Y]`: SPEC 8's elementwise test.
//
// B is the reference. A finite element passes when |a - b| <= atol + rtol * |b|; an infinity
// passes only against the same infinity (so -inf == -inf in an LSE passes, and nothing passes
// against inf by tolerance), NaN only against NaN; integer arrays (<i4, <i8) are compared
// exactly, whatever the tolerances, and only with integer arrays (else exit 2). Prints
// "max_abs_err=... max_rel_err=... (atol=... rtol=...)" (max_rel_err over elements with b != 0;
// NaN or infinite differences count as inf), then, when some element fails, a second line with
// the count and the first failing index; exits 1 then, 0 when all pass, 2 on unreadable files or
// shapes that differ. Defaults are SPEC 8's f32 values. Checked by tests/cli/test_cli_compare.py.
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

bool is_integer(NpyType t) { return t == NpyType::i4 || t == NpyType::i8; }

// An element as printed in the failure line: integers in full, floats to 9 digits.
std::string element_string(const NpyArray& a, int64_t e) {
  if (is_integer(a.type)) return std::to_string(a.get_index(e, "compare"));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", a.get(e));
  return buf;
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

  const bool a_int = is_integer(a.type), b_int = is_integer(b.type);
  if (a_int != b_int)
    fail_input(pa + ": dtype " + npy_descr(a.type) + " cannot be compared with " + pb + "'s " +
               npy_descr(b.type) + " (integers only with integers, floats only with floats)");

  const double inf = std::numeric_limits<double>::infinity();
  double max_abs = 0.0, max_rel = 0.0;
  int64_t failures = 0, first_failure = -1;
  for (int64_t e = 0; e < a.numel(); ++e) {
    bool ok;
    double diff, ref_magnitude;
    if (a_int) {
      // Exactly: int64 values above 2^53 are not all doubles, and an index has no tolerance.
      const int64_t x = a.get_index(e, pa), ref = b.get_index(e, pb);
      ok = x == ref;
      // |x - ref| < 2^64 is exact in uint64 (no signed overflow), then rounded once.
      const uint64_t gap = x >= ref ? static_cast<uint64_t>(x) - static_cast<uint64_t>(ref)
                                    : static_cast<uint64_t>(ref) - static_cast<uint64_t>(x);
      diff = static_cast<double>(gap);
      ref_magnitude = std::fabs(static_cast<double>(ref));
    } else {
      const double x = a.get(e), ref = b.get(e);
      if (std::isnan(x) || std::isnan(ref)) {
        ok = std::isnan(x) && std::isnan(ref);  // NaN matches only NaN
        diff = ok ? 0.0 : inf;
      } else if (std::isinf(x) || std::isinf(ref)) {
        // An infinity matches only the same infinity: atol + rtol * |inf| is inf, and every
        // difference would pass it.
        ok = x == ref;
        diff = ok ? 0.0 : inf;
      } else {
        diff = std::fabs(x - ref);
        ok = diff <= atol + rtol * std::fabs(ref);
      }
      ref_magnitude = std::isnan(ref) ? 0.0 : std::fabs(ref);
    }
    if (diff > max_abs) max_abs = diff;
    if (ref_magnitude != 0.0) {
      const double rel = std::isinf(ref_magnitude) ? (diff == 0.0 ? 0.0 : inf) : diff / ref_magnitude;
      if (rel > max_rel) max_rel = rel;
    }
    if (!ok && failures++ == 0) first_failure = e;
  }
  std::printf("max_abs_err=%.6g max_rel_err=%.6g (atol=%g rtol=%g)\n", max_abs, max_rel, atol, rtol);
  if (failures == 0) return kExitOk;
  std::printf("out of tolerance: %lld of %lld elements, first at %s (a=%s b=%s)\n",
              static_cast<long long>(failures), static_cast<long long>(a.numel()),
              index_string(first_failure, a.shape).c_str(), element_string(a, first_failure).c_str(),
              element_string(b, first_failure).c_str());
  return kExitOutOfTolerance;
}

}  // namespace dilattn_cli
