/* side.c: the workspace of one side of a segment: its text, decoded and lowercased, and its
 * tokens' segment-wide ids. */
#include "eval/side.h"

#include <stdlib.h>

#include "base/util.h"

void metric_side_free(struct metric_side *s)
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

int metric_side_text(struct metric_side *sd, const char *s, size_t len, int lower, bleu_cps **out)
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

int metric_side_reserve(struct metric_side *sd, size_t n)
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

int metric_side_ids(struct ngram_tab *intern, int32_t *next_id, struct metric_side *sd, const int32_t *buf,
                    const uint32_t *st, const uint32_t *ln, size_t n)
{
    if (metric_side_reserve(sd, n) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const int32_t *w = buf + st[i];
        struct ngram_ent *e = ngram_get_str(intern, ngram_seq_hash(w, ln[i]), w, ln[i] * sizeof *w, 1);
        if (e->c == 0) {
            e->c = 1;
            e->a = (*next_id)++;
        }
        sd->ids[i] = e->a;
    }
    return 0;
}
