/* search.c: greedy and beam search with GNMT length penalty, and forced decoding (see search.h). */
#include "search.h"
#include "records.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int search_max_len(const struct search_opts *o, int srclen, int model_max_len)
{
    double v = floor(o->len_a * (double)(srclen + 1) + o->len_b);
    int n = v < 1 ? 1 : v > (double)model_max_len ? model_max_len : (int)v;
    return n;
}

void search_result_free(struct search_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nhyp; i++)
        free(r->hyp[i].ids);
    free(r->hyp);
    r->hyp = NULL;
    r->nhyp = 0;
}

struct cand {
    double s;                  /* summed log-probability */
    int row, seq;              /* parent row, order of generation (tie break) */
    int32_t tok;
};

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->seq - y->seq;
}

struct fin {
    double s, lp;              /* normalised score, log-probability */
    int seq;
    uint32_t n;
    uint32_t *ids;
};

static int fin_cmp(const void *a, const void *b)
{
    const struct fin *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->seq - y->seq;
}

int search_batch(struct infer *in, const struct search_opts *o, int B, const uint32_t *const *src, const int *len,
                 struct search_result *out)
{
    const int K = o->beam, model_max = infer_config(in)->max_len;
    int V = infer_config(in)->vocab;
    int k2 = 2 * K < V ? 2 * K : V;
    int tmax = 1, rc = -1;
    for (int b = 0; b < B; b++) {
        out[b].nhyp = 0;
        out[b].hyp = NULL;
    }
    int *ml = malloc((size_t)B * sizeof *ml);
    if (!ml)
        return nmt_seterr("out of memory");
    for (int b = 0; b < B; b++) {
        ml[b] = search_max_len(o, len[b], model_max);
        if (ml[b] > tmax)
            tmax = ml[b];
    }
    size_t R0 = (size_t)B * (size_t)K, T = (size_t)tmax;
    int32_t *tok = malloc(R0 * sizeof *tok), *idx = malloc(R0 * (size_t)k2 * sizeof *idx);
    float *vals = malloc(R0 * (size_t)k2 * sizeof *vals);
    double *score = malloc(R0 * sizeof *score), *nscore = malloc(R0 * sizeof *nscore);
    uint32_t *hist = malloc(R0 * T * sizeof *hist), *nhist = malloc(R0 * T * sizeof *nhist);
    int *orig = malloc((size_t)B * sizeof *orig), *keep = malloc((size_t)B * sizeof *keep);
    int *parent = malloc(R0 * sizeof *parent);
    int32_t *ntok = malloc(R0 * sizeof *ntok);
    struct cand *cd = malloc((size_t)K * (size_t)k2 * sizeof *cd);
    struct fin *fin = calloc((size_t)B * (size_t)K, sizeof *fin);
    int *nfin = calloc((size_t)B, sizeof *nfin);
    if (!tok || !idx || !vals || !score || !nscore || !hist || !nhist || !orig || !keep || !parent || !ntok || !cd ||
        !fin || !nfin) {
        nmt_seterr("out of memory");
        goto out;
    }
    if (infer_encode(in, B, src, len, K, tmax) < 0)
        goto out;
    for (int b = 0; b < B; b++)
        orig[b] = b;
    for (size_t r = 0; r < R0; r++) {
        tok[r] = NMT_BOS;
        score[r] = r % (size_t)K ? -INFINITY : 0; /* at step 0 the K rows are identical: keep one */
    }
    int ns = B, seq = 0;
    for (int t = 0; ns > 0; t++) {
        int R = ns * K;
        if (infer_step(in, tok, k2, vals, idx, NULL, NULL) < 0)
            goto out;
        int nk = 0;
        for (int s = 0; s < ns; s++) {
            int b = orig[s], forced = t >= ml[b] - 1, nc = 0;
            for (int j = 0; j < K; j++) {
                int r = s * K + j;
                if (score[r] == -INFINITY)
                    continue;
                if (forced) {
                    cd[nc] = (struct cand){score[r], r, nc, NMT_EOS};
                    nc++;
                    continue;
                }
                for (int q = 0; q < k2; q++) {
                    float v = vals[(size_t)r * (size_t)k2 + (size_t)q];
                    cd[nc] = (struct cand){score[r] + (double)v, r, nc, idx[(size_t)r * (size_t)k2 + (size_t)q]};
                    nc++;
                }
            }
            qsort(cd, (size_t)nc, sizeof *cd, cand_cmp);
            if (nc > 2 * K)
                nc = 2 * K;
            double lpen = pow((5.0 + (double)(t + 1)) / 6.0, o->alpha);
            for (int j = 0; j < nc && j < K; j++) {
                if (cd[j].tok != NMT_EOS || nfin[b] >= K)
                    continue;
                struct fin *f = &fin[(size_t)b * (size_t)K + (size_t)nfin[b]];
                f->lp = cd[j].s;
                f->s = cd[j].s / lpen;
                f->seq = seq++;
                f->n = (uint32_t)t;
                f->ids = malloc((t ? (size_t)t : 1) * sizeof *f->ids);
                if (!f->ids) {
                    nmt_seterr("out of memory");
                    goto out;
                }
                if (t)
                    memcpy(f->ids, hist + (size_t)cd[j].row * T, (size_t)t * sizeof *f->ids);
                nfin[b]++;
            }
            /* the K best non-EOS extensions continue */
            int nr = 0;
            int base = nk * K;
            for (int j = 0; j < nc && nr < K; j++) {
                if (cd[j].tok == NMT_EOS)
                    continue;
                parent[base + nr] = cd[j].row;
                ntok[base + nr] = cd[j].tok;
                nscore[base + nr] = cd[j].s;
                nr++;
            }
            int alive = nr > 0 && !forced && nfin[b] < K;
            if (!alive)
                continue;
            for (; nr < K; nr++) { /* fewer candidates than K: dead rows */
                parent[base + nr] = s * K;
                ntok[base + nr] = NMT_EOS;
                nscore[base + nr] = -INFINITY;
            }
            keep[nk++] = s;
        }
        /* new rows: histories, tokens and scores */
        for (int i = 0; i < nk * K; i++) {
            int r = parent[i];
            if (t)
                memcpy(nhist + (size_t)i * T, hist + (size_t)r * T, (size_t)t * sizeof *hist);
            nhist[(size_t)i * T + (size_t)t] = (uint32_t)ntok[i];
            tok[i] = ntok[i];
            score[i] = nscore[i];
        }
        uint32_t *th = hist;
        hist = nhist;
        nhist = th;
        for (int s = 0; s < nk; s++)
            orig[s] = orig[keep[s]];
        (void)R;
        if (nk && infer_reorder(in, nk, keep, parent) < 0)
            goto out;
        ns = nk;
    }
    for (int b = 0; b < B; b++) {
        struct fin *f = &fin[(size_t)b * (size_t)K];
        qsort(f, (size_t)nfin[b], sizeof *f, fin_cmp);
        int n = nfin[b] < o->nbest ? nfin[b] : o->nbest;
        out[b].hyp = calloc((size_t)(n ? n : 1), sizeof *out[b].hyp);
        if (!out[b].hyp) {
            nmt_seterr("out of memory");
            goto out;
        }
        for (int i = 0; i < n; i++) {
            out[b].hyp[i] = (struct search_hyp){(float)f[i].s, f[i].lp, f[i].n, f[i].ids};
            f[i].ids = NULL;
        }
        out[b].nhyp = n;
    }
    rc = 0;
out:
    if (fin)
        for (size_t i = 0; i < (size_t)B * (size_t)K; i++)
            free(fin[i].ids);
    if (rc < 0)
        for (int b = 0; b < B; b++)
            search_result_free(&out[b]);
    free(ml);
    free(tok);
    free(idx);
    free(vals);
    free(score);
    free(nscore);
    free(hist);
    free(nhist);
    free(orig);
    free(keep);
    free(parent);
    free(ntok);
    free(cd);
    free(fin);
    free(nfin);
    return rc;
}

int search_reserve(struct infer *in, const struct search_opts *o, int B, const int *len, const int *tlen)
{
    int model_max = infer_config(in)->max_len, S = 1, tmax = 1;
    for (int b = 0; b < B; b++) {
        if (len[b] + 1 > S)
            S = len[b] + 1;
        int t = tlen ? tlen[b] + 1 : search_max_len(o, len[b], model_max);
        if (t > tmax)
            tmax = t;
    }
    return B > 0 ? infer_reserve(in, B, S, tlen ? 1 : o->beam, tmax) : 0;
}

int search_score(struct infer *in, int B, const uint32_t *const *src, const int *len, const uint32_t *const *tgt,
                 const int *tlen, double *lp)
{
    int tmax = 1, rc = -1, model_max = infer_config(in)->max_len;
    for (int b = 0; b < B; b++) {
        if (tlen[b] + 1 > model_max)
            return nmt_seterr("target of %d tokens exceeds the model's maximum length %d", tlen[b] + 1, model_max);
        if (tlen[b] + 1 > tmax)
            tmax = tlen[b] + 1;
        lp[b] = 0;
    }
    int32_t *tok = malloc((size_t)B * sizeof *tok), *tg = malloc((size_t)B * sizeof *tg);
    float *l = malloc((size_t)B * sizeof *l);
    int *orig = malloc((size_t)B * sizeof *orig), *keep = malloc((size_t)B * sizeof *keep);
    if (!tok || !tg || !l || !orig || !keep) {
        nmt_seterr("out of memory");
        goto out;
    }
    if (infer_encode(in, B, src, len, 1, tmax) < 0)
        goto out;
    int ns = B;
    for (int b = 0; b < B; b++)
        orig[b] = b;
    for (int t = 0; ns > 0; t++) {
        for (int s = 0; s < ns; s++) {
            int b = orig[s];
            tok[s] = t == 0 ? NMT_BOS : (int32_t)tgt[b][t - 1];
            tg[s] = t < tlen[b] ? (int32_t)tgt[b][t] : NMT_EOS;
        }
        if (infer_step(in, tok, 0, NULL, NULL, tg, l) < 0)
            goto out;
        int nk = 0;
        for (int s = 0; s < ns; s++) {
            lp[orig[s]] += (double)l[s];
            if (t < tlen[orig[s]])
                keep[nk++] = s;
        }
        for (int s = 0; s < nk; s++)
            orig[s] = orig[keep[s]];
        if (nk && infer_reorder(in, nk, keep, keep) < 0)
            goto out;
        ns = nk;
    }
    rc = 0;
out:
    free(tok);
    free(tg);
    free(l);
    free(orig);
    free(keep);
    return rc;
}
