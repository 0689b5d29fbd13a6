/* nmt-serve: a translation server over HTTP (nmt-serve(1)). HTTP is libmicrohttpd's, one thread
 * per connection; JSON is libcommon/serve/request.c's; the sentences of all requests are batched
 * and decoded by libcommon/serve/pool.c through the search of nmt-decode. With --client, the
 * client of such a server instead (libcommon/serve/client.c, through libcurl). */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/utf8.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "io/lines.h"
#include "nn/infer.h"
#include "serve/client.h"
#include "serve/pool.h"
#include "serve/request.h"

struct opts {
    struct serve_opts so;      /* the pool's */
    struct serve_limits lim;   /* the requests' */
    const char *listen, *port_file;
    size_t max_body;
    unsigned conns, timeout;   /* timeout 0: 30 s, or 300 s in client mode */
    int quiet;
    struct serve_client_opts client; /* client mode when client.url is set */
    size_t batch_lines;
    struct { /* the table's numbers, copied into the fields above by apply_sizes */
        uint64_t max_tokens, max_batch, max_queue, max_request_sentences, max_line_bytes, max_body, conns, timeout,
            batch_lines;
    } u;
};

/* ---- the server ---- */

/* A pool and the requests using it (a reload swaps the server's for a new one). */
struct pool_ref {
    struct serve_pool *p;
    int refs;
};

static const int codes[] = {200, 400, 404, 405, 413, 500, 503};
#define NCODES (sizeof codes / sizeof *codes)
static const double lat_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NLAT (sizeof lat_le / sizeof *lat_le)

struct server {
    const struct opts *o;
    struct MHD_Daemon *d;
    pthread_mutex_t mu;        /* everything below */
    struct pool_ref *cur;
    struct serve_stats retired; /* counters of the pools replaced by reloads */
    uint64_t requests[NCODES + 1]; /* answered, by status (the last: others) */
    uint64_t lat[NLAT + 1];    /* POST /translate answers by duration (not cumulative) */
    double lat_sum;
    uint64_t reloads;
    int in_flight;             /* requests between their first call and their completion */
    int stopping;
};

/* One request's state, from its first call to its completion. */
struct conn {
    struct nmt_buf body;
    int too_big;               /* the body went over --max-body-bytes (the rest is dropped) */
    double t0;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct pool_ref *pool_acquire(struct server *s)
{
    pthread_mutex_lock(&s->mu);
    struct pool_ref *r = s->cur;
    r->refs++;
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Adds the counters of A to S. */
static void stats_add(struct serve_stats *s, const struct serve_stats *a)
{
    s->sentences += a->sentences;
    s->src_tokens += a->src_tokens;
    s->out_tokens += a->out_tokens;
    s->batches += a->batches;
    for (int i = 0; i < SERVE_BATCH_BUCKETS; i++)
        s->batch_bucket[i] += a->batch_bucket[i];
    s->decode_seconds += a->decode_seconds;
}

/* Drops a reference to R; the last one closes its pool and keeps its counters. */
static void pool_release(struct server *s, struct pool_ref *r)
{
    pthread_mutex_lock(&s->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    struct serve_stats st;
    serve_pool_stats(r->p, &st);
    serve_pool_close(r->p);
    free(r);
    pthread_mutex_lock(&s->mu);
    stats_add(&s->retired, &st);
    pthread_mutex_unlock(&s->mu);
}

/* Opens a pool on the checkpoint and makes it the server's. 0, or -1 with the error set. */
static int pool_load(struct server *s)
{
    struct pool_ref *r = calloc(1, sizeof *r);
    if (!r)
        return nmt_seterr("out of memory");
    if (!(r->p = serve_pool_open(&s->o->so))) {
        free(r);
        return -1;
    }
    r->refs = 1;
    pthread_mutex_lock(&s->mu);
    struct pool_ref *old = s->cur;
    s->cur = r;
    if (old)
        s->reloads++;
    pthread_mutex_unlock(&s->mu);
    if (old)
        pool_release(s, old);
    return 0;
}

/* ---- answers ---- */

/* Queues the answer STATUS with BODY (LEN bytes) of TYPE and counts it. MHD_YES or MHD_NO. */
static enum MHD_Result reply(struct server *s, struct MHD_Connection *c, const struct conn *k, int translate,
                             unsigned status, const char *type, const void *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, translate ? "POST" : "GET, HEAD");
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping) /* no further requests on this connection */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    double dt = now_s() - k->t0;
    size_t ci = 0, li = 0;
    while (ci < NCODES && codes[ci] != (int)status)
        ci++;
    while (li < NLAT && dt > lat_le[li])
        li++;
    pthread_mutex_lock(&s->mu);
    s->requests[ci]++;
    if (translate) {
        s->lat[li]++;
        s->lat_sum += dt;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static const char JSON_TYPE[] = "application/json";

/* Answers STATUS with {"error": MSG}. */
static enum MHD_Result reply_error(struct server *s, struct MHD_Connection *c, const struct conn *k, int translate,
                                   unsigned status, const char *msg)
{
    struct nmt_buf b = {0};
    enum MHD_Result rc = serve_error_json(msg, &b) < 0 ? MHD_NO
                                                        : reply(s, c, k, translate, status, JSON_TYPE, b.data, b.len);
    nmt_buf_free(&b);
    return rc;
}

/* POST /translate. */
static enum MHD_Result translate(struct server *s, struct MHD_Connection *c, struct conn *k)
{
    char msg[128];
    if (k->too_big) {
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes (--max-body-bytes)", s->o->max_body);
        return reply_error(s, c, k, 1, MHD_HTTP_CONTENT_TOO_LARGE, msg);
    }
    struct serve_request r;
    int rc = serve_request_parse(k->body.len ? (const char *)k->body.data : "", k->body.len, &s->o->lim, &r);
    struct nmt_buf out = {0};
    if (rc == 0) {
        struct pool_ref *p = pool_acquire(s);
        rc = serve_pool_translate(p->p, &r, &out);
        pool_release(s, p);
    }
    serve_request_free(&r);
    enum MHD_Result ok = rc == 0 ? reply(s, c, k, 1, MHD_HTTP_OK, JSON_TYPE, out.data, out.len)
                                 : reply_error(s, c, k, 1, rc > 0 ? (unsigned)rc : MHD_HTTP_INTERNAL_SERVER_ERROR,
                                               nmt_errmsg());
    nmt_buf_free(&out);
    return ok;
}

/* Writes the metrics in Prometheus's text format to F. */
static void metrics_write(struct server *s, FILE *f)
{
    struct pool_ref *p = pool_acquire(s);
    struct serve_stats st;
    serve_pool_stats(p->p, &st);
    pool_release(s, p);
    pthread_mutex_lock(&s->mu);
    stats_add(&st, &s->retired);
    fprintf(f, "# HELP nmt_serve_requests_total HTTP requests answered, by status code.\n"
               "# TYPE nmt_serve_requests_total counter\n");
    for (size_t i = 0; i <= NCODES; i++)
        if (i < NCODES)
            fprintf(f, "nmt_serve_requests_total{code=\"%d\"} %llu\n", codes[i], (unsigned long long)s->requests[i]);
        else
            fprintf(f, "nmt_serve_requests_total{code=\"other\"} %llu\n", (unsigned long long)s->requests[i]);
    fprintf(f, "# HELP nmt_serve_requests_in_flight Requests received and not yet answered.\n"
               "# TYPE nmt_serve_requests_in_flight gauge\nnmt_serve_requests_in_flight %d\n", s->in_flight);
    fprintf(f, "# HELP nmt_serve_request_duration_seconds Time from receiving a POST /translate to answering it.\n"
               "# TYPE nmt_serve_request_duration_seconds histogram\n");
    uint64_t cum = 0;
    for (size_t i = 0; i <= NLAT; i++) {
        cum += s->lat[i];
        if (i < NLAT)
            fprintf(f, "nmt_serve_request_duration_seconds_bucket{le=\"%g\"} %llu\n", lat_le[i],
                    (unsigned long long)cum);
    }
    fprintf(f, "nmt_serve_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    fprintf(f, "nmt_serve_request_duration_seconds_sum %.6f\nnmt_serve_request_duration_seconds_count %llu\n",
            s->lat_sum, (unsigned long long)cum);
    fprintf(f, "# HELP nmt_serve_reloads_total Models read again on SIGHUP.\n# TYPE nmt_serve_reloads_total counter\n"
               "nmt_serve_reloads_total %llu\n", (unsigned long long)s->reloads);
    pthread_mutex_unlock(&s->mu);
    fprintf(f, "# HELP nmt_serve_sentences_total Sentences translated (empty ones not counted).\n"
               "# TYPE nmt_serve_sentences_total counter\nnmt_serve_sentences_total %llu\n"
               "# HELP nmt_serve_source_tokens_total Source tokens of the sentences translated.\n"
               "# TYPE nmt_serve_source_tokens_total counter\nnmt_serve_source_tokens_total %llu\n"
               "# HELP nmt_serve_output_tokens_total Tokens of the best translations.\n"
               "# TYPE nmt_serve_output_tokens_total counter\nnmt_serve_output_tokens_total %llu\n"
               "# HELP nmt_serve_queue_sentences Sentences waiting for a batch.\n"
               "# TYPE nmt_serve_queue_sentences gauge\nnmt_serve_queue_sentences %zu\n"
               "# HELP nmt_serve_decode_seconds_total Time the workers spent decoding.\n"
               "# TYPE nmt_serve_decode_seconds_total counter\nnmt_serve_decode_seconds_total %.6f\n"
               "# HELP nmt_serve_workers Batches decoded at once (--jobs).\n"
               "# TYPE nmt_serve_workers gauge\nnmt_serve_workers %d\n",
            (unsigned long long)st.sentences, (unsigned long long)st.src_tokens, (unsigned long long)st.out_tokens,
            st.queued, st.decode_seconds, st.jobs);
    fprintf(f, "# HELP nmt_serve_batch_sentences Sentences per decoded batch.\n"
               "# TYPE nmt_serve_batch_sentences histogram\n");
    cum = 0;
    for (int i = 0; i < SERVE_BATCH_BUCKETS - 1; i++) {
        cum += st.batch_bucket[i];
        fprintf(f, "nmt_serve_batch_sentences_bucket{le=\"%d\"} %llu\n", 1 << i, (unsigned long long)cum);
    }
    fprintf(f, "nmt_serve_batch_sentences_bucket{le=\"+Inf\"} %llu\nnmt_serve_batch_sentences_sum %llu\n"
               "nmt_serve_batch_sentences_count %llu\n",
            (unsigned long long)st.batches, (unsigned long long)st.sentences, (unsigned long long)st.batches);
}

/* GET /metrics. */
static enum MHD_Result metrics(struct server *s, struct MHD_Connection *c, const struct conn *k)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return MHD_NO;
    metrics_write(s, f);
    enum MHD_Result rc = fclose(f) == 0 ? reply(s, c, k, 0, MHD_HTTP_OK, "text/plain; version=0.0.4", text, len)
                                        : MHD_NO;
    free(text);
    return rc;
}

/* The page of GET /: a text box, a button, the translation; no external assets. */
static const char PAGE[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>nmt-serve</title>\n"
    "<style>body{font-family:sans-serif;max-width:48em;margin:2em auto}textarea{width:100%;height:6em}"
    "#out{white-space:pre-wrap;border:1px solid #ccc;padding:.5em;min-height:3em}</style></head><body>\n"
    "<h1>nmt-serve</h1>\n<p>One sentence a line.</p>\n"
    "<textarea id=\"src\" autofocus></textarea>\n<p><button id=\"go\">Translate</button></p>\n"
    "<div id=\"out\"></div>\n<script>\n"
    "document.getElementById('go').onclick = async function () {\n"
    "  const out = document.getElementById('out');\n"
    "  const lines = document.getElementById('src').value.split('\\n');\n"
    "  try {\n"
    "    const r = await fetch('/translate', {method: 'POST', headers: {'Content-Type': 'application/json'},\n"
    "                                         body: JSON.stringify({text: lines})});\n"
    "    const j = await r.json();\n"
    "    out.textContent = r.ok ? j.translations.join('\\n') : 'error: ' + j.error;\n"
    "  } catch (e) { out.textContent = 'error: ' + e; }\n"
    "};\n</script>\n</body></html>\n";

/* Answers a complete request. */
static enum MHD_Result route(struct server *s, struct MHD_Connection *c, const char *url, const char *method,
                             struct conn *k)
{
    int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    if (!strcmp(url, "/translate"))
        return !strcmp(method, MHD_HTTP_METHOD_POST)
                   ? translate(s, c, k)
                   : reply_error(s, c, k, 1, MHD_HTTP_METHOD_NOT_ALLOWED, "/translate takes POST");
    int known = !strcmp(url, "/") || !strcmp(url, "/health") || !strcmp(url, "/metrics");
    if (!known)
        return reply_error(s, c, k, 0, MHD_HTTP_NOT_FOUND, "no such resource (try POST /translate)");
    if (!get)
        return reply_error(s, c, k, 0, MHD_HTTP_METHOD_NOT_ALLOWED, "this resource takes GET");
    if (!strcmp(url, "/"))
        return reply(s, c, k, 0, MHD_HTTP_OK, "text/html; charset=utf-8", PAGE, sizeof PAGE - 1);
    if (!strcmp(url, "/metrics"))
        return metrics(s, c, k);
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    static const char ok[] = "{\"status\":\"ok\"}\n", stop[] = "{\"status\":\"stopping\"}\n";
    return stopping ? reply(s, c, k, 0, MHD_HTTP_SERVICE_UNAVAILABLE, JSON_TYPE, stop, sizeof stop - 1)
                    : reply(s, c, k, 0, MHD_HTTP_OK, JSON_TYPE, ok, sizeof ok - 1);
}

/* libmicrohttpd's request handler: called first with the headers, then with each piece of the body,
 * then once more to answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    struct server *s = cls;
    struct conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        k->t0 = now_s();
        *con_cls = k;
        pthread_mutex_lock(&s->mu);
        s->in_flight++;
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    if (*size) {
        if (!k->too_big && (k->body.len + *size > s->o->max_body || nmt_buf_append(&k->body, data, *size) < 0)) {
            k->too_big = 1;
            nmt_buf_free(&k->body);
        }
        *size = 0;
        return MHD_YES;
    }
    return route(s, c, url, method, k);
}

/* libmicrohttpd's end of a request (answered, or the connection closed or timed out). */
static void on_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    struct server *s = cls;
    struct conn *k = *con_cls;
    if (!k)
        return;
    nmt_buf_free(&k->body);
    free(k);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    pthread_mutex_unlock(&s->mu);
}

/* ---- options ---- */

/* --precision: infer_precision_parse's names into the uint32_t FIELD. */
static int parse_precision(const char *opt, const char *arg, void *field)
{
    (void)opt;
    if (infer_precision_parse(arg, field) < 0)
        return nmt_usage_error("%s", nmt_errmsg()), -1;
    return 0;
}

#define OFF(field) offsetof(struct opts, field)
#define MANY UINT64_C(100000000)
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_STR, "model", 'm', "FILE", OFF(so.model), "checkpoint written by nmt-train (required)")},
    {OPTION(OT_STR, "listen", 0, "HOST:PORT", OFF(listen),
            "address to listen on (default 127.0.0.1:8080; port 0: any free port)"),
     .def.s = "127.0.0.1:8080"},
    {OPTION(OT_STR, "port-file", 0, "FILE", OFF(port_file), "write the address listened on to FILE once listening")},
    {OPTION(OT_INT, "beam", 'b', "K", OFF(lim.beam), "beam size of requests that give none (default 1: greedy)"),
     .imin = 1, .imax = 256},
    {OPTION(OT_INT, "nbest", 0, "N", OFF(lim.nbest), "translations per sentence of requests that give none (default 1)"),
     .imin = 1, .imax = 256},
    {OPTION(OT_INT, "max-beam", 0, "K", OFF(lim.max_beam), "largest beam a request may ask (default 16)"), .imin = 1,
     .imax = 256, .def.i = 16},
    {OPTION(OT_DOUBLE, "alpha", 0, "A", OFF(so.so.alpha), "length penalty exponent, ((5+len)/6)^A (default 0.6)"),
     .dmin = 0, .dmax = 10, .def.d = 0.6},
    {OPTION(OT_DOUBLE, "max-len-a", 0, "A", OFF(so.so.len_a),
            "longest output: A * source tokens + B, with EOS (default 1)"),
     .dmin = 0, .dmax = 1000, .def.d = 1},
    {OPTION(OT_DOUBLE, "max-len-b", 0, "B", OFF(so.so.len_b), "B of --max-len-a (default 50)"), .dmin = 0, .dmax = 1e6,
     .def.d = 50},
    {OPTION(OT_U64, "max-tokens", 't', "N", OFF(u.max_tokens), "source tokens per batch (default 4096)"), .imin = 1,
     .imax = MANY, .def.u = 4096},
    {OPTION(OT_U64, "max-sentences", 0, "N", OFF(u.max_batch),
            "sentences per batch at most (default on the cpu: 16, or 128 / beam\n"
            "within 16..64 for a model of over 32 MiB of weights a decoder step; on\n"
            "an accelerator as many as --max-tokens allows)"),
     .imin = 1, .imax = MANY},
    {OPTION(OT_INT, "max-wait-ms", 0, "MS", OFF(so.max_wait_ms),
            "how long a batch that is not full waits for more sentences (default 10)"),
     .imin = 0, .imax = 60000, .def.i = 10},
    {OPTION(OT_U64, "max-queue", 0, "N", OFF(u.max_queue),
            "sentences waiting at most; a request that does not fit is answered 503\nwith Retry-After (default 1024)"),
     .imin = 1, .imax = MANY, .def.u = 1024},
    {OPTION(OT_U64, "max-request-sentences", 0, "N", OFF(u.max_request_sentences),
            "sentences of one request at most (default 256)"),
     .imin = 1, .imax = MANY, .def.u = 256},
    {OPTION(OT_U64, "max-body-bytes", 0, "N", OFF(u.max_body), "bytes of a request body at most (default 1048576)"),
     .imin = 1, .imax = UINT64_C(1) << 32, .def.u = 1 << 20},
    {OPTION(OT_U64, "max-line-bytes", 0, "N", OFF(u.max_line_bytes), "bytes of one sentence at most (default 65536)"),
     .imin = 1, .imax = UINT64_C(1) << 32, .def.u = 65536},
    {OPTION(OT_U64, "max-connections", 0, "N", OFF(u.conns), "connections at once at most (default 256)"), .imin = 1,
     .imax = 100000, .def.u = 256},
    {OPTION(OT_U64, "timeout", 0, "SECONDS", OFF(u.timeout),
            "close a connection idle or stalled that long (default 30); with\n"
            "--client: the longest a request may take (default 300)"),
     .imin = 1, .imax = 86400},
    {OPTION(OT_CUSTOM, "precision", 0, "P", OFF(so.precision),
            "float32 (default), int8, int8-all, int8-a8, int8-a8-all, int8-a7,\nint8-a7-all, bf16, bf16-all (as nmt-decode)"),
     .parse = parse_precision},
    {OPTION(OT_FLAG, "shortlist", 0, NULL, OFF(so.shortlist),
            "the output layer over each sentence's shortlisted pieces (as nmt-decode)")},
    {OPTION(OT_STR, "backend", 0, "NAME", OFF(so.backend), "compute backend (default: $NMT_BACKEND, else auto)")},
    {OPTION(OT_INT, "threads", 0, "N", OFF(so.threads), "worker threads in all (default: all cores)"), .imin = 0,
     .imax = 1024},
    {OPTION(OT_INT, "jobs", 0, "N", OFF(so.jobs),
            "batches decoded at once, each with threads/N threads, all reading one\n"
            "copy of the model (default: the threads, at most 4; 1 on an accelerator)"),
     .imin = 1, .imax = 256},
    {OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(quiet), "no log lines on stderr")},
    {.type = OT_TEXT, .help = "\nClient mode (a client of a running server, no model of its own):"},
    {OPTION(OT_STR, "client", 0, "URL", OFF(client.url),
            "send the lines of stdin to the server at URL (http://HOST:PORT) and write\n"
            "their translations to stdout in order, as nmt-decode writes them; -b and\n"
            "--nbest are sent with each request (default: the server's)")},
    {OPTION(OT_FLAG, "scores", 0, NULL, OFF(client.scores), "score TAB translation, as nmt-decode --scores")},
    {OPTION(OT_U64, "batch-lines", 0, "N", OFF(u.batch_lines), "lines sent in one request at most (default 32)"),
     .imin = 1, .imax = 1000000},
    {OPTION(OT_DOUBLE, "retry-for", 0, "SECONDS", OFF(client.retry_for),
            "send a request answered 503 again, after its Retry-After, for that long\nat most (default 60)"),
     .dmin = 0, .dmax = 86400, .def.d = 60},
    OPT_HELP_VERSION_END};
#undef MANY

static const char USAGE_HEAD[] =
    "Usage: nmt-serve [OPTION]... -m CHECKPOINT\n"
    "  or:  nmt-serve --client URL [-b K] [--nbest N] [--scores] [--batch-lines N] < text > translations\n"
    "Serves translations over HTTP: POST /translate takes {\"text\": [\"...\"], \"beam\": K, \"nbest\": N}\n"
    "and answers {\"translations\": [...]}; GET /health, GET /metrics (Prometheus text), GET / (a page\n"
    "to try the model). The sentences of concurrent requests are decoded together in batches; a sentence\n"
    "translates exactly as nmt-decode translates it with the same options.\n"
    "\n";
static const char USAGE_TAIL[] =
    "\n"
    "SIGTERM or SIGINT: stop accepting connections, answer the requests in flight, exit 0.\n"
    "SIGHUP: read the checkpoint again and serve new requests with it; those in flight finish on the old.\n"
    "Exit status: 0 success, 1 runtime failure, 2 usage error.\n";

/* Copies the table's 64-bit numbers into the fields of O of other types. */
static void apply_sizes(struct opts *o)
{
    o->so.max_tokens = (long)o->u.max_tokens;
    o->so.max_batch = (size_t)o->u.max_batch;
    o->so.max_queue = (size_t)o->u.max_queue;
    o->lim.max_sentences = (size_t)o->u.max_request_sentences;
    o->lim.max_line_bytes = (size_t)o->u.max_line_bytes;
    o->max_body = (size_t)o->u.max_body;
    o->conns = (unsigned)o->u.conns;
    o->timeout = (unsigned)o->u.timeout;
    o->batch_lines = (size_t)o->u.batch_lines;
}

/* Checks the combinations of options; -1 to go on, or the usage error's exit status. */
static int check_args(struct opts *o)
{
    if (o->client.url) {
        if (o->so.model)
            return nmt_usage_error("-m is the server's: with --client the server's model translates");
        o->client.timeout = o->timeout ? (long)o->timeout : 300;
        return -1;
    }
    if (o->client.scores || o->batch_lines)
        return nmt_usage_error("--scores and --batch-lines are the client's (--client URL)");
    if (!o->timeout)
        o->timeout = 30;
    if (!o->so.model)
        return nmt_usage_error("a checkpoint is required (-m FILE)");
    if (o->lim.beam > o->lim.max_beam)
        return nmt_usage_error("--beam %d exceeds --max-beam %d", o->lim.beam, o->lim.max_beam);
    if (o->lim.nbest > o->lim.beam)
        return nmt_usage_error("--nbest %d exceeds --beam %d", o->lim.nbest, o->lim.beam);
    if (o->lim.max_sentences > o->so.max_queue)
        return nmt_usage_error("--max-request-sentences %zu exceeds --max-queue %zu", o->lim.max_sentences,
                               o->so.max_queue);
    return -1;
}

/* Parses the options into O; -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    opt_defaults(OPTIONS, o);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, o, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    if (optind < argc)
        return nmt_usage_error("unexpected argument '%s'", argv[optind]);
    apply_sizes(o);
    /* -b and --nbest given are also the client's, sent with each request (0: the server's) */
    o->client.beam = o->lim.beam;
    o->client.nbest = o->lim.nbest;
    if (!o->lim.beam)
        o->lim.beam = 1;
    if (!o->lim.nbest)
        o->lim.nbest = 1;
    return check_args(o);
}

/* ---- listening ---- */

/* Resolves HOST:PORT ("[::1]:8080" for IPv6) into *AI (freeaddrinfo). 0, or -1 with the error set. */
static int resolve(const char *spec, struct addrinfo **ai)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    size_t hl = colon ? (size_t)(colon - spec) : 0;
    if (!colon || hl == 0 || hl >= sizeof host || !colon[1])
        return nmt_seterr("invalid --listen '%s' (expected HOST:PORT, e.g. 127.0.0.1:8080)", spec);
    memcpy(host, spec, hl);
    host[hl] = 0;
    if (host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    uint64_t port;
    if (nmt_parse_u64(colon + 1, 65535, &port) < 0)
        return nmt_seterr("invalid --listen '%s': port '%s' (expected 0 to 65535)", spec, colon + 1);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    int rc = getaddrinfo(host, colon + 1, &hints, ai);
    if (rc)
        return nmt_seterr("invalid --listen '%s': %s", spec, gai_strerror(rc));
    return 0;
}

/* Writes the address listened on (HOST:PORT) into BUF (SIZE bytes). 0 or -1 with the error set. */
static int bound_address(struct MHD_Daemon *d, char *buf, size_t size)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char host[128], port[16];
    if (!di || getsockname(di->listen_fd, (struct sockaddr *)&sa, &sl) < 0 ||
        getnameinfo((struct sockaddr *)&sa, sl, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV))
        return nmt_seterr("cannot read the address listened on: %s", strerror(errno));
    snprintf(buf, size, sa.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
    return 0;
}

/* Starts the HTTP daemon of S on O's address; 0, or -1 with the error set. */
static int start(struct server *s, const struct opts *o, char *addr, size_t size)
{
    struct addrinfo *ai;
    if (resolve(o->listen, &ai) < 0)
        return -1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, o->conns, MHD_OPTION_CONNECTION_TIMEOUT, o->timeout,
                            MHD_OPTION_NOTIFY_COMPLETED, on_done, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d)
        return nmt_seterr("cannot listen on '%s': %s", o->listen, errno ? strerror(errno) : "failed");
    return bound_address(s->d, addr, size);
}

/* Writes ADDR and a newline to PATH, atomically. 0, or -1 with the error set. */
static int write_port_file(const char *path, const char *addr)
{
    struct out_file f = {.fd = -1};
    if (out_file_open(&f, path) < 0)
        return -1;
    char line[160];
    int n = snprintf(line, sizeof line, "%s\n", addr);
    if (nmt_write_all(f.fd, line, (size_t)n) < 0) {
        out_file_abort(&f);
        return -1;
    }
    return out_file_commit(&f);
}

/* Stops accepting connections, waits until every request received is answered, then stops the daemon. */
static void stop(struct server *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_mutex_unlock(&s->mu);
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    for (;;) { /* each request ends, answered or timed out (--timeout) */
        pthread_mutex_lock(&s->mu);
        int busy = s->in_flight;
        pthread_mutex_unlock(&s->mu);
        if (!busy)
            break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

/* Serves until SIGTERM or SIGINT, reloading on SIGHUP (the signals in SET, blocked in every thread). */
static void serve(struct server *s, const sigset_t *set)
{
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            break;
        if (pool_load(s) < 0)
            nmt_error("cannot reload '%s': %s; still serving the model read before", s->o->so.model, nmt_errmsg());
        else if (!s->o->quiet)
            nmt_error("reloaded '%s'", s->o->so.model);
    }
    if (!s->o->quiet)
        nmt_error("stopping: answering the requests in flight");
    stop(s);
}

/* ---- client mode ---- */

#define CLIENT_BATCH_BYTES (256u << 10) /* text of one request at most, unless one line is longer */

/* The lines of one request: copies of the input's lines from line FIRST (1-based) on. */
struct client_batch {
    char **text;               /* (cap) owned */
    size_t *len;               /* (cap) */
    size_t n, cap, bytes;
    uint64_t first;
};

/* Sends batch B through C, writes its translations to stdout and empties B. 0, or -1 with the error set. */
static int client_flush(struct serve_client *c, struct client_batch *b, struct nmt_buf *out)
{
    out->len = 0;
    int rc = b->n ? serve_client_translate(c, b->text, b->len, b->n, b->first, out) : 0;
    if (rc == 0 && out->len && (fwrite(out->data, 1, out->len, stdout) != out->len || fflush(stdout)))
        rc = nmt_seterr("write failed: %s", strerror(errno));
    for (size_t i = 0; i < b->n; i++)
        free(b->text[i]);
    b->first += b->n;
    b->n = b->bytes = 0;
    return rc;
}

/* Checks line NO of stdin (LEN bytes) and adds a copy of it to B. 0, or -1 with the error set. */
static int client_add(struct client_batch *b, const char *line, size_t len, uint64_t no)
{
    size_t bad;
    const char *nul = memchr(line, 0, len);
    if (nul)
        return nmt_seterr("stdin: line %llu: a NUL byte at byte %zu", (unsigned long long)no, (size_t)(nul - line));
    if (utf8_check(line, len, &bad) < 0)
        return nmt_seterr("stdin: line %llu: not valid UTF-8 (byte %zu)", (unsigned long long)no, bad);
    if (!(b->text[b->n] = malloc(len + 1)))
        return nmt_seterr("out of memory");
    memcpy(b->text[b->n], line, len + 1);
    b->len[b->n++] = len;
    b->bytes += len;
    return 0;
}

/* nmt-serve --client: stdin's lines, --batch-lines a request, translated by the server, to stdout. */
static int client_main(const struct opts *o)
{
    struct client_batch b = {.cap = o->batch_lines ? o->batch_lines : 32, .first = 1};
    struct nmt_buf out = {0};
    struct line_reader lr = {0};
    struct serve_client *c = NULL;
    b.text = calloc(b.cap, sizeof *b.text);
    b.len = calloc(b.cap, sizeof *b.len);
    int rc = b.text && b.len ? 0 : nmt_seterr("out of memory");
    if (rc == 0 && (line_reader_open(&lr, NULL, 0) < 0 || !(c = serve_client_open(&o->client))))
        rc = -1;
    char *line;
    size_t len;
    int got = 0;
    while (rc == 0 && (got = line_next(&lr, &line, &len)) == 1) {
        if (b.n && b.bytes + len > CLIENT_BATCH_BYTES)
            rc = client_flush(c, &b, &out);
        if (rc == 0)
            rc = client_add(&b, line, len, lr.line);
        if (rc == 0 && b.n == b.cap)
            rc = client_flush(c, &b, &out);
    }
    if (rc == 0 && got < 0)
        rc = -1;
    if (rc == 0)
        rc = client_flush(c, &b, &out);
    if (rc < 0)
        nmt_error("%s", nmt_errmsg());
    if (c && serve_client_retries(c) && !o->quiet)
        nmt_error("%llu requests answered 503 (the server's queue full) were sent again",
                  (unsigned long long)serve_client_retries(c));
    for (size_t i = 0; b.text && i < b.n; i++)
        free(b.text[i]);
    free(b.text);
    free(b.len);
    nmt_buf_free(&out);
    line_reader_close(&lr);
    serve_client_close(c);
    if (nmt_close_stdout() < 0) {
        nmt_error("%s", nmt_errmsg());
        rc = -1;
    }
    return rc == 0 ? NMT_EXIT_OK : NMT_EXIT_DATA;
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct opts o = {.so = {.precision = NMT_DTYPE_F32, .so = SEARCH_OPTS_DEFAULT}}; /* the rest: the table's */
    int status = parse_args(argc, argv, &o);
    if (status >= 0)
        return status;
    if (o.client.url)
        return client_main(&o);
    /* the signals are waited for by the main thread alone: every thread started after inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct server s = {.o = &o};
    pthread_mutex_init(&s.mu, NULL);
    char addr[160];
    int ok = pool_load(&s) == 0 && start(&s, &o, addr, sizeof addr) == 0 &&
             (!o.port_file || write_port_file(o.port_file, addr) == 0);
    if (ok) {
        struct serve_stats st;
        serve_pool_stats(s.cur->p, &st);
        if (!o.quiet)
            nmt_error("listening on http://%s/ (%d jobs, %d threads)", addr, st.jobs, st.threads);
        serve(&s, &set);
    } else {
        nmt_error("%s", nmt_errmsg());
        if (s.d)
            MHD_stop_daemon(s.d);
    }
    if (s.cur)
        pool_release(&s, s.cur);
    pthread_mutex_destroy(&s.mu);
    if (nmt_close_stdout() < 0 && ok) {
        nmt_error("%s", nmt_errmsg());
        ok = 0;
    }
    return ok ? NMT_EXIT_OK : NMT_EXIT_DATA;
}
