// test_hand_computed.cpp - the reference forward on cases small enough to compute by hand
// (SPEC 2 and 3), with the arithmetic next to each expectation.
//
// Keys are chosen so the exponentials are integers: with scale 1 and D = 1, a key ln 3 seen by
// a query 1 gives exp(S) = 3, by a query 2 gives exp(S) = 9. Values v = (10, 20).
#include <cmath>
#include <vector>

#include "../common/attention_run.h"

using namespace harness;

namespace {

const double kLn3 = std::log(3.0);
const double kTol = 1e-13;  // f64 sums of a handful of O(10) terms

// An f64 case with the given sizes (B = H = Hkv = 1) and scale (0: the default).
AttentionCase small(const char* name, int64_t Nq, int64_t Nk, int64_t D, double scale) {
  AttentionCase c;
  c.name = name;
  c.dtype = DILATTN_F64;
  c.Nq = Nq; c.Nk = Nk; c.D = D;
  c.scale = scale;
  return c;
}

// Inputs holding the given values in index order; dO zero.
Inputs inputs(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k,
              const std::vector<double>& v) {
  return {Tensor::of_values(DILATTN_F64, c.B, c.Nq, c.H, c.D, q),
          Tensor::of_values(DILATTN_F64, c.B, c.Nk, c.Hkv, c.D, k),
          Tensor::of_values(DILATTN_F64, c.B, c.Nk, c.Hkv, c.D, v), c.q_like(DILATTN_F64)};
}

Forward forward(const AttentionCase& c, const Inputs& in) {
  CaseScope scope(c.name);
  return run_forward(c, in, DILATTN_BACKEND_REF);
}

// Element e of O and of LSE in index order.
double o(const Forward& r, int64_t e) { return r.o.flat(e); }
double lse(const Forward& r, int64_t e) { return r.lse.flat(e); }

Inputs two_keys(const AttentionCase& c, const std::vector<double>& q) {
  return inputs(c, q, {0.0, kLn3}, {10.0, 20.0});
}

void dense_not_causal() {
  const AttentionCase c = small("dense_not_causal", 2, 2, 1, 1);
  const Forward r = forward(c, two_keys(c, {1.0, 2.0}));
  // Row 0, q = 1: exp S = (1, 3), sum 4.  LSE = ln 4, O = (1*10 + 3*20) / 4 = 17.5.
  CHECK_NEAR(o(r, 0), 17.5, kTol);
  CHECK_NEAR(lse(r, 0), std::log(4.0), kTol);
  // Row 1, q = 2: exp S = (1, 9), sum 10. LSE = ln 10, O = (10 + 180) / 10 = 19.
  CHECK_NEAR(o(r, 1), 19.0, kTol);
  CHECK_NEAR(lse(r, 1), std::log(10.0), kTol);
}

void dense_causal() {
  AttentionCase c = small("dense_causal", 2, 2, 1, 1);
  c.causal = true;
  const Forward r = forward(c, two_keys(c, {1.0, 2.0}));
  // Row 0 sees key 0 only (j <= 0): O = v0 = 10, LSE = S_00 = 1 * 0 = 0.
  CHECK_NEAR(o(r, 0), 10.0, kTol);
  CHECK_NEAR(lse(r, 0), 0.0, kTol);
  // Row 1 sees both keys: as dense, O = 19, LSE = ln 10.
  CHECK_NEAR(o(r, 1), 19.0, kTol);
  CHECK_NEAR(lse(r, 1), std::log(10.0), kTol);
}

void causal_bottom_right_more_keys() {
  AttentionCase c = small("causal_bottom_right_more_keys", 1, 2, 1, 1);
  c.causal = true;
  const Forward r = forward(c, two_keys(c, {1.0}));
  // Bottom-right: row 0 keeps j <= 0 + (2 - 1) = 1, both keys: O = 17.5, LSE = ln 4.
  CHECK_NEAR(o(r, 0), 17.5, kTol);
  CHECK_NEAR(lse(r, 0), std::log(4.0), kTol);
}

void causal_bottom_right_more_queries() {
  AttentionCase c = small("causal_bottom_right_more_queries", 2, 1, 1, 1);
  c.causal = true;
  const Forward r = forward(c, inputs(c, {1.0, 2.0}, {kLn3}, {20.0}));
  // Row 0 keeps j <= 0 + (1 - 2) = -1: no key, O = 0, LSE = -inf.
  CHECK_NEAR(o(r, 0), 0.0, 0.0);
  CHECK_NEAR(lse(r, 0), -INFINITY, 0.0);
  // Row 1 keeps j <= 0: key 0 alone, O = 20, LSE = S = 2 ln 3.
  CHECK_NEAR(o(r, 1), 20.0, kTol);
  CHECK_NEAR(lse(r, 1), 2 * kLn3, kTol);
}

void dense_two_dims_explicit_scale() {
  const AttentionCase c = small("dense_two_dims_explicit_scale", 1, 2, 2, 0.5);
  // q = (2, 0); k0 = (0, 0), k1 = (ln 3, 5): S = 0.5 * (0, 2 ln 3 + 0) = (0, ln 3), exp (1, 3).
  // v0 = (10, -4), v1 = (20, 8): O = ((10 + 60) / 4, (-4 + 24) / 4) = (17.5, 5), LSE = ln 4.
  const Forward r = forward(c, inputs(c, {2, 0}, {0, 0, kLn3, 5}, {10, -4, 20, 8}));
  CHECK_NEAR(o(r, 0), 17.5, kTol);
  CHECK_NEAR(o(r, 1), 5.0, kTol);
  CHECK_NEAR(lse(r, 0), std::log(4.0), kTol);
}

void default_scale_is_inverse_sqrt_d() {
  const AttentionCase c = small("default_scale_is_inverse_sqrt_d", 1, 2, 4, 0);  // 1/sqrt(4)
  // q = (1,1,1,1), k0 = 0, k1 = (ln 3 / 2) * (1,1,1,1): S = (0, 0.5 * 4 * ln 3 / 2) = (0, ln 3).
  const double h = kLn3 / 2;
  const Inputs in =
      inputs(c, {1, 1, 1, 1}, {0, 0, 0, 0, h, h, h, h}, {10, 10, 10, 10, 20, 20, 20, 20});
  const Forward r = forward(c, in);
  for (int d = 0; d < 4; ++d) CHECK_NEAR(o(r, d), 17.5, kTol);
  CHECK_NEAR(lse(r, 0), std::log(4.0), kTol);
}

void dilated_two_branches() {
  AttentionCase c = small("dilated_two_branches", 2, 2, 1, 1);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {2, 1};
  c.dilations = {1, 1};
  const Forward r = forward(c, two_keys(c, {1.0, 2.0}));
  // Row 0: branch (2,1) gives keys {0, 1}, branch (1,1) gives {0}: multiset {0, 0, 1},
  // exp S = 1 + 1 + 3 = 5, LSE = ln 5, O = (10 + 10 + 60) / 5 = 16.
  CHECK_NEAR(o(r, 0), 16.0, kTol);
  CHECK_NEAR(lse(r, 0), std::log(5.0), kTol);
  // Row 1: {0, 1} and {1}: exp S = 1 + 9 + 9 = 19, O = (10 + 180 + 180) / 19 = 370 / 19.
  CHECK_NEAR(o(r, 1), 370.0 / 19.0, kTol);
  CHECK_NEAR(lse(r, 1), std::log(19.0), kTol);
}

void dilated_offsets_mod_mode() {
  AttentionCase c = small("dilated_offsets_mod_mode", 4, 4, 1, 1);
  c.H = c.Hkv = 2;
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {2};
  c.dilations = {2};
  // Layout [n, h]: q = 1 everywhere; k[n, h] = n + h; v[n, h] = 10 n + h.
  std::vector<double> k, v;
  for (int n = 0; n < 4; ++n)
    for (int h = 0; h < 2; ++h) {
      k.push_back(n + h);
      v.push_back(10 * n + h);
    }
  const Inputs in = inputs(c, std::vector<double>(8, 1.0), k, v);
  const Forward r = forward(c, in);
  // Segments [0,2), [2,4), r = 2. Head 0: offset 0 mod 2 = 0, selects rows 0 and 2, each
  // attending itself alone: O = v, LSE = q k. Rows 1 and 3 get nothing: O = 0, LSE = -inf.
  // Head 1: offset 1 mod 2 = 1, selects rows 1 and 3.
  for (int n = 0; n < 4; ++n)
    for (int h = 0; h < 2; ++h) {
      const bool selected = n % 2 == h;
      CHECK_NEAR(r.o.at(0, n, h, 0), selected ? 10.0 * n + h : 0.0, kTol);
      CHECK_NEAR(r.lse.at(0, h, n, 0), selected ? double(n + h) : -INFINITY, kTol);
    }
}

void dilated_clipped_and_partial_segments() {
  AttentionCase c = small("dilated_clipped_and_partial_segments", 3, 3, 1, 1);
  c.kind = DILATTN_KIND_DILATED;
  c.segments = {8};  // clipped to N = 3: one segment [0, 3)
  c.dilations = {2};  // head 0, offset 0: selects 0 and 2
  const Inputs in = inputs(c, {1, 1, 2}, {0, 5, kLn3}, {10, 99, 20});
  Forward r = forward(c, in);
  // Row 0 (q = 1) sees keys {0, 2}: exp S = (1, 3): O = 17.5, LSE = ln 4. Row 1 unselected.
  // Row 2 (q = 2): exp S = (1, 9): O = 19, LSE = ln 10. Key 1 (value 99) is never seen.
  CHECK_NEAR(o(r, 0), 17.5, kTol);
  CHECK_NEAR(lse(r, 0), std::log(4.0), kTol);
  CHECK_NEAR(o(r, 1), 0.0, 0.0);
  CHECK_NEAR(lse(r, 1), -INFINITY, 0.0);
  CHECK_NEAR(o(r, 2), 19.0, kTol);
  CHECK_NEAR(lse(r, 2), std::log(10.0), kTol);

  c.segments = {2};  // segments [0, 2) and the partial [2, 3)
  c.dilations = {1};
  r = forward(c, in);
  // Row 2 is alone in its partial segment: O = v2 = 20, LSE = 2 ln 3.
  CHECK_NEAR(o(r, 2), 20.0, kTol);
  CHECK_NEAR(lse(r, 2), 2 * kLn3, kTol);
  // Row 0 sees keys {0, 1}: exp S = (1, e^5): O = (10 + 99 e^5) / (1 + e^5).
  const double e5 = std::exp(5.0);
  CHECK_NEAR(o(r, 0), (10 + 99 * e5) / (1 + e5), kTol);
  CHECK_NEAR(lse(r, 0), std::log(1 + e5), kTol);
}

}  // namespace

int main() {
  dense_not_causal();
  dense_causal();
  causal_bottom_right_more_keys();
  causal_bottom_right_more_queries();
  dense_two_dims_explicit_scale();
  default_scale_is_inverse_sqrt_d();
  dilated_two_branches();
  dilated_offsets_mod_mode();
  dilated_clipped_and_partial_segments();
  return finish("reference_hand_computed_cases");
}
