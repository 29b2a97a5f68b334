/*
 * dilattn_ring.h - ring attention (SPEC 5) behind the C ABI: P ranks each hold a shard of the
 * rows of Q, K and V; K/V chunks travel the ring and every rank gets its own rows of O and LSE
 * (forward) or of dQ, dK and dV (backward), equal to the single-device result (SPEC 8).
 *
 * A communicator handle carries one rank's end of a transport; every transport runs the same
 * ring algorithm (lib/ring/). Transports in this version:
 *   threads: P ranks are P threads of one process; chunks are copied into the receiver's own
 *            buffers (no rank reads another's shard during compute), so it models separate memory.
 *            With a cuda plan the ranks' shards are on one or several GPUs of the process and
 *            chunks are copied device to device.
 *   nccl:    one rank per GPU (in one process or many); chunks move with ncclSend/ncclRecv on the
 *            communicator's CUDA stream. Needs a plan on the cuda backend.
 *   mpi:     one rank per MPI process (dilattn_comm_create_mpi), when the library was built
 *            with MPI (meson option mpi); chunks travel with MPI_Isend / MPI_Irecv.
 *
 * Usage (threads):
 *   dilattn_comm comms[P];  dilattn_comm_create_threads(P, 10000, comms);
 *   // on the thread of rank p, with its shards (dilattn_ring_shard_rows says which rows):
 *   dilattn_ring_forward(plan, comms[p], DILATTN_RING_CONTIGUOUS, &q, &k, &v, &o, &lse);
 *   // when every rank is done: dilattn_comm_destroy(comms[p]) for each p.
 *
 * The plan describes the full problem (seqlen_q == seqlen_k == N) and runs every sub-problem
 * on its backend (ref, cpu, emu, or cuda with the threads or NCCL transport; shards on the
 * plan's device). Shard views have N replaced by the rank's
 * row count: q, o [B, rows, H, D]; k, v [B, rows, Hkv, D]; lse [B, H, rows, 1]. Every rank of a
 * communicator must call the same function with the same plan shape and split; a call is
 * collective. When any rank's input is bad, that rank returns its own status and every other
 * rank DILATTN_ERROR_COMM naming it; when a rank does not arrive within the communicator's
 * timeout, every waiting rank returns DILATTN_ERROR_COMM and the communicator is broken (every
 * later call returns DILATTN_ERROR_COMM). Nothing is written to outputs on an error.
 */
#ifndef DILATTN_RING_H
#define DILATTN_RING_H

#include "dilattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How N rows are split over P ranks (SPEC 5). */
typedef enum dilattn_ring_split {
  /* Rank p holds rows [floor(p N / P), floor((p+1) N / P)): uneven N allowed, a rank may hold
   * none (N < P). */
  DILATTN_RING_CONTIGUOUS = 0,
  /* Causal balance: N is cut into 2P chunks the same way; rank p holds chunk p followed by
   * chunk 2P-1-p, in that order in its shard tensors. */
  DILATTN_RING_ZIGZAG = 1
} dilattn_ring_split;

/* One rank's end of a communicator. */
typedef struct dilattn_comm_s* dilattn_comm;

/* P ranks in this process, one thread each: fills comms[0 .. num_ranks) (rank p is comms[p]).
 * timeout_ms > 0 bounds every wait for another rank; past it the call returns
 * DILATTN_ERROR_COMM instead of hanging. */
DILATTN_API dilattn_status dilattn_comm_create_threads(int32_t num_ranks, int32_t timeout_ms,
                                                       dilattn_comm* comms);
/* One rank of an NCCL communicator: nccl_comm points to the caller's ncclComm_t (the caller
 * keeps and destroys it, after this end), cuda_stream is a cudaStream_t (NULL: the legacy default
 * stream) on which every ring call of this end runs: its shifts (ncclSend to rank + 1, ncclRecv
 * from rank - 1), the agreement of the ranks (ncclAllGather) and its kernels. Ring calls on it
 * need a plan on the cuda backend and shards on the communicator's GPU, and return once their
 * work is done. timeout_ms > 0 bounds every wait for the other ranks: past it the call aborts
 * the NCCL communicator (ncclCommAbort; the caller must not use or destroy it afterwards) and
 * returns DILATTN_ERROR_COMM. A build without NCCL returns DILATTN_ERROR_UNSUPPORTED. */
DILATTN_API dilattn_status dilattn_comm_create_nccl(const void* nccl_comm, void* cuda_stream,
                                                    int32_t timeout_ms, dilattn_comm* comm);
/* This process's end of a communicator over the MPI communicator *mpi_comm (an MPI_Comm, passed
 * by address so that this header needs no mpi.h): rank and size are its rank and size.
 * Collective: every rank of *mpi_comm calls it. The library duplicates the communicator, so its
 * messages never mix with the caller's, and dilattn_comm_destroy frees the duplicate (before
 * MPI_Finalize). MPI must be initialised with at least MPI_THREAD_FUNNELED; below
 * MPI_THREAD_SERIALIZED every call on the communicator must come from the main thread.
 * timeout_ms > 0 bounds every wait for another rank, this call's included; past it the call
 * returns DILATTN_ERROR_COMM and the communicator is broken (nothing calls MPI_Abort).
 * A library built without MPI returns DILATTN_ERROR_UNSUPPORTED. */
DILATTN_API dilattn_status dilattn_comm_create_mpi(const void* mpi_comm, int32_t timeout_ms,
                                                   dilattn_comm* comm);
/* Destroys one rank's end; the shared state goes with the last one. Not while a ring call on
 * any rank of the communicator runs. */
DILATTN_API dilattn_status dilattn_comm_destroy(dilattn_comm comm);
/* This end's rank and the number of ranks. */
DILATTN_API dilattn_status dilattn_comm_rank(dilattn_comm comm, int32_t* rank, int32_t* num_ranks);
/* The most bytes the ring held at once on this rank during its last ring call (chunks in
 * flight, partial results, accumulators, sub-problem workspaces), beyond the caller's shards. */
DILATTN_API dilattn_status dilattn_comm_peak_bytes(dilattn_comm comm, size_t* bytes);

/* The rows of the full sequence that `rank` holds: up to two ranges [first[r], first[r] +
 * count[r]), r < 2, in shard order (contiguous: the second count is 0). rows = their sum. */
DILATTN_API dilattn_status dilattn_ring_shard_rows(int64_t seqlen, int32_t num_ranks,
                                                   int32_t rank, dilattn_ring_split split,
                                                   int64_t first[2], int64_t count[2]);

/* This rank's O (and LSE, may be NULL; f32 or f64) for its rows. Collective. */
DILATTN_API dilattn_status dilattn_ring_forward(dilattn_plan plan, dilattn_comm comm,
                                                dilattn_ring_split split,
                                                const dilattn_tensor* q, const dilattn_tensor* k,
                                                const dilattn_tensor* v, const dilattn_tensor* o,
                                                const dilattn_tensor* lse);

/* dilattn_ring_forward with per-call options (docs/spec.md sections 10.3, 11.2): the dropout
 * seed and offset (the decisions are those of dilattn_forward_ex at the same global positions,
 * whatever the ranks and split) and the sink logits. A plan with dropout or sinks needs them:
 * the plain call refuses it. options = NULL is the plain call. Every rank passes the same
 * values (else DILATTN_ERROR_COMM naming the field). Collective. */
DILATTN_API dilattn_status dilattn_ring_forward_ex(dilattn_plan plan, dilattn_comm comm,
                                                   dilattn_ring_split split,
                                                   const dilattn_tensor* q,
                                                   const dilattn_tensor* k,
                                                   const dilattn_tensor* v,
                                                   const dilattn_tensor* o,
                                                   const dilattn_tensor* lse,
                                                   const dilattn_call_options* options);

/* This rank's dQ, dK, dV for its rows (SPEC 6) from its shards of Q, K, V, dO and of the
 * forward's O and LSE. dK/dV contributions travel the ring back to their owner; the summation
 * order is fixed by ring position, so the result is bitwise the same on every run. Collective. */
DILATTN_API dilattn_status dilattn_ring_backward(dilattn_plan plan, dilattn_comm comm,
                                                 dilattn_ring_split split,
                                                 const dilattn_tensor* q, const dilattn_tensor* k,
                                                 const dilattn_tensor* v, const dilattn_tensor* o,
                                                 const dilattn_tensor* lse,
                                                 const dilattn_tensor* d_o,
                                                 const dilattn_tensor* dq,
                                                 const dilattn_tensor* dk,
                                                 const dilattn_tensor* dv);

/* dilattn_ring_backward with per-call options: the forward's dropout seed and offset, and the
 * sink logits; options->d_sinks (may be NULL) receives the sinks' gradient summed over every
 * rank's rows, the same values on every rank. Collective. */
DILATTN_API dilattn_status dilattn_ring_backward_ex(
    dilattn_plan plan, dilattn_comm comm, dilattn_ring_split split, const dilattn_tensor* q,
    const dilattn_tensor* k, const dilattn_tensor* v, const dilattn_tensor* o,
    const dilattn_tensor* lse, const dilattn_tensor* d_o, const dilattn_tensor* dq,
    const dilattn_tensor* dk, const dilattn_tensor* dv, const dilattn_call_options* options);

#ifdef __cplusplus
}
#endif

#endif /* DILATTN_RING_H */
