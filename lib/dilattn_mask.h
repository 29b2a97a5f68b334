/*
 * dilattn_mask.h - block-sparse masks (SPEC 4): the BSR format, validation, pattern builders.
 * Included by dilattn.h; compiles alone too (it includes dilattn.h).
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

#include "dilattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dilattn_index_type {
  DILATTN_INDEX_INT32 = 0,
  DILATTN_INDEX_INT64 = 1
} dilattn_index_type;

/* A caller's BSR arrays (host memory), read by dilattn_mask_create. struct_size is
 * sizeof(dilattn_bsr_view), as in dilattn_tensor; dilattn_mask_get sets it. */
typedef struct dilattn_bsr_view {
  size_t struct_size;
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
 * (SPEC 4.4; docs/cli.md, "Block-sparse patterns") is a '+'-separated union of terms such as
 * "local:2+sink:1+strided:4+random:0.05:seed=7". Terms: local:W, causal_local:W, sink:G,
 * strided:S, random:P[:seed=N], hier:PRESET or hier:S/W/C[,S/W/C...], dense; ':causal' after
 * any term keeps only causally allowed pairs. Each term is the builder below of the same
 * name (random with one head). A bad term: DILATTN_ERROR_INVALID_VALUE naming the term. */
DILATTN_API dilattn_status dilattn_mask_from_pattern(dilattn_mask* mask, const char* pattern,
                                                     int64_t seqlen_q, int64_t seqlen_k,
                                                     int64_t block_q, int64_t block_k);

/* Builders. Each returns a new mask in *mask that the caller frees with dilattn_mask_destroy;
 * on an error *mask is untouched. Shapes: Nq, Nk, bq, bk >= 1 (else INVALID_VALUE);
 * I = ceil(Nq/bq) row blocks, J = ceil(Nk/bk) key blocks, and I * J <= 2^34 (else
 * SIZE_OVERFLOW). Every builder is a pure function of its arguments: the same mask on
 * every platform.
 *
 * Block geometry shared by the builders (SPEC 2's bottom-right alignment, off = Nk - Nq):
 *   last(ib)    = min((ib+1)*bq, Nq) - 1, the last query row of row block ib.
 *   diag(ib)    = the key blocks holding the aligned positions clamp(i + off, 0, Nk-1) of the
 *                 rows i of row block ib: the range [dlo(ib), dhi(ib)]; with Nq == Nk and
 *                 bq == bk it is the one block ib.
 *   causal:     a pair (ib, jb) is causally allowed iff some (i, j) in it has j <= i + off,
 *               i.e. jb*bk <= last(ib) + off. A builder given causal != 0 keeps only
 *               causally allowed pairs. This is a block-level filter: SPEC 4's element rule
 *               (j <= i + off inside a kept block) still applies when the plan is causal.
 *
 * local:       jb in [dlo(ib) - W, dhi(ib) + W]; with causal, jb in [dlo(ib) - W, dhi(ib)]
 *              and causally allowed. W = window_blocks >= 0 (0: the diagonal only).
 * sink:        jb < G (every row sees the first G key blocks) or ib < G (the first G query
 *              blocks see every key block); G = global_blocks >= 0.
 * strided:     (dhi(ib) - jb) mod S == 0 (the diagonal and every S-th key block from it, both
 *              ways); S = stride >= 1.
 * random:      per head h < num_heads (1 = one shared mask), (ib, jb) kept iff
 *              u(seed, h, ib, jb) < density, u = (x >> 11) * 2^-53 and
 *              x = sm(sm(sm(sm(seed) ^ h) ^ ib) ^ jb), sm(z) the output of one splitmix64
 *              step from state z (Steele, Lea, Flood 2014; the published reference mixer).
 *              0 <= density <= 1. The draw does not depend on causal (causal only filters).
 * union:       per (head, ib) the union of the inputs' key blocks. All inputs share Nq, Nk,
 *              bq, bk; each has 1 or H heads (one H for all), a 1-head input applies to
 *              every head. 1 <= count.
 * hierarchical (after DarcStar dilated-attention-pytorch's BlockSparseHierarchical levels,
 *              defined here on tokens so it does not depend on the mask's block size):
 *              level l = (stride s >= 1, window w >= 0 or -1 = global, block size c >= 1), in
 *              tokens. Query row i is an anchor of level l iff i mod s == 0. An anchor reaches
 *              the keys [a - floor(w/2), a + floor(w/2)] around a = i + off, clipped to
 *              [0, Nk), widened outward to multiples of c (clipped again); w = -1: every key.
 *              (ib, jb) is kept iff some anchor of some level in row block ib reaches a key of
 *              key block jb. Rows without anchors stay empty: union with local for coverage.
 * topk:        content-adaptive, one mask per query head (num_heads = H). q is [B, Nq, H, D],
 *              k is [B, Nk, Hkv, D] (host memory, any dtype; H % Hkv == 0). Mean-pool q over
 *              the rows of each row block and over the batch: qbar[h][ib]; likewise
 *              kbar[g][jb]. score(h, ib, jb) = <qbar[h][ib], kbar[h / (H/Hkv)][jb]> in f64.
 *              Row ib keeps the k_keep best-scoring candidate blocks (ties: lower jb first),
 *              candidates being all jb (causally allowed ones when causal), plus diag(ib)
 *              (its causally allowed blocks when causal). k_keep >= 0. A NaN score counts
 *              as -inf: it ranks below every finite score and ties with -inf (lower jb first). */
DILATTN_API dilattn_status dilattn_mask_local(dilattn_mask* mask, int64_t seqlen_q,
                                              int64_t seqlen_k, int64_t block_q,
                                              int64_t block_k, int64_t window_blocks,
                                              int32_t causal);
DILATTN_API dilattn_status dilattn_mask_sink(dilattn_mask* mask, int64_t seqlen_q,
                                             int64_t seqlen_k, int64_t block_q, int64_t block_k,
                                             int64_t global_blocks, int32_t causal);
DILATTN_API dilattn_status dilattn_mask_strided(dilattn_mask* mask, int64_t seqlen_q,
                                                int64_t seqlen_k, int64_t block_q,
                                                int64_t block_k, int64_t stride, int32_t causal);
DILATTN_API dilattn_status dilattn_mask_random(dilattn_mask* mask, int64_t seqlen_q,
                                               int64_t seqlen_k, int64_t block_q,
                                               int64_t block_k, int64_t num_heads,
                                               double density, uint64_t seed, int32_t causal);
DILATTN_API dilattn_status dilattn_mask_union(dilattn_mask* mask, const dilattn_mask* masks,
                                              int32_t count);
DILATTN_API dilattn_status dilattn_mask_hierarchical(dilattn_mask* mask, int64_t seqlen_q,
                                                     int64_t seqlen_k, int64_t block_q,
                                                     int64_t block_k, int32_t levels,
                                                     const int64_t* strides,
                                                     const int64_t* windows,
                                                     const int64_t* block_sizes,
                                                     int32_t causal);
DILATTN_API dilattn_status dilattn_mask_topk(dilattn_mask* mask, const dilattn_tensor* q,
                                             const dilattn_tensor* k, int64_t block_q,
                                             int64_t block_k, int64_t k_keep, int32_t causal);

#ifdef __cplusplus
}
#endif
#endif /* DILATTN_MASK_H */
