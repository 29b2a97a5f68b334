/*
 * dilattn_mask.h - block-sparse masks (SPEC 4): the BSR format, validation, pattern builders.
 * Included by dilattn.h; not meant to be included alone.
 *
 * Format. Query blocks I = ceil(Nq / bq), key blocks J = ceil(Nk / bk).
 *   One mask for all heads (num_heads = 1): row_ptr[I + 1], col_idx[nnz]; head_ptr unused.
 *   One mask per head (num_heads = H): row_ptr[H * (I + 1)], head h's rows at
 *   row_ptr + h * (I + 1), each head's row_ptr starting at 0 and indexing
 *   col_idx + head_ptr[h]; head_ptr[H + 1] with head_ptr[0] = 0.
 * Within a row, col_idx is strictly ascending, values in [0, J).
 */
#ifndef DILATTN_MASK_H
#define DILATTN_MASK_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dilattn_index_type {
  DILATTN_INDEX_INT32 = 0,
  DILATTN_INDEX_INT64 = 1
} dilattn_index_type;

/* A caller's BSR arrays (host memory), read by dilattn_mask_create. */
typedef struct dilattn_bsr_view {
  int64_t seqlen_q, seqlen_k;  /* Nq, Nk */
  int64_t block_q, block_k;    /* bq, bk */
  int64_t num_heads;           /* 1, or H for one mask per head */
  dilattn_index_type index_type;
  const void* row_ptr;
  const void* col_idx;
  const void* head_ptr;        /* NULL when num_heads == 1 */
} dilattn_bsr_view;

/* Validates and copies the arrays into a new mask. A bad mask returns
 * DILATTN_ERROR_BAD_MASK and a message naming the first bad entry (head, row block, position). */
DILATTN_API dilattn_status dilattn_mask_create(dilattn_mask* mask, const dilattn_bsr_view* view);
DILATTN_API dilattn_status dilattn_mask_destroy(dilattn_mask mask);
/* Views of the mask's own int64 arrays, valid until dilattn_mask_destroy. */
DILATTN_API dilattn_status dilattn_mask_get(dilattn_mask mask, dilattn_bsr_view* view,
                                            int64_t* nnz_total);

/* ---------------------------------------------------------------- pattern builders */
/* Builds the mask a pattern string describes, for Nq x Nk with blocks bq x bk; the grammar
 * (README, "Block-sparse patterns") is a '+'-separated union of terms such as
 * "local:2+sink:1+strided:4+random:0.05:seed=7". */
DILATTN_API dilattn_status dilattn_mask_from_pattern(dilattn_mask* mask, const char* pattern,
                                                     int64_t seqlen_q, int64_t seqlen_k,
                                                     int64_t block_q, int64_t block_k);

#ifdef __cplusplus
}
#endif
#endif /* DILATTN_MASK_H */
