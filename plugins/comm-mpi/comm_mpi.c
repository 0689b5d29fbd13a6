/* comm_mpi.c: the MPI communication module (bin/nmt-comm-mpi.so, ABI in ../comm.h). Collectives on
 * MPI_COMM_WORLD with errors returned, not fatal; sizes beyond INT_MAX are sent in a derived type
 * (collectives) or in pieces (bcast, send, recv). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm.h"

struct nmt_cctx {
    int rank, size;
    char err[MPI_MAX_ERROR_STRING + 128];
};

#define PIECE ((size_t)1 << 30)

static int fail(nmt_cctx *c, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(c->err, sizeof c->err, "%s: %s", what, msg);
    return -1;
}

static nmt_cctx *comm_open(const char **err)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        *err = "MPI_Init_thread failed";
        return NULL;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    nmt_cctx *c = calloc(1, sizeof *c);
    if (!c) {
        *err = "out of memory";
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    return c;
}

static void comm_close(nmt_cctx *c)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
    free(c);
}

static const char *comm_last_error(nmt_cctx *c) { return c->err; }
static int comm_rank(nmt_cctx *c) { return c->rank; }
static int comm_size(nmt_cctx *c) { return c->size; }

/* Sets *TYPE and *COUNT so that COUNT elements of TYPE are BYTES bytes with COUNT <= INT_MAX;
 * 0, or -1 when no such unit divides BYTES. *OWNED says whether *TYPE must be freed. */
static int byte_type(nmt_cctx *c, size_t bytes, MPI_Datatype *type, int *count, int *owned)
{
    *owned = 0;
    if (bytes <= INT_MAX) {
        *type = MPI_BYTE, *count = (int)bytes;
        return 0;
    }
    size_t unit = (size_t)1 << 16;
    while (unit > 1 && (bytes % unit || bytes / unit > INT_MAX))
        unit >>= 1;
    if (bytes % unit || bytes / unit > INT_MAX) {
        snprintf(c->err, sizeof c->err, "message of %zu bytes too large", bytes);
        return -1;
    }
    if (MPI_Type_contiguous((int)unit, MPI_BYTE, type) != MPI_SUCCESS || MPI_Type_commit(type) != MPI_SUCCESS) {
        snprintf(c->err, sizeof c->err, "cannot make an MPI datatype of %zu bytes", unit);
        return -1;
    }
    *count = (int)(bytes / unit), *owned = 1;
    return 0;
}

static int comm_allgather(nmt_cctx *c, const void *send, void *recv, size_t bytes)
{
    MPI_Datatype t;
    int n, owned;
    if (byte_type(c, bytes, &t, &n, &owned) < 0)
        return -1;
    int rc = MPI_Allgather(send, n, t, recv, n, t, MPI_COMM_WORLD);
    if (owned)
        MPI_Type_free(&t);
    return rc == MPI_SUCCESS ? 0 : fail(c, "MPI_Allgather", rc);
}

static int comm_alltoall(nmt_cctx *c, const void *send, void *recv, size_t bytes)
{
    MPI_Datatype t;
    int n, owned;
    if (byte_type(c, bytes, &t, &n, &owned) < 0)
        return -1;
    int rc = MPI_Alltoall(send, n, t, recv, n, t, MPI_COMM_WORLD);
    if (owned)
        MPI_Type_free(&t);
    return rc == MPI_SUCCESS ? 0 : fail(c, "MPI_Alltoall", rc);
}

static int comm_bcast(nmt_cctx *c, void *buf, size_t bytes, int root)
{
    for (size_t off = 0; off < bytes || off == 0; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(c, "MPI_Bcast", rc);
        if (bytes == 0)
            break;
    }
    return 0;
}

static int comm_send(nmt_cctx *c, const void *buf, size_t bytes, int dest, int tag)
{
    for (size_t off = 0; off < bytes || off == 0; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        int rc = MPI_Send((const char *)buf + off, (int)n, MPI_BYTE, dest, tag, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(c, "MPI_Send", rc);
        if (bytes == 0)
            break;
    }
    return 0;
}

static int comm_recv(nmt_cctx *c, void *buf, size_t bytes, int src, int tag)
{
    for (size_t off = 0; off < bytes || off == 0; off += PIECE) {
        size_t n = bytes - off < PIECE ? bytes - off : PIECE;
        MPI_Status st;
        int rc = MPI_Recv((char *)buf + off, (int)n, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st);
        if (rc != MPI_SUCCESS)
            return fail(c, "MPI_Recv", rc);
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != n) {
            snprintf(c->err, sizeof c->err, "MPI_Recv: %d bytes from rank %d where %zu were expected", got, src, n);
            return -1;
        }
        if (bytes == 0)
            break;
    }
    return 0;
}

static int comm_allreduce_f32(nmt_cctx *c, float *buf, size_t n)
{
    for (size_t off = 0; off < n; off += PIECE / sizeof(float)) {
        size_t k = n - off < PIECE / sizeof(float) ? n - off : PIECE / sizeof(float);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return fail(c, "MPI_Allreduce", rc);
    }
    return 0;
}

struct nmt_creq {
    MPI_Request r;
};

static int comm_ialltoall(nmt_cctx *c, const void *send, void *recv, size_t bytes, nmt_creq **req)
{
    MPI_Datatype t;
    int n, owned;
    nmt_creq *q = malloc(sizeof *q);
    if (!q) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    if (byte_type(c, bytes, &t, &n, &owned) < 0) {
        free(q);
        return -1;
    }
    int rc = MPI_Ialltoall(send, n, t, recv, n, t, MPI_COMM_WORLD, &q->r);
    if (owned) /* freed when the pending collective no longer needs it */
        MPI_Type_free(&t);
    if (rc != MPI_SUCCESS) {
        free(q);
        return fail(c, "MPI_Ialltoall", rc);
    }
    *req = q;
    return 0;
}

static int comm_test(nmt_cctx *c, nmt_creq *q, int *done)
{
    int flag = 0;
    int rc = MPI_Test(&q->r, &flag, MPI_STATUS_IGNORE);
    *done = rc == MPI_SUCCESS && flag;
    if (rc != MPI_SUCCESS || flag)
        free(q);
    return rc == MPI_SUCCESS ? 0 : fail(c, "MPI_Test", rc);
}

static int comm_wait(nmt_cctx *c, nmt_creq *q)
{
    int rc = MPI_Wait(&q->r, MPI_STATUS_IGNORE);
    free(q);
    return rc == MPI_SUCCESS ? 0 : fail(c, "MPI_Wait", rc);
}

static void comm_abort(nmt_cctx *c, int code)
{
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code);
}

static struct nmt_comm table = {
    .abi_major = NMT_COMM_ABI_MAJOR,
    .abi_minor = NMT_COMM_ABI_MINOR,
    .name = "mpi",
    .open = comm_open,
    .close = comm_close,
    .last_error = comm_last_error,
    .rank = comm_rank,
    .size = comm_size,
    .allgather = comm_allgather,
    .alltoall = comm_alltoall,
    .bcast = comm_bcast,
    .send = comm_send,
    .recv = comm_recv,
    .allreduce_f32 = comm_allreduce_f32,
    .abort = comm_abort,
    .ialltoall = comm_ialltoall,
    .test = comm_test,
    .wait = comm_wait,
};

__attribute__((visibility("default"))) const struct nmt_comm *nmt_comm_entry(void)
{
    static char desc[MPI_MAX_LIBRARY_VERSION_STRING + 16];
    if (!table.description) {
        int len = 0;
        MPI_Get_library_version(desc, &len);
        char *nl = strchr(desc, '\n');
        if (nl)
            *nl = 0;
        char *comma = strchr(desc, ',');
        if (comma)
            *comma = 0;
        table.description = desc;
    }
    return &table;
}
