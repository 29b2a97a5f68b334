// test_dropout_arguments.cpp - SPEC 11.2: what is refused around dropout, each with its status, a
// message naming the argument or bound, and every output byte untouched:
//   - dilattn_desc_set_dropout with p outside [0, 1) (negative, 1, above 1, NaN, infinity): the
//     description keeps its p (a plan made from it runs the plain calls);
//   - none: a plan with p > 0 on ref, cpu and emu (where built) is made (every backend runs
//     dropout), and AUTO picks for it the backend it picks with p = 0;
//   - the calls without a seed on a dropout plan of ref, cpu and emu: dilattn_forward,
//     dilattn_backward, their _on_stream twins, dilattn_reference_rows, and the _ex calls with
//     options NULL;
//   - a dilattn_call_options with a foreign struct_size, an offset of 2^32 (2^32 - 1 runs);
//   - the plan-time bounds of SPEC 11.1 (Nq, ceil(Nk / 4), B * H above 2^32);
//   - ring attention's plain calls on a dropout plan (no seed), and an offset of 2^32 in
//     dilattn_ring_forward_ex.
#include <cmath>
#include <limits>

#include "dilattn_ring.h"
#include "error_fixture.h"

using errtest::FreshDesc;
using errtest::Problem;
using harness::CaseScope;

namespace {

// Replaces the fixture's plan by one with dropout p on `backend`; returns the status.
dilattn_status replan(Problem& pr, double p, dilattn_backend backend = DILATTN_BACKEND_REF) {
  dilattn_plan_destroy(pr.plan);
  pr.plan = nullptr;
  if (!CHECK_OK(dilattn_desc_set_dropout(pr.desc, p))) return DILATTN_ERROR_INTERNAL;
  const dilattn_shape shape = dilattn_shape_make(Problem::B, Problem::N, Problem::N, Problem::H,
                                                 Problem::Hkv, Problem::D);
  return dilattn_plan_create(&pr.plan, pr.desc, &shape, DILATTN_F32, backend);
}

void bad_p_refused_desc_unchanged() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad { double p; const char* text; };
  for (const Bad& bad : {Bad{-0.1, "'p' = -0.1"}, Bad{1.0, "'p' = 1"}, Bad{1.5, "'p' = 1.5"},
                         Bad{nan, "'p' = nan"}, Bad{inf, "'p' = inf"}}) {
    CaseScope scope(bad.text);
    Problem pr;
    CHECK_ERROR(dilattn_desc_set_dropout(pr.desc, bad.p), DILATTN_ERROR_INVALID_VALUE,
                bad.text, "0 <= p < 1");
    // Still no dropout: a plan from the description runs dilattn_forward.
    dilattn_plan plan = nullptr;
    const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 2, 1, 3);
    CHECK_OK(dilattn_plan_create(&plan, pr.desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF));
    std::swap(plan, pr.plan);
    CHECK_OK(pr.forward());
    std::swap(plan, pr.plan);
    dilattn_plan_destroy(plan);
  }
}

void every_backend_takes_dropout() {
  for (dilattn_backend backend : errtest::cpu_side_backends()) {  // SPEC 11.2
    CaseScope scope(dilattn_backend_name(backend));
    Problem pr;
    CHECK_OK(replan(pr, 0.25, backend));
    CHECK(pr.plan != nullptr);
  }
  // Dropout does not move AUTO's choice (cuda where a GPU runs the problem, else cpu).
  Problem pr;
  dilattn_backend without = DILATTN_BACKEND_AUTO, with = DILATTN_BACKEND_AUTO;
  CHECK_OK(replan(pr, 0.0, DILATTN_BACKEND_AUTO));
  CHECK_OK(dilattn_plan_backend(pr.plan, &without));
  CHECK_OK(replan(pr, 0.25, DILATTN_BACKEND_AUTO));
  CHECK_OK(dilattn_plan_backend(pr.plan, &with));
  CHECK_EQ(with, without);
  CHECK(with != DILATTN_BACKEND_REF);
}

void seedless_calls_refused(dilattn_backend backend) {
  CaseScope scope(dilattn_backend_name(backend));
  Problem pr;
  if (!CHECK_OK(replan(pr, 0.5, backend))) return;
  CHECK_ERROR(pr.forward(), DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5", "dilattn_forward_ex");
  CHECK_ERROR(pr.backward(), DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5",
              "dilattn_backward_ex");
  CHECK_ERROR(dilattn_forward_on_stream(pr.plan, nullptr, &pr.tq, &pr.tk, &pr.tv, &pr.to,
                                        &pr.tlse, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5");
  CHECK_ERROR(dilattn_backward_on_stream(pr.plan, nullptr, &pr.tq, &pr.tk, &pr.tv, &pr.to,
                                         &pr.tlse, &pr.tdo, &pr.tdq, &pr.tdk, &pr.tdv, nullptr,
                                         0),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5");
  CHECK_ERROR(dilattn_forward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, nullptr,
                                 nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5");
  CHECK_ERROR(dilattn_backward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, &pr.tdo,
                                  &pr.tdq, &pr.tdk, &pr.tdv, nullptr, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5");
  const int64_t rows[1] = {0};
  double o_rows[Problem::B * Problem::H * Problem::D] = {}, lse_rows[Problem::B * Problem::H] = {};
  CHECK_ERROR(dilattn_reference_rows(pr.plan, &pr.tq, &pr.tk, &pr.tv, rows, 1, o_rows, lse_rows),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5", "dilattn_reference_rows");
  CHECK(pr.outputs_untouched());
  for (double x : o_rows) CHECK_EQ(x, 0.0);
}

void bad_call_options_refused() {
  Problem pr;
  if (!CHECK_OK(replan(pr, 0.5))) return;
  dilattn_call_options options = dilattn_call_options_make();
  CHECK_EQ(options.struct_size, sizeof(dilattn_call_options));
  CHECK_EQ(options.dropout_seed, uint64_t{0});
  CHECK_EQ(options.dropout_offset, uint64_t{0});
  options.struct_size = 8;
  CHECK_ERROR(dilattn_forward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, &options,
                                 nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "'options'", "struct_size = 8");
  options = dilattn_call_options_make();
  options.dropout_offset = uint64_t{1} << 32;
  CHECK_ERROR(dilattn_forward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, &options,
                                 nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout_offset = 4294967296", "2^32");
  CHECK_ERROR(dilattn_backward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, &pr.tdo,
                                  &pr.tdq, &pr.tdk, &pr.tdv, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout_offset = 4294967296");
  CHECK(pr.outputs_untouched());
  options.dropout_offset = (uint64_t{1} << 32) - 1;
  options.dropout_seed = ~uint64_t{0};
  CHECK_OK(dilattn_forward_ex(pr.plan, &pr.tq, &pr.tk, &pr.tv, &pr.to, &pr.tlse, &options,
                              nullptr, 0));
}

void counter_bounds_refused_at_plan_creation() {
  FreshDesc desc;
  CHECK_OK(dilattn_desc_set_dropout(desc.d, 0.1));
  const int64_t two32 = int64_t{1} << 32;
  struct Bound { dilattn_shape shape; const char* text; };
  for (const Bound& bound : {
           Bound{dilattn_shape_make(1, two32 + 1, 1, 1, 1, 1), "seqlen_q = 4294967297"},
           Bound{dilattn_shape_make(1, 1, 4 * two32 + 1, 1, 1, 1), "ceil(seqlen_k / 4) <= 2^32"},
           Bound{dilattn_shape_make(65537, 1, 1, 65536, 1, 1), "batch * heads_q"}}) {
    CaseScope scope(bound.text);
    dilattn_plan plan = nullptr;
    CHECK_ERROR(dilattn_plan_create(&plan, desc.d, &bound.shape, DILATTN_F32,
                                    DILATTN_BACKEND_REF),
                DILATTN_ERROR_INVALID_VALUE, bound.text, "SPEC 11.1");
    CHECK(plan == nullptr);
  }
  // At the bounds: Nq = 2^32 and ceil(Nk / 4) = 2^32 are taken (no tensor is made).
  dilattn_plan plan = nullptr;
  const dilattn_shape at_bound = dilattn_shape_make(1, two32, 4 * two32, 1, 1, 1);
  CHECK_OK(dilattn_plan_create(&plan, desc.d, &at_bound, DILATTN_F32, DILATTN_BACKEND_REF));
  dilattn_plan_destroy(plan);
}

// SPEC 5 and 11.2: the ring runs dropout through its _ex calls only: the plain ring calls carry
// no seed and are refused naming p and the _ex call, as is an offset of 2^32.
void ring_needs_a_seed() {
  Problem pr;
  if (!CHECK_OK(replan(pr, 0.5))) return;
  dilattn_comm comm = nullptr;
  if (!CHECK_OK(dilattn_comm_create_threads(1, 2000, &comm))) return;
  CHECK_ERROR(dilattn_ring_forward(pr.plan, comm, DILATTN_RING_CONTIGUOUS, &pr.tq, &pr.tk, &pr.tv,
                                   &pr.to, &pr.tlse),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5", "dilattn_ring_forward_ex");
  CHECK_ERROR(dilattn_ring_backward(pr.plan, comm, DILATTN_RING_CONTIGUOUS, &pr.tq, &pr.tk,
                                    &pr.tv, &pr.to, &pr.tlse, &pr.tdo, &pr.tdq, &pr.tdk, &pr.tdv),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.5", "dilattn_ring_backward_ex");
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_offset = uint64_t{1} << 32;
  CHECK_ERROR(dilattn_ring_forward_ex(pr.plan, comm, DILATTN_RING_CONTIGUOUS, &pr.tq, &pr.tk,
                                      &pr.tv, &pr.to, &pr.tlse, &options),
              DILATTN_ERROR_INVALID_VALUE, "dropout_offset = 4294967296");
  CHECK(pr.outputs_untouched());
  options.dropout_offset = 3;
  CHECK_OK(dilattn_ring_forward_ex(pr.plan, comm, DILATTN_RING_CONTIGUOUS, &pr.tq, &pr.tk,
                                   &pr.tv, &pr.to, &pr.tlse, &options));
  dilattn_comm_destroy(comm);
}

}  // namespace

int main() {
  bad_p_refused_desc_unchanged();
  every_backend_takes_dropout();
  for (dilattn_backend backend : errtest::cpu_side_backends()) seedless_calls_refused(backend);
  bad_call_options_refused();
  counter_bounds_refused_at_plan_creation();
  ring_needs_a_seed();
  return harness::finish("dropout_arguments");
}
