/* gpu_comm.c: the device communication module's loader, its bootstrap through the host ranks, and
 * the ordered sum on the device (see gpu_comm.h). */
#include "run/gpu_comm.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/devcomm.h"
#include "base/util.h"

struct gpu_comm {
    const struct nmt_devcomm *k;
    nmt_dctx *ctx;
    int rank, size;
};

const char *gpu_comm_choose(const char *want, const char *backend, int ranks)
{
    if (!want || !strcmp(want, "auto"))
        return backend && !strcmp(backend, "cuda") && ranks > 1 ? "nccl" : "mpi";
    if (!strcmp(want, "mpi"))
        return "mpi";
    if (strcmp(want, "nccl") != 0)
        return nmt_seterr("unknown GPU communication '%s' (known: auto, nccl, mpi)", want), NULL;
    if (!backend || strcmp(backend, "cuda") != 0)
        return nmt_seterr("NCCL reduces gradients on NVIDIA GPUs: it needs --backend cuda, not %s",
                          backend ? backend : "none"), NULL;
    return "nccl";
}

/* Loads bin/nmt-comm-nccl.so's table; NULL with the error set. The module stays mapped (it may
 * hold the driver and NCCL, which are not made to be unloaded). */
static const struct nmt_devcomm *load_module(void)
{
    static const struct nmt_devcomm *k;
    if (k)
        return k;
    char *path = plugin_find("nmt-comm-nccl.so");
    if (!path)
        return NULL;
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        nmt_seterr("cannot load %s: %s", path, dlerror());
        free(path);
        return NULL;
    }
    nmt_devcomm_entry_fn entry = (nmt_devcomm_entry_fn)(uintptr_t)dlsym(dl, "nmt_devcomm_entry");
    const struct nmt_devcomm *t = entry ? entry() : NULL;
    if (!t)
        nmt_seterr("%s: no nmt_devcomm_entry symbol, or it returned NULL", path);
    else if (t->abi_major != NMT_DEVCOMM_ABI_MAJOR)
        nmt_seterr("%s: device communication ABI %u.%u, but this program needs %d.x", path, t->abi_major,
                   t->abi_minor, NMT_DEVCOMM_ABI_MAJOR);
    else if (!t->probe || !t->unique_id || !t->open || !t->close || !t->last_error || !t->alltoall ||
             !t->allgather || !t->allreduce_f32)
        nmt_seterr("%s: the device communication table lacks a required slot", path);
    else
        k = t;
    if (!k)
        dlclose(dl);
    free(path);
    return k;
}

/* Whether every rank of C says OK; with ranks that failed, the error names them. 0 or -1. */
static int agree(struct comm *c, int ok, const char *what)
{
    int any_failed = 0;
    if (comm_any(c, !ok, &any_failed) < 0)
        return -1;
    if (ok && any_failed)
        return nmt_seterr("rank %d: another rank could not %s", comm_rank(c), what);
    return ok ? 0 : -1;
}

int gpu_comm_open(struct comm *c, int device, struct gpu_comm **out)
{
    *out = NULL;
    const struct nmt_devcomm *k = load_module();
    int ok = k && k->probe(device) == 0;
    if (k && !ok)
        nmt_seterr("cannot start NCCL: %s", k->last_error(NULL));
    if (agree(c, ok, "start NCCL") < 0)
        return -1;
    /* rank 0's id, with its success, to every rank */
    struct { int32_t ok; uint32_t len; unsigned char id[NMT_DEVCOMM_ID_MAX]; } boot = {0, 0, {0}};
    if (comm_rank(c) == 0) {
        size_t len = 0;
        boot.ok = k->unique_id(boot.id, sizeof boot.id, &len) == 0;
        boot.len = (uint32_t)len;
        if (!boot.ok)
            nmt_seterr("cannot start NCCL: %s", k->last_error(NULL));
    }
    if (comm_bcast(c, &boot, sizeof boot, 0) < 0)
        return -1;
    if (!boot.ok)
        return comm_rank(c) == 0 ? -1 : nmt_seterr("rank 0 could not make the NCCL id");
    struct gpu_comm *g = nmt_calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->k = k;
    g->rank = comm_rank(c);
    g->size = comm_size(c);
    g->ctx = k->open(boot.id, boot.len, g->rank, g->size, device);
    if (!g->ctx)
        nmt_seterr("cannot start NCCL: %s", k->last_error(NULL));
    if (agree(c, g->ctx != NULL, "join the NCCL job") < 0) {
        gpu_comm_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gpu_comm_close(struct gpu_comm *g)
{
    if (!g)
        return;
    g->k->close(g->ctx);
    free(g);
}

const char *gpu_comm_description(const struct gpu_comm *g) { return g && g->k->description ? g->k->description : ""; }
int gpu_comm_rank(const struct gpu_comm *g) { return g ? g->rank : 0; }
int gpu_comm_size(const struct gpu_comm *g) { return g ? g->size : 1; }

static int check(struct gpu_comm *g, int rc, const char *what)
{
    return rc == 0 ? 0 : nmt_seterr("rank %d: %s: %s", g->rank, what, g->k->last_error(g->ctx));
}

static int bk(struct backend *be, int rc, const char *what)
{
    return rc == 0 ? 0 : nmt_seterr("%s: %s", what, be->ops.last_error(be->ctx));
}

int gpu_comm_alltoall(struct gpu_comm *g, struct backend *be, const void *send, void *recv, size_t bytes)
{
    if (!g)
        return bk(be, be->ops.copy(be->ctx, recv, send, bytes), "device copy");
    return check(g, g->k->alltoall(g->ctx, send, recv, bytes), "device all-to-all");
}

int gpu_comm_allgather(struct gpu_comm *g, struct backend *be, const void *send, void *recv, size_t bytes)
{
    if (!g)
        return bk(be, be->ops.copy(be->ctx, recv, send, bytes), "device copy");
    return check(g, g->k->allgather(g->ctx, send, recv, bytes), "device all-gather");
}

int gpu_comm_allreduce_f32(struct gpu_comm *g, float *buf, size_t n)
{
    return g ? check(g, g->k->allreduce_f32(g->ctx, buf, n), "device all-reduce") : 0;
}

int gpu_sum_init(struct gpu_sum *s, struct gpu_comm *g, struct backend *be, size_t n)
{
    memset(s, 0, sizeof *s);
    s->be = be;
    s->n = n;
    s->ranks = gpu_comm_size(g);
    s->rank = gpu_comm_rank(g);
    s->slice = (n + (size_t)s->ranks - 1) / (size_t)s->ranks;
    size_t all = s->slice * (size_t)s->ranks;
    const char *what = "the device gradient sum";
    if (!(s->stage = be->ops.alloc(be->ctx, (all + 1) * sizeof(float))) ||
        !(s->recv = be->ops.alloc(be->ctx, (all + 1) * sizeof(float))) ||
        !(s->acc = be->ops.alloc(be->ctx, (s->slice + 1) * sizeof(float)))) {
        nmt_seterr("cannot allocate %s (%zu MB): %s", what, 3 * all * sizeof(float) >> 20, be->ops.last_error(be->ctx));
        gpu_sum_free(s);
        return -1;
    }
    if (bk(be, be->ops.memset_zero(be->ctx, s->stage, (all + 1) * sizeof(float)), "memset") < 0) {
        gpu_sum_free(s);
        return -1;
    }
    return 0;
}

void gpu_sum_free(struct gpu_sum *s)
{
    if (s->be) {
        s->be->ops.free(s->be->ctx, s->stage);
        s->be->ops.free(s->be->ctx, s->recv);
        s->be->ops.free(s->be->ctx, s->acc);
    }
    memset(s, 0, sizeof *s);
}

void gpu_sum_reset(struct gpu_sum *s) { s->started = 0; }

int gpu_sum_add(struct gpu_sum *s, struct gpu_comm *g, const float *x, int count)
{
    struct backend *be = s->be;
    size_t bytes = s->slice * sizeof(float);
    /* the stage's padding past N stays zero from init */
    if (bk(be, be->ops.copy(be->ctx, s->stage, x, s->n * sizeof(float)), "device copy") < 0 ||
        gpu_comm_alltoall(g, be, s->stage, s->recv, bytes) < 0)
        return -1;
    for (int r = 0; r < count && r < s->ranks; r++) {
        const float *v = s->recv + (size_t)r * s->slice;
        int rc = !s->started && r == 0 ? be->ops.copy(be->ctx, s->acc, v, bytes)
                                       : be->ops.add(be->ctx, s->acc, s->acc, v, s->slice);
        if (bk(be, rc, "device sum") < 0)
            return -1;
    }
    if (count > 0)
        s->started = 1;
    return 0;
}

int gpu_sum_result(struct gpu_sum *s, struct gpu_comm *g, float *out)
{
    struct backend *be = s->be;
    if (!s->started && bk(be, be->ops.memset_zero(be->ctx, s->acc, s->slice * sizeof(float)), "memset") < 0)
        return -1;
    if (gpu_comm_allgather(g, be, s->acc, s->recv, s->slice * sizeof(float)) < 0)
        return -1;
    return bk(be, be->ops.copy(be->ctx, out, s->recv, s->n * sizeof(float)), "device copy");
}
