/* sample.c: decoding by sampling, with temperature, top-k and nucleus (see sample.h). */
#include "nn/sample.h"
#include "base/rng.h"
#include "base/util.h"
#include "io/records.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double sample_uniform(uint64_t seed, uint64_t key, uint32_t sample, uint32_t step)
{
    uint64_t z = rng_mix64(seed + 0x632BE59BD9B4E019ULL);
    z = rng_mix64(z ^ key * 0x9E3779B97F4A7C15ULL);
    z = rng_mix64(z + ((((uint64_t)sample << 32) | step) + 1) * 0xD1B54A32D192ED03ULL);
    return rng_unit(z);
}

/* The order of candidates: larger weight first, ties by lower id (a total order: ids differ). */
static int cand_before(const struct sample_cand *a, const struct sample_cand *b)
{
    return a->w > b->w || (a->w == b->w && a->id < b->id);
}

static void cand_swap(struct sample_cand *c, int i, int j)
{
    struct sample_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Partitions C[LO..HI) (HI > LO) around the median of its first, middle and last elements; returns
 * the pivot's position J: C[LO..J) come before it, C(J..HI) after. */
static int cand_partition(struct sample_cand *c, int lo, int hi)
{
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (cand_before(&c[mid], &c[lo]))
        cand_swap(c, mid, lo);
    if (cand_before(&c[last], &c[lo]))
        cand_swap(c, last, lo);
    if (cand_before(&c[mid], &c[last]))
        cand_swap(c, mid, last); /* the median is at LAST */
    int j = lo;
    for (int i = lo; i < last; i++)
        if (cand_before(&c[i], &c[last]))
            cand_swap(c, i, j++);
    cand_swap(c, j, last);
    return j;
}

/* Rearranges the N candidates C so that C[0..K) are the K first in order (0 < K < N). */
static void cand_select(struct sample_cand *c, int n, int k)
{
    int lo = 0, hi = n;
    while (hi - lo > 1) {
        int j = cand_partition(c, lo, hi);
        if (j < k)
            lo = j + 1;
        else if (j > k)
            hi = j;
        else
            break;
    }
}

/* Rearranges the N candidates C (weights summing to TOTAL) so that C[0..M) are the M first in order,
 * M the least whose weights reach P * TOTAL; returns M (>= 1). */
static int cand_nucleus(struct sample_cand *c, int n, double total, double p)
{
    double target = p * total, acc = 0; /* acc: the weight of C[0..lo), all in the nucleus */
    int lo = 0, hi = n;
    while (hi > lo) {
        int j = cand_partition(c, lo, hi);
        double m = acc;
        for (int i = lo; i < j; i++)
            m += c[i].w;
        if (m >= target) { /* the nucleus ends before the pivot */
            hi = j;
            continue;
        }
        m += c[j].w;
        if (m >= target)
            return j + 1;
        acc = m;
        lo = j + 1;
    }
    return lo > 0 ? lo : 1; /* reached only through rounding */
}

int sample_draw(const struct sample_opts *o, const double *lp, int V, double u, struct sample_cand *c)
{
    int best = -1;
    for (int v = 0; v < V; v++)
        if (lp[v] > -INFINITY && (best < 0 || lp[v] > lp[best]))
            best = v;
    if (best < 0 || o->temperature == 0 || o->top_k == 1)
        return best;
    double inv = 1.0 / o->temperature, mx = lp[best], total = 0;
    int n = 0;
    for (int v = 0; v < V; v++) {
        double w = lp[v] > -INFINITY ? exp((lp[v] - mx) * inv) : 0;
        if (w > 0)
            c[n++] = (struct sample_cand){w, v};
    }
    if (o->top_k > 0 && o->top_k < n) {
        cand_select(c, n, o->top_k);
        n = o->top_k;
    }
    for (int i = 0; i < n; i++)
        total += c[i].w;
    if (o->top_p < 1)
        n = cand_nucleus(c, n, total, o->top_p);
    total = 0;
    for (int i = 0; i < n; i++)
        total += c[i].w;
    double x = u * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += c[i].w;
        if (x < acc)
            return c[i].id;
    }
    return c[n - 1].id; /* u * total rounded up to the sum */
}

/* The state of one sample_batch: B sentences of N rows (samples) each. Rows by batch position
 * (q = b * N + j) hold the samples; live rows (r = s * N + j) follow the decoder's live sentences. */
struct smp {
    int B, N, V;
    const struct search_prefix *pre; /* forced prefixes (NULL: none) */
    size_t T;                  /* longest output (tokens with EOS) */
    int *ml;                   /* (B) each sentence's length limit */
    int *orig, *keep;          /* (B) live sentence -> batch index, kept sentences */
    int32_t *tok, *ntok;       /* (B * N) each live row's input token, and the next one */
    int kr;                    /* rows a live sentence has in the models: N, or 1 while its samples share
                                * one history (the first step and a forced prefix's: the same row N
                                * times, computed once) */
    int32_t *mtok;             /* (B) with kr 1, the models' rows' input tokens */
    int *mparent;              /* (B * N) the parents of the models' rows (infer_reorder) */
    uint32_t *hist;            /* (B * N, T) each sample's tokens, by batch row */
    float *hlp;                /* (B * N, T) their log-probabilities */
    double *lp;                /* (B * N) each sample's log-probability */
    int *n;                    /* (B * N) its tokens without EOS; -1 while it goes on */
    float *logits;             /* (B * N, V) one model's logits */
    double *dist;              /* (B * N, V) an ensemble's log-probabilities (NULL for one model) */
    double *row;               /* (V) one model's log-probabilities of one row */
    struct sample_cand *cand;  /* (V) sample_draw's scratch */
};

static void smp_free(struct smp *z)
{
    free(z->ml);
    free(z->orig);
    free(z->keep);
    free(z->mtok);
    free(z->mparent);
    free(z->tok);
    free(z->ntok);
    free(z->hist);
    free(z->hlp);
    free(z->lp);
    free(z->n);
    free(z->logits);
    free(z->dist);
    free(z->row);
    free(z->cand);
}

/* Sizes Z for B sentences of LEN[b] ids with prefixes PRE (NULL: none), N samples each, NIN models of
 * vocabulary V and length limit MODEL_MAX. 0, or -1 with the error set (Z is to be freed with
 * smp_free either way). */
static int smp_init(struct smp *z, const struct search_opts *so, int N, int B, const int *len,
                    const struct search_prefix *pre, int nin, int V, int model_max)
{
    size_t R0 = (size_t)B * (size_t)N;
    int tmax = 1;
    z->B = B, z->N = N, z->V = V, z->pre = pre;
    if (!(z->ml = malloc((size_t)B * sizeof *z->ml)))
        return nmt_seterr("out of memory");
    for (int b = 0; b < B; b++) {
        z->ml[b] = search_max_len(so, len[b], model_max);
        if (search_prefix_check(pre, b, V, z->ml[b]) < 0)
            return nmt_seterr("sentence %d: %s", b + 1, nmt_errmsg());
        tmax = z->ml[b] > tmax ? z->ml[b] : tmax;
    }
    size_t T = z->T = (size_t)tmax;
    z->orig = malloc((size_t)B * sizeof *z->orig), z->keep = malloc((size_t)B * sizeof *z->keep);
    z->mtok = malloc((size_t)B * sizeof *z->mtok), z->mparent = malloc(R0 * sizeof *z->mparent);
    z->tok = malloc(R0 * sizeof *z->tok), z->ntok = malloc(R0 * sizeof *z->ntok);
    z->hist = malloc(R0 * T * sizeof *z->hist), z->hlp = malloc(R0 * T * sizeof *z->hlp);
    z->lp = calloc(R0, sizeof *z->lp), z->n = malloc(R0 * sizeof *z->n);
    z->logits = malloc(R0 * (size_t)V * sizeof *z->logits);
    z->dist = nin > 1 ? malloc(R0 * (size_t)V * sizeof *z->dist) : NULL;
    z->row = malloc((size_t)V * sizeof *z->row), z->cand = malloc((size_t)V * sizeof *z->cand);
    if (!z->orig || !z->keep || !z->tok || !z->ntok || !z->hist || !z->hlp || !z->lp || !z->n ||
        !z->logits || (nin > 1 && !z->dist) || !z->row || !z->cand || !z->mtok || !z->mparent)
        return nmt_seterr("out of memory");
    for (int b = 0; b < B; b++)
        z->orig[b] = b, z->mparent[b] = b * N;
    for (size_t r = 0; r < R0; r++) {
        z->tok[r] = NMT_BOS;
        z->n[r] = -1;
    }
    z->kr = 1;
    return 0;
}

/* Whether the samples of batch sentence B share their history up to step T: T is at most its
 * prefix's length (every sample has taken the same forced tokens before it). */
static int smp_shared(const struct smp *z, int b, int t) { return t <= (z->pre ? z->pre->n[b] : 0); }

/* D (V) receives the log-softmax of the V logits L (all -infinity: D too). */
static void log_softmax(const float *l, int V, double *d)
{
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = (double)l[v] > mx ? (double)l[v] : mx;
    for (int v = 0; v < V && mx > -INFINITY; v++)
        s += exp((double)l[v] - mx);
    double lse = mx > -INFINITY ? mx + log(s) : 0;
    for (int v = 0; v < V; v++)
        d[v] = (double)l[v] - lse;
}

/* After a decoder step of R rows, Z->dist (R, V) receives the ensemble's log-probabilities: the log
 * of the mean of the NIN members' probabilities. 0, or -1 with the error set. */
static int smp_ensemble(struct smp *z, struct infer *const *in, int nin, int R)
{
    size_t V = (size_t)z->V;
    for (size_t i = 0; i < (size_t)R * V; i++)
        z->dist[i] = 0;
    for (int m = 0; m < nin; m++) {
        if (infer_logits(in[m], z->logits) < 0)
            return -1;
        for (int r = 0; r < R; r++) {
            double *d = z->dist + (size_t)r * V;
            log_softmax(z->logits + (size_t)r * V, z->V, z->row);
            for (size_t v = 0; v < V; v++)
                d[v] += exp(z->row[v]) / (double)nin;
        }
    }
    for (size_t i = 0; i < (size_t)R * V; i++)
        z->dist[i] = log(z->dist[i]);
    return 0;
}

/* Draws step T's token of sample J of live sentence S (live row R) from D (V log-probabilities),
 * takes its prefix's, or ends it with EOS at its length limit; records it. The token, or -1 with the
 * error set. */
static int32_t smp_token(struct smp *z, const struct sample_opts *o, const double *d, uint64_t key, int s, int j,
                         int t)
{
    int b = z->orig[s];
    size_t q = (size_t)b * (size_t)z->N + (size_t)j;
    int32_t tk = NMT_EOS;
    float tl = 0;
    if (z->pre && t < z->pre->n[b]) {
        tk = (int32_t)z->pre->ids[b][t];
        tl = (float)d[tk];
    } else if (t < z->ml[b] - 1) {
        tk = sample_draw(o, d, z->V, sample_uniform(o->seed, key, (uint32_t)j, (uint32_t)t), z->cand);
        if (tk < 0)
            return nmt_seterr("no token is possible at step %d", t);
        tl = (float)d[tk];
    }
    z->hist[q * z->T + (size_t)t] = (uint32_t)tk;
    z->hlp[q * z->T + (size_t)t] = tl;
    z->lp[q] += (double)tl;
    if (tk == NMT_EOS)
        z->n[q] = t;
    return tk;
}

/* One step T of the NS live sentences: a decoder step, a token for each unfinished sample, and the
 * sentences with unfinished samples kept (*NK of them, their tokens in Z->tok, the parents of the
 * models' rows in Z->mparent, Z->kr of them a sentence). 0 or -1. */
static int smp_step(struct smp *z, struct infer *const *in, int nin, const struct sample_opts *o, const uint64_t *key,
                    int ns, int t, int *nk)
{
    int N = z->N, kr = z->kr, Rm = ns * kr;
    size_t V = (size_t)z->V;
    const int32_t *tok = z->tok;
    if (kr == 1) { /* one row a sentence: its samples' shared input */
        for (int s = 0; s < ns; s++)
            z->mtok[s] = z->tok[s * N];
        tok = z->mtok;
    }
    for (int m = 0; m < nin; m++)
        if (infer_step(in[m], tok, 0, NULL, NULL, NULL, NULL) < 0)
            return -1;
    if (nin > 1 ? smp_ensemble(z, in, nin, Rm) < 0 : infer_logits(in[0], z->logits) < 0)
        return -1;
    *nk = 0;
    for (int s = 0; s < ns; s++) {
        int b = z->orig[s], live = 0, have = 0;
        for (int j = 0; j < N; j++) {
            int r = s * N + j, rm = kr == 1 ? s : r; /* the row in Z and in the models */
            z->ntok[r] = NMT_EOS;
            if (z->n[(size_t)b * (size_t)N + (size_t)j] >= 0)
                continue; /* finished: its row runs on until the sentence's last sample ends */
            if (nin == 1 && !(kr == 1 && have))
                log_softmax(z->logits + (size_t)rm * V, z->V, z->row);
            have = 1;
            const double *d = nin == 1 ? z->row : z->dist + (size_t)rm * V;
            if ((z->ntok[r] = smp_token(z, o, d, key[b], s, j, t)) < 0)
                return -1;
            live |= z->ntok[r] != NMT_EOS;
        }
        if (live)
            z->keep[(*nk)++] = s;
    }
    int kn = kr;
    for (int i = 0; i < *nk; i++) {
        int s = z->keep[i];
        for (int j = 0; j < N; j++)
            z->tok[i * N + j] = z->ntok[s * N + j];
        z->orig[i] = z->orig[s];
        kn = smp_shared(z, z->orig[i], t + 1) ? kn : N;
    }
    for (int i = 0; i < *nk * kn; i++) { /* the models' rows: KN a kept sentence */
        int s = z->keep[i / kn];
        z->mparent[i] = kr == 1 ? s : s * N + i % kn;
    }
    z->kr = kn;
    return 0;
}

/* OUT[b] receives sentence b's samples, in order, scored with length penalty ALPHA. 0 or -1. */
static int smp_results(const struct smp *z, double alpha, struct search_result *out)
{
    for (int b = 0; b < z->B; b++) {
        if (!(out[b].hyp = calloc((size_t)z->N, sizeof *out[b].hyp)))
            return nmt_seterr("out of memory");
        out[b].nhyp = z->N;
        for (int j = 0; j < z->N; j++) {
            size_t q = (size_t)b * (size_t)z->N + (size_t)j, n = (size_t)z->n[q];
            struct search_hyp *h = &out[b].hyp[j];
            h->ids = malloc((n ? n : 1) * sizeof *h->ids);
            h->lps = malloc((n + 1) * sizeof *h->lps);
            if (!h->ids || !h->lps)
                return nmt_seterr("out of memory");
            memcpy(h->ids, z->hist + q * z->T, n * sizeof *h->ids);
            memcpy(h->lps, z->hlp + q * z->T, (n + 1) * sizeof *h->lps);
            h->n = (uint32_t)n;
            h->logprob = z->lp[q];
            h->score = (float)(z->lp[q] / search_length_penalty(alpha, (int)n + 1));
        }
    }
    return 0;
}

int sample_batch(struct infer *const *in, int nin, const struct search_opts *so, const struct sample_opts *o, int B,
                 const uint32_t *const *src, const int *len, const uint64_t *key, const struct search_prefix *pre,
                 struct search_result *out)
{
    int model_max, rc = -1;
    for (int b = 0; b < B; b++) {
        out[b].nhyp = 0;
        out[b].hyp = NULL;
    }
    if (o->samples < 1)
        return nmt_seterr("sampling needs at least 1 sample per sentence, not %d", o->samples);
    if (search_models_check(in, nin, &model_max) < 0)
        return -1;
    if (B == 0)
        return 0;
    struct smp z = {0};
    if (smp_init(&z, so, o->samples, B, len, pre, nin, infer_config(in[0])->vocab, model_max) < 0)
        goto out;
    for (int m = 0; m < nin; m++)
        if (infer_encode(in[m], B, src, len, z.N, (int)z.T) < 0 || infer_reorder(in[m], B, 1, z.orig, z.mparent) < 0)
            goto out;
    for (int t = 0, ns = B; ns > 0; t++) {
        int nk = 0;
        if (smp_step(&z, in, nin, o, key, ns, t, &nk) < 0)
            goto out;
        for (int m = 0; m < nin && nk; m++)
            if (infer_reorder(in[m], nk, z.kr, z.keep, z.mparent) < 0)
                goto out;
        ns = nk;
    }
    rc = smp_results(&z, so->alpha, out);
out:
    if (rc < 0)
        for (int b = 0; b < B; b++)
            search_result_free(&out[b]);
    smp_free(&z);
    return rc;
}
