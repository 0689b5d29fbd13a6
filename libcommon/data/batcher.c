/* batcher.c: token-budget batching with length bucketing and seeded shuffling (see batcher.h). */
#include "data/batcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "io/records.h"
#include "base/util.h"

/* ---- options ---- */

void batcher_opts_init(struct batcher_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = 4096;
    o->window = 100000;
    o->seed = 1;
    o->shard_k = 0;
    o->shard_n = 1;
}

int batcher_opts_check(const struct batcher_opts *o)
{
    if (o->max_tokens < 1 || o->max_tokens > BATCHER_MAX_TOKENS)
        return nmt_seterr("--max-tokens must be between 1 and %u", BATCHER_MAX_TOKENS);
    if (o->max_sentences > BATCHER_MAX_TOKENS)
        return nmt_seterr("--max-sentences must be between 1 and %u", BATCHER_MAX_TOKENS);
    if (o->max_len > BATCHER_MAX_TOKENS)
        return nmt_seterr("--max-len must be between 1 and %u", BATCHER_MAX_TOKENS);
    if (o->max_ratio != 0 && !(o->max_ratio >= 1))
        return nmt_seterr("--max-ratio must be at least 1");
    if (o->window < 1 || o->window > BATCHER_MAX_WINDOW)
        return nmt_seterr("--window must be between 1 and %u", BATCHER_MAX_WINDOW);
    if (o->shard_n < 1 || o->shard_k >= o->shard_n)
        return nmt_seterr("--shard K/N needs N >= 1 and 0 <= K < N");
    return 0;
}

void batcher_header_kv(struct batcher_kv *out, const struct batcher_opts *o, uint64_t epochs,
                       const char *vocab)
{
    char *p = out->store, *end = out->store + sizeof out->store;
    out->nkv = 0;
#define KV(k, ...)                                                        \
    do {                                                                  \
        out->kv[out->nkv].key = (char *)(k);                              \
        out->kv[out->nkv].value = p;                                      \
        out->nkv++;                                                       \
        int len_ = snprintf(p, (size_t)(end - p), __VA_ARGS__);           \
        p += (len_ < 0 ? 0 : len_ + 1 > end - p ? end - p : len_ + 1);    \
    } while (0)
    if (vocab)
        KV("vocab", "%s", vocab);
    KV("max_tokens", "%llu", (unsigned long long)o->max_tokens);
    KV("max_sentences", "%llu", (unsigned long long)o->max_sentences);
    KV("max_len", "%llu", (unsigned long long)o->max_len);
    KV("truncate", "%d", o->truncate ? 1 : 0);
    KV("max_ratio", "%g", o->max_ratio);
    KV("window", "%llu", (unsigned long long)o->window);
    KV("seed", "%llu", (unsigned long long)o->seed);
    KV("epochs", "%llu", (unsigned long long)epochs);
    KV("shard", "%llu/%llu", (unsigned long long)o->shard_k, (unsigned long long)o->shard_n);
#undef KV
}

/* ---- the batcher ---- */

/* One pair held in the window. Row lengths count the EOS; tlen is 0 for a source-only record. */
struct bpair {
    uint64_t index;            /* the ids record's index */
    uint64_t key;              /* random tie-break inside a length bucket */
    size_t off;                /* first id in the pool: slen-1 source ids, then tlen-1 target ids */
    uint32_t slen, tlen;
};

struct bspan {
    size_t start, count;       /* a batch: COUNT pairs from START in the sorted window */
};

struct batcher {
    struct batcher_opts o;
    uint64_t limit;            /* longest row kept: min(max_len, max_tokens) */
    struct batcher_stats st;
    struct rng rng;
    struct ids_record rec;
    struct bpair *pair;        /* (pair_cap), pair_cap <= window */
    size_t npair, pair_cap;
    uint32_t *pool;            /* ids of the pairs in the window */
    size_t pool_len, pool_cap;
    struct bspan *span;        /* batches of the window */
    size_t nspan, span_cap;
    struct batch_record batch;
    struct nmt_buf buf;
    uint64_t epoch_batch;      /* batches formed so far this epoch (all shards) */
};

struct batcher *batcher_new(const struct batcher_opts *o)
{
    if (batcher_opts_check(o) < 0)
        return NULL;
    struct batcher *b = nmt_calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->o = *o;
    b->limit = o->max_len && o->max_len < o->max_tokens ? o->max_len : o->max_tokens;
    return b;
}

void batcher_free(struct batcher *b)
{
    if (!b)
        return;
    ids_record_free(&b->rec);
    free(b->pair);
    free(b->pool);
    free(b->span);
    batch_record_free(&b->batch);
    nmt_buf_free(&b->buf);
    free(b);
}

const struct batcher_stats *batcher_stats(const struct batcher *b) { return &b->st; }

static int pool_reserve(struct batcher *b, size_t n)
{
    return NMT_GROW(b->pool, b->pool_cap, b->pool_len + n);
}

/* Checks that no id of a side is PAD, BOS or EOS. */
static int check_ids(const uint32_t *ids, uint32_t n, const char *name, uint64_t recno, const char *side)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == NMT_PAD || ids[i] == NMT_BOS || ids[i] == NMT_EOS)
            return nmt_seterr("%s: record %llu: %s id %u at position %u is a special id (PAD, BOS or EOS)",
                              name, (unsigned long long)recno, side, ids[i], i);
    return 0;
}

/* Adds the decoded record to the window, or drops it (counted). 0 or -1. */
static int add_pair(struct batcher *b, const char *name, uint64_t recno)
{
    struct ids_record *r = &b->rec;
    if (r->nsides != 2)
        return nmt_seterr("%s: record %llu: a source sentence without a target; batches are made of pairs (tokenize "
                          "both sides: nmt-tokenize --vocab V --src FILE --tgt FILE, or --tsv)", name,
                          (unsigned long long)recno);
    uint32_t ns = r->n[0], nt = r->n[1];
    if (check_ids(r->ids[0], ns, name, recno, "source") < 0 ||
        check_ids(r->ids[1], nt, name, recno, "target") < 0)
        return -1;
    uint64_t slen = (uint64_t)ns + 1, tlen = (uint64_t)nt + 1;
    if (slen > b->limit || tlen > b->limit) {
        if (!b->o.truncate) {
            b->st.dropped_len++;
            return 0;
        }
        b->st.truncated++;
        if (slen > b->limit)
            slen = b->limit;
        if (tlen > b->limit)
            tlen = b->limit;
    }
    if (b->o.max_ratio > 0 && tlen > 0) {
        double hi = (double)(slen > tlen ? slen : tlen), lo = (double)(slen > tlen ? tlen : slen);
        if (hi > b->o.max_ratio * lo) {
            b->st.dropped_ratio++;
            return 0;
        }
    }
    size_t nsrc = (size_t)slen - 1, ntgt = tlen ? (size_t)tlen - 1 : 0;
    if (pool_reserve(b, nsrc + ntgt) < 0)
        return -1;
    struct bpair *p = &b->pair[b->npair++];
    p->index = r->index;
    p->key = rng_next(&b->rng);
    p->off = b->pool_len;
    p->slen = (uint32_t)slen;
    p->tlen = (uint32_t)tlen;
    if (nsrc) /* an empty source side has no array */
        memcpy(b->pool + b->pool_len, r->ids[0], nsrc * sizeof(uint32_t));
    b->pool_len += nsrc;
    if (ntgt) {
        memcpy(b->pool + b->pool_len, r->ids[1], ntgt * sizeof(uint32_t));
        b->pool_len += ntgt;
    }
    return 0;
}

static int pair_cmp(const void *va, const void *vb)
{
    const struct bpair *a = va, *b = vb;
    if (a->slen != b->slen)
        return a->slen < b->slen ? -1 : 1;
    if (a->tlen != b->tlen) /* alternate direction so neighbouring source lengths meet at similar targets */
        return (a->tlen < b->tlen) == (a->slen % 2 == 1) ? -1 : 1;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static int span_push(struct batcher *b, size_t start, size_t count)
{
    if (NMT_GROW(b->span, b->span_cap, b->nspan + 1) < 0)
        return -1;
    b->span[b->nspan].start = start;
    b->span[b->nspan].count = count;
    b->nspan++;
    return 0;
}

/* Cuts the sorted window into batches: a pair joins the current batch while the padded size of the
 * larger side stays within max_tokens and the row count within max_sentences. */
static int cut_batches(struct batcher *b)
{
    b->nspan = 0;
    size_t start = 0;
    uint64_t maxs = 0, maxt = 0;
    for (size_t i = 0; i < b->npair; i++) {
        uint64_t s = b->pair[i].slen > maxs ? b->pair[i].slen : maxs;
        uint64_t t = b->pair[i].tlen > maxt ? b->pair[i].tlen : maxt;
        uint64_t rows = i - start + 1, wide = s > t ? s : t;
        if (rows > 1 && (rows * wide > b->o.max_tokens || (b->o.max_sentences && rows > b->o.max_sentences))) {
            if (span_push(b, start, i - start) < 0)
                return -1;
            start = i;
            s = b->pair[i].slen;
            t = b->pair[i].tlen;
        }
        maxs = s;
        maxt = t;
    }
    if (start < b->npair && span_push(b, start, b->npair - start) < 0)
        return -1;
    return 0;
}

static int write_batch(struct batcher *b, const struct bspan *sp, struct rec_writer *out)
{
    const struct bpair *p = b->pair + sp->start;
    uint32_t S = 0, T = 0, B = (uint32_t)sp->count;
    for (uint32_t r = 0; r < B; r++) {
        if (p[r].slen > S)
            S = p[r].slen;
        if (p[r].tlen > T)
            T = p[r].tlen;
    }
    struct batch_record *br = &b->batch;
    if (batch_record_resize(br, B, S, T) < 0)
        return -1;
    uint64_t tokens = 0;
    for (uint32_t r = 0; r < B; r++) {
        const uint32_t *ids = b->pool + p[r].off;
        uint32_t *src = br->src + (size_t)r * S, *tgt = br->tgt + (size_t)r * T;
        uint32_t ns = p[r].slen - 1, nt = p[r].tlen ? p[r].tlen - 1 : 0;
        br->index[r] = p[r].index;
        br->src_len[r] = p[r].slen;
        br->tgt_len[r] = p[r].tlen;
        if (ns)
            memcpy(src, ids, (size_t)ns * sizeof *src);
        src[ns] = NMT_EOS;
        for (uint32_t c = ns + 1; c < S; c++)
            src[c] = NMT_PAD;
        if (T) {
            if (nt)
                memcpy(tgt, ids + ns, (size_t)nt * sizeof *tgt);
            uint32_t c = nt;
            if (p[r].tlen)
                tgt[c++] = NMT_EOS;
            for (; c < T; c++)
                tgt[c] = NMT_PAD;
        }
        tokens += p[r].slen + p[r].tlen;
    }
    b->buf.len = 0;
    if (batch_record_encode(&b->buf, br) < 0)
        return -1;
    if (rec_write(out, b->buf.data, b->buf.len) < 0)
        return -1;
    b->st.batches++;
    b->st.rows += B;
    b->st.tokens += tokens;
    b->st.cells += (uint64_t)B * S + (uint64_t)B * T;
    return 0;
}

/* Sorts, cuts, shuffles and writes the pairs of the window, then empties it. 0 or -1. */
static int flush_window(struct batcher *b, struct rec_writer *out)
{
    if (b->npair == 0)
        return 0;
    qsort(b->pair, b->npair, sizeof *b->pair, pair_cmp);
    if (cut_batches(b) < 0)
        return -1;
    rng_shuffle(&b->rng, b->span, b->nspan, sizeof *b->span);
    for (size_t i = 0; i < b->nspan; i++, b->epoch_batch++)
        if (b->epoch_batch % b->o.shard_n == b->o.shard_k && write_batch(b, &b->span[i], out) < 0)
            return -1;
    b->npair = 0;
    b->pool_len = 0;
    return rec_flush(out) < 0 ? -1 : 0;
}

/* Makes room for one more pair in the window (grown by doubling, never past the window size). */
static int pair_reserve(struct batcher *b)
{
    if (b->npair < b->pair_cap)
        return 0;
    size_t cap = b->pair_cap ? b->pair_cap * 2 : 4096;
    if (cap > b->o.window)
        cap = (size_t)b->o.window;
    struct bpair *p = nmt_realloc(b->pair, cap * sizeof *p);
    if (!p)
        return -1;
    b->pair = p;
    b->pair_cap = cap;
    return 0;
}

int batcher_epoch(struct batcher *b, uint64_t epoch, struct rec_reader *in, const char *in_name,
                  struct rec_writer *out)
{
    rng_seed(&b->rng, b->o.seed + epoch);
    b->npair = 0;
    b->pool_len = 0;
    b->epoch_batch = 0;
    for (;;) {
        const unsigned char *data;
        size_t len;
        int st = rec_read(in, &data, &len);
        if (st == REC_END)
            break;
        if (st < 0)
            return -1;
        uint64_t recno = rec_reader_count(in);
        if (ids_record_decode(&b->rec, data, len) < 0)
            return nmt_seterr("%s: record %llu: %s", in_name, (unsigned long long)recno, nmt_errmsg());
        b->st.pairs++;
        if (pair_reserve(b) < 0 || add_pair(b, in_name, recno) < 0)
            return -1;
        if (b->npair == b->o.window && flush_window(b, out) < 0)
            return -1;
    }
    if (flush_window(b, out) < 0)
        return -1;
    b->st.epochs++;
    return 0;
}

double batcher_padding(const struct batcher_stats *s)
{
    return s->cells ? 1.0 - (double)s->tokens / (double)s->cells : 0.0;
}

size_t batcher_stats_format(const struct batcher_stats *s, enum batcher_style style, char *buf, size_t n)
{
    unsigned long long e = s->epochs, p = s->pairs, dl = s->dropped_len, dr = s->dropped_ratio,
                       tr = s->truncated, nb = s->batches, rows = s->rows, tok = s->tokens, cells = s->cells;
    double pad = batcher_padding(s);
    int len = 0;
    switch (style) {
    case BATCHER_TEXT:
        len = snprintf(buf, n,
                       "%llu epoch%s, %llu pairs read, %llu dropped (%llu too long, %llu over ratio), "
                       "%llu truncated, %llu batches, %llu rows, %llu tokens, %llu padded cells, padding %.2f%%",
                       e, e == 1 ? "" : "s", p, dl + dr, dl, dr, tr, nb, rows, tok, cells, pad * 100);
        break;
    case BATCHER_JSON:
        len = snprintf(buf, n,
                       "{\"epochs\":%llu,\"pairs\":%llu,\"dropped_len\":%llu,\"dropped_ratio\":%llu,"
                       "\"truncated\":%llu,\"batches\":%llu,\"rows\":%llu,\"tokens\":%llu,\"cells\":%llu,"
                       "\"padding\":%.6f}",
                       e, p, dl, dr, tr, nb, rows, tok, cells, pad);
        break;
    case BATCHER_CSV_HEADER:
        len = snprintf(buf, n, "epochs,pairs,dropped_len,dropped_ratio,truncated,batches,rows,tokens,cells,padding");
        break;
    case BATCHER_CSV_ROW:
        len = snprintf(buf, n, "%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.6f", e, p, dl, dr, tr, nb, rows,
                       tok, cells, pad);
        break;
    }
    if (len < 0)
        len = 0;
    if (n == 0)
        return 0;
    return (size_t)len < n ? (size_t)len : n - 1;
}
