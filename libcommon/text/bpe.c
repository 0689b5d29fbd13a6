/* bpe.c: BPE learning (incremental pair counts with a lazy max-heap) and encoding (see bpe.h). */
#include "text/bpe.h"

#include "base/rng.h"

#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"
#include "base/util.h"

#define BARRIER UINT32_MAX   /* a character without a piece: never part of a pair */

void bpe_counts_init(struct bpe_counts *c)
{
    memset(c, 0, sizeof *c);
    strtab_init(&c->words);
}

void bpe_counts_free(struct bpe_counts *c)
{
    if (!c)
        return;
    strtab_free(&c->words);
    free(c->count);
    memset(c, 0, sizeof *c);
}

int bpe_counts_add(struct bpe_counts *c, const char *s, size_t len, uint64_t n)
{
    int64_t id = strtab_intern(&c->words, s, len, NULL);
    if (id < 0)
        return -1;
    if ((size_t)id >= c->cap) {
        size_t old = c->cap;
        if (NMT_GROW(c->count, c->cap, (size_t)id + 1) < 0)
            return -1;
        memset(c->count + old, 0, (c->cap - old) * sizeof *c->count);
    }
    c->count[id] += n;
    return 0;
}

/* ---- learning ---- */

struct pair {
    int64_t count;             /* occurrences (word counts summed) */
    uint32_t a, b;             /* left and right piece ids */
    uint32_t *w;               /* (nw) words that contain or contained the pair; may repeat */
    uint32_t nw, capw;
    uint32_t touched;          /* merge step that last raised the count */
    uint8_t forbidden;         /* its text is already a piece: never merged */
};

struct heap_ent {
    int64_t count;
    uint32_t a, b;
};

struct learner {
    struct pair *pairs;
    uint32_t npairs;
    size_t cap_pairs;
    struct u64map pair_index;  /* (a << 32 | b) -> index in pairs */
    struct heap_ent *heap;
    size_t nheap, cap_heap;
    uint32_t *touched;         /* (ntouched) pairs whose count rose during the current merge */
    uint32_t ntouched;
    size_t cap_touched;
};

static int heap_less(const struct heap_ent *x, const struct heap_ent *y) /* x ranks below y */
{
    if (x->count != y->count)
        return x->count < y->count;
    if (x->a != y->a)
        return x->a > y->a;
    return x->b > y->b;
}

static int heap_push(struct learner *L, int64_t count, uint32_t a, uint32_t b)
{
    if (NMT_GROW(L->heap, L->cap_heap, L->nheap + 1) < 0)
        return -1;
    struct heap_ent e = {count, a, b};
    size_t i = L->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&L->heap[parent], &e))
            break;
        L->heap[i] = L->heap[parent];
        i = parent;
    }
    L->heap[i] = e;
    return 0;
}

static struct heap_ent heap_pop(struct learner *L)
{
    struct heap_ent top = L->heap[0];
    struct heap_ent last = L->heap[--L->nheap];
    size_t i = 0, n = L->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&L->heap[c], &L->heap[c + 1]))
            c++;
        if (!heap_less(&last, &L->heap[c]))
            break;
        L->heap[i] = L->heap[c];
        i = c;
    }
    if (n)
        L->heap[i] = last;
    return top;
}

/* Returns the index of pair (A, B), creating it; -1 on memory failure. */
static int64_t pair_get(struct learner *L, uint32_t a, uint32_t b)
{
    uint64_t key = (uint64_t)a << 32 | b;
    uint64_t *slot = u64map_find(&L->pair_index, key);
    if (slot)
        return (int64_t)*slot;
    if (L->npairs == UINT32_MAX)
        return nmt_seterr("too many distinct pairs of pieces");
    if (NMT_GROW(L->pairs, L->cap_pairs, (size_t)L->npairs + 1) < 0)
        return -1;
    slot = u64map_get(&L->pair_index, key);
    if (!slot)
        return -1;
    *slot = L->npairs;
    struct pair *p = &L->pairs[L->npairs];
    memset(p, 0, sizeof *p);
    p->a = a;
    p->b = b;
    p->touched = UINT32_MAX;
    return L->npairs++;
}

static int pair_add_word(struct pair *p, uint32_t w)
{
    if (p->nw && p->w[p->nw - 1] == w)
        return 0;
    if (p->nw == p->capw) { /* not NMT_GROW: millions of these lists, most of a few words, start at 4 */
        if (p->capw > UINT32_MAX / 2)
            return nmt_seterr("a pair of pieces in too many words");
        uint32_t cap = p->capw ? p->capw * 2 : 4;
        uint32_t *x = nmt_realloc(p->w, (size_t)cap * sizeof *x);
        if (!x)
            return -1;
        p->w = x;
        p->capw = cap;
    }
    p->w[p->nw++] = w;
    return 0;
}

static void learner_free(struct learner *L)
{
    for (uint32_t i = 0; i < L->npairs; i++)
        free(L->pairs[i].w);
    free(L->pairs);
    u64map_free(&L->pair_index);
    free(L->heap);
    free(L->touched);
}

struct char_count {
    int32_t cp;
    uint64_t count;
};

static int char_count_cmp(const void *x, const void *y)
{
    const struct char_count *p = x, *q = y;
    if (p->count != q->count)
        return p->count > q->count ? -1 : 1;
    return p->cp < q->cp ? -1 : p->cp > q->cp;
}

/* Adds F to the count of every pair of the word's symbols SYM[0..N); when NEWID is not BARRIER,
 * pairs holding NEWID get word W recorded and are marked touched at STEP. -1 on memory failure. */
static int add_pairs(struct learner *L, const uint32_t *sym, uint32_t n, int64_t f, uint32_t w, uint32_t newid,
                     uint32_t step)
{
    for (uint32_t i = 0; i + 1 < n; i++) {
        if (sym[i] == BARRIER || sym[i + 1] == BARRIER)
            continue;
        int64_t k = pair_get(L, sym[i], sym[i + 1]);
        if (k < 0)
            return -1;
        struct pair *p = &L->pairs[k];
        p->count += f;
        if (f > 0 && (newid == BARRIER || sym[i] == newid || sym[i + 1] == newid)) {
            if (pair_add_word(p, w) < 0)
                return -1;
            if (newid != BARRIER && p->touched != step) {
                p->touched = step;
                if (NMT_GROW(L->touched, L->cap_touched, (size_t)L->ntouched + 1) < 0)
                    return -1;
                L->touched[L->ntouched++] = (uint32_t)k;
            }
        }
    }
    return 0;
}

/* One learning run: the counts, the vocabulary being built and the words as symbol sequences. */
struct learn_job {
    const struct bpe_counts *c;
    const struct bpe_learn_opts *opts;
    struct bpe_learn_stats st;
    struct learner L;
    struct u64map chars;       /* kept character -> its id */
    struct vocab *v;
    uint32_t nw;               /* words */
    uint32_t *sym;             /* every word's symbols back to back */
    uint64_t *woff;            /* (nw) start of word w in sym */
    uint32_t *wlen, *stamp;    /* (nw) its length; the last merge step that visited it */
    uint64_t total_chars, total_syms;
};

static void job_free(struct learn_job *J)
{
    learner_free(&J->L);
    u64map_free(&J->chars);
    free(J->sym);
    free(J->woff);
    free(J->wlen);
    free(J->stamp);
}

/* Step 1: counts the characters and adds to the vocabulary the most frequent ones covering
 * char_coverage of all occurrences (within the size); J->chars maps each to its id. 0 or -1. */
static int learn_chars(struct learn_job *J)
{
    const struct bpe_counts *c = J->c;
    struct u64map *chars = &J->chars;
    for (uint32_t w = 0; w < J->nw; w++) {
        uint32_t len;
        const unsigned char *s = (const unsigned char *)strtab_get(&c->words, w, &len);
        for (uint32_t i = 0; i < len;) {
            int32_t cp;
            int k = utf8_next(s + i, len - i, &cp);
            if (cp < 0)
                return nmt_seterr("invalid UTF-8 in a word");
            uint64_t *cnt = u64map_get(chars, (uint64_t)cp);
            if (!cnt)
                return -1;
            *cnt += c->count[w];
            J->total_chars += c->count[w];
            J->total_syms++;
            i += (uint32_t)k;
        }
    }
    J->st.nchar_seen = (uint32_t)chars->n;
    struct char_count *cc = nmt_malloc((chars->n ? chars->n : 1) * sizeof *cc);
    if (!cc)
        return -1;
    size_t ncc = 0;
    for (size_t i = 0; i < chars->cap; i++)
        if (chars->key[i] != U64MAP_EMPTY)
            cc[ncc++] = (struct char_count){(int32_t)chars->key[i], chars->val[i]};
    qsort(cc, ncc, sizeof *cc, char_count_cmp);
    size_t keep = 0;
    uint64_t covered = 0;
    while (keep < ncc && keep < J->opts->size - VOCAB_FIRST_CHAR &&
           (keep == 0 || (double)covered < J->opts->char_coverage * (double)J->total_chars)) {
        covered += cc[keep].count;
        keep++;
    }
    u64map_free(chars);
    u64map_init(chars);
    int rc = 0;
    for (size_t i = 0; i < keep && rc == 0; i++) {
        int64_t id = vocab_add_char(J->v, cc[i].cp);
        uint64_t *slot = id < 0 ? NULL : u64map_get(chars, (uint64_t)cc[i].cp);
        if (!slot)
            rc = -1;
        else
            *slot = (uint64_t)id;
    }
    free(cc);
    J->st.nchar = (uint32_t)keep;
    return rc;
}

/* Step 2: every word as a sequence of character ids (BARRIER for a character left out), its pairs
 * counted and pushed on the heap. 0 or -1. */
static int learn_words(struct learn_job *J)
{
    uint32_t nw = J->nw;
    J->sym = nmt_malloc((J->total_syms ? J->total_syms : 1) * sizeof *J->sym);
    J->woff = nmt_malloc((nw ? nw : 1) * sizeof *J->woff);
    J->wlen = nmt_malloc((nw ? nw : 1) * sizeof *J->wlen);
    J->stamp = nmt_calloc(nw ? nw : 1, sizeof *J->stamp);
    if (!J->sym || !J->woff || !J->wlen || !J->stamp)
        return -1;
    uint64_t pos = 0;
    for (uint32_t w = 0; w < nw; w++) {
        uint32_t len;
        const unsigned char *s = (const unsigned char *)strtab_get(&J->c->words, w, &len);
        J->woff[w] = pos;
        for (uint32_t i = 0; i < len;) {
            int32_t cp;
            int k = utf8_next(s + i, len - i, &cp);
            uint64_t *id = u64map_find(&J->chars, (uint64_t)cp);
            J->sym[pos++] = id ? (uint32_t)*id : BARRIER;
            i += (uint32_t)k;
        }
        J->wlen[w] = (uint32_t)(pos - J->woff[w]);
        if (add_pairs(&J->L, J->sym + J->woff[w], J->wlen[w], (int64_t)J->c->count[w], w, BARRIER, 0) < 0)
            return -1;
    }
    for (uint32_t k = 0; k < J->L.npairs; k++)
        if (heap_push(&J->L, J->L.pairs[k].count, J->L.pairs[k].a, J->L.pairs[k].b) < 0)
            return -1;
    return 0;
}

/* Replaces the pair (A, B) by NEWID in the NWL words listed in WL (merge STEP), moving their pair
 * counts; the pairs touched are left in J->L.touched. 0 or -1. */
static int apply_merge(struct learn_job *J, uint32_t a, uint32_t b, uint32_t newid, const uint32_t *wl, uint32_t nwl,
                       uint32_t step)
{
    J->L.ntouched = 0;
    for (uint32_t j = 0; j < nwl; j++) {
        uint32_t w = wl[j];
        if (J->stamp[w] == step)
            continue;
        J->stamp[w] = step;
        uint32_t *s = J->sym + J->woff[w], n = J->wlen[w];
        uint32_t i;
        for (i = 0; i + 1 < n; i++)
            if (s[i] == a && s[i + 1] == b)
                break;
        if (i + 1 >= n)
            continue;
        int64_t f = (int64_t)J->c->count[w];
        if (add_pairs(&J->L, s, n, -f, w, BARRIER, step) < 0)
            return -1;
        uint32_t o = 0;
        for (i = 0; i < n; i++) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                s[o++] = newid;
                i++;
            } else {
                s[o++] = s[i];
            }
        }
        J->wlen[w] = o;
        if (add_pairs(&J->L, s, o, f, w, newid, step) < 0)
            return -1;
    }
    return 0;
}

/* 1 when the concatenation of pieces A and B is already a piece of V, 0 if not, -1 on error. */
static int merge_exists(const struct vocab *v, uint32_t a, uint32_t b)
{
    uint32_t la, lb;
    const char *sa = vocab_piece(v, a, &la), *sb = vocab_piece(v, b, &lb);
    struct nmt_buf cat = {0};
    if (nmt_buf_append(&cat, sa, la) < 0 || nmt_buf_append(&cat, sb, lb) < 0) {
        nmt_buf_free(&cat);
        return -1;
    }
    int64_t exists = vocab_find(v, (const char *)cat.data, cat.len);
    nmt_buf_free(&cat);
    return exists >= 0;
}

/* Step 3: merges the most frequent pair until the size, min_freq or the pairs run out. 0 or -1. */
static int learn_merges(struct learn_job *J)
{
    struct learner *L = &J->L;
    uint32_t step = 0;
    while (J->v->n < J->opts->size && L->nheap > 0) {
        struct heap_ent e = heap_pop(L);
        uint64_t *slot = u64map_find(&L->pair_index, (uint64_t)e.a << 32 | e.b);
        struct pair *p = &L->pairs[*slot];
        if (p->forbidden)
            continue;
        if (p->count != e.count) {
            if (p->count > 0 && p->count < e.count && heap_push(L, p->count, e.a, e.b) < 0)
                return -1;
            continue;
        }
        if ((uint64_t)e.count < J->opts->min_freq || e.count <= 0)
            break;
        int exists = merge_exists(J->v, e.a, e.b);
        if (exists < 0)
            return -1;
        if (exists) {
            p->forbidden = 1;
            continue;
        }
        int64_t nid = vocab_add_merge(J->v, e.a, e.b);
        if (nid < 0)
            return -1;
        step++;
        J->st.nmerge++;
        J->st.stop_count = (uint64_t)e.count;
        uint32_t *wl = p->w, nwl = p->nw;  /* p may move as pairs are added; this list does not grow */
        p->w = NULL;
        p->nw = p->capw = 0;
        int rc = apply_merge(J, e.a, e.b, (uint32_t)nid, wl, nwl, step);
        free(wl);
        if (rc < 0)
            return -1;
        for (uint32_t t = 0; t < L->ntouched; t++) {
            struct pair *q = &L->pairs[L->touched[t]];
            if (q->count > 0 && heap_push(L, q->count, q->a, q->b) < 0)
                return -1;
        }
    }
    return 0;
}

struct vocab *bpe_learn(const struct bpe_counts *c, const struct bpe_learn_opts *opts, struct bpe_learn_stats *stats)
{
    if (opts->size < VOCAB_FIRST_CHAR || opts->size > VOCAB_MAX_SIZE)
        return nmt_seterr("vocabulary size must be %u..%u", VOCAB_FIRST_CHAR, VOCAB_MAX_SIZE), NULL;
    if (!(opts->char_coverage > 0 && opts->char_coverage <= 1))
        return nmt_seterr("character coverage must be in (0, 1]"), NULL;
    struct learn_job J = {.c = c, .opts = opts, .nw = c->words.n};
    u64map_init(&J.chars);
    u64map_init(&J.L.pair_index);
    J.v = vocab_new(opts->normalize);
    int rc = J.v && learn_chars(&J) == 0 && learn_words(&J) == 0 && learn_merges(&J) == 0 ? 0 : -1;
    job_free(&J);
    if (rc < 0) {
        vocab_free(J.v);
        return NULL;
    }
    if (stats)
        *stats = J.st;
    return J.v;
}

/* ---- encoding ---- */

#define CACHE_MAX_WORDS (1u << 20)

struct bpe_encoder {
    const struct vocab *v;
    struct u64map merge;       /* (left << 32 | right) -> merged id (= rank) */
    struct u64map chars;       /* code point -> char piece id */
    uint32_t ascii[128];       /* char piece id of each ASCII character, or BARRIER */
    double p;                  /* dropout probability */
    uint64_t seed, rng;
    uint32_t *sym;             /* (cap_sym) scratch */
    uint32_t cap_sym;
    struct strtab cache;       /* words seen (only without dropout) */
    uint32_t *cache_off, *cache_n; /* (cache.n) ids of cached word k: cache_ids[cache_off[k] ..] */
    size_t cache_cap;
    uint32_t *cache_ids;
    size_t ncache_ids, cap_cache_ids;
};

struct bpe_encoder *bpe_encoder_new(const struct vocab *v)
{
    if (v->spm)
        return nmt_seterr("a SentencePiece model segments by itself, not by nmt's BPE"), NULL;
    struct bpe_encoder *e = nmt_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->v = v;
    u64map_init(&e->merge);
    u64map_init(&e->chars);
    strtab_init(&e->cache);
    for (int i = 0; i < 128; i++)
        e->ascii[i] = BARRIER;
    for (uint32_t id = VOCAB_FIRST_CHAR; id < v->n; id++) {
        uint64_t *slot;
        if (v->kind[id] == VOCAB_CHAR) {
            uint32_t len;
            int32_t cp;
            const char *s = vocab_piece(v, id, &len);
            utf8_next((const unsigned char *)s, len, &cp);
            if (cp >= 0 && cp < 128)
                e->ascii[cp] = id;
            slot = u64map_get(&e->chars, (uint64_t)cp);
        } else {
            slot = u64map_get(&e->merge, (uint64_t)v->left[id] << 32 | v->right[id]);
        }
        if (!slot) {
            bpe_encoder_free(e);
            return NULL;
        }
        *slot = id;
    }
    return e;
}

void bpe_encoder_free(struct bpe_encoder *e)
{
    if (!e)
        return;
    u64map_free(&e->merge);
    u64map_free(&e->chars);
    strtab_free(&e->cache);
    free(e->cache_off);
    free(e->cache_n);
    free(e->cache_ids);
    free(e->sym);
    free(e);
}

void bpe_encoder_dropout(struct bpe_encoder *e, double p, uint64_t seed)
{
    e->p = p;
    e->seed = seed;
    e->rng = seed;
}

void bpe_encoder_reseed(struct bpe_encoder *e, uint64_t key)
{
    uint64_t s = e->seed ^ (key * 0xd1342543de82ef95ULL);
    e->rng = rng_splitmix64(&s);
}

static int reserve_ids(uint32_t **ids, uint32_t n, uint32_t *cap, size_t more)
{
    if ((size_t)n + more <= *cap)
        return 0;
    if ((size_t)n + more > UINT32_MAX / 2)
        return nmt_seterr("sentence too long");
    uint32_t c = *cap ? *cap : 64;
    while (c < n + more)
        c *= 2;
    uint32_t *x = nmt_realloc(*ids, (size_t)c * sizeof *x);
    if (!x)
        return -1;
    *ids = x;
    *cap = c;
    return 0;
}

static int cache_put(struct bpe_encoder *e, const char *s, size_t len, const uint32_t *ids, uint32_t n)
{
    if (e->cache.n >= CACHE_MAX_WORDS)
        return 0;
    int added;
    int64_t k = strtab_intern(&e->cache, s, len, &added);
    if (k < 0)
        return -1;
    if (!added)
        return 0;
    if (NMT_GROW2(e->cache_off, e->cache_n, e->cache_cap, (size_t)k + 1) < 0 ||
        NMT_GROW(e->cache_ids, e->cap_cache_ids, e->ncache_ids + n) < 0)
        return -1;
    if (e->ncache_ids + n > UINT32_MAX) { /* offsets are 32-bit: stop caching */
        e->cache_off[k] = 0;
        e->cache_n[k] = UINT32_MAX;
        return 0;
    }
    if (n)
        memcpy(e->cache_ids + e->ncache_ids, ids, n * sizeof *ids);
    e->cache_off[k] = (uint32_t)e->ncache_ids;
    e->cache_n[k] = n;
    e->ncache_ids += n;
    return 0;
}

int bpe_encode_word(struct bpe_encoder *e, const char *s, size_t len, uint32_t **ids, uint32_t *n, uint32_t *cap)
{
    int use_cache = e->p <= 0;
    if (use_cache) {
        int64_t k = strtab_find(&e->cache, s, len);
        if (k >= 0 && e->cache_n[k] != UINT32_MAX) {
            uint32_t m = e->cache_n[k];
            if (reserve_ids(ids, *n, cap, m) < 0)
                return -1;
            if (m)
                memcpy(*ids + *n, e->cache_ids + e->cache_off[k], m * sizeof **ids);
            *n += m;
            return 0;
        }
    }
    if (len + 1 > e->cap_sym) {
        if (len + 1 > UINT32_MAX / 8)
            return nmt_seterr("word too long (%zu bytes)", len);
        uint32_t c = e->cap_sym ? e->cap_sym : 64;
        while (c < len + 1)
            c *= 2;
        uint32_t *x = nmt_realloc(e->sym, (size_t)c * sizeof *x);
        if (!x)
            return -1;
        e->sym = x;
        e->cap_sym = c;
    }
    /* initial symbols: char pieces, or byte pieces for characters without one */
    uint32_t ns = 0, *sym = e->sym;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t id = BARRIER;
        int k = 1;
        if (u[i] < 0x80) {
            id = e->ascii[u[i]];
        } else {
            int32_t cp;
            k = utf8_next(u + i, len - i, &cp);
            uint64_t *slot = cp >= 0 ? u64map_find(&e->chars, (uint64_t)cp) : NULL;
            if (slot)
                id = (uint32_t)*slot;
        }
        if (id != BARRIER) {
            sym[ns++] = id;
        } else {
            for (int j = 0; j < k; j++)
                sym[ns++] = VOCAB_FIRST_BYTE + u[i + (size_t)j];
        }
        i += (size_t)k;
    }
    /* merges, lowest rank (= id) first */
    for (;;) {
        uint32_t best = BARRIER, at = 0;
        for (uint32_t i = 0; i + 1 < ns; i++) {
            if (sym[i] < VOCAB_FIRST_CHAR || sym[i + 1] < VOCAB_FIRST_CHAR)
                continue;
            uint64_t *m = u64map_find(&e->merge, (uint64_t)sym[i] << 32 | sym[i + 1]);
            if (!m || *m >= best)
                continue;
            if (e->p > 0 && rng_unit(rng_splitmix64(&e->rng)) < e->p)
                continue;
            best = (uint32_t)*m;
            at = i;
        }
        if (best == BARRIER)
            break;
        sym[at] = best;
        memmove(sym + at + 1, sym + at + 2, (ns - at - 2) * sizeof *sym);
        ns--;
    }
    if (reserve_ids(ids, *n, cap, ns) < 0)
        return -1;
    if (ns)
        memcpy(*ids + *n, sym, ns * sizeof *sym);
    *n += ns;
    if (use_cache && cache_put(e, s, len, sym, ns) < 0)
        return -1;
    return 0;
}
