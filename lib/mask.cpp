// mask.cpp - block-sparse masks (SPEC 4): validating a caller's BSR arrays into a dilattn_mask.
//
// Validation names the first bad entry as (head, row block, position) so a user can find it.
// Checked by tests/sparse/test_sparse_masks.py (each bad-entry kind, int32 and int64) and
// tests/sparse/test_sparse_masks.cpp.
#include <memory>

#include "abi_enum.h"
#include "errors.h"
#include "handles.h"

using dilattn::set_error;

namespace {

int64_t read_index(const void* base, dilattn_index_type t, int64_t i) {
  return t == DILATTN_INDEX_INT32 ? static_cast<const int32_t*>(base)[i]
                                  : static_cast<const int64_t*>(base)[i];
}

#define LL(x) static_cast<long long>(x)

dilattn_status build_mask(const dilattn_bsr_view& v, dilattn::BsrMask* m) {
  const int32_t index_type = dilattn::enum_value(v.index_type);  // any int may arrive from C
  if (index_type != DILATTN_INDEX_INT32 && index_type != DILATTN_INDEX_INT64)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "mask index_type = %d is not an index type",
                     static_cast<int>(index_type));
  const struct { const char* name; int64_t value; } dims[] = {
      {"seqlen_q", v.seqlen_q}, {"seqlen_k", v.seqlen_k}, {"block_q", v.block_q},
      {"block_k", v.block_k}, {"num_heads", v.num_heads}};
  for (const auto& d : dims)
    if (d.value < 1)
      return set_error(DILATTN_ERROR_BAD_MASK, "mask %s = %lld: must be >= 1", d.name, LL(d.value));
  if (v.row_ptr == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "mask row_ptr is NULL");
  if (v.num_heads > 1 && v.head_ptr == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "mask head_ptr is NULL with num_heads = %lld",
                     LL(v.num_heads));
  m->Nq = v.seqlen_q; m->Nk = v.seqlen_k; m->bq = v.block_q; m->bk = v.block_k;
  m->num_heads = v.num_heads;
  m->I = dilattn::ceil_div(v.seqlen_q, v.block_q);
  m->J = dilattn::ceil_div(v.seqlen_k, v.block_k);
  const int64_t I = m->I, J = m->J, heads = v.num_heads;
  if (I > (int64_t{1} << 40) / heads)
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "mask with %lld row blocks x %lld heads is too large",
                     LL(I), LL(heads));
  m->row_ptr.resize(static_cast<size_t>(heads * (I + 1)));
  m->head_ptr.resize(static_cast<size_t>(heads + 1));
  m->head_ptr[0] = 0;
  for (int64_t h = 0; h < heads; ++h) {
    if (heads > 1) {
      const int64_t h0 = read_index(v.head_ptr, v.index_type, h);
      const int64_t h1 = read_index(v.head_ptr, v.index_type, h + 1);
      if (h == 0 && h0 != 0)
        return set_error(DILATTN_ERROR_BAD_MASK, "mask head_ptr[0] = %lld: must be 0", LL(h0));
      if (h1 < h0)
        return set_error(DILATTN_ERROR_BAD_MASK, "mask head_ptr[%lld] = %lld < head_ptr[%lld] = %lld",
                         LL(h + 1), LL(h1), LL(h), LL(h0));
    }
    for (int64_t ib = 0; ib <= I; ++ib) {
      const int64_t x = read_index(v.row_ptr, v.index_type, h * (I + 1) + ib);
      if (ib == 0 && x != 0)
        return set_error(DILATTN_ERROR_BAD_MASK, "mask head %lld: row_ptr[0] = %lld, must be 0",
                         LL(h), LL(x));
      if (ib > 0 && x < m->row_ptr[h * (I + 1) + ib - 1])
        return set_error(DILATTN_ERROR_BAD_MASK,
                         "mask head %lld, row block %lld: row_ptr decreases (%lld after %lld)",
                         LL(h), LL(ib - 1), LL(x), LL(m->row_ptr[h * (I + 1) + ib - 1]));
      if (ib > 0 && x - m->row_ptr[h * (I + 1) + ib - 1] > J)
        return set_error(DILATTN_ERROR_BAD_MASK,
                         "mask head %lld, row block %lld: %lld entries, more than J = %lld blocks",
                         LL(h), LL(ib - 1), LL(x - m->row_ptr[h * (I + 1) + ib - 1]), LL(J));
      m->row_ptr[h * (I + 1) + ib] = x;
    }
    const int64_t nnz = m->row_ptr[h * (I + 1) + I];
    if (heads > 1) {
      const int64_t span = read_index(v.head_ptr, v.index_type, h + 1) -
                           read_index(v.head_ptr, v.index_type, h);
      if (span != nnz)
        return set_error(DILATTN_ERROR_BAD_MASK,
                         "mask head %lld: head_ptr gives %lld entries, row_ptr[%lld] = %lld",
                         LL(h), LL(span), LL(I), LL(nnz));
    }
    m->head_ptr[h + 1] = m->head_ptr[h] + nnz;
  }
  const int64_t total = m->head_ptr[heads];
  if (total > 0 && v.col_idx == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "mask col_idx is NULL with %lld entries", LL(total));
  m->col_idx.resize(static_cast<size_t>(total));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t ib = 0; ib < I; ++ib) {
      const int64_t begin = m->row_ptr[h * (I + 1) + ib], end = m->row_ptr[h * (I + 1) + ib + 1];
      for (int64_t e = begin; e < end; ++e) {
        const int64_t at = m->head_ptr[h] + e;
        const int64_t c = read_index(v.col_idx, v.index_type, at);
        if (c < 0 || c >= J)
          return set_error(DILATTN_ERROR_BAD_MASK,
                           "mask head %lld, row block %lld, position %lld: col_idx = %lld outside [0, %lld)",
                           LL(h), LL(ib), LL(e - begin), LL(c), LL(J));
        if (e > begin && c <= m->col_idx[at - 1])
          return set_error(DILATTN_ERROR_BAD_MASK,
                           "mask head %lld, row block %lld, position %lld: col_idx = %lld %s previous %lld",
                           LL(h), LL(ib), LL(e - begin), LL(c),
                           c == m->col_idx[at - 1] ? "duplicates" : "is below", LL(m->col_idx[at - 1]));
        m->col_idx[at] = c;
      }
    }
  return DILATTN_SUCCESS;
}

}  // namespace

extern "C" dilattn_status dilattn_mask_create(dilattn_mask* mask, const dilattn_bsr_view* view) {
  DILATTN_ABI_BEGIN
  if (mask == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'mask' is NULL");
  if (view == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'view' is NULL");
  if (view->struct_size != sizeof(dilattn_bsr_view))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'view': struct_size = %zu, expected sizeof(dilattn_bsr_view) = %zu",
                     view->struct_size, sizeof(dilattn_bsr_view));
  auto m = std::make_shared<dilattn::BsrMask>();
  dilattn_status s = build_mask(*view, m.get());
  if (s != DILATTN_SUCCESS) return s;
  auto* made = new dilattn_mask_s();
  made->mask = std::move(m);
  *mask = made;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_mask_destroy(dilattn_mask mask) {
  DILATTN_ABI_BEGIN
  if (mask == nullptr) return DILATTN_SUCCESS;
  if (dilattn_status s = dilattn::release_handle(mask, "mask")) return s;
  delete mask;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_mask_get(dilattn_mask mask, dilattn_bsr_view* view,
                                           int64_t* nnz_total) {
  DILATTN_ABI_BEGIN
  dilattn_status s = dilattn::check_handle(mask, "mask");
  if (s != DILATTN_SUCCESS) return s;
  if (view == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'view' is NULL");
  const dilattn::BsrMask& m = *mask->mask;
  view->struct_size = sizeof(dilattn_bsr_view);
  view->seqlen_q = m.Nq; view->seqlen_k = m.Nk; view->block_q = m.bq; view->block_k = m.bk;
  view->num_heads = m.num_heads;
  view->index_type = DILATTN_INDEX_INT64;
  view->row_ptr = m.row_ptr.data();
  view->col_idx = m.col_idx.data();
  view->head_ptr = m.num_heads > 1 ? m.head_ptr.data() : nullptr;
  if (nnz_total) *nnz_total = m.head_ptr[m.num_heads];
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
