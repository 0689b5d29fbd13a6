/* metric.h: the metric object behind bleu.h, shared by metric.c (creation, dispatch, sums),
 * bleu.c, chrf.c and ter.c (one segment's statistics and the score of each metric); internal
 * to eval/. */
#ifndef NMT_METRIC_H
#define NMT_METRIC_H

#include <stddef.h>
#include <stdint.h>

#include "eval/bleu.h"
#include "eval/ngram.h"
#include "eval/pystr.h"
#include "eval/side.h"
#include "eval/tokenize.h"

/* TER's edit-distance matrix and shift scratch (ter.c). */
struct ter_work {
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

struct bleu_metric {
    bleu_config cfg;
    int nstats;
    struct metric_side *sides; /* [0] hypothesis, [1..] references */
    int nsides;
    size_t *slen;   /* BLEU: token count per side, (nsides) */
    int32_t **sids; /* BLEU: token ids per side, (nsides) */
    bleu_tokws tw;
    struct ngram_tab intern; /* token text -> segment-wide id (strings) */
    int32_t next_id;
    struct ngram_tab grams;  /* BLEU n-grams, chrF character n-grams (numbers or strings) */
    struct ngram_tab words;  /* chrF++ word n-grams (strings) */
    struct ngram_tab cbig;   /* chrF: ids of code points >= CMAP_N (numbers) */
    uint64_t *cmap;          /* chrF: code point < CMAP_N -> stamp << 32 | id, (CMAP_N) */
    uint32_t cstamp;
    int32_t nchar_ids;
    struct ter_work ter;
};

/* The statistics row of one segment of each metric (sides already allocated): 0 or -1 with the
 * error set. */
int bleu_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                      const size_t *ref_lens, int nrefs, double *out);
int chrf_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                      const size_t *ref_lens, int nrefs, double *out);
int ter_segment(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                     const size_t *ref_lens, int nrefs, double *out);

/* The score of summed statistics ST of each metric into O. */
void bleu_score_stats(const bleu_config *cfg, const double *st, bleu_score *o);
void chrf_score_stats(const bleu_config *cfg, const double *st, bleu_score *o);
void ter_score_stats(const double *st, bleu_score *o);

/* Returns chrF's F-score of the statistics ST. */
double chrf_fscore(const bleu_config *cfg, const double *st);
/* Frees TER's workspace. */
void ter_work_free(struct ter_work *w);

#endif
