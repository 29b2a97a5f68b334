// test_variant_arguments.cpp - SPEC 10.1 refusals: dilattn_desc_set_window, _set_softcap and
// _set_alibi refuse bad values with a status and a message naming the argument and the value,
// and leave the description as it was (no variant: the plan still resolves to a fast backend
// and the forward gives the plain answer); a slope count that is neither H nor B * H is refused
// at plan creation naming the counts; ref and cpu take a plan with each option (their numbers
// against each other: tests/cpu/test_cpu_variants.cpp), emu and cuda run the window, softcap,
// ALiBi, sinks and a packed batch (emu's forward and backward match ref's here; a packed
// block-sparse batch, which they refuse naming it: tests/packages/python/test_varlen.py); AUTO
// resolves such a plan to the first backend that runs it (cuda where a GPU is, else cpu); the
// ring runs every option on ref but a packed batch, which it refuses naming it. The packed
// batch of SPEC 10.2 and the sinks of SPEC 10.3 are two more such options here (their own
// arguments: test_varlen_arguments.cpp, test_sinks_arguments.cpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../common/compare.h"
#include "../common/spec_tolerance.h"
#include "dilattn_ring.h"
#include "error_fixture.h"

using errtest::FreshDesc;
using errtest::PlanSlot;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// The description holds no variant: a plan on it is not refused by the cpu backend for one,
// and ref's forward gives the plain dense answer of test_desc_arguments.cpp's problem
// (O = 2 in both rows; any window, softcap or bias would change it).
void check_no_variant(dilattn_desc desc) {
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(1, 2, 3, 1, 1, 1);
  if (dilattn_backend_available(DILATTN_BACKEND_CPU)) {
    CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_CPU));
    dilattn_plan_destroy(plan);
  }
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF));
  double q[2] = {1, 1}, k[3] = {0, std::log(3.0), 0}, v[3] = {1, 2, 3}, o[2] = {0, 0};
  const dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F64, 1, 2, 1, 1);
  const dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F64, 1, 2, 1, 1);
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  CHECK(std::fabs(o[0] - 2) < 1e-14 && std::fabs(o[1] - 2) < 1e-14);
  dilattn_plan_destroy(plan);
}

void window_below_minus_one_refused() {
  FreshDesc desc;
  CHECK_ERROR(dilattn_desc_set_window(desc.d, -2, 0), DILATTN_ERROR_INVALID_VALUE,
              "argument 'left' = -2");
  CHECK_ERROR(dilattn_desc_set_window(desc.d, 3, INT64_MIN), DILATTN_ERROR_INVALID_VALUE,
              "argument 'right' = -9223372036854775808");
  check_no_variant(desc.d);
  // (-1, -1) is "off": set a window, then turn it off again.
  CHECK_OK(dilattn_desc_set_window(desc.d, 0, 0));
  CHECK_OK(dilattn_desc_set_window(desc.d, -1, -1));
  check_no_variant(desc.d);
}

void softcap_negative_or_not_finite_refused() {
  FreshDesc desc;
  CHECK_ERROR(dilattn_desc_set_softcap(desc.d, -0.5), DILATTN_ERROR_INVALID_VALUE,
              "argument 'softcap' = -0.5");
  CHECK_ERROR(dilattn_desc_set_softcap(desc.d, kNan), DILATTN_ERROR_INVALID_VALUE,
              "argument 'softcap' = nan");
  CHECK_ERROR(dilattn_desc_set_softcap(desc.d, kInf), DILATTN_ERROR_INVALID_VALUE,
              "argument 'softcap' = inf");
  check_no_variant(desc.d);
  CHECK_OK(dilattn_desc_set_softcap(desc.d, 5.0));
  CHECK_OK(dilattn_desc_set_softcap(desc.d, 0.0));
  check_no_variant(desc.d);
}

void alibi_bad_slopes_refused() {
  FreshDesc desc;
  const double slopes[3] = {0.5, kNan, 0.25};
  CHECK_ERROR(dilattn_desc_set_alibi(desc.d, slopes, 3), DILATTN_ERROR_INVALID_VALUE,
              "slopes[1] = nan");
  const double infinite[2] = {-kInf, 1};
  CHECK_ERROR(dilattn_desc_set_alibi(desc.d, infinite, 2), DILATTN_ERROR_INVALID_VALUE,
              "slopes[0] = -inf");
  CHECK_ERROR(dilattn_desc_set_alibi(desc.d, slopes, -1), DILATTN_ERROR_INVALID_VALUE,
              "argument 'count' = -1");
  CHECK_ERROR(dilattn_desc_set_alibi(desc.d, nullptr, 2), DILATTN_ERROR_NULL_POINTER,
              "argument 'slopes' is NULL", "count = 2");
  check_no_variant(desc.d);
  const double one[1] = {0.5};
  CHECK_OK(dilattn_desc_set_alibi(desc.d, one, 1));
  CHECK_OK(dilattn_desc_set_alibi(desc.d, nullptr, 0));
  check_no_variant(desc.d);
}

void slope_count_checked_at_plan_creation() {
  FreshDesc desc;
  const double slopes[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  CHECK_OK(dilattn_desc_set_alibi(desc.d, slopes, 3));
  PlanSlot slot;
  // B = 2, H = 2: 2 or 4 slopes fit, 3 does not.
  CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 2, 4, 4, 2, 1, 3),
              DILATTN_ERROR_INVALID_VALUE, "count = 3", "heads_q = 2", "batch * heads_q = 4");
  CHECK(slot.untouched());
  for (int64_t count : {2, 4}) {
    CHECK_OK(dilattn_desc_set_alibi(desc.d, slopes, count));
    dilattn_plan plan = nullptr;
    CHECK_OK(errtest::create_plan(&plan, desc, 2, 4, 4, 2, 1, 3));
    dilattn_plan_destroy(plan);
  }
}

// Each option alone on a description, with the name a refusal gives it and whether the CUDA
// kernels (cuda and emu) run it.
struct Variant {
  const char* name;
  dilattn_status (*set)(dilattn_desc);
  bool kernels_run;
};
const Variant kVariants[] = {
    {"a window", [](dilattn_desc d) { return dilattn_desc_set_window(d, 2, 0); }, true},
    {"a window", [](dilattn_desc d) { return dilattn_desc_set_window(d, -1, 3); }, true},
    {"a softcap", [](dilattn_desc d) { return dilattn_desc_set_softcap(d, 30.0); }, true},
    {"ALiBi", [](dilattn_desc d) {
       const double slopes[2] = {0.5, 0.25};
       return dilattn_desc_set_alibi(d, slopes, 2);
     }, true},
    {"a packed batch (varlen)", [](dilattn_desc d) {  // SPEC 10.2, on the N = 4 problems below
       const int64_t cu[3] = {0, 1, 4};
       return dilattn_desc_set_varlen(d, 2, cu, cu);
     }, true},
    {"sinks", [](dilattn_desc d) { return dilattn_desc_set_sinks(d, 1); }, true},  // SPEC 10.3
};

bool backend_runs(dilattn_backend backend, const Variant& variant) {
  return backend == DILATTN_BACKEND_REF || backend == DILATTN_BACKEND_CPU ||
         ((backend == DILATTN_BACKEND_EMU || backend == DILATTN_BACKEND_CUDA) &&
          variant.kernels_run);
}

// The forward (O, LSE) and backward (dQ, dK, dV, d_sinks) of errtest::Problem's inputs with
// the option on `backend`, for comparing emu with ref; sinks {0.5, -1} when the plan has them.
std::vector<double> outputs_on(const FreshDesc& desc, dilattn_backend backend, bool has_sinks) {
  errtest::Problem p;
  dilattn_plan plan = nullptr;
  std::vector<double> out;
  if (!CHECK_OK(errtest::create_plan(&plan, desc, p.B, p.N, p.N, p.H, p.Hkv, p.D, backend)))
    return out;
  const double sinks[2] = {0.5, -1.0};
  double d_sinks[2] = {0, 0};
  dilattn_call_options options = dilattn_call_options_make();
  if (has_sinks) {
    options.sinks = sinks;
    options.d_sinks = d_sinks;
  }
  CHECK_OK(dilattn_forward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &options, nullptr, 0));
  CHECK_OK(dilattn_backward_ex(plan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq, &p.tdk,
                               &p.tdv, &options, nullptr, 0));
  for (const std::vector<float>* x : {&p.o, &p.lse, &p.dq, &p.dk, &p.dv})
    out.insert(out.end(), x->begin(), x->end());
  if (has_sinks) out.insert(out.end(), d_sinks, d_sinks + 2);
  dilattn_plan_destroy(plan);
  return out;
}

void backends_take_or_refuse_naming_the_option() {
  for (const Variant& variant : kVariants) {
    FreshDesc desc;
    CHECK_OK(variant.set(desc.d));
    for (dilattn_backend backend : errtest::cpu_side_backends()) {
      if (!dilattn_backend_available(backend)) continue;
      if (backend_runs(backend, variant)) {
        dilattn_plan plan = nullptr;
        CHECK_OK(errtest::create_plan(&plan, desc, 1, 4, 4, 2, 1, 3, backend));
        dilattn_plan_destroy(plan);
        continue;
      }
      PlanSlot slot;
      CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 3, backend),
                  DILATTN_ERROR_UNSUPPORTED, "backend 'emu'", "does not support", variant.name,
                  "use backend ref");
      CHECK(slot.untouched());
    }
    // emu runs what the kernels run, as ref computes it (f32: SPEC 8's bound).
    if (variant.kernels_run && dilattn_backend_available(DILATTN_BACKEND_EMU)) {
      const bool sinks = std::strcmp(variant.name, "sinks") == 0;
      const std::vector<double> emu = outputs_on(desc, DILATTN_BACKEND_EMU, sinks);
      const std::vector<double> ref = outputs_on(desc, DILATTN_BACKEND_REF, sinks);
      CHECK_CLOSE(variant.name, emu, ref, spec8::of(DILATTN_F32));
    }
    // AUTO moves past every backend that refuses to the first that runs the option: cuda where
    // a GPU is and the kernels run it, else cpu, else ref.
    dilattn_plan plan = nullptr;
    CHECK_OK(errtest::create_plan(&plan, desc, 1, 4, 4, 2, 1, 3, DILATTN_BACKEND_AUTO));
    dilattn_backend chosen = DILATTN_BACKEND_AUTO;
    CHECK_OK(dilattn_plan_backend(plan, &chosen));
    const bool gpu = dilattn_backend_available(DILATTN_BACKEND_CUDA) != 0;
    const bool cpu = dilattn_backend_available(DILATTN_BACKEND_CPU) != 0;
    CHECK(chosen == (gpu && variant.kernels_run ? DILATTN_BACKEND_CUDA
                     : cpu                      ? DILATTN_BACKEND_CPU
                                                : DILATTN_BACKEND_REF));
    dilattn_plan_destroy(plan);
  }
}

// The kernels score in f32 (SPEC 10.1): a softcap whose c * log2(e) is not a normal f32, or a
// slope whose |m| * log2(e) exceeds f32, is refused by emu naming the value; ref computes them.
void kernels_refuse_values_beyond_f32() {
  if (!dilattn_backend_available(DILATTN_BACKEND_EMU)) return;
  {
    FreshDesc desc;
    CHECK_OK(dilattn_desc_set_softcap(desc.d, 1e-300));
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 3, DILATTN_BACKEND_EMU),
                DILATTN_ERROR_UNSUPPORTED, "backend 'emu'", "softcap = 1e-300", "use backend ref");
    CHECK(slot.untouched());
    dilattn_plan plan = nullptr;
    CHECK_OK(errtest::create_plan(&plan, desc, 1, 4, 4, 2, 1, 3, DILATTN_BACKEND_REF));
    dilattn_plan_destroy(plan);
  }
  {
    FreshDesc desc;
    const double slopes[2] = {0.5, 1e300};
    CHECK_OK(dilattn_desc_set_alibi(desc.d, slopes, 2));
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 3, DILATTN_BACKEND_EMU),
                DILATTN_ERROR_UNSUPPORTED, "backend 'emu'", "slopes[1] = 1e+300", "use backend ref");
    CHECK(slot.untouched());
  }
}

// SPEC 5: the ring runs a window, a softcap and ALiBi through its plain calls (P = 1 here;
// tests/ring/test_ring_options.cpp checks the values), refuses a packed batch naming it, and
// refuses the plain calls on a plan with sinks (their values come with the _ex calls, SPEC
// 10.3), naming the _ex call. Outputs stay untouched on every refusal.
void ring_runs_or_refuses_each_option() {
  dilattn_comm comm = nullptr;
  CHECK_OK(dilattn_comm_create_threads(1, 10000, &comm));
  for (const Variant& variant : kVariants) {
    errtest::Problem p;  // B=1, N=4, H=2, Hkv=1, D=3 in f32
    FreshDesc desc;
    CHECK_OK(variant.set(desc.d));
    dilattn_plan plan = nullptr;
    CHECK_OK(errtest::create_plan(&plan, desc, p.B, p.N, p.N, p.H, p.Hkv, p.D));
    const std::string name = variant.name;
    auto forward = [&] {
      return dilattn_ring_forward(plan, comm, DILATTN_RING_CONTIGUOUS, &p.tq, &p.tk, &p.tv,
                                  &p.to, &p.tlse);
    };
    auto backward = [&] {
      return dilattn_ring_backward(plan, comm, DILATTN_RING_CONTIGUOUS, &p.tq, &p.tk, &p.tv,
                                   &p.to, &p.tlse, &p.tdo, &p.tdq, &p.tdk, &p.tdv);
    };
    if (name == "a packed batch (varlen)") {
      CHECK_ERROR(forward(), DILATTN_ERROR_UNSUPPORTED, "ring attention does not support",
                  variant.name);
      CHECK_ERROR(backward(), DILATTN_ERROR_UNSUPPORTED, "ring attention does not support",
                  variant.name);
      CHECK(p.outputs_untouched());
    } else if (name == "sinks") {
      CHECK_ERROR(forward(), DILATTN_ERROR_INVALID_VALUE, "the plan has sinks",
                  "dilattn_ring_forward_ex");
      CHECK_ERROR(backward(), DILATTN_ERROR_INVALID_VALUE, "the plan has sinks",
                  "dilattn_ring_backward_ex");
      CHECK(p.outputs_untouched());
    } else {
      CHECK_OK(forward());
      CHECK_OK(backward());
      CHECK(!p.outputs_untouched());
    }
    dilattn_plan_destroy(plan);
  }
  dilattn_comm_destroy(comm);
}

}  // namespace

int main() {
  window_below_minus_one_refused();
  softcap_negative_or_not_finite_refused();
  alibi_bad_slopes_refused();
  slope_count_checked_at_plan_creation();
  backends_take_or_refuse_naming_the_option();
  kernels_refuse_values_beyond_f32();
  ring_runs_or_refuses_each_option();
  return harness::finish("variant_arguments_refused");
}
