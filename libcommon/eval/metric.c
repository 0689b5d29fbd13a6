/* metric.c: the metric object of bleu.h: options, creation, the sides of a segment (side.c), and
 * the dispatch of segments and scores to bleu.c, chrf.c and ter.c. */
#include "eval/metric.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

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
        metric_side_free(&m->sides[i]);
    free(m->sides);
    free(m->slen);
    free(m->sids);
    bleu_tokws_free(&m->tw);
    ngram_free(&m->intern);
    ngram_free(&m->grams);
    ngram_free(&m->words);
    ngram_free(&m->cbig);
    free(m->cmap);
    ter_work_free(&m->ter);
    free(m);
}

int bleu_metric_nstats(const bleu_metric *m) { return m->nstats; }

static int ensure_sides(bleu_metric *m, int n)
{
    if (n <= m->nsides)
        return 0;
    struct metric_side *s = nmt_realloc(m->sides, (size_t)n * sizeof *s);
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

int bleu_metric_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                        const size_t *ref_lens, int nrefs, double *out)
{
    if (nrefs < 1)
        return nmt_seterr("no reference given");
    if (ensure_sides(m, nrefs + 1) < 0)
        return -1;
    switch (m->cfg.kind) {
    case BLEU_METRIC_BLEU:
        return bleu_segment(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    case BLEU_METRIC_CHRF:
        return chrf_segment(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
    default:
        return ter_segment(m, hyp, hyp_len, refs, ref_lens, nrefs, out);
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
        bleu_score_stats(&m->cfg, sum, o);
        break;
    case BLEU_METRIC_CHRF:
        chrf_score_stats(&m->cfg, sum, o);
        break;
    default:
        ter_score_stats(sum, o);
    }
}
