// test_last_error_cleared.cpp - SPEC 7: after any successful call dilattn_last_error() is "",
// even when the call met and handled an error inside (AUTO trying cuda in a build or on a
// machine without it, a pattern's terms joined by a union, a forward through the default pool).
// Before each successful call an error is provoked, so a call that merely leaves the message
// alone fails here as well.
#include <cmath>
#include <cstring>
#include <vector>

#include "error_fixture.h"

namespace {

void provoke_error(dilattn_desc desc) {
  CHECK(dilattn_desc_set_scale(desc, NAN) == DILATTN_ERROR_BAD_SCALE);
  CHECK(std::strlen(dilattn_last_error()) > 0);
}

void check_success_clears(dilattn_status s, const char* call, int line) {
  const char* message = dilattn_last_error();
  std::printf("  %s: %s, last error \"%s\"\n", call, dilattn_status_string(s), message);
  harness::record(s == DILATTN_SUCCESS && message[0] == '\0', __FILE__, line,
                  "%s returned %s with last error \"%s\"", call, dilattn_status_string(s), message);
}
#define CHECK_CLEARS(call) check_success_clears((call), #call, __LINE__)

}  // namespace

int main() {
  dilattn_desc bad = nullptr;  // the description each provoked error is made on
  CHECK(dilattn_desc_create(&bad) == DILATTN_SUCCESS);

  // Dense f32 problem, B=1 N=4 H=2 Hkv=1 D=3, planned with AUTO: in a build or on a machine
  // without CUDA, AUTO meets "no CUDA" and falls back to cpu (or ref); the fallback is a success.
  errtest::Problem p;
  dilattn_plan autoplan = nullptr;
  provoke_error(bad);
  const dilattn_shape shape = dilattn_shape_make(1, 4, 4, 2, 1, 3);
  CHECK_CLEARS(dilattn_plan_create(&autoplan, p.desc, &shape, DILATTN_F32, DILATTN_BACKEND_AUTO));
  dilattn_backend chosen = DILATTN_BACKEND_AUTO;
  provoke_error(bad);
  CHECK_CLEARS(dilattn_plan_backend(autoplan, &chosen));
  CHECK(chosen != DILATTN_BACKEND_AUTO);
  provoke_error(bad);
  CHECK_CLEARS(dilattn_forward(autoplan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, nullptr, 0));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_backward(autoplan, &p.tq, &p.tk, &p.tv, &p.to, &p.tlse, &p.tdo, &p.tdq,
                                 &p.tdk, &p.tdv, nullptr, 0));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_plan_destroy(autoplan));

  // A pattern of several terms: each term's builder, then their union.
  dilattn_mask mask = nullptr;
  provoke_error(bad);
  CHECK_CLEARS(dilattn_mask_from_pattern(&mask, "local:1+sink:1+hier:1/2/1+random:0.5:seed=3",
                                          64, 64, 8, 8));
  dilattn_desc sparse = nullptr;
  provoke_error(bad);
  CHECK_CLEARS(dilattn_desc_create(&sparse));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_desc_set_block_sparse(sparse, mask));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_mask_destroy(mask));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_desc_destroy(sparse));
  provoke_error(bad);
  CHECK_CLEARS(dilattn_desc_destroy(nullptr));  // like free(NULL): a success

  dilattn_desc_destroy(bad);
  return harness::finish("last_error_cleared_by_success");
}
