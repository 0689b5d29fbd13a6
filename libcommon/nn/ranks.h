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
/* Leaves the job and unloads the module; comm_close(NULL) is a no-op. */
void comm_close(struct comm *c);
/* This rank (0 for NULL) and the number of ranks (1 for NULL). */
int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
/* The threads a rank uses by default: the online cores divided by the ranks on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS), at least 1; 0 (all cores) for one process. */
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

/* An ordered sum of N floats over rounds of contributions. */
struct comm_sum {
    size_t n, slice;           /* floats in all; per rank (n rounded up to ranks, / ranks) */
    float *acc;                /* this rank's slice of the sum */
    float *send, *recv;        /* slice x ranks each */
    int started;
};

/* Prepares S for sums of N floats. 0, or -1 (out of memory). */
int comm_sum_init(struct comm_sum *s, struct comm *c, size_t n);
void comm_sum_free(struct comm_sum *s);
/* Starts a new sum (the next add sets it rather than adds). */
void comm_sum_reset(struct comm_sum *s);
/* Adds one round: the N floats X of each of the first COUNT ranks (rank order); every rank calls it
 * (a rank >= COUNT passes any X, which is ignored). 0, or -1 with the error set. */
int comm_sum_add(struct comm_sum *s, struct comm *c, const float *x, int count);
/* Writes the sum (N floats) to OUT on every rank. 0, or -1 with the error set. */
int comm_sum_result(struct comm_sum *s, struct comm *c, float *out);

#endif
