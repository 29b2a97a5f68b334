// desc.cpp - the attention description (dilattn_desc_*): what to compute, checked as it is set
// (SPEC 3 and 7: w >= 1, 1 <= r <= w, at least one branch, finite scale; SPEC 11.2: dropout
// p in [0, 1)).
#include <cmath>
#include <new>

#include "abi_enum.h"
#include "errors.h"
#include "handles.h"

using dilattn::set_error;

#define CHECK_DESC(d)                                                     \
  do {                                                                    \
    dilattn_status s_ = dilattn::check_handle(d, "desc");                 \
    if (s_ != DILATTN_SUCCESS) return s_;                                 \
  } while (0)

extern "C" dilattn_status dilattn_desc_create(dilattn_desc* desc) {
  DILATTN_ABI_BEGIN
  if (desc == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'desc' is NULL");
  *desc = new dilattn_desc_s();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_destroy(dilattn_desc desc) {
  DILATTN_ABI_BEGIN
  if (desc == nullptr) return DILATTN_SUCCESS;  // like free(NULL)
  if (dilattn_status s = dilattn::release_handle(desc, "desc")) return s;
  delete desc;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_dense(dilattn_desc desc) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  desc->kind = DILATTN_KIND_DENSE;
  desc->branches.clear();
  desc->mask.reset();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_dilated(dilattn_desc desc, int32_t num_branches,
                                                   const int64_t* segments,
                                                   const int64_t* dilations,
                                                   dilattn_head_mode head_mode) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (num_branches < 1)
    return set_error(DILATTN_ERROR_NO_BRANCHES, "argument 'num_branches' = %d: need at least one",
                     static_cast<int>(num_branches));
  if (segments == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'segments' is NULL");
  if (dilations == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'dilations' is NULL");
  const int32_t mode = dilattn::enum_value(head_mode);  // any int may arrive from C
  if (mode != DILATTN_HEADS_MOD && mode != DILATTN_HEADS_BLOCK && mode != DILATTN_HEADS_GROUPS)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'head_mode' = %d is not a head mode",
                     static_cast<int>(mode));
  std::vector<dilattn::Branch> branches;
  for (int32_t b = 0; b < num_branches; ++b) {
    const int64_t w = segments[b], r = dilations[b];
    if (w < 1)
      return set_error(DILATTN_ERROR_BAD_SEGMENT, "segments[%d] = %lld: a segment needs w >= 1",
                       static_cast<int>(b), static_cast<long long>(w));
    if (r < 1 || r > w)
      return set_error(DILATTN_ERROR_BAD_DILATION,
                       "dilations[%d] = %lld: need 1 <= r <= w = %lld", static_cast<int>(b),
                       static_cast<long long>(r), static_cast<long long>(w));
    branches.push_back({w, r});
  }
  desc->kind = DILATTN_KIND_DILATED;
  desc->branches = std::move(branches);
  desc->head_mode = mode;
  desc->mask.reset();
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_block_sparse(dilattn_desc desc, dilattn_mask mask) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  dilattn_status s = dilattn::check_handle(mask, "mask");
  if (s != DILATTN_SUCCESS) return s;
  desc->kind = DILATTN_KIND_BLOCK_SPARSE;
  desc->branches.clear();
  desc->mask = mask->mask;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_causal(dilattn_desc desc, int32_t causal) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  desc->causal = causal != 0;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_scale(dilattn_desc desc, double scale) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (!std::isfinite(scale))
    return set_error(DILATTN_ERROR_BAD_SCALE, "argument 'scale' = %g: must be finite", scale);
  desc->has_scale = true;
  desc->scale = scale;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_num_threads(dilattn_desc desc, int32_t num_threads) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (num_threads < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'num_threads' = %d: must be >= 0",
                     static_cast<int>(num_threads));
  desc->num_threads = num_threads;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_pool(dilattn_desc desc, dilattn_pool pool) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  desc->pool = pool;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_dropout(dilattn_desc desc, double p) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (!(p >= 0.0 && p < 1.0))  // NaN fails both comparisons
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'p' = %g: dropout needs 0 <= p < 1",
                     p);
  desc->dropout_p = p;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

// SPEC 10.1: -1 is unbounded; anything below is a mistake, not a bigger "unbounded".
extern "C" dilattn_status dilattn_desc_set_window(dilattn_desc desc, int64_t left, int64_t right) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (left < -1)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'left' = %lld: a window bound is >= 0, or -1 for unbounded",
                     static_cast<long long>(left));
  if (right < -1)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'right' = %lld: a window bound is >= 0, or -1 for unbounded",
                     static_cast<long long>(right));
  desc->window_left = left;
  desc->window_right = right;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_desc_set_softcap(dilattn_desc desc, double softcap) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (!std::isfinite(softcap) || softcap < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'softcap' = %g: must be finite and >= 0 (0 turns it off)", softcap);
  desc->softcap = softcap;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

// The slopes are copied; their count is checked against H and B * H by dilattn_plan_create,
// which is the first place that knows the shape.
extern "C" dilattn_status dilattn_desc_set_alibi(dilattn_desc desc, const double* slopes,
                                                 int64_t count) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (count < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'count' = %lld: must be >= 0",
                     static_cast<long long>(count));
  if (count > 0 && slopes == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'slopes' is NULL with count = %lld",
                     static_cast<long long>(count));
  for (int64_t x = 0; x < count; ++x)
    if (!std::isfinite(slopes[x]))
      return set_error(DILATTN_ERROR_INVALID_VALUE, "slopes[%lld] = %g: must be finite",
                       static_cast<long long>(x), slopes[x]);
  desc->alibi_slopes.assign(slopes, slopes + count);
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

namespace {

// SPEC 10.2: an offsets array starts at 0 and never decreases; its end is checked against the
// shape by dilattn_plan_create.
dilattn_status check_offsets(const int64_t* cu, int64_t num_seqs, const char* name) {
  if (cu == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s' is NULL with num_seqs = %lld",
                     name, static_cast<long long>(num_seqs));
  if (cu[0] != 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "%s[0] = %lld: the first offset must be 0",
                     name, static_cast<long long>(cu[0]));
  for (int64_t b = 1; b <= num_seqs; ++b)
    if (cu[b] < cu[b - 1])
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "%s[%lld] = %lld is below %s[%lld] = %lld: offsets never decrease", name,
                       static_cast<long long>(b), static_cast<long long>(cu[b]), name,
                       static_cast<long long>(b - 1), static_cast<long long>(cu[b - 1]));
  return DILATTN_SUCCESS;
}

}  // namespace

extern "C" dilattn_status dilattn_desc_set_varlen(dilattn_desc desc, int64_t num_seqs,
                                                  const int64_t* cu_seqlens_q,
                                                  const int64_t* cu_seqlens_k) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (num_seqs < 0)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'num_seqs' = %lld: must be >= 0 (0 turns packing off)",
                     static_cast<long long>(num_seqs));
  if (num_seqs == 0) {
    desc->cu_seqlens_q.clear();
    desc->cu_seqlens_k.clear();
    return DILATTN_SUCCESS;
  }
  dilattn_status s = check_offsets(cu_seqlens_q, num_seqs, "cu_seqlens_q");
  if (s != DILATTN_SUCCESS) return s;
  if ((s = check_offsets(cu_seqlens_k, num_seqs, "cu_seqlens_k")) != DILATTN_SUCCESS) return s;
  desc->cu_seqlens_q.assign(cu_seqlens_q, cu_seqlens_q + num_seqs + 1);
  desc->cu_seqlens_k.assign(cu_seqlens_k, cu_seqlens_k + num_seqs + 1);
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

// SPEC 10.3: the plan has sinks; their values come with each call (dilattn_call_options).
extern "C" dilattn_status dilattn_desc_set_sinks(dilattn_desc desc, int32_t enabled) {
  DILATTN_ABI_BEGIN
  CHECK_DESC(desc);
  if (enabled != 0 && enabled != 1)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'enabled' = %d: must be 0 or 1",
                     static_cast<int>(enabled));
  desc->sinks = enabled == 1;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
