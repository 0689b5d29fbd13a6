/* unigram.c: learning a SentencePiece unigram model (see unigram.h), step by step as spm_train's
 * unigram trainer, with two differences of means, not of results: the seed substrings are the
 * right-branching substrings of words counted in a hash table (spm: the internal nodes of a suffix
 * tree over all sentences, the same strings when pieces cannot cross a word's start), and sums are in
 * double (expected counts in fixed point, so that the model does not depend on the thread count). */
#include "text/unigram.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/buf.h"
#include "base/u64map.h"
#include "base/utf8.h"
#include "base/util.h"
#include "text/spm.h"

#define WS_CHAR 0x2581  /* U+2581, the escaped space */
#define UNK_CHAR 0x2585 /* U+2585, a character outside the kept ones */
#define UNK_PENALTY 10.0
#define FIX_ONE 16777216.0 /* expected counts in units of 2^-24 */

struct unigram_learner {
    struct spm_model norm;     /* a model of no pieces: the normaliser's map and whitespace rules */
    struct spm_encoder enc;
    struct nmt_buf text;       /* the normalised sentences, each ended by a NUL */
    uint64_t nsent, skipped_long, skipped_unk;
};

struct unigram_learner *unigram_new(const void *charsmap, size_t len)
{
    struct unigram_learner *l = nmt_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->norm.name = "unigram";
    if (charsmap && len >= 4) { /* u32le trie size, the trie, the replacement strings */
        const unsigned char *b = charsmap;
        uint32_t size = nmt_le32(b);
        l->norm.charsmap = b + 4;
        l->norm.ncharsmap = size / 4;
        l->norm.normalized = (const char *)b + 4 + size;
        l->norm.nnormalized = (uint32_t)(len - 4 - size);
    }
    l->norm.add_dummy_prefix = l->norm.remove_extra_whitespaces = l->norm.escape_whitespaces = 1;
    spm_encoder_init(&l->enc, &l->norm);
    return l;
}

void unigram_free(struct unigram_learner *l)
{
    if (!l)
        return;
    spm_encoder_free(&l->enc);
    nmt_buf_free(&l->text);
    free(l);
}

int unigram_add(struct unigram_learner *l, const char *s, size_t len)
{
    if (len == 0)
        return 0;
    if (memchr(s, 0, len))
        return nmt_seterr("a NUL byte");
    if (len > UNIGRAM_MAX_SENTENCE) {
        l->skipped_long++;
        return 0;
    }
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(s + i, "\xE2\x96\x85", 3) == 0) {
            l->skipped_unk++;
            return 0;
        }
    if (spm_normalize(&l->enc, s, len) < 0)
        return -1;
    if (l->enc.norm.len == 0)
        return 0;
    size_t at = l->text.len;
    if (nmt_buf_append(&l->text, l->enc.norm.data, l->enc.norm.len) < 0 || nmt_buf_append(&l->text, "", 1) < 0)
        return -1;
    static const char *const meta[] = {"<unk>", "<s>", "</s>"}; /* as a tab, which no piece holds */
    for (char *c = (char *)l->text.data + at; (c = strchr(c, '<')) != NULL;) {
        size_t k = 0, n = 0;
        while (k < 3 && strncmp(c, meta[k], n = strlen(meta[k])) != 0)
            k++;
        if (k == 3) {
            c++;
            continue;
        }
        *c++ = '\t';
        memmove(c, c + n - 1, strlen(c + n - 1) + 1);
        l->text.len -= n - 1;
    }
    l->nsent++;
    return 0;
}

/* ---- characters ---- */

static int32_t char_at(const unsigned char *s, size_t left, size_t *n)
{
    int32_t cp;
    *n = (size_t)utf8_next(s, left, &cp);
    return cp < 0 ? 0xFFFD : cp;
}

struct char_count {
    int32_t cp;
    uint64_t n;
};

static int char_count_cmp(const void *a, const void *b)
{
    const struct char_count *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    return (x->cp > y->cp) - (x->cp < y->cp);
}

/* Counts the characters of the sentences, keeps in KEEP (code point -> count) the most frequent
 * covering COVERAGE of all (trainer_interface.cc LoadSentences; a tab never kept), and writes the
 * others as U+2585. 0, or -1 with the error set. */
static int keep_chars(struct unigram_learner *l, double coverage, struct u64map *keep, struct unigram_stats *st)
{
    struct u64map all;
    u64map_init(&all);
    uint64_t total = 0;
    int rc = 0;
    for (size_t i = 0, n; i < l->text.len && rc == 0; i += n) {
        int32_t cp = char_at(l->text.data + i, l->text.len - i, &n);
        if (cp == 0 || cp == ' ')
            continue;
        uint64_t *c = u64map_get(&all, (uint64_t)cp);
        if (!c)
            rc = -1;
        else
            ++*c, total++;
    }
    struct char_count *cc = rc ? NULL : nmt_malloc((all.n + 1) * sizeof *cc);
    size_t ncc = 0;
    if (!cc)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < all.cap; i++)
        if (all.key[i] != U64MAP_EMPTY)
            cc[ncc++] = (struct char_count){(int32_t)all.key[i], all.val[i]};
    if (rc == 0)
        qsort(cc, ncc, sizeof *cc, char_count_cmp);
    uint64_t acc = 0;
    for (size_t i = 0; rc == 0 && i < ncc; i++) {
        if ((float)((double)acc / (double)total) >= (float)coverage)
            break;
        acc += cc[i].n;
        if (cc[i].cp == '\t')
            continue;
        uint64_t *c = u64map_get(keep, (uint64_t)cc[i].cp);
        if (!c)
            rc = -1;
        else
            *c = cc[i].n;
    }
    st->nchar_seen = (uint32_t)ncc;
    st->nchar = (uint32_t)keep->n;
    free(cc);
    u64map_free(&all);
    /* the characters not kept become U+2585 (as long in UTF-8 as 3 bytes: rewritten in a copy) */
    struct nmt_buf o = {0};
    for (size_t i = 0, n; rc == 0 && i < l->text.len; i += n) {
        int32_t cp = char_at(l->text.data + i, l->text.len - i, &n);
        if (cp == 0 || u64map_find(keep, (uint64_t)cp))
            rc = nmt_buf_append(&o, l->text.data + i, n);
        else
            rc = nmt_buf_append(&o, "\xE2\x96\x85", 3);
    }
    if (rc == 0) {
        nmt_buf_free(&l->text);
        l->text = o;
    } else {
        nmt_buf_free(&o);
    }
    return rc;
}

/* ---- words and seed pieces ---- */

/* The words of the sentences (from one U+2581 to the next: SplitIntoWords) with their counts in
 * WORDS, WCOUNT; TOKENS, TCOUNT the same with a last byte 1 for a sentence's last word, 0 otherwise
 * (what follows a word's end, for the seed substrings). 0, or -1 with the error set. */
static int split_words(const struct nmt_buf *text, struct strtab *words, uint64_t **wcount, struct strtab *tokens,
                       uint64_t **tcount)
{
    size_t wcap = 0, tcap = 0, keycap = 0;
    char *key = NULL;
    for (size_t i = 0; i < text->len;) {
        const char *s = (const char *)text->data + i;
        size_t n = strlen(s);
        for (size_t b = 0, end; b < n; b = end) {
            end = b + (b + 3 <= n && memcmp(s + b, "\xE2\x96\x81", 3) == 0 ? 3 : 1);
            while (end < n && !(end + 3 <= n && memcmp(s + end, "\xE2\x96\x81", 3) == 0))
                end++;
            int last = end == n, added_w, added_t;
            int64_t w = strtab_intern(words, s + b, end - b, &added_w);
            if (w < 0 || NMT_GROW(*wcount, wcap, (size_t)words->n) < 0 || NMT_GROW(key, keycap, end - b + 1) < 0)
                goto fail;
            memcpy(key, s + b, end - b);
            key[end - b] = (char)last;
            int64_t t = strtab_intern(tokens, key, end - b + 1, &added_t);
            if (t < 0 || NMT_GROW(*tcount, tcap, (size_t)tokens->n) < 0)
                goto fail;
            (*wcount)[w] = added_w ? 1 : (*wcount)[w] + 1;
            (*tcount)[t] = added_t ? 1 : (*tcount)[t] + 1;
        }
        i += n + 1;
    }
    free(key);
    return 0;
fail:
    free(key);
    return -1;
}

enum { SC_ANY = -1, SC_COMMON = 0, SC_INHERITED, SC_LATIN, SC_GREEK, SC_CYRILLIC, SC_HAN, SC_BLOCK };

/* The Unicode script of C as far as piece validity needs it (split_by_unicode_script): combining
 * marks inherit their neighbour's, punctuation, symbols and ASCII digits are common, Latin, Greek,
 * Cyrillic and Han (kana and kanji together, as spm merges them) by their blocks, and any other
 * letter the script of its 128-code-point block. */
static int script_of(int32_t c)
{
    static const int32_t latin[][2] = {{0x41, 0x5A},     {0x61, 0x7A},     {0xAA, 0xAA},     {0xBA, 0xBA},
                                       {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2AF},    {0x1D00, 0x1D7F},
                                       {0x1E00, 0x1EFF}, {0x2C60, 0x2C7F}, {0xA720, 0xA7FF}, {0xAB30, 0xAB6F},
                                       {0xFB00, 0xFB06}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}};
    utf8proc_category_t cat = utf8proc_category(c);
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME)
        return SC_INHERITED;
    if ((c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
        (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF66 && c <= 0xFF9F) || (c >= 0x20000 && c <= 0x3FFFF))
        return SC_HAN;
    for (size_t i = 0; i < sizeof latin / sizeof latin[0]; i++)
        if (c >= latin[i][0] && c <= latin[i][1])
            return SC_LATIN;
    if ((c >= 0x370 && c <= 0x3FF) || (c >= 0x1F00 && c <= 0x1FFF))
        return SC_GREEK;
    if ((c >= 0x400 && c <= 0x52F) || (c >= 0x2DE0 && c <= 0x2DFF) || (c >= 0xA640 && c <= 0xA69F))
        return SC_CYRILLIC;
    if (cat >= UTF8PROC_CATEGORY_PC || cat == UTF8PROC_CATEGORY_CN || c < 0x370 || (c >= 0x2000 && c < 0x2C00) ||
        (c >= 0xFF00 && c < 0xFF21))
        return SC_COMMON;
    return SC_BLOCK + (c >> 7);
}

/* Substrings of the words: counts, the character that first followed one, whether another did. */
struct substrings {
    struct strtab tab;
    uint64_t *count;
    int32_t *follow;
    uint8_t *branch, *nchar;
    size_t cap, cap2;
};

/* Counts the substrings of token T (N bytes, COUNT times, followed by U+2581, or by the end of its
 * sentence when LAST) that may be pieces (IsValidSentencePiece): at most UNIGRAM_MAX_PIECE_CHARS
 * characters, U+2581 only first, no U+2585 or tab, one script. CP, OFF: scratch of N + 1. */
static int count_substrings(struct substrings *ss, const char *t, size_t n, uint64_t count, int last, int32_t *cp,
                            uint32_t *off)
{
    uint32_t nch = 0;
    for (size_t i = 0, k; i < n; i += k) {
        off[nch] = (uint32_t)i;
        cp[nch++] = char_at((const unsigned char *)t + i, n - i, &k);
    }
    off[nch] = (uint32_t)n;
    for (uint32_t i = 0; i < nch; i++) {
        int prev = SC_ANY;
        for (uint32_t j = i; j < nch && j - i < UNIGRAM_MAX_PIECE_CHARS; j++) {
            int32_t c = cp[j];
            if (c == UNK_CHAR || c == '\t' || c == ' ' || (c == WS_CHAR && j > i))
                break;
            if (c != WS_CHAR) {
                int s = script_of(c);
                if (s == SC_INHERITED)
                    s = prev;
                if (prev != SC_ANY && s != SC_ANY && s != prev)
                    break;
                prev = s;
            }
            int added;
            int64_t id = strtab_intern(&ss->tab, t + off[i], off[j + 1] - off[i], &added);
            if (id < 0 || NMT_GROW2(ss->count, ss->follow, ss->cap, ss->tab.n) < 0)
                return -1;
            if (NMT_GROW2(ss->branch, ss->nchar, ss->cap2, ss->tab.n) < 0)
                return -1;
            int32_t f = j + 1 < nch ? cp[j + 1] : last ? 0 : WS_CHAR;
            if (added) {
                ss->count[id] = 0, ss->follow[id] = f, ss->branch[id] = 0;
                ss->nchar[id] = (uint8_t)(j - i + 1);
            } else if (ss->follow[id] != f) {
                ss->branch[id] = 1;
            }
            ss->count[id] += count;
        }
    }
    return 0;
}

static void substrings_free(struct substrings *ss)
{
    strtab_free(&ss->tab);
    free(ss->count);
    free(ss->follow);
    free(ss->branch);
    free(ss->nchar);
}

/* The current pieces: ids in the substrings' table and scores. */
struct pset {
    uint32_t n;
    uint32_t *sid;
    float *score;
};

static void pset_free(struct pset *p)
{
    free(p->sid);
    free(p->score);
    memset(p, 0, sizeof *p);
}

static int pset_alloc(struct pset *p, size_t n)
{
    p->n = 0;
    p->sid = nmt_malloc((n + 1) * sizeof *p->sid);
    p->score = nmt_malloc((n + 1) * sizeof *p->score);
    return p->sid && p->score ? 0 : -1;
}

struct seed {
    uint32_t sid;
    uint64_t score;
};

static int seed_cmp(const void *a, const void *b)
{
    const struct seed *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return (x->sid > y->sid) - (x->sid < y->sid);
}

/* The kept characters by count (most first, then by code point), in *CC (malloc'd, *N). */
static int sorted_chars(const struct u64map *keep, struct char_count **cc, size_t *n)
{
    *n = 0;
    if (!(*cc = nmt_malloc((keep->n + 1) * sizeof **cc)))
        return -1;
    for (size_t i = 0; i < keep->cap; i++)
        if (keep->key[i] != U64MAP_EMPTY)
            (*cc)[(*n)++] = (struct char_count){(int32_t)keep->key[i], keep->val[i]};
    qsort(*cc, *n, sizeof **cc, char_count_cmp);
    return 0;
}

/* The seed pieces (MakeSeedSentencePieces) into P: the kept characters by count, then at most
 * UNIGRAM_SEED_SIZE substrings of 2 characters or more that occur followed by two different ones,
 * by count times length; each scored the log of its share of all. 0, or -1 with the error set. */
static int make_seeds(struct substrings *ss, const struct strtab *tokens, const uint64_t *tcount,
                      const struct u64map *keep, struct pset *p)
{
    size_t maxlen = 1, nc = 0, ncand = 0;
    for (uint32_t t = 0; t < tokens->n; t++)
        maxlen = tokens->len[t] > maxlen ? tokens->len[t] : maxlen;
    int32_t *cp = nmt_malloc((maxlen + 1) * sizeof *cp);
    uint32_t *off = nmt_malloc((maxlen + 1) * sizeof *off);
    struct char_count *cc = NULL;
    struct seed *cand = NULL;
    double *score = NULL;
    struct nmt_buf u = {0};
    int rc = cp && off ? 0 : -1;
    for (uint32_t t = 0; t < tokens->n && rc == 0; t++) {
        uint32_t len;
        const char *s = strtab_get(tokens, t, &len);
        rc = count_substrings(ss, s, len - 1, tcount[t], s[len - 1], cp, off);
    }
    rc = rc ? rc : sorted_chars(keep, &cc, &nc);
    if (rc == 0 && !(cand = nmt_malloc(((size_t)ss->tab.n + 1) * sizeof *cand)))
        rc = -1;
    for (uint32_t id = 0; rc == 0 && id < ss->tab.n; id++)
        if (ss->nchar[id] >= 2 && ss->branch[id])
            cand[ncand++] = (struct seed){id, ss->count[id] * ss->nchar[id]};
    if (rc == 0) {
        qsort(cand, ncand, sizeof *cand, seed_cmp);
        ncand = ncand < UNIGRAM_SEED_SIZE ? ncand : UNIGRAM_SEED_SIZE;
        rc = pset_alloc(p, nc + ncand);
    }
    if (rc == 0 && !(score = nmt_malloc((nc + ncand + 1) * sizeof *score)))
        rc = -1;
    double sum = 0;
    for (size_t i = 0; rc == 0 && i < nc; i++) {
        u.len = 0;
        int64_t id = utf8_put(&u, cc[i].cp) < 0 ? -1 : strtab_intern(&ss->tab, u.data, u.len, NULL);
        if (id < 0)
            rc = -1;
        else
            p->sid[p->n] = (uint32_t)id, score[p->n++] = (double)cc[i].n, sum += (double)cc[i].n;
    }
    for (size_t i = 0; rc == 0 && i < ncand; i++)
        p->sid[p->n] = cand[i].sid, score[p->n++] = (double)cand[i].score, sum += (double)cand[i].score;
    for (uint32_t i = 0; rc == 0 && i < p->n; i++)
        p->score[i] = (float)(log(score[i]) - log(sum));
    free(cp);
    free(off);
    free(cc);
    free(cand);
    free(score);
    nmt_buf_free(&u);
    return rc;
}

/* ---- the model of a round and its lattices ---- */

/* Makes M (zeroed the first time) the model of the pieces P: their texts, scores and trie, trie
 * piece k being P's piece k. 0, or -1 with the error set. */
static int model_set(struct spm_model *m, const struct substrings *ss, const struct pset *p)
{
    strtab_free(&m->text);
    strtab_init(&m->text);
    free(m->ptype);
    m->name = "unigram";
    m->n = p->n;
    m->score = p->score;
    if (!(m->ptype = nmt_malloc(p->n + 1)))
        return -1;
    memset(m->ptype, SPM_NORMAL, p->n);
    m->min_score = p->n ? p->score[0] : 0;
    for (uint32_t i = 0; i < p->n; i++) {
        uint32_t len;
        const char *s = strtab_get(&ss->tab, p->sid[i], &len);
        if (strtab_intern(&m->text, s, len, NULL) < 0)
            return -1;
        m->min_score = p->score[i] < m->min_score ? p->score[i] : m->min_score;
    }
    return spm_build_trie(m);
}

static void model_free(struct spm_model *m)
{
    strtab_free(&m->text);
    free(m->ptype);
    free(m->trie);
}

struct lnode {
    uint32_t b, e;             /* characters [b, e) */
    int32_t id;                /* the piece, -1 for an unknown character */
    float score;
};

/* A word's lattice: its nodes by begin, then length (as spm inserts them), and the scratch of the
 * forward-backward and Viterbi passes. */
struct lattice {
    uint32_t nch;
    struct lnode *node;
    size_t nnode, node_cap;
    uint32_t *off;             /* (nch + 1) byte offset of each character */
    double *a, *z;             /* (nch + 1) forward, backward log-sums; Viterbi: best score in a */
    int32_t *best;             /* (nch + 1) Viterbi: the best node ending there */
    uint32_t *path;            /* (nch) Viterbi: node indices */
    size_t cap;
};

static void lattice_free(struct lattice *l)
{
    free(l->node);
    free(l->off);
    free(l->a);
    free(l->z);
    free(l->best);
    free(l->path);
}

static int lattice_node(struct lattice *l, uint32_t b, uint32_t e, int32_t id, float score)
{
    if (NMT_GROW(l->node, l->node_cap, l->nnode + 1) < 0)
        return -1;
    l->node[l->nnode++] = (struct lnode){b, e, id, score};
    return 0;
}

/* Builds the lattice of W (N bytes) under M (PopulateNodes): every piece starting at each character,
 * and an unknown node of UNK_SCORE where no one-character piece starts. 0, or -1 (memory). */
static int lattice_build(struct lattice *l, const struct spm_model *m, float unk_score, const char *w, size_t n)
{
    size_t need = n + 2;
    if (need > l->cap) {
        size_t c = l->cap, c2 = l->cap, c3 = l->cap;
        if (NMT_GROW2(l->off, l->best, c, need) < 0 || NMT_GROW2(l->a, l->z, c2, need) < 0 ||
            NMT_GROW(l->path, c3, need) < 0)
            return -1;
        l->cap = need;
    }
    l->nch = 0;
    for (size_t i = 0, k; i < n; i += k) {
        int32_t cp;
        l->off[l->nch++] = (uint32_t)i;
        k = (size_t)utf8_next((const unsigned char *)w + i, n - i, &cp);
    }
    l->off[l->nch] = (uint32_t)n;
    l->nnode = 0;
    for (uint32_t b = 0; b < l->nch; b++) {
        int32_t s = 0;
        int single = 0;
        for (uint32_t p = l->off[b], e = b; p < n; p++) {
            if ((s = spm_trie_next(m, s, (unsigned char)w[p])) < 0)
                break;
            if (p + 1 == l->off[e + 1]) {
                e++;
                int32_t id = m->trie[s].piece;
                if (id >= 0 && lattice_node(l, b, e, id, m->trie[s].score) < 0)
                    return -1;
                single |= id >= 0 && e == b + 1;
            }
        }
        if (!single && lattice_node(l, b, b + 1, -1, unk_score) < 0)
            return -1;
    }
    return 0;
}

/* log(exp(x) + exp(y)) as spm's LogSumExp (a difference over 50 ignored). */
static double log_sum_exp(double x, double y)
{
    if (x == -INFINITY)
        return y;
    double lo = x < y ? x : y, hi = x < y ? y : x;
    return hi > lo + 50 ? hi : hi + log1p(exp(lo - hi));
}

/* Adds FREQ times each node's marginal probability to EXPECTED (fixed point, by piece) and returns
 * the log-likelihood of the word (PopulateMarginal). */
static double lattice_marginal(struct lattice *l, double freq, int64_t *expected)
{
    uint32_t nch = l->nch;
    for (uint32_t i = 0; i <= nch; i++)
        l->a[i] = l->z[i] = -INFINITY;
    l->a[0] = 0, l->z[nch] = 0;
    for (size_t i = 0; i < l->nnode; i++) {
        const struct lnode *d = &l->node[i];
        l->a[d->e] = log_sum_exp(l->a[d->e], l->a[d->b] + d->score);
    }
    for (size_t i = l->nnode; i-- > 0;) {
        const struct lnode *d = &l->node[i];
        l->z[d->b] = log_sum_exp(l->z[d->b], d->score + l->z[d->e]);
    }
    double logz = l->a[nch];
    for (size_t i = 0; i < l->nnode; i++) {
        const struct lnode *d = &l->node[i];
        if (d->id >= 0)
            expected[d->id] += (int64_t)llround(freq * exp(l->a[d->b] + d->score + l->z[d->e] - logz) * FIX_ONE);
    }
    return logz;
}

/* The best path (Viterbi: among equal scores the node of the earliest begin), into l->path; without
 * the node spanning the whole word when NOT_WHOLE. Returns its node count, 0 when there is none. */
static uint32_t lattice_viterbi(struct lattice *l, int not_whole)
{
    uint32_t nch = l->nch;
    for (uint32_t i = 0; i <= nch; i++)
        l->best[i] = -1, l->a[i] = 0;
    l->best[0] = INT32_MAX;
    for (size_t i = 0; i < l->nnode; i++) {
        const struct lnode *d = &l->node[i];
        if (l->best[d->b] < 0 || (not_whole && d->b == 0 && d->e == nch))
            continue;
        double s = l->a[d->b] + d->score;
        if (l->best[d->e] < 0 || s > l->a[d->e])
            l->a[d->e] = s, l->best[d->e] = (int32_t)i;
    }
    if (l->best[nch] < 0)
        return 0;
    uint32_t n = 0;
    for (uint32_t pos = nch; pos > 0; pos = l->node[l->best[pos]].b)
        l->path[n++] = (uint32_t)l->best[pos];
    for (uint32_t i = 0; i < n / 2; i++) {
        uint32_t t = l->path[i];
        l->path[i] = l->path[n - 1 - i], l->path[n - 1 - i] = t;
    }
    return n;
}

/* ---- EM and pruning ---- */

/* spm's Digamma: the recurrence up to 7, then the asymptotic series. */
static double digamma(double x)
{
    double r = 0;
    for (; x < 7; ++x)
        r -= 1 / x;
    x -= 0.5;
    double xx = 1 / x, xx2 = xx * xx, xx4 = xx2 * xx2;
    return r + log(x) + xx2 / 24 - 7.0 / 960 * xx4 + 31.0 / 8064 * xx4 * xx2 - 127.0 / 30720 * xx4 * xx4;
}

/* A thread's share of the words: expected counts (VITERBI 0) or the Viterbi counts of the pieces. */
struct job {
    const struct spm_model *m;
    float unk_score;
    const struct strtab *words;
    const uint64_t *wcount;
    uint32_t from, to;
    int viterbi, rc;
    int64_t *acc;              /* (m->n) */
    double logl;               /* sum of count x log-likelihood */
    struct lattice lat;
};

static void *job_run(void *arg)
{
    struct job *j = arg;
    for (uint32_t w = j->from; w < j->to && j->rc == 0; w++) {
        uint32_t len;
        const char *s = strtab_get(j->words, w, &len);
        if (lattice_build(&j->lat, j->m, j->unk_score, s, len) < 0) {
            j->rc = -1;
            break;
        }
        if (!j->viterbi) {
            j->logl += (double)j->wcount[w] * lattice_marginal(&j->lat, (double)j->wcount[w], j->acc);
            continue;
        }
        uint32_t n = lattice_viterbi(&j->lat, 0);
        for (uint32_t k = 0; k < n; k++) {
            int32_t id = j->lat.node[j->lat.path[k]].id;
            if (id >= 0)
                j->acc[id] += (int64_t)j->wcount[w];
        }
    }
    return NULL;
}

/* Runs the words through M on THREADS threads, summing into ACC (M->n, zeroed here) the expected
 * counts in fixed point, or with VITERBI the Viterbi counts; *LOGL the likelihood. 0, or -1. */
static int run_words(const struct spm_model *m, const struct strtab *words, const uint64_t *wcount, uint32_t threads,
                     int viterbi, int64_t *acc, double *logl)
{
    struct job *j = nmt_calloc(threads, sizeof *j);
    pthread_t *tid = nmt_calloc(threads, sizeof *tid);
    int rc = j && tid ? 0 : -1;
    uint32_t started = 0;
    for (uint32_t t = 0; rc == 0 && t < threads; t++) {
        j[t] = (struct job){.m = m, .unk_score = (float)(m->min_score - UNK_PENALTY), .words = words,
                            .wcount = wcount, .viterbi = viterbi};
        j[t].from = (uint32_t)((uint64_t)words->n * t / threads);
        j[t].to = (uint32_t)((uint64_t)words->n * (t + 1) / threads);
        j[t].acc = t == 0 ? acc : nmt_calloc((size_t)m->n + 1, sizeof *acc);
        if (!j[t].acc)
            rc = -1;
    }
    if (rc == 0)
        memset(acc, 0, (size_t)m->n * sizeof *acc);
    for (uint32_t t = 1; rc == 0 && t < threads; t++, started++)
        if (pthread_create(&tid[t], NULL, job_run, &j[t]) != 0)
            rc = nmt_seterr("cannot start a thread");
    if (rc == 0)
        job_run(&j[0]);
    for (uint32_t t = 1; t <= started; t++)
        pthread_join(tid[t], NULL);
    *logl = 0;
    for (uint32_t t = 0; j && t < threads; t++) {
        if (rc == 0 && j[t].rc < 0)
            rc = nmt_seterr("out of memory");
        *logl += j[t].logl;
        for (uint32_t i = 0; t > 0 && rc == 0 && i < m->n; i++)
            acc[i] += j[t].acc[i];
        if (t > 0)
            free(j[t].acc);
        lattice_free(&j[t].lat);
    }
    free(j);
    free(tid);
    return rc;
}

/* The M step (RunMStep): pieces of expected count below 0.5 dropped, the others scored
 * digamma(count) - digamma(total). 0, or -1. */
static int m_step(struct pset *p, const int64_t *expected)
{
    double *f = nmt_malloc(((size_t)p->n + 1) * sizeof *f), sum = 0;
    if (!f)
        return -1;
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        double e = (double)expected[i] / FIX_ONE;
        if (e < 0.5)
            continue;
        p->sid[k] = p->sid[i];
        f[k++] = e;
        sum += e;
    }
    double ds = digamma(sum);
    for (uint32_t i = 0; i < k; i++)
        p->score[i] = (float)(digamma(f[i]) - ds);
    p->n = k;
    free(f);
    return 0;
}

struct loss {
    uint32_t i;
    double loss;
};

static int loss_cmp(const void *a, const void *b)
{
    const struct loss *x = a, *y = b;
    if (x->loss != y->loss)
        return x->loss < y->loss ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

/* A thread's share of the pieces in the search of their second-best segmentations. */
struct alt_job {
    const struct spm_model *m;
    const struct pset *p;
    const struct substrings *ss;
    uint32_t from, to;
    uint8_t *keep;
    uint32_t *first;           /* offsets into this job's ALT until merged */
    int32_t *alt;
    size_t nalt, cap;
    int rc;
};

static void *alt_run(void *arg)
{
    struct alt_job *j = arg;
    struct lattice lat = {0};
    for (uint32_t i = j->from; i < j->to && j->rc == 0; i++) {
        j->first[i] = (uint32_t)j->nalt;
        uint32_t len;
        const char *s = strtab_get(&j->ss->tab, j->p->sid[i], &len);
        if ((j->rc = lattice_build(&lat, j->m, (float)(j->m->min_score - UNK_PENALTY), s, len)) < 0)
            break;
        uint32_t n = lattice_viterbi(&lat, 0);
        j->keep[i] = n < 2;
        if (n != 1 || (n = lattice_viterbi(&lat, 1)) == 0)
            continue;
        if ((j->rc = NMT_GROW(j->alt, j->cap, j->nalt + n)) < 0)
            break;
        for (uint32_t k = 0; k < n; k++)
            j->alt[j->nalt++] = lat.node[lat.path[k]].id;
    }
    lattice_free(&lat);
    return NULL;
}

/* Each piece's second-best segmentation when its best is itself (its alternatives, ALT[FIRST[i]..
 * FIRST[i + 1]), piece ids or -1), KEEP[i] 0 when its best segmentation is not itself; on THREADS
 * threads, each a run of the pieces, merged in order. 0, or -1. */
static int alternatives(const struct spm_model *m, const struct pset *p, const struct substrings *ss,
                        uint32_t threads, uint8_t *keep, uint32_t *first, int32_t **alt)
{
    struct alt_job *j = nmt_calloc(threads, sizeof *j);
    pthread_t *tid = nmt_calloc(threads, sizeof *tid);
    int rc = j && tid ? 0 : -1;
    uint32_t started = 0;
    for (uint32_t t = 0; rc == 0 && t < threads; t++)
        j[t] = (struct alt_job){.m = m, .p = p, .ss = ss, .keep = keep, .first = first,
                                .from = (uint32_t)((uint64_t)p->n * t / threads),
                                .to = (uint32_t)((uint64_t)p->n * (t + 1) / threads)};
    for (uint32_t t = 1; rc == 0 && t < threads; t++, started++)
        if (pthread_create(&tid[t], NULL, alt_run, &j[t]) != 0)
            rc = nmt_seterr("cannot start a thread");
    if (rc == 0)
        alt_run(&j[0]);
    for (uint32_t t = 1; t <= started; t++)
        pthread_join(tid[t], NULL);
    size_t total = 0;
    for (uint32_t t = 0; rc == 0 && t < threads; t++)
        rc = j[t].rc < 0 ? nmt_seterr("out of memory") : 0, total += j[t].nalt;
    if (rc == 0 && !(*alt = nmt_malloc((total + 1) * sizeof **alt)))
        rc = -1;
    size_t at = 0;
    for (uint32_t t = 0; rc == 0 && t < threads; t++) {
        for (uint32_t i = j[t].from; i < j[t].to; i++)
            first[i] += (uint32_t)at;
        if (j[t].nalt)
            memcpy(*alt + at, j[t].alt, j[t].nalt * sizeof **alt);
        at += j[t].nalt;
    }
    first[p->n] = (uint32_t)at;
    for (uint32_t t = 0; j && t < threads; t++)
        free(j[t].alt);
    free(j);
    free(tid);
    return rc;
}

/* Prunes P (PruneSentencePieces) to the larger of DESIRED and UNIGRAM_SHRINKING of its size: pieces
 * off every Viterbi path and pieces better segmented otherwise go; of the rest, the pieces with a
 * second-best segmentation are kept by the likelihood lost without them, the largest first. */
static int prune(struct pset *p, const struct spm_model *m, const struct substrings *ss, const int64_t *vfreq,
                 double vsum, size_t desired, uint32_t threads)
{
    uint8_t *keep = nmt_malloc((size_t)p->n + 1);
    uint32_t *first = nmt_malloc(((size_t)p->n + 1) * sizeof *first);
    struct loss *cand = nmt_malloc(((size_t)p->n + 1) * sizeof *cand);
    struct pset q = {0};
    int32_t *alt = NULL;
    size_t ncand = 0;
    int rc = keep && first && cand ? pset_alloc(&q, p->n) : -1;
    rc = rc ? rc : alternatives(m, p, ss, threads, keep, first, &alt);
    double sum = 0;
    for (uint32_t i = 0; i < p->n; i++)
        sum += (double)vfreq[i];
    double logsum = log(sum);
    for (uint32_t i = 0; rc == 0 && i < p->n; i++) {
        double f = (double)vfreq[i];
        if (f == 0 || !keep[i])
            continue;
        if (first[i] == first[i + 1]) {
            q.sid[q.n] = p->sid[i], q.score[q.n++] = p->score[i];
            continue;
        }
        double logsum_alt = log(sum + f * (double)(first[i + 1] - first[i] - 1)), logprob_alt = 0;
        for (uint32_t k = first[i]; k < first[i + 1]; k++)
            logprob_alt += log((alt[k] >= 0 ? (double)vfreq[alt[k]] : 0) + f) - logsum_alt;
        cand[ncand++] = (struct loss){i, f / vsum * (log(f) - logsum - logprob_alt)};
    }
    size_t target = (size_t)(UNIGRAM_SHRINKING * p->n);
    target = target > desired ? target : desired;
    if (rc == 0)
        qsort(cand, ncand, sizeof *cand, loss_cmp);
    for (size_t k = 0; rc == 0 && k < ncand && q.n < target; k++)
        q.sid[q.n] = p->sid[cand[k].i], q.score[q.n++] = p->score[cand[k].i];
    if (rc == 0) {
        pset_free(p);
        *p = q;
    } else {
        pset_free(&q);
    }
    free(keep);
    free(first);
    free(cand);
    free(alt);
    return rc;
}

/* ---- the final pieces ---- */

struct final {
    const char *s;
    uint32_t len;
    float score;
};

static int final_cmp(const void *a, const void *b)
{
    const struct final *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The final pieces (FinalizeSentencePieces): the kept characters CC first (a character the model has
 * lost scored just below its lowest score), then the best-scored pieces up to WANT, all by score.
 * Into OUT (initialised here) and *SCORE. 0, or -1. */
static int finalize(const struct spm_model *m, const struct pset *p, const struct substrings *ss,
                    const struct char_count *cc, size_t nc, uint32_t want, struct strtab *out, float **score)
{
    struct final *f = nmt_malloc(((size_t)p->n + nc + 1) * sizeof *f), *sorted = NULL;
    struct strtab in;
    struct nmt_buf u = {0};
    size_t nf = 0;
    float penalty = 0;
    strtab_init(&in);
    strtab_init(out);
    *score = NULL;
    int rc = f ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < nc && nf < want; i++) {
        u.len = 0;
        int64_t sid = utf8_put(&u, cc[i].cp) < 0 ? -1 : strtab_find(&ss->tab, u.data, u.len);
        int64_t k = strtab_find(&m->text, u.data, u.len);
        if (sid < 0 || strtab_intern(&in, u.data, u.len, NULL) < 0) {
            rc = -1;
            break;
        }
        f[nf] = (struct final){NULL, 0, k >= 0 ? p->score[k] : m->min_score + penalty};
        f[nf].s = strtab_get(&ss->tab, (uint32_t)sid, &f[nf].len);
        nf++;
        if (k < 0)
            penalty += 0.0001f;
    }
    if (rc == 0 && !(sorted = nmt_malloc(((size_t)p->n + 1) * sizeof *sorted)))
        rc = -1;
    for (uint32_t i = 0; rc == 0 && i < p->n; i++) {
        sorted[i].score = p->score[i];
        sorted[i].s = strtab_get(&ss->tab, p->sid[i], &sorted[i].len);
    }
    if (rc == 0)
        qsort(sorted, p->n, sizeof *sorted, final_cmp);
    for (uint32_t i = 0; rc == 0 && i < p->n && nf < want; i++)
        if (strtab_find(&in, sorted[i].s, sorted[i].len) < 0)
            f[nf++] = sorted[i];
    if (rc == 0) {
        qsort(f, nf, sizeof *f, final_cmp);
        rc = (*score = nmt_malloc((nf + 1) * sizeof **score)) ? 0 : -1;
    }
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        (*score)[i] = f[i].score;
        if (strtab_intern(out, f[i].s, f[i].len, NULL) < 0)
            rc = -1;
    }
    free(f);
    free(sorted);
    strtab_free(&in);
    nmt_buf_free(&u);
    return rc;
}

/* ---- learning ---- */

static void say(const struct unigram_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct unigram_opts *o, const char *fmt, ...)
{
    if (!o->progress)
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->progress(line, o->progress_arg);
}

/* The EM rounds: sub-iterations of E and M steps, then pruning, until the pieces are at most 1.1
 * times the size asked for. 0, or -1. */
static int em_rounds(const struct unigram_opts *o, struct spm_model *m, struct pset *p, const struct substrings *ss,
                     const struct strtab *words, const uint64_t *wcount, struct unigram_stats *st)
{
    size_t desired = (size_t)(o->size * 1.1);
    uint64_t total = 0;
    for (uint32_t w = 0; w < words->n; w++)
        total += wcount[w];
    int64_t *acc = nmt_malloc(((size_t)p->n + 1) * sizeof *acc);
    int rc = acc ? 0 : -1;
    for (uint32_t round = 1; rc == 0; round++) {
        for (int it = 0; it < UNIGRAM_SUB_ITERATIONS && rc == 0; it++) {
            double logl;
            if ((rc = model_set(m, ss, p)) < 0 || (rc = run_words(m, words, wcount, o->threads, 0, acc, &logl)) < 0 ||
                (rc = m_step(p, acc)) < 0)
                break;
            st->objective = -logl / (double)total;
            say(o, "round %u, EM %d: %u pieces, objective %.6f", round, it + 1, p->n, st->objective);
        }
        st->rounds = round;
        if (rc < 0 || p->n <= desired)
            break;
        double vsum;
        rc = model_set(m, ss, p);
        rc = rc ? rc : run_words(m, words, wcount, o->threads, 1, acc, &vsum);
        rc = rc ? rc : prune(p, m, ss, acc, (double)total, desired, o->threads);
        if (rc == 0)
            say(o, "round %u, pruned to %u pieces", round, p->n);
    }
    free(acc);
    return rc ? rc : model_set(m, ss, p);
}

int unigram_learn(struct unigram_learner *l, const struct unigram_opts *o, struct strtab *pieces, float **score,
                  struct unigram_stats *stats)
{
    struct unigram_stats st = {.sentences = l->nsent, .skipped_long = l->skipped_long, .skipped_unk = l->skipped_unk};
    struct u64map keep;
    struct strtab words, tokens;
    uint64_t *wcount = NULL, *tcount = NULL;
    struct substrings ss = {0};
    struct pset p = {0};
    struct spm_model m = {0};
    struct char_count *cc = NULL;
    size_t nc = 0;
    u64map_init(&keep);
    strtab_init(&words);
    strtab_init(&tokens);
    strtab_init(&ss.tab);
    strtab_init(pieces);
    *score = NULL;
    int rc = l->nsent ? 0 : nmt_seterr("no sentence to learn from");
    rc = rc ? rc : keep_chars(l, o->char_coverage, &keep, &st);
    if (rc == 0 && keep.n + 3 > o->size)
        rc = nmt_seterr("a vocabulary of %u pieces cannot hold the %zu characters kept and the 3 specials "
                        "(a lower --character-coverage keeps fewer)", o->size, keep.n);
    rc = rc ? rc : split_words(&l->text, &words, &wcount, &tokens, &tcount);
    rc = rc ? rc : make_seeds(&ss, &tokens, tcount, &keep, &p);
    st.nwords = words.n, st.nseed = p.n;
    if (rc == 0)
        say(o, "%llu sentences, %u characters kept of %u, %u distinct words, %u seed pieces",
            (unsigned long long)st.sentences, st.nchar, st.nchar_seen, st.nwords, st.nseed);
    strtab_free(&tokens);
    free(tcount);
    rc = rc ? rc : em_rounds(o, &m, &p, &ss, &words, wcount, &st);
    rc = rc ? rc : sorted_chars(&keep, &cc, &nc);
    rc = rc ? rc : finalize(&m, &p, &ss, cc, nc, o->size - 3, pieces, score);
    if (stats)
        *stats = st;
    model_free(&m);
    pset_free(&p);
    substrings_free(&ss);
    strtab_free(&words);
    free(wcount);
    free(cc);
    u64map_free(&keep);
    if (rc < 0) {
        strtab_free(pieces);
        free(*score);
        *score = NULL;
    }
    return rc;
}
