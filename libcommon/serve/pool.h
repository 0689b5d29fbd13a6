/* pool.h: nmt-serve's decoding pool: one model read from its checkpoint, --jobs workers computing
 * with one copy of its weights (each on its own backend context, as nmt-decode's jobs), and one
 * bounded queue of sentences shared by every request.
 *
 * A request's sentences are tokenized and queued; each worker takes the oldest sentence and the
 * queued sentences with the same search options after it, in arrival order, up to the token budget
 * (sentences times the longest, EOS included, at most max_tokens) and max_batch sentences, and
 * decodes them together with search_batch. A batch that is not full waits for more sentences until
 * its oldest has waited max_wait_ms. Decoding is batch-invariant (nn/infer.h), so a sentence
 * translates the same whatever it is batched with: exactly as nmt-decode translates it. */
#ifndef NMT_SERVE_POOL_H
#define NMT_SERVE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "nn/search.h"
#include "serve/request.h"

struct serve_opts {
    const char *model;         /* checkpoint path */
    const char *backend;       /* NULL: $NMT_BACKEND, else auto */
    uint32_t precision;        /* infer_new's (infer_precision_parse) */
    int shortlist;             /* the checkpoint's vocabulary shortlist (nn/shortlist.h) */
    int threads, jobs;         /* 0: all cores; 0: the threads, at most 4 (1 on an accelerator) */
    long max_tokens;           /* token budget of a batch */
    size_t max_batch;          /* sentences of a batch at most (0: on the cpu infer_host_batch_sentences,
                                * on an accelerator as the budget allows) */
    int max_wait_ms;           /* how long a batch that is not full waits */
    size_t max_queue;          /* sentences waiting at most */
    struct search_opts so;     /* alpha and length limit (beam and nbest come with each request) */
};

/* Counters since the pool opened. */
#define SERVE_BATCH_BUCKETS 10 /* batches of at most 1, 2, 4, ..., 256 sentences, and more */
struct serve_stats {
    uint64_t sentences;        /* decoded (empty ones not counted) */
    uint64_t src_tokens;       /* their source tokens, without EOS */
    uint64_t out_tokens;       /* tokens of their best translations, without EOS */
    uint64_t batches;
    uint64_t batch_bucket[SERVE_BATCH_BUCKETS]; /* batches by size (not cumulative) */
    double decode_seconds;     /* summed over the workers */
    size_t queued;             /* sentences waiting now */
    int jobs, threads;         /* workers and threads in all */
};

struct serve_pool;

/* serve_pool_translate's status when the queue has no room for the request's sentences. */
#define SERVE_BUSY 503

/* Reads the checkpoint of O, opens the workers' backend contexts, loads the weights and starts the
 * workers. Returns the pool, or NULL with the error set. */
struct serve_pool *serve_pool_open(const struct serve_opts *o);
/* Translates the sentences of R through the queue (waiting for their batches) and writes the answer
 * (serve_answer) into OUT. 0; SERVE_BUSY when the queue has no room for them (nothing queued);
 * SERVE_BAD_REQUEST when a sentence cannot be tokenized; or -1 on a decoding failure; the error
 * set. Safe to call from any number of threads at once. */
int serve_pool_translate(struct serve_pool *p, const struct serve_request *r, struct nmt_buf *out);
/* Copies the pool's counters into S. */
void serve_pool_stats(struct serve_pool *p, struct serve_stats *s);
/* Lets the workers finish every queued sentence (the requests waiting get their answers), stops
 * them and frees P; serve_pool_close(NULL) is a no-op. No request may start during or after it. */
void serve_pool_close(struct serve_pool *p);

#endif
