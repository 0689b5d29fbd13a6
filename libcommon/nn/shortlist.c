/* shortlist.c: the vocabulary shortlist of decoding (see shortlist.h). */
#include "nn/shortlist.h"
#include "base/u64map.h"
#include "base/util.h"
#include "io/records.h"
#include "nn/checkpoint.h"

#include <stdlib.h>
#include <string.h>

struct shortlist_counts {
    int vocab;
    uint64_t pairs;
    struct u64map both;        /* s * V + t -> pairs holding both */
    uint64_t *src_pairs;       /* (V) pairs holding each source piece */
    uint64_t *tgt_pairs;       /* (V) pairs holding each target piece */
    uint64_t *tgt_tokens;      /* (V) occurrences of each target piece */
    uint32_t *s_set, *t_set;   /* one pair's distinct pieces */
    size_t set_cap;
};

struct shortlist_counts *shortlist_counts_new(int vocab)
{
    struct shortlist_counts *c = nmt_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->vocab = vocab;
    u64map_init(&c->both);
    c->src_pairs = nmt_calloc((size_t)vocab, sizeof *c->src_pairs);
    c->tgt_pairs = nmt_calloc((size_t)vocab, sizeof *c->tgt_pairs);
    c->tgt_tokens = nmt_calloc((size_t)vocab, sizeof *c->tgt_tokens);
    if (vocab < 1 || !c->src_pairs || !c->tgt_pairs || !c->tgt_tokens) {
        shortlist_counts_free(c);
        return vocab < 1 ? nmt_seterr("shortlist: empty vocabulary"), NULL : NULL;
    }
    return c;
}

void shortlist_counts_free(struct shortlist_counts *c)
{
    if (!c)
        return;
    u64map_free(&c->both);
    free(c->src_pairs);
    free(c->tgt_pairs);
    free(c->tgt_tokens);
    free(c->s_set);
    free(c->t_set);
    free(c);
}

uint64_t shortlist_counts_pairs(const struct shortlist_counts *c) { return c->pairs; }

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Copies the N ids IDS into SET, sorted and each once; returns how many. */
static int distinct(const uint32_t *ids, int n, uint32_t *set)
{
    memcpy(set, ids, (size_t)n * sizeof *set);
    qsort(set, (size_t)n, sizeof *set, u32_cmp);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || set[i] != set[k - 1])
            set[k++] = set[i];
    return k;
}

int shortlist_counts_add(struct shortlist_counts *c, const uint32_t *src, int slen, const uint32_t *tgt, int tlen)
{
    uint32_t V = (uint32_t)c->vocab;
    size_t need = (size_t)(slen > tlen ? slen : tlen) + 1;
    for (int i = 0; i < slen; i++)
        if (src[i] >= V)
            return nmt_seterr("source id %u outside the vocabulary of %u", src[i], V);
    for (int i = 0; i < tlen; i++)
        if (tgt[i] >= V)
            return nmt_seterr("target id %u outside the vocabulary of %u", tgt[i], V);
    if (NMT_GROW2(c->s_set, c->t_set, c->set_cap, need) < 0)
        return -1;
    int ns = distinct(src, slen, c->s_set), nt = distinct(tgt, tlen, c->t_set);
    for (int j = 0; j < tlen; j++)
        c->tgt_tokens[tgt[j]]++;
    for (int j = 0; j < nt; j++)
        c->tgt_pairs[c->t_set[j]]++;
    for (int i = 0; i < ns; i++) {
        c->src_pairs[c->s_set[i]]++;
        for (int j = 0; j < nt; j++) {
            uint64_t *v = u64map_get(&c->both, (uint64_t)c->s_set[i] * V + c->t_set[j]);
            if (!v)
                return -1;
            ++*v;
        }
    }
    c->pairs++;
    return 0;
}

/* A target piece and its association with one source piece, or its frequency. */
struct scored {
    double score;
    int32_t id;
};

static int scored_cmp(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void shortlist_free(struct shortlist *s)
{
    if (!s)
        return;
    free(s->table);
    free(s->freq);
    free(s);
}

/* A shortlist of VOCAB pieces with room for PER_SOURCE targets a source and NFREQ frequent ones,
 * its table all -1; NULL with the error set. */
static struct shortlist *shortlist_alloc(int vocab, int per_source, int nfreq)
{
    struct shortlist *s = nmt_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->vocab = vocab;
    s->per_source = per_source;
    s->nfreq = nfreq;
    size_t cells = (size_t)vocab * (size_t)per_source;
    s->table = nmt_malloc(cells * sizeof *s->table + 1);
    s->freq = nmt_malloc((size_t)nfreq * sizeof *s->freq + 1);
    if (!s->table || !s->freq) {
        shortlist_free(s);
        return NULL;
    }
    for (size_t i = 0; i < cells; i++)
        s->table[i] = -1;
    return s;
}

/* The NFREQ most frequent target pieces of C into S->freq, marked in IS_FREQ (V). 0 or -1. */
static int pick_frequent(const struct shortlist_counts *c, struct shortlist *s, unsigned char *is_freq)
{
    struct scored *all = nmt_malloc((size_t)c->vocab * sizeof *all);
    if (!all)
        return -1;
    for (int t = 0; t < c->vocab; t++)
        all[t] = (struct scored){(double)c->tgt_tokens[t], t};
    qsort(all, (size_t)c->vocab, sizeof *all, scored_cmp);
    for (int i = 0; i < s->nfreq; i++) {
        s->freq[i] = all[i].id;
        is_freq[all[i].id] = 1;
    }
    free(all);
    return 0;
}

/* Fills S->table from C: each source piece's best targets by Dice coefficient, frequent ones
 * (IS_FREQ) left out. 0 or -1. */
static int fill_table(const struct shortlist_counts *c, struct shortlist *s, const unsigned char *is_freq)
{
    uint64_t V = (uint64_t)c->vocab;
    size_t *start = nmt_calloc((size_t)V + 1, sizeof *start);
    struct scored *e = nmt_malloc((c->both.n + 1) * sizeof *e);
    int rc = start && e ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < c->both.cap; i++)
        if (c->both.key[i] != U64MAP_EMPTY)
            start[c->both.key[i] / V + 1]++;
    for (uint64_t v = 0; rc == 0 && v < V; v++)
        start[v + 1] += start[v];
    for (size_t i = 0; rc == 0 && i < c->both.cap; i++) {
        uint64_t key = c->both.key[i];
        if (key == U64MAP_EMPTY)
            continue;
        uint64_t src = key / V, tgt = key % V;
        double dice = 2.0 * (double)c->both.val[i] / (double)(c->src_pairs[src] + c->tgt_pairs[tgt]);
        e[start[src]++] = (struct scored){dice, (int32_t)tgt};
    }
    for (uint64_t v = V; rc == 0 && v > 0; v--) /* start[v] is now the end of v: shift back */
        start[v] = start[v - 1];
    if (rc == 0)
        start[0] = 0;
    for (uint64_t src = 0; rc == 0 && src < V; src++) {
        struct scored *b = e + start[src];
        size_t n = start[src + 1] - start[src];
        qsort(b, n, sizeof *b, scored_cmp);
        int32_t *row = s->table + src * (uint64_t)s->per_source;
        for (size_t j = 0, k = 0; j < n && k < (size_t)s->per_source; j++)
            if (!is_freq[b[j].id])
                row[k++] = b[j].id;
    }
    free(start);
    free(e);
    return rc;
}

struct shortlist *shortlist_build(const struct shortlist_counts *c, int per_source, int nfreq)
{
    if (c->pairs == 0)
        return nmt_seterr("shortlist: no pairs to count"), NULL;
    if (per_source < 1 || per_source > c->vocab || nfreq < 0 || nfreq > c->vocab)
        return nmt_seterr("shortlist: %d targets a source piece and %d frequent ones in a vocabulary of %d",
                          per_source, nfreq, c->vocab), NULL;
    struct shortlist *s = shortlist_alloc(c->vocab, per_source, nfreq);
    unsigned char *is_freq = nmt_calloc((size_t)c->vocab, 1);
    if (!s || !is_freq || pick_frequent(c, s, is_freq) < 0 || fill_table(c, s, is_freq) < 0) {
        free(is_freq);
        shortlist_free(s);
        return NULL;
    }
    free(is_freq);
    return s;
}

int shortlist_put(struct st_writer *w, const struct shortlist *s)
{
    uint64_t ts[2] = {(uint64_t)s->vocab, (uint64_t)s->per_source}, fs[1] = {(uint64_t)s->nfreq};
    return st_writer_add(w, CKPT_SHORTLIST_TABLE, ST_I32, 2, ts, s->table) < 0 ||
                   st_writer_add(w, CKPT_SHORTLIST_FREQUENT, ST_I32, 1, fs, s->freq) < 0
               ? -1
               : 0;
}

int shortlist_present(const struct st_file *f)
{
    return st_find(f, CKPT_SHORTLIST_TABLE) || st_find(f, CKPT_SHORTLIST_FREQUENT);
}

/* Checks the ids of the table (V, K) of S: in the vocabulary, -1 only at the end of a row, no
 * repeats in a row; MARK (V) scratch left zero. 0, or -1 with the error set. */
static int check_table(const struct shortlist *s, const char *name, unsigned char *mark)
{
    int rc = 0;
    for (int v = 0; v < s->vocab && rc == 0; v++) {
        const int32_t *row = s->table + (size_t)v * (size_t)s->per_source;
        int j = 0;
        for (; j < s->per_source && row[j] != -1 && rc == 0; j++) {
            if (row[j] < 0 || row[j] >= s->vocab)
                rc = nmt_seterr("%s: tensor %s: row %d, entry %d: id %d outside the vocabulary of %d", name,
                                CKPT_SHORTLIST_TABLE, v, j, row[j], s->vocab);
            else if (mark[row[j]]++)
                rc = nmt_seterr("%s: tensor %s: row %d, entry %d: id %d repeated", name, CKPT_SHORTLIST_TABLE, v, j,
                                row[j]);
        }
        for (int k = j; k < s->per_source && rc == 0; k++)
            if (row[k] != -1)
                rc = nmt_seterr("%s: tensor %s: row %d, entry %d: id %d after the row's end (-1)", name,
                                CKPT_SHORTLIST_TABLE, v, k, row[k]);
        for (int k = 0; k < j; k++)
            if (row[k] >= 0 && row[k] < s->vocab)
                mark[row[k]] = 0;
    }
    return rc;
}

/* Checks S->freq: ids in the vocabulary, each once; MARK (V) scratch left zero. 0 or -1. */
static int check_frequent(const struct shortlist *s, const char *name, unsigned char *mark)
{
    int rc = 0, i = 0;
    for (; i < s->nfreq && rc == 0; i++) {
        if (s->freq[i] < 0 || s->freq[i] >= s->vocab)
            rc = nmt_seterr("%s: tensor %s: entry %d: id %d outside the vocabulary of %d", name,
                            CKPT_SHORTLIST_FREQUENT, i, s->freq[i], s->vocab);
        else if (mark[s->freq[i]]++)
            rc = nmt_seterr("%s: tensor %s: entry %d: id %d repeated", name, CKPT_SHORTLIST_FREQUENT, i, s->freq[i]);
    }
    for (int k = 0; k < i; k++)
        if (s->freq[k] >= 0 && s->freq[k] < s->vocab)
            mark[s->freq[k]] = 0;
    return rc;
}

struct shortlist *shortlist_read(const struct st_file *f, const char *name, int vocab)
{
    const struct st_tensor *t = st_find(f, CKPT_SHORTLIST_TABLE), *q = st_find(f, CKPT_SHORTLIST_FREQUENT);
    if (!t || !q)
        return nmt_seterr("%s: no vocabulary shortlist (tensor %s missing; nmt-avg --shortlist adds one)", name,
                          t ? CKPT_SHORTLIST_FREQUENT : CKPT_SHORTLIST_TABLE), NULL;
    if (t->dtype != ST_I32 || t->ndim != 2 || t->shape[0] != (uint64_t)vocab || t->shape[1] < 1 ||
        t->shape[1] > (uint64_t)vocab)
        return nmt_seterr("%s: tensor %s must be I32 of shape (%d, 1..%d)", name, CKPT_SHORTLIST_TABLE, vocab,
                          vocab), NULL;
    if (q->dtype != ST_I32 || q->ndim != 1 || q->shape[0] > (uint64_t)vocab)
        return nmt_seterr("%s: tensor %s must be I32 of at most %d ids", name, CKPT_SHORTLIST_FREQUENT, vocab), NULL;
    struct shortlist *s = shortlist_alloc(vocab, (int)t->shape[1], (int)q->shape[0]);
    unsigned char *mark = nmt_calloc((size_t)vocab, 1);
    if (!s || !mark || st_get(f, CKPT_SHORTLIST_TABLE, ST_I32, s->table, t->shape[0] * t->shape[1]) < 0 ||
        st_get(f, CKPT_SHORTLIST_FREQUENT, ST_I32, s->freq, q->shape[0]) < 0 || check_table(s, name, mark) < 0 ||
        check_frequent(s, name, mark) < 0) {
        free(mark);
        shortlist_free(s);
        return NULL;
    }
    free(mark);
    return s;
}

/* Marks ID in MARK, counting it in *N unless it was marked. */
static void add_id(int32_t id, int *n, unsigned char *mark)
{
    *n += !mark[id];
    mark[id] = 1;
}

int shortlist_candidates(const struct shortlist *s, const uint32_t *src, int len, int min, int32_t *out,
                         unsigned char *mark)
{
    int n = 0;
    if (NMT_EOS < s->vocab)
        add_id(NMT_EOS, &n, mark);
    for (int i = 0; i < s->nfreq; i++)
        add_id(s->freq[i], &n, mark);
    for (int i = 0; i < len; i++) {
        if (src[i] >= (uint32_t)s->vocab)
            continue;
        const int32_t *row = s->table + (size_t)src[i] * (size_t)s->per_source;
        for (int j = 0; j < s->per_source && row[j] >= 0; j++)
            add_id(row[j], &n, mark);
    }
    for (int32_t id = 0; n < min && id < s->vocab; id++)
        add_id(id, &n, mark);
    int k = 0; /* the marked ids in increasing order, unmarking them */
    for (int32_t id = 0; id < s->vocab; id++)
        if (mark[id]) {
            mark[id] = 0;
            out[k++] = id;
        }
    return k;
}
