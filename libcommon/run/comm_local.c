/* comm_local.c: ranks forked on one machine, collectives through shared memory (see comm_local.h).
 *
 * A collective moves its bytes in chunks through the shared area: every rank writes its part of a
 * chunk into its cells, all meet at a turn, every rank reads what it needs, and all meet again
 * before the cells are reused. A turn: each rank r > 0 sends a byte to rank 0 and waits for one
 * back; rank 0 receives a byte from each and then answers each, over a socket pair per rank (sent
 * with MSG_NOSIGNAL: a rank whose peer has ended gets an error, not SIGPIPE). The system calls
 * order the shared memory accesses between the processes. */
#include "run/comm_local.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { LOCAL_MAX_RANKS = 256 };
#define AREA_BYTES ((size_t)16 << 20) /* the shared area */

struct nmt_cctx {
    int rank, size;
    char *area;          /* AREA_BYTES shared by all ranks */
    int *fd;             /* rank 0: rank r's socket (index r > 0); rank r > 0: rank 0's (index 0) */
    pid_t *pid;          /* rank 0: rank r's process (index r > 0) */
    int *ended;          /* rank 0: rank r's status is already known (reaped) */
    int *status;         /* rank 0: its wait status when ended */
    char err[160];
};

static int fail(nmt_cctx *c, const char *fmt, int a, int b)
{
    snprintf(c->err, sizeof c->err, fmt, a, b);
    return -1;
}

/* Says how rank R's process ended (wait status ST). */
static void describe_end(char *out, size_t len, int r, int st)
{
    if (WIFSIGNALED(st))
        snprintf(out, len, "rank %d was killed by signal %d", r, WTERMSIG(st));
    else
        snprintf(out, len, "rank %d ended with status %d", r, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Rank 0: rank R closed its socket; records how it ended. */
static int peer_gone(nmt_cctx *c, int r)
{
    if (!c->ended[r] && waitpid(c->pid[r], &c->status[r], 0) == c->pid[r])
        c->ended[r] = 1;
    if (c->ended[r])
        describe_end(c->err, sizeof c->err, r, c->status[r]);
    else
        fail(c, "rank %d left the job", r, 0);
    return -1;
}

/* Sends or receives the one byte of a turn on FD; 0, or -1 (the other end is gone). */
static int turn_io(int fd, int sending)
{
    char b = 't';
    for (;;) {
        ssize_t k = sending ? send(fd, &b, 1, MSG_NOSIGNAL) : recv(fd, &b, 1, 0);
        if (k == 1)
            return 0;
        if (k < 0 && errno == EINTR)
            continue;
        return -1;
    }
}

/* Every rank meets here; 0, or -1 when a rank has ended. */
static int turn(nmt_cctx *c)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (c->rank) {
        if (turn_io(c->fd[0], 1) < 0 || turn_io(c->fd[0], 0) < 0)
            return fail(c, "rank 0 left the job (rank %d waited for it)", c->rank, 0);
    } else {
        for (int r = 1; r < c->size; r++)
            if (turn_io(c->fd[r], 0) < 0)
                return peer_gone(c, r);
        for (int r = 1; r < c->size; r++)
            if (turn_io(c->fd[r], 1) < 0)
                return peer_gone(c, r);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return 0;
}

/* Bytes of a cell when the area is cut into CELLS cells (a multiple of 64). */
static size_t cell_bytes(int cells)
{
    return AREA_BYTES / (size_t)cells / 64 * 64;
}

static int local_allgather(nmt_cctx *c, const void *send, void *recv, size_t bytes)
{
    size_t cb = cell_bytes(c->size);
    for (size_t off = 0; off < bytes; off += cb) {
        size_t k = bytes - off < cb ? bytes - off : cb;
        memcpy(c->area + (size_t)c->rank * cb, (const char *)send + off, k);
        if (turn(c) < 0)
            return -1;
        for (int q = 0; q < c->size; q++)
            memcpy((char *)recv + (size_t)q * bytes + off, c->area + (size_t)q * cb, k);
        if (turn(c) < 0)
            return -1;
    }
    return 0;
}

static int local_alltoall(nmt_cctx *c, const void *send, void *recv, size_t bytes)
{
    size_t n = (size_t)c->size, cb = cell_bytes(c->size * c->size);
    for (size_t off = 0; off < bytes; off += cb) {
        size_t k = bytes - off < cb ? bytes - off : cb;
        for (size_t j = 0; j < n; j++) /* cell (rank, j): what this rank sends to j */
            memcpy(c->area + ((size_t)c->rank * n + j) * cb, (const char *)send + j * bytes + off, k);
        if (turn(c) < 0)
            return -1;
        for (size_t q = 0; q < n; q++)
            memcpy((char *)recv + q * bytes + off, c->area + (q * n + (size_t)c->rank) * cb, k);
        if (turn(c) < 0)
            return -1;
    }
    return 0;
}

static int local_bcast(nmt_cctx *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size)
        return fail(c, "no rank %d among %d", root, c->size);
    size_t cb = cell_bytes(1);
    for (size_t off = 0; off < bytes; off += cb) {
        size_t k = bytes - off < cb ? bytes - off : cb;
        if (c->rank == root)
            memcpy(c->area, (char *)buf + off, k);
        if (turn(c) < 0)
            return -1;
        if (c->rank != root)
            memcpy((char *)buf + off, c->area, k);
        if (turn(c) < 0)
            return -1;
    }
    return 0;
}

/* Every rank adds the ranks' chunks in rank order: the same bits on every rank. */
static int local_allreduce_f32(nmt_cctx *c, float *buf, size_t n)
{
    size_t cf = cell_bytes(c->size) / sizeof(float);
    for (size_t off = 0; off < n; off += cf) {
        size_t k = n - off < cf ? n - off : cf;
        memcpy(c->area + (size_t)c->rank * cf * sizeof(float), buf + off, k * sizeof(float));
        if (turn(c) < 0)
            return -1;
        const float *cell = (const float *)(void *)c->area;
        for (size_t i = 0; i < k; i++) {
            float s = cell[i];
            for (size_t q = 1; q < (size_t)c->size; q++)
                s += cell[q * cf + i];
            buf[off + i] = s;
        }
        if (turn(c) < 0)
            return -1;
    }
    return 0;
}

static int local_p2p(nmt_cctx *c)
{
    return fail(c, "point-to-point messages are not available between local ranks (rank %d)", c->rank, 0);
}

static int local_send(nmt_cctx *c, const void *buf, size_t bytes, int dest, int tag)
{
    (void)buf, (void)bytes, (void)dest, (void)tag;
    return local_p2p(c);
}

static int local_recv(nmt_cctx *c, void *buf, size_t bytes, int src, int tag)
{
    (void)buf, (void)bytes, (void)src, (void)tag;
    return local_p2p(c);
}

static nmt_cctx *local_open(const char **err)
{
    *err = "local ranks are started by comm_local_fork";
    return NULL;
}

static void free_ctx(nmt_cctx *c)
{
    for (int r = 0; r < c->size; r++)
        if (c->fd[r] >= 0)
            close(c->fd[r]);
    if (c->area)
        munmap(c->area, AREA_BYTES);
    free(c->fd);
    free(c->pid);
    free(c->ended);
    free(c->status);
    free(c);
}

/* Rank 0: ends and reaps the ranks it started. */
static void end_children(nmt_cctx *c)
{
    for (int r = 1; r < c->size; r++)
        if (c->pid[r] > 0 && !c->ended[r])
            kill(c->pid[r], SIGKILL);
    for (int r = 1; r < c->size; r++)
        if (c->pid[r] > 0 && !c->ended[r] && waitpid(c->pid[r], &c->status[r], 0) == c->pid[r])
            c->ended[r] = 1;
}

static void local_close(nmt_cctx *c)
{
    comm_local_close(c, NULL, 0);
}

static const char *local_last_error(nmt_cctx *c) { return c->err; }
static int local_rank(nmt_cctx *c) { return c->rank; }
static int local_size(nmt_cctx *c) { return c->size; }

/* Ends this rank with CODE; rank 0 ends the others first. */
static void local_abort(nmt_cctx *c, int code)
{
    if (c->rank == 0) {
        end_children(c);
        exit(code);
    }
    _exit(code); /* a child leaves the parent's stdio buffers and handlers alone */
}

static const struct nmt_comm local_table = {
    .abi_major = NMT_COMM_ABI_MAJOR,
    .abi_minor = 0,
    .name = "local",
    .description = "processes on this machine, shared memory",
    .open = local_open,
    .close = local_close,
    .last_error = local_last_error,
    .rank = local_rank,
    .size = local_size,
    .allgather = local_allgather,
    .alltoall = local_alltoall,
    .bcast = local_bcast,
    .send = local_send,
    .recv = local_recv,
    .allreduce_f32 = local_allreduce_f32,
    .abort = local_abort,
};

const struct nmt_comm *comm_local_table(void) { return &local_table; }

static nmt_cctx *new_ctx(int n)
{
    nmt_cctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->size = n;
    c->fd = malloc((size_t)n * sizeof *c->fd);
    c->pid = calloc((size_t)n, sizeof *c->pid);
    c->ended = calloc((size_t)n, sizeof *c->ended);
    c->status = calloc((size_t)n, sizeof *c->status);
    if (!c->fd || !c->pid || !c->ended || !c->status) {
        free(c->fd), free(c->pid), free(c->ended), free(c->status), free(c);
        return NULL;
    }
    for (int r = 0; r < n; r++)
        c->fd[r] = -1;
    return c;
}

/* In the child that is rank R: keeps its end of its socket pair (as index 0) and closes every other
 * (the pairs of SV made so far). */
static void become_child(nmt_cctx *c, int r, int (*sv)[2], pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* rank 0 ended before the signal was asked for */
        _exit(1);
    for (int q = 1; q < c->size; q++) {
        close(sv[q][0]);
        if (q != r)
            close(sv[q][1]);
    }
    c->rank = r;
    for (int q = 0; q < c->size; q++)
        c->fd[q] = -1;
    c->fd[0] = sv[r][1];
}

nmt_cctx *comm_local_fork(int n, const char **err)
{
    if (n < 2 || n > LOCAL_MAX_RANKS) {
        *err = "local ranks: between 2 and 256";
        return NULL;
    }
    nmt_cctx *c = new_ctx(n);
    int(*sv)[2] = calloc((size_t)n, sizeof *sv);
    if (!c || !sv) {
        *err = "out of memory";
        goto fail;
    }
    c->area = mmap(NULL, AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c->area == MAP_FAILED) {
        c->area = NULL;
        *err = "cannot map the shared memory area";
        goto fail;
    }
    int made = 1;
    for (; made < n; made++)
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[made]) < 0) {
            *err = "cannot make the sockets between the ranks";
            goto close_socks;
        }
    pid_t parent = getpid();
    fflush(NULL); /* no buffered output is written twice */
    for (int r = 1; r < n; r++) {
        pid_t p = fork();
        if (p < 0) {
            *err = "cannot fork the ranks";
            end_children(c);
            goto close_socks;
        }
        if (p == 0) {
            become_child(c, r, sv, parent);
            free(sv);
            return c;
        }
        c->pid[r] = p;
    }
    for (int r = 1; r < n; r++) {
        close(sv[r][1]);
        c->fd[r] = sv[r][0];
    }
    free(sv);
    return c;
close_socks:
    for (int r = 1; r < made; r++)
        close(sv[r][0]), close(sv[r][1]);
fail:
    free(sv);
    if (c)
        free_ctx(c);
    return NULL;
}

int comm_local_close(nmt_cctx *c, char *why, size_t why_len)
{
    int rc = 0;
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) { /* a rank still running sees its socket close and ends */
            close(c->fd[r]);
            c->fd[r] = -1;
        }
        for (int r = 1; r < c->size; r++) {
            if (!c->ended[r] && waitpid(c->pid[r], &c->status[r], 0) == c->pid[r])
                c->ended[r] = 1;
            if (rc == 0 && c->ended[r] && c->status[r] != 0) {
                if (why)
                    describe_end(why, why_len, r, c->status[r]);
                rc = -1;
            }
        }
    }
    free_ctx(c);
    return rc;
}
