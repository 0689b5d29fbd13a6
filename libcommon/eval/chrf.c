/* chrf.c: sacreBLEU's chrF and chrF++: a segment's statistics (hypothesis, reference and matched
 * n-gram counts per character and word order, from the reference with the best F-score) and the
 * corpus score. Characters get segment-wide ids; character n-grams are counted as packed numbers
 * when their ids fit in 64 bits. */
#include "eval/metric.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"

static int is_ascii_punct(int32_t c)
{
    return c < 0x80 && c > 0x20 && c != 0x7F && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
}

static int chrf_side(bleu_metric *m, struct metric_side *sd, const char *s, size_t len)
{
    bleu_cps *t;
    if (metric_side_text(sd, s, len, m->cfg.chrf_lowercase, &t) < 0)
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
        if (NMT_GROW2(sd->wst, sd->wlen, sd->w_cap, need) < 0)
            return -1;
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

double chrf_fscore(const bleu_config *cfg, const double *st)
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

/* Counts the n-grams (orders 1..NMAX) of SEQ[0..LEN) into T (ADD: as reference, counter a) or
 * matches hypothesis n-grams against it (counter d), adding matches to MATCH[n-1]. */
static void chrf_count(struct ngram_tab *t, const int32_t *seq, size_t len, int nmax, int add, double *match)
{
    for (size_t i = 0; i < len; i++) {
        uint64_t h = NGRAM_SEQ_SEED;
        for (int n = 1; n <= nmax && i + (size_t)n <= len; n++) {
            h = ngram_mix(h, seq[i + (size_t)n - 1]);
            struct ngram_ent *e = ngram_get_str(t, ngram_final(h, (uint32_t)n), seq + i, (uint32_t)n * sizeof *seq, add);
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
    struct ngram_ent *e = ngram_get(&m->cbig, (uint64_t)cp, 1);
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
    return ngram_reset(&m->cbig, maxchars);
}

static int ensure_cids(struct metric_side *sd, size_t n)
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
static int chrf_side_ids(bleu_metric *m, struct metric_side *sd, const char *str, size_t len)
{
    if (ensure_cids(sd, len) < 0)
        return -1;
    const unsigned char *s = (const unsigned char *)str;
    uint32_t drop = m->cfg.whitespace ? 0 : 0x80000000u;
    int32_t *o = sd->cids;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        if (s[i] < 0x80)
            cp = s[i++];
        else
            i += (size_t)utf8_next(s + i, len - i, &cp);
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
static int chrf_match_packed(bleu_metric *m, const struct metric_side *h, const struct metric_side *r, int C, int bits,
                             double *match)
{
    struct ngram_tab *t = &m->grams;
    const int32_t *id = r->cids;
    size_t rl = r->ncids;
    if (ngram_reset(t, rl * (size_t)C) < 0) /* distinct n-grams: at most rl * C */
        return -1;
    for (size_t i = 0; i < rl; i++) {
        uint64_t key = 0;
        size_t top = i + (size_t)C <= rl ? i + (size_t)C : rl;
        for (size_t j = i; j < top; j++) {
            key = (key << bits) | (uint64_t)id[j];
            ngram_get(t, key, 1)->a++;
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
            struct ngram_ent *e = ngram_get(t, key, 0);
            if (!e)
                break; /* a longer n-gram with this prefix cannot be in the reference */
            hits[j - i] += ++e->d <= e->a;
        }
    }
    for (int n = 0; n < C; n++)
        match[n] += (double)hits[n];
    return 0;
}

int chrf_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
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
        struct metric_side *sd = &m->sides[r];
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
    int bits = ngram_bit_width((uint32_t)m->nchar_ids), packed = bits * C <= 64;
    struct metric_side *h = &m->sides[0];
    for (int r = 1; r <= nrefs; r++) {
        struct metric_side *sd = &m->sides[r];
        if (W > 0) { /* word ids shared by this reference and the hypothesis */
            if (ngram_reset(&m->intern, h->nw + sd->nw) < 0)
                return -1;
            m->next_id = 0;
            if (metric_side_ids(&m->intern, &m->next_id, h, h->wbuf, h->wst, h->wlen, h->nw) < 0
                || metric_side_ids(&m->intern, &m->next_id, sd, sd->wbuf, sd->wst, sd->wlen, sd->nw) < 0)
                return -1;
        }
        if ((!packed && ngram_reset(&m->grams, sd->ncids * (size_t)C) < 0)
            || (W > 0 && ngram_reset(&m->words, sd->nw * (size_t)W) < 0))
            return -1;
        memset(match, 0, sizeof match);
        if (packed) {
            if (chrf_match_packed(m, h, sd, C, bits, match) < 0)
                return -1;
        } else {
            chrf_count(&m->grams, sd->cids, sd->ncids, C, 1, NULL);
            chrf_count(&m->grams, h->cids, h->ncids, C, 0, match);
        }
        if (W > 0) {
            chrf_count(&m->words, sd->ids, sd->nw, W, 1, NULL);
            chrf_count(&m->words, h->ids, h->nw, W, 0, match + C);
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
        double f = chrf_fscore(&m->cfg, stats);
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

void chrf_score_stats(const bleu_config *c, const double *sum, bleu_score *o)
{
    memset(o, 0, sizeof *o);
    o->mean = o->ci = -1;
    int k = snprintf(o->name, sizeof o->name, "chrF%d", c->beta);
    for (int i = 0; i < c->word_order && k + 1 < (int)sizeof o->name; i++)
        o->name[k++] = '+';
    o->name[k] = 0;
    o->score = chrf_fscore(c, sum);
}
