// test_varlen_arguments.cpp - SPEC 10.2 refusals and counts: dilattn_desc_set_varlen refuses a
// negative count, a NULL array and offsets that do not start at 0 or decrease, naming the array,
// the index and the value, and leaves the description's packing as it was; dilattn_plan_create
// refuses batch != 1, last offsets other than the seqlens, dilated sequences that are not square
// and an ALiBi slope count that is neither H nor num_seqs * H; the score count of a packed plan
// is the hand count per sequence. (The backends taking a packed plan and the ring refusing it
// are in test_variant_arguments.cpp, with the other variants.)
#include <cmath>

#include "error_fixture.h"

using errtest::FreshDesc;
using errtest::PlanSlot;

namespace {

// Nq = 2, Nk = 3, H = Hkv = D = 1 in f64 on ref; q = 1, k = (0, log 3, 0), v = (1, 2, 3).
// Unpacked, both rows see every key: O = (1 + 3*2 + 3) / 5 = 2. Packed as {0, 1, 2} / {0, 1, 3},
// row 0 sees key 0 alone (O = 1) and row 1 keys 1 and 2 (O = (3*2 + 3) / 4 = 2.25).
void forward_of(dilattn_desc desc, double o[2]) {
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(1, 2, 3, 1, 1, 1);
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F64, DILATTN_BACKEND_REF));
  double q[2] = {1, 1}, k[3] = {0, std::log(3.0), 0}, v[3] = {1, 2, 3};
  const dilattn_tensor tq = dilattn_tensor_contiguous(q, DILATTN_F64, 1, 2, 1, 1);
  const dilattn_tensor tk = dilattn_tensor_contiguous(k, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor tv = dilattn_tensor_contiguous(v, DILATTN_F64, 1, 3, 1, 1);
  const dilattn_tensor to = dilattn_tensor_contiguous(o, DILATTN_F64, 1, 2, 1, 1);
  CHECK_OK(dilattn_forward(plan, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  dilattn_plan_destroy(plan);
}

void check_forward(dilattn_desc desc, double o0, double o1) {
  double o[2] = {0, 0};
  forward_of(desc, o);
  CHECK_NEAR(o[0], o0, 1e-14);
  CHECK_NEAR(o[1], o1, 1e-14);
}

const int64_t kGoodQ[3] = {0, 1, 2}, kGoodK[3] = {0, 1, 3};

void bad_offsets_refused_description_unchanged() {
  FreshDesc desc;
  const int64_t starts_at_one[3] = {1, 1, 2}, decreasing[3] = {0, 2, 1};
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, -1, kGoodQ, kGoodK), DILATTN_ERROR_INVALID_VALUE,
              "argument 'num_seqs' = -1");
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, 2, nullptr, kGoodK), DILATTN_ERROR_NULL_POINTER,
              "argument 'cu_seqlens_q' is NULL", "num_seqs = 2");
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, 2, kGoodQ, nullptr), DILATTN_ERROR_NULL_POINTER,
              "argument 'cu_seqlens_k' is NULL");
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, 2, starts_at_one, kGoodK),
              DILATTN_ERROR_INVALID_VALUE, "cu_seqlens_q[0] = 1: the first offset must be 0");
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, 2, kGoodQ, decreasing), DILATTN_ERROR_INVALID_VALUE,
              "cu_seqlens_k[2] = 1 is below cu_seqlens_k[1] = 2");
  check_forward(desc.d, 2, 2);  // still unpacked
  // A valid packing survives a bad call whole: neither array changes.
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 2, kGoodQ, kGoodK));
  check_forward(desc.d, 1, 2.25);
  CHECK_ERROR(dilattn_desc_set_varlen(desc.d, 2, kGoodQ, decreasing), DILATTN_ERROR_INVALID_VALUE,
              "cu_seqlens_k[2] = 1");
  check_forward(desc.d, 1, 2.25);
  // num_seqs = 0 turns it off, with NULL arrays.
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 0, nullptr, nullptr));
  check_forward(desc.d, 2, 2);
}

void shape_checked_at_plan_creation() {
  FreshDesc desc;
  const int64_t cu[3] = {0, 1, 4}, cu_k[3] = {0, 2, 4};
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 2, cu, cu));
  {
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 2, 4, 4, 2, 1, 3),
                DILATTN_ERROR_SHAPE_MISMATCH, "batch = 2", "needs batch = 1");
    CHECK(slot.untouched());
  }
  {
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 5, 4, 2, 1, 3),
                DILATTN_ERROR_SHAPE_MISMATCH,
                "cu_seqlens_q[2] = 4: the last offset must equal seqlen_q = 5");
    CHECK(slot.untouched());
  }
  {
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 3, 2, 1, 3),
                DILATTN_ERROR_SHAPE_MISMATCH,
                "cu_seqlens_k[2] = 4: the last offset must equal seqlen_k = 3");
    CHECK(slot.untouched());
  }
  // Dilated: every sequence square.
  const int64_t w[1] = {2}, r[1] = {1};
  CHECK_OK(dilattn_desc_set_dilated(desc.d, 1, w, r, DILATTN_HEADS_MOD));
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 2, cu, cu_k));
  {
    PlanSlot slot;
    CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 3),
                DILATTN_ERROR_SEQLEN_MISMATCH, "packed sequence 0",
                "seqlen_q == seqlen_k per sequence, got 1 and 2");
    CHECK(slot.untouched());
  }
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 2, cu, cu));
  dilattn_plan plan = nullptr;
  CHECK_OK(errtest::create_plan(&plan, desc, 1, 4, 4, 2, 1, 3));
  dilattn_plan_destroy(plan);
}

void alibi_slopes_per_sequence() {
  FreshDesc desc;
  const int64_t cu[4] = {0, 1, 1, 4};  // 3 sequences, H = 2
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 3, cu, cu));
  const double slopes[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  for (int64_t count : {2, 6}) {
    CHECK_OK(dilattn_desc_set_alibi(desc.d, slopes, count));
    dilattn_plan plan = nullptr;
    CHECK_OK(errtest::create_plan(&plan, desc, 1, 4, 4, 2, 1, 3));
    dilattn_plan_destroy(plan);
  }
  CHECK_OK(dilattn_desc_set_alibi(desc.d, slopes, 4));
  PlanSlot slot;
  CHECK_ERROR(errtest::create_plan(&slot.plan, desc, 1, 4, 4, 2, 1, 3),
              DILATTN_ERROR_INVALID_VALUE, "count = 4", "heads_q = 2",
              "num_seqs * heads_q = 6");
  CHECK(slot.untouched());
}

void score_count_per_sequence() {
  // Causal, cu_q = {0, 2, 5}, cu_k = {0, 3, 4}. Sequence 0 (Nq 2, Nk 3, d 1): rows see 2 and 3
  // keys. Sequence 1 (Nq 3, Nk 1, d -2): rows 0 and 1 see nothing, row 2 key 0. 6 per head,
  // 12 for H = 2; unpacked (Nq 5, Nk 4, d -1) it would be 0+1+2+3+4 = 10 per head.
  FreshDesc desc;
  const int64_t cu_q[3] = {0, 2, 5}, cu_k[3] = {0, 3, 4};
  CHECK_OK(dilattn_desc_set_causal(desc.d, 1));
  CHECK_OK(dilattn_desc_set_varlen(desc.d, 2, cu_q, cu_k));
  dilattn_plan plan = nullptr;
  CHECK_OK(errtest::create_plan(&plan, desc, 1, 5, 4, 2, 1, 3));
  int64_t terms = -1;
  CHECK_OK(dilattn_plan_score_count(plan, &terms));
  CHECK(terms == 12);
  dilattn_plan_destroy(plan);
}

}  // namespace

int main() {
  bad_offsets_refused_description_unchanged();
  shape_checked_at_plan_creation();
  alibi_slopes_per_sequence();
  score_count_per_sequence();
  return harness::finish("varlen_arguments_refused");
}
