/* comm.h: the ABI between nmt programs and a communication module (bin/nmt-comm-NAME.so), loaded
 * with dlopen when a program runs as one of several ranks (under mpirun). The programs do not link
 * MPI or NCCL: the module does. See man/nmt-scale.7.
 *
 * VERSIONING
 *   A module exports one symbol, nmt_comm_entry, returning a table whose header says the ABI it
 *   was built for; the host refuses a table whose abi_major differs from NMT_COMM_ABI_MAJOR or
 *   whose required slots are NULL. New slots are appended, bumping NMT_COMM_ABI_MINOR.
 *
 * CONTRACT
 *   Every slot but open, rank, size and last_error is collective unless marked point-to-point: all
 *   ranks call it in the same order with the same sizes. Slots return 0 on success or -1 with
 *   last_error() set; a module never exits the process, except abort, which ends every rank.
 *   Sizes are in bytes and may exceed INT_MAX (the module splits them). Buffers are host memory.
 *   Collectives move bytes and never combine them, except allreduce_f32, whose summation order is
 *   the library's own (fast, not reproducible across rank counts).
 *
 * NON-BLOCKING COLLECTIVES (ABI 1.1)
 *   ialltoall starts what alltoall does and returns at once with a request; the buffers belong to
 *   the module until test reports the request done or wait returns. Started collectives count in
 *   the collective order like blocking ones: every rank starts them in the same order, and a
 *   blocking collective may follow them before they complete. Open MPI makes no progress on its own
 *   (no progress thread by default): the caller polls with test between pieces of its work. */
#ifndef NMT_COMM_H
#define NMT_COMM_H

#include <stddef.h>
#include <stdint.h>

#define NMT_COMM_ABI_MAJOR 1
#define NMT_COMM_ABI_MINOR 1

typedef struct nmt_cctx nmt_cctx;
/* A collective started and not yet completed (ABI 1.1). */
typedef struct nmt_creq nmt_creq;

struct nmt_comm {
    /* ---- header: present in every ABI version ---- */
    uint32_t abi_major;      /* NMT_COMM_ABI_MAJOR the module was built with */
    uint32_t abi_minor;      /* NMT_COMM_ABI_MINOR the module was built with */
    const char *name;        /* "mpi" */
    const char *description; /* one line: the library and its version */

    /* Joins the job (MPI_Init_thread); returns a context or NULL (the error goes to *ERR, static text). */
    nmt_cctx *(*open)(const char **err);
    /* Leaves the job (MPI_Finalize); collective. */
    void (*close)(nmt_cctx *ctx);
    /* The last error on CTX (static to CTX, valid until the next call). */
    const char *(*last_error)(nmt_cctx *ctx);
    /* This process's rank (0 .. size-1) and the number of ranks. */
    int (*rank)(nmt_cctx *ctx);
    int (*size)(nmt_cctx *ctx);

    /* Every rank sends BYTES from SEND; RECV (size x BYTES) receives rank r's at r x BYTES. */
    int (*allgather)(nmt_cctx *ctx, const void *send, void *recv, size_t bytes);
    /* Rank r sends SEND[j x BYTES ..] to rank j, which receives it at RECV[r x BYTES ..]. */
    int (*alltoall)(nmt_cctx *ctx, const void *send, void *recv, size_t bytes);
    /* Copies ROOT's BYTES at BUF to every rank's BUF. */
    int (*bcast)(nmt_cctx *ctx, void *buf, size_t bytes, int root);
    /* Point-to-point: sends BYTES to rank DEST / receives exactly BYTES from rank SRC (same TAG). */
    int (*send)(nmt_cctx *ctx, const void *buf, size_t bytes, int dest, int tag);
    int (*recv)(nmt_cctx *ctx, void *buf, size_t bytes, int src, int tag);
    /* BUF (N floats) becomes the sum over ranks, in the library's order. */
    int (*allreduce_f32)(nmt_cctx *ctx, float *buf, size_t n);
    /* Ends every rank of the job with exit status CODE (MPI_Abort); does not return. */
    void (*abort)(nmt_cctx *ctx, int code);

    /* ---- ABI 1.1 (the host checks abi_minor >= 1 before calling these) ---- */
    /* Starts the all-to-all of alltoall; *REQ receives the request. 0, or -1 (nothing started). */
    int (*ialltoall)(nmt_cctx *ctx, const void *send, void *recv, size_t bytes, nmt_creq **req);
    /* Progresses communication; *DONE becomes 1 when REQ has completed (REQ is then freed and must
     * not be used again), else 0. 0, or -1 (REQ freed: the collective failed). */
    int (*test)(nmt_cctx *ctx, nmt_creq *req, int *done);
    /* Waits until REQ completes and frees it. 0, or -1 (REQ freed: the collective failed). */
    int (*wait)(nmt_cctx *ctx, nmt_creq *req);
    /* New slots are appended here, bumping NMT_COMM_ABI_MINOR. */
};

typedef const struct nmt_comm *(*nmt_comm_entry_fn)(void);
/* The one exported symbol of a communication module: its table. */
const struct nmt_comm *nmt_comm_entry(void);

#endif
