// test_sinks_arguments.cpp - SPEC 10.3 refusals: dilattn_desc_set_sinks takes 0 or 1; a plan with
// sinks refuses every call that carries no sink values (the plain calls, _ex with NULL options
// or NULL sinks, a first-version dilattn_call_options, dilattn_reference_rows) and values that
// are NaN or +inf, naming the entry; a plan without sinks refuses sink arrays; each refusal
// leaves every output byte (d_sinks included) as it was. A first-version struct_size still runs
// a plan without sinks (SPEC 14.3). (Other backends and the ring refusing a plan with sinks:
// test_variant_arguments.cpp.)
#include <cstddef>
#include <cstring>
#include <limits>

#include "error_fixture.h"

using errtest::FreshDesc;
using errtest::PlanSlot;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

void set_sinks_takes_zero_or_one() {
  FreshDesc desc;
  CHECK_ERROR(dilattn_desc_set_sinks(desc.d, 2), DILATTN_ERROR_INVALID_VALUE,
              "argument 'enabled' = 2: must be 0 or 1");
  CHECK_ERROR(dilattn_desc_set_sinks(desc.d, -1), DILATTN_ERROR_INVALID_VALUE,
              "argument 'enabled' = -1");
  // Still no sinks: a plain forward runs.
  errtest::Problem p;
  dilattn_plan plan = nullptr;
  CHECK_OK(errtest::create_plan(&plan, desc, p.B, p.N, p.N, p.H, p.Hkv, p.D));
  CHECK_OK(dilattn_forward(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, nullptr, 0));
  dilattn_plan_destroy(plan);
}

void plan_with_sinks_needs_values() {
  errtest::Problem p;  // B=1, N=4, H=2, Hkv=1, D=3, f32 on ref
  FreshDesc desc;
  CHECK_OK(dilattn_desc_set_sinks(desc.d, 1));
  dilattn_plan plan = nullptr;
  CHECK_OK(errtest::create_plan(&plan, desc, p.B, p.N, p.N, p.H, p.Hkv, p.D));
  CHECK_ERROR(dilattn_forward(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "the plan has sinks: dilattn_forward carries no sink",
              "dilattn_forward_ex");
  CHECK_ERROR(dilattn_backward(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq, &p.tdk,
                               &p.tdv, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "the plan has sinks: dilattn_backward");
  CHECK_ERROR(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, nullptr, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "the plan has sinks");
  dilattn_call_options options = dilattn_call_options_make();
  CHECK_ERROR(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "argument 'options': sinks is NULL",
              "heads_q = 2 values");
  double sinks[2] = {0.5, kNan}, d_sinks[2] = {7, 7};
  options.sinks = sinks;
  options.d_sinks = d_sinks;
  CHECK_ERROR(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "sinks[1] = nan: a sink is finite or -inf");
  sinks[1] = 0.25;
  sinks[0] = kInf;
  CHECK_ERROR(dilattn_backward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq,
                                  &p.tdk, &p.tdv, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "sinks[0] = inf");
  // A first-version struct has no sink fields: it reads as sinks = NULL.
  sinks[0] = -kInf;
  options.struct_size = offsetof(dilattn_call_options, sinks);
  CHECK_ERROR(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "sinks is NULL");
  const int64_t rows[1] = {0};
  double o_rows[6], lse_rows[2];
  CHECK_ERROR(dilattn_reference_rows(plan, &p.tq, &p.tk, &p.tv, rows, 1, o_rows, lse_rows),
              DILATTN_ERROR_INVALID_VALUE, "the plan has sinks: dilattn_reference_rows");
  CHECK(p.outputs_untouched());
  CHECK(d_sinks[0] == 7 && d_sinks[1] == 7);
  // With finite or -inf values both calls run, and the backward writes d_sinks.
  options.struct_size = sizeof options;
  CHECK_OK(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr, 0));
  CHECK_OK(dilattn_backward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq, &p.tdk,
                               &p.tdv, &options, nullptr, 0));
  CHECK(d_sinks[0] == 0);  // a -inf sink takes no probability: its gradient is 0
  CHECK(d_sinks[1] != 7);
  dilattn_plan_destroy(plan);
}

void plan_without_sinks_refuses_values() {
  errtest::Problem p;
  double sinks[2] = {0.5, 0.5}, d_sinks[2] = {7, 7};
  dilattn_call_options options = dilattn_call_options_make();
  options.sinks = sinks;
  CHECK_ERROR(dilattn_forward_ex(p.plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr,
                                 0),
              DILATTN_ERROR_INVALID_VALUE, "sinks or d_sinks given, but the plan has no sinks");
  options.sinks = nullptr;
  options.d_sinks = d_sinks;
  CHECK_ERROR(dilattn_backward_ex(p.plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq,
                                  &p.tdk, &p.tdv, &options, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "the plan has no sinks");
  CHECK(p.outputs_untouched());
  CHECK(d_sinks[0] == 7 && d_sinks[1] == 7);
  // SPEC 14.3: the first version's size runs a plan without sinks, as it always did.
  dilattn_call_options first = dilattn_call_options_make();
  first.struct_size = offsetof(dilattn_call_options, sinks);
  CHECK_OK(dilattn_forward_ex(p.plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &first, nullptr, 0));
  first.struct_size = offsetof(dilattn_call_options, sinks) + 1;
  p.fill_sentinel();
  CHECK_ERROR(dilattn_forward_ex(p.plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &first, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "struct_size = ");
  CHECK(p.outputs_untouched());
}

}  // namespace

int main() {
  set_sinks_takes_zero_or_one();
  plan_with_sinks_needs_values();
  plan_without_sinks_refuses_values();
  return harness::finish("sinks_arguments_refused");
}
