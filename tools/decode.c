/* nmt-decode: translates with a trained checkpoint (nmt-decode(1)): greedy or beam search,
 * n-best lists, and forced-decoding scores of given pairs. The search is in libcommon/nn/search.c,
 * the model's inference steps in libcommon/nn/infer.c. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run/backend_loader.h"
#include "nn/checkpoint.h"
#include "nn/infer.h"
#include "nn/model.h"
#include "run/ranks.h"
#include "io/lines.h"
#include "io/stream.h"
#include "io/records.h"
#include "io/safetensors.h"
#include "nn/sample.h"
#include "nn/search.h"
#include "nn/shortlist.h"
#include "text/tokenizer.h"
#include "cli/cli.h"
#include "cli/opt.h"
#include "text/vocab.h"

enum { ALIGN_NONE, ALIGN_HARD, ALIGN_SOFT };

#define MAX_MODELS 16

struct opts {
    const char *model[MAX_MODELS];
    int nmodels;
    const char *input, *output, *src, *tgt, *backend, *comm, *prefix;
    int in_ids, out_hyp, scores, score, interactive, variant, quiet, verbose, threads, jobs, shortlist, word_scores;
    int static_batches;        /* --static-batches: no sentence joins a batch under way */
    uint32_t precision;        /* --precision (infer_new's) */
    uint64_t shard_k, shard_n;  /* --shard K/N (K from 1; N 0: no sharding) */
    long max_tokens;
    uint64_t max_tokens_u;     /* --max-tokens as parsed, then in max_tokens */
    uint64_t max_sentences;    /* --max-sentences (0: no limit) */
    uint64_t max_line;         /* --max-line-bytes */
    struct search_opts so;
    int sample;                /* --sample */
    int sample_set;            /* a sampling option was given */
    int align;                 /* --alignment: ALIGN_* */
    int align_words;           /* --alignment-words: merged to words */
    double align_t;            /* its soft threshold */
    struct sample_opts sp;
};

/* One input sentence (or pair). */
struct sent {
    uint64_t index;            /* 0-based line / record number */
    uint32_t *ids[2];          /* source, target ids (no EOS) */
    int n[2];
    uint32_t *pre;             /* --prefix: the output's forced start (NULL: none) */
    int npre;
    int empty;                 /* empty text line: empty output, no model call */
    struct search_result res;
    double lp;
};

/* One decoding context: a backend context with its inference states, over its own copy of the
 * models or, where the backend shares buffers, over the first engine's (engines_share). */
struct engine {
    struct backend *be;
    struct model *m[MAX_MODELS];
    struct infer *in[MAX_MODELS];
    int loaded;
    pthread_t tid;
    int rc;                    /* of its batches: 0, or -1 with the message in err */
    char err[1024];
};

#define MAX_AUTO_JOBS 4

/* An alignment: NP pairs of source and output indices, pair k at P[2k] (source), P[2k+1] (output). */
struct align_pairs {
    uint32_t *p;
    uint32_t np, cap;
};

struct state {
    const struct opts *o;
    struct vocab *v;
    struct tokenizer tok;      /* the checkpoint's vocabulary: text to ids and back */
    struct st_file *ckpt[MAX_MODELS]; /* the checkpoints, until every engine has loaded them */
    struct model_config cfg[MAX_MODELS];
    struct engine *eng;        /* (neng) */
    int neng, threads, jobs;   /* engines open; threads in all; engines wanted */
    uint64_t max_sentences;    /* sentences per batch at most (0: as many as --max-tokens allows) */
    int max_len;
    FILE *out;
    struct rec_writer *w;
    struct nmt_buf rec;
    struct comm *comm;         /* the ranks sharing the batches (NULL: one process) */
    struct shortlist *sl;      /* --shortlist: the first model's */
    struct align_pairs align;  /* --alignment: the alignment being written */
};

static void sent_free(struct sent *s)
{
    free(s->ids[0]);
    free(s->ids[1]);
    free(s->pre);
    search_result_free(&s->res);
}

/* Tokenizes LEN bytes of S (line LINE) into *IDS and *N. 0, or -1 with the error set. */
static int encode_text(struct state *st, const char *name, uint64_t line, const char *s, size_t len, uint32_t **ids,
                       int *n)
{
    size_t bad;
    if (utf8_check(s, len, &bad) < 0)
        return nmt_seterr("%s: line %llu: invalid UTF-8 at byte %zu", name, (unsigned long long)line, bad + 1);
    uint32_t cnt = 0, cap = 0;
    *ids = NULL;
    int rc = tokenizer_encode(&st->tok, s, len, ids, &cnt, &cap);
    if (rc == TOKENIZER_EBADTEXT)
        return nmt_seterr("%s: line %llu: %s", name, (unsigned long long)line, nmt_errmsg());
    *n = (int)cnt;
    return rc;
}

/* Cuts a side longer than the model accepts, with a warning naming the line. */
static void clip(struct state *st, struct sent *s, int side)
{
    int lim = st->max_len - 1;
    if (s->n[side] <= lim)
        return;
    if (!st->o->quiet)
        nmt_warn("line %llu: %s of %d tokens exceeds the model's limit of %d; using the first %d",
                 (unsigned long long)s->index + 1, side ? "target" : "source", s->n[side], lim, lim);
    s->n[side] = lim;
}

static int detok(struct state *st, const uint32_t *ids, uint32_t n)
{
    return tokenizer_decode(&st->tok, ids, n);
}

static int put_text(struct state *st)
{
    if (!st->tok.text.len)
        return 0;
    return fwrite(st->tok.text.data, 1, st->tok.text.len, st->out) == st->tok.text.len ? 0 : -1;
}

static int align_add(struct align_pairs *a, uint32_t src, uint32_t out)
{
    if (a->np == a->cap) {
        uint32_t cap = a->cap ? 2 * a->cap : 64;
        uint32_t *q = realloc(a->p, (size_t)cap * 2 * sizeof *q);
        if (!q)
            return nmt_seterr("out of memory");
        a->p = q;
        a->cap = cap;
    }
    a->p[2 * a->np] = src;
    a->p[2 * a->np + 1] = out;
    a->np++;
    return 0;
}

/* Orders pairs by output index, then source index. */
static int cmp_pair(const void *x, const void *y)
{
    const uint32_t *a = x, *b = y;
    return a[1] != b[1] ? (a[1] > b[1]) - (a[1] < b[1]) : (a[0] > b[0]) - (a[0] < b[0]);
}

/* Replaces A's piece indices with the indices of the words of the source pieces SRC and output
 * pieces OUT (tokenizer_word_index), then sorts the pairs (by output word, then source word) and
 * drops repeated ones. 0, or -1 (memory) with the error set. */
static int align_to_words(const struct vocab *v, const uint32_t *src, uint32_t sn, const uint32_t *out, uint32_t n,
                          struct align_pairs *a)
{
    uint32_t *sw = nmt_malloc(((size_t)sn + n + 1) * sizeof *sw);
    if (!sw)
        return -1;
    uint32_t *ow = sw + sn;
    tokenizer_word_index(v, src, sn, sw);
    tokenizer_word_index(v, out, n, ow);
    for (uint32_t k = 0; k < a->np; k++) {
        a->p[2 * k] = sw[a->p[2 * k]];
        a->p[2 * k + 1] = ow[a->p[2 * k + 1]];
    }
    free(sw);
    if (a->np < 2) /* nothing to sort or merge (and no array at all when no pair was added) */
        return 0;
    qsort(a->p, a->np, 2 * sizeof *a->p, cmp_pair);
    uint32_t m = 0;
    for (uint32_t k = 0; k < a->np; k++)
        if (!m || cmp_pair(a->p + 2 * k, a->p + 2 * (m - 1))) {
            a->p[2 * m] = a->p[2 * k];
            a->p[2 * m + 1] = a->p[2 * k + 1];
            m++;
        }
    a->np = m;
    return 0;
}

/* Fills A with the alignment of hypothesis H of sentence S (none when H is NULL or has no attention),
 * by output piece then source piece, EOS on neither side: with ALIGN_HARD each output piece with the
 * source piece of its largest attention (ties: the first), with ALIGN_SOFT every pair of attention
 * at least the threshold; with --alignment-words merged to words. 0, or -1 with the error set. */
static int alignment(const struct state *st, const struct sent *s, const struct search_hyp *h, struct align_pairs *a)
{
    const struct opts *o = st->o;
    a->np = 0;
    if (!h || !h->att || h->sn < 2)
        return 0;
    for (uint32_t j = 0; j < h->n; j++) {
        const float *att = h->att + (size_t)j * h->sn;
        uint32_t best = 0;
        for (uint32_t i = 0; i + 1 < h->sn; i++) {
            if (o->align == ALIGN_HARD)
                best = att[i] > att[best] ? i : best;
            else if ((double)att[i] >= o->align_t && align_add(a, i, j) < 0)
                return -1;
        }
        if (o->align == ALIGN_HARD && align_add(a, best, j) < 0)
            return -1;
    }
    if (!o->align_words)
        return 0;
    if (h->sn - 1 > (uint32_t)s->n[0])
        return nmt_seterr("line %llu: the attention covers more source pieces than the sentence has",
                          (unsigned long long)s->index + 1);
    return align_to_words(st->v, s->ids[0], h->sn - 1, h->ids, h->n, a);
}

/* Writes alignment A in Pharaoh format: 'SRC-OUT' pairs separated by spaces. */
static void put_alignment(FILE *f, const struct align_pairs *a)
{
    for (uint32_t k = 0; k < a->np; k++)
        fprintf(f, k ? " %u-%u" : "%u-%u", a->p[2 * k], a->p[2 * k + 1]);
}

/* Writes the output of sentence S. 0 or -1. */
static int emit(struct state *st, struct sent *s)
{
    const struct opts *o = st->o;
    if (o->score) {
        if (st->w) {
            st->rec.len = 0;
            if (hyp_record_encode(&st->rec, s->index, 1, (float)s->lp, 0, NULL) < 0 ||
                rec_write(st->w, st->rec.data, st->rec.len) < 0)
                return -1;
            return 0;
        }
        fprintf(st->out, "%.6f\n", s->lp);
        return ferror(st->out) ? nmt_seterr("write failed: %s", strerror(errno)) : 0;
    }
    int nh = s->empty ? 0 : s->res.nhyp;
    if (st->w) {
        for (int r = 0; r < (nh ? nh : 1); r++) {
            st->rec.len = 0;
            const struct search_hyp *h = nh ? &s->res.hyp[r] : NULL;
            if (hyp_record_encode(&st->rec, s->index, (uint32_t)r + 1, h ? h->score : 0, h ? h->n : 0, h ? h->ids : NULL) <
                    0 ||
                (o->align && (alignment(st, s, h, &st->align) < 0 ||
                              hyp_record_append_alignment(&st->rec, st->align.np, st->align.p) < 0)) ||
                rec_write(st->w, st->rec.data, st->rec.len) < 0)
                return -1;
        }
        return 0;
    }
    for (int r = 0; r < (nh ? nh : 1); r++) {
        const struct search_hyp *h = nh ? &s->res.hyp[r] : NULL;
        st->tok.text.len = 0;
        if (h && detok(st, h->ids, h->n) < 0)
            return -1;
        if (o->so.nbest > 1)
            fprintf(st->out, "%llu\t%d\t", (unsigned long long)s->index + 1, r + 1);
        if (o->so.nbest > 1 || o->scores)
            fprintf(st->out, "%.6f\t", h ? (double)h->score : 0.0);
        put_text(st);
        if (o->word_scores) {
            putc('\t', st->out);
            for (uint32_t j = 0; h && j <= h->n; j++)
                fprintf(st->out, j ? " %.6f" : "%.6f", (double)h->lps[j]);
        }
        if (o->align) {
            if (alignment(st, s, h, &st->align) < 0)
                return -1;
            putc('\t', st->out);
            put_alignment(st->out, &st->align);
        }
        putc('\n', st->out);
        if (o->so.nbest <= 1)
            break;
    }
    return ferror(st->out) ? nmt_seterr("write failed: %s", strerror(errno)) : 0;
}

/* Translates (or scores) sentences P[0..N) in one batch with engine E; empty ones are skipped. */
static int run_batch(struct state *st, struct engine *e, struct sent **p, int n)
{
    const uint32_t **src = malloc((size_t)n * sizeof *src), **tgt = malloc((size_t)n * sizeof *tgt);
    const uint32_t **pid = malloc((size_t)n * sizeof *pid);
    int *len = malloc((size_t)n * sizeof *len), *tl = malloc((size_t)n * sizeof *tl);
    int *pn = malloc((size_t)n * sizeof *pn);
    struct search_prefix pre = {pid, pn}, *pp = st->o->prefix ? &pre : NULL;
    struct search_result *res = calloc((size_t)n, sizeof *res);
    double *lp = malloc((size_t)n * sizeof *lp);
    uint64_t *key = malloc((size_t)n * sizeof *key);
    int rc = -1, m = 0;
    struct sent **q = malloc((size_t)n * sizeof *q);
    if (!src || !tgt || !pid || !len || !tl || !pn || !res || !lp || !key || !q) {
        nmt_seterr("out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (p[i]->empty)
            continue;
        q[m] = p[i];
        src[m] = p[i]->ids[0];
        len[m] = p[i]->n[0];
        tgt[m] = p[i]->ids[1];
        tl[m] = p[i]->n[1];
        pid[m] = p[i]->pre;
        pn[m] = p[i]->npre;
        m++;
    }
    if (m == 0) {
        rc = 0;
        goto out;
    }
    if (st->o->score) {
        if (search_score(e->in, st->o->nmodels, m, src, len, tgt, tl, lp) < 0)
            goto out;
        for (int i = 0; i < m; i++)
            q[i]->lp = lp[i];
    } else if (st->o->sample) {
        for (int i = 0; i < m; i++)
            key[i] = q[i]->index;
        if (sample_batch(e->in, st->o->nmodels, &st->o->so, &st->o->sp, m, src, len, key, pp, res) < 0)
            goto out;
        for (int i = 0; i < m; i++)
            q[i]->res = res[i];
    } else {
        if (search_batch_prefix(e->in, st->o->nmodels, &st->o->so, m, src, len, pp, res) < 0)
            goto out;
        for (int i = 0; i < m; i++)
            q[i]->res = res[i];
    }
    rc = 0;
out:
    free(src);
    free(tgt);
    free(pid);
    free(len);
    free(tl);
    free(pn);
    free(res);
    free(lp);
    free(key);
    free(q);
    return rc;
}

/* ---- input ---- */

struct input {
    struct line_reader src;    /* text: lines */
    struct line_reader tgt;    /* the target file with --tgt (tgt.f set) */
    struct line_reader pre;    /* the --prefix file (pre.f set) */
    struct rec_reader *r;      /* ids stream */
    const char *name;          /* the input's name, for messages */
    int fd;
    struct ids_record ir;
};

/* Reads the --prefix line of sentence S (read, its source clipped) into s->pre, tokenized as output,
 * and checks that it fits S's length limit. 0, or -1 with the error set. */
static int read_prefix(struct state *st, struct input *inp, struct sent *s)
{
    struct line_reader *r = &inp->pre;
    char *a;
    size_t la;
    int rc = line_next(r, &a, &la);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return nmt_seterr("%s: line %llu: missing: no prefix for input line %llu (the file has %llu lines)", r->name,
                          (unsigned long long)r->line + 1, (unsigned long long)s->index + 1,
                          (unsigned long long)r->line);
    if (encode_text(st, r->name, r->line, a, la, &s->pre, &s->npre) < 0)
        return -1;
    struct search_prefix one = {(const uint32_t *const *)&s->pre, &s->npre};
    if (search_prefix_check(&one, 0, (int)st->v->n, search_max_len(&st->o->so, s->n[0], st->max_len)) < 0)
        return nmt_seterr("%s: line %llu: %s (--max-len-a, --max-len-b)", r->name, (unsigned long long)r->line,
                          nmt_errmsg());
    return 0;
}

/* At the end of the input: the --prefix file must end too. 0, or -1 with the error set. */
static int prefix_end(struct input *inp)
{
    char *a;
    size_t la;
    int rc = inp->pre.f ? line_next(&inp->pre, &a, &la) : 0;
    if (rc == 1)
        return nmt_seterr("%s: line %llu: more prefix lines than input lines (%llu)", inp->pre.name,
                          (unsigned long long)inp->pre.line, (unsigned long long)inp->pre.line - 1);
    return rc;
}

/* Reads the next sentence into S: 1, 0 at the end, -1 on error. */
static int next(struct state *st, struct input *inp, struct sent *s)
{
    const struct opts *o = st->o;
    memset(s, 0, sizeof *s);
    if (inp->r) {
        const unsigned char *d;
        size_t len;
        int rc = rec_read(inp->r, &d, &len);
        if (rc == REC_END)
            return prefix_end(inp);
        if (rc < 0)
            return -1;
        if (ids_record_decode(&inp->ir, d, len) < 0)
            return nmt_seterr("%s: record %llu: %s", inp->name, (unsigned long long)rec_reader_count(inp->r),
                              nmt_errmsg());
        s->index = inp->ir.index;
        if (o->score && inp->ir.nsides < 2)
            return nmt_seterr("%s: record %llu: --score needs source and target sides", inp->name,
                              (unsigned long long)s->index + 1);
        for (unsigned k = 0; k < (o->score ? 2u : 1u); k++) {
            s->n[k] = (int)inp->ir.n[k];
            s->ids[k] = malloc((inp->ir.n[k] ? inp->ir.n[k] : 1) * sizeof(uint32_t));
            if (!s->ids[k])
                return nmt_seterr("out of memory");
            memcpy(s->ids[k], inp->ir.ids[k], inp->ir.n[k] * sizeof(uint32_t));
            for (uint32_t j = 0; j < inp->ir.n[k]; j++)
                if (s->ids[k][j] >= (uint32_t)st->v->n)
                    return nmt_seterr("%s: record %llu: id %u outside the vocabulary of %u", inp->name,
                                      (unsigned long long)s->index + 1, s->ids[k][j], st->v->n);
        }
        clip(st, s, 0);
        if (o->score)
            clip(st, s, 1);
        if (inp->pre.f && read_prefix(st, inp, s) < 0)
            return -1;
        s->empty = !o->score && s->n[0] == 0 && s->npre == 0;
        return 1;
    }
    char *a, *b = NULL;
    size_t la, lb = 0;
    int rc = inp->tgt.f ? line_pair_next(&inp->src, &inp->tgt, &a, &la, &b, &lb) : line_next(&inp->src, &a, &la);
    if (rc != 1)
        return rc == 0 ? prefix_end(inp) : -1;
    s->index = inp->src.line - 1;
    uint64_t ln = inp->src.line;
    size_t n = la;
    if (o->score && !inp->tgt.f) {
        char *tab = memchr(a, '\t', la);
        if (!tab)
            return nmt_seterr("%s: line %llu: expected 'SOURCE<TAB>TARGET'", inp->name, (unsigned long long)ln);
        la = (size_t)(tab - a);
        b = tab + 1;
        lb = n - la - 1;
    }
    if (encode_text(st, inp->name, ln, a, la, &s->ids[0], &s->n[0]) < 0)
        return -1;
    if (o->score && encode_text(st, inp->tgt.f ? inp->tgt.name : inp->name, ln, b, lb, &s->ids[1], &s->n[1]) < 0)
        return -1;
    clip(st, s, 0);
    if (o->score)
        clip(st, s, 1);
    if (inp->pre.f && read_prefix(st, inp, s) < 0)
        return -1;
    s->empty = !o->score && n == 0 && s->npre == 0;
    return 1;
}

static int cmp_len(const void *a, const void *b)
{
    const struct sent *x = *(struct sent *const *)a, *y = *(struct sent *const *)b;
    if (x->n[0] != y->n[0])
        return x->n[0] - y->n[0];
    return x->index < y->index ? -1 : x->index > y->index;
}

static int flush_out(struct state *st)
{
    if (st->w)
        return rec_flush(st->w) < 0 ? -1 : 0;
    return fflush(st->out) ? nmt_seterr("write failed: %s", strerror(errno)) : 0;
}

/* ---- engines ---- */

/* Threads of engine I of N: an equal share of the threads, the first ones one more when N does not
 * divide them, at least 1. */
static int engine_threads(const struct state *st, int i, int n)
{
    int t = st->threads / n + (i < st->threads % n);
    return t > 0 ? t : 1;
}

/* Opens the backend context of engine E, with THREADS threads. 0, or -1 with the error set. */
static int engine_open(struct state *st, struct engine *e, int threads)
{
    const struct opts *o = st->o;
    struct nmt_backend_opts bo = {.size = sizeof bo, .threads = threads};
    e->be = backend_open(o->backend, &bo);
    return e->be ? 0 : -1;
}

/* Whether the engines after the first compute with the first one's weights (one copy of the
 * models for all: backend_can_share) rather than each with its own. */
static int engines_share(const struct state *st)
{
    return st->neng > 1 && backend_can_share(st->eng[1].be, st->eng[0].be);
}

/* Loads the checkpoints' weights into open engine E and prepares its inference states, or, once
 * the first engine has loaded and the engines share, makes E's over the first engine's weights;
 * engines may load at the same time. LAST: no other engine reads the checkpoints, so each is given
 * back as its weights are read, and freed once they are in E's model and packed. 0, or -1 with the
 * error set (E is then half loaded: engine_close it). */
static int engine_load(struct state *st, struct engine *e, int last)
{
    const struct opts *o = st->o;
    const struct engine *first = &st->eng[0];
    /* with sharing the first engine loaded before the others started (run_batches) */
    int share = e != first && engines_share(st) && first->loaded;
    for (int i = 0; i < o->nmodels; i++) {
        /* the model is read only through this state (and those sharing it): once packed, the
         * float32 copies of its layers are given back */
        struct infer_load_opts lo = {.cfg = &st->cfg[i],
                                     .path = o->model[i],
                                     .flags = (o->variant ? 0 : INFER_INVARIANT) | INFER_DISCARD,
                                     .precision = o->precision,
                                     .sl = st->sl};
        if (!(e->in[i] = infer_load(e->be, share ? first->in[i] : NULL, &st->ckpt[i], last, &lo, &e->m[i])))
            return -1;
    }
    e->loaded = 1;
    return 0;
}

/* Frees the checkpoints once every engine has loaded them. */
static void ckpts_free(struct state *st)
{
    for (int i = 0; i < MAX_MODELS; i++) {
        st_free(st->ckpt[i]);
        st->ckpt[i] = NULL;
    }
}

/* Frees what engine E holds; E is left empty. */
static void engine_close(struct engine *e)
{
    for (int i = 0; i < MAX_MODELS; i++) {
        infer_free(e->in[i]);
        model_free(e->m[i]);
    }
    backend_close(e->be);
    memset(e, 0, sizeof *e);
}

/* Opens the backend contexts of engines FROM..TO-1, with the thread shares of N engines (the
 * array has room for st->jobs); they load the model in their job. 0 or -1 with the error set. */
static int engines_open(struct state *st, int from, int to, int n)
{
    for (int i = from; i < to; i++) {
        st->neng = i + 1;
        if (engine_open(st, &st->eng[i], engine_threads(st, i, n)) < 0)
            return -1;
    }
    return 0;
}

/* Closes the engines, the first last (the others may compute with its weights). */
static void engines_close(struct state *st)
{
    for (int i = st->neng - 1; i >= 0; i--)
        engine_close(&st->eng[i]);
    st->neng = 0;
}

/* Batches shared by the jobs: batch b is ORD[START[b] .. START[b + 1]). */
struct work {
    struct state *st;
    struct sent **ord;
    const size_t *start;
    size_t nb;
    int alone;                 /* one engine: it reads the checkpoints last (engine_load's LAST) */
    int stream;                /* the jobs take sentences, not batches (search_stream) */
    int window, smax;          /* then: sentences live at once, the longest source */
    atomic_size_t next;        /* batches handed out, or with stream sentences */
    atomic_int stop;           /* a job failed */
};

struct job {
    struct work *w;
    struct engine *e;
};

/* Makes engine E's decoding memory large enough for every batch of W at once (search_reserve), so
 * that it is allocated, and its pages faulted in, once. 0 or -1 with the error set. */
static int engine_reserve(struct work *w, struct engine *e)
{
    const struct opts *o = w->st->o;
    size_t most = 1;
    for (size_t b = 0; b < w->nb; b++)
        if (w->start[b + 1] - w->start[b] > most)
            most = w->start[b + 1] - w->start[b];
    int *len = malloc(most * sizeof *len), *tl = malloc(most * sizeof *tl), rc = 0;
    if (!len || !tl)
        rc = nmt_seterr("out of memory");
    for (size_t b = 0; b < w->nb && rc == 0; b++) {
        int m = 0;
        for (size_t i = w->start[b]; i < w->start[b + 1]; i++)
            if (!w->ord[i]->empty) {
                len[m] = w->ord[i]->n[0];
                tl[m++] = w->ord[i]->n[1];
            }
        rc = search_reserve(e->in, o->nmodels, &o->so, m, len, o->score ? tl : NULL);
    }
    free(len);
    free(tl);
    return rc;
}

/* search_stream's feed of a job: the sentences of the work's batches, the longest first, each one
 * to the first job that asks (the empty ones skipped); a failed job stops the others. */
static int feed_take(void *arg, int n, const uint32_t **src, int *len, size_t *key)
{
    struct work *w = arg;
    size_t all = w->start[w->nb] - w->start[0];
    int k = 0;
    while (k < n && !atomic_load(&w->stop)) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= all)
            break;
        struct sent *s = w->ord[w->start[0] + all - 1 - i];
        if (s->empty)
            continue;
        src[k] = s->ids[0];
        len[k] = s->n[0];
        key[k++] = w->start[0] + all - 1 - i;
    }
    return k;
}

static int feed_put(void *arg, size_t key, struct search_result *r)
{
    struct work *w = arg;
    w->ord[key]->res = *r;
    return 0;
}

/* Decodes batches of the work with job J's engine, the longest first, until none is left or a job
 * has failed; or with stream, its sentences. 0, or -1 with the error set. */
static int job_decode(struct job *j)
{
    struct work *w = j->w;
    if (w->stream) {
        struct search_feed f = {feed_take, feed_put, w};
        return search_stream(j->e->in, w->st->o->nmodels, &w->st->o->so, w->window, w->smax, &f);
    }
    while (!atomic_load(&w->stop)) {
        size_t b = atomic_fetch_add(&w->next, 1);
        if (b >= w->nb)
            break;
        b = w->nb - 1 - b;
        if (run_batch(w->st, j->e, w->ord + w->start[b], (int)(w->start[b + 1] - w->start[b])) < 0)
            return -1;
    }
    return 0;
}

/* Loads the engine's model if not yet done and reserves its memory (for batches), then decodes
 * with it (job_decode). */
static void *job_run(void *arg)
{
    struct job *j = arg;
    struct work *w = j->w;
    if ((!j->e->loaded && engine_load(w->st, j->e, w->alone) < 0) || (!w->stream && engine_reserve(w, j->e) < 0) ||
        job_decode(j) < 0) {
        snprintf(j->e->err, sizeof j->e->err, "%s", nmt_errmsg());
        j->e->rc = -1;
        atomic_store(&w->stop, 1);
    }
    return NULL;
}

/* Whether the jobs of W stream its sentences (search_stream: a search without alignments, prefixes
 * or a shortlist, on a backend with attention_forward_rows, unless --static-batches), and
 * the stream's shape: its longest source, and as many sentences at once as a batch of them may
 * hold (--max-sentences, --max-tokens), by default as many as infer_host_stream_sentences gives
 * each of NJOBS jobs. */
static void stream_shape(const struct state *st, struct work *w, int njobs)
{
    const struct opts *o = st->o;
    w->stream = !o->static_batches && !o->score && !o->sample && !o->prefix && !o->so.attention &&
                !st->sl && st->eng[0].be->ops.attention_forward_rows != NULL;
    w->smax = -1;
    long win = 0; /* at most as many as there are */
    for (size_t i = w->start[0]; i < w->start[w->nb]; i++)
        if (!w->ord[i]->empty) {
            win++;
            w->smax = w->ord[i]->n[0] > w->smax ? w->ord[i]->n[0] : w->smax;
        }
    if (w->smax < 0) { /* nothing to translate */
        w->stream = 0;
        w->smax = 0;
    }
    if (win > o->max_tokens / (w->smax + 1))
        win = o->max_tokens / (w->smax + 1);
    uint64_t cap = st->max_sentences;
    if (cap && !o->max_sentences) /* the default, for NJOBS jobs */
        cap = (uint64_t)infer_host_stream_sentences((int)cap, njobs);
    if (cap && (uint64_t)win > cap)
        win = (long)cap;
    w->window = win < 1 ? 1 : win > 1 << 20 ? 1 << 20 : (int)win;
}

/* Decodes the NB batches of ORD (see struct work) on min(jobs, NB) engines at once, the first
 * engine in this thread. Translations do not depend on which engine or how many (batch
 * invariance). 0, or -1 with the error set. */
static int run_batches(struct state *st, struct sent **ord, const size_t *start, size_t nb)
{
    int n = nb < (size_t)st->jobs ? (int)nb : st->jobs;
    if (n < 1)
        n = 1;
    if (n < st->jobs && !st->eng[0].loaded && engine_threads(st, 0, n) != engine_threads(st, 0, st->jobs)) {
        /* fewer batches than jobs: the first engine takes a larger share of the threads */
        engines_close(st);
        if (engines_open(st, 0, n, n) < 0)
            return -1;
    } else if (engines_open(st, st->neng, n, n) < 0) {
        return -1;
    }
    if (n > 1 && !st->eng[0].loaded && engines_share(st)) {
        /* the first engine loads the models once for all; the others compute with its weights */
        if (engine_load(st, &st->eng[0], 1) < 0)
            return -1;
    }
    if (n == 1 && st->eng[0].loaded) /* nothing left to load */
        ckpts_free(st);
    struct work w = {.st = st, .ord = ord, .start = start, .nb = nb, .alone = n == 1};
    stream_shape(st, &w, n);
    if (w.stream && st->o->verbose && comm_rank(st->comm) == 0)
        fprintf(stderr, "nmt-decode: sentences join the batch under way as others end, at most %d at once%s\n",
                w.window, n > 1 ? " in each job" : "");
    atomic_init(&w.next, 0);
    atomic_init(&w.stop, 0);
    struct job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs)
        return nmt_seterr("out of memory");
    int started = 1;
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){&w, &st->eng[i]};
        st->eng[i].rc = 0;
    }
    for (int i = 1; i < n; i++, started++)
        if (pthread_create(&st->eng[i].tid, NULL, job_run, &jobs[i]) != 0)
            break; /* the jobs started take all the batches */
    job_run(&jobs[0]);
    for (int i = 1; i < started; i++)
        pthread_join(st->eng[i].tid, NULL);
    free(jobs);
    ckpts_free(st);
    for (int i = 0; i < n; i++)
        if (st->eng[i].rc < 0)
            return nmt_seterr("%s", st->eng[i].err);
    return 0;
}

/* ---- ranks ---- */

enum { TAG_RESULTS = 17 };

/* Sends the results of this rank's sentences (ORD, N of them) to rank 0. 0, or -1 with the error set. */
static int send_results(struct state *st, struct sent **ord, size_t n)
{
    struct nmt_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (nmt_buf_put64(&b, ord[i]->index) < 0 || nmt_buf_append(&b, &ord[i]->lp, sizeof ord[i]->lp) < 0 ||
            search_result_pack(&b, &ord[i]->res) < 0)
            rc = -1;
    uint64_t len = b.len;
    if (rc == 0 && (comm_send(st->comm, &len, sizeof len, 0, TAG_RESULTS) < 0 ||
                    comm_send(st->comm, b.data, b.len, 0, TAG_RESULTS) < 0))
        rc = -1;
    nmt_buf_free(&b);
    return rc;
}

/* Receives rank SRC's results into ALL (N sentences, ALL[i].index == i). 0, or -1 with the error set. */
static int recv_results(struct state *st, int src, struct sent *all, size_t n)
{
    uint64_t len;
    if (comm_recv(st->comm, &len, sizeof len, src, TAG_RESULTS) < 0)
        return -1;
    unsigned char *p = nmt_malloc(len + 1);
    if (!p || comm_recv(st->comm, p, len, src, TAG_RESULTS) < 0) {
        free(p);
        return -1;
    }
    size_t off = 0;
    int rc = 0;
    while (off < len && rc == 0) {
        uint64_t idx;
        double lp;
        if (len - off < sizeof idx + sizeof lp) {
            rc = nmt_seterr("rank %d: results truncated", src);
            break;
        }
        memcpy(&idx, p + off, sizeof idx);
        memcpy(&lp, p + off + sizeof idx, sizeof lp);
        off += sizeof idx + sizeof lp;
        if (idx >= n || all[idx].index != idx) {
            rc = nmt_seterr("rank %d: result for sentence %llu, which is not in the input", src, (unsigned long long)idx);
            break;
        }
        all[idx].lp = lp;
        search_result_free(&all[idx].res);
        rc = search_result_unpack(p, len, &off, &all[idx].res);
    }
    free(p);
    return rc;
}

/* Every rank read the same sentences and made the same NB batches of ORD: rank r decodes batches
 * r, r + N, ... and rank 0 gathers the results into ALL (N sentences). 0, or -1 with the error set. */
static int run_rank_batches(struct state *st, struct sent *all, size_t n, struct sent **ord, const size_t *start,
                            size_t nb)
{
    int me = comm_rank(st->comm), nr = comm_size(st->comm);
    struct sent **mine = malloc((n + 1) * sizeof *mine);
    size_t *mstart = malloc((nb + 2) * sizeof *mstart);
    int rc = mine && mstart ? 0 : nmt_seterr("out of memory");
    size_t m = 0, mb = 0;
    for (size_t b = (size_t)me; rc == 0 && b < nb; b += (size_t)nr) {
        mstart[mb++] = m;
        for (size_t i = start[b]; i < start[b + 1]; i++)
            mine[m++] = ord[i];
    }
    if (rc == 0) {
        mstart[mb] = m;
        rc = run_batches(st, mine, mstart, mb);
    }
    if (rc == 0 && me > 0)
        rc = send_results(st, mine, m);
    for (int r = 1; rc == 0 && me == 0 && r < nr; r++)
        rc = recv_results(st, r, all, n);
    free(mine);
    free(mstart);
    return rc;
}

/* Under several ranks, stdin reaches rank 0 only: rank 0 reads it whole and every rank gets a
 * copy as its stdin (an in-memory file). 0, or -1 with the error set. */
static int share_stdin(struct state *st)
{
    struct nmt_buf b = {0};
    int rc = 0;
    if (comm_rank(st->comm) == 0) {
        char chunk[1 << 16];
        ssize_t got;
        while ((got = read(STDIN_FILENO, chunk, sizeof chunk)) != 0) {
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0 || nmt_buf_append(&b, chunk, (size_t)got) < 0) {
                rc = got < 0 ? nmt_seterr("cannot read stdin: %s", strerror(errno)) : -1;
                break;
            }
        }
    }
    uint64_t len = rc == 0 ? b.len : UINT64_MAX;
    if (comm_bcast(st->comm, &len, sizeof len, 0) < 0 || len == UINT64_MAX) {
        nmt_buf_free(&b);
        return rc < 0 ? -1 : nmt_seterr("rank 0 could not read stdin");
    }
    if (comm_rank(st->comm) != 0 && nmt_buf_reserve(&b, len + 1) < 0)
        return -1;
    b.len = len;
    int fd = -1;
    if (comm_bcast(st->comm, b.data, len, 0) < 0)
        rc = -1;
    else if ((fd = memfd_create("nmt-decode-stdin", 0)) < 0 || write(fd, b.data, len) != (ssize_t)len ||
             lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, STDIN_FILENO) < 0)
        rc = nmt_seterr("cannot keep a copy of stdin: %s", strerror(errno));
    if (fd >= 0)
        close(fd);
    nmt_buf_free(&b);
    return rc;
}

/* Translates the input a line at a time, each written as soon as translated (--interactive).
 * 0 at the end of the input, or -1 with the error set. */
static int translate_interactive(struct state *st, struct input *inp)
{
    struct sent one;
    int rc;
    while ((rc = next(st, inp, &one)) == 1) {
        struct sent *p = &one;
        if (run_batch(st, &st->eng[0], &p, 1) < 0 || emit(st, &one) < 0 || flush_out(st) < 0) {
            sent_free(&one);
            return -1;
        }
        sent_free(&one);
    }
    if (rc < 0)
        sent_free(&one);
    return rc;
}

/* Cuts the N sentences ORD (sorted by length) into batches of at most MAX_TOKENS source tokens
 * (padded) and MAX_SENTENCES sentences (0: no limit): batch b is ORD[START[b]] to
 * ORD[START[b + 1] - 1] (START: N + 1 entries). Returns the number of batches; START[that number]
 * is N. */
static size_t batch_starts(long max_tokens, uint64_t max_sentences, struct sent *const *ord, size_t n, size_t *start)
{
    size_t nb = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        int mx = ord[i]->n[0] + 1;
        while (j < n && (!max_sentences || j - i < max_sentences)) {
            int l = ord[j]->n[0] + 1;
            if ((long)(j - i + 1) * (mx > l ? mx : l) > max_tokens)
                break;
            if (l > mx)
                mx = l;
            j++;
        }
        start[nb++] = i;
        i = j;
    }
    start[nb] = n;
    return nb;
}

/* Translates the input (the lines of this shard) into the output: by line with --interactive, else
 * all of it read, sorted by length and cut into batches. 0, or -1 with the error set. */
static int translate(struct state *st, struct input *inp)
{
    const struct opts *o = st->o;
    int rc;
    if (o->interactive)
        return translate_interactive(st, inp);
    struct sent *all = NULL;
    size_t n = 0, cap = 0;
    int ret = -1;
    struct sent **ord = NULL;
    size_t *start = NULL;
    for (;;) {
        if (NMT_GROW(all, cap, n + 1) < 0)
            goto out;
        rc = next(st, inp, &all[n]);
        if (rc <= 0) {
            if (rc < 0)
                sent_free(&all[n]);
            if (rc < 0)
                goto out;
            break;
        }
        if (o->shard_n && all[n].index % o->shard_n != o->shard_k - 1) {
            sent_free(&all[n]); /* another shard's line */
            continue;
        }
        n++;
    }
    ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) {
        nmt_seterr("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        ord[i] = &all[i];
    qsort(ord, n, sizeof *ord, cmp_len);
    start = malloc((n + 1) * sizeof *start);
    if (!start) {
        nmt_seterr("out of memory");
        goto out;
    }
    /* the ranks cut the same batches: rank 0's size (a rank on another backend may differ) */
    if (comm_size(st->comm) > 1 && comm_bcast(st->comm, &st->max_sentences, sizeof st->max_sentences, 0) < 0)
        goto out;
    size_t nb = batch_starts(o->max_tokens, st->max_sentences, ord, n, start);
    if (o->verbose && comm_rank(st->comm) == 0)
        fprintf(stderr, "nmt-decode: %zu sentences in %zu batches of at most %llu sentences and %ld source tokens; "
                "%d job(s), %d thread(s) in all, backend %s\n", n, nb, (unsigned long long)(st->max_sentences ? st->max_sentences : n),
                o->max_tokens, st->jobs, st->threads, st->eng[0].be->ops.name);
    if (comm_size(st->comm) > 1 ? run_rank_batches(st, all, n, ord, start, nb) < 0 : run_batches(st, ord, start, nb) < 0)
        goto out;
    for (size_t i = 0; i < n && comm_rank(st->comm) == 0; i++)
        if (emit(st, &all[i]) < 0)
            goto out;
    ret = 0;
out:
    for (size_t i = 0; i < n; i++)
        sent_free(&all[i]);
    free(all);
    free(ord);
    free(start);
    return ret;
}

/* ---- main ---- */

/* Reads checkpoint I (kept in st->ckpt[I] for the engines) and its configuration, and parses its
 * vocabulary into *V (the caller frees it). 0, or -1 with the error set. */
static int load_ckpt(struct state *st, const struct opts *o, int i, struct vocab **v)
{
    return checkpoint_open_model(o->model[i], &st->ckpt[i], &st->cfg[i], v);
}

/* Reads the checkpoints (kept in st->ckpt for the engines) and their vocabulary, which must be the
 * same for all, and opens the first engine: with its models when it is the only one, else only its
 * backend context, with its share of the threads. */
static int load(struct state *st, const struct opts *o)
{
    if (load_ckpt(st, o, 0, &st->v) < 0 ||
        (o->shortlist && !(st->sl = shortlist_read(st->ckpt[0], o->model[0], st->cfg[0].vocab))))
        return -1;
    st->max_len = st->cfg[0].max_len;
    for (int i = 1; i < o->nmodels; i++) {
        struct vocab *v = NULL;
        int rc = load_ckpt(st, o, i, &v);
        if (rc == 0 && vocab_fingerprint(v) != vocab_fingerprint(st->v)) {
            char a[17], b[17];
            vocab_fingerprint_hex(v, a);
            vocab_fingerprint_hex(st->v, b);
            rc = nmt_seterr("'%s': vocabulary %s differs from the first model's (%s, '%s'): an ensemble needs one",
                            o->model[i], a, b, o->model[0]);
        }
        vocab_free(v);
        if (rc < 0)
            return -1;
        if (st->cfg[i].max_len < st->max_len)
            st->max_len = st->cfg[i].max_len;
    }
    if (tokenizer_init(&st->tok, st->v, st->v->normalize) < 0)
        return -1;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    st->threads = o->threads ? o->threads : nc > 0 ? (int)nc : 1;
    st->jobs = o->interactive ? 1 : o->jobs ? o->jobs : st->threads < MAX_AUTO_JOBS ? st->threads : MAX_AUTO_JOBS;
    st->eng = calloc((size_t)st->jobs, sizeof *st->eng);
    if (!st->eng)
        return nmt_seterr("out of memory");
    if (engines_open(st, 0, 1, st->jobs) < 0)
        return -1;
    /* an accelerator (no worker threads) decodes one batch at a time unless --jobs says otherwise,
     * and its batches are as large as --max-tokens allows unless --max-sentences says otherwise */
    struct nmt_backend_props pr;
    const struct backend *be = st->eng[0].be;
    int host = be->ops.props(be->ctx, &pr) == 0 && pr.threads > 0;
    if (!o->jobs && st->jobs > 1 && !host)
        st->jobs = 1;
    st->max_sentences = o->max_sentences ? o->max_sentences
                        : host ? (uint64_t)infer_host_batch_sentences(st->cfg, o->nmodels, o->precision,
                                                                      o->sample ? o->sp.samples : o->so.beam)
                               : 0;
    /* one engine: load it now; several: once the batches are known, each in its job (the first
     * one's context is reopened with a larger share if there are fewer batches than jobs) */
    if (st->jobs == 1) {
        if (engine_load(st, &st->eng[0], 1) < 0)
            return -1;
    }
    return 0;
}

enum { GO_ON = -1 };

/* Checks the combinations of options; GO_ON, or the usage error's exit status. */
static int check_args(const struct opts *o)
{
    if (!o->nmodels)
        return nmt_usage_error("a checkpoint is required (-m FILE)");
    if (o->so.nbest > o->so.beam)
        return nmt_usage_error("--nbest %d exceeds --beam %d", o->so.nbest, o->so.beam);
    if ((o->src || o->tgt) && !o->score)
        return nmt_usage_error("--src and --tgt go with --score");
    if (!o->src != !o->tgt)
        return nmt_usage_error("--src and --tgt go together");
    if (o->src && (o->input || o->in_ids))
        return nmt_usage_error("--src/--tgt replace -i and --in ids");
    if (o->score && (o->so.nbest > 1 || o->scores || o->so.beam > 1))
        return nmt_usage_error("--score takes no --beam, --nbest or --scores");
    if (o->out_hyp && o->scores)
        return nmt_usage_error("--scores is for text output (hyp records carry the score)");
    if (o->word_scores && (o->out_hyp || o->score))
        return nmt_usage_error("--word-scores is for translations written as text: not with --out hyp or --score");
    if (o->shortlist && o->score)
        return nmt_usage_error("--score scores over the whole vocabulary: it does not go with --shortlist");
    if (o->shard_n && o->interactive)
        return nmt_usage_error("--shard reads the whole input: it does not go with --interactive");
    if (o->sample_set && !o->sample)
        return nmt_usage_error("--temperature, --top-k, --top-p, --seed and --sample-beam go with --sample");
    if (o->prefix && (o->score || o->shortlist))
        return nmt_usage_error("--prefix forces the start of translations: not with --score, nor with --shortlist "
                               "(whose candidates may not hold the forced pieces)");
    if (o->prefix && !strcmp(o->prefix, "-") && !o->src && (!o->input || !strcmp(o->input, "-")))
        return nmt_usage_error("--prefix - and the input cannot both be stdin");
    if (o->align_words && !o->align)
        return nmt_usage_error("--alignment-words goes with --alignment");
    if (o->align && (o->sample || o->score))
        return nmt_usage_error("--alignment is for translations by search: not with --sample or --score");
    if (o->sample && (o->so.beam > 1 || o->so.nbest > 1 || o->score))
        return nmt_usage_error("--sample draws its own tokens: not with --beam, --nbest (see --sample-beam) or "
                               "--score");
    return GO_ON;
}

/* Parses --shard K/N into O; 0, or -1 after a usage error. */
static int parse_shard(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    const char *slash = strchr(arg, '/');
    char k[32];
    (void)opt;
    if (!slash || (size_t)(slash - arg) >= sizeof k)
        return nmt_usage_error("invalid --shard '%s' (expected K/N, e.g. 2/8)", arg), -1;
    memcpy(k, arg, (size_t)(slash - arg));
    k[slash - arg] = 0;
    if (opt_u64("--shard N", slash + 1, 1, UINT64_C(1) << 40, &o->shard_n) < 0 ||
        opt_u64("--shard K", k, 1, o->shard_n, &o->shard_k) < 0)
        return -1;
    return 0;
}

/* Parses --alignment hard|soft[=T] into O; 0, or -1 after a usage error. */
static int parse_alignment(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    (void)opt;
    o->align_t = 0.5;
    o->align = !strcmp(arg, "hard") ? ALIGN_HARD : !strncmp(arg, "soft", 4) ? ALIGN_SOFT : ALIGN_NONE;
    if (o->align == ALIGN_HARD || !strcmp(arg, "soft"))
        return 0;
    if (o->align == ALIGN_SOFT && arg[4] == '=')
        return opt_double("--alignment soft=T", arg + 5, 0, 1, 0, &o->align_t);
    return nmt_usage_error("invalid --alignment '%s' (hard, soft or soft=THRESHOLD)", arg), -1;
}

/* -m FILE: one more model of the ensemble of O; 0, or -1 after a usage error. */
static int parse_model(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    (void)opt;
    if (o->nmodels == MAX_MODELS)
        return nmt_usage_error("at most %d models (-m)", MAX_MODELS), -1;
    o->model[o->nmodels++] = arg;
    return 0;
}

/* --precision P: infer_precision_parse's names into the uint32_t FIELD; 0, or -1 after a usage error. */
static int parse_precision(const char *opt, const char *arg, void *field)
{
    (void)opt;
    if (infer_precision_parse(arg, field) < 0)
        return nmt_usage_error("%s", nmt_errmsg()), -1;
    return 0;
}

/* The sampling options, which go with --sample (O->sample_set): each parses into O->sp. */
static int parse_temperature(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->sample_set = 1;
    return opt_double(opt, arg, 0, 1e6, 0, &o->sp.temperature);
}

static int parse_top_k(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->sample_set = 1;
    return opt_int(opt, arg, 0, 1 << 30, &o->sp.top_k);
}

/* --top-p P, 0 < P <= 1. */
static int parse_top_p(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->sample_set = 1;
    if (opt_double(opt, arg, 0, 1, 0, &o->sp.top_p) < 0)
        return -1;
    if (o->sp.top_p == 0)
        return nmt_usage_error("invalid --top-p '%s' (expected a mass above 0, at most 1: 0 leaves no token)", arg), -1;
    return 0;
}

static int parse_seed(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->sample_set = 1;
    return opt_u64(opt, arg, 0, UINT64_MAX, &o->sp.seed);
}

static int parse_sample_beam(const char *opt, const char *arg, void *field)
{
    struct opts *o = field;
    o->sample_set = 1;
    return opt_int(opt, arg, 1, 256, &o->sp.samples);
}

static const char *const IN_FORMATS[] = {"text", "ids", NULL}, *const OUT_FORMATS[] = {"text", "hyp", NULL};

#define OFF(field) offsetof(struct opts, field)
#define WHOLE 0 /* the field of a custom entry that parses into several: the options struct itself */
static const struct opt_spec OPTIONS[] = {
    {OPTION(OT_CUSTOM, "model", 'm', "FILE", WHOLE,
            "checkpoint written by nmt-train (required); given several times, an\n"
            "ensemble: each step's distribution is the mean of the models' (one vocabulary)"),
     .parse = parse_model},
    {OPTION(OT_STR, "input", 'i', "FILE", OFF(input), "input ('-' for stdin, the default)")},
    {OPTION(OT_STR, "output", 'o', "FILE", OFF(output), "output ('-' for stdout, the default)")},
    {OPTION(OT_CHOICE, "in", 0, "FORMAT", OFF(in_ids), "text (default) or ids (an ids stream from nmt-tokenize)"),
     .choices = IN_FORMATS},
    {OPTION(OT_CHOICE, "out", 0, "FORMAT", OFF(out_hyp), "text (default) or hyp (a hyp stream)"),
     .choices = OUT_FORMATS},
    {OPTION(OT_INT, "beam", 'b', "K", OFF(so.beam), "beam size (default 1: greedy)"), .imin = 1, .imax = 256,
     .def.i = 1},
    {OPTION(OT_DOUBLE, "alpha", 0, "A", OFF(so.alpha), "length penalty exponent, ((5+len)/6)^A (default 0.6)"),
     .dmin = 0, .dmax = 10, .def.d = 0.6},
    {OPTION(OT_DOUBLE, "max-len-a", 0, "A", OFF(so.len_a),
            "longest output: A * source tokens + B, with EOS (default 1)"),
     .dmin = 0, .dmax = 1000, .def.d = 1},
    {OPTION(OT_DOUBLE, "max-len-b", 0, "B", OFF(so.len_b), "B of --max-len-a (default 50)"), .dmin = 0, .dmax = 1e6,
     .def.d = 50},
    {OPTION(OT_INT, "nbest", 0, "N", OFF(so.nbest), "print the N best translations as TSV rows: line, rank, score, text"),
     .imin = 1, .imax = 256, .def.i = 1},
    {OPTION(OT_FLAG, "scores", 0, NULL, OFF(scores), "print each translation's score before it, tab-separated")},
    {OPTION(OT_STR, "prefix", 0, "FILE", OFF(prefix),
            "force the start of each output: line N of FILE (text, tokenized as the\n"
            "output) begins the translation of input line N, the search goes on after\n"
            "it; an empty line forces nothing; the forced pieces count in the score")},
    {OPTION(OT_FLAG, "word-scores", 0, NULL, OFF(word_scores),
            "print each output token's log-probability after the text, tab-separated:\n"
            "one number per piece, the end of sentence last, separated by spaces")},
    {OPTION(OT_CUSTOM, "alignment", 0, "MODE", WHOLE,
            "after the text a tab and the alignment of source and output pieces from the\n"
            "last decoder layer's attention, as 'SRC-TGT' index pairs from 0: hard (each\n"
            "output piece with the source piece it attends to most), or soft[=T] (every\n"
            "pair of attention at least T, default 0.5)"),
     .parse = parse_alignment},
    {OPTION(OT_FLAG, "alignment-words", 0, NULL, OFF(align_words),
            "the --alignment of words instead of pieces (a word: a piece that begins\n"
            "with the vocabulary's word boundary and the pieces after it), each pair\n"
            "once, sorted by output word, then source word\n"
            "(--alignment with --out hyp: in the hyp records, see nmt-cat)")},
    {OPTION(OT_FLAG, "sample", 0, NULL, OFF(sample),
            "draw each token from the model's distribution instead of searching (for\n"
            "back-translation); reproducible: a sentence's sample depends on --seed and\n"
            "its line number only")},
    {OPTION(OT_CUSTOM, "temperature", 0, "T", WHOLE, "sample from p^(1/T) (default 1; 0: the most probable token)"),
     .parse = parse_temperature},
    {OPTION(OT_CUSTOM, "top-k", 0, "K", WHOLE, "sample among the K most probable tokens (default 0: all)"),
     .parse = parse_top_k},
    {OPTION(OT_CUSTOM, "top-p", 0, "P", WHOLE,
            "then among the fewest most probable tokens of mass P, 0 < P <= 1 (default 1)"),
     .parse = parse_top_p},
    {OPTION(OT_CUSTOM, "seed", 0, "N", WHOLE, "seed of the samples (default 1)"), .parse = parse_seed},
    {OPTION(OT_CUSTOM, "sample-beam", 0, "N", WHOLE, "N samples of each sentence, printed as --nbest rows in sample order"),
     .parse = parse_sample_beam},
    {OPTION(OT_FLAG, "score", 0, NULL, OFF(score),
            "score given pairs instead of translating: input lines 'SOURCE<TAB>TARGET'\n"
            "(or --src/--tgt, or a two-sided ids stream); prints each log-probability")},
    {OPTION(OT_STR, "src", 0, "FILE", OFF(src), "the source side of --score as a file, parallel to --tgt")},
    {OPTION(OT_STR, "tgt", 0, "FILE", OFF(tgt), "the target side of --score as a file, parallel to --src")},
    {OPTION(OT_U64, "max-tokens", 0, "N", OFF(max_tokens_u), "source tokens per batch (default 4096)"), .imin = 1,
     .imax = 100000000, .def.u = 4096},
    {OPTION(OT_U64, "max-sentences", 0, "N", OFF(max_sentences),
            "sentences per batch at most (default on the cpu: 16, or 128 / beam\n"
            "within 16..64 for a model of over 32 MiB of weights a decoder step; on\n"
            "an accelerator as many as --max-tokens allows); where sentences join\n"
            "the batch under way, each job's (by default, with several jobs, half)"),
     .imin = 1, .imax = 100000000},
    {OPTION(OT_FLAG, "interactive", 0, NULL, OFF(interactive),
            "translate and write each line as it arrives (default when the input is\nnot a regular file)")},
    {OPTION(OT_FLAG, "static-batches", 0, NULL, OFF(static_batches),
            "decode each batch to its end before the next: without it, the search takes\n"
            "sentences into the batch under way as others end (the same translations,\n"
            "fewer steps with few sentences)")},
    {OPTION(OT_FLAG, "batch-variant", 0, NULL, OFF(variant),
            "faster products whose results may depend on the batch neighbours")},
    {OPTION(OT_CUSTOM, "precision", 0, "P", OFF(precision),
            "float32 (default), int8: the encoder's and decoder's linear layers in\n"
            "8-bit integers (weights per output channel, activations per row; the\n"
            "output projection, attention and layer norms stay float32), bf16\n"
            "(on CPUs with AVX512-BF16: bf16 products, float32 sums), int8-a8: int8\n"
            "with 8-bit activations (12-bit in int8): faster on VNNI CPUs, half the\n"
            "weight memory on AVX2, further from float32; int8-a7: 7-bit activations,\n"
            "faster on AVX2 CPUs without VNNI, further still; or int8-all,\n"
            "int8-a8-all, int8-a7-all, bf16-all: the output projection in that\n"
            "precision too"),
     .parse = parse_precision},
    {OPTION(OT_FLAG, "shortlist", 0, NULL, OFF(shortlist),
            "the output layer computes only each sentence's candidates in the\n"
            "first model's vocabulary shortlist (nmt-avg --shortlist): faster;\n"
            "the softmax is over them, so scores and some translations change")},
    {OPTION(OT_STR, "backend", 0, "NAME", OFF(backend), "compute backend (default: $NMT_BACKEND, else auto)")},
    {OPTION(OT_INT, "threads", 0, "N", OFF(threads), "worker threads in all (default: all cores)"), .imin = 0,
     .imax = 1024},
    {OPTION(OT_INT, "jobs", 0, "N", OFF(jobs),
            "batches decoded at once, each on its own backend context with\n"
            "threads/N threads, all reading one copy of the model on the cpu\n"
            "(default: the threads, at most 4, on the cpu; 1 on an accelerator)"),
     .imin = 1, .imax = 256},
    {OPTION(OT_U64, "max-line-bytes", 0, "N", OFF(max_line),
            "longest input line accepted (default 1 GiB); a longer one is an error"),
     .imin = 1, .imax = SIZE_MAX / 2, .def.u = LINES_DEFAULT_MAX},
    {OPTION(OT_CUSTOM, "shard", 0, "K/N", WHOLE,
            "decode only the input's lines K, K+N, K+2N, ... (K from 1); merge the N\n"
            "text outputs with: paste -d '\\n' out.1 ... out.N | head -n LINES"),
     .parse = parse_shard},
    {OPTION(OT_STR, "comm", 0, "NAME", OFF(comm),
            "under mpirun: auto (default; MPI with N > 1 ranks), mpi, none. The ranks\n"
            "share the batches and rank 0 writes the output, as one process would")},
    {OPTION(OT_FLAG, "quiet", 'q', NULL, OFF(quiet), "no warnings about long lines")},
    {OPTION(OT_FLAG, "verbose", 0, NULL, OFF(verbose),
            "print the batches, jobs, threads and backend chosen on stderr")},
    OPT_HELP_VERSION_END};
#undef WHOLE

static const char USAGE_HEAD[] =
    "Usage: nmt-decode [OPTION]... -m CHECKPOINT [-i INPUT] [-o OUTPUT]\n"
    "Translates source sentences with a trained model: raw text in (one sentence per line), detokenized\n"
    "text out, one line per input line in input order. The checkpoint's vocabulary tokenizes the input.\n"
    "\n";
static const char USAGE_TAIL[] = "\nExit status: 0 success, 1 bad input or runtime failure, 2 usage error.\n";

/* Parses the options into O (*INTER_SET: --interactive was given); GO_ON, or the exit status. */
static int parse_args(int argc, char **argv, struct opts *o, int *inter_set)
{
    opt_defaults(OPTIONS, o);
    int parsed = opt_parse_tool(OPTIONS, argc, argv, o, USAGE_HEAD, USAGE_TAIL);
    if (parsed != OPT_PROCEED)
        return parsed;
    if (optind < argc)
        return nmt_usage_error("unexpected argument '%s'", argv[optind]);
    o->max_tokens = (long)o->max_tokens_u;
    *inter_set = o->interactive;
    /* the translations' scores are printed with --scores, --word-scores and --nbest, and kept in hyp
     * records: otherwise greedy search ranks each step's tokens by their logits alone */
    o->so.ranks_only = !o->scores && !o->word_scores && !o->out_hyp && o->so.nbest <= 1;
    return check_args(o);
}

/* Opens the input (before any output, so that a missing file fails first): an ids stream, or text
 * lines and, with --tgt, the target file. 0, or -1 with the error set. */
static int open_input(struct opts *o, struct input *inp, int inter_set)
{
    const char *inpath = o->src ? o->src : o->input ? o->input : "-";
    inp->name = nmt_path_name(inpath, 0);
    inp->fd = nmt_open_in(inpath);
    if (inp->fd < 0)
        return -1;
    if (nmt_check_not_input(inp->fd, inp->name, o->output) < 0)
        return -1;
    if (o->prefix && line_reader_open(&inp->pre, o->prefix, o->max_line) < 0)
        return -1;
    if (!inter_set) {
        struct stat sb;
        o->interactive = fstat(inp->fd, &sb) == 0 && !S_ISREG(sb.st_mode);
    }
    if (o->in_ids) {
        inp->r = rec_reader_open(inp->fd, inp->name, "ids", NULL);
        return inp->r ? 0 : -1;
    }
    int fd = inp->fd;
    inp->fd = -1; /* the reader's from here on */
    if (line_reader_fdopen(&inp->src, fd, inp->name, o->max_line) < 0)
        return -1;
    return o->tgt ? line_reader_open(&inp->tgt, o->tgt, o->max_line) : 0;
}

/* An ids input must come from the models' vocabulary; 0, or -1 with the error set. */
static int check_ids_vocab(const struct state *st, const struct input *inp)
{
    if (!inp->r)
        return 0;
    char fp[17];
    vocab_fingerprint_hex(st->v, fp);
    const char *hv = rec_header_get(rec_reader_header(inp->r), "vocab");
    if (!hv)
        return nmt_seterr("%s: the ids stream names no vocabulary (its header has no vocab key); the model's is %s",
                          inp->name, fp);
    if (strcmp(hv, fp) != 0)
        return nmt_seterr("%s: ids of vocabulary %s, but the model's vocabulary is %s ('%s')", inp->name, hv, fp,
                          st->o->model[0]);
    return 0;
}

/* Opens the output: a hyp stream or text, written to a temporary file when named. 0, or -1. */
static int open_output(struct state *st, const struct opts *o, struct out_file *out)
{
    const char *name = nmt_path_name(o->output ? o->output : "-", 1);
    if (nmt_output_open(out, o->output, o->out_hyp) < 0)
        return -1;
    if (o->out_hyp) {
        char fp[17];
        vocab_fingerprint_hex(st->v, fp);
        struct rec_kv kv[1] = {{"vocab", fp}};
        struct rec_writer_opts wo = {.flags = o->align ? REC_FLAG_ALIGN : 0};
        st->w = rec_writer_open(out->fd, name, "hyp", "nmt-decode " NMT_VERSION, kv, 1, &wo);
        return st->w ? 0 : -1;
    }
    st->out = out->mode == 1 ? stdout : fdopen(dup(out->fd), "w");
    return st->out ? 0 : nmt_seterr("cannot write '%s': %s", name, strerror(errno));
}

/* Ends the output (trailer or flush), then commits it when OK (else drops it). 0, or -1. */
static int close_output(struct state *st, const struct opts *o, struct out_file *out, int ok)
{
    int rc = 0;
    if (st->w) {
        if (!ok)
            rec_writer_abort(st->w);
        else if (rec_writer_close(st->w) < 0)
            rc = -1;
        st->w = NULL;
    }
    if (st->out && st->out != stdout && fclose(st->out) && ok && rc == 0)
        rc = nmt_seterr("cannot write '%s': %s", o->output, strerror(errno));
    st->out = NULL;
    if (nmt_output_finish(out, ok && rc == 0) < 0)
        rc = -1;
    return rc;
}

static void input_close(struct input *inp)
{
    rec_reader_free(inp->r);
    ids_record_free(&inp->ir);
    line_reader_close(&inp->src);
    line_reader_close(&inp->tgt);
    line_reader_close(&inp->pre);
    if (inp->fd >= 0 && inp->fd != STDIN_FILENO)
        close(inp->fd);
}

/* Joins the ranks of an mpirun job (if any): shares stdin, and gives each rank its share of the
 * cores by default. 0, or -1 with the error set. */
static int join_ranks(struct state *st, struct opts *o)
{
    if (comm_open(o->comm, &st->comm) < 0)
        return -1;
    if (comm_size(st->comm) < 2)
        return 0;
    if (o->interactive)
        return nmt_seterr("--interactive does not go with several ranks (each line would wait for all of them)");
    if (o->shard_n)
        return nmt_seterr("--shard is for separate jobs; under mpirun the ranks share the input themselves");
    if (!o->threads)
        o->threads = comm_local_threads(st->comm);
    const char *in = o->src ? o->src : o->input ? o->input : "-";
    return strcmp(in, "-") ? 0 : share_stdin(st);
}

int main(int argc, char **argv)
{
    nmt_start(argv);
    struct opts o = {.precision = NMT_DTYPE_F32, .so = SEARCH_OPTS_DEFAULT, /* the rest: the table's */
                     .sp = {.samples = 1, .temperature = 1, .top_k = 0, .top_p = 1, .seed = 1}};
    int inter_set = 0;
    int status = parse_args(argc, argv, &o, &inter_set);
    if (status != GO_ON)
        return status;
    o.so.attention = o.align != ALIGN_NONE;
    if (o.sample) /* N rows per sentence (search_reserve), printed as n-best lists */
        o.so.beam = o.so.nbest = o.sp.samples;
    struct state st;
    memset(&st, 0, sizeof st);
    st.o = &o;
    struct input inp;
    memset(&inp, 0, sizeof inp);
    inp.fd = -1;
    struct out_file out = {.fd = -1};
    int ok = join_ranks(&st, &o) == 0, root = comm_rank(st.comm) == 0;
    ok = ok && open_input(&o, &inp, inter_set) == 0 && load(&st, &o) == 0 && check_ids_vocab(&st, &inp) == 0 &&
         (!root || open_output(&st, &o, &out) == 0) && translate(&st, &inp) == 0;
    if (!ok && comm_size(st.comm) > 1) { /* the other ranks wait for this one: end them all */
        nmt_error("rank %d: %s", comm_rank(st.comm), nmt_errmsg());
        close_output(&st, &o, &out, 0);
        comm_abort(st.comm, NMT_EXIT_DATA);
    }
    if (!ok)
        nmt_error("%s", nmt_errmsg());
    if (root && close_output(&st, &o, &out, ok) < 0 && ok) {
        nmt_error("%s", nmt_errmsg());
        ok = 0;
    }
    status = ok ? NMT_EXIT_OK : NMT_EXIT_DATA;
    input_close(&inp);
    engines_close(&st);
    free(st.eng);
    ckpts_free(&st);
    free(st.align.p);
    shortlist_free(st.sl);
    tokenizer_free(&st.tok);
    vocab_free(st.v);
    nmt_buf_free(&st.rec);
    comm_close(st.comm);
    if (nmt_close_stdout() < 0 && !status) {
        nmt_error("%s", nmt_errmsg());
        status = NMT_EXIT_DATA;
    }
    return status;
}
