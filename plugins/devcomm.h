/* devcomm.h: the ABI between nmt programs and a device communication module (bin/nmt-comm-NAME.so
 * exporting nmt_devcomm_entry; today NAME is nccl), which moves bytes between the GPUs of the ranks
 * without a trip through host memory. The programs link neither NCCL nor the CUDA driver: the host
 * loads the module with dlopen, and the module opens libnccl.so.2 and libcuda.so.1 with dlopen when
 * first asked. See man/nmt-scale.7, GPU RANKS.
 *
 * BOOTSTRAP
 *   The module knows nothing of MPI. Every rank calls probe(DEVICE); rank 0 calls unique_id and
 *   the host broadcasts the bytes through the host communication module (plugins/comm.h); every
 *   rank then calls open with them, its rank, the number of ranks and its device (ncclGetUniqueId,
 *   broadcast, ncclCommInitRank, as Marian and llm.c do).
 *
 * CONTRACT
 *   Buffers are device pointers of the compute backend (the cuda plugin allocates them in the
 *   device's primary context, which the module uses too). Every collective first waits for all work
 *   queued on the device (cuCtxSynchronize), runs on the module's own stream and returns when it has
 *   completed, so the backend's later kernels see its results. Collectives move bytes and never
 *   combine them, except allreduce_f32 (the library's order: fast, not reproducible across rank
 *   counts). Slots return 0 or -1 with last_error(ctx) set; probe, unique_id and open fail with
 *   last_error(NULL) set to one line (no driver, no device, no libnccl). A module never prints or
 *   exits. */
#ifndef NMT_DEVCOMM_H
#define NMT_DEVCOMM_H

#include <stddef.h>
#include <stdint.h>

#define NMT_DEVCOMM_ABI_MAJOR 1
#define NMT_DEVCOMM_ABI_MINOR 0
/* The most bytes of a unique id (NCCL_UNIQUE_ID_BYTES is 128). */
#define NMT_DEVCOMM_ID_MAX 256

typedef struct nmt_dctx nmt_dctx;

struct nmt_devcomm {
    uint32_t abi_major;      /* NMT_DEVCOMM_ABI_MAJOR the module was built with */
    uint32_t abi_minor;      /* NMT_DEVCOMM_ABI_MINOR the module was built with */
    const char *name;        /* "nccl" */
    const char *description; /* one line: the library (and its version once loaded) */

    /* Loads the libraries and checks that DEVICE exists. 0, or -1 with last_error(NULL) set. */
    int (*probe)(int device);
    /* Writes a new job's id (at most CAP bytes) to ID and its length to *LEN; on rank 0 only.
     * 0, or -1 with last_error(NULL) set. */
    int (*unique_id)(void *id, size_t cap, size_t *len);
    /* Joins the job of ID as RANK of SIZE on DEVICE (collective); a context, or NULL with
     * last_error(NULL) set. */
    nmt_dctx *(*open)(const void *id, size_t len, int rank, int size, int device);
    /* Leaves the job and frees CTX; close(NULL) is a no-op. */
    void (*close)(nmt_dctx *ctx);
    /* The last error on CTX, or (CTX NULL) of the last failed probe, unique_id or open. Never NULL. */
    const char *(*last_error)(nmt_dctx *ctx);

    /* Rank r sends SEND[j x BYTES ..] to rank j, which receives it at RECV[r x BYTES ..]. */
    int (*alltoall)(nmt_dctx *ctx, const void *send, void *recv, size_t bytes);
    /* Every rank sends BYTES from SEND; RECV (size x BYTES) receives rank r's at r x BYTES. */
    int (*allgather)(nmt_dctx *ctx, const void *send, void *recv, size_t bytes);
    /* BUF (N floats) becomes the sum over ranks, in the library's order. */
    int (*allreduce_f32)(nmt_dctx *ctx, float *buf, size_t n);
    /* New slots are appended here, bumping NMT_DEVCOMM_ABI_MINOR. */
};

typedef const struct nmt_devcomm *(*nmt_devcomm_entry_fn)(void);
/* The one exported symbol of a device communication module: its table. */
const struct nmt_devcomm *nmt_devcomm_entry(void);

#endif
