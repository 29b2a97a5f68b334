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
  // SPEC 10.1 variants (only the ref backend computes them; backend_table.cpp refuses the
  // others). Window bounds are -1 (unbounded) or >= 0; softcap 0 is off; alibi_slopes is empty
  // (off), H slopes or B * H slopes ([B][H]), the count checked by plan.cpp.
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;

  int64_t num_branches() const { return static_cast<int64_t>(branches.size()); }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // The slope m of (b, h) (SPEC 10.1), 0 without ALiBi.
  double alibi_slope(int64_t b, int64_t h) const {
    if (alibi_slopes.empty()) return 0;
    const int64_t n = static_cast<int64_t>(alibi_slopes.size());
    return alibi_slopes[static_cast<size_t>(n == H ? h : b * H + h)];
  }
  // The first SPEC 10.1 option the problem uses, as a refusal names it ("a window"), or null.
  const char* first_variant() const {
    if (has_window()) return "a window";
    if (softcap != 0) return "a softcap";
    if (!alibi_slopes.empty()) return "ALiBi";
    return nullptr;
  }
};

}  // namespace dilattn

#endif  // DILATTN_PROBLEM_H
