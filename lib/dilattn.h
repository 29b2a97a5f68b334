/*
 * dilattn.h - the C ABI of dilattn: dense, dilated (LongNet) and block-sparse attention,
 * forward and backward, on a CPU reference, a fast CPU backend and CUDA kernels.
 *
 * What every backend computes is defined in docs/spec.md (summarised in README.md).
 * This header compiles as C99 (tests/c_api/test_c99_header.c proves it) and no C++ type crosses it.
 *
 * Usage, in six calls:
 *   dilattn_desc desc;  dilattn_desc_create(&desc);
 *   dilattn_desc_set_dilated(desc, 3, segments, dilations, DILATTN_HEADS_MOD);
 *   dilattn_shape shape = dilattn_shape_make(B, N, N, H, H, D);
 *   dilattn_plan plan;  dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_AUTO);
 *   dilattn_forward(plan, &q, &k, &v, &o, &lse, NULL, 0);
 *   dilattn_plan_destroy(plan); dilattn_desc_destroy(desc);
 *
 * Every call returns a dilattn_status. On an error nothing is written to any output, and
 * dilattn_last_error() returns a message naming the argument and its value (thread-local).
 */
#ifndef DILATTN_H
#define DILATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from the library, imported by its users (Windows DLLs need both spellings); a
 * program linking the static library defines DILATTN_STATIC. */
#if defined(_WIN32) && !defined(DILATTN_STATIC)
#if defined(DILATTN_BUILDING_LIBRARY)
#define DILATTN_API __declspec(dllexport)
#else
#define DILATTN_API __declspec(dllimport)
#endif
#elif defined(_WIN32)
#define DILATTN_API
#else
#define DILATTN_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- version */
#define DILATTN_VERSION_MAJOR 0
#define DILATTN_VERSION_MINOR 2
#define DILATTN_VERSION_PATCH 0
/* One integer that orders versions: 10000*major + 100*minor + patch. */
#define DILATTN_VERSION \
  (DILATTN_VERSION_MAJOR * 10000 + DILATTN_VERSION_MINOR * 100 + DILATTN_VERSION_PATCH)

/* The version the library was built as; compare with DILATTN_VERSION to detect a
 * header/library mismatch. */
DILATTN_API int dilattn_version(void);

/* ---------------------------------------------------------------- status (SPEC 7) */
typedef enum dilattn_status {
  DILATTN_SUCCESS = 0,
  /* Bad input: one status per rule of SPEC 7. */
  DILATTN_ERROR_NULL_POINTER = 1,       /* a required pointer is NULL */
  DILATTN_ERROR_SHAPE_MISMATCH = 2,     /* a tensor's shape disagrees with the plan or another tensor */
  DILATTN_ERROR_DTYPE_MISMATCH = 3,     /* a tensor's dtype disagrees with the plan */
  DILATTN_ERROR_HEADS_NOT_DIVISIBLE = 4,/* H % Hkv != 0 */
  DILATTN_ERROR_BAD_SEGMENT = 5,        /* a segment length w < 1 */
  DILATTN_ERROR_BAD_DILATION = 6,       /* a dilation r < 1 or r > w */
  DILATTN_ERROR_NO_BRANCHES = 7,        /* a dilated configuration with zero branches */
  DILATTN_ERROR_GROUPS_TOO_FEW_HEADS = 8,/* head mode groups with H < number of branches */
  DILATTN_ERROR_BAD_SCALE = 9,          /* scale is NaN or infinite */
  DILATTN_ERROR_SIZE_OVERFLOW = 10,     /* a size or element offset overflows int64 / size_t */
  DILATTN_ERROR_BAD_MASK = 11,          /* a block-sparse mask breaks SPEC 4 */
  DILATTN_ERROR_DEVICE_NOT_BUILT = 12,  /* a device (CUDA) this build lacks, or no such device */
  DILATTN_ERROR_DEVICE_MISMATCH = 13,   /* a tensor on a device the plan's backend does not run on */
  DILATTN_ERROR_INVALID_VALUE = 14,     /* an enum or count out of range, a non-positive size */
  DILATTN_ERROR_SEQLEN_MISMATCH = 15,   /* dilated attention with Nq != Nk */
  /* The backend cannot take this input; it said so before touching memory (SPEC 1). */
  DILATTN_ERROR_UNSUPPORTED = 16,
  DILATTN_ERROR_BACKEND_NOT_BUILT = 17, /* the backend exists in the API but not in this build */
  DILATTN_ERROR_OUT_OF_MEMORY = 18,
  DILATTN_ERROR_WORKSPACE_TOO_SMALL = 19,
  DILATTN_ERROR_CUDA = 20,              /* the CUDA runtime reported an error */
  DILATTN_ERROR_INTERNAL = 21,          /* a bug in dilattn: please report it */
  /* Memory pool abuse (dilattn_pool.h). */
  DILATTN_ERROR_POOL_DOUBLE_FREE = 22,
  DILATTN_ERROR_POOL_FOREIGN_POINTER = 23,  /* a pointer this pool never handed out */
  DILATTN_ERROR_POOL_INTERIOR_POINTER = 24, /* a pointer inside a block, not its start */
  DILATTN_ERROR_POOL_ZERO_SIZE = 25,
  DILATTN_ERROR_POOL_TOO_LARGE = 26,        /* a request larger than the arena */
  DILATTN_ERROR_POOL_DESTROYED = 27,        /* use after destroy, where detectable */
  /* Ring attention (dilattn_ring.h): another rank failed, or a rank did not arrive in time. */
  DILATTN_ERROR_COMM = 28,
  /* The call's progress callback asked it to stop (SPEC 14.11); its outputs are untouched. */
  DILATTN_ERROR_CANCELLED = 29,
  DILATTN_STATUS_COUNT_ = 30
} dilattn_status;

/* A short constant description of a status ("DILATTN_ERROR_BAD_DILATION: ..."). */
DILATTN_API const char* dilattn_status_string(dilattn_status status);
/* The detail of the last error on this thread ("" after a success). Valid until the
 * next dilattn call on this thread. */
DILATTN_API const char* dilattn_last_error(void);

/* ---------------------------------------------------------------- tensors (SPEC 1) */
typedef enum dilattn_dtype {
  DILATTN_F32 = 0,
  DILATTN_F64 = 1, /* CPU backends only */
  DILATTN_F16 = 2,
  DILATTN_BF16 = 3
} dilattn_dtype;

typedef enum dilattn_device_type {
  DILATTN_DEVICE_CPU = 0,
  DILATTN_DEVICE_CUDA = 1
} dilattn_device_type;

/* A view of caller memory; the library never frees or reallocates it.
 * Q, O: [B, Nq, H, D]; K, V: [B, Nk, Hkv, D]; LSE: [B, H, Nq] (shape[3] = 1).
 * Strides are in elements and must be >= 0. struct_size is sizeof(dilattn_tensor) (set by
 * dilattn_tensor_contiguous; set it yourself when filling the fields by hand): it lets later
 * versions add fields without breaking callers, and a zeroed view is refused, not misread. */
typedef struct dilattn_tensor {
  size_t struct_size;
  void* data;
  dilattn_dtype dtype;
  dilattn_device_type device;
  int32_t device_index;
  int64_t shape[4];
  int64_t strides[4];
} dilattn_tensor;

/* Fills a contiguous C-order view. LSE views use shape {B, H, Nq, 1}. */
DILATTN_API dilattn_tensor dilattn_tensor_contiguous(void* data, dilattn_dtype dtype,
                                                     int64_t d0, int64_t d1, int64_t d2,
                                                     int64_t d3);

/* ---------------------------------------------------------------- attention description */
typedef enum dilattn_head_mode {
  DILATTN_HEADS_MOD = 0,    /* offset h mod r: LongNet paper (SPEC 3) */
  DILATTN_HEADS_BLOCK = 1,  /* offset floor(h / ceil(H / r)): microsoft/torchscale */
  DILATTN_HEADS_GROUPS = 2  /* head group g uses branch g alone: dilated-attention-pytorch */
} dilattn_head_mode;

typedef enum dilattn_kind {
  DILATTN_KIND_DENSE = 0,
  DILATTN_KIND_DILATED = 1,
  DILATTN_KIND_BLOCK_SPARSE = 2
} dilattn_kind;

typedef struct dilattn_desc_s* dilattn_desc;
typedef struct dilattn_mask_s* dilattn_mask; /* dilattn_mask.h */
typedef struct dilattn_pool_s* dilattn_pool; /* dilattn_pool.h */

/* A new description: dense, not causal, scale 1/sqrt(D), default threads, default pool, no
 * window, softcap or ALiBi, no packed batch, no sinks. */
DILATTN_API dilattn_status dilattn_desc_create(dilattn_desc* desc);
DILATTN_API dilattn_status dilattn_desc_destroy(dilattn_desc desc);
DILATTN_API dilattn_status dilattn_desc_set_dense(dilattn_desc desc);
/* Branches (segments[b], dilations[b]), b < num_branches; the arrays are copied. */
DILATTN_API dilattn_status dilattn_desc_set_dilated(dilattn_desc desc, int32_t num_branches,
                                                    const int64_t* segments,
                                                    const int64_t* dilations,
                                                    dilattn_head_mode head_mode);
/* Block-sparse attention with a validated mask (dilattn_mask.h); the description keeps
 * its own reference, so the caller may destroy the mask afterwards. */
DILATTN_API dilattn_status dilattn_desc_set_block_sparse(dilattn_desc desc, dilattn_mask mask);
DILATTN_API dilattn_status dilattn_desc_set_causal(dilattn_desc desc, int32_t causal);
/* An explicit softmax scale; without this call the scale is 1/sqrt(D). */
DILATTN_API dilattn_status dilattn_desc_set_scale(dilattn_desc desc, double scale);
/* Worker threads for the cpu backend; 0 = DILATTN_NUM_THREADS or the machine's cores. */
DILATTN_API dilattn_status dilattn_desc_set_num_threads(dilattn_desc desc, int32_t num_threads);
/* Workspace pool for plans made from this description; NULL = the default pool. */
DILATTN_API dilattn_status dilattn_desc_set_pool(dilattn_desc desc, dilattn_pool pool);
/* Attention dropout with probability p in [0, 1) on the normalised probabilities (SPEC 11);
 * 0 (the default) is no dropout. A plan with p > 0 runs only on the ref backend and only
 * through dilattn_forward_ex / dilattn_backward_ex, which carry the seed and offset. */
DILATTN_API dilattn_status dilattn_desc_set_dropout(dilattn_desc desc, double p);

/* Variants (docs/spec.md section 10.1), computed by the ref and cpu backends: cuda, emu and the
 * ring refuse a plan with one of them (DILATTN_ERROR_UNSUPPORTED naming the option), so AUTO
 * resolves such a plan to cpu.
 * Sliding window: key j is allowed for row i iff i + d - left <= j <= i + d + right
 * (d = seqlen_k - seqlen_q); -1 is unbounded, (-1, -1) turns it off. */
DILATTN_API dilattn_status dilattn_desc_set_window(dilattn_desc desc, int64_t left, int64_t right);
/* Softcap c: S = c * tanh(scale <q, k> / c); c = 0 turns it off; c must be >= 0 and finite. */
DILATTN_API dilattn_status dilattn_desc_set_softcap(dilattn_desc desc, double softcap);
/* ALiBi: S += -m * |i + d - j| after the softcap; count slopes, copied: heads_q of them (one per
 * head) or batch * heads_q (row-major [batch][heads_q]), checked at plan creation. count 0 turns
 * it off. */
DILATTN_API dilattn_status dilattn_desc_set_alibi(dilattn_desc desc, const double* slopes,
                                                  int64_t count);
/* Packed (variable-length) batch (docs/spec.md section 10.2): num_seqs sequences laid end to
 * end, sequence b owning query rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) and keys
 * [cu_seqlens_k[b], cu_seqlens_k[b+1]); each array holds num_seqs + 1 offsets, starts at 0 and
 * never decreases (copied and checked here). The plan needs batch = 1 and the last offsets equal
 * to seqlen_q and seqlen_k. Each sequence attends only within itself, with causal, windows,
 * ALiBi and dilated segments taken per sequence. num_seqs = 0 turns it off. */
/* Attention sinks (docs/spec.md section 10.3): enabled = 1 gives every row of head h one more
 * softmax term exp(sinks[h]) with no value; the values travel per call in
 * dilattn_call_options.sinks (and their gradient in d_sinks). 0 (the default) turns it off. */
DILATTN_API dilattn_status dilattn_desc_set_sinks(dilattn_desc desc, int32_t enabled);
DILATTN_API dilattn_status dilattn_desc_set_varlen(dilattn_desc desc, int64_t num_seqs,
                                                   const int64_t* cu_seqlens_q,
                                                   const int64_t* cu_seqlens_k);

/* ---------------------------------------------------------------- plans */
typedef enum dilattn_backend {
  DILATTN_BACKEND_AUTO = 0, /* cuda when a GPU is present, else cpu */
  DILATTN_BACKEND_REF = 1,  /* the f64 reference: exact, slow */
  DILATTN_BACKEND_CPU = 2,  /* tiled online softmax, multithreaded */
  DILATTN_BACKEND_CUDA = 3, /* hand-written kernels on a GPU */
  DILATTN_BACKEND_EMU = 4   /* the CUDA backend's kernels run by the CPU SIMT emulator */
} dilattn_backend;

/* A plan fixes description, shapes, dtype and backend. It is immutable and may be used
 * from several threads at once. Q is [B, Nq, H, D]; K and V are [B, Nk, Hkv, D]. */
typedef struct dilattn_plan_s* dilattn_plan;

/* The sizes of a problem, by name. struct_size is sizeof(dilattn_shape) (dilattn_shape_make
 * sets it), so later versions can add fields. */
typedef struct dilattn_shape {
  size_t struct_size;
  int64_t batch;     /* B */
  int64_t seqlen_q;  /* Nq */
  int64_t seqlen_k;  /* Nk */
  int64_t heads_q;   /* H */
  int64_t heads_kv;  /* Hkv, H % Hkv == 0 */
  int64_t head_dim;  /* D */
} dilattn_shape;

DILATTN_API dilattn_shape dilattn_shape_make(int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                             int64_t heads_q, int64_t heads_kv,
                                             int64_t head_dim);

DILATTN_API dilattn_status dilattn_plan_create(dilattn_plan* plan, dilattn_desc desc,
                                               const dilattn_shape* shape, dilattn_dtype dtype,
                                               dilattn_backend backend);
DILATTN_API dilattn_status dilattn_plan_destroy(dilattn_plan plan);
/* The backend the plan runs on (AUTO resolved). */
DILATTN_API dilattn_status dilattn_plan_backend(dilattn_plan plan, dilattn_backend* backend);
/* Bytes of workspace forward and backward need; pass at least that many, or NULL to let
 * the plan take them from its pool. */
DILATTN_API dilattn_status dilattn_plan_workspace_size(dilattn_plan plan, size_t* forward_bytes,
                                                       size_t* backward_bytes);

/* The number of score terms S_ij the plan computes: the sizes of every allowed-key set A(i),
 * a key counted once per occurrence, summed over batches, heads and query rows. A forward does
 * 4 * D floating-point operations per term (Q K^T and P V), a backward 10 * D: benchmarks report
 * useful FLOP/s from it. Walks every row once: O(H * Nq * branches). */
DILATTN_API dilattn_status dilattn_plan_score_count(dilattn_plan plan, int64_t* score_terms);

/* O = attention(Q, K, V). lse may be NULL; else [B, H, Nq, 1] in f32 or f64. */
DILATTN_API dilattn_status dilattn_forward(dilattn_plan plan, const dilattn_tensor* q,
                                           const dilattn_tensor* k, const dilattn_tensor* v,
                                           const dilattn_tensor* o, const dilattn_tensor* lse,
                                           void* workspace, size_t workspace_bytes);

/* dQ, dK, dV from dO and the forward's O and LSE (SPEC 6). Deterministic. */
DILATTN_API dilattn_status dilattn_backward(dilattn_plan plan, const dilattn_tensor* q,
                                            const dilattn_tensor* k, const dilattn_tensor* v,
                                            const dilattn_tensor* o, const dilattn_tensor* lse,
                                            const dilattn_tensor* d_o, const dilattn_tensor* dq,
                                            const dilattn_tensor* dk, const dilattn_tensor* dv,
                                            void* workspace, size_t workspace_bytes);

/* dilattn_forward and dilattn_backward on a CUDA stream: cuda_stream is a cudaStream_t passed
 * as void* (so this header needs no CUDA); NULL is the legacy default stream. The call returns
 * once its work is enqueued on that stream: no host synchronisation, copies asynchronous, no
 * device allocation once the workspace pool is warm, every kernel on cuda_stream, so it
 * orders with the caller's other work on the stream (e.g. PyTorch's current stream) and can be
 * captured into a CUDA graph. A workspace taken from the pool (workspace NULL) goes back to it
 * only after the stream has run the call's work; a graph replays its work later, so capture
 * needs a workspace of your own (a capturing stream without one gets
 * DILATTN_ERROR_INVALID_VALUE). Input errors are reported at once, as by dilattn_forward;
 * errors of the running kernels show at your next synchronisation with the stream. The plain
 * calls behave as before: they run on the legacy default stream and wait for their work.
 * CPU backends ignore the stream and finish before returning. */
DILATTN_API dilattn_status dilattn_forward_on_stream(dilattn_plan plan, void* cuda_stream,
                                                     const dilattn_tensor* q,
                                                     const dilattn_tensor* k,
                                                     const dilattn_tensor* v,
                                                     const dilattn_tensor* o,
                                                     const dilattn_tensor* lse, void* workspace,
                                                     size_t workspace_bytes);
DILATTN_API dilattn_status dilattn_backward_on_stream(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_tensor* d_o, const dilattn_tensor* dq, const dilattn_tensor* dk,
    const dilattn_tensor* dv, void* workspace, size_t workspace_bytes);

/* A progress callback (SPEC 14.11): called from the calling thread with done = 0 before the
 * work, with done never decreasing at most every 100 ms while it runs, and with done = total
 * once the outputs are written. A non-zero return from any call but the last stops the call:
 * it returns DILATTN_ERROR_CANCELLED and leaves every output as it was. */
typedef int (*dilattn_progress_fn)(void* user, int64_t done, int64_t total);

/* Per-call options of dilattn_forward_ex and dilattn_backward_ex (SPEC 11.2). struct_size is
 * sizeof(dilattn_call_options) (dilattn_call_options_make sets it and zeroes the rest), so
 * later versions can add fields. dropout_seed: any 64-bit value; dropout_offset: below 2^32.
 * Advance the offset (or change the seed) every training step; the backward of a step takes
 * the same seed and offset as its forward, which regenerates the same decisions. */
typedef struct dilattn_call_options {
  size_t struct_size;
  uint64_t dropout_seed;
  uint64_t dropout_offset;
  /* Attention sinks (docs/spec.md section 10.3), for a plan made with dilattn_desc_set_sinks:
   * sinks holds heads_q logits in host memory (finite or -inf), d_sinks heads_q values the
   * backward writes (NULL: not wanted; the forward ignores it). Both NULL otherwise. A
   * struct_size of the fields up to dropout_offset (the first version) is accepted and reads
   * as both NULL. */
  const double* sinks;
  double* d_sinks;
  /* Progress and cancelling (SPEC 14.11): NULL (the default) is no callback, and costs
   * nothing. With one, the ref and cpu backends compute into a host copy of the outputs (their
   * bytes, per call) so that a cancel leaves the outputs untouched. The ring's calls refuse it.
   * A struct_size of the fields up to d_sinks (the second version) reads as no callback. */
  dilattn_progress_fn progress;
  void* progress_user;
} dilattn_call_options;

DILATTN_API dilattn_call_options dilattn_call_options_make(void);

/* dilattn_forward and dilattn_backward with per-call options (NULL: the plain call). A plan
 * with dropout p > 0 needs them: the plain calls refuse it, since a fixed seed would repeat
 * the same mask every step. */
DILATTN_API dilattn_status dilattn_forward_ex(dilattn_plan plan, const dilattn_tensor* q,
                                              const dilattn_tensor* k, const dilattn_tensor* v,
                                              const dilattn_tensor* o, const dilattn_tensor* lse,
                                              const dilattn_call_options* options,
                                              void* workspace, size_t workspace_bytes);
DILATTN_API dilattn_status dilattn_backward_ex(
    dilattn_plan plan, const dilattn_tensor* q, const dilattn_tensor* k, const dilattn_tensor* v,
    const dilattn_tensor* o, const dilattn_tensor* lse, const dilattn_tensor* d_o,
    const dilattn_tensor* dq, const dilattn_tensor* dk, const dilattn_tensor* dv,
    const dilattn_call_options* options, void* workspace, size_t workspace_bytes);

/* dilattn_forward_ex and dilattn_backward_ex on a CUDA stream, as the _on_stream calls run
 * (NULL: the legacy default stream; CPU backends ignore it and finish before returning): the
 * calls a training loop on PyTorch's current stream makes with dropout or sinks. The sink
 * logits are read, and d_sinks written, by copies on the stream: from and to pageable host
 * memory (any ordinary array) CUDA finishes them before the call returns, waiting for the
 * stream to do so; in page-locked memory keep sinks unchanged, and read d_sinks, only after
 * the stream has run the call. */
DILATTN_API dilattn_status dilattn_forward_on_stream_ex(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_call_options* options, void* workspace, size_t workspace_bytes);
DILATTN_API dilattn_status dilattn_backward_on_stream_ex(
    dilattn_plan plan, void* cuda_stream, const dilattn_tensor* q, const dilattn_tensor* k,
    const dilattn_tensor* v, const dilattn_tensor* o, const dilattn_tensor* lse,
    const dilattn_tensor* d_o, const dilattn_tensor* dq, const dilattn_tensor* dk,
    const dilattn_tensor* dv, const dilattn_call_options* options, void* workspace,
    size_t workspace_bytes);

/* The reference result for chosen query rows only, in f64: for checking sampled rows of a
 * run too long for the full reference. o_rows is [B, num_rows, H, D] f64 contiguous,
 * lse_rows [B, H, num_rows] f64 contiguous (may be NULL). Works on any CPU plan. */
DILATTN_API dilattn_status dilattn_reference_rows(dilattn_plan plan, const dilattn_tensor* q,
                                                  const dilattn_tensor* k,
                                                  const dilattn_tensor* v, const int64_t* rows,
                                                  int64_t num_rows, double* o_rows,
                                                  double* lse_rows);

/* ---------------------------------------------------------------- build information */
/* 1 when the backend is built and can run here (cuda: a GPU is present). */
DILATTN_API int dilattn_backend_available(dilattn_backend backend);
DILATTN_API const char* dilattn_backend_name(dilattn_backend backend);
/* One line per fact: version, backends, CUDA/NCCL found at build time, CPU features. */
DILATTN_API const char* dilattn_build_info(void);
/* The instruction set the cpu backend uses in this process, chosen once at first use: the
 * widest this CPU runs ("avx512", "avx2", "sse" on x86-64; "neon" on aarch64), or the one the
 * environment variable DILATTN_CPU_ISA names (a narrower one, "avx512bf16" for bf16 pair
 * products, or the test path "bf16emu", for testing and comparison).
 * "none" when DILATTN_CPU_ISA names one that is not built or this CPU lacks: the cpu backend
 * then refuses every plan with DILATTN_ERROR_UNSUPPORTED and a message naming the value. */
DILATTN_API const char* dilattn_cpu_isa(void);

#ifdef __cplusplus
}
#endif

#include "dilattn_mask.h"
#include "dilattn_pool.h"

#endif /* DILATTN_H */
