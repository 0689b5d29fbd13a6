/* valid_bleu.c: BLEU of translations of a validation batch stream (see valid_bleu.h). */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "eval/bleu.h"
#include "io/records.h"
#include "nn/infer.h"
#include "nn/search.h"
#include "train/valid_bleu.h"
#include "text/tokenizer.h"

/* What one validation holds. */
struct vb_run {
    struct infer *in;
    struct tokenizer tok;
    bleu_metric *metric;
    struct nmt_buf ref;                /* the reference of the sentence being scored */
    double sum[3 * BLEU_MAX_ORDER + 2], row[3 * BLEU_MAX_ORDER + 2];
    struct search_opts so;
};

/* Ids of row B of a batch side (COLS columns, LEN[b] ids ending with EOS) without the EOS. */
static const uint32_t *row_ids(const uint32_t *side, uint32_t cols, uint32_t b, const uint32_t *len, int *n)
{
    const uint32_t *r = side + (size_t)b * cols;
    *n = (int)len[b];
    if (*n > 0 && r[*n - 1] == NMT_EOS)
        (*n)--;
    return r;
}

/* Adds the statistics of translation HYP of row B of BR to the corpus sum. 0 or -1. */
static int score_row(struct vb_run *r, const struct batch_record *br, uint32_t b, const struct search_result *hyp)
{
    int tn;
    const uint32_t *t = row_ids(br->tgt, br->T, b, br->tgt_len, &tn);
    if (tokenizer_decode(&r->tok, t, (size_t)tn) < 0)
        return -1;
    r->ref.len = 0;
    if (nmt_buf_append(&r->ref, r->tok.text.data, r->tok.text.len) < 0 || nmt_buf_append(&r->ref, "", 1) < 0)
        return -1;
    const struct search_hyp *h = hyp->nhyp ? &hyp->hyp[0] : NULL;
    if (tokenizer_decode(&r->tok, h ? h->ids : NULL, h ? h->n : 0) < 0)
        return -1;
    const char *refs[1] = {(const char *)r->ref.data};
    size_t ref_len[1] = {r->ref.len - 1};
    if (bleu_metric_segment(r->metric, r->tok.text.len ? (const char *)r->tok.text.data : "", r->tok.text.len, refs,
                            ref_len, 1, r->row) < 0)
        return -1;
    for (int i = 0; i < bleu_metric_nstats(r->metric); i++)
        r->sum[i] += r->row[i];
    return 0;
}

/* Translates the batch in BR and scores it. 0 or -1. */
static int score_batch(struct vb_run *r, const struct batch_record *br)
{
    int B = (int)br->B, rc = 0;
    const uint32_t **src = malloc((size_t)B * sizeof *src);
    int *len = malloc((size_t)B * sizeof *len);
    struct search_result *res = calloc((size_t)B, sizeof *res);
    if (!src || !len || !res)
        rc = nmt_seterr("out of memory");
    for (int b = 0; rc == 0 && b < B; b++)
        src[b] = row_ids(br->src, br->S, (uint32_t)b, br->src_len, &len[b]);
    if (rc == 0 && (search_reserve(&r->in, 1, &r->so, B, len, NULL) < 0 || search_batch(&r->in, 1, &r->so, B, src, len, res) < 0))
        rc = -1;
    for (int b = 0; rc == 0 && b < B; b++)
        rc = score_row(r, br, (uint32_t)b, &res[b]);
    for (int b = 0; res && b < B; b++)
        search_result_free(&res[b]);
    free(res);
    free(len);
    free(src);
    return rc;
}

int valid_bleu(struct backend *be, struct model *m, const struct vocab *v, struct batch_file *valid,
               struct batch_record *br, int beam, double *bleu)
{
    struct vb_run r = {.so = SEARCH_OPTS_DEFAULT};
    r.so.beam = beam;
    r.so.ranks_only = 1; /* BLEU reads the tokens */
    bleu_config cfg;
    bleu_config_init(&cfg, BLEU_METRIC_BLEU);
    int rc = tokenizer_init(&r.tok, v, 0);
    if (rc == 0 && (!(r.metric = bleu_metric_new(&cfg)) || !(r.in = infer_new(be, m, INFER_INVARIANT, NMT_DTYPE_F32))))
        rc = -1;
    for (uint64_t i = 0; rc == 0; i++) {
        int got = batch_file_get(valid, 0, i, 0, 0, br);
        if (got == REC_END)
            break;
        if (got < 0 || score_batch(&r, br) < 0)
            rc = nmt_seterr("%s: batch %llu: %s", valid->name, (unsigned long long)i, nmt_errmsg());
    }
    if (rc == 0) {
        bleu_score s;
        bleu_metric_score(r.metric, r.sum, &s);
        *bleu = s.score;
    }
    infer_free(r.in);
    bleu_metric_free(r.metric);
    tokenizer_free(&r.tok);
    nmt_buf_free(&r.ref);
    return rc;
}
