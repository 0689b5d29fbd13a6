/* search.c: greedy and beam search with GNMT length penalty, and forced decoding (see search.h). */
#include "nn/search.h"
#include "io/records.h"
#include "base/util.h"

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
    for (int i = 0; i < r->nhyp; i++) {
        free(r->hyp[i].ids);
        free(r->hyp[i].lps);
        free(r->hyp[i].att);
    }
    free(r->hyp);
    r->hyp = NULL;
    r->nhyp = 0;
}

int search_result_pack(struct nmt_buf *b, const struct search_result *r)
{
    if (nmt_buf_put32(b, (uint32_t)r->nhyp) < 0)
        return -1;
    for (int i = 0; i < r->nhyp; i++) {
        const struct search_hyp *h = &r->hyp[i];
        if (nmt_buf_append(b, &h->score, sizeof h->score) < 0 || nmt_buf_append(b, &h->logprob, sizeof h->logprob) < 0 ||
            nmt_buf_put32(b, h->n) < 0 || nmt_buf_append(b, h->ids, (size_t)h->n * sizeof *h->ids) < 0 ||
            nmt_buf_append(b, h->lps, ((size_t)h->n + 1) * sizeof *h->lps) < 0 || nmt_buf_put32(b, h->sn) < 0 ||
            nmt_buf_append(b, h->att, ((size_t)h->n + 1) * h->sn * sizeof *h->att) < 0)
            return -1;
    }
    return 0;
}

/* Copies N bytes at *OFF of P (LEN bytes) to DST, advancing *OFF; 0, or -1 when they are not there. */
static int take(void *dst, const unsigned char *p, size_t len, size_t *off, size_t n)
{
    if (n > len - *off)
        return nmt_seterr("packed search result truncated at byte %zu", *off);
    memcpy(dst, p + *off, n);
    *off += n;
    return 0;
}

int search_result_unpack(const unsigned char *p, size_t n, size_t *off, struct search_result *r)
{
    uint32_t nh = 0;
    memset(r, 0, sizeof *r);
    if (take(&nh, p, n, off, sizeof nh) < 0)
        return -1;
    if (nh > (n - *off) / 16 + 1)
        return nmt_seterr("packed search result: %u hypotheses in %zu bytes", nh, n - *off);
    if (nh && !(r->hyp = nmt_calloc(nh, sizeof *r->hyp)))
        return -1;
    for (uint32_t i = 0; i < nh; i++) {
        struct search_hyp *h = &r->hyp[i];
        r->nhyp = (int)i + 1; /* freed by search_result_free from here on, whatever fails */
        if (take(&h->score, p, n, off, sizeof h->score) < 0 || take(&h->logprob, p, n, off, sizeof h->logprob) < 0 ||
            take(&h->n, p, n, off, sizeof h->n) < 0)
            return -1;
        if (h->n > (n - *off) / (sizeof *h->ids + sizeof *h->lps))
            return nmt_seterr("packed search result: %u ids in %zu bytes", h->n, n - *off);
        if (!(h->ids = nmt_malloc((size_t)h->n * sizeof *h->ids + 1)) ||
            take(h->ids, p, n, off, (size_t)h->n * sizeof *h->ids) < 0 ||
            !(h->lps = nmt_malloc(((size_t)h->n + 1) * sizeof *h->lps)) ||
            take(h->lps, p, n, off, ((size_t)h->n + 1) * sizeof *h->lps) < 0 ||
            take(&h->sn, p, n, off, sizeof h->sn) < 0)
            return -1;
        if (h->sn && h->sn > (n - *off) / sizeof *h->att / ((size_t)h->n + 1))
            return nmt_seterr("packed search result: %u attention columns in %zu bytes", h->sn, n - *off);
        size_t na = ((size_t)h->n + 1) * h->sn;
        if (h->sn && (!(h->att = nmt_malloc(na * sizeof *h->att)) || take(h->att, p, n, off, na * sizeof *h->att) < 0))
            return -1;
    }
    return 0;
}

struct cand {
    double s;                  /* summed log-probability */
    int row, seq;              /* parent row, order of generation (tie break) */
    int32_t tok;
    float lp;                  /* the token's log-probability */
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
    float *lps;                /* (n + 1) each token's log-probability */
    float *att;                /* (n + 1, S) each token's attention (search_opts.attention), or NULL */
};

static int fin_cmp(const void *a, const void *b)
{
    const struct fin *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->seq - y->seq;
}

double search_length_penalty(double alpha, int n)
{
    return pow((5.0 + (double)n) / 6.0, alpha);
}

int search_models_check(struct infer *const *in, int nin, int *max_len)
{
    if (nin < 1)
        return nmt_seterr("no model to search with");
    *max_len = infer_config(in[0])->max_len;
    for (int m = 1; m < nin; m++) {
        if (infer_config(in[m])->vocab != infer_config(in[0])->vocab)
            return nmt_seterr("ensemble: model %d has a vocabulary of %d pieces, model 1 of %d", m + 1,
                              infer_config(in[m])->vocab, infer_config(in[0])->vocab);
        if (infer_config(in[m])->max_len < *max_len)
            *max_len = infer_config(in[m])->max_len;
    }
    return 0;
}

/* Scratch of an ensemble's steps (ensemble_step) for up to R0 rows, NIN models, TOPK extensions
 * taken from each member's MTOPK best. */
struct ens {
    int nin, topk, mtopk, V;
    size_t R0;
    float *vals;               /* (nin, R0, mtopk) each member's best log-probabilities */
    int32_t *idx;              /* (nin, R0, mtopk) and their ids */
    double *lse;               /* (nin, R0) each member's log-sum-exp of the logits */
    int32_t *cid;              /* (R0, nin * mtopk) candidates: the union of the members' best ids,
                                * increasing, padded with the first */
    int32_t *flat;             /* (R0, nin * mtopk) infer_logits_at's scratch */
    float *at;                 /* (R0, nin * mtopk) one member's logits at the candidates */
    double *cp;                /* (R0, nin * mtopk) the ensemble's probability of each candidate */
    int *nc;                   /* (R0) candidates per row */
    int *fb;                   /* (R0) rows whose candidates may miss a better token */
    float *logits;             /* (R0, V) one member's logits, for fallback rows */
    double *full;              /* (full_cap, V) the ensemble's distribution of fallback rows */
    double *best;              /* (topk) */
    size_t full_cap;
};

static void ens_free(struct ens *e)
{
    free(e->vals);
    free(e->idx);
    free(e->lse);
    free(e->cid);
    free(e->flat);
    free(e->at);
    free(e->cp);
    free(e->nc);
    free(e->fb);
    free(e->logits);
    free(e->full);
    free(e->best);
    memset(e, 0, sizeof *e);
}

static int ens_init(struct ens *e, int nin, size_t R0, int topk, int V)
{
    memset(e, 0, sizeof *e);
    e->nin = nin;
    e->R0 = R0;
    e->topk = topk;
    e->mtopk = 2 * topk < V ? 2 * topk : V;
    e->V = V;
    size_t c = (size_t)nin * R0 * (size_t)e->mtopk;
    e->vals = malloc(c * sizeof *e->vals);
    e->idx = malloc(c * sizeof *e->idx);
    e->lse = malloc((size_t)nin * R0 * sizeof *e->lse);
    e->cid = malloc(c * sizeof *e->cid);
    e->flat = malloc(c * sizeof *e->flat);
    e->at = malloc(c * sizeof *e->at);
    e->cp = malloc(c * sizeof *e->cp);
    e->nc = malloc(R0 * sizeof *e->nc);
    e->fb = malloc(R0 * sizeof *e->fb);
    e->best = malloc((size_t)topk * sizeof *e->best);
    if (!e->vals || !e->idx || !e->lse || !e->cid || !e->flat || !e->at || !e->cp || !e->nc || !e->fb || !e->best) {
        ens_free(e);
        return nmt_seterr("out of memory");
    }
    return 0;
}

static int id_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The TOPK largest of the N probabilities P (ids ID, increasing; NULL: 0..N-1) into VALS (as logs)
 * and IDX, descending, ties by lower id, with BEST as scratch of TOPK; returns the TOPK-th
 * probability (-1 if N < TOPK). */
static double select_topk(const double *p, const int32_t *id, int n, int topk, float *vals, int32_t *idx,
                          double *best)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k == topk && !(p[i] > best[k - 1]))
            continue;
        int j = k < topk ? k++ : topk - 1;
        for (; j > 0 && p[i] > best[j - 1]; j--) {
            best[j] = best[j - 1];
            idx[j] = idx[j - 1];
        }
        best[j] = p[i];
        idx[j] = id ? id[i] : i;
    }
    for (int q = 0; q < k; q++)
        vals[q] = (float)log(best[q]);
    return k == topk ? best[k - 1] : -1;
}

/* The ensemble's log-probability of row S's token: the log of the mean of the NIN members'
 * probabilities L[m * B + S]. */
static double token_logprob(const float *l, int nin, int B, int s)
{
    if (nin == 1)
        return (double)l[s];
    double mx = (double)l[s], sum = 0;
    for (int m = 1; m < nin; m++)
        if ((double)l[(size_t)m * (size_t)B + (size_t)s] > mx)
            mx = (double)l[(size_t)m * (size_t)B + (size_t)s];
    if (mx == -INFINITY)
        return mx;
    for (int m = 0; m < nin; m++)
        sum += exp((double)l[(size_t)m * (size_t)B + (size_t)s] - mx);
    return mx + log(sum / (double)nin);
}

/* One decoder step of every member; VALS/IDX (rows x TOPK) receive the ensemble's TOPK best
 * extensions of each row (a single model: its own, from the backend): the log of the mean of the
 * members' probabilities, descending, ties by lower id. Each member's 2 TOPK best tokens come from
 * the backend; the ensemble's probability is computed on the union of them. A token outside the
 * union has a probability of at most T, the mean of the members' 2 TOPK-th best; when the union's
 * TOPK-th best exceeds T (nearly always) the union holds the ensemble's TOPK best, else the row's
 * whole distribution is computed. With TGT (rows) not NULL, MLP (NIN, rows) receives each member's
 * log p(TGT[r]) (0 where TGT[r] is NMT_PAD), to be combined by token_logprob. */
static int ensemble_step(struct infer *const *in, int nin, const int32_t *tok, int topk, float *vals, int32_t *idx,
                         const int32_t *tgt, float *mlp, struct ens *e)
{
    if (nin == 1)
        return infer_step(in[0], tok, topk, vals, idx, tgt, mlp);
    int R = 0, V = e->V, mk = e->mtopk, C = nin * mk;
    for (int m = 0; m < nin; m++) {
        R = infer_rows(in[m]);
        if (infer_step(in[m], tok, mk, e->vals + (size_t)m * (size_t)R * (size_t)mk,
                       e->idx + (size_t)m * (size_t)R * (size_t)mk, tgt, tgt ? mlp + (size_t)m * (size_t)R : NULL) < 0)
            return -1;
    }
    for (int r = 0; r < R; r++) { /* candidates: the members' best ids, each once */
        int32_t *c = e->cid + (size_t)r * (size_t)C;
        for (int m = 0; m < nin; m++)
            memcpy(c + m * mk, e->idx + ((size_t)m * (size_t)R + (size_t)r) * (size_t)mk, (size_t)mk * sizeof *c);
        qsort(c, (size_t)C, sizeof *c, id_cmp);
        int n = 0;
        for (int j = 0; j < C; j++)
            if (!n || c[j] != c[n - 1])
                c[n++] = c[j];
        e->nc[r] = n;
        for (int j = 0; j < C; j++) {
            e->cp[(size_t)r * (size_t)C + (size_t)j] = 0;
            if (j >= n)
                c[j] = c[0];
        }
    }
    for (int m = 0; m < nin; m++) {
        if (infer_logits_at(in[m], C, e->cid, e->flat, e->at) < 0)
            return -1;
        for (int r = 0; r < R; r++) {
            const int32_t *c = e->cid + (size_t)r * (size_t)C;
            const float *l = e->at + (size_t)r * (size_t)C;
            size_t o = ((size_t)m * (size_t)R + (size_t)r) * (size_t)mk;
            const int32_t *top = bsearch(&e->idx[o], c, (size_t)e->nc[r], sizeof *c, id_cmp);
            double lse = (double)l[top - c] - (double)e->vals[o];
            e->lse[(size_t)m * (size_t)R + (size_t)r] = lse;
            for (int j = 0; j < e->nc[r]; j++)
                e->cp[(size_t)r * (size_t)C + (size_t)j] += exp((double)l[j] - lse) / (double)nin;
        }
    }
    int nfb = 0;
    for (int r = 0; r < R; r++) {
        double t = 0;
        for (int m = 0; m < nin; m++)
            t += exp((double)e->vals[((size_t)m * (size_t)R + (size_t)r) * (size_t)mk + (size_t)mk - 1]) / (double)nin;
        double kth = select_topk(e->cp + (size_t)r * (size_t)C, e->cid + (size_t)r * (size_t)C, e->nc[r], topk,
                                 vals + (size_t)r * (size_t)topk, idx + (size_t)r * (size_t)topk, e->best);
        e->fb[r] = e->nc[r] < V && !(kth > t); /* no token outside the candidates, or none as good */
        nfb += e->fb[r];
    }
    if (!nfb)
        return 0;
    /* rows whose candidates may miss a token: their whole distribution */
    if ((size_t)nfb > e->full_cap) {
        double *f = realloc(e->full, (size_t)nfb * (size_t)V * sizeof *f);
        if (!f)
            return nmt_seterr("out of memory");
        e->full = f;
        e->full_cap = (size_t)nfb;
    }
    if (!e->logits && !(e->logits = malloc(e->R0 * (size_t)V * sizeof *e->logits)))
        return nmt_seterr("out of memory");
    for (size_t i = 0; i < (size_t)nfb * (size_t)V; i++)
        e->full[i] = 0;
    for (int m = 0; m < nin; m++) {
        if (infer_logits(in[m], e->logits) < 0)
            return -1;
        for (int r = 0, f = 0; r < R; r++) {
            if (!e->fb[r])
                continue;
            const float *l = e->logits + (size_t)r * (size_t)V;
            double lse = e->lse[(size_t)m * (size_t)R + (size_t)r], *p = e->full + (size_t)f++ * (size_t)V;
            for (int v = 0; v < V; v++)
                p[v] += exp((double)l[v] - lse) / (double)nin;
        }
    }
    for (int r = 0, f = 0; r < R; r++)
        if (e->fb[r])
            select_topk(e->full + (size_t)f++ * (size_t)V, NULL, V, topk, vals + (size_t)r * (size_t)topk,
                        idx + (size_t)r * (size_t)topk, e->best);
    return 0;
}

/* The state of one search over B sentences (a batch's, or a stream's slots) of K rows each. */
struct beam {
    int B, K, k2, nin;         /* sentences, beam, extensions looked at per row, models */
    int ns;                    /* live sentences */
    int *step;                 /* (B) each live sentence's steps so far */
    const struct search_prefix *pre; /* forced prefixes (NULL: none) */
    size_t R0, T;              /* rows at the start (B * K), longest output (tokens with EOS) */
    int *ml;                   /* (B) each sentence's length limit */
    int32_t *tok, *ntok;       /* (R0) each live row's last token, and the next step's */
    int32_t *idx;              /* (R0, k2) each row's best extensions */
    float *vals;               /* (R0, k2) and their log-probabilities */
    double *score, *nscore;    /* (R0) each live row's log-probability, and the next step's */
    uint32_t *hist, *nhist;    /* (R0, T) each live row's tokens, and the next step's */
    float *hlp, *nhlp;         /* (R0, T) their log-probabilities, and the next step's */
    float *ntlp;               /* (R0) the log-probability of each row's next token */
    int32_t *tgt;              /* (R0) each live row's forced prefix token at this step (NMT_PAD: none) */
    float *mlp;                /* (nin, R0) each member's log-probability of it */
    double *plp;               /* (R0) the ensemble's */
    /* with search_opts.attention (else NULL): */
    int S;                     /* the batch's longest source with EOS */
    const int *len;            /* (B) the sources' lengths */
    float *satt, *atmp;        /* (R0, S) each live row's attention at this step; an ensemble member's */
    float *hatt, *nhatt;       /* (R0, T, S) each live row's attention at its steps, and the next step's */
    int *orig, *keep, *parent; /* (B) live sentence -> batch index (a stream's slot), (B) kept sentences,
                                * (R0) parent rows */
    int *kr;                   /* (B) the rows each live sentence has in the models: K, or 1 while it has one
                                * live row (its first step, forced prefixes): the others are not computed;
                                * in a batch the same for all, K once any sentence has more than one */
    int *roff;                 /* (B + 1) where each live sentence's rows start in the models */
    int *kn;                   /* (B) beam_model_rows' */
    int32_t *rtok, *rtgt;      /* (R0) the models' rows' tokens and prefix tokens, when not Z's */
    int *rparent;              /* (R0) the parents of the models' rows (infer_reorder) */
    struct cand *cd;           /* (K * k2) one sentence's candidates */
    struct fin *fin;           /* (B, K) finished hypotheses */
    int *nfin;                 /* (B) finished per sentence */
    int seq;                   /* finished so far (tie break) */
    struct ens ens;            /* an ensemble's scratch */
    /* a stream's (search_stream), else NULL: */
    const struct search_feed *feed;
    size_t *key;               /* (B) each slot's sentence's name for the feed */
    int *slot_free, nslot_free; /* (B) the free slots, a stack */
    const uint32_t **tsrc;     /* (B) the sentences taken from the feed */
    int *tlen;                 /* (B) */
    size_t *tkey;              /* (B) */
};

static void beam_free(struct beam *z)
{
    if (z->fin)
        for (size_t i = 0; i < z->R0; i++) {
            free(z->fin[i].ids);
            free(z->fin[i].lps);
            free(z->fin[i].att);
        }
    free(z->ml);
    free(z->satt);
    free(z->atmp);
    free(z->hatt);
    free(z->nhatt);
    free(z->tok);
    free(z->idx);
    free(z->vals);
    free(z->score);
    free(z->nscore);
    free(z->hist);
    free(z->nhist);
    free(z->hlp);
    free(z->nhlp);
    free(z->ntlp);
    free(z->tgt);
    free(z->mlp);
    free(z->plp);
    free(z->orig);
    free(z->keep);
    free(z->parent);
    free(z->rtok);
    free(z->rtgt);
    free(z->rparent);
    free(z->ntok);
    free(z->cd);
    free(z->fin);
    free(z->nfin);
    free(z->step);
    free(z->kr);
    free(z->roff);
    free(z->kn);
    free(z->key);
    free(z->slot_free);
    free(z->tsrc);
    free(z->tlen);
    free(z->tkey);
    ens_free(&z->ens);
}

/* Sizes Z for B sentences of at most TMAX output tokens with EOS, beam O->beam, NIN models of
 * vocabulary V. 0, or -1 with the error set (Z is to be freed with beam_free either way). */
static int beam_alloc(struct beam *z, const struct search_opts *o, int B, int tmax, int nin, int V)
{
    const int K = o->beam;
    z->B = B;
    z->K = K;
    z->nin = nin;
    z->k2 = 2 * K < V ? 2 * K : V;
    z->R0 = (size_t)B * (size_t)K;
    size_t R0 = z->R0, T = z->T = (size_t)tmax, k2 = (size_t)z->k2;
    z->tok = malloc(R0 * sizeof *z->tok), z->idx = malloc(R0 * k2 * sizeof *z->idx);
    z->vals = malloc(R0 * k2 * sizeof *z->vals);
    z->score = malloc(R0 * sizeof *z->score), z->nscore = malloc(R0 * sizeof *z->nscore);
    z->hist = malloc(R0 * T * sizeof *z->hist), z->nhist = malloc(R0 * T * sizeof *z->nhist);
    z->hlp = malloc(R0 * T * sizeof *z->hlp), z->nhlp = malloc(R0 * T * sizeof *z->nhlp);
    z->ntlp = malloc(R0 * sizeof *z->ntlp);
    z->tgt = malloc(R0 * sizeof *z->tgt), z->mlp = malloc((size_t)nin * R0 * sizeof *z->mlp);
    z->plp = malloc(R0 * sizeof *z->plp);
    z->orig = malloc((size_t)B * sizeof *z->orig), z->keep = malloc((size_t)B * sizeof *z->keep);
    z->parent = malloc(R0 * sizeof *z->parent);
    z->rtok = malloc(R0 * sizeof *z->rtok), z->rtgt = malloc(R0 * sizeof *z->rtgt);
    z->kr = malloc((size_t)B * sizeof *z->kr), z->kn = malloc((size_t)B * sizeof *z->kn);
    z->roff = malloc(((size_t)B + 1) * sizeof *z->roff);
    z->rparent = malloc(R0 * sizeof *z->rparent);
    z->ntok = malloc(R0 * sizeof *z->ntok);
    z->cd = malloc((size_t)K * k2 * sizeof *z->cd);
    z->fin = calloc(R0, sizeof *z->fin);
    z->nfin = calloc((size_t)B, sizeof *z->nfin);
    z->step = calloc((size_t)B, sizeof *z->step);
    z->ml = malloc((size_t)B * sizeof *z->ml);
    int lok = nin == 1 || ens_init(&z->ens, nin, R0, z->k2, V) == 0;
    if (!z->tok || !z->idx || !z->vals || !z->score || !z->nscore || !z->hist || !z->nhist || !z->hlp || !z->nhlp ||
        !z->ntlp || !z->tgt || !z->mlp || !z->plp || !z->orig || !z->keep || !z->parent || !z->ntok || !z->cd ||
        !z->fin || !z->nfin || !lok || !z->rtok || !z->rtgt || !z->rparent || !z->step || !z->ml || !z->kr ||
        !z->kn || !z->roff)
        return nmt_seterr("out of memory");
    for (int b = 0; b < B; b++)
        z->kr[b] = 1;
    return 0;
}

/* Starts row S * K + J of live sentence S: BOS, and at step 0 the K rows are identical: row 0 is
 * kept, the others dead. */
static void beam_row_start(struct beam *z, int s, int j)
{
    size_t r = (size_t)s * (size_t)z->K + (size_t)j;
    z->tok[r] = NMT_BOS;
    z->score[r] = j ? -INFINITY : 0;
}

/* Sizes Z for a batch of B sentences of LEN[b] ids with prefixes PRE (NULL: none), beam O->beam,
 * NIN models of vocabulary V and length limit MODEL_MAX; every sentence live at its step 0, one
 * row each in the models. 0, or -1 with the error set (Z is to be freed with beam_free either way). */
static int beam_init(struct beam *z, const struct search_opts *o, int B, const int *len,
                     const struct search_prefix *pre, int nin, int V, int model_max)
{
    int tmax = 1;
    z->pre = pre;
    for (int b = 0; b < B; b++) {
        int ml = search_max_len(o, len[b], model_max);
        if (search_prefix_check(pre, b, V, ml) < 0)
            return nmt_seterr("sentence %d: %s", b + 1, nmt_errmsg());
        tmax = ml > tmax ? ml : tmax;
    }
    if (beam_alloc(z, o, B, tmax, nin, V) < 0)
        return -1;
    const int K = z->K;
    size_t R0 = z->R0, T = z->T;
    for (int b = 0; b < B; b++)
        z->ml[b] = search_max_len(o, len[b], model_max);
    z->len = len;
    for (int b = 0; b < B; b++) {
        z->orig[b] = b;
        z->S = len[b] + 1 > z->S ? len[b] + 1 : z->S;
    }
    if (o->attention) {
        size_t S = (size_t)z->S;
        z->satt = malloc(R0 * S * sizeof *z->satt), z->atmp = malloc(R0 * S * sizeof *z->atmp);
        z->hatt = malloc(R0 * T * S * sizeof *z->hatt), z->nhatt = malloc(R0 * T * S * sizeof *z->nhatt);
        if (!z->satt || !z->atmp || !z->hatt || !z->nhatt)
            return nmt_seterr("out of memory");
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < K; j++)
            beam_row_start(z, b, j);
    for (int b = 0; b < B; b++)
        z->rparent[b] = b * K;
    z->ns = B;
    return 0;
}

/* Sets z->roff from z->kr for the NS live sentences; returns their rows in the models. */
static int beam_model_offsets(struct beam *z, int ns)
{
    int n = 0;
    for (int s = 0; s < ns; s++) {
        z->roff[s] = n;
        n += z->kr[s];
    }
    z->roff[ns] = n;
    return n;
}

/* The models' inputs for the NS live sentences' rows: where a sentence has one row in the models,
 * its row 0's token and prefix token (*TG, when not NULL), the rows compacted; else Z's as they are. */
static void beam_rows_in(struct beam *z, int ns, const int32_t **tok, const int32_t **tg)
{
    int K = z->K;
    if (beam_model_offsets(z, ns) == ns * K)
        return;
    for (int s = 0; s < ns; s++)
        for (int j = 0; j < z->kr[s]; j++) {
            z->rtok[z->roff[s] + j] = z->tok[s * K + j];
            if (*tg)
                z->rtgt[z->roff[s] + j] = (*tg)[s * K + j];
        }
    *tok = z->rtok;
    if (*tg)
        *tg = z->rtgt;
}

/* Moves the models' rows of the NS live sentences (z->roff) in BUF, rows of W bytes, to their rows
 * in the search's layout, K a sentence (the last first: a row never moves up, nothing unread is
 * overwritten). */
static void spread_rows(const struct beam *z, void *buf, size_t w, int ns)
{
    for (int s = ns - 1; s >= 0; s--)
        for (int j = z->kr[s] - 1; j >= 0; j--) {
            size_t from = (size_t)(z->roff[s] + j), to = (size_t)s * (size_t)z->K + (size_t)j;
            if (from != to)
                memmove((char *)buf + to * w, (char *)buf + from * w, w);
        }
}

/* The models' outputs for the NS live sentences in the search's layout (K rows a sentence): a
 * sentence's rows go to its first rows (the others are dead, their members' log-probabilities of
 * the prefix token 0). FORCED: z->mlp was written; ATT: z->satt. */
static void beam_rows_out(struct beam *z, int ns, int forced, int att)
{
    int K = z->K, Rm = z->roff[ns];
    if (Rm == ns * K)
        return;
    spread_rows(z, z->vals, (size_t)z->k2 * sizeof *z->vals, ns);
    spread_rows(z, z->idx, (size_t)z->k2 * sizeof *z->idx, ns);
    if (att)
        spread_rows(z, z->satt, (size_t)z->S * sizeof *z->satt, ns);
    size_t R = (size_t)ns * (size_t)K;
    for (int m = z->nin - 1; forced && m >= 0; m--) /* from (nin, Rm) to (nin, R), the last first */
        for (int s = ns - 1; s >= 0; s--)
            for (int j = K - 1; j >= 0; j--) {
                float v = j < z->kr[s] ? z->mlp[(size_t)m * (size_t)Rm + (size_t)(z->roff[s] + j)] : 0;
                z->mlp[(size_t)m * R + (size_t)s * (size_t)K + (size_t)j] = v;
            }
}

/* The rows the models keep for the NK kept sentences after beam_advance (z->kn): one while a
 * sentence has a single live row, else K; with SAME, K for all once any has more than one (a
 * batch's models keep as many rows for each). z->rparent receives each one's parent among the
 * models' rows now (z->roff). Returns the most rows a sentence. */
static int beam_model_rows(struct beam *z, int nk, int same)
{
    int K = z->K, most = 1, n = 0;
    for (int i = 0; i < nk; i++) {
        z->kn[i] = 1;
        for (int j = 1; j < K && z->kn[i] == 1; j++)
            if (z->score[i * K + j] != -INFINITY)
                z->kn[i] = K;
        most = z->kn[i] > most ? z->kn[i] : most;
    }
    for (int i = 0; i < nk; i++) {
        if (same)
            z->kn[i] = most;
        for (int j = 0; j < z->kn[i]; j++) {
            int p = z->parent[i * K + j], so = p / K; /* a row of old sentence so */
            z->rparent[n++] = z->roff[so] + (z->kr[so] == K ? p % K : 0);
        }
    }
    return most;
}

/* Fills z->cd with the candidates of live sentence S, best first (at most 2K): each live row's k2
 * extensions, or only token FORCE when it is not negative (EOS at the length limit with a
 * log-probability of 0, a prefix token with its z->plp). Returns their number. */
static int beam_candidates(struct beam *z, int s, int32_t force)
{
    int K = z->K, k2 = z->k2, nc = 0;
    for (int j = 0; j < K; j++) {
        int r = s * K + j;
        if (z->score[r] == -INFINITY)
            continue;
        if (force >= 0) {
            double lp = force == NMT_EOS ? 0 : z->plp[r];
            z->cd[nc] = (struct cand){z->score[r] + lp, r, nc, force, (float)lp};
            nc++;
            continue;
        }
        for (int q = 0; q < k2; q++) {
            size_t at = (size_t)r * (size_t)k2 + (size_t)q;
            z->cd[nc] = (struct cand){z->score[r] + (double)z->vals[at], r, nc, z->idx[at], z->vals[at]};
            nc++;
        }
    }
    qsort(z->cd, (size_t)nc, sizeof *z->cd, cand_cmp);
    return nc > 2 * K ? 2 * K : nc;
}

/* Sentence B's candidates ending in EOS among the K best of the NC become finished hypotheses of T
 * tokens (while it has fewer than K), scored with length penalty LPEN. 0, or -1 with the error set. */
static int beam_finish(struct beam *z, int b, int nc, int t, double lpen)
{
    int K = z->K;
    for (int j = 0; j < nc && j < K; j++) {
        const struct cand *c = &z->cd[j];
        if (c->tok != NMT_EOS || z->nfin[b] >= K)
            continue;
        struct fin *f = &z->fin[(size_t)b * (size_t)K + (size_t)z->nfin[b]];
        f->lp = c->s;
        f->s = c->s / lpen;
        f->seq = z->seq++;
        f->n = (uint32_t)t;
        f->ids = malloc((t ? (size_t)t : 1) * sizeof *f->ids);
        f->lps = malloc(((size_t)t + 1) * sizeof *f->lps);
        if (!f->ids || !f->lps)
            return nmt_seterr("out of memory");
        if (t) {
            memcpy(f->ids, z->hist + (size_t)c->row * z->T, (size_t)t * sizeof *f->ids);
            memcpy(f->lps, z->hlp + (size_t)c->row * z->T, (size_t)t * sizeof *f->lps);
        }
        f->lps[t] = c->lp;
        if (z->hatt) {
            size_t S = (size_t)z->S;
            if (!(f->att = malloc(((size_t)t + 1) * S * sizeof *f->att)))
                return nmt_seterr("out of memory");
            memcpy(f->att, z->hatt + (size_t)c->row * z->T * S, (size_t)t * S * sizeof *f->att);
            memcpy(f->att + (size_t)t * S, z->satt + (size_t)c->row * S, S * sizeof *f->att);
        }
        z->nfin[b]++;
    }
    return 0;
}

/* Whether sentence B's search can end after step T although it has fewer than K finished
 * hypotheses: it has N of them (O->nbest) and none of its NR live rows from BASE can end above the
 * N-th best. A live row's log-probability only falls as it grows, and it ends at t + 2 to ml[b]
 * tokens: its final score is at most its log-probability over the length penalty of one of those
 * ends (the largest of the two at the ends; the penalty is monotone in the length). A later
 * hypothesis of the same score ranks after the earlier ones (fin_cmp), so the results are those
 * of searching on. */
static int beam_settled(const struct beam *z, const struct search_opts *o, int b, int t, int base, int nr)
{
    int K = z->K, n = o->nbest > 1 ? o->nbest : 1;
    if (z->nfin[b] < n)
        return 0;
    double nth = INFINITY; /* the N-th best finished score: the least of the N best */
    const struct fin *f = &z->fin[(size_t)b * (size_t)K];
    for (int i = 0; i < z->nfin[b]; i++) { /* rank of f[i]: finished scores above it */
        int above = 0;
        for (int j = 0; j < z->nfin[b]; j++)
            above += f[j].s > f[i].s || (f[j].s == f[i].s && f[j].seq < f[i].seq);
        if (above == n - 1)
            nth = f[i].s;
    }
    double lo = search_length_penalty(o->alpha, t + 2), hi = search_length_penalty(o->alpha, z->ml[b]);
    for (int i = 0; i < nr; i++) {
        double s = z->nscore[base + i];
        if (s / lo > nth || s / hi > nth || s > 0)
            return 0;
    }
    return 1;
}

/* OUT receives the O->nbest best finished hypotheses of sentence (slot) B (their ids move out of
 * Z; the others are freed: the slot is empty again). 0 or -1. */
static int beam_result(struct beam *z, const struct search_opts *o, int b, struct search_result *out)
{
    struct fin *f = &z->fin[(size_t)b * (size_t)z->K];
    qsort(f, (size_t)z->nfin[b], sizeof *f, fin_cmp);
    int n = z->nfin[b] < o->nbest ? z->nfin[b] : o->nbest, rc = 0;
    out->nhyp = 0;
    if (!(out->hyp = calloc((size_t)(n ? n : 1), sizeof *out->hyp)))
        rc = nmt_seterr("out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        struct search_hyp *h = &out->hyp[i];
        *h = (struct search_hyp){(float)f[i].s, f[i].lp, f[i].n, f[i].ids, f[i].lps, 0, NULL};
        f[i].ids = NULL;
        f[i].lps = NULL;
        out->nhyp = i + 1;
        if (!f[i].att)
            continue;
        h->sn = (uint32_t)z->len[b] + 1; /* the columns of its own source */
        if (!(h->att = malloc(((size_t)h->n + 1) * h->sn * sizeof *h->att))) {
            rc = nmt_seterr("out of memory");
            break;
        }
        for (uint32_t j = 0; j <= h->n; j++)
            memcpy(h->att + (size_t)j * h->sn, f[i].att + (size_t)j * (size_t)z->S, h->sn * sizeof *h->att);
    }
    for (int i = 0; i < z->nfin[b]; i++) {
        free(f[i].ids);
        free(f[i].lps);
        free(f[i].att);
        f[i].ids = NULL;
        f[i].lps = NULL;
        f[i].att = NULL;
    }
    z->nfin[b] = 0;
    return rc;
}

/* OUT[b] receives sentence b's results (beam_result) for every sentence of a batch. 0 or -1. */
static int beam_results(struct beam *z, const struct search_opts *o, struct search_result *out)
{
    for (int b = 0; b < z->B; b++)
        if (beam_result(z, o, b, &out[b]) < 0)
            return -1;
    return 0;
}

/* Sentence (slot) B has ended. In a stream its results go to the feed and its slot is free again;
 * a batch's are taken at its end (beam_results). 0 or -1. */
static int beam_end(struct beam *z, const struct search_opts *o, int b)
{
    if (!z->feed)
        return 0;
    struct search_result r;
    int rc = beam_result(z, o, b, &r);
    if (rc == 0 && z->feed->put(z->feed->arg, z->key[b], &r) == 0) {
        z->slot_free[z->nslot_free++] = b;
        return 0;
    }
    search_result_free(&r);
    return -1;
}

/* One search step's choices for live sentence S (at its step): finished hypotheses, then its K best
 * non-EOS extensions as the rows of kept sentence *NK (incremented when it stays live); a sentence
 * that ends gives its results (beam_end). 0 or -1. */
static int beam_sentence(struct beam *z, const struct search_opts *o, int s, int *nk)
{
    int K = z->K, b = z->orig[s], t = z->step[s], forced = t >= z->ml[b] - 1;
    int32_t pt = z->tgt[s * K];
    int nc = beam_candidates(z, s, forced ? NMT_EOS : pt != NMT_PAD ? pt : -1);
    if (beam_finish(z, b, nc, t, search_length_penalty(o->alpha, t + 1)) < 0)
        return -1;
    int nr = 0, base = *nk * K;
    for (int j = 0; j < nc && nr < K; j++) {
        if (z->cd[j].tok == NMT_EOS)
            continue;
        z->parent[base + nr] = z->cd[j].row;
        z->ntok[base + nr] = z->cd[j].tok;
        z->nscore[base + nr] = z->cd[j].s;
        z->ntlp[base + nr] = z->cd[j].lp;
        nr++;
    }
    if (nr == 0 || forced || z->nfin[b] >= K || (!o->exhaustive && beam_settled(z, o, b, t, base, nr)))
        return beam_end(z, o, b);
    for (; nr < K; nr++) { /* fewer candidates than K: dead rows */
        z->parent[base + nr] = s * K;
        z->ntok[base + nr] = NMT_EOS;
        z->nscore[base + nr] = -INFINITY;
        z->ntlp[base + nr] = 0;
    }
    z->keep[(*nk)++] = s;
    return 0;
}

/* Sets z->tgt for this step of the NS live sentences: each row's prefix token (NMT_PAD past its
 * sentence's prefix, or none). Returns z->tgt, or NULL when no row has one. */
static const int32_t *beam_forced(struct beam *z, int ns)
{
    int any = 0;
    for (int s = 0; s < ns; s++) {
        int b = z->orig[s], t = z->step[s];
        int32_t f = z->pre && t < z->pre->n[b] ? (int32_t)z->pre->ids[b][t] : NMT_PAD;
        any |= f != NMT_PAD;
        for (int j = 0; j < z->K; j++)
            z->tgt[s * z->K + j] = f;
    }
    return any ? z->tgt : NULL;
}

/* z->satt receives each of the R live rows' attention after a step of the NIN models IN (their mean).
 * 0 or -1. */
static int beam_attention(struct beam *z, struct infer *const *in, int nin, int R)
{
    size_t n = (size_t)R * (size_t)z->S;
    if (infer_src_len(in[0]) != z->S)
        return nmt_seterr("attention over %d source tokens, %d expected", infer_src_len(in[0]), z->S);
    for (int m = 0; m < nin; m++) {
        if (infer_attention(in[m], m ? z->atmp : z->satt) < 0)
            return -1;
        for (size_t i = 0; m && i < n; i++)
            z->satt[i] += z->atmp[i];
    }
    for (size_t i = 0; nin > 1 && i < n; i++)
        z->satt[i] /= (float)nin;
    return 0;
}

/* The NK kept sentences' rows after this step: histories, tokens, scores and steps. */
static void beam_advance(struct beam *z, int nk)
{
    size_t T = z->T;
    for (int i = 0; i < nk * z->K; i++) {
        int r = z->parent[i], t = z->step[z->keep[i / z->K]];
        if (t) {
            memcpy(z->nhist + (size_t)i * T, z->hist + (size_t)r * T, (size_t)t * sizeof *z->hist);
            memcpy(z->nhlp + (size_t)i * T, z->hlp + (size_t)r * T, (size_t)t * sizeof *z->hlp);
        }
        if (z->hatt) {
            size_t S = (size_t)z->S;
            memcpy(z->nhatt + (size_t)i * T * S, z->hatt + (size_t)r * T * S, (size_t)t * S * sizeof *z->hatt);
            memcpy(z->nhatt + ((size_t)i * T + (size_t)t) * S, z->satt + (size_t)r * S, S * sizeof *z->hatt);
        }
        z->nhist[(size_t)i * T + (size_t)t] = (uint32_t)z->ntok[i];
        z->nhlp[(size_t)i * T + (size_t)t] = z->ntlp[i];
        z->tok[i] = z->ntok[i];
        z->score[i] = z->nscore[i];
    }
    uint32_t *th = z->hist;
    z->hist = z->nhist;
    z->nhist = th;
    float *tl = z->hlp;
    z->hlp = z->nhlp;
    z->nhlp = tl;
    tl = z->hatt;
    z->hatt = z->nhatt;
    z->nhatt = tl;
    for (int s = 0; s < nk; s++) { /* keep increases: in place */
        z->orig[s] = z->orig[z->keep[s]];
        z->step[s] = z->step[z->keep[s]] + 1;
    }
}

int search_prefix_check(const struct search_prefix *pre, int b, int V, int max_len)
{
    if (!pre || pre->n[b] == 0)
        return 0;
    if (pre->n[b] < 0)
        return nmt_seterr("prefix of %d tokens", pre->n[b]);
    if (pre->n[b] + 1 > max_len)
        return nmt_seterr("a prefix of %d tokens does not fit the output length limit of %d tokens with the end of "
                          "sentence", pre->n[b], max_len);
    for (int j = 0; j < pre->n[b]; j++)
        if (pre->ids[b][j] <= NMT_EOS || pre->ids[b][j] >= (uint32_t)V)
            return nmt_seterr("prefix token %d: id %u is not an output piece of the vocabulary of %d", j + 1,
                              pre->ids[b][j], V);
    return 0;
}

int search_batch(struct infer *const *in, int nin, const struct search_opts *o, int B, const uint32_t *const *src,
                 const int *len, struct search_result *out)
{
    return search_batch_prefix(in, nin, o, B, src, len, NULL, out);
}

/* One decoder step of the NIN models IN for Z's live sentences and the search's choices: the
 * sentences that end leave the models (in a stream even the last), the others go on. 0 or -1. */
static int beam_step(struct beam *z, struct infer *const *in, int nin, const struct search_opts *o)
{
    int nk = 0, ns = z->ns, R = ns * z->K;
    const int32_t *tg = beam_forced(z, ns), *tok = z->tok, *tgm = tg;
    beam_rows_in(z, ns, &tok, &tgm);
    if (ensemble_step(in, nin, tok, z->k2, z->vals, z->idx, tgm, z->mlp, &z->ens) < 0)
        return -1;
    if (o->attention && beam_attention(z, in, nin, z->roff[ns]) < 0)
        return -1;
    beam_rows_out(z, ns, tg != NULL, o->attention);
    for (int r = 0; tg && r < R; r++)
        z->plp[r] = token_logprob(z->mlp, nin, R, r);
    for (int s = 0; s < ns; s++)
        if (beam_sentence(z, o, s, &nk) < 0)
            return -1;
    beam_advance(z, nk);
    int kn = beam_model_rows(z, nk, !z->feed); /* a stream's sentences have rows of their own number */
    for (int m = 0; m < nin && (nk || z->feed); m++)
        if ((z->feed ? infer_reorder_rows(in[m], nk, z->keep, z->kn, z->rparent)
                     : infer_reorder(in[m], nk, kn, z->keep, z->rparent)) < 0)
            return -1;
    memcpy(z->kr, z->kn, (size_t)nk * sizeof *z->kr);
    z->ns = nk;
    return 0;
}

int search_batch_prefix(struct infer *const *in, int nin, const struct search_opts *o, int B,
                        const uint32_t *const *src, const int *len, const struct search_prefix *pre,
                        struct search_result *out)
{
    int model_max;
    for (int b = 0; b < B; b++) {
        out[b].nhyp = 0;
        out[b].hyp = NULL;
    }
    if (search_models_check(in, nin, &model_max) < 0)
        return -1;
    struct beam z = {0};
    int rc = -1;
    if (beam_init(&z, o, B, len, pre, nin, infer_config(in[0])->vocab, model_max) < 0)
        goto out;
    for (int m = 0; m < nin; m++) {
        infer_keep_attention(in[m], o->attention);
        infer_keep_logits(in[m], nin > 1); /* an ensemble reads its members' (ensemble_step) */
        infer_topk_raw(in[m], o->ranks_only && z.K == 1 && nin == 1);
        if (infer_encode(in[m], B, src, len, z.K, (int)z.T) < 0 || infer_reorder(in[m], B, 1, z.orig, z.rparent) < 0)
            goto out;
    }
    while (z.ns > 0)
        if (beam_step(&z, in, nin, o) < 0)
            goto out;
    rc = beam_results(&z, o, out);
out:
    for (int m = 0; m < nin; m++)
        infer_topk_raw(in[m], 0);
    if (rc < 0)
        for (int b = 0; b < B; b++)
            search_result_free(&out[b]);
    beam_free(&z);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * a stream (continuous batching) */

/* Takes up to the free room of sentences from the feed into the NIN models IN and Z, each at its
 * step 0 in a free slot, its length limit by O and MODEL_MAX. Returns how many, or -1 with the
 * error set. */
static int beam_admit(struct beam *z, struct infer *const *in, int nin, const struct search_opts *o, int model_max)
{
    int room = z->B - z->ns, n = z->feed->take(z->feed->arg, room, z->tsrc, z->tlen, z->tkey);
    if (n < 0 || n > room)
        return n < 0 ? -1 : nmt_seterr("stream: %d sentences given, %d asked", n, room);
    for (int i = 0; i < n; i++) {
        int s = z->ns + i, b = z->slot_free[--z->nslot_free];
        z->key[b] = z->tkey[i];
        z->ml[b] = search_max_len(o, z->tlen[i], model_max);
        if (z->ml[b] > (int)z->T)
            return nmt_seterr("stream: sentence of %d tokens, longer than prepared", z->tlen[i]);
        z->nfin[b] = 0;
        z->orig[s] = b;
        z->step[s] = 0;
        z->kr[s] = 1; /* infer_admit's one row */
        for (int j = 0; j < z->K; j++)
            beam_row_start(z, s, j);
    }
    for (int m = 0; m < nin && n; m++)
        if (infer_admit(in[m], n, z->tsrc, z->tlen) < 0)
            return -1;
    z->ns += n;
    return n;
}

/* Sizes Z for a stream of at most W sentences of at most T output tokens with EOS, every slot free.
 * 0, or -1 with the error set (Z is to be freed with beam_free either way). */
static int beam_open(struct beam *z, const struct search_opts *o, int W, int T, int nin, int V,
                     const struct search_feed *f)
{
    if (beam_alloc(z, o, W, T, nin, V) < 0)
        return -1;
    size_t w = (size_t)W;
    z->feed = f;
    z->key = malloc(w * sizeof *z->key), z->slot_free = malloc(w * sizeof *z->slot_free);
    z->tsrc = malloc(w * sizeof *z->tsrc), z->tlen = malloc(w * sizeof *z->tlen), z->tkey = malloc(w * sizeof *z->tkey);
    if (!z->key || !z->slot_free || !z->tsrc || !z->tlen || !z->tkey)
        return nmt_seterr("out of memory");
    for (int i = 0; i < W; i++) /* popped from the top: slot 0 first */
        z->slot_free[i] = W - 1 - i;
    z->nslot_free = W;
    return 0;
}

int search_can_stream(struct infer *const *in, int nin, const struct search_opts *o)
{
    int ok = !o->attention;
    for (int m = 0; m < nin && ok; m++)
        ok = infer_can_stream(in[m]);
    return ok;
}

int search_stream(struct infer *const *in, int nin, const struct search_opts *o, int W, int smax,
                  const struct search_feed *f)
{
    int model_max, rc = -1, drained = 0;
    if (search_models_check(in, nin, &model_max) < 0)
        return -1;
    if (!search_can_stream(in, nin, o))
        return nmt_seterr("stream: search without attention, on a backend with attention_forward_rows and no "
                          "shortlist");
    if (W < 1 || smax < 0 || smax + 1 > model_max)
        return nmt_seterr("stream: %d sentences of %d tokens", W, smax + 1);
    int T = search_max_len(o, smax, model_max), t0 = search_max_len(o, 0, model_max);
    struct beam z = {0};
    if (beam_open(&z, o, W, T > t0 ? T : t0, nin, infer_config(in[0])->vocab, f) < 0)
        goto out;
    for (int m = 0; m < nin; m++) {
        infer_keep_attention(in[m], 0);
        infer_keep_logits(in[m], nin > 1); /* an ensemble reads its members' (ensemble_step) */
        infer_topk_raw(in[m], o->ranks_only && z.K == 1 && nin == 1);
        if (infer_open_stream(in[m], W, smax + 1, z.K, (int)z.T) < 0)
            goto out;
    }
    /* sentences come in once a quarter of the room is free: the encoder runs on several at a time */
    int refill = W / 4 > 1 ? W / 4 : 1;
    for (;;) {
        if (!drained && (z.ns == 0 || W - z.ns >= refill)) {
            int n = beam_admit(&z, in, nin, o, model_max);
            if (n < 0)
                goto out;
            drained = n == 0;
        }
        if (z.ns == 0)
            break;
        if (beam_step(&z, in, nin, o) < 0)
            goto out;
    }
    rc = 0;
out:
    for (int m = 0; m < nin; m++)
        infer_topk_raw(in[m], 0);
    beam_free(&z);
    return rc;
}

int search_reserve(struct infer *const *in, int nin, const struct search_opts *o, int B, const int *len,
                   const int *tlen)
{
    int model_max, S = 1, tmax = 1;
    if (search_models_check(in, nin, &model_max) < 0)
        return -1;
    for (int b = 0; b < B; b++) {
        if (len[b] + 1 > S)
            S = len[b] + 1;
        int t = tlen ? tlen[b] + 1 : search_max_len(o, len[b], model_max);
        if (t > tmax)
            tmax = t;
    }
    for (int m = 0; m < nin && B > 0; m++)
        if (infer_reserve(in[m], B, S, tlen ? 1 : o->beam, tmax) < 0)
            return -1;
    return 0;
}

int search_score(struct infer *const *in, int nin, int B, const uint32_t *const *src, const int *len,
                 const uint32_t *const *tgt, const int *tlen, double *lp)
{
    int tmax = 1, rc = -1, model_max;
    if (search_models_check(in, nin, &model_max) < 0)
        return -1;
    for (int b = 0; b < B; b++) {
        if (tlen[b] + 1 > model_max)
            return nmt_seterr("target of %d tokens exceeds the model's maximum length %d", tlen[b] + 1, model_max);
        if (tlen[b] + 1 > tmax)
            tmax = tlen[b] + 1;
        lp[b] = 0;
    }
    int32_t *tok = malloc((size_t)B * sizeof *tok), *tg = malloc((size_t)B * sizeof *tg);
    float *l = malloc((size_t)B * (size_t)nin * sizeof *l);
    int *orig = malloc((size_t)B * sizeof *orig), *keep = malloc((size_t)B * sizeof *keep);
    if (!tok || !tg || !l || !orig || !keep) {
        nmt_seterr("out of memory");
        goto out;
    }
    for (int m = 0; m < nin; m++)
        if (infer_encode(in[m], B, src, len, 1, tmax) < 0)
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
        for (int m = 0; m < nin; m++)
            if (infer_step(in[m], tok, 0, NULL, NULL, tg, l + (size_t)m * (size_t)B) < 0)
                goto out;
        int nk = 0;
        for (int s = 0; s < ns; s++) {
            lp[orig[s]] += token_logprob(l, nin, B, s);
            if (t < tlen[orig[s]])
                keep[nk++] = s;
        }
        for (int s = 0; s < nk; s++)
            orig[s] = orig[keep[s]];
        for (int m = 0; m < nin && nk; m++)
            if (infer_reorder(in[m], nk, 1, keep, keep) < 0)
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
