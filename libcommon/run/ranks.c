/* ranks.c: loading the communication module and the collectives built on it (see ranks.h). */
#include "run/ranks.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../plugins/comm.h"
#include "base/util.h"
#include "run/backend_loader.h"
#include "run/comm_local.h"

struct comm {
    void *dl;
    const struct nmt_comm *k;
    nmt_cctx *ctx;
    int rank, size;
    int local;                 /* ranks forked by comm_open_local */
};

/* The number of ranks an MPI launcher announced, or 0 when none did. */
static long launcher_size(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return strtol(v, NULL, 10);
    }
    return 0;
}

static int check_table(const struct nmt_comm *k, const char *path)
{
    if (!k)
        return nmt_seterr("%s: nmt_comm_entry returned NULL", path);
    if (k->abi_major != NMT_COMM_ABI_MAJOR)
        return nmt_seterr("%s: communication ABI %u.%u, but this program needs %d.x", path, k->abi_major,
                          k->abi_minor, NMT_COMM_ABI_MAJOR);
    if (!k->open || !k->close || !k->last_error || !k->rank || !k->size || !k->allgather || !k->alltoall ||
        !k->bcast || !k->send || !k->recv || !k->allreduce_f32 || !k->abort)
        return nmt_seterr("%s: the communication table lacks a required slot", path);
    return 0;
}

static struct comm *load(const char *name)
{
    char file[64];
    snprintf(file, sizeof file, "nmt-comm-%s.so", name);
    char *path = plugin_find(file);
    if (!path)
        return NULL;
    struct comm *c = nmt_calloc(1, sizeof *c);
    if (!c) {
        free(path);
        return NULL;
    }
    /* RTLD_GLOBAL: MPI's own components are loaded later and resolve symbols of libmpi. */
    if (!(c->dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) {
        nmt_seterr("cannot load %s: %s", path, dlerror());
        goto fail;
    }
    nmt_comm_entry_fn entry = (nmt_comm_entry_fn)(uintptr_t)dlsym(c->dl, "nmt_comm_entry");
    if (!entry) {
        nmt_seterr("%s: no nmt_comm_entry symbol", path);
        goto fail;
    }
    c->k = entry();
    if (check_table(c->k, path) < 0)
        goto fail;
    const char *err = "unknown error";
    if (!(c->ctx = c->k->open(&err))) {
        nmt_seterr("%s: cannot join the job: %s", path, err);
        goto fail;
    }
    c->rank = c->k->rank(c->ctx);
    c->size = c->k->size(c->ctx);
    free(path);
    return c;
fail:
    if (c->dl)
        dlclose(c->dl);
    free(c);
    free(path);
    return NULL;
}

int comm_open(const char *want, struct comm **out)
{
    *out = NULL;
    const char *env = getenv("NMT_COMM");
    if (!want || !strcmp(want, "auto"))
        want = env && *env ? env : "auto";
    if (!strcmp(want, "none"))
        return 0;
    if (!strcmp(want, "auto")) {
        if (launcher_size() < 2)
            return 0;
        want = "mpi";
    }
    if (strcmp(want, "mpi") != 0)
        return nmt_seterr("unknown communication module '%s' (known: mpi, none, auto)", want);
    return (*out = load(want)) ? 0 : -1;
}

int comm_open_local(int n, struct comm **out)
{
    *out = NULL;
    if (n == 1)
        return 0;
    struct comm *c = nmt_calloc(1, sizeof *c);
    if (!c)
        return -1;
    const char *err = "unknown error";
    if (!(c->ctx = comm_local_fork(n, &err))) {
        free(c);
        return nmt_seterr("cannot start %d local ranks: %s", n, err);
    }
    c->k = comm_local_table();
    c->local = 1;
    c->rank = c->k->rank(c->ctx);
    c->size = c->k->size(c->ctx);
    *out = c;
    return 0;
}

int comm_close(struct comm *c)
{
    if (!c)
        return 0;
    int rc = 0;
    char why[160];
    if (c->local)
        rc = comm_local_close(c->ctx, why, sizeof why) < 0 ? nmt_seterr("%s", why) : 0;
    else
        c->k->close(c->ctx);
    /* the MPI library stays mapped: Open MPI cannot be unloaded and loaded again */
    free(c);
    return rc;
}

int comm_rank(const struct comm *c) { return c ? c->rank : 0; }
int comm_size(const struct comm *c) { return c ? c->size : 1; }
int comm_local_rank(const struct comm *c)
{
    if (!c)
        return 0;
    if (c->local)
        return c->rank;
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!v || !*v)
        v = getenv("MPI_LOCALRANKID");
    long r = v && *v ? strtol(v, NULL, 10) : 0;
    return r > 0 && r < 1 << 20 ? (int)r : 0;
}

int comm_local_threads(const struct comm *c)
{
    if (comm_size(c) < 2)
        return 0;
    const char *v = c->local ? NULL : getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!c->local && (!v || !*v))
        v = getenv("MPI_LOCALNRANKS");
    long local = v && *v ? strtol(v, NULL, 10) : comm_size(c), cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (local < 1)
        local = 1;
    return cores / local > 1 ? (int)(cores / local) : 1;
}

const char *comm_description(const struct comm *c) { return c && c->k->description ? c->k->description : ""; }

static int check(struct comm *c, int rc, const char *what)
{
    return rc == 0 ? 0 : nmt_seterr("rank %d: %s: %s", c->rank, what, c->k->last_error(c->ctx));
}

int comm_allgather(struct comm *c, const void *mine, void *all, size_t bytes)
{
    if (!c) {
        memmove(all, mine, bytes);
        return 0;
    }
    return check(c, c->k->allgather(c->ctx, mine, all, bytes), "allgather");
}

int comm_bcast(struct comm *c, void *buf, size_t bytes, int root)
{
    return c ? check(c, c->k->bcast(c->ctx, buf, bytes, root), "broadcast") : 0;
}

int comm_send(struct comm *c, const void *buf, size_t bytes, int dest, int tag)
{
    return c ? check(c, c->k->send(c->ctx, buf, bytes, dest, tag), "send") : nmt_seterr("send without ranks");
}

int comm_recv(struct comm *c, void *buf, size_t bytes, int src, int tag)
{
    return c ? check(c, c->k->recv(c->ctx, buf, bytes, src, tag), "receive") : nmt_seterr("receive without ranks");
}

int comm_allreduce_f32(struct comm *c, float *buf, size_t n)
{
    return c ? check(c, c->k->allreduce_f32(c->ctx, buf, n), "allreduce") : 0;
}

int comm_any(struct comm *c, int flag, int *any)
{
    int64_t v = flag != 0;
    if (comm_sum_i64(c, &v, 1) < 0)
        return -1;
    *any = v > 0;
    return 0;
}

/* Gathers COUNT values of SIZE bytes from every rank into a new array (ranks x COUNT x SIZE). */
static void *gather_all(struct comm *c, const void *v, int count, size_t size)
{
    size_t bytes = (size_t)count * size;
    char *all = nmt_malloc(bytes * (size_t)comm_size(c) + 1);
    if (all && comm_allgather(c, v, all, bytes) < 0) {
        free(all);
        return NULL;
    }
    return all;
}

int comm_sum_i64(struct comm *c, int64_t *v, int count)
{
    if (!c)
        return 0;
    int64_t *all = gather_all(c, v, count, sizeof *v);
    if (!all)
        return -1;
    for (int i = 0; i < count; i++) {
        v[i] = all[i];
        for (int r = 1; r < c->size; r++)
            v[i] += all[(size_t)r * count + i];
    }
    free(all);
    return 0;
}

void comm_abort(struct comm *c, int code)
{
    if (c && c->size > 1)
        c->k->abort(c->ctx, code);
}

int comm_can_start(const struct comm *c)
{
    return c && c->k->abi_minor >= 1 && c->k->ialltoall && c->k->test && c->k->wait;
}

int comm_ialltoall(struct comm *c, const void *send, void *recv, size_t bytes, struct comm_req **req)
{
    if (!comm_can_start(c))
        return nmt_seterr("the communication module cannot start collectives");
    nmt_creq *q = NULL;
    if (check(c, c->k->ialltoall(c->ctx, send, recv, bytes, &q), "all-to-all") < 0)
        return -1;
    *req = (struct comm_req *)q;
    return 0;
}

int comm_test(struct comm *c, struct comm_req *req, int *done)
{
    return check(c, c->k->test(c->ctx, (nmt_creq *)req, done), "all-to-all (test)");
}

int comm_wait(struct comm *c, struct comm_req *req)
{
    return check(c, c->k->wait(c->ctx, (nmt_creq *)req), "all-to-all (wait)");
}

int comm_sum_init(struct comm_sum *s, struct comm *c, size_t n, const size_t *ranges, int nb)
{
    memset(s, 0, sizeof *s);
    size_t whole[2] = {0, n}, p = (size_t)comm_size(c);
    if (!ranges)
        ranges = whole, nb = 1;
    s->n = n;
    s->nb = nb;
    if (nb < 1 || !(s->b = nmt_calloc((size_t)nb, sizeof *s->b)))
        return nb < 1 ? nmt_seterr("an ordered sum needs a bucket") : -1;
    size_t covered = 0;
    for (int i = 0; i < nb; i++) {
        struct comm_bucket *b = &s->b[i];
        b->off = ranges[2 * i];
        b->len = ranges[2 * i + 1];
        if (b->off > n || b->len > n - b->off) {
            nmt_seterr("bucket %d (%zu floats at %zu) lies outside the %zu floats", i, b->len, b->off, n);
            comm_sum_free(s);
            return -1;
        }
        b->slice = (b->len + p - 1) / p;
        b->acc_off = s->acc_len;
        s->acc_len += b->slice;
        covered += b->len;
    }
    if (covered != n) {
        comm_sum_free(s);
        return nmt_seterr("the buckets cover %zu floats, not %zu", covered, n);
    }
    for (int i = 0; i < nb; i++) /* N floats in all: no two buckets may share one */
        for (int j = i + 1; j < nb; j++)
            if (s->b[i].len && s->b[j].len && s->b[i].off < s->b[j].off + s->b[j].len &&
                s->b[j].off < s->b[i].off + s->b[i].len) {
                comm_sum_free(s);
                return nmt_seterr("buckets %d and %d overlap", i, j);
            }
    s->acc = nmt_calloc(s->acc_len + 1, sizeof(float));
    s->stage = nmt_calloc(s->acc_len * p + 1, sizeof(float));
    s->recv = nmt_calloc(s->acc_len * p + 1, sizeof(float));
    if (!s->acc || !s->stage || !s->recv) {
        comm_sum_free(s);
        return -1;
    }
    for (int i = 0; i < nb; i++) {
        s->b[i].stage = s->stage + s->b[i].acc_off * p;
        s->b[i].recv = s->recv + s->b[i].acc_off * p;
    }
    return 0;
}

void comm_sum_free(struct comm_sum *s)
{
    free(s->b);
    free(s->acc);
    free(s->stage);
    free(s->recv);
    memset(s, 0, sizeof *s);
}

void comm_sum_reset(struct comm_sum *s) { s->started = 0; }

float *comm_sum_stage(struct comm_sum *s, int b) { return s->b[b].stage; }

int comm_sum_post(struct comm_sum *s, struct comm *c, int i)
{
    struct comm_bucket *b = &s->b[i];
    if (b->posted)
        return nmt_seterr("bucket %d posted twice in one round", i);
    b->posted = 1;
    size_t bytes = b->slice * sizeof(float);
    if (!c) { /* one rank: its contribution is the round's */
        b->done = 1;
        return 0;
    }
    if (!comm_can_start(c)) {
        b->done = 1;
        return check(c, c->k->alltoall(c->ctx, b->stage, b->recv, bytes), "all-to-all");
    }
    return comm_ialltoall(c, b->stage, b->recv, bytes, &b->req);
}

int comm_sum_poll(struct comm_sum *s, struct comm *c, int *done)
{
    int n = 0;
    for (int i = 0; i < s->nb; i++) {
        struct comm_bucket *b = &s->b[i];
        if (b->posted && !b->done) {
            int rc = comm_test(c, b->req, &b->done);
            if (rc < 0 || b->done)
                b->req = NULL;
            if (rc < 0)
                return -1;
        }
        n += b->done;
    }
    if (done)
        *done = n;
    return 0;
}

int comm_sum_round(struct comm_sum *s, struct comm *c, int count)
{
    size_t p = (size_t)comm_size(c), me = (size_t)comm_rank(c);
    int rc = 0;
    for (int i = 0; i < s->nb; i++)
        if (!s->b[i].posted && comm_sum_post(s, c, i) < 0)
            rc = -1;
    for (int i = 0; i < s->nb; i++) { /* every started request is completed, even after an error */
        struct comm_bucket *b = &s->b[i];
        if (b->posted && !b->done && b->req && comm_wait(c, b->req) < 0)
            rc = -1;
        b->req = NULL;
        b->posted = b->done = 0;
    }
    if (rc < 0)
        return -1;
    for (int i = 0; i < s->nb; i++) {
        const struct comm_bucket *b = &s->b[i];
        size_t lo = me * b->slice, len = lo >= b->len ? 0 : b->len - lo < b->slice ? b->len - lo : b->slice;
        float *acc = s->acc + b->acc_off;
        const float *in = c ? b->recv : b->stage;
        for (int r = 0; r < count && (size_t)r < p; r++) {
            const float *v = in + (size_t)r * b->slice;
            if (!s->started && r == 0)
                memcpy(acc, v, len * sizeof(float));
            else
                for (size_t j = 0; j < len; j++)
                    acc[j] += v[j];
        }
    }
    if (count > 0)
        s->started = 1;
    return 0;
}

int comm_sum_add(struct comm_sum *s, struct comm *c, const float *x, int count)
{
    for (int i = 0; i < s->nb; i++)
        memcpy(s->b[i].stage, x + s->b[i].off, s->b[i].len * sizeof(float));
    return comm_sum_round(s, c, count);
}

int comm_sum_result(struct comm_sum *s, struct comm *c, float *out)
{
    size_t p = (size_t)comm_size(c);
    if (!s->started)
        memset(s->acc, 0, s->acc_len * sizeof(float));
    if (comm_allgather(c, s->acc, s->recv, s->acc_len * sizeof(float)) < 0)
        return -1;
    for (int i = 0; i < s->nb; i++) {
        const struct comm_bucket *b = &s->b[i];
        for (size_t r = 0; r < p; r++) {
            size_t lo = r * b->slice, len = lo >= b->len ? 0 : b->len - lo < b->slice ? b->len - lo : b->slice;
            memcpy(out + b->off + lo, s->recv + r * s->acc_len + b->acc_off, len * sizeof(float));
        }
    }
    return 0;
}
