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
#include "eval/tokenize.h"

/* The workspace of one side of a segment (the hypothesis or one reference). */
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
} bleu_side;

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
    bleu_side *sides; /* [0] hypothesis, [1..] references */
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

/* Decodes S into SD->raw and lowercases it into SD->low when LOWER; *OUT is the one to use.
 * 0 or -1 with the error set. */
int bleu_side_text(bleu_side *sd, const char *s, size_t len, int lower, bleu_cps **out);
/* Gives each of the N tokens of SD (spans ST/LN into BUF) a segment-wide id from m->intern (new
 * ids from m->next_id up) into SD->ids. 0 or -1 with the error set. */
int bleu_side_ids(bleu_metric *m, bleu_side *sd, const int32_t *buf, const uint32_t *st, const uint32_t *ln,
                  size_t n);
/* Makes room for N ids in SD->ids; 0 or -1 with the error set. */
int bleu_side_ids_reserve(bleu_side *sd, size_t n);

/* The statistics row of one segment of each metric (sides already allocated): 0 or -1 with the
 * error set. */
int bleu_segment_bleu(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                      const size_t *ref_lens, int nrefs, double *out);
int bleu_segment_chrf(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                      const size_t *ref_lens, int nrefs, double *out);
int bleu_segment_ter(bleu_metric *m, const char *hyp, size_t hyp_len, const char *const *refs,
                     const size_t *ref_lens, int nrefs, double *out);

/* The score of summed statistics ST of each metric into O. */
void bleu_score_bleu(const bleu_config *cfg, const double *st, bleu_score *o);
void bleu_score_chrf(const bleu_config *cfg, const double *st, bleu_score *o);
void bleu_score_ter(const double *st, bleu_score *o);

/* Returns chrF's F-score of the statistics ST. */
double bleu_chrf_f(const bleu_config *cfg, const double *st);
/* Frees TER's workspace. */
void bleu_ter_work_free(struct ter_work *w);

#endif
