// problem.h - what a plan holds: the validated attention problem every backend receives.
//
// Built once by dilattn_plan_create (plan.cpp) after every SPEC 7 check, so backends may trust
// it: H % Hkv == 0, branches valid, scale finite, sizes without overflow, mask valid.
#ifndef DILATTN_PROBLEM_H
#define DILATTN_PROBLEM_H

#include <cstdint>
#include <memory>
#include <vector>

#include "dilattn.h"
#include "index_rules.h"

namespace dilattn {

struct Branch {
  int64_t w;  // segment length as given (clip with clipped_segment(w, N))
  int64_t r;  // dilation, 1 <= r <= w
};

// A validated BSR mask (SPEC 4), indices widened to int64. One mask (num_heads == 1) or one
// per head; head_ptr[h] is the offset of head h's col_idx, row_ptr of head h starts at
// row_ptr[h * (I + 1)] and counts from 0.
struct BsrMask {
  int64_t Nq = 0, Nk = 0, bq = 0, bk = 0, num_heads = 1, I = 0, J = 0;
  std::vector<int64_t> row_ptr, col_idx, head_ptr;

  // Row block ib of head h: key blocks cols[0 .. count).
  const int64_t* row_cols(int64_t h, int64_t ib, int64_t* count) const {
    const int64_t hm = num_heads == 1 ? 0 : h;
    const int64_t* rp = row_ptr.data() + hm * (I + 1);
    *count = rp[ib + 1] - rp[ib];
    return col_idx.data() + head_ptr[hm] + rp[ib];
  }
  int64_t nnz(int64_t h) const {
    const int64_t hm = num_heads == 1 ? 0 : h;
    return head_ptr[hm + 1] - head_ptr[hm];
  }
};

// What a backend keeps per plan (device copies of the mask, ...): made at plan time by
// Backend::prepare, shared by every copy of the Problem, used from several threads at once
// (so const, or synchronised inside).
struct PlanState {
  virtual ~PlanState() = default;
};

struct Problem {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, Hkv = 0, D = 0;
  dilattn_dtype dtype = DILATTN_F32;  // of Q, K, V, O (and dO, dQ, dK, dV)
  dilattn_kind kind = DILATTN_KIND_DENSE;
  std::vector<Branch> branches;        // dilated only
  int32_t head_mode = kHeadsMod;       // dilated only
  std::shared_ptr<const BsrMask> mask; // block-sparse only
  bool causal = false;
  double scale = 0;                    // resolved: explicit or 1/sqrt(D)
  double dropout_p = 0;                // SPEC 11: in [0, 1); 0 is no dropout
  int32_t num_threads = 0;             // resolved for the cpu backend, >= 1
  dilattn_backend backend = DILATTN_BACKEND_REF;  // resolved, never AUTO
  dilattn_pool pool = nullptr;         // workspace pool, NULL = default
  std::shared_ptr<PlanState> backend_state;  // Backend::prepare's, or null

  int64_t num_branches() const { return static_cast<int64_t>(branches.size()); }
};

}  // namespace dilattn

#endif  // DILATTN_PROBLEM_H
