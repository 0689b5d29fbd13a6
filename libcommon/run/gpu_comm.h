/* gpu_comm.h: collectives between the ranks' GPUs through a device communication module
 * (plugins/devcomm.h: bin/nmt-comm-nccl.so, which opens NCCL at run time), bootstrapped through the
 * host ranks (run/ranks.h: rank 0's NCCL id is broadcast by MPI), and the ordered gradient sum done
 * on the device with the compute backend's own kernels (copy, add), so gradients never cross the
 * host. A NULL struct gpu_comm is one rank and only copies (with the backend's copy).
 *
 * The device sum is the host's comm_sum on device memory: each rank owns a slice; a round's
 * gradients reach the owner by all-to-all and are added in rank order (micro-batch order), and the
 * slices are all-gathered at the end; float additions in the same order give the same bits for any
 * number of GPU ranks. See man/nmt-scale.7, GPU RANKS; unverified on a GPU as of this writing. */
#ifndef NMT_GPU_COMM_H
#define NMT_GPU_COMM_H

#include <stddef.h>

#include "run/backend_loader.h"
#include "run/ranks.h"

struct gpu_comm;

/* The gradient path of a run: "nccl" when WANT is "nccl", or when WANT is NULL or "auto", BACKEND
 * is "cuda" and the run has RANKS > 1; "mpi" (host copies, run/ranks.h) when WANT is "mpi" or auto
 * did not choose NCCL. NULL with the error set for an unknown WANT, or "nccl" with a backend other
 * than cuda. */
const char *gpu_comm_choose(const char *want, const char *backend, int ranks);
/* Joins the GPU job of the ranks of C (NULL: one rank) on DEVICE, collectively: every rank loads
 * the module and probes its device, the ranks agree, rank 0 makes the id and broadcasts it, every
 * rank joins. 0 with *OUT set, or -1 with the error set (a rank that failed gives its own reason,
 * the others name the failure's rank count). */
int gpu_comm_open(struct comm *c, int device, struct gpu_comm **out);
/* Leaves the job; gpu_comm_close(NULL) is a no-op. The module stays mapped. */
void gpu_comm_close(struct gpu_comm *g);
/* The module's one-line description ("" for NULL). */
const char *gpu_comm_description(const struct gpu_comm *g);
/* This rank and the ranks of the GPU job (0 and 1 for NULL). */
int gpu_comm_rank(const struct gpu_comm *g);
int gpu_comm_size(const struct gpu_comm *g);

/* Device collectives (plugins/devcomm.h); with NULL, one rank: ALL/RECV get a copy through BE.
 * 0, or -1 with the error set. */
int gpu_comm_alltoall(struct gpu_comm *g, struct backend *be, const void *send, void *recv, size_t bytes);
int gpu_comm_allgather(struct gpu_comm *g, struct backend *be, const void *send, void *recv, size_t bytes);
/* BUF (N device floats) becomes the sum over the ranks in NCCL's order (NULL: unchanged). */
int gpu_comm_allreduce_f32(struct gpu_comm *g, float *buf, size_t n);

/* An ordered sum of N device floats over rounds of contributions (see the top). */
struct gpu_sum {
    size_t n, slice;           /* floats in all; per rank (n rounded up to ranks, / ranks) */
    int ranks, rank;
    struct backend *be;        /* whose kernels copy and add (not owned) */
    float *stage;              /* (ranks, slice) device: the contribution, padded with zeros */
    float *recv;               /* (ranks, slice) device: every rank's piece of this rank's slice */
    float *acc;                /* (slice) device: this rank's slice of the sum */
    int started;
};

/* Prepares S for sums of N floats on backend BE among the ranks of G. 0, or -1 (device memory). */
int gpu_sum_init(struct gpu_sum *s, struct gpu_comm *g, struct backend *be, size_t n);
void gpu_sum_free(struct gpu_sum *s);
/* Starts a new sum (the next add sets it rather than adds). */
void gpu_sum_reset(struct gpu_sum *s);
/* Adds one round: the N device floats X of each of the first COUNT ranks, in rank order; every
 * rank calls it (a rank >= COUNT passes any X). 0, or -1 with the error set. */
int gpu_sum_add(struct gpu_sum *s, struct gpu_comm *g, const float *x, int count);
/* Writes the sum (N floats) to the device buffer OUT on every rank. 0, or -1 with the error set. */
int gpu_sum_result(struct gpu_sum *s, struct gpu_comm *g, float *out);

#endif
