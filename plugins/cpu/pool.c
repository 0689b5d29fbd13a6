/* pool.c: a fixed pthread pool running static parallel-for loops (see cpu.h). */
#include <stdlib.h>

#include "cpu.h"

struct pool {
    int n;              /* threads including the caller */
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t gen;       /* incremented per job */
    int pending, quit;
    /* the current job */
    pool_fn fn;
    void *arg;
    int64_t total, chunk;
    int nchunks;
};

struct worker_arg { struct pool *p; int id; };

static void run_chunk(struct pool *p, int id)
{
    if (id >= p->nchunks)
        return;
    int64_t lo = id * p->chunk, hi = lo + p->chunk;
    if (hi > p->total)
        hi = p->total;
    if (lo < hi)
        p->fn(p->arg, lo, hi, id);
}

static void *worker(void *a)
{
    struct worker_arg wa = *(struct worker_arg *)a;
    struct pool *p = wa.p;
    free(a);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, wa.id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

struct pool *pool_new(int nthreads)
{
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = nthreads < 1 ? 1 : nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->tid = calloc((size_t)p->n, sizeof *p->tid);
    if (!p->tid) {
        free(p);
        return NULL;
    }
    for (int i = 1; i < p->n; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa || (wa->p = p, wa->id = i, pthread_create(&p->tid[i], NULL, worker, wa) != 0)) {
            free(wa);
            p->n = i; /* join those started */
            pool_free(p);
            return NULL;
        }
    }
    return p;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}

void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *arg)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t nch = (n + grain - 1) / grain;
    if (nch > p->n)
        nch = p->n;
    if (nch <= 1) {
        fn(arg, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->total = n;
    p->chunk = (n + nch - 1) / nch;
    p->nchunks = (int)nch;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
