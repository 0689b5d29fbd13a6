/* side.h: the workspace of one side of a segment (the hypothesis or one reference), shared by the
 * metrics (bleu.c, chrf.c, ter.c) and the metric object (metric.c); internal to eval/. */
#ifndef NMT_SIDE_H
#define NMT_SIDE_H

#include <stddef.h>
#include <stdint.h>

#include "eval/ngram.h"
#include "eval/pystr.h"
#include "eval/tokenize.h"

/* The workspace of one side of a segment (the hypothesis or one reference). */
struct metric_side {
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
};

/* Frees the buffers of SD (not SD itself). */
void metric_side_free(struct metric_side *sd);
/* Decodes S into SD->raw and lowercases it into SD->low when LOWER; *OUT is the one to use.
 * 0 or -1 with the error set. */
int metric_side_text(struct metric_side *sd, const char *s, size_t len, int lower, bleu_cps **out);
/* Gives each of the N tokens of SD (spans ST/LN into BUF) a segment-wide id from INTERN (new ids
 * from *NEXT_ID up) into SD->ids. 0 or -1 with the error set. */
int metric_side_ids(struct ngram_tab *intern, int32_t *next_id, struct metric_side *sd, const int32_t *buf,
                    const uint32_t *st, const uint32_t *ln, size_t n);
/* Makes room for N ids in SD->ids; 0 or -1 with the error set. */
int metric_side_reserve(struct metric_side *sd, size_t n);

#endif
