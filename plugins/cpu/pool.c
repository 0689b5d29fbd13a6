/* pool.c: a fixed pthread pool running static parallel-for loops (see cpu.h).
 *
 * Handing out a job and waiting for it are a spin on an atomic first, for about POOL_SPIN_NS, then
 * a sleep on a condition variable: in decoding the next job comes within microseconds, and a
 * futex sleep and wake-up per kernel call cost more than many small kernels. A pool whose spinning
 * is turned off (pool_set_spin) sleeps at once: the cpu backend does so once it calls OpenBLAS,
 * whose own threads need the cores between the pool's jobs. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "cpu.h"

#define POOL_SPIN_NS 50000 /* how long an idle worker or the waiting caller spins before sleeping */

struct pool {
    int n;                  /* threads including the caller */
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    _Atomic uint64_t gen;   /* incremented per job (release: the job's fields are set before) */
    _Atomic int pending;    /* workers that have not finished the current job */
    _Atomic int spin;       /* spin before sleeping */
    int quit;               /* under mu */
    int sleepers;           /* workers asleep on work (under mu) */
    int caller_waiting;     /* the caller asleep on done (under mu) */
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

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins while no job after SEEN has been posted, for at most POOL_SPIN_NS (not at all when the pool
 * does not spin); returns 1 if there is still none (the worker then sleeps), 0 if one came. */
static int spin_while_gen(struct pool *p, uint64_t seen)
{
    if (!atomic_load_explicit(&p->spin, memory_order_relaxed))
        return atomic_load_explicit(&p->gen, memory_order_acquire) == seen;
    int64_t t0 = now_ns();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen)
            return 0;
        cpu_relax();
        if ((i & 63) == 63 && now_ns() - t0 > POOL_SPIN_NS)
            return 1;
    }
}

/* Spins while workers have not finished the current job, likewise; returns 1 if some still have
 * not (the caller then sleeps), 0 if all have. */
static int spin_while_pending(struct pool *p)
{
    if (!atomic_load_explicit(&p->spin, memory_order_relaxed))
        return atomic_load_explicit(&p->pending, memory_order_acquire) > 0;
    int64_t t0 = now_ns();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) <= 0)
            return 0;
        cpu_relax();
        if ((i & 63) == 63 && now_ns() - t0 > POOL_SPIN_NS)
            return 1;
    }
}

static void *worker(void *a)
{
    struct worker_arg wa = *(struct worker_arg *)a;
    struct pool *p = wa.p;
    free(a);
    uint64_t seen = 0;
    for (;;) {
        if (spin_while_gen(p, seen)) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (atomic_load(&p->gen) == seen && !p->quit)
                pthread_cond_wait(&p->work, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
        }
        pthread_mutex_lock(&p->mu);
        int quit = p->quit;
        pthread_mutex_unlock(&p->mu);
        if (quit)
            return NULL;
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        run_chunk(p, wa.id);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            if (p->caller_waiting)
                pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

struct pool *pool_new(int nthreads)
{
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = nthreads < 1 ? 1 : nthreads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->spin, 1);
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
    atomic_fetch_add(&p->gen, 1); /* ends the spinning of the workers */
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

void pool_set_spin(struct pool *p, int spin)
{
    if (p)
        atomic_store(&p->spin, spin != 0);
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
    /* no worker reads the job's fields until gen moves: all have finished the previous job */
    p->fn = fn;
    p->arg = arg;
    p->total = n;
    p->chunk = (n + nch - 1) / nch;
    p->nchunks = (int)nch;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (p->sleepers)
        pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    if (spin_while_pending(p)) {
        pthread_mutex_lock(&p->mu);
        p->caller_waiting = 1;
        while (atomic_load(&p->pending) > 0)
            pthread_cond_wait(&p->done, &p->mu);
        p->caller_waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
}
