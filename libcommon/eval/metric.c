/* metric.c: the metric object of bleu.h: options, creation, the per-side workspaces shared by the
 * metrics, and the dispatch of segments and scores to bleu.c, chrf.c and ter.c. */
#include "eval/metric.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static void side_free(bleu_side *s)
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
    ngram_free(&m->intern);
    ngram_free(&m->grams);
    ngram_free(&m->words);
    ngram_free(&m->cbig);
    free(m->cmap);
    bleu_ter_work_free(&m->ter);
    free(m);
}

int bleu_metric_nstats(const bleu_metric *m) { return m->nstats; }

static int ensure_sides(bleu_metric *m, int n)
{
    if (n <= m->nsides)
        return 0;
    bleu_side *s = nmt_realloc(m->sides, (size_t)n * sizeof *s);
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

int bleu_side_text(bleu_side *sd, const char *s, size_t len, int lower, bleu_cps **out)
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

int bleu_side_ids_reserve(bleu_side *sd, size_t n)
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

int bleu_side_ids(bleu_metric *m, bleu_side *sd, const int32_t *buf, const uint32_t *st, const uint32_t *ln,
                  size_t n)
{
    if (bleu_side_ids_reserve(sd, n) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const int32_t *w = buf + st[i];
        struct ngram_ent *e = ngram_get_str(&m->intern, ngram_seq_hash(w, ln[i]), w, ln[i] * sizeof *w, 1);
        if (e->c == 0) {
            e->c = 1;
            e->a = m->next_id++;
        }
        sd->ids[i] = e->a;
    }
    return 0;
}

int bleu_metric_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out)
{
    if (nrefs < 1)
        return nmt_seterr("no reference given");
    if (ensure_sides(m, nrefs + 1) < 0)
        return -1;
    switch (m->cfg.kind) {
    case BLEU_METRIC_BLEU:
        return bleu_segment_bleu(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    case BLEU_METRIC_CHRF:
        return bleu_segment_chrf(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    default:
        return bleu_segment_ter(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
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
    switch (m->cfg.kind) {
    case BLEU_METRIC_BLEU:
        bleu_score_bleu(&m->cfg, sum, o);
        break;
    case BLEU_METRIC_CHRF:
        bleu_score_chrf(&m->cfg, sum, o);
        break;
    default:
        bleu_score_ter(sum, o);
    }
}
