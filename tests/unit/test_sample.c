/* test_sample.c: decoding by sampling (sample.c). sample_draw on fixed distributions: frequencies
 * within a binomial bound at temperatures 1 and 2, under top-k and top-p, never a token outside the
 * k best or the nucleus, temperature 0 and top-k 1 the most probable token (ties by lower id).
 * sample_batch on the cpu backend with a randomly initialised model: every token among the k best
 * of its step (replayed by forced steps), temperature 0 equal to greedy search, batch invariance,
 * seeds, sample j the same whatever the number of samples, and word scores summing to the
 * log-probability. */
#include "test.h"
#include "tiny_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/records.h"
#include "run/backend_loader.h"
#include "nn/infer.h"
#include "nn/model.h"
#include "nn/sample.h"
#include "nn/search.h"
#include "base/util.h"

#define V0 6
#define DRAWS 20000

/* Draws DRAWS tokens from LP (V0 log-probabilities) under O into COUNT; returns the count of draws
 * that failed (-1). */
static int draw_counts(const struct sample_opts *o, const double *lp, int *count)
{
    struct sample_cand c[V0];
    int bad = 0;
    memset(count, 0, V0 * sizeof *count);
    for (int i = 0; i < DRAWS; i++) {
        int t = sample_draw(o, lp, V0, sample_uniform(o->seed, (uint64_t)i, 0, 3), c);
        if (t < 0 || t >= V0)
            bad++;
        else
            count[t]++;
    }
    return bad;
}

/* Whether COUNT is within 5 binomial standard deviations (and 3 draws) of DRAWS * P for each token,
 * and exactly 0 where P is 0. */
static int within(const int *count, const double *p)
{
    for (int v = 0; v < V0; v++) {
        double mean = DRAWS * p[v], sd = sqrt(DRAWS * p[v] * (1 - p[v]));
        if (p[v] == 0 ? count[v] != 0 : fabs(count[v] - mean) > 5 * sd + 3) {
            printf("# token %d: %d draws, expected %.1f +- %.1f\n", v, count[v], mean, sd);
            return 0;
        }
    }
    return 1;
}

static void test_draw(void)
{
    /* p = 0.4, 0.3, 0.15, 0.1, 0.05 and an impossible token */
    const double p[V0] = {0.4, 0.3, 0.15, 0.1, 0.05, 0};
    double lp[V0], want[V0];
    for (int v = 0; v < V0; v++)
        lp[v] = p[v] > 0 ? log(p[v]) : -INFINITY;
    struct sample_opts o = {.samples = 1, .temperature = 1, .top_k = 0, .top_p = 1, .seed = 5};
    int count[V0];
    test_ok(!draw_counts(&o, lp, count) && within(count, p), "temperature 1: frequencies within the binomial bound");
    o.temperature = 2; /* p^(1/2), renormalised */
    double z = 0;
    for (int v = 0; v < V0; v++)
        z += sqrt(p[v]);
    for (int v = 0; v < V0; v++)
        want[v] = sqrt(p[v]) / z;
    test_ok(!draw_counts(&o, lp, count) && within(count, want), "temperature 2: frequencies of p^(1/2)");
    o.temperature = 1;
    o.top_k = 2;
    const double k2[V0] = {0.4 / 0.7, 0.3 / 0.7, 0, 0, 0, 0};
    test_ok(!draw_counts(&o, lp, count) && within(count, k2), "top-k 2: only the 2 best, in proportion");
    o.top_k = 0;
    o.top_p = 0.8; /* 0.4 + 0.3 < 0.8 <= 0.4 + 0.3 + 0.15 */
    const double p8[V0] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0, 0};
    test_ok(!draw_counts(&o, lp, count) && within(count, p8), "top-p 0.8: the nucleus of 3 tokens, in proportion");
    o.top_p = 0.4;
    const double p4[V0] = {1, 0, 0, 0, 0, 0};
    test_ok(!draw_counts(&o, lp, count) && within(count, p4), "top-p 0.4: the best token alone");
    o.top_k = 4;
    o.top_p = 0.5; /* of the 4 best's mass 0.95: 0.475, reached by the first 2 */
    const double kp[V0] = {0.4 / 0.7, 0.3 / 0.7, 0, 0, 0, 0};
    test_ok(!draw_counts(&o, lp, count) && within(count, kp), "top-k 4 then top-p 0.5 of what is left: 2 tokens");
    o = (struct sample_opts){.samples = 1, .temperature = 0, .top_p = 1, .seed = 5};
    test_ok(!draw_counts(&o, lp, count) && count[0] == DRAWS, "temperature 0: the most probable token");
    const double tie[V0] = {-INFINITY, log(0.25), log(0.25), log(0.25), log(0.25), -INFINITY};
    o.temperature = 1;
    o.top_k = 1;
    test_ok(!draw_counts(&o, tie, count) && count[1] == DRAWS, "top-k 1 among ties: the lowest id");
    /* a large random distribution: top-k and top-p sets are the best tokens, whatever the draws */
    enum { VL = 1000 };
    double *big = malloc(VL * sizeof *big);
    struct sample_cand *c = malloc(VL * sizeof *c);
    int ok = big && c, outside = 0;
    for (int v = 0; ok && v < VL; v++)
        big[v] = -8 * sample_uniform(9, (uint64_t)v, 1, 1);
    o = (struct sample_opts){.samples = 1, .temperature = 1.5, .top_k = 37, .top_p = 0.9, .seed = 2};
    for (int i = 0; ok && i < 2000; i++) {
        int t = sample_draw(&o, big, VL, sample_uniform(3, (uint64_t)i, 0, 0), c), above = 0;
        for (int v = 0; t >= 0 && v < VL; v++)
            above += big[v] > big[t] || (big[v] == big[t] && v < t);
        outside += t < 0 || above >= 37;
    }
    test_ok(ok && outside == 0, "top-k 37 of 1000 tokens: no draw outside the 37 best (%d)", outside);
    free(big);
    free(c);
}

#define NS 7

static int same_hyp(const struct search_hyp *x, const struct search_hyp *y)
{
    return x->n == y->n && x->score == y->score && x->logprob == y->logprob &&
           !memcmp(x->ids, y->ids, x->n * sizeof *x->ids) && !memcmp(x->lps, y->lps, (x->n + 1) * sizeof *x->lps);
}

static int same_result(const struct search_result *a, const struct search_result *b)
{
    if (a->nhyp != b->nhyp)
        return 0;
    for (int i = 0; i < a->nhyp; i++)
        if (!same_hyp(&a->hyp[i], &b->hyp[i]))
            return 0;
    return 1;
}

/* Whether every token of H, a sample of source SRC (LEN ids), is among the K (<= 4) best of its step,
 * replayed by steps of the model IN given H's tokens (the EOS that the length limit forced, with a
 * word score of 0, excepted). */
static int in_topk(struct infer *in, const uint32_t *src, int len, const struct search_hyp *h, int k)
{
    float vals[4];
    int32_t idx[4], tok = NMT_BOS;
    if (infer_encode(in, 1, &src, &len, 1, (int)h->n + 1) < 0)
        return 0;
    for (uint32_t t = 0; t <= h->n; t++) {
        int32_t want = t < h->n ? (int32_t)h->ids[t] : NMT_EOS;
        int found = t == h->n && h->lps[t] == 0;
        if (infer_step(in, &tok, k, vals, idx, NULL, NULL) < 0)
            return 0;
        for (int j = 0; j < k; j++)
            found |= idx[j] == want;
        if (!found)
            return 0;
        tok = want;
    }
    return 1;
}

/* Whether each hypothesis's word scores sum to its log-probability and its score is that over the
 * length penalty of ALPHA. */
static int sums_ok(const struct search_result *r, double alpha)
{
    for (int i = 0; i < r->nhyp; i++) {
        const struct search_hyp *h = &r->hyp[i];
        double s = 0;
        for (uint32_t j = 0; j <= h->n; j++)
            s += (double)h->lps[j];
        if (s != h->logprob || h->score != (float)(s / search_length_penalty(alpha, (int)h->n + 1)))
            return 0;
    }
    return 1;
}

static void run_sample(struct backend *be)
{
    enum { V = 60 };
    static uint32_t store[NS][16];
    const uint32_t *src[NS];
    int len[NS];
    uint64_t key[NS], key2[NS];
    for (int b = 0; b < NS; b++) {
        len[b] = 1 + (b * 5) % 13;
        for (int j = 0; j < 16; j++)
            store[b][j] = 4 + (uint32_t)(sample_uniform(1, (uint64_t)b, (uint32_t)j, 0) * (V - 4));
        src[b] = store[b];
        key[b] = 100 + (uint64_t)b;
        key2[b] = 200 + (uint64_t)b;
    }
    struct model *m = tiny_model(be, 0, V, 40, 11);
    struct infer *in = m ? infer_new(be, m, INFER_INVARIANT, NMT_DTYPE_F32) : NULL;
    test_ok(in != NULL, "model: %s", in ? "" : nmt_errmsg());
    if (!in) {
        model_free(m);
        return;
    }
    struct search_opts so = {.beam = 3, .nbest = 3, .alpha = 0.6, .len_a = 1, .len_b = 5};
    struct sample_opts o = {.samples = 3, .temperature = 1, .top_k = 3, .top_p = 1, .seed = 7};
    struct search_result all[NS], one, other[NS];
    int ok = search_reserve(&in, 1, &so, NS, len, NULL) == 0 &&
             sample_batch(&in, 1, &so, &o, NS, src, len, key, NULL, all) == 0;
    test_ok(ok, "sample_batch: %s", ok ? "" : nmt_errmsg());
    if (!ok)
        goto out;
    int topk = 1, sums = 1, inv = 1, first = 1, nhyp = 1, tokens = 0;
    for (int b = 0; b < NS; b++) {
        nhyp &= all[b].nhyp == 3;
        sums &= sums_ok(&all[b], so.alpha);
        for (int j = 0; j < all[b].nhyp; j++) {
            topk &= in_topk(in, src[b], len[b], &all[b].hyp[j], 3);
            tokens += (int)all[b].hyp[j].n;
        }
        inv &= sample_batch(&in, 1, &so, &o, 1, &src[b], &len[b], &key[b], NULL, &one) == 0 &&
               same_result(&all[b], &one);
        search_result_free(&one);
        struct sample_opts o1 = o;
        o1.samples = 1;
        first &= sample_batch(&in, 1, &so, &o1, 1, &src[b], &len[b], &key[b], NULL, &one) == 0 && one.nhyp == 1 &&
                 same_hyp(&all[b].hyp[0], &one.hyp[0]);
        search_result_free(&one);
    }
    test_ok(nhyp, "3 samples per sentence");
    test_ok(topk && tokens > NS, "top-k 3: every token of every sample among the 3 best of its step (%d tokens)",
            tokens);
    test_ok(sums, "word scores sum to the log-probability; the score is that over the length penalty");
    test_ok(inv, "each sentence alone gets the samples it gets in the batch");
    test_ok(first, "sample 1 of 3 is the sample of --sample-beam 1");
    int differ_key = 0, differ_seed = 0, same_seed = 1;
    if (sample_batch(&in, 1, &so, &o, NS, src, len, key2, NULL, other) == 0)
        for (int b = 0; b < NS; b++) {
            differ_key += !same_result(&all[b], &other[b]);
            search_result_free(&other[b]);
        }
    o.seed = 8;
    if (sample_batch(&in, 1, &so, &o, NS, src, len, key, NULL, other) == 0)
        for (int b = 0; b < NS; b++) {
            differ_seed += !same_result(&all[b], &other[b]);
            search_result_free(&other[b]);
        }
    o.seed = 7;
    if (sample_batch(&in, 1, &so, &o, NS, src, len, key, NULL, other) == 0)
        for (int b = 0; b < NS; b++) {
            same_seed &= same_result(&all[b], &other[b]);
            search_result_free(&other[b]);
        }
    test_ok(differ_key >= NS - 1 && differ_seed >= NS - 1 && same_seed,
            "another key or seed gives other samples (%d, %d of %d sentences), the same seed the same", differ_key,
            differ_seed, NS);
    /* temperature 0: the greedy translation, scores and word scores included up to rounding */
    struct sample_opts g = {.samples = 1, .temperature = 0, .top_p = 1, .seed = 7};
    struct search_opts gs = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1, .len_b = 5};
    int greedy = sample_batch(&in, 1, &gs, &g, NS, src, len, key, NULL, other) == 0;
    for (int b = 0; greedy && b < NS; b++) {
        greedy = search_batch(&in, 1, &gs, 1, &src[b], &len[b], &one) == 0 && one.hyp[0].n == other[b].hyp[0].n &&
                 !memcmp(one.hyp[0].ids, other[b].hyp[0].ids, one.hyp[0].n * sizeof *one.hyp[0].ids) &&
                 fabs(one.hyp[0].logprob - other[b].hyp[0].logprob) < 1e-4;
        search_result_free(&one);
    }
    for (int b = 0; b < NS; b++)
        search_result_free(&other[b]);
    test_ok(greedy, "temperature 0 gives the greedy translations");
    /* the samples of a sentence share their history through a forced prefix: one decoder row a
     * sentence, not N (2 forced tokens, then EOS at the length limit: 3 rows a sentence) */
    const uint32_t *pid[NS];
    int pn[NS];
    for (int b = 0; b < NS; b++)
        pid[b] = store[(b + 1) % NS], pn[b] = 2;
    struct search_prefix pre = {pid, pn};
    struct search_opts ps = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 0, .len_b = 3};
    struct sample_opts p4 = {.samples = 4, .temperature = 1, .top_p = 1, .seed = 7};
    uint64_t r0 = infer_rows_stepped(in);
    int ran = sample_batch(&in, 1, &ps, &p4, NS, src, len, key, &pre, other) == 0, pok = ran;
    uint64_t rows = infer_rows_stepped(in) - r0;
    for (int b = 0; ran && b < NS; b++) {
        for (int j = 0; pok && j < 4; j++)
            pok = other[b].nhyp == 4 && other[b].hyp[j].n == 2 && other[b].hyp[j].ids[0] == pid[b][0] &&
                  other[b].hyp[j].ids[1] == pid[b][1];
        search_result_free(&other[b]);
    }
    test_ok(pok && rows == 3 * NS, "4 samples over a forced prefix: one decoder row a sentence at each step (%llu "
            "rows, %d expected)", (unsigned long long)rows, 3 * NS);
    for (int b = 0; b < NS; b++)
        search_result_free(&all[b]);
out:
    infer_free(in);
    model_free(m);
}

int main(void)
{
    test_draw();
    struct nmt_backend_opts bo = {sizeof bo, 2, 0};
    struct backend *be = backend_open("cpu", &bo);
    test_ok(be != NULL, "cpu backend: %s", be ? "" : nmt_errmsg());
    if (!be)
        return test_done();
    run_sample(be);
    backend_close(be);
    return test_done();
}
