/* ranks.h: this process's place among the ranks of a job (mpirun), and the collectives the programs
 * use, through a communication module (plugins/comm.h) loaded at run time. A single process has no
 * module: every function takes a NULL struct comm as "one rank" and then only copies.
 *
 * The ordered sum (comm_sum_*) is the deterministic gradient reduction: each rank owns a slice of
 * the sum; a round's contributions reach the slice's owner by all-to-all and are added to it in
 * rank order, and the slices are all-gathered at the end. Summing rounds of micro-batches
 * k = jN .. jN+N-1 this way gives the same bits as one process adding the micro-batches one by one
 * in order, for any number of ranks N. */
#ifndef NMT_RANKS_H
#define NMT_RANKS_H

#include <stddef.h>
#include <stdint.h>

struct comm;

/* Joins the job when WANT is "mpi", or when WANT is NULL or "auto" and the process was started by
 * an MPI launcher with more than one rank (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE > 1);
 * "none" (or NMT_COMM=none) never joins. *OUT is NULL for a single process. 0, or -1 with the error
 * set (module not found or not loadable, MPI failed to start). */
int comm_open(const char *want, struct comm **out);
/* Starts a job of N ranks on this machine without MPI (run/comm_local.h): forks N - 1 copies of the
 * calling process, and returns in each with *OUT its place (rank 0 is the caller); N == 1 gives
 * NULL (one process). Call it before any thread starts. 0, or -1 with the error set. */
int comm_open_local(int n, struct comm **out);
/* Leaves the job and unloads the module; comm_close(NULL) is a no-op. 0, or -1 with the error set
 * when, in rank 0 of a local job, another rank ended with a failure. */
int comm_close(struct comm *c);
/* This rank (0 for NULL) and the number of ranks (1 for NULL). */
int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
/* This rank's index among the ranks on its machine (OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID;
 * the rank of a local job; the GPU a cuda rank uses); 0 for NULL or when the launcher does not say. */
int comm_local_rank(const struct comm *c);
/* The threads a rank uses by default: the online cores divided by the ranks on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS; a local job's ranks), at least 1; 0 (all cores)
 * for one process. */
int comm_local_threads(const struct comm *c);
/* The module's one-line description ("" for NULL). */
const char *comm_description(const struct comm *c);

/* Collectives (see plugins/comm.h); with NULL they act on one rank. 0, or -1 with the error set. */
int comm_allgather(struct comm *c, const void *mine, void *all, size_t bytes);
int comm_bcast(struct comm *c, void *buf, size_t bytes, int root);
int comm_send(struct comm *c, const void *buf, size_t bytes, int dest, int tag);
int comm_recv(struct comm *c, void *buf, size_t bytes, int src, int tag);
int comm_allreduce_f32(struct comm *c, float *buf, size_t n);
/* *ANY becomes 1 when FLAG is non-zero on some rank, else 0. 0 or -1. */
int comm_any(struct comm *c, int flag, int *any);
/* Sums of V (COUNT values per rank) over the ranks, exactly. 0 or -1. */
int comm_sum_i64(struct comm *c, int64_t *v, int count);
/* Ends every rank with status CODE when C has more than one rank; returns otherwise. */
void comm_abort(struct comm *c, int code);

/* Non-blocking collectives (modules of ABI 1.1; without them, comm_can_start is 0). */
struct comm_req;
/* 1 when C can start collectives and let them run while the caller works (comm_ialltoall), else 0
 * (NULL, or a module of ABI 1.0). */
int comm_can_start(const struct comm *c);
/* Starts the all-to-all of plugins/comm.h's alltoall: rank r's SEND[j x BYTES ..] reaches rank j's
 * RECV[r x BYTES ..]; *REQ receives the request. 0, or -1 with the error set. */
int comm_ialltoall(struct comm *c, const void *send, void *recv, size_t bytes, struct comm_req **req);
/* Progresses communication; *DONE becomes 1 when REQ has completed (REQ is then freed), else 0.
 * 0, or -1 with the error set (REQ freed). */
int comm_test(struct comm *c, struct comm_req *req, int *done);
/* Waits until REQ completes and frees it. 0, or -1 with the error set. */
int comm_wait(struct comm *c, struct comm_req *req);

/* An ordered sum of N floats over rounds of contributions, cut into buckets (contiguous ranges of
 * the N floats) that travel apart: each bucket is cut into one slice per rank, so a bucket's
 * all-to-all may start as soon as its floats are final (the backward pass finishes a layer) while
 * the rest are still being computed. Every element is still added in rank order, so the buckets do
 * not change the bits of the sum. */
struct comm_bucket {
    size_t off, len;           /* floats [off, off + len) of the N */
    size_t slice;              /* floats per rank: len rounded up to a multiple of the ranks, / ranks */
    size_t acc_off;            /* floats before this bucket's slice in acc (and in a rank's all-gather row) */
    float *stage;              /* (ranks, slice) this rank's contribution, padded (in s->stage) */
    float *recv;               /* (ranks, slice) every rank's piece of this rank's slice (in s->recv) */
    struct comm_req *req;      /* the round's all-to-all while it runs */
    int posted, done;          /* in this round: started; completed */
};

struct comm_sum {
    size_t n;                  /* floats in all */
    size_t acc_len;            /* floats of this rank's slices, all buckets */
    int nb;                    /* buckets */
    struct comm_bucket *b;     /* (nb) */
    float *acc;                /* (acc_len) this rank's slices of the sum, bucket after bucket */
    float *stage, *recv;       /* (ranks x acc_len) each */
    int started;               /* a contribution has been added since the last reset */
};

/* Prepares S for sums of N floats in NB buckets: RANGES holds NB (offset, length) pairs that cover
 * [0, N) once each, in the order they will be posted; RANGES NULL (NB ignored) makes one bucket of
 * all N. 0, or -1 with the error set (out of memory, ranges that do not cover N). */
int comm_sum_init(struct comm_sum *s, struct comm *c, size_t n, const size_t *ranges, int nb);
void comm_sum_free(struct comm_sum *s);
/* Starts a new sum (the next round sets it rather than adds). */
void comm_sum_reset(struct comm_sum *s);
/* Where this rank's contribution to bucket B (its len floats) is written before comm_sum_post. */
float *comm_sum_stage(struct comm_sum *s, int b);
/* Starts bucket B's all-to-all for the current round (every rank posts the buckets of a round in
 * the same order; a bucket is posted once a round). Waits for it when the module cannot start
 * collectives. 0, or -1 with the error set. */
int comm_sum_post(struct comm_sum *s, struct comm *c, int b);
/* Lets the posted all-to-alls progress (MPI_Test), without waiting; *DONE (when not NULL) receives
 * the number of this round's buckets whose all-to-all has completed. 0, or -1 with the error set. */
int comm_sum_poll(struct comm_sum *s, struct comm *c, int *done);
/* Ends a round: posts the buckets not yet posted (with whatever their stage holds), waits for every
 * bucket and adds the contributions of the first COUNT ranks in rank order. 0, or -1. */
int comm_sum_round(struct comm_sum *s, struct comm *c, int count);
/* One whole round: copies X (N floats) to the stages, then comm_sum_round. Every rank calls it; a
 * rank >= COUNT passes any X, which is ignored. 0, or -1 with the error set. */
int comm_sum_add(struct comm_sum *s, struct comm *c, const float *x, int count);
/* Writes the sum (N floats) to OUT on every rank. 0, or -1 with the error set. */
int comm_sum_result(struct comm_sum *s, struct comm *c, float *out);

#endif
