// attention_case.h - one attention problem as the tests describe it, and its description and
// plan made through the public C ABI only (lib/dilattn.h, lib/dilattn_mask.h).
//
// An AttentionCase holds the shape (SPEC 1: B, Nq, Nk, H, Hkv, D), the kind (dense, dilated
// with its branches (w_b, r_b) and head mode (SPEC 3), block-sparse with its mask (SPEC 4)),
// causal, scale (0: the default 1/sqrt(D)), the dtype, and the layouts through which the backend
// under test sees its inputs and outputs (the reference always gets contiguous views, so a
// stride bug cannot hide in both). Desc and Plan own what they create; a failed call returns
// its status and leaves dilattn_last_error() readable until the object is destroyed.
#ifndef DILATTN_TESTS_ATTENTION_CASE_H
#define DILATTN_TESTS_ATTENTION_CASE_H

#include <cstdint>
#include <string>
#include <vector>

#include "dilattn.h"
#include "tensor.h"

namespace harness {

// The block-sparse mask: explicit BSR arrays when row_ptr is not empty, else a pattern of
// dilattn_mask_from_pattern when pattern is not empty, else dilattn_mask_random.
struct MaskSpec {
  int64_t bq = 64, bk = 64, heads = 1;
  std::vector<int64_t> row_ptr, col_idx, head_ptr;  // int64 BSR, head_ptr when heads > 1
  std::string pattern;
  double density = 0.5;
  uint64_t seed = 12345;
  // A random mask of a causal case leaves out the blocks the causal rule empties anyway
  // (dilattn_mask_random's causal argument); false keeps them, for the causal rule to remove.
  bool random_drops_causal_blocks = true;
};

struct AttentionCase {
  std::string name;
  int64_t B = 1, Nq = 1, Nk = 1, H = 1, Hkv = 1, D = 1;
  dilattn_kind kind = DILATTN_KIND_DENSE;
  std::vector<int64_t> segments, dilations;  // dilated: branch b is (segments[b], dilations[b])
  dilattn_head_mode head_mode = DILATTN_HEADS_MOD;
  MaskSpec mask;  // block-sparse
  bool causal = false;
  double scale = 0;  // 0: the default 1/sqrt(D)
  double dropout_p = 0;  // SPEC 11; > 0 needs dilattn_forward_ex / dilattn_backward_ex
  dilattn_dtype dtype = DILATTN_F32;
  Layout input_layout, output_layout;  // as the backend under test sees them
  // SPEC 10.1 variants (ref and cpu): window bounds (-1 unbounded), softcap (0 off), ALiBi slopes
  // (empty: off; H or B * H of them).
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;
  // SPEC 10.2 packed batch (ref and cpu): num_seqs + 1 offsets each, or both empty (off). B = 1.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  // SPEC 10.3 (ref and cpu): the plan has sinks; their values go with each call (_ex).
  bool sinks = false;

  // Tensors of this case's shapes: Q and O [B, Nq, H, D], K and V [B, Nk, Hkv, D],
  // LSE [B, H, Nq, 1].
  Tensor q_like(dilattn_dtype t, Layout l = {}) const { return Tensor(t, B, Nq, H, D, l); }
  Tensor kv_like(dilattn_dtype t, Layout l = {}) const { return Tensor(t, B, Nk, Hkv, D, l); }
  Tensor lse_like(dilattn_dtype t) const { return Tensor(t, B, H, Nq, 1); }
};

// The case's mask.
inline dilattn_status make_mask(const AttentionCase& c, dilattn_mask* mask) {
  const MaskSpec& m = c.mask;
  if (!m.row_ptr.empty()) {
    dilattn_bsr_view v{};
    v.struct_size = sizeof v;
    v.seqlen_q = c.Nq;
    v.seqlen_k = c.Nk;
    v.block_q = m.bq;
    v.block_k = m.bk;
    v.num_heads = m.heads;
    v.index_type = DILATTN_INDEX_INT64;
    v.row_ptr = m.row_ptr.data();
    v.col_idx = m.col_idx.data();
    v.head_ptr = m.heads > 1 ? m.head_ptr.data() : nullptr;
    return dilattn_mask_create(mask, &v);
  }
  if (!m.pattern.empty())
    return dilattn_mask_from_pattern(mask, m.pattern.c_str(), c.Nq, c.Nk, m.bq, m.bk);
  return dilattn_mask_random(mask, c.Nq, c.Nk, m.bq, m.bk, m.heads, m.density, m.seed,
                             c.causal && m.random_drops_causal_blocks ? 1 : 0);
}

// A description of the case (and its mask), destroyed with this object.
class Desc {
 public:
  Desc() = default;
  ~Desc() {
    dilattn_desc_destroy(desc_);
    dilattn_mask_destroy(mask_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  // num_threads 0: the library's default. Returns the first failing call's status.
  dilattn_status create(const AttentionCase& c, int32_t num_threads = 0) {
    dilattn_status s = dilattn_desc_create(&desc_);
    if (s != DILATTN_SUCCESS) return s;
    if (c.kind == DILATTN_KIND_DILATED) {
      s = dilattn_desc_set_dilated(desc_, static_cast<int32_t>(c.segments.size()),
                                   c.segments.data(), c.dilations.data(), c.head_mode);
    } else if (c.kind == DILATTN_KIND_BLOCK_SPARSE) {
      s = make_mask(c, &mask_);
      if (s == DILATTN_SUCCESS) s = dilattn_desc_set_block_sparse(desc_, mask_);
    }
    if (s == DILATTN_SUCCESS) s = dilattn_desc_set_causal(desc_, c.causal ? 1 : 0);
    if (s == DILATTN_SUCCESS && c.scale != 0) s = dilattn_desc_set_scale(desc_, c.scale);
    if (s == DILATTN_SUCCESS && c.dropout_p != 0) s = dilattn_desc_set_dropout(desc_, c.dropout_p);
    if (s == DILATTN_SUCCESS && (c.window_left != -1 || c.window_right != -1))
      s = dilattn_desc_set_window(desc_, c.window_left, c.window_right);
    if (s == DILATTN_SUCCESS && c.softcap != 0) s = dilattn_desc_set_softcap(desc_, c.softcap);
    if (s == DILATTN_SUCCESS && !c.alibi_slopes.empty())
      s = dilattn_desc_set_alibi(desc_, c.alibi_slopes.data(),
                                 static_cast<int64_t>(c.alibi_slopes.size()));
    if (s == DILATTN_SUCCESS && !c.cu_seqlens_q.empty())
      s = dilattn_desc_set_varlen(desc_, static_cast<int64_t>(c.cu_seqlens_q.size()) - 1,
                                  c.cu_seqlens_q.data(), c.cu_seqlens_k.data());
    if (s == DILATTN_SUCCESS && c.sinks) s = dilattn_desc_set_sinks(desc_, 1);
    if (s == DILATTN_SUCCESS) s = dilattn_desc_set_num_threads(desc_, num_threads);
    return s;
  }
  dilattn_desc get() const { return desc_; }

 private:
  dilattn_desc desc_ = nullptr;
  dilattn_mask mask_ = nullptr;
};

inline dilattn_shape shape_of(const AttentionCase& c) {
  return dilattn_shape_make(c.B, c.Nq, c.Nk, c.H, c.Hkv, c.D);
}

// A plan of the case for one backend in the case's dtype, destroyed with this object.
class Plan {
 public:
  Plan() = default;
  ~Plan() { dilattn_plan_destroy(plan_); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  dilattn_status create(const AttentionCase& c, dilattn_backend backend, int32_t num_threads = 0) {
    const dilattn_status s = desc_.create(c, num_threads);
    if (s != DILATTN_SUCCESS) return s;
    const dilattn_shape shape = shape_of(c);
    return dilattn_plan_create(&plan_, desc_.get(), &shape, c.dtype, backend);
  }
  dilattn_plan get() const { return plan_; }

 private:
  Desc desc_;
  dilattn_plan plan_ = nullptr;
};

}  // namespace harness

#endif  // DILATTN_TESTS_ATTENTION_CASE_H
