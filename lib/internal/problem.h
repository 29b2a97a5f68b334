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

// SPEC 10.2: where one query row's sequence lies. For a plan without a packed batch it is the
// batch element itself (seq = b, offsets 0, lengths Nq and Nk); in a packed batch, the sequence
// that owns the row. Index rules see a row as i - q0 of a problem (nq, nk) and its keys as
// j - k0.
struct SequenceFrame {
  int64_t seq = 0;      // batch element, or the sequence of a packed batch (ALiBi, dropout)
  int64_t q0 = 0, k0 = 0;
  int64_t nq = 0, nk = 0;
};

// SPEC 5: where a ring sub-problem's rows and keys lie in the whole problem. Row t of the
// sub-problem is position q_first + q_step * t of the whole sequence, key t position
// k_first + k_step * t; its heads are heads [h0, h0 + sub H) of the whole problem's H. A placed
// problem is dense or block-sparse, never packed. Its causal rule, window, ALiBi distances,
// ALiBi slopes and dropout draws are those of the whole problem (Nq, Nk, H) at these positions
// and heads (placement_rules.h), so a backend that runs it gives the rows of the whole
// problem's result restricted to these keys.
struct Placement {
  int64_t q_first = 0, q_step = 1, k_first = 0, k_step = 1;
  int64_t Nq = 0, Nk = 0;  // the whole problem's lengths
  int64_t h0 = 0, H = 0;   // the whole problem's first head of this one, and its head count
};

// What a backend keeps per plan (device copies of the mask, ...): made at plan time by
// Backend::prepare, shared by every copy of the Problem, used from several threads at once
// (so const, or synchronised inside).
struct PlanState {
  virtual ~PlanState() = default;
};

// The options of SPEC 10 (variants) and SPEC 11 (dropout) a problem may use; each backend states
// the set it runs (Backend::runs_options), and backend_table.cpp refuses the rest by name.
enum ProblemOption : uint32_t {
  kOptionWindow = 1u << 0,
  kOptionSoftcap = 1u << 1,
  kOptionAlibi = 1u << 2,
  kOptionPacked = 1u << 3,
  kOptionSinks = 1u << 4,
  kOptionDropout = 1u << 5,
  kOptionsAll = (1u << 6) - 1,  // the options of SPEC 10 and 11
  // SPEC 5.5: a ring sub-problem placed in the whole problem (Problem::placed), which the ring
  // makes for a window, ALiBi or dropout; never set by a plan. Outside kOptionsAll, so that a
  // backend runs placed sub-problems only where its entry names this bit itself.
  kOptionPlaced = 1u << 6,
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
  // SPEC 10.1 variants (a backend that does not run one refuses it: Backend::runs_options). Window bounds are -1 (unbounded) or >= 0; softcap 0 is off; alibi_slopes is empty
  // (off), H slopes or B * H slopes ([B][H]), the count checked by plan.cpp.
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;
  // SPEC 10.2: a packed batch, num_seqs + 1 offsets each (B == 1, the last offsets Nq and Nk,
  // checked by plan.cpp), or both empty.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  // SPEC 10.3: every call carries H sink logits (dispatch.cpp checks them).
  bool sinks = false;
  // SPEC 5: a ring's sub-problem at positions of the whole problem (ring_pairs.cpp), or not.
  bool placed = false;
  Placement place;
  // SPEC 10.2: a packed batch's sequence that a backend runs as a problem of its own (cpu:
  // PackedSequences) keeps its index in the batch, so that its rows' frames name it and its
  // dropout draws (SPEC 11.1) are those of the packed problem. 0 for every other problem.
  int64_t packed_sequence = 0;
  // SPEC 10.2 with SPEC 4: that sequence's first row and first key in the batch. A block-sparse
  // mask indexes the batch, so its row i is the mask's row packed_q0 + i (key j: packed_k0 + j).
  int64_t packed_q0 = 0, packed_k0 = 0;

  int64_t num_branches() const { return static_cast<int64_t>(branches.size()); }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // The slope m of (b, h) (SPEC 10.1), 0 without ALiBi.
  // A placed sub-problem reads the whole problem's slope of its head h0 + h.
  double alibi_slope(int64_t b, int64_t h) const {
    if (alibi_slopes.empty()) return 0;
    const int64_t n = static_cast<int64_t>(alibi_slopes.size());
    const int64_t heads = placed ? place.H : H, head = placed ? place.h0 + h : h;
    return alibi_slopes[static_cast<size_t>(n == heads ? head : b * heads + head)];
  }
  bool is_packed() const { return !cu_seqlens_q.empty(); }
  // SPEC 10.2: sequence s of a packed batch as a problem of its own: B = 1, the sequence's Nq
  // and Nk, no offsets, packed_sequence = s, so that its frames and dropout draws are those of
  // the packed problem, and its first row and key (a block-sparse mask stays the batch's). The ALiBi slopes stay the batch's (H or [n][H]): a frame's seq is s, so
  // alibi_slope(frame seq, h) is sequence s's. Its tensors are the rows [cu_q[s], cu_q[s+1])
  // and [cu_k[s], cu_k[s+1]) of the batch's.
  Problem sequence_problem(int64_t s) const {
    const size_t z = static_cast<size_t>(s);
    Problem one = *this;
    one.cu_seqlens_q.clear();
    one.cu_seqlens_k.clear();
    one.packed_sequence = s;
    one.packed_q0 = cu_seqlens_q[z];
    one.packed_k0 = cu_seqlens_k[z];
    one.Nq = cu_seqlens_q[z + 1] - cu_seqlens_q[z];
    one.Nk = cu_seqlens_k[z + 1] - cu_seqlens_k[z];
    return one;
  }
  // Sequences per batch element: 1, or the number of packed sequences (SPEC 10.2).
  int64_t num_seqs() const {
    return is_packed() ? static_cast<int64_t>(cu_seqlens_q.size()) - 1 : 1;
  }
  // The sequence of query row i of batch element b (SPEC 10.2). In a packed batch, the last
  // sequence starting at or before i: empty sequences before it own no row.
  // A placed sub-problem's frame is the whole problem's (SPEC 5): use row_position and
  // key_position for its positions.
  SequenceFrame frame_of_row(int64_t b, int64_t i) const {
    if (placed) return SequenceFrame{b, 0, 0, place.Nq, place.Nk};
    if (!is_packed()) return SequenceFrame{b + packed_sequence, 0, 0, Nq, Nk};
    int64_t lo = 0, hi = num_seqs() - 1;  // cu_q[lo] <= i < cu_q[hi + 1]
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (cu_seqlens_q[static_cast<size_t>(mid)] <= i) lo = mid; else hi = mid - 1;
    }
    const size_t s = static_cast<size_t>(lo);
    return SequenceFrame{lo, cu_seqlens_q[s], cu_seqlens_k[s], cu_seqlens_q[s + 1] - cu_seqlens_q[s],
                         cu_seqlens_k[s + 1] - cu_seqlens_k[s]};
  }
  // The positions the window, ALiBi and dropout see for row i and key j of a row in frame f:
  // in the row's sequence (SPEC 10.2), or in the whole problem of a placed one (SPEC 5).
  int64_t row_position(const SequenceFrame& f, int64_t i) const {
    return placed ? place.q_first + place.q_step * i : i - f.q0;
  }
  int64_t key_position(const SequenceFrame& f, int64_t j) const {
    return placed ? place.k_first + place.k_step * j : j - f.k0;
  }
  // The head and head count a dropout draw takes (SPEC 11.1): the whole problem's.
  int64_t draw_head(int64_t h) const { return placed ? place.h0 + h : h; }
  int64_t draw_heads() const { return placed ? place.H : H; }
  // The SPEC 10 and 11 options the problem uses, as a set of ProblemOption bits.
  uint32_t options_used() const {
    uint32_t used = 0;
    if (has_window()) used |= kOptionWindow;
    if (softcap != 0) used |= kOptionSoftcap;
    if (!alibi_slopes.empty()) used |= kOptionAlibi;
    if (is_packed()) used |= kOptionPacked;
    if (sinks) used |= kOptionSinks;
    if (dropout_p > 0) used |= kOptionDropout;
    if (placed) used |= kOptionPlaced;
    return used;
  }
  // The first option of `used` outside `supported`, as a refusal names it ("a window"), or null.
  static const char* first_option_outside(uint32_t used, uint32_t supported) {
    const uint32_t missing = used & ~supported;
    if (missing & kOptionWindow) return "a window";
    if (missing & kOptionSoftcap) return "a softcap";
    if (missing & kOptionAlibi) return "ALiBi";
    if (missing & kOptionPacked) return "a packed batch (varlen)";
    if (missing & kOptionSinks) return "sinks";
    if (missing & kOptionDropout) return "dropout";
    if (missing & kOptionPlaced) return "ring sub-problems at whole-sequence positions";
    return nullptr;
  }
};

}  // namespace dilattn

#endif  // DILATTN_PROBLEM_H
