/* bleu.c: sacreBLEU 2.6.0's BLEU, chrF/chrF++ and TER: segment statistics, scores, signatures,
 * output formatting and bootstrap resampling. N-grams are counted in per-segment open-addressing
 * tables (no allocation per n-gram): as single 64-bit keys of per-segment token/character ids
 * when they fit, else as id sequences. BLEU with 13a tokenizes the UTF-8 bytes directly. */
#include "eval/bleu.h"
#include "eval/bleu_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- the three open-addressing tables below share their storage scheme: a power-of-two array of
 * entries, each with a stamp; an entry is empty unless its stamp is the table's current one ---- */

/* Grows *E (*CAP entries of SIZE bytes) to the least power of two >= MIN holding WANT keys at half
 * load, and starts a new generation (*STAMP + 1; all entries zeroed when it wraps). Returns log2 of
 * the capacity, or -1 (memory: the table is then empty). */
static int stamp_table_reset(void **e, size_t *cap, uint32_t *stamp, size_t size, size_t min, size_t want)
{
    size_t need = min;
    int lg = 0;
    while (((size_t)1 << lg) < min)
        lg++;
    while (need < want * 2) {
        need *= 2;
        lg++;
    }
    if (need > *cap) {
        free(*e);
        *e = nmt_calloc(need, size);
        if (!*e) {
            *cap = 0;
            return -1;
        }
        *cap = need;
        *stamp = 0;
    } else {
        while (((size_t)1 << lg) < *cap)
            lg++;
    }
    if (++*stamp == 0) {
        memset(*e, 0, *cap * size);
        *stamp = 1;
    }
    return lg;
}

/* ---- n-gram table: keys are (kind, int sequence); cleared in O(1) by a stamp ---- */

typedef struct {
    uint64_t h;
    const int32_t *seq;
    uint32_t n;    /* sequence length */
    uint32_t kind; /* n-gram order or a namespace */
    uint32_t stamp;
    int32_t a, b, c, d; /* counters, meaning chosen by the user */
} ng_ent;

typedef struct {
    ng_ent *e;
    size_t cap; /* power of two */
    uint32_t stamp;
} ng_tab;

static int ng_reset(ng_tab *t, size_t want)
{
    void *e = t->e;
    int lg = stamp_table_reset(&e, &t->cap, &t->stamp, sizeof *t->e, 16, want);
    t->e = e;
    return lg < 0 ? -1 : 0;
}

static inline uint64_t ng_mix(uint64_t h, int32_t x)
{
    h = (h ^ (uint32_t)x) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static inline uint64_t ng_final(uint64_t h, uint32_t kind)
{
    h ^= (uint64_t)kind * 0xC2B2AE3D27D4EB4FULL;
    h *= 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 32);
}

/* Finds (kind, seq[0..n)) with hash H; inserts it zeroed when INSERT. NULL when absent. */
static inline ng_ent *ng_get(ng_tab *t, uint64_t h, uint32_t kind, const int32_t *seq, uint32_t n,
                             int insert)
{
    size_t mask = t->cap - 1, i = (size_t)h & mask;
    for (;;) {
        ng_ent *e = &t->e[i];
        if (e->stamp != t->stamp) {
            if (!insert)
                return NULL;
            e->stamp = t->stamp;
            e->h = h;
            e->seq = seq;
            e->n = n;
            e->kind = kind;
            e->a = e->b = e->c = e->d = 0;
            return e;
        }
        if (e->h == h && e->kind == kind && e->n == n
            && (e->seq == seq || memcmp(e->seq, seq, n * sizeof *seq) == 0))
            return e;
        i = (i + 1) & mask;
    }
}

static uint64_t seq_hash(const int32_t *p, size_t n)
{
    uint64_t h = 0x84222325CBF29CE4ULL;
    for (size_t i = 0; i < n; i++)
        h = ng_mix(h, p[i]);
    return ng_final(h, (uint32_t)n);
}

/* ---- packed n-gram table: an n-gram of ids 1..2^B-1 is the 64-bit number of its ids written
 * in B-bit digits, so keys of different orders never collide and need no sequence compare ---- */

typedef struct {
    uint64_t key;
    uint32_t stamp;
    int32_t c, a, b, d; /* counters, meaning chosen by the user */
} pk_ent;

typedef struct {
    pk_ent *e;
    size_t cap; /* power of two */
    int shift;  /* 64 - log2(cap) */
    uint32_t stamp;
} pk_tab;

static int pk_reset(pk_tab *t, size_t want)
{
    void *e = t->e;
    int lg = stamp_table_reset(&e, &t->cap, &t->stamp, sizeof *t->e, 64, want);
    t->e = e;
    if (lg >= 0)
        t->shift = 64 - lg;
    return lg < 0 ? -1 : 0;
}

/* Finds KEY; inserts it zeroed when INSERT. NULL when absent. */
static inline pk_ent *pk_get(pk_tab *t, uint64_t key, int insert)
{
    size_t mask = t->cap - 1, i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> t->shift);
    for (;;) {
        pk_ent *e = &t->e[i];
        if (e->stamp != t->stamp) {
            if (!insert)
                return NULL;
            e->stamp = t->stamp;
            e->key = key;
            e->c = e->a = e->b = e->d = 0;
            return e;
        }
        if (e->key == key)
            return e;
        i = (i + 1) & mask;
    }
}

/* chrF's packed table: 16-byte entries, key 0 = empty; the slots used by a reference are
 * listed and emptied again after it (no stamp, so more entries fit in the L1 cache). */
typedef struct {
    uint64_t key;
    int32_t a, d; /* count in the reference, hits of the hypothesis */
} ck_ent;

typedef struct {
    ck_ent *e;
    size_t cap;
    int shift;
    uint32_t *used; /* (cap / 2) */
    size_t nused;
} ck_tab;

/* Empties T (only the listed slots) and makes room for WANT keys at a load of at most 1/2. */
static int ck_reset(ck_tab *t, size_t want)
{
    for (size_t i = 0; i < t->nused; i++)
        t->e[t->used[i]].key = 0;
    t->nused = 0;
    size_t need = 64;
    int lg = 6;
    while (need < want * 2) {
        need *= 2;
        lg++;
    }
    if (need > t->cap) {
        free(t->e);
        free(t->used);
        t->e = nmt_calloc(need, sizeof *t->e);
        t->used = nmt_malloc(need / 2 * sizeof *t->used);
        if (!t->e || !t->used) {
            free(t->e);
            free(t->used);
            t->e = NULL;
            t->used = NULL;
            t->cap = 0;
            return -1;
        }
        t->cap = need;
        t->shift = 64 - lg;
    }
    return 0;
}

static inline ck_ent *ck_find(ck_tab *t, uint64_t key, size_t *slot)
{
    size_t mask = t->cap - 1, i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> t->shift);
    for (;;) {
        ck_ent *e = &t->e[i];
        if (e->key == key || e->key == 0) {
            *slot = i;
            return e;
        }
        i = (i + 1) & mask;
    }
}

/* Number of bits needed to write K. */
static int bit_width(uint32_t k)
{
    int b = 0;
    while (k) {
        b++;
        k >>= 1;
    }
    return b;
}

/* ---- byte-string interning (tokens of the byte-level tokenizer) ---- */

typedef struct {
    uint64_t h, w; /* hash; the first eight bytes (zero padded) */
    const char *p;
    uint32_t len, stamp;
    int32_t id;
} bs_ent;

typedef struct {
    bs_ent *e;
    size_t cap;
    uint32_t stamp;
} bs_tab;

static int bs_reset(bs_tab *t, size_t want)
{
    void *e = t->e;
    int lg = stamp_table_reset(&e, &t->cap, &t->stamp, sizeof *t->e, 64, want);
    t->e = e;
    return lg < 0 ? -1 : 0;
}

/* Returns the id of token P[0..LEN) (a new id *NEXT, then *NEXT+1, when unseen). END is the end
 * of the text holding the token: bytes up to it may be read. */
static inline int32_t bs_intern(bs_tab *t, const char *p, uint32_t len, const char *end, int32_t *next)
{
    uint64_t w = 0, h;
    if (len <= 8) {
        if (end - p >= 8) {
            memcpy(&w, p, 8);
            if (len < 8)
                w &= ((uint64_t)1 << (8 * len)) - 1; /* little-endian: the first LEN bytes */
        } else
            for (uint32_t i = 0; i < len; i++)
                w |= (uint64_t)(unsigned char)p[i] << (8 * i);
        h = (w ^ ((uint64_t)len << 59)) * 0x9E3779B97F4A7C15ULL;
    } else {
        memcpy(&w, p, 8);
        h = 0xC4CEB9FE1A85EC53ULL ^ len;
        for (uint32_t i = 0; i < len; i++)
            h = (h ^ (unsigned char)p[i]) * 0x100000001B3ULL;
        h *= 0x9E3779B97F4A7C15ULL;
    }
    h ^= h >> 29;
    size_t mask = t->cap - 1, i = (size_t)h & mask;
    for (;;) {
        bs_ent *e = &t->e[i];
        if (e->stamp != t->stamp) {
            e->stamp = t->stamp;
            e->h = h;
            e->w = w;
            e->p = p;
            e->len = len;
            e->id = (*next)++;
            return e->id;
        }
        /* up to eight bytes the word is the token; longer ones are compared */
        if (e->h == h && e->len == len && e->w == w && (len <= 8 || memcmp(e->p, p, len) == 0))
            return e->id;
        i = (i + 1) & mask;
    }
}

/* ---- per-side workspace ---- */

typedef struct {
    bleu_cps raw, low, txt; /* decoded, lowercased, tokenized text */
    bleu_toks toks;
    int32_t *ids; /* token ids, (ntoks) */
    size_t ids_cap;
    int32_t *chars; /* chrF: characters, whitespace removed unless asked, (nchars) */
    size_t nchars, chars_cap;
    uint32_t *wst, *wlen; /* chrF++: words after punctuation splitting, spans into wbuf */
    const int32_t *wbuf;
    size_t nw, w_cap;
    bleu_btoks bt; /* BLEU 13a: tokens as byte spans */
    int32_t *cids; /* chrF: characters as segment-wide ids 1..K, (ncids) */
    size_t ncids, cids_cap;
} side;

static void side_free(side *s)
{
    bleu_cps_free(&s->raw);
    bleu_cps_free(&s->low);
    bleu_cps_free(&s->txt);
    bleu_toks_free(&s->toks);
    free(s->ids);
    free(s->chars);
    free(s->wst);
    free(s->wlen);
    bleu_btoks_free(&s->bt);
    free(s->cids);
}

struct bleu_metric {
    bleu_config cfg;
    int nstats;
    side *sides; /* [0] hypothesis, [1..] references */
    int nsides;
    size_t *slen;   /* BLEU: token count per side, (nsides) */
    int32_t **sids; /* BLEU: token ids per side, (nsides) */
    bleu_tokws tw;
    ng_tab tab, intern;
    int32_t next_id;
    pk_tab pk;
    ck_tab ck;
    bs_tab bs;
    uint64_t *cmap; /* chrF: code point < CMAP_N -> stamp << 32 | id, (CMAP_N) */
    pk_tab cbig;    /* chrF: ids of the other code points (key cp + 1, id in a) */
    uint32_t cstamp;
    int32_t nchar_ids;
    /* TER */
    int32_t *cost; /* (NH+1, NR+1) */
    char *op;
    size_t mat_cap;
    int *lo, *hi;
    int32_t *cached;    /* words of the rows currently in the matrix */
    size_t cached_rows; /* rows 0..cached_rows-1 valid for cached[] */
    int32_t *wa, *wb, *wc;
    size_t w_cap;
    char *trace;
    int *align, *herr, *rerr;
};

void bleu_config_init(bleu_config *cfg, int kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->tokenize = BLEU_TOK_13A;
    cfg->smooth = BLEU_SMOOTH_EXP;
    cfg->max_order = 4;
    cfg->char_order = 6;
    cfg->word_order = 0;
    cfg->beta = 2;
}

bleu_metric *bleu_metric_new(const bleu_config *cfg)
{
    if (cfg->kind == BLEU_METRIC_BLEU && (cfg->max_order < 1 || cfg->max_order > BLEU_MAX_ORDER)) {
        nmt_seterr("n-gram order must be between 1 and %d", BLEU_MAX_ORDER);
        return NULL;
    }
    if (cfg->kind == BLEU_METRIC_CHRF
        && (cfg->char_order < 0 || cfg->word_order < 0 || cfg->char_order + cfg->word_order < 1
            || cfg->char_order + cfg->word_order > BLEU_MAX_ORDER)) {
        nmt_seterr("chrF orders must be non-negative with a sum between 1 and %d", BLEU_MAX_ORDER);
        return NULL;
    }
    if (cfg->kind == BLEU_METRIC_TER && cfg->asian_support) {
        nmt_seterr("TER asian support is not implemented");
        return NULL;
    }
    bleu_metric *m = nmt_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    switch (cfg->kind) {
    case BLEU_METRIC_BLEU:
        m->nstats = 2 + 2 * cfg->max_order;
        break;
    case BLEU_METRIC_CHRF:
        m->nstats = 3 * (cfg->char_order + cfg->word_order);
        break;
    default:
        m->nstats = 2;
    }
    return m;
}

void bleu_metric_free(bleu_metric *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nsides; i++)
        side_free(&m->sides[i]);
    free(m->sides);
    free(m->slen);
    free(m->sids);
    bleu_tokws_free(&m->tw);
    free(m->tab.e);
    free(m->intern.e);
    free(m->pk.e);
    free(m->ck.e);
    free(m->ck.used);
    free(m->bs.e);
    free(m->cmap);
    free(m->cbig.e);
    free(m->cost);
    free(m->op);
    free(m->lo);
    free(m->hi);
    free(m->cached);
    free(m->wa);
    free(m->wb);
    free(m->wc);
    free(m->trace);
    free(m->align);
    free(m->herr);
    free(m->rerr);
    free(m);
}

int bleu_metric_nstats(const bleu_metric *m) { return m->nstats; }

static int ensure_sides(bleu_metric *m, int n)
{
    if (n <= m->nsides)
        return 0;
    side *s = nmt_realloc(m->sides, (size_t)n * sizeof *s);
    if (!s)
        return -1;
    memset(s + m->nsides, 0, (size_t)(n - m->nsides) * sizeof *s);
    m->sides = s;
    size_t *l = nmt_realloc(m->slen, (size_t)n * sizeof *l);
    if (!l)
        return -1;
    m->slen = l;
    int32_t **d = nmt_realloc(m->sids, (size_t)n * sizeof *d);
    if (!d)
        return -1;
    m->sids = d;
    m->nsides = n;
    return 0;
}

/* Decodes S, lowercases when LOWER; leaves the text in *OUT (raw or low). */
static int side_text(side *sd, const char *s, size_t len, int lower, bleu_cps **out)
{
    if (bleu_decode(s, len, &sd->raw) < 0)
        return -1;
    *out = &sd->raw;
    if (lower) {
        if (bleu_cps_lower(&sd->raw, &sd->low) < 0)
            return -1;
        *out = &sd->low;
    }
    return 0;
}

/* Gives every token of SD (spans into BUF) a segment-wide id through m->intern. */
static int side_ids(bleu_metric *m, side *sd, const int32_t *buf, const uint32_t *st,
                    const uint32_t *ln, size_t n)
{
    if (n > sd->ids_cap) {
        int32_t *p = nmt_realloc(sd->ids, n * sizeof *p);
        if (!p)
            return -1;
        sd->ids = p;
        sd->ids_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        const int32_t *w = buf + st[i];
        ng_ent *e = ng_get(&m->intern, seq_hash(w, ln[i]), 0, w, ln[i], 1);
        if (e->c == 0) {
            e->c = 1;
            e->a = m->next_id++;
        }
        sd->ids[i] = e->a;
    }
    return 0;
}

/* ---- BLEU ---- */

static int bleu_side(bleu_metric *m, side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (side_text(sd, s, len, m->cfg.lowercase, &t) < 0)
        return -1;
    t->n = bleu_cps_rstrip(t->p, t->n);
    if (bleu_tok_apply(m->cfg.tokenize, t, &sd->txt, &m->tw) < 0)
        return -1;
    return bleu_split(sd->txt.p, sd->txt.n, &sd->toks);
}

/* Counts the n-grams (orders 1..N) of the references and matches the hypothesis against them
 * (sacreBLEU: clipped counts, the maximum count over the references). IDS[r] are the token ids
 * (1..2^BITS-1) of side r, LEN[r] their number. Packed keys: BITS * N <= 64. */
static int bleu_match_packed(bleu_metric *m, int32_t *const *ids, const size_t *len, int nrefs, int N,
                             int bits, double *correct)
{
    size_t refwant = 0;
    for (int r = 1; r <= nrefs; r++)
        refwant += len[r] * (size_t)N;
    if (pk_reset(&m->pk, refwant) < 0)
        return -1;
    for (int r = 1; r <= nrefs; r++) {
        const int32_t *id = ids[r];
        size_t rl = len[r];
        for (size_t i = 0; i < rl; i++) {
            uint64_t key = 0;
            size_t top = i + (size_t)N <= rl ? i + (size_t)N : rl;
            for (size_t j = i; j < top; j++) {
                key = (key << bits) | (uint64_t)id[j];
                pk_ent *e = pk_get(&m->pk, key, 1);
                if (e->c != r) {
                    e->c = r;
                    e->a = 0;
                }
                if (++e->a > e->b)
                    e->b = e->a;
            }
        }
    }
    const int32_t *id = ids[0];
    size_t hl = len[0];
    for (size_t i = 0; i < hl; i++) {
        uint64_t key = 0;
        size_t top = i + (size_t)N <= hl ? i + (size_t)N : hl;
        for (size_t j = i; j < top; j++) {
            key = (key << bits) | (uint64_t)id[j];
            pk_ent *e = pk_get(&m->pk, key, 0);
            if (!e)
                break; /* a longer n-gram with this prefix cannot be in the references */
            if (++e->d <= e->b)
                correct[j - i] += 1;
        }
    }
    return 0;
}

/* The same with keys compared as id sequences (any number of distinct tokens). */
static int bleu_match_seq(bleu_metric *m, int32_t *const *ids, const size_t *len, int nrefs, int N,
                          double *correct)
{
    size_t refwant = 0;
    for (int r = 1; r <= nrefs; r++)
        refwant += len[r] * (size_t)N;
    if (ng_reset(&m->tab, refwant) < 0)
        return -1;
    for (int r = 1; r <= nrefs; r++) {
        const int32_t *id = ids[r];
        size_t rl = len[r];
        for (size_t i = 0; i < rl; i++) {
            uint64_t h = 0x84222325CBF29CE4ULL;
            for (int n = 1; n <= N && i + (size_t)n <= rl; n++) {
                h = ng_mix(h, id[i + (size_t)n - 1]);
                ng_ent *e = ng_get(&m->tab, ng_final(h, (uint32_t)n), (uint32_t)n, id + i, (uint32_t)n, 1);
                if (e->c != r) {
                    e->c = r;
                    e->a = 0;
                }
                if (++e->a > e->b)
                    e->b = e->a;
            }
        }
    }
    const int32_t *id = ids[0];
    size_t hl = len[0];
    for (size_t i = 0; i < hl; i++) {
        uint64_t h = 0x84222325CBF29CE4ULL;
        for (int n = 1; n <= N && i + (size_t)n <= hl; n++) {
            h = ng_mix(h, id[i + (size_t)n - 1]);
            ng_ent *e = ng_get(&m->tab, ng_final(h, (uint32_t)n), (uint32_t)n, id + i, (uint32_t)n, 0);
            if (!e)
                break;
            if (++e->d <= e->b)
                correct[n - 1] += 1;
        }
    }
    return 0;
}

static int ensure_ids(side *sd, size_t n)
{
    if (n <= sd->ids_cap)
        return 0;
    int32_t *p = nmt_realloc(sd->ids, n * sizeof *p);
    if (!p)
        return -1;
    sd->ids = p;
    sd->ids_cap = n;
    return 0;
}

static int segment_bleu(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out)
{
    int N = m->cfg.max_order;
    size_t want = 0, *len = m->slen;
    int32_t **ids = m->sids;
    if (m->cfg.tokenize == BLEU_TOK_13A) { /* tokens straight from the bytes, ids 1..K */
        for (int r = 0; r <= nrefs; r++) {
            side *sd = &m->sides[r];
            if (bleu_tok13a_bytes(r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len, m->cfg.lowercase, &sd->bt) < 0)
                return -1;
            len[r] = sd->bt.n;
            want += sd->bt.n;
        }
        if (bs_reset(&m->bs, want) < 0)
            return -1;
        m->next_id = 1;
        for (int r = 0; r <= nrefs; r++) {
            side *sd = &m->sides[r];
            if (ensure_ids(sd, len[r]) < 0)
                return -1;
            for (size_t i = 0; i < len[r]; i++)
                sd->ids[i] = bs_intern(&m->bs, sd->bt.p[i], sd->bt.len[i], sd->bt.end, &m->next_id);
            ids[r] = sd->ids;
        }
    } else {
        for (int r = 0; r <= nrefs; r++) {
            side *sd = &m->sides[r];
            if (bleu_side(m, sd, r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len) < 0)
                return -1;
            len[r] = sd->toks.n;
            want += sd->toks.n;
        }
        if (ng_reset(&m->intern, want) < 0)
            return -1;
        m->next_id = 1;
        for (int r = 0; r <= nrefs; r++) {
            side *sd = &m->sides[r];
            if (side_ids(m, sd, sd->txt.p, sd->toks.start, sd->toks.len, sd->toks.n) < 0)
                return -1;
            ids[r] = sd->ids;
        }
    }
    size_t hl = len[0];
    /* closest reference length, ties to the shorter */
    long long best_diff = -1, best_len = -1;
    for (int r = 1; r <= nrefs; r++) {
        long long rl = (long long)len[r];
        long long diff = llabs((long long)hl - rl);
        if (best_diff == -1 || diff < best_diff) {
            best_diff = diff;
            best_len = rl;
        } else if (diff == best_diff && rl < best_len)
            best_len = rl;
    }
    double *correct = out + 2, *total = out + 2 + N;
    for (int n = 0; n < N; n++) {
        correct[n] = 0;
        total[n] = hl >= (size_t)n + 1 ? (double)(hl - (size_t)n) : 0;
    }
    int bits = bit_width((uint32_t)(m->next_id - 1));
    if (bits * N <= 64 ? bleu_match_packed(m, ids, len, nrefs, N, bits, correct) < 0
                       : bleu_match_seq(m, ids, len, nrefs, N, correct) < 0)
        return -1;
    out[0] = (double)hl;
    out[1] = (double)best_len;
    return 0;
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

static void score_bleu(const bleu_config *cfg, const double *st, bleu_score *o)
{
    int N = cfg->max_order;
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "BLEU");
    o->order = N;
    o->mean = o->ci = -1;
    long long sys_len = (long long)st[0], ref_len = (long long)st[1];
    o->sys_len = sys_len;
    o->ref_len = ref_len;
    o->ratio = ref_len ? (double)sys_len / (double)ref_len : 0;
    double sv = cfg->smooth_value;
    if (!cfg->smooth_value_set)
        sv = cfg->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1;
    double bp = 1.0;
    if (sys_len < ref_len)
        bp = sys_len > 0 ? exp(1 - (double)ref_len / (double)sys_len) : 0.0;
    o->bp = bp;
    int any = 0;
    for (int n = 0; n < N; n++) {
        o->counts[n] = st[2 + n];
        o->totals[n] = st[2 + N + n];
        o->precisions[n] = 0.0;
        if (st[2 + n] != 0)
            any = 1;
    }
    if (!any) {
        o->score = 0.0;
        return;
    }
    double smooth_mteval = 1.0;
    int eff = N;
    for (int n = 1; n <= N; n++) {
        double c = o->counts[n - 1], t = o->totals[n - 1];
        if (cfg->smooth == BLEU_SMOOTH_ADDK && n > 1) {
            c += sv;
            t += sv;
        }
        if (t == 0)
            break;
        if (cfg->effective_order)
            eff = n;
        if (c == 0) {
            if (cfg->smooth == BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                o->precisions[n - 1] = 100. / (smooth_mteval * t);
            } else if (cfg->smooth == BLEU_SMOOTH_FLOOR)
                o->precisions[n - 1] = 100. * sv / t;
        } else
            o->precisions[n - 1] = 100. * c / t;
    }
    double sum = 0;
    for (int n = 0; n < eff; n++)
        sum += my_log(o->precisions[n]);
    o->score = bp * exp(sum / eff);
}

/* ---- chrF ---- */

static int is_ascii_punct(int32_t c)
{
    return c < 0x80 && c > 0x20 && c != 0x7F && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
}

static int chrf_side(bleu_metric *m, side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (side_text(sd, s, len, m->cfg.chrf_lowercase, &t) < 0)
        return -1;
    if (t->n > sd->chars_cap) {
        int32_t *p = nmt_realloc(sd->chars, t->n * sizeof *p);
        if (!p)
            return -1;
        sd->chars = p;
        sd->chars_cap = t->n;
    }
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (m->cfg.whitespace || !bleu_isspace_fast(t->p[i]))
            sd->chars[k++] = t->p[i];
    sd->nchars = k;
    sd->nw = 0;
    sd->wbuf = t->p;
    if (m->cfg.word_order > 0) {
        if (bleu_split(t->p, t->n, &sd->toks) < 0)
            return -1;
        size_t need = sd->toks.n * 2;
        if (need > sd->w_cap) {
            uint32_t *a = nmt_realloc(sd->wst, need * sizeof *a);
            if (!a)
                return -1;
            sd->wst = a;
            uint32_t *b = nmt_realloc(sd->wlen, need * sizeof *b);
            if (!b)
                return -1;
            sd->wlen = b;
            sd->w_cap = need;
        }
        /* _remove_punctuation: split one ASCII punctuation mark off the end, else the start */
        for (size_t i = 0; i < sd->toks.n; i++) {
            uint32_t st = sd->toks.start[i], ln = sd->toks.len[i];
            if (ln > 1 && is_ascii_punct(t->p[st + ln - 1])) {
                sd->wst[sd->nw] = st;
                sd->wlen[sd->nw++] = ln - 1;
                sd->wst[sd->nw] = st + ln - 1;
                sd->wlen[sd->nw++] = 1;
            } else if (ln > 1 && is_ascii_punct(t->p[st])) {
                sd->wst[sd->nw] = st;
                sd->wlen[sd->nw++] = 1;
                sd->wst[sd->nw] = st + 1;
                sd->wlen[sd->nw++] = ln - 1;
            } else {
                sd->wst[sd->nw] = st;
                sd->wlen[sd->nw++] = ln;
            }
        }
    }
    return 0;
}

static double chrf_f(const bleu_config *cfg, const double *st)
{
    const double eps = 1e-16;
    int order = cfg->char_order + cfg->word_order;
    double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
    int eff = 0;
    double factor = (double)cfg->beta * cfg->beta;
    for (int i = 0; i < order; i++) {
        double n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
        double prec = n_hyp > 0 ? n_match / n_hyp : eps;
        double rec = n_ref > 0 ? n_match / n_ref : eps;
        double denom = factor * prec + rec;
        score += denom > 0 ? ((1 + factor) * prec * rec / denom) : eps;
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += prec;
            avg_rec += rec;
            eff++;
        }
    }
    if (cfg->eps_smoothing)
        return 100 * score / order;
    if (eff == 0)
        avg_prec = avg_rec = 0.0;
    else {
        avg_prec /= eff;
        avg_rec /= eff;
    }
    if (avg_prec + avg_rec != 0) {
        score = (1 + factor) * avg_prec * avg_rec;
        score /= (factor * avg_prec) + avg_rec;
        return 100 * score;
    }
    return 0.0;
}

/* Counts n-grams (orders 1..NMAX, kinds BASE+n) of SEQ[0..LEN) into the table (ADD: as
 * reference, counter a) or matches hypothesis n-grams against it (counter d), adding matches to
 * MATCH[n-1]. */
static void chrf_count(ng_tab *t, const int32_t *seq, size_t len, int nmax, uint32_t base, int add,
                       double *match)
{
    for (size_t i = 0; i < len; i++) {
        uint64_t h = 0x84222325CBF29CE4ULL;
        for (int n = 1; n <= nmax && i + (size_t)n <= len; n++) {
            h = ng_mix(h, seq[i + (size_t)n - 1]);
            uint32_t kind = base + (uint32_t)n;
            ng_ent *e = ng_get(t, ng_final(h, kind), kind, seq + i, (uint32_t)n, add);
            if (add)
                e->a++;
            else {
                if (!e)
                    break;
                if (++e->d <= e->a)
                    match[n - 1] += 1;
            }
        }
    }
}

#define CMAP_N 0x800 /* code points with a direct slot in m->cmap */

/* Segment-wide id (1..) of code point CP, with bit 31 set when CP is Python whitespace. */
static inline uint32_t char_id(bleu_metric *m, int32_t cp)
{
    if (cp < CMAP_N) {
        uint64_t v = m->cmap[cp];
        if ((uint32_t)(v >> 32) == m->cstamp)
            return (uint32_t)v;
        uint32_t id = (uint32_t)++m->nchar_ids | (bleu_isspace_fast(cp) ? 0x80000000u : 0);
        m->cmap[cp] = (uint64_t)m->cstamp << 32 | id;
        return id;
    }
    pk_ent *e = pk_get(&m->cbig, (uint64_t)cp + 1, 1);
    if (e->a == 0) {
        e->a = ++m->nchar_ids;
        e->b = bleu_isspace_slow(cp);
    }
    return (uint32_t)e->a | (e->b ? 0x80000000u : 0);
}

/* Starts a new segment's character ids; MAXCHARS bounds the distinct code points. */
static int char_ids_reset(bleu_metric *m, size_t maxchars)
{
    if (!m->cmap && !(m->cmap = nmt_calloc(CMAP_N, sizeof *m->cmap)))
        return -1;
    if (++m->cstamp == 0) {
        memset(m->cmap, 0, CMAP_N * sizeof *m->cmap);
        m->cstamp = 1;
    }
    m->nchar_ids = 0;
    return pk_reset(&m->cbig, maxchars);
}

static int ensure_cids(side *sd, size_t n)
{
    if (n <= sd->cids_cap)
        return 0;
    int32_t *p = nmt_realloc(sd->cids, (n ? n : 1) * sizeof *p);
    if (!p)
        return -1;
    sd->cids = p;
    sd->cids_cap = n;
    return 0;
}

/* chrF characters of S[0..LEN) (valid UTF-8) as ids, whitespace dropped unless kept, without
 * lowercasing or word splitting. */
static int chrf_side_ids(bleu_metric *m, side *sd, const char *str, size_t len)
{
    if (ensure_cids(sd, len) < 0)
        return -1;
    const unsigned char *s = (const unsigned char *)str;
    uint32_t drop = m->cfg.whitespace ? 0 : 0x80000000u;
    int32_t *o = sd->cids;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        int32_t cp;
        if (c < 0x80) {
            cp = (int32_t)c;
            i++;
        } else if (c < 0xE0) {
            cp = (int32_t)(((c & 0x1F) << 6) | (s[i + 1] & 0x3F));
            i += 2;
        } else if (c < 0xF0) {
            cp = (int32_t)(((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
            i += 3;
        } else {
            cp = (int32_t)(((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6)
                           | (s[i + 3] & 0x3F));
            i += 4;
        }
        uint32_t id = char_id(m, cp);
        if (id & drop)
            continue;
        o[k++] = (int32_t)(id & 0x7FFFFFFFu);
    }
    sd->ncids = k;
    return 0;
}

/* Character n-grams (orders 1..C) of reference R counted and hypothesis H matched with packed
 * keys (BITS * C <= 64); matches per order added to MATCH. */
static int chrf_match_packed(bleu_metric *m, const side *h, const side *r, int C, int bits, double *match)
{
    ck_tab *t = &m->ck;
    const int32_t *id = r->cids;
    size_t rl = r->ncids, slot;
    /* distinct n-grams: at most rl * C, and at most cap / 2 are listed */
    if (ck_reset(t, rl * (size_t)C) < 0)
        return -1;
    for (size_t i = 0; i < rl; i++) {
        uint64_t key = 0;
        size_t top = i + (size_t)C <= rl ? i + (size_t)C : rl;
        for (size_t j = i; j < top; j++) {
            key = (key << bits) | (uint64_t)id[j];
            ck_ent *e = ck_find(t, key, &slot);
            if (e->key == 0) {
                e->key = key;
                e->a = 0;
                e->d = 0;
                t->used[t->nused++] = (uint32_t)slot;
            }
            e->a++;
        }
    }
    id = h->cids;
    size_t hl = h->ncids;
    long hits[BLEU_MAX_ORDER] = {0};
    for (size_t i = 0; i < hl; i++) {
        uint64_t key = 0;
        size_t top = i + (size_t)C <= hl ? i + (size_t)C : hl;
        for (size_t j = i; j < top; j++) {
            key = (key << bits) | (uint64_t)id[j];
            ck_ent *e = ck_find(t, key, &slot);
            if (e->key == 0)
                break; /* a longer n-gram with this prefix cannot be in the reference */
            hits[j - i] += ++e->d <= e->a;
        }
    }
    for (int n = 0; n < C; n++)
        match[n] += (double)hits[n];
    return 0;
}

static int segment_chrf(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out)
{
    int C = m->cfg.char_order, W = m->cfg.word_order, order = C + W;
    double stats[3 * BLEU_MAX_ORDER], match[BLEU_MAX_ORDER];
    double best_f = -1.0;
    int direct = !m->cfg.chrf_lowercase && W == 0; /* characters straight from the bytes */
    size_t total = hyp_len;
    for (int r = 1; r <= nrefs; r++)
        total += ref_lens[r - 1];
    if (char_ids_reset(m, total) < 0)
        return -1;
    for (int r = 0; r <= nrefs; r++) {
        side *sd = &m->sides[r];
        const char *s = r ? refs[r - 1] : hyp;
        size_t len = r ? ref_lens[r - 1] : hyp_len;
        if (direct) {
            if (chrf_side_ids(m, sd, s, len) < 0)
                return -1;
            continue;
        }
        if (chrf_side(m, sd, s, len) < 0 || ensure_cids(sd, sd->nchars) < 0)
            return -1;
        for (size_t i = 0; i < sd->nchars; i++)
            sd->cids[i] = (int32_t)(char_id(m, sd->chars[i]) & 0x7FFFFFFFu);
        sd->ncids = sd->nchars;
    }
    int bits = bit_width((uint32_t)m->nchar_ids), packed = bits * C <= 64;
    side *h = &m->sides[0];
    for (int r = 1; r <= nrefs; r++) {
        side *sd = &m->sides[r];
        if (W > 0) { /* word ids shared by this reference and the hypothesis */
            if (ng_reset(&m->intern, h->nw + sd->nw) < 0)
                return -1;
            m->next_id = 0;
            if (side_ids(m, h, h->wbuf, h->wst, h->wlen, h->nw) < 0
                || side_ids(m, sd, sd->wbuf, sd->wst, sd->wlen, sd->nw) < 0)
                return -1;
        }
        if (ng_reset(&m->tab, (packed ? 0 : sd->ncids * (size_t)C) + sd->nw * (size_t)W) < 0)
            return -1;
        memset(match, 0, sizeof match);
        if (packed) {
            if (chrf_match_packed(m, h, sd, C, bits, match) < 0)
                return -1;
        } else {
            chrf_count(&m->tab, sd->cids, sd->ncids, C, 0, 1, NULL);
            chrf_count(&m->tab, h->cids, h->ncids, C, 0, 0, match);
        }
        if (W > 0) {
            chrf_count(&m->tab, sd->ids, sd->nw, W, 1000, 1, NULL);
            chrf_count(&m->tab, h->ids, h->nw, W, 1000, 0, match + C);
        }
        for (int i = 0; i < order; i++) {
            int n = i < C ? i + 1 : i - C + 1;
            size_t hl = i < C ? h->ncids : h->nw, rl = i < C ? sd->ncids : sd->nw;
            double nh = hl >= (size_t)n ? (double)(hl - (size_t)n + 1) : 0;
            double nr = rl >= (size_t)n ? (double)(rl - (size_t)n + 1) : 0;
            stats[3 * i] = nr > 0 ? nh : 0; /* no hits counted without reference n-grams */
            stats[3 * i + 1] = nr;
            stats[3 * i + 2] = match[i];
        }
        double f = chrf_f(&m->cfg, stats);
        if (f > best_f) {
            best_f = f;
            memcpy(out, stats, (size_t)(3 * order) * sizeof *out);
        }
    }
    return 0;
}

/* ---- TER (sacreBLEU's lib_ter: beam edit distance, Tercom shift heuristics) ---- */

#define TER_MAX_SHIFT_SIZE 10
#define TER_MAX_SHIFT_DIST 50
#define TER_BEAM_WIDTH 25
#define TER_MAX_SHIFT_CANDIDATES 1000
#define TER_INF (1 << 28)

static int ter_alloc(bleu_metric *m, size_t nh, size_t nr)
{
    size_t cells = (nh + 1) * (nr + 1);
    if (cells > m->mat_cap) {
        free(m->cost);
        free(m->op);
        m->cost = nmt_malloc(cells * sizeof *m->cost);
        m->op = nmt_malloc(cells);
        if (!m->cost || !m->op) {
            m->mat_cap = 0;
            return -1;
        }
        m->mat_cap = cells;
    }
    size_t w = (nh > nr ? nh : nr) + 2;
    if (w > m->w_cap) {
        void *p[10];
        p[0] = nmt_realloc(m->lo, w * sizeof(int));
        if (p[0]) m->lo = p[0];
        p[1] = nmt_realloc(m->hi, w * sizeof(int));
        if (p[1]) m->hi = p[1];
        p[2] = nmt_realloc(m->cached, w * sizeof(int32_t));
        if (p[2]) m->cached = p[2];
        p[3] = nmt_realloc(m->wa, w * sizeof(int32_t));
        if (p[3]) m->wa = p[3];
        p[4] = nmt_realloc(m->wb, w * sizeof(int32_t));
        if (p[4]) m->wb = p[4];
        p[5] = nmt_realloc(m->wc, w * sizeof(int32_t));
        if (p[5]) m->wc = p[5];
        p[6] = nmt_realloc(m->trace, 2 * w + 1);
        if (p[6]) m->trace = p[6];
        p[7] = nmt_realloc(m->align, w * sizeof(int));
        if (p[7]) m->align = p[7];
        p[8] = nmt_realloc(m->herr, w * sizeof(int));
        if (p[8]) m->herr = p[8];
        p[9] = nmt_realloc(m->rerr, w * sizeof(int));
        if (p[9]) m->rerr = p[9];
        for (int i = 0; i < 10; i++)
            if (!p[i])
                return -1;
        m->w_cap = w;
    }
    m->cached_rows = 0;
    return 0;
}

/* Beam edit distance of hypothesis H (NH words) to reference R (NR words); rows whose prefix is
 * unchanged since the last call are reused (as sacreBLEU's cache does). Writes the trace of
 * operations (' ', 's', 'i', 'd') to m->trace when TRACE. Returns the distance or -1. */
static int ter_ed(bleu_metric *m, const int32_t *H, size_t nh, const int32_t *R, size_t nr, int want_trace)
{
    size_t W = nr + 1;
    int32_t *cost = m->cost;
    char *op = m->op;
    if (m->cached_rows == 0) {
        for (size_t j = 0; j <= nr; j++) {
            cost[j] = (int32_t)j;
            op[j] = 'i';
        }
        m->lo[0] = 0;
        m->hi[0] = (int)W;
        m->cached_rows = 1;
    }
    size_t start = 1;
    while (start < m->cached_rows && m->cached[start - 1] == H[start - 1])
        start++;
    double ratio = nh ? (double)nr / (double)nh : 1;
    int beam = TER_BEAM_WIDTH;
    if (TER_BEAM_WIDTH < ratio / 2)
        beam = (int)ceil(ratio / 2 + TER_BEAM_WIDTH);
    for (size_t i = start; i <= nh; i++) {
        long pd = (long)floor((double)i * ratio);
        long min_j = pd - beam > 0 ? pd - beam : 0;
        long max_j = pd + beam < (long)W ? pd + beam : (long)W;
        if (i == nh)
            max_j = (long)W;
        int32_t *row = cost + i * W, *prev = cost + (i - 1) * W;
        char *orow = op + i * W;
        int plo = m->lo[i - 1], phi = m->hi[i - 1];
        m->lo[i] = (int)min_j;
        m->hi[i] = (int)(max_j > min_j ? max_j : min_j);
        int32_t w = H[i - 1];
        for (long j = min_j; j < max_j; j++) {
            int32_t best = TER_INF;
            char bop = 'x';
            int32_t up = (j >= plo && j < phi) ? prev[j] : TER_INF;
            if (j == 0) {
                best = up + 1;
                bop = 'd';
            } else {
                int32_t diag = (j - 1 >= plo && j - 1 < phi) ? prev[j - 1] : TER_INF;
                int32_t left = (j - 1 >= min_j) ? row[j - 1] : TER_INF;
                int32_t cs = diag + (w == R[j - 1] ? 0 : 1);
                if (best > cs) {
                    best = cs;
                    bop = w == R[j - 1] ? ' ' : 's';
                }
                if (best > up + 1) {
                    best = up + 1;
                    bop = 'd';
                }
                if (best > left + 1) {
                    best = left + 1;
                    bop = 'i';
                }
            }
            row[j] = best;
            orow[j] = bop;
        }
        m->cached[i - 1] = w;
    }
    m->cached_rows = nh + 1;
    int32_t dist = (nr >= (size_t)m->lo[nh] && nr < (size_t)m->hi[nh]) ? cost[nh * W + nr] : TER_INF;
    if (want_trace) {
        size_t i = nh, j = nr, k = nh + nr + 1;
        char *tr = m->trace; /* written backwards from the end, then moved */
        size_t cap = k;
        while (i > 0 || j > 0) {
            char o = (j >= (size_t)m->lo[i] && j < (size_t)m->hi[i]) ? op[i * W + j] : 'x';
            if (o == 'x')
                return nmt_seterr("TER: edit distance beam lost the alignment");
            tr[--k] = o;
            if (o == 's' || o == ' ') {
                i--;
                j--;
            } else if (o == 'i')
                j--;
            else
                i--;
        }
        memmove(tr, tr + k, cap - k);
        tr[cap - k] = 0;
    }
    return dist;
}

/* Python slice-based shift (sacreBLEU _perform_shift) of WORDS (N) into OUT. */
static void ter_perform_shift(const int32_t *w, size_t n, size_t start, size_t len, size_t target, int32_t *out)
{
    size_t k = 0;
#define COPY(a, b) do { size_t a_ = (a) < n ? (a) : n, b_ = (b) < n ? (b) : n; \
        for (size_t q = a_; q < b_; q++) out[k++] = w[q]; } while (0)
    if (target < start) {
        COPY(0, target);
        COPY(start, start + len);
        COPY(target, start);
        COPY(start + len, n);
    } else if (target > start + len) {
        COPY(0, start);
        COPY(start + len, target);
        COPY(start, start + len);
        COPY(target, n);
    } else {
        COPY(0, start);
        COPY(start + len, len + target);
        COPY(start, start + len);
        COPY(len + target, n);
    }
#undef COPY
}

/* One round of sacreBLEU's _shift. Returns 0 with *DELTA, the best shifted words in m->wb (when
 * *DELTA > 0) and *CHECKED updated, or -1. */
static int ter_shift(bleu_metric *m, const int32_t *H, size_t nh, const int32_t *R, size_t nr,
                     int *delta, int *checked)
{
    int pre = ter_ed(m, H, nh, R, nr, 1);
    if (pre < 0)
        return -1;
    /* alignment from the flipped trace */
    int ph = -1, pr = -1;
    size_t nherr = 0, nrerr = 0;
    for (const char *t = m->trace; *t; t++) {
        char o = *t == 'i' ? 'd' : *t == 'd' ? 'i' : *t;
        if (o == ' ' || o == 's') {
            ph++;
            pr++;
            m->align[pr] = ph;
            m->herr[nherr++] = o == 's';
            m->rerr[nrerr++] = o == 's';
        } else if (o == 'i') {
            ph++;
            m->herr[nherr++] = 1;
        } else {
            pr++;
            m->align[pr] = ph;
            m->rerr[nrerr++] = 1;
        }
    }
    int have = 0, b_score = 0, b_len = 0;
    long b_sh = 0, b_idx = 0;
    int32_t *cand = m->wc;
    for (size_t sh = 0; sh < nh; sh++) {
        for (size_t sr = 0; sr < nr; sr++) {
            if (labs((long)sr - (long)sh) > TER_MAX_SHIFT_DIST)
                continue;
            size_t len = 0;
            int stop = 0;
            while (H[sh + len] == R[sr + len] && len < TER_MAX_SHIFT_SIZE) {
                len++;
                int hs = 0, rs = 0;
                for (size_t q = 0; q < len; q++) {
                    hs += m->herr[sh + q];
                    rs += m->rerr[sr + q];
                }
                int skip = hs == 0 || rs == 0
                           || ((long)sh <= m->align[sr] && m->align[sr] < (long)(sh + len));
                if (!skip) {
                    long prev_idx = -1;
                    for (long off = -1; off < (long)len; off++) {
                        long idx;
                        if ((long)sr + off == -1)
                            idx = 0;
                        else
                            idx = m->align[(long)sr + off] + 1;
                        if (idx == prev_idx)
                            continue;
                        prev_idx = idx;
                        ter_perform_shift(H, nh, sh, len, (size_t)idx, cand);
                        int d = ter_ed(m, cand, nh, R, nr, 0);
                        int sc = pre - d;
                        (*checked)++;
                        int better = !have || sc > b_score
                                     || (sc == b_score && ((int)len > b_len
                                     || ((int)len == b_len && (-(long)sh > -b_sh
                                     || (-(long)sh == -b_sh && -idx > -b_idx)))));
                        if (better) {
                            have = 1;
                            b_score = sc;
                            b_len = (int)len;
                            b_sh = (long)sh;
                            b_idx = idx;
                            memcpy(m->wb, cand, nh * sizeof *cand);
                        }
                    }
                    if (*checked >= TER_MAX_SHIFT_CANDIDATES) {
                        stop = 1;
                        break;
                    }
                }
                if (nh == sh + len || nr == sr + len)
                    break;
            }
            if (stop) {
                *delta = have ? b_score : 0;
                return 0;
            }
        }
    }
    *delta = have ? b_score : 0;
    return 0;
}

static int ter_pair(bleu_metric *m, const int32_t *hyp, size_t nh, const int32_t *ref, size_t nr, int *edits)
{
    if (nr == 0) {
        *edits = (int)nh;
        return 0;
    }
    if (ter_alloc(m, nh, nr) < 0)
        return -1;
    if (nh)
        memcpy(m->wa, hyp, nh * sizeof *hyp);
    int shifts = 0, checked = 0;
    for (;;) {
        int delta;
        if (ter_shift(m, m->wa, nh, ref, nr, &delta, &checked) < 0)
            return -1;
        if (checked >= TER_MAX_SHIFT_CANDIDATES || delta <= 0)
            break;
        shifts++;
        int32_t *t = m->wa;
        m->wa = m->wb;
        m->wb = t;
    }
    int d = ter_ed(m, m->wa, nh, ref, nr, 0);
    *edits = shifts + d;
    return 0;
}

static int ter_side(bleu_metric *m, side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (side_text(sd, s, len, !m->cfg.case_sensitive, &t) < 0)
        return -1;
    t->n = bleu_cps_rstrip(t->p, t->n);
    if (m->cfg.normalized) {
        if (bleu_tok_ter_norm(t, &sd->txt, &m->tw) < 0)
            return -1;
        t = &sd->txt;
    }
    if (m->cfg.no_punct) {
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++) {
            int32_t c = t->p[i];
            if (!(c == '.' || c == ',' || c == '?' || c == ':' || c == ';' || c == '!' || c == '"'
                  || c == '(' || c == ')'))
                t->p[k++] = c;
        }
        t->n = k;
    }
    if (t != &sd->txt) {
        sd->txt.n = 0;
        if (bleu_cps_reserve(&sd->txt, t->n + 1) < 0)
            return -1;
        memcpy(sd->txt.p, t->p, t->n * sizeof *t->p);
        sd->txt.n = t->n;
    }
    return bleu_split(sd->txt.p, sd->txt.n, &sd->toks);
}

static int segment_ter(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                       const size_t *ref_lens, int nrefs, double *out)
{
    size_t want = 0;
    for (int r = 0; r <= nrefs; r++) {
        side *sd = &m->sides[r];
        if (ter_side(m, sd, r ? refs[r - 1] : hyp, r ? ref_lens[r - 1] : hyp_len) < 0)
            return -1;
        want += sd->toks.n;
    }
    if (ng_reset(&m->intern, want) < 0)
        return -1;
    m->next_id = 0;
    for (int r = 0; r <= nrefs; r++) {
        side *sd = &m->sides[r];
        if (side_ids(m, sd, sd->txt.p, sd->toks.start, sd->toks.len, sd->toks.n) < 0)
            return -1;
    }
    double ref_lengths = 0;
    long long best = (long long)1e16;
    for (int r = 1; r <= nrefs; r++) {
        int e;
        if (ter_pair(m, m->sides[0].ids, m->sides[0].toks.n, m->sides[r].ids, m->sides[r].toks.n, &e) < 0)
            return -1;
        ref_lengths += (double)m->sides[r].toks.n;
        if (e < best)
            best = e;
    }
    out[0] = (double)best;
    out[1] = ref_lengths / nrefs;
    return 0;
}

/* ---- dispatch ---- */

int bleu_metric_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out)
{
    if (nrefs < 1)
        return nmt_seterr("no reference given");
    if (ensure_sides(m, nrefs + 1) < 0)
        return -1;
    switch (m->cfg.kind) {
    case BLEU_METRIC_BLEU:
        return segment_bleu(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    case BLEU_METRIC_CHRF:
        return segment_chrf(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    default:
        return segment_ter(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    }
}

void bleu_metric_sum(const bleu_metric *m, const double *rows, size_t nrows, const size_t *idx, double *sum)
{
    int k = m->nstats;
    for (int j = 0; j < k; j++)
        sum[j] = 0;
    for (size_t i = 0; i < nrows; i++) {
        const double *r = rows + (idx ? idx[i] : i) * (size_t)k;
        for (int j = 0; j < k; j++)
            sum[j] += r[j];
    }
}

void bleu_metric_score(const bleu_metric *m, const double *sum, bleu_score *o)
{
    const bleu_config *c = &m->cfg;
    if (c->kind == BLEU_METRIC_BLEU) {
        score_bleu(c, sum, o);
        return;
    }
    memset(o, 0, sizeof *o);
    o->mean = o->ci = -1;
    if (c->kind == BLEU_METRIC_CHRF) {
        int k = snprintf(o->name, sizeof o->name, "chrF%d", c->beta);
        for (int i = 0; i < c->word_order && k + 1 < (int)sizeof o->name; i++)
            o->name[k++] = '+';
        o->name[k] = 0;
        o->score = chrf_f(c, sum);
        return;
    }
    snprintf(o->name, sizeof o->name, "TER");
    double edits = sum[0], len = sum[1], s;
    if (len > 0)
        s = edits / len;
    else if (edits > 0)
        s = 1.0;
    else
        s = 0.0;
    o->score = 100 * s;
    o->num_edits = edits;
    o->ref_length = len;
}

/* ---- signature and formatting ---- */

int bleu_signature(const bleu_metric *m, int nrefs, int is_short, int bootstrap, const char *seed,
                   const char *version, char *buf, size_t cap)
{
    const bleu_config *c = &m->cfg;
    char tmp[512], nr[32], bs[32], v1[64];
    size_t k = 0;
#define ADD(longk, shortk, val) do { int w_ = snprintf(tmp + k, sizeof tmp - k, "%s%s:%s", k ? "|" : "", \
        is_short ? (shortk) : (longk), (val)); if (w_ < 0 || (size_t)w_ >= sizeof tmp - k) return -1; k += (size_t)w_; } while (0)
    if (nrefs < 0)
        snprintf(nr, sizeof nr, "var");
    else
        snprintf(nr, sizeof nr, "%d", nrefs);
    ADD("nrefs", "#", nr);
    if (bootstrap > 0) {
        snprintf(bs, sizeof bs, "%d", bootstrap);
        ADD("bs", "bs", bs);
        ADD("seed", "rs", seed);
    }
    if (c->kind == BLEU_METRIC_BLEU) {
        static const char *toks[] = {"13a", "intl", "zh", "char", "none"};
        static const char *sm[] = {"exp", "floor", "add-k", "none"};
        ADD("case", "c", c->lowercase ? "lc" : "mixed");
        ADD("eff", "e", c->effective_order ? "yes" : "no");
        ADD("tok", "tok", toks[c->tokenize]);
        if (c->smooth == BLEU_SMOOTH_FLOOR || c->smooth == BLEU_SMOOTH_ADDK) {
            double sv = c->smooth_value_set ? c->smooth_value : c->smooth == BLEU_SMOOTH_FLOOR ? 0.1 : 1;
            snprintf(v1, sizeof v1, "%s[%.2f]", sm[c->smooth], sv);
            ADD("smooth", "s", v1);
        } else
            ADD("smooth", "s", sm[c->smooth]);
    } else if (c->kind == BLEU_METRIC_CHRF) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", c->char_order);
        snprintf(b, sizeof b, "%d", c->word_order);
        ADD("case", "c", c->chrf_lowercase ? "lc" : "mixed");
        ADD("eff", "e", c->eps_smoothing ? "no" : "yes");
        ADD("nc", "nc", a);
        ADD("nw", "nw", b);
        ADD("space", "s", c->whitespace ? "yes" : "no");
    } else {
        ADD("case", "c", c->case_sensitive ? "mixed" : "lc");
        ADD("tok", "t", "tercom");
        ADD("norm", "nr", c->normalized ? "yes" : "no");
        ADD("punct", "pn", c->no_punct ? "no" : "yes");
        ADD("asian", "as", c->asian_support ? "yes" : "no");
    }
    ADD("version", "v", version);
#undef ADD
    if (k + 1 > cap)
        return -1;
    memcpy(buf, tmp, k + 1);
    return (int)k;
}

void bleu_pyfloat(double x, char *buf, size_t cap)
{
    if (isnan(x)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, cap, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (x == 0) {
        snprintf(buf, cap, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char e[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    char dig[32];
    int nd = 0;
    while (*s && *s != 'e') {
        if (*s != '.')
            dig[nd++] = *s;
        s++;
    }
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int ex = atoi(s + 1);
    char out[64];
    int k = 0;
    if (neg)
        out[k++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = -1; i > ex; i--)
                out[k++] = '0';
            for (int i = 0; i < nd; i++)
                out[k++] = dig[i];
        } else {
            for (int i = 0; i <= ex; i++)
                out[k++] = i < nd ? dig[i] : '0';
            out[k++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    out[k++] = dig[i];
            else
                out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = dig[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++)
                out[k++] = dig[i];
        }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, cap, "%s", out);
}

typedef struct {
    char *p;
    size_t n, cap;
    int err;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->err = 1;
            return;
        }
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap <= b->n + (size_t)w)
            cap *= 2;
        char *p = nmt_realloc(b->p, cap);
        if (!p) {
            b->err = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void sb_json_str(sbuf *b, const char *s)
{
    sb_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_add(b, "\\%c", c);
        else if (c == '\n')
            sb_add(b, "\\n");
        else if (c == '\t')
            sb_add(b, "\\t");
        else if (c == '\r')
            sb_add(b, "\\r");
        else if (c < 0x20)
            sb_add(b, "\\u%04x", c);
        else
            sb_add(b, "%c", c);
    }
    sb_add(b, "\"");
}

/* float(f"{x:.{w}f}") written as Python's repr */
static void rounded_repr(double x, int w, char *buf, size_t cap)
{
    char t[512];
    snprintf(t, sizeof t, "%.*f", w, x);
    bleu_pyfloat(strtod(t, NULL), buf, cap);
}

char *bleu_format(const bleu_score *s, int width, int score_only, const char *sig, int is_json)
{
    sbuf sc = {0}, verbose = {0}, out = {0};
    sb_add(&sc, "%.*f", width, s->score);
    int conf = s->mean > 0;
    if (conf)
        sb_add(&sc, " (μ = %.*f ± %.*f)", width, s->mean, width, s->ci);
    if (!strcmp(s->name, "BLEU")) {
        for (int n = 0; n < s->order; n++)
            sb_add(&verbose, "%s%.1f", n ? "/" : "", s->precisions[n]);
        sb_add(&verbose, " (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", s->bp, s->ratio,
               s->sys_len, s->ref_len);
    }
    if (score_only) {
        free(verbose.p);
        if (sc.err) {
            free(sc.p);
            nmt_seterr("out of memory");
            return NULL;
        }
        return sc.p;
    }
    if (!is_json) {
        if (sig && *sig)
            sb_add(&out, "%s|%s = %s", s->name, sig, sc.p);
        else
            sb_add(&out, "%s = %s", s->name, sc.p);
        if (verbose.p)
            sb_add(&out, " %s", verbose.p);
    } else {
        char num[64];
        sb_add(&out, "{\n \"name\": ");
        sb_json_str(&out, s->name);
        rounded_repr(s->score, width, num, sizeof num);
        sb_add(&out, ",\n \"score\": %s,\n \"signature\": ", num);
        sb_json_str(&out, sig ? sig : "");
        if (conf) {
            rounded_repr(s->mean, width, num, sizeof num);
            sb_add(&out, ",\n \"confidence_mean\": %s", num);
            rounded_repr(s->ci, width, num, sizeof num);
            sb_add(&out, ",\n \"confidence_var\": %s", num);
            sb_add(&out, ",\n \"confidence\": \"μ = %.*f ± %.*f\"", width, s->mean, width, s->ci);
        }
        if (verbose.p) {
            sb_add(&out, ",\n \"verbose_score\": ");
            sb_json_str(&out, verbose.p);
        }
        /* every signature field as a string */
        const char *p = sig ? sig : "";
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            const char *colon = memchr(p, ':', len);
            if (colon) {
                char key[128], val[256];
                snprintf(key, sizeof key, "%.*s", (int)(colon - p), p);
                snprintf(val, sizeof val, "%.*s", (int)(len - (size_t)(colon - p) - 1), colon + 1);
                sb_add(&out, ",\n ");
                sb_json_str(&out, key);
                sb_add(&out, ": ");
                sb_json_str(&out, val);
            }
            p += len;
            if (*p == '|')
                p++;
        }
        sb_add(&out, "\n}");
    }
    free(sc.p);
    free(verbose.p);
    if (out.err) {
        free(out.p);
        nmt_seterr("out of memory");
        return NULL;
    }
    return out.p;
}

/* ---- bootstrap ---- */

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rng_next(rng_t *r) /* xoshiro256** */
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t res = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

static size_t rng_below(rng_t *r, size_t n)
{
    return (size_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void estimate_ci(double *scores, int n, double *mean, double *ci)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += scores[i];
    qsort(scores, (size_t)n, sizeof *scores, cmp_double);
    int lo = n / 40, hi = n - lo - 1;
    *ci = 0.5 * (scores[hi] - scores[lo]);
    *mean = sum / n;
}

/* Scores NSAMPLES resamples of ROWS (drawn from a generator seeded by SEED) into OUT. */
static int resample_scores(const bleu_metric *m, const double *rows, size_t nrows, int nsamples,
                           uint64_t seed, double *out)
{
    size_t *idx = nmt_malloc(nrows * sizeof *idx);
    double *sum = nmt_malloc((size_t)m->nstats * sizeof *sum);
    if (!idx || !sum) {
        free(idx);
        free(sum);
        return -1;
    }
    rng_t r;
    rng_seed(&r, seed);
    for (int s = 0; s < nsamples; s++) {
        for (size_t i = 0; i < nrows; i++)
            idx[i] = rng_below(&r, nrows);
        bleu_metric_sum(m, rows, nrows, idx, sum);
        bleu_score sc;
        bleu_metric_score(m, sum, &sc);
        out[s] = sc.score;
    }
    free(idx);
    free(sum);
    return 0;
}

int bleu_bootstrap(const bleu_metric *m, const double *rows, size_t nrows, int nsamples,
                   uint64_t seed, bleu_score *out, double *scores)
{
    if (nsamples < 1 || nrows == 0)
        return nmt_seterr("bootstrap needs at least one sample and one line");
    double *sc = nmt_malloc((size_t)nsamples * sizeof *sc);
    if (!sc)
        return -1;
    if (resample_scores(m, rows, nrows, nsamples, seed, sc) < 0) {
        free(sc);
        return -1;
    }
    if (scores)
        memcpy(scores, sc, (size_t)nsamples * sizeof *sc);
    estimate_ci(sc, nsamples, &out->mean, &out->ci);
    free(sc);
    return 0;
}

int bleu_paired_bs(const bleu_metric *m, const double *base_rows, const double *sys_rows,
                   size_t nrows, int nsamples, uint64_t seed, double base_score,
                   bleu_score *sys_out, double *p)
{
    if (nsamples < 1 || nrows == 0)
        return nmt_seterr("bootstrap needs at least one sample and one line");
    double *bl = nmt_malloc((size_t)nsamples * sizeof *bl), *sy = nmt_malloc((size_t)nsamples * sizeof *sy);
    if (!bl || !sy || resample_scores(m, base_rows, nrows, nsamples, seed, bl) < 0
        || resample_scores(m, sys_rows, nrows, nsamples, seed, sy) < 0) {
        free(bl);
        free(sy);
        return -1;
    }
    double mean_diff = 0;
    for (int i = 0; i < nsamples; i++) {
        bl[i] = fabs(sy[i] - bl[i]);
        mean_diff += bl[i];
    }
    mean_diff /= nsamples;
    double diff = fabs(base_score - sys_out->score);
    int c = 0;
    for (int i = 0; i < nsamples; i++)
        if (bl[i] - mean_diff > diff)
            c++;
    *p = (double)(c + 1) / (nsamples + 1);
    estimate_ci(sy, nsamples, &sys_out->mean, &sys_out->ci);
    free(bl);
    free(sy);
    return 0;
}
