/* pool.c: nmt-serve's decoding pool: the queue shared by the requests and the workers that batch
 * its sentences through search_batch (see pool.h). */
#include "serve/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "io/safetensors.h"
#include "run/backend_loader.h"
#include "nn/checkpoint.h"
#include "nn/infer.h"
#include "nn/model.h"
#include "nn/shortlist.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

#define MAX_AUTO_JOBS 4

/* A request waiting for its sentences. */
struct pending {
    pthread_cond_t done;       /* signalled (under the pool's lock) when left reaches 0 */
    size_t left;               /* sentences not decoded yet */
    int failed;
    char err[512];             /* the first failure's message */
};

/* One queued sentence. */
struct item {
    struct item *next;
    struct pending *req;
    const uint32_t *ids;       /* (n) source ids without EOS, owned by the request */
    int n;
    int beam, nbest;
    double t;                  /* arrival, monotonic seconds */
    struct search_result *res; /* where its result goes */
};

/* One worker: a backend context and its inference state (over worker 0's weights when shared). */
struct worker {
    struct serve_pool *p;
    struct backend *be;
    struct model *m;           /* NULL when it computes with worker 0's */
    struct infer *in;
    pthread_t tid;
    int started;
    struct item **batch;       /* (max_queue) the batch being decoded */
    const uint32_t **src;      /* (max_queue) */
    int *len;                  /* (max_queue) */
    struct search_result *res; /* (max_queue) */
};

struct serve_pool {
    struct serve_opts o;
    struct st_file *ckpt;      /* until every worker has loaded the weights */
    struct model_config cfg;
    struct vocab *v;
    struct shortlist *sl;
    struct tokenizer tok;      /* text to ids and back, under tok_lock */
    pthread_mutex_t tok_lock;
    struct worker *w;          /* (nw) */
    int nw, threads;
    int host;                  /* the backend has worker threads (the cpu): infer_host_batch_sentences */
    pthread_mutex_t lock;      /* the queue, the pending requests and the counters */
    pthread_cond_t work;       /* sentences queued, or stop (monotonic clock) */
    struct item *head, **tail;
    size_t queued;
    int stop;
    struct serve_stats st;
    int locks;                 /* the mutexes and condition initialised */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- workers ---- */

/* Opens worker I's backend context with THREADS threads, and its inference state: worker 0 loads
 * the weights, the others share them where the backend allows, else load their own. 0 or -1. */
static int worker_open(struct serve_pool *p, int i, int threads)
{
    struct worker *w = &p->w[i];
    struct nmt_backend_opts bo = {.size = sizeof bo, .threads = threads};
    w->p = p;
    if (!(w->be = backend_open(p->o.backend, &bo)))
        return -1;
    struct infer_load_opts lo = {.cfg = &p->cfg, .path = p->o.model, .flags = INFER_INVARIANT | INFER_DISCARD,
                                 .precision = p->o.precision, .sl = p->sl};
    int share = i > 0 && backend_can_share(w->be, p->w[0].be);
    if (!(w->in = infer_load(w->be, share ? p->w[0].in : NULL, &p->ckpt, 0, &lo, &w->m)))
        return -1;
    size_t cap = p->o.max_queue ? p->o.max_queue : 1;
    w->batch = calloc(cap, sizeof *w->batch);
    w->src = calloc(cap, sizeof *w->src);
    w->len = calloc(cap, sizeof *w->len);
    w->res = calloc(cap, sizeof *w->res);
    return w->batch && w->src && w->len && w->res ? 0 : nmt_seterr("out of memory");
}

/* Frees what worker W holds. */
static void worker_free(struct worker *w)
{
    infer_free(w->in);
    model_free(w->m);
    backend_close(w->be);
    free(w->batch);
    free(w->src);
    free(w->len);
    free(w->res);
    memset(w, 0, sizeof *w);
}

/* Picks the batch of the queue's head into W->batch (under the lock): the queued sentences with the
 * head's options, in arrival order, within the budget. Returns their number; *FULL: the budget
 * left a sentence out. */
static int pick(struct serve_pool *p, struct worker *w, int *full)
{
    const struct item *h = p->head;
    int nb = 0, mx = 0;
    size_t cap = p->o.max_batch ? p->o.max_batch
                 : p->host ? (size_t)infer_host_batch_sentences(&p->cfg, 1, p->o.precision, h->beam) : 0;
    *full = 0;
    for (struct item *it = p->head; it; it = it->next) {
        if (it->beam != h->beam || it->nbest != h->nbest)
            continue;
        int l = it->n + 1, m = l > mx ? l : mx;
        if (nb > 0 && ((long)(nb + 1) * m > p->o.max_tokens || (cap && (size_t)nb >= cap))) {
            *full = 1;
            break;
        }
        w->batch[nb++] = it;
        mx = m;
    }
    return nb;
}

/* Takes W's NB picked items out of the queue (under the lock). */
static void unlink_batch(struct serve_pool *p, struct worker *w, int nb)
{
    struct item **pp = &p->head;
    int k = 0;
    p->tail = &p->head;
    while (*pp) {
        if (k < nb && *pp == w->batch[k]) {
            *pp = (*pp)->next;
            k++;
        } else {
            p->tail = &(*pp)->next;
            pp = &(*pp)->next;
        }
    }
    p->queued -= (size_t)nb;
}

/* Decodes W's batch of NB items (without the lock); 0, or -1 with the error set. */
static int decode(struct worker *w, int nb)
{
    struct search_opts so = w->p->o.so;
    so.beam = w->batch[0]->beam;
    so.nbest = w->batch[0]->nbest;
    for (int i = 0; i < nb; i++) {
        w->src[i] = w->batch[i]->ids;
        w->len[i] = w->batch[i]->n;
    }
    memset(w->res, 0, (size_t)nb * sizeof *w->res);
    return search_batch(&w->in, 1, &so, nb, w->src, w->len, w->res);
}

/* Hands W's decoded batch of NB items (RC: decode's) to their requests, under the lock. */
static void finish(struct serve_pool *p, struct worker *w, int nb, int rc, double secs)
{
    int b = 0;
    while (b < SERVE_BATCH_BUCKETS - 1 && nb > (1 << b))
        b++;
    p->st.batches++;
    p->st.batch_bucket[b]++;
    p->st.decode_seconds += secs;
    for (int i = 0; i < nb; i++) {
        struct item *it = w->batch[i];
        if (rc < 0 && !it->req->failed) {
            it->req->failed = 1;
            snprintf(it->req->err, sizeof it->req->err, "%s", nmt_errmsg());
        }
        if (rc == 0) {
            *it->res = w->res[i];
            p->st.sentences++;
            p->st.src_tokens += (uint64_t)it->n;
            p->st.out_tokens += w->res[i].nhyp ? w->res[i].hyp[0].n : 0;
        }
        if (--it->req->left == 0)
            pthread_cond_signal(&it->req->done);
    }
}

/* Sets TS to monotonic time T. */
static void to_timespec(double t, struct timespec *ts)
{
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L)
        ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

/* A worker: takes batches off the queue and decodes them until the pool stops and the queue is empty. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct serve_pool *p = w->p;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (!p->head)
            break;
        int full, nb = pick(p, w, &full);
        double deadline = p->head->t + p->o.max_wait_ms * 1e-3;
        if (!full && !p->stop && now_s() < deadline) {
            struct timespec ts;
            to_timespec(deadline, &ts);
            pthread_cond_timedwait(&p->work, &p->lock, &ts);
            continue;
        }
        unlink_batch(p, w, nb);
        pthread_mutex_unlock(&p->lock);
        double t0 = now_s();
        int rc = decode(w, nb);
        pthread_mutex_lock(&p->lock);
        finish(p, w, nb, rc, now_s() - t0);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- opening and closing ---- */

/* Opens the workers (see worker_open), as many as the options and the backend ask. 0 or -1. */
static int workers_open(struct serve_pool *p)
{
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    p->threads = p->o.threads ? p->o.threads : nc > 0 ? (int)nc : 1;
    int jobs = p->o.jobs ? p->o.jobs : p->threads < MAX_AUTO_JOBS ? p->threads : MAX_AUTO_JOBS;
    if (!(p->w = calloc((size_t)jobs, sizeof *p->w)))
        return nmt_seterr("out of memory");
    for (int i = 0; i < jobs; i++) {
        int t = p->threads / jobs + (i < p->threads % jobs);
        p->nw = i + 1;
        if (worker_open(p, i, t > 0 ? t : 1) < 0)
            return -1;
        /* an accelerator (no worker threads) decodes one batch at a time unless --jobs says otherwise */
        struct nmt_backend_props pr;
        const struct backend *be = p->w[0].be;
        if (i == 0)
            p->host = be->ops.props(be->ctx, &pr) == 0 && pr.threads > 0;
        if (i == 0 && !p->o.jobs && jobs > 1 && !p->host)
            jobs = 1;
    }
    return 0;
}

/* Initialises the locks and the queue. 0 or -1. */
static int locks_init(struct serve_pool *p)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
        pthread_cond_init(&p->work, &ca)) {
        pthread_condattr_destroy(&ca);
        return nmt_seterr("cannot create a condition variable");
    }
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->tok_lock, NULL);
    p->tail = &p->head;
    p->locks = 1;
    return 0;
}

struct serve_pool *serve_pool_open(const struct serve_opts *o)
{
    struct serve_pool *p = calloc(1, sizeof *p);
    if (!p) {
        nmt_seterr("out of memory");
        return NULL;
    }
    p->o = *o;
    if (locks_init(p) < 0 || checkpoint_open_model(o->model, &p->ckpt, &p->cfg, &p->v) < 0 ||
        (o->shortlist && !(p->sl = shortlist_read(p->ckpt, o->model, p->cfg.vocab))) ||
        tokenizer_init(&p->tok, p->v, p->v->normalize) < 0 || workers_open(p) < 0) {
        serve_pool_close(p);
        return NULL;
    }
    st_free(p->ckpt);
    p->ckpt = NULL;
    p->st.jobs = p->nw;
    p->st.threads = p->threads;
    for (int i = 0; i < p->nw; i++) {
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            nmt_seterr("cannot start a worker thread: %s", strerror(errno));
            serve_pool_close(p);
            return NULL;
        }
        p->w[i].started = 1;
    }
    return p;
}

void serve_pool_close(struct serve_pool *p)
{
    if (!p)
        return;
    if (p->locks) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->lock);
    }
    for (int i = 0; i < p->nw; i++)
        if (p->w[i].started)
            pthread_join(p->w[i].tid, NULL);
    for (int i = p->nw - 1; i >= 0; i--) /* the first last: the others may compute with its weights */
        worker_free(&p->w[i]);
    free(p->w);
    st_free(p->ckpt);
    shortlist_free(p->sl);
    tokenizer_free(&p->tok);
    vocab_free(p->v);
    if (p->locks) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->tok_lock);
    }
    free(p);
}

void serve_pool_stats(struct serve_pool *p, struct serve_stats *s)
{
    pthread_mutex_lock(&p->lock);
    *s = p->st;
    s->queued = p->queued;
    pthread_mutex_unlock(&p->lock);
}

/* ---- requests ---- */

/* Tokenizes the sentences of R into IDS/N (clipped to the model's length), under the tokenizer's
 * lock. 0, or SERVE_BAD_REQUEST or -1 with the error set. */
static int encode(struct serve_pool *p, const struct serve_request *r, uint32_t **ids, int *n)
{
    int rc = 0;
    pthread_mutex_lock(&p->tok_lock);
    for (size_t i = 0; i < r->n && rc == 0; i++) {
        uint32_t cnt = 0, cap = 0;
        if (r->len[i] == 0)
            continue;
        rc = tokenizer_encode(&p->tok, r->text[i], r->len[i], &ids[i], &cnt, &cap);
        if (rc == TOKENIZER_EBADTEXT) {
            nmt_seterr("'text'[%zu]: %s", i, nmt_errmsg());
            rc = SERVE_BAD_REQUEST;
        }
        n[i] = (int)cnt < p->cfg.max_len - 1 ? (int)cnt : p->cfg.max_len - 1;
    }
    pthread_mutex_unlock(&p->tok_lock);
    return rc;
}

/* Queues the NI ITEMS of request Q and waits for them. 0; SERVE_BUSY; or -1 with the error set. */
static int enqueue_wait(struct serve_pool *p, struct pending *q, struct item *items, size_t ni)
{
    pthread_mutex_lock(&p->lock);
    if (p->queued + ni > p->o.max_queue) {
        size_t queued = p->queued;
        pthread_mutex_unlock(&p->lock);
        return nmt_seterr("the queue is full (%zu of --max-queue %zu sentences waiting)", queued, p->o.max_queue),
               SERVE_BUSY;
    }
    double t = now_s();
    for (size_t i = 0; i < ni; i++) {
        items[i].req = q;
        items[i].t = t;
        *p->tail = &items[i];
        p->tail = &items[i].next;
    }
    p->queued += ni;
    q->left = ni;
    if (ni)
        pthread_cond_broadcast(&p->work);
    while (q->left)
        pthread_cond_wait(&q->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return q->failed ? nmt_seterr("%s", q->err) : 0;
}

int serve_pool_translate(struct serve_pool *p, const struct serve_request *r, struct nmt_buf *out)
{
    size_t n = r->n ? r->n : 1, ni = 0;
    uint32_t **ids = calloc(n, sizeof *ids);
    int *len = calloc(n, sizeof *len);
    struct item *items = calloc(n, sizeof *items);
    struct search_result *res = calloc(n, sizeof *res);
    struct pending q = {.left = 0};
    int rc = ids && len && items && res ? encode(p, r, ids, len) : nmt_seterr("out of memory");
    if (rc == 0 && pthread_cond_init(&q.done, NULL) != 0)
        rc = nmt_seterr("cannot create a condition variable");
    else if (rc == 0) {
        for (size_t i = 0; i < r->n; i++)
            if (r->len[i])
                items[ni++] = (struct item){.ids = ids[i], .n = len[i], .beam = r->beam, .nbest = r->nbest,
                                            .res = &res[i]};
        rc = enqueue_wait(p, &q, items, ni);
        pthread_cond_destroy(&q.done);
    }
    if (rc == 0) {
        pthread_mutex_lock(&p->tok_lock);
        rc = serve_answer(r, res, &p->tok, out);
        pthread_mutex_unlock(&p->tok_lock);
    }
    for (size_t i = 0; i < r->n && ids; i++) {
        free(ids[i]);
        if (res)
            search_result_free(&res[i]);
    }
    free(ids);
    free(len);
    free(items);
    free(res);
    return rc;
}
