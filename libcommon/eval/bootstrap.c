/* bootstrap.c: sacreBLEU's bootstrap resampling (_bootstrap_resample, estimate_ci) and paired
 * bootstrap test (_paired_bs_test) over statistics rows, drawing lines with base/rng's
 * xoshiro256** (rng_scaled), so a seed gives the same samples everywhere. */
#include "eval/metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"

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
    struct rng r;
    rng_seed(&r, seed);
    for (int s = 0; s < nsamples; s++) {
        for (size_t i = 0; i < nrows; i++)
            idx[i] = (size_t)rng_scaled(&r, nrows); /* floor(next * nrows / 2^64) */
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
