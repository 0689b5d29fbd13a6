/* test_search.c: inference (infer.c) and search (search.c) on the cpu backend with a randomly
 * initialised model: forced-decoding scores against the training forward (model_step) per sentence,
 * batch invariance of translations and scores, greedy equal to beam 1, beam scores not below
 * greedy's, and that the score of a translation matches its forced decoding; ensembles: a model
 * with itself translates as alone, and an ensemble's scores are the log of its members' mean
 * probabilities, in search and forced decoding alike; forced output prefixes; the attention kept. */
#include "test.h"
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/backend_loader.h"
#include "io/safetensors.h"
#include "nn/infer.h"
#include "nn/model.h"
#include "nn/search.h"
#include "cli/cli.h"

#define NS 9

static uint32_t src_store[NS][16], tgt_store[NS][16];
static int slen[NS], tlen[NS];

static void make_data(int V)
{
    uint64_t s = 99;
    for (int b = 0; b < NS; b++) {
        slen[b] = 1 + (b * 5) % 13;
        tlen[b] = (b * 3) % 11;
        for (int j = 0; j < 16; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            src_store[b][j] = 4 + (uint32_t)((s >> 33) % (uint64_t)(V - 4));
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            tgt_store[b][j] = 4 + (uint32_t)((s >> 33) % (uint64_t)(V - 4));
        }
    }
}

/* Training-model NLL of pair B alone (label smoothing 0). */
static double train_nll(struct model *m, int b)
{
    struct batch_record br = {0};
    uint32_t S = (uint32_t)slen[b] + 1, T = (uint32_t)tlen[b] + 1;
    batch_record_resize(&br, 1, S, T);
    br.index[0] = 0;
    br.src_len[0] = S;
    br.tgt_len[0] = T;
    for (uint32_t j = 0; j < S; j++)
        br.src[j] = j + 1 < S ? src_store[b][j] : NMT_EOS;
    for (uint32_t j = 0; j < T; j++)
        br.tgt[j] = j + 1 < T ? tgt_store[b][j] : NMT_EOS;
    struct model_loss l;
    int rc = model_step(m, &br, 0, 0, 0, &l, NULL);
    batch_record_free(&br);
    return rc < 0 ? NAN : l.nll;
}

static int same_result(const struct search_result *a, const struct search_result *b)
{
    if (a->nhyp != b->nhyp)
        return 0;
    for (int i = 0; i < a->nhyp; i++) {
        const struct search_hyp *x = &a->hyp[i], *y = &b->hyp[i];
        if (x->n != y->n || memcmp(&x->score, &y->score, sizeof x->score) || x->logprob != y->logprob ||
            (x->n && memcmp(x->ids, y->ids, x->n * sizeof *x->ids)) ||
            memcmp(x->lps, y->lps, (x->n + 1) * sizeof *x->lps))
            return 0;
    }
    return 1;
}

/* Gives EOS 1.5 times the embedding row (shared with the output projection) of the token greedy
 * decoding emits most, so that outputs end by themselves where they would emit it: a random model
 * otherwise never ends a sentence. 0 or -1. */
static int make_eos_likely(struct backend *be, struct model *m)
{
    const struct model_config *c = model_config(m);
    const struct model_param *params;
    size_t np = model_params(m, &params), off = SIZE_MAX;
    for (size_t i = 0; i < np; i++)
        if (!strcmp(params[i].name, "emb.weight"))
            off = params[i].offset;
    struct infer *in = infer_new(be, m, 1, NMT_DTYPE_F32);
    float *w = malloc(model_num_params(m) * sizeof *w);
    int count[256] = {0}, rc = in && w && off != SIZE_MAX && c->vocab <= 256 ? 0 : -1;
    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    for (int b = 0; rc == 0 && b < NS; b++) {
        struct search_result r;
        const uint32_t *src = src_store[b];
        if (search_batch(&in, 1, &o, 1, &src, &slen[b], &r) < 0) {
            rc = -1;
            break;
        }
        for (uint32_t j = 0; j < r.hyp[0].n; j++)
            count[r.hyp[0].ids[j]]++;
        search_result_free(&r);
    }
    int t = 4;
    for (int v = 4; v < c->vocab; v++)
        t = count[v] > count[t] ? v : t;
    if (rc == 0 && model_get_params(m, w) == 0) {
        for (int d = 0; d < c->d_model; d++) /* its logit, the largest, 1.5 times over */
            w[off + (size_t)NMT_EOS * c->d_model + d] = 1.5f * w[off + (size_t)t * c->d_model + d];
        rc = model_set_params(m, w);
    }
    infer_free(in);
    free(w);
    return rc;
}

/* Forced prefixes (search_batch_prefix) on IN (vocabulary of 60, MAX_LEN) whose greedy results are G:
 * the first half of a greedy output forced gives that output again; beam 4 with other prefixes keeps
 * them, is batch invariant, and scores as forced decoding does; bad prefixes are refused. */
static void run_prefix(struct infer *in, const struct search_result *g, int max_len, int pre_norm)
{
    const uint32_t *src[NS], *pid[NS];
    int pn[NS], same = 1, kept = 1, inv = 1, fmatch = 1, compared = 0;
    struct search_prefix pre = {pid, pn};
    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    struct search_result r[NS], r1;
    for (int b = 0; b < NS; b++) {
        src[b] = src_store[b];
        pid[b] = g[b].hyp[0].ids;
        for (pn[b] = 0; pn[b] < (int)g[b].hyp[0].n / 2 && pid[b][pn[b]] > NMT_EOS;) /* a random model may emit BOS */
            pn[b]++;
    }
    int ok = search_batch_prefix(&in, 1, &o, NS, src, slen, &pre, r) == 0;
    test_ok(ok, "pre_norm %d: greedy with prefixes: %s", pre_norm, ok ? "" : nmt_errmsg());
    for (int b = 0; ok && b < NS; b++) {
        const struct search_hyp *x = &r[b].hyp[0], *y = &g[b].hyp[0];
        same &= x->n == y->n && !memcmp(x->ids, y->ids, x->n * sizeof *x->ids) && fabs(x->logprob - y->logprob) < 1e-4;
        search_result_free(&r[b]);
    }
    test_ok(same, "pre_norm %d: the first half of each greedy output forced gives the greedy output again", pre_norm);
    o.beam = o.nbest = 4;
    for (int b = 0; b < NS; b++) {
        pid[b] = tgt_store[b];
        pn[b] = b % 3 ? tlen[b] % 5 : 0;
    }
    ok = search_batch_prefix(&in, 1, &o, NS, src, slen, &pre, r) == 0;
    test_ok(ok, "pre_norm %d: beam 4 with prefixes: %s", pre_norm, ok ? "" : nmt_errmsg());
    for (int b = 0; ok && b < NS; b++) {
        struct search_prefix p1 = {&pid[b], &pn[b]};
        inv &= search_batch_prefix(&in, 1, &o, 1, &src[b], &slen[b], &p1, &r1) == 0 && same_result(&r[b], &r1);
        search_result_free(&r1);
        for (int h = 0; h < r[b].nhyp; h++) {
            const struct search_hyp *x = &r[b].hyp[h];
            int n = (int)x->n;
            double lp;
            kept &= n >= pn[b] && !memcmp(x->ids, pid[b], (size_t)pn[b] * sizeof *x->ids);
            if (n + 1 < search_max_len(&o, slen[b], max_len)) { /* ended by itself */
                compared++;
                const uint32_t *hy = x->ids;
                fmatch &= search_score(&in, 1, 1, &src[b], &slen[b], &hy, &n, &lp) == 0 &&
                          fabs(lp - x->logprob) <= 1e-4 * (1 + fabs(lp));
            }
        }
        search_result_free(&r[b]);
    }
    test_ok(kept, "pre_norm %d: every beam 4 hypothesis starts with its prefix", pre_norm);
    test_ok(inv, "pre_norm %d: beam 4 with prefixes identical alone and in a batch", pre_norm);
    test_ok(fmatch && compared >= NS,
            "pre_norm %d: with prefixes, log-probabilities equal forced decoding (%d compared)", pre_norm, compared);
    int big = 40;
    struct search_prefix p1 = {&pid[1], &big};
    test_ok(search_batch_prefix(&in, 1, &o, 1, &src[1], &slen[1], &p1, &r1) < 0 && strstr(nmt_errmsg(), "does not fit"),
            "pre_norm %d: a prefix past the length limit is refused: '%s'", pre_norm, nmt_errmsg());
    const uint32_t eos[1] = {NMT_EOS}, *pe = eos;
    int one = 1;
    struct search_prefix p2 = {&pe, &one};
    test_ok(search_batch_prefix(&in, 1, &o, 1, &src[1], &slen[1], &p2, &r1) < 0 && strstr(nmt_errmsg(), "output piece"),
            "pre_norm %d: a prefix with EOS is refused: '%s'", pre_norm, nmt_errmsg());
    nmt_seterr("%s", ""); /* the checks after these print the last error */
}

/* search_opts.attention on IN: the same translations and scores as without; each token's attention
 * is a distribution over its source tokens with EOS, the same alone and in a batch. */
static void run_attention(struct infer *in, int pre_norm)
{
    const uint32_t *src[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b];
    struct search_opts o = {.beam = 4, .nbest = 4, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    struct search_result plain[NS], r[NS], r1;
    int ok = search_batch(&in, 1, &o, NS, src, slen, plain) == 0;
    o.attention = 1;
    ok = ok && search_batch(&in, 1, &o, NS, src, slen, r) == 0;
    test_ok(ok, "pre_norm %d: beam 4 keeping the attention: %s", pre_norm, ok ? "" : nmt_errmsg());
    int same = 1, dist = 1, inv = 1, rows = 0;
    for (int b = 0; ok && b < NS; b++) {
        same &= same_result(&plain[b], &r[b]);
        inv &= search_batch(&in, 1, &o, 1, &src[b], &slen[b], &r1) == 0 && r1.nhyp == r[b].nhyp;
        for (int h = 0; h < r[b].nhyp; h++) {
            const struct search_hyp *x = &r[b].hyp[h];
            dist &= x->att && x->sn == (uint32_t)slen[b] + 1;
            for (uint32_t j = 0; dist && j <= x->n; j++, rows++) {
                double sum = 0;
                for (uint32_t i = 0; i < x->sn; i++)
                    sum += x->att[j * x->sn + i];
                dist &= fabs(sum - 1) < 1e-4;
            }
            inv &= h < r1.nhyp && dist && r1.hyp[h].sn == x->sn &&
                   !memcmp(r1.hyp[h].att, x->att, (x->n + 1) * x->sn * sizeof *x->att);
        }
        search_result_free(&r1);
        search_result_free(&r[b]);
        search_result_free(&plain[b]);
    }
    test_ok(same, "pre_norm %d: keeping the attention changes no translation or score", pre_norm);
    test_ok(dist && rows >= NS, "pre_norm %d: each token's attention sums to 1 over its source (%d tokens)", pre_norm,
            rows);
    test_ok(inv, "pre_norm %d: the attention is the same alone and in a batch", pre_norm);
}

/* The early end of beam search: with beams 4 and 8, alphas 0, 0.6 and 2 and n-best 1 and 2, each
 * sentence ends once no live hypothesis can outscore its n-best finished ones; the results are those
 * of searching on until K have finished (search_opts.exhaustive), in fewer decoder rows. */
static void run_early_end(struct infer *in, int pre_norm)
{
    const uint32_t *src[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b];
    static const double alphas[] = {0, 0.6, 2};
    uint64_t early = 0, full = 0;
    int same = 1, fewer = 1;
    for (int v = 0; v < 12; v++) {
        struct search_opts o = {.beam = v < 6 ? 4 : 8, .nbest = 1 + v % 2, .alpha = alphas[v % 6 / 2], .len_a = 1,
                                .len_b = 5};
        struct search_result re[NS], rf[NS];
        uint64_t r0 = infer_rows_stepped(in);
        int ok = search_batch(&in, 1, &o, NS, src, slen, re) == 0;
        uint64_t r1 = infer_rows_stepped(in);
        o.exhaustive = 1;
        ok = search_batch(&in, 1, &o, NS, src, slen, rf) == 0 && ok;
        uint64_t r2 = infer_rows_stepped(in);
        for (int b = 0; b < NS; b++) {
            same &= ok && same_result(&re[b], &rf[b]);
            search_result_free(&re[b]);
            search_result_free(&rf[b]);
        }
        fewer &= r1 - r0 <= r2 - r1;
        early += r1 - r0, full += r2 - r1;
    }
    test_ok(same, "pre_norm %d: beam search ending early: the results of searching on until K hypotheses finish",
            pre_norm);
    test_ok(fewer && early < full, "pre_norm %d: beam search ending early: %llu decoder rows instead of %llu", pre_norm,
            (unsigned long long)early, (unsigned long long)full);
}

/* Beam search runs one decoder row a sentence while each has a single live hypothesis (the first
 * step, a forced prefix), not K: a prefix of 2 tokens ending at the length limit takes 3 rows a
 * sentence, and gives greedy search's hypotheses (the same rows, the same log-probabilities). */
static void run_one_row(struct infer *in)
{
    const uint32_t *src[NS], *pid[NS];
    int pn[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b], pid[b] = tgt_store[b], pn[b] = 2;
    struct search_prefix pre = {pid, pn};
    struct search_opts o = {.beam = 4, .nbest = 1, .alpha = 0.6, .len_a = 0, .len_b = 3};
    struct search_result rb[NS], rg[NS];
    uint64_t r0 = infer_rows_stepped(in);
    int ok = search_batch_prefix(&in, 1, &o, NS, src, slen, &pre, rb) == 0;
    uint64_t r1 = infer_rows_stepped(in);
    o.beam = 1;
    ok = search_batch_prefix(&in, 1, &o, NS, src, slen, &pre, rg) == 0 && ok;
    int same = ok;
    for (int b = 0; b < NS; b++) {
        same &= ok && rb[b].nhyp == 1 && rb[b].hyp[0].n == 2 && same_result(&rb[b], &rg[b]);
        search_result_free(&rb[b]);
        search_result_free(&rg[b]);
    }
    test_ok(same, "beam 4 on a forced prefix: greedy search's hypotheses");
    test_ok(r1 - r0 == 3 * NS, "beam 4 on a forced prefix: one decoder row a sentence at each step (%llu rows, %d "
            "expected)", (unsigned long long)(r1 - r0), 3 * NS);
}

/* Greedy search ranking by logits (search_opts.ranks_only): greedy search's tokens G, without
 * log-probabilities for scores. */
static void run_ranks_only(struct infer *in, const struct search_result *g)
{
    const uint32_t *src[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b];
    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5, .ranks_only = 1};
    struct search_result r[NS];
    int ok = search_batch(&in, 1, &o, NS, src, slen, r) == 0, same = ok, raw = 0;
    for (int b = 0; ok && b < NS; b++) {
        const struct search_hyp *x = &r[b].hyp[0], *y = &g[b].hyp[0];
        same &= r[b].nhyp == 1 && x->n == y->n && !memcmp(x->ids, y->ids, x->n * sizeof *x->ids);
        raw |= x->logprob != y->logprob;
    }
    for (int b = 0; ok && b < NS; b++)
        search_result_free(&r[b]);
    test_ok(same, "greedy search ranking by logits: the tokens of greedy search");
    test_ok(raw, "greedy search ranking by logits: no log-sum-exp taken (its scores are not log-probabilities)");
}

static void run(struct backend *be, int pre_norm)
{
    const struct model_config c = {.vocab = 60, .max_len = 40};
    struct model *m = tiny_model(be, pre_norm, c.vocab, c.max_len, 3 + (uint64_t)pre_norm);
    test_ok(m != NULL, "model (pre_norm %d): %s", pre_norm, m ? "" : nmt_errmsg());
    if (!m)
        return;
    test_ok(make_eos_likely(be, m) == 0, "pre_norm %d: EOS made likelier than the most frequent output token",
            pre_norm);
    struct infer *in = infer_new(be, m, getenv("NOINV") ? 0 : 1, NMT_DTYPE_F32);
    test_ok(in != NULL, "infer_new: %s", in ? "" : nmt_errmsg());
    if (!in) {
        model_free(m);
        return;
    }
    const uint32_t *src[NS], *tgt[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b], tgt[b] = tgt_store[b];

    /* forced decoding equals the training forward, in one batch and alone */
    double lp[NS], lp1;
    test_ok(search_score(&in, 1, NS, src, slen, tgt, tlen, lp) == 0, "search_score: %s", nmt_errmsg());
    double worst = 0;
    int alone_same = 1;
    for (int b = 0; b < NS; b++) {
        double nll = train_nll(m, b), d = fabs(nll + lp[b]) / (fabs(nll) > 1 ? fabs(nll) : 1);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d > worst ? d : worst;
        if (search_score(&in, 1, 1, &src[b], &slen[b], &tgt[b], &tlen[b], &lp1) < 0 || lp1 != lp[b])
            alone_same = 0;
    }
    test_ok(worst < 1e-4, "pre_norm %d: forced decoding matches the training NLL (max rel diff %.3g)", pre_norm, worst);
    test_ok(alone_same, "pre_norm %d: forced decoding scores identical alone and in a batch", pre_norm);

    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    struct search_result g[NS], g1, bm[NS];
    test_ok(search_batch(&in, 1, &o, NS, src, slen, g) == 0, "greedy batch: %s", nmt_errmsg());
    int inv = 1, fmatch = 1, compared = 0;
    for (int b = 0; b < NS; b++) {
        if (search_batch(&in, 1, &o, 1, &src[b], &slen[b], &g1) < 0 || !same_result(&g[b], &g1))
            inv = 0;
        search_result_free(&g1);
        /* the reported log-probability is the forced decoding of the output (if it ended by itself) */
        int n = (int)g[b].hyp[0].n;
        const uint32_t *hy = g[b].hyp[0].ids;
        if (n + 1 < search_max_len(&o, slen[b], c.max_len)) {
            compared++;
            if (search_score(&in, 1, 1, &src[b], &slen[b], &hy, &n, &lp1) < 0 ||
                fabs(lp1 - g[b].hyp[0].logprob) > 1e-4 * (1 + fabs(lp1)))
                fmatch = 0;
        }
    }
    test_ok(inv, "pre_norm %d: greedy translations and scores identical alone and in a batch", pre_norm);
    test_ok(fmatch && compared >= NS / 2,
            "pre_norm %d: greedy log-probabilities equal forced decoding of the output (%d of %d compared: those "
            "that ended by themselves)", pre_norm, compared, NS);

    /* beam 4: batch invariant; scores never below greedy's; n-best sorted */
    o.beam = 4;
    o.nbest = 4;
    test_ok(search_batch(&in, 1, &o, NS, src, slen, bm) == 0, "beam batch: %s", nmt_errmsg());
    int binv = 1, better = 1, sorted = 1, lpen_ok = 1, lpen_n = 0, wsum = 1;
    for (int b = 0; b < NS; b++) {
        /* a score is the log-probability over the GNMT length penalty ((5 + length) / 6)^alpha,
         * the length counting EOS; the tokens' log-probabilities sum to the log-probability */
        for (int i = 0; i < bm[b].nhyp; i++) {
            const struct search_hyp *h = &bm[b].hyp[i];
            double want = h->logprob / pow((6.0 + h->n) / 6.0, o.alpha), sum = 0;
            lpen_n++;
            if (!(fabs(h->score - want) <= 1e-5 * (1 + fabs(want))))
                lpen_ok = 0;
            for (uint32_t j = 0; j <= h->n; j++)
                sum += (double)h->lps[j];
            wsum &= sum == h->logprob && h->lps[h->n] <= 0;
        }
        if (search_batch(&in, 1, &o, 1, &src[b], &slen[b], &g1) < 0 || !same_result(&bm[b], &g1))
            binv = 0;
        search_result_free(&g1);
        if (bm[b].nhyp < 1 || bm[b].hyp[0].score < g[b].hyp[0].score)
            better = 0;
        for (int i = 1; i < bm[b].nhyp; i++)
            if (bm[b].hyp[i].score > bm[b].hyp[i - 1].score)
                sorted = 0;
    }
    test_ok(binv, "pre_norm %d: beam 4 results identical alone and in a batch", pre_norm);
    test_ok(better, "pre_norm %d: beam 4 best scores never below greedy's", pre_norm);
    test_ok(sorted, "pre_norm %d: n-best lists sorted by score", pre_norm);
    test_ok(lpen_ok && lpen_n >= NS, "pre_norm %d: scores are log-probabilities over ((6 + n) / 6)^0.6 (%d hypotheses)",
            pre_norm, lpen_n);
    test_ok(wsum, "pre_norm %d: each hypothesis's token log-probabilities sum to its log-probability exactly", pre_norm);

    /* reserving memory for larger batches first (and in between) changes no result */
    int tl4[NS];
    for (int b = 0; b < NS; b++)
        tl4[b] = tlen[b] + 3;
    test_ok(search_reserve(&in, 1, &o, NS, slen, NULL) == 0 && search_reserve(&in, 1, &o, NS, slen, tl4) == 0 &&
                infer_reserve(in, 3 * NS, c.max_len, 4, c.max_len) == 0,
            "pre_norm %d: reserve: %s", pre_norm, nmt_errmsg());
    struct search_result br[NS];
    int rsame = search_batch(&in, 1, &o, NS, src, slen, br) == 0;
    for (int b = 0; rsame && b < NS; b++)
        rsame = same_result(&bm[b], &br[b]);
    test_ok(rsame, "pre_norm %d: beam 4 results identical after infer_reserve", pre_norm);
    if (rsame)
        for (int b = 0; b < NS; b++)
            search_result_free(&br[b]);
    test_ok(search_score(&in, 1, NS, src, slen, tgt, tlen, lp) == 0 && search_reserve(&in, 1, &o, NS, slen, NULL) == 0 &&
                search_score(&in, 1, 1, &src[1], &slen[1], &tgt[1], &tlen[1], &lp1) == 0 && lp1 == lp[1],
            "pre_norm %d: forced decoding identical after search_reserve", pre_norm);
    test_ok(infer_reserve(in, 0, 1, 1, 1) < 0 && strstr(nmt_errmsg(), "empty batch") != NULL,
            "pre_norm %d: infer_reserve refuses an empty shape", pre_norm);
    run_prefix(in, g, c.max_len, pre_norm);
    run_attention(in, pre_norm);
    run_early_end(in, pre_norm);
    run_one_row(in);
    run_ranks_only(in, g);
    for (int b = 0; b < NS; b++) {
        search_result_free(&g[b]);
        search_result_free(&bm[b]);
    }
    infer_free(in);
    model_free(m);
}

/* Greedy decoding of sentence I by the ensemble IN[0..2), the whole distribution computed here:
 * the ids into IDS (at most LIMIT - 1), their count returned, the log-probability in *LP; -1 on error. */
static int brute_greedy(struct infer **in, int i, int limit, uint32_t *ids, double *lp)
{
    const uint32_t *src = src_store[i];
    int V = infer_config(in[0])->vocab, n = 0;
    float *l[2] = {malloc((size_t)V * sizeof(float)), malloc((size_t)V * sizeof(float))};
    double *p = malloc((size_t)V * sizeof *p);
    int32_t tok = NMT_BOS;
    *lp = 0;
    if (!l[0] || !l[1] || !p || infer_encode(in[0], 1, &src, &slen[i], 1, limit) < 0 ||
        infer_encode(in[1], 1, &src, &slen[i], 1, limit) < 0)
        n = -1;
    for (int t = 0; n >= 0; t++) {
        for (int v = 0; v < V; v++)
            p[v] = 0;
        for (int m = 0; m < 2 && n >= 0; m++) {
            if (infer_step(in[m], &tok, 0, NULL, NULL, NULL, NULL) < 0 || infer_logits(in[m], l[m]) < 0) {
                n = -1;
                break;
            }
            double mx = l[m][0], sum = 0;
            for (int v = 1; v < V; v++)
                mx = l[m][v] > mx ? l[m][v] : mx;
            for (int v = 0; v < V; v++)
                sum += exp(l[m][v] - mx);
            for (int v = 0; v < V; v++)
                p[v] += exp(l[m][v] - mx) / sum / 2;
        }
        if (n < 0)
            break;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (p[v] > p[best])
                best = v;
        if (t == limit - 1) /* the length limit: EOS without its probability */
            break;
        *lp += log(p[best]);
        if (best == NMT_EOS)
            break;
        ids[n++] = (uint32_t)best;
        tok = best;
    }
    free(l[0]);
    free(l[1]);
    free(p);
    return n;
}

static void run_ensemble(struct backend *be)
{
    struct model *a = tiny_model(be, 0, 60, 40, 3), *b = tiny_model(be, 1, 60, 30, 4), *c = tiny_model(be, 0, 61, 40, 5);
    struct infer *ia = a ? infer_new(be, a, 1, NMT_DTYPE_F32) : NULL, *ia2 = a ? infer_new(be, a, 1, NMT_DTYPE_F32) : NULL;
    struct infer *ib = b ? infer_new(be, b, 1, NMT_DTYPE_F32) : NULL, *ic = c ? infer_new(be, c, 1, NMT_DTYPE_F32) : NULL;
    test_ok(ia && ia2 && ib && ic, "ensemble members: %s", nmt_errmsg());
    if (!ia || !ia2 || !ib || !ic)
        goto out;
    const uint32_t *src[NS], *tgt[NS];
    for (int i = 0; i < NS; i++)
        src[i] = src_store[i], tgt[i] = tgt_store[i];
    struct infer *aa[2] = {ia, ia2}, *ab[2] = {ia, ib}, *ac[2] = {ia, ic};

    /* a model with itself: the same translations and scores as alone */
    struct search_opts o = {.beam = 4, .nbest = 4, .alpha = 0.6, .len_a = 1, .len_b = 10};
    struct search_result one[NS], two[NS];
    int ok = search_batch(&ia, 1, &o, NS, src, slen, one) == 0 && search_batch(aa, 2, &o, NS, src, slen, two) == 0;
    test_ok(ok, "ensemble of a model with itself: %s", ok ? "" : nmt_errmsg());
    int same = ok, close = ok;
    for (int i = 0; ok && i < NS; i++) {
        same = same && one[i].nhyp == two[i].nhyp;
        for (int h = 0; same && h < one[i].nhyp; h++) {
            const struct search_hyp *x = &one[i].hyp[h], *y = &two[i].hyp[h];
            same = x->n == y->n && (!x->n || !memcmp(x->ids, y->ids, x->n * sizeof *x->ids));
            close = close && fabs(x->logprob - y->logprob) < 1e-4;
        }
        search_result_free(&one[i]);
        search_result_free(&two[i]);
    }
    test_ok(same, "a model with itself: the same beam 4 n-best translations as alone");
    test_ok(close, "a model with itself: the same log-probabilities as alone (1e-4)");
    double l1[NS], l2[NS], lb[NS], le[NS];
    ok = search_score(&ia, 1, NS, src, slen, tgt, tlen, l1) == 0 && search_score(aa, 2, NS, src, slen, tgt, tlen, l2) == 0;
    close = ok;
    for (int i = 0; ok && i < NS; i++)
        close = close && fabs(l1[i] - l2[i]) < 1e-5 * (1 + fabs(l1[i]));
    test_ok(close, "a model with itself: forced decoding scores as alone");

    /* two models: the probability of the end of sentence after nothing is the mean of theirs */
    int zero[NS] = {0};
    ok = search_score(&ia, 1, NS, src, slen, tgt, zero, l1) == 0 && search_score(&ib, 1, NS, src, slen, tgt, zero, lb) == 0 &&
         search_score(ab, 2, NS, src, slen, tgt, zero, le) == 0;
    close = ok;
    for (int i = 0; ok && i < NS; i++)
        close = close && fabs(le[i] - log((exp(l1[i]) + exp(lb[i])) / 2)) < 1e-5;
    test_ok(close, "two models: log p(EOS) is the log of the members' mean probability");

    /* two models: batch invariance, and search scores equal forced-decoding scores */
    o = (struct search_opts){.beam = 12, .nbest = 12, .alpha = 0, .len_a = 1, .len_b = 20};
    ok = search_batch(ab, 2, &o, NS, src, slen, two) == 0;
    test_ok(ok, "ensemble of two models, beam 12: %s", ok ? "" : nmt_errmsg());
    int binv = ok, cons = ok, lim = ok, checked = 0;
    for (int i = 0; ok && i < NS; i++) {
        struct search_result r1;
        if (search_batch(ab, 2, &o, 1, &src[i], &slen[i], &r1) < 0 || !same_result(&two[i], &r1))
            binv = 0;
        else
            search_result_free(&r1);
        for (int h = 0; h < two[i].nhyp; h++) {
            const struct search_hyp *x = &two[i].hyp[h];
            const uint32_t *hy = x->ids;
            int n = (int)x->n;
            double lp;
            if (n + 1 > search_max_len(&o, slen[i], 30))
                lim = 0;
            if (n + 1 == search_max_len(&o, slen[i], 30))
                continue; /* ended by the limit: no log p(EOS) in its score */
            checked++;
            if (search_score(ab, 2, 1, &src[i], &slen[i], &hy, &n, &lp) < 0 ||
                fabs(lp - x->logprob) > 1e-4 * (1 + fabs(lp)))
                cons = 0;
        }
        search_result_free(&two[i]);
    }
    test_ok(binv, "two models: beam 12 results identical alone and in a batch");
    test_ok(cons && checked > 0, "two models: the log-probability of each of %d hypotheses ended by EOS equals its "
            "forced-decoding score", checked);
    test_ok(lim, "two models: outputs within the smaller max_len");

    /* greedy: the same as computing the ensemble's whole distribution at every step */
    o = (struct search_opts){.beam = 1, .nbest = 1, .alpha = 0, .len_a = 1, .len_b = 20};
    int gsame = 1;
    for (int i = 0; i < NS; i++) {
        uint32_t ids[64];
        double lp;
        struct search_result r1;
        int lmax = search_max_len(&o, slen[i], 30), n = brute_greedy(ab, i, lmax, ids, &lp);
        if (n < 0 || search_batch(ab, 2, &o, 1, &src[i], &slen[i], &r1) < 0) {
            gsame = 0;
            break;
        }
        if (r1.hyp[0].n != (uint32_t)n || (n && memcmp(r1.hyp[0].ids, ids, (size_t)n * sizeof *ids)) ||
            fabs(r1.hyp[0].logprob - lp) > 1e-4 * (1 + fabs(lp)))
            gsame = 0;
        search_result_free(&r1);
    }
    test_ok(gsame, "two models: greedy search equals the argmax of the whole mean distribution at every step");
    test_ok(search_batch(ac, 2, &o, 1, src, slen, two) < 0 && strstr(nmt_errmsg(), "vocabulary") != NULL,
            "two models of different vocabularies: an error (%s)", nmt_errmsg());
    test_ok(search_score(ab, 0, 1, src, slen, tgt, tlen, l1) < 0, "no model: an error (%s)", nmt_errmsg());
out:
    infer_free(ia);
    infer_free(ia2);
    infer_free(ib);
    infer_free(ic);
    model_free(a);
    model_free(b);
    model_free(c);
}

/* int8 linear layers (infer_new with NMT_DTYPE_INT8, the output projection in int8 too or not):
 * forced-decoding scores near float32's, greedy and beam results identical alone and in a batch
 * (with and without INVARIANT), and a backend without linear_pack_q refused by name. */
static void run_int8(struct backend *be)
{
    const struct model_config c = {.vocab = 60, .max_len = 40};
    struct model *m = tiny_model(be, 0, c.vocab, c.max_len, 11);
    struct infer *f = m ? infer_new(be, m, 1, NMT_DTYPE_F32) : NULL;
    test_ok(m && f, "int8: model and float32 inference: %s", m && f ? "" : nmt_errmsg());
    if (!m || !f) {
        model_free(m);
        return;
    }
    const uint32_t *src[NS], *tgt[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b], tgt[b] = tgt_store[b];
    double lpf[NS], lpq[NS], worst = 0;
    int differ = 0;
    for (int inv = 1; inv >= 0; inv--) {
        /* invariant: the output projection in int8 too; batch-variant: float32 */
        struct infer *q = infer_new(be, m, inv, NMT_DTYPE_INT8 | (inv ? INFER_OUTPUT_TOO : 0));
        test_ok(q != NULL, "int8 (invariant %d): infer_new: %s", inv, q ? "" : nmt_errmsg());
        if (!q)
            break;
        test_ok(search_score(&f, 1, NS, src, slen, tgt, tlen, lpf) == 0 &&
                    search_score(&q, 1, NS, src, slen, tgt, tlen, lpq) == 0,
                "int8 (invariant %d): search_score: %s", inv, nmt_errmsg());
        for (int b = 0; b < NS; b++) {
            double d = fabs(lpq[b] - lpf[b]) / (fabs(lpf[b]) > 1 ? fabs(lpf[b]) : 1);
            worst = d > worst || isnan(d) ? d : worst;
            differ += lpq[b] != lpf[b];
        }
        struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
        for (int beam = 1; beam <= 4; beam += 3) {
            o.beam = o.nbest = beam;
            struct search_result all[NS], one;
            int same = search_batch(&q, 1, &o, NS, src, slen, all) == 0;
            for (int b = 0; same && b < NS; b++) {
                same = search_batch(&q, 1, &o, 1, &src[b], &slen[b], &one) == 0 && same_result(&all[b], &one);
                search_result_free(&one);
            }
            test_ok(same, "int8 (invariant %d): beam %d results identical alone and in a batch", inv, beam);
            for (int b = 0; same && b < NS; b++)
                search_result_free(&all[b]);
        }
        infer_free(q);
    }
    test_ok(worst < 0.05 && differ > 0,
            "int8: forced-decoding log-probabilities within %.3g of float32's (relative; bound 0.05), %d of %d differ",
            worst, differ, 2 * NS);
    struct nmt_backend saved = be->ops;
    be->ops.linear_pack_q = NULL;
    struct infer *none = infer_new(be, m, 1, NMT_DTYPE_INT8);
    test_ok(!none && strstr(nmt_errmsg(), "backend cpu has no int8 linear layer"),
            "int8: a backend without linear_pack_q is refused by name: '%s'", nmt_errmsg());
    infer_free(none);
    be->ops = saved;
    infer_free(f);
    model_free(m);
}

/* infer_new_shared: a state on a second context of the plugin over the first one's model and
 * packed weights decodes and scores as the first one does (float32 and int8); a context of its
 * own, or a plugin without the share slot, is refused by name. */
static void run_shared(struct backend *be)
{
    struct nmt_backend_opts bo = {sizeof bo, 1, 0};
    struct backend *be2 = backend_open("cpu", &bo);
    const struct model_config c = {.vocab = 60, .max_len = 40};
    struct model *m = be2 ? tiny_model(be, 0, c.vocab, c.max_len, 13) : NULL;
    test_ok(m != NULL, "shared: a second context and a model: %s", m ? "" : nmt_errmsg());
    const uint32_t *src[NS], *tgt[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b], tgt[b] = tgt_store[b];
    for (int q = 0; m && q < 2; q++) {
        uint32_t prec = q ? NMT_DTYPE_INT8 : NMT_DTYPE_F32;
        struct infer *own = infer_new(be, m, 1, prec), *sh = own ? infer_new_shared(be2, own) : NULL;
        test_ok(own && sh, "shared (%s): infer_new_shared: %s", infer_precision_name(prec), sh ? "" : nmt_errmsg());
        double lo[NS], ls[NS];
        int same = own && sh && search_score(&own, 1, NS, src, slen, tgt, tlen, lo) == 0 &&
                   search_score(&sh, 1, NS, src, slen, tgt, tlen, ls) == 0 && !memcmp(lo, ls, sizeof lo);
        struct search_opts o = {.beam = 4, .nbest = 4, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
        struct search_result ro[NS], rs[NS];
        int ok = same && search_batch(&own, 1, &o, NS, src, slen, ro) == 0;
        if (ok && search_batch(&sh, 1, &o, NS, src, slen, rs) == 0) {
            for (int b = 0; b < NS; b++) {
                same &= same_result(&ro[b], &rs[b]);
                search_result_free(&rs[b]);
            }
        } else {
            same = 0;
        }
        for (int b = 0; ok && b < NS; b++)
            search_result_free(&ro[b]);
        test_ok(same, "shared (%s): the same scores and beam-4 results as the owner's", infer_precision_name(prec));
        struct infer *self = own ? infer_new_shared(be, own) : NULL;
        test_ok(!self && strstr(nmt_errmsg(), "cannot read the buffers of another"),
                "shared (%s): not over a state of the same context: '%s'", infer_precision_name(prec), nmt_errmsg());
        be2->ops.share = NULL;
        struct infer *none = own ? infer_new_shared(be2, own) : NULL;
        test_ok(!none && strstr(nmt_errmsg(), "backend cpu cannot read the buffers of another of its contexts"),
                "shared (%s): a plugin without share is refused by name: '%s'", infer_precision_name(prec), nmt_errmsg());
        be2->ops.share = be->ops.share;
        infer_free(sh);
        infer_free(own);
    }
    model_free(m);
    backend_close(be2);
}

/* Scores and beam-2 results of IN on the first DS test sentences into LP and R; 0 or -1. */
#define DS 3
static int decode_all(struct infer *in, double *lp, struct search_result *r)
{
    const uint32_t *src[DS], *tgt[DS];
    for (int b = 0; b < DS; b++)
        src[b] = src_store[b], tgt[b] = tgt_store[b];
    struct search_opts o = {.beam = 2, .nbest = 2, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    return search_score(&in, 1, DS, src, slen, tgt, tlen, lp) == 0 && search_batch(&in, 1, &o, DS, src, slen, r) == 0
               ? 0
               : -1;
}

/* INFER_DISCARD: the float32 weights of the packed layers given back as they are packed (a model
 * whose feed-forward weights and embedding have 1 MiB or more: the embedding, which is still read,
 * must be kept), the same results as without; the model then refuses what reads all its weights,
 * until they are set again. */
static void run_discard(struct backend *be)
{
    struct model_config c = {.vocab = 1100, .d_model = 256, .heads = 4, .ff = 1024, .enc_layers = 1, .dec_layers = 1,
                             .max_len = 40, .ln_eps = 1e-5f};
    struct model *m = model_new(be, &c, 0);
    size_t P = m ? model_num_params(m) : 0;
    float *w = malloc((P ? P : 1) * sizeof *w);
    test_ok(m && w && model_init(m, 5) == 0 && model_get_params(m, w) == 0, "discard: a model of %zu parameters", P);
    for (int q = 0; m && w && q < 2; q++) {
        uint32_t prec = q ? NMT_DTYPE_INT8 : NMT_DTYPE_F32;
        const char *pn = infer_precision_name(prec);
        double l0[DS], l1[DS];
        struct search_result r0[DS], r1[DS];
        struct infer *ref = infer_new(be, m, INFER_INVARIANT, prec);
        int ok = ref && decode_all(ref, l0, r0) == 0;
        infer_free(ref);
        struct infer *in = ok ? infer_new(be, m, INFER_INVARIANT | INFER_DISCARD, prec) : NULL;
        test_ok(in && model_weights_discarded(m), "discard (%s): the packed layers' float32 weights given back: %s", pn,
                in ? "" : nmt_errmsg());
        int same = in && decode_all(in, l1, r1) == 0 && !memcmp(l0, l1, sizeof l0);
        for (int b = 0; in && b < DS; b++) {
            same &= same_result(&r0[b], &r1[b]);
            search_result_free(&r1[b]);
        }
        for (int b = 0; ok && b < DS; b++)
            search_result_free(&r0[b]);
        test_ok(same, "discard (%s): the same scores and beam-2 results as with the weights kept", pn);
        struct model_loss L;
        struct infer *again = infer_new(be, m, INFER_INVARIANT, prec);
        test_ok(!again && strstr(nmt_errmsg(), "weights were partly given back"),
                "discard (%s): a second state over the model is refused: '%s'", pn, nmt_errmsg());
        test_ok(model_get_params(m, w) < 0 && strstr(nmt_errmsg(), "partly given back"),
                "discard (%s): model_get_params refused: '%s'", pn, nmt_errmsg());
        struct batch_record br = {0};
        test_ok(model_score(m, &br, NULL, &L) < 0 && strstr(nmt_errmsg(), "partly given back"),
                "discard (%s): model_score refused: '%s'", pn, nmt_errmsg());
        infer_free(in);
        test_ok(model_init(m, 5) == 0 && !model_weights_discarded(m) && model_get_params(m, w) == 0,
                "discard (%s): setting the weights again makes the model whole", pn);
    }
    test_ok(m && w && model_discard_weight(m, w, 4) < 0 && strstr(nmt_errmsg(), "not all in the model"),
            "discard: a range outside the weights is refused: '%s'", nmt_errmsg());
    nmt_seterr("%s", ""); /* the checks after this one print the last error */
    free(w);
    model_free(m);
}

/* The backend's linear_rows, counting its calls (run_load_direct). */
static int (*real_linear_rows)(nmt_bctx *, float *, const void *, const int32_t *, int);
static int linear_rows_calls;
static int counting_linear_rows(nmt_bctx *ctx, float *out, const void *packed, const int32_t *rows, int n)
{
    linear_rows_calls++;
    return real_linear_rows(ctx, out, packed, rows, n);
}

/* infer_load with INFER_DISCARD: the products' weights packed straight from the checkpoint's bytes
 * (model_load_except: never in the model), the checkpoint consumed or not, the output projection
 * tied to the embedding or not: the same scores and beam-2 results as a state over the whole model,
 * whose weights were saved to that checkpoint, made without the backend's linear_rows. The output
 * projection (float32 in both precisions) tied to the embedding is given back too: the embedding's
 * rows are read from its packed copy (linear_rows). */
static void run_load_direct(struct backend *be)
{
    real_linear_rows = be->ops.linear_rows;
    char path[64];
    snprintf(path, sizeof path, "/tmp/nmt-test-direct-%d.ckpt", (int)getpid());
    for (int v = 0; v < 8; v++) {
        int untied = v & 1, consume = (v >> 1) & 1;
        uint32_t prec = v & 4 ? NMT_DTYPE_INT8 : NMT_DTYPE_F32;
        struct model_config c = {.vocab = 1100, .d_model = 256, .heads = 4, .ff = 1024, .enc_layers = 1,
                                 .dec_layers = 1, .max_len = 40, .ln_eps = 1e-5f,
                                 .tie = untied ? MODEL_TIE_NONE : MODEL_TIE_ALL};
        struct model *m = model_new(be, &c, 0), *m2 = NULL;
        struct st_writer *w = st_writer_new();
        int ok = m && w && model_init(m, 9) == 0 && model_save(m, w, 0) == 0 && st_writer_write(w, path) == 0;
        st_writer_free(w);
        double l0[DS], l1[DS];
        struct search_result r0[DS], r1[DS];
        be->ops.linear_rows = NULL; /* the reference reads the embedding's float32 table */
        struct infer *ref = ok ? infer_new(be, m, INFER_INVARIANT, prec) : NULL;
        ok = ref && decode_all(ref, l0, r0) == 0;
        be->ops.linear_rows = real_linear_rows ? counting_linear_rows : NULL;
        linear_rows_calls = 0;
        struct st_file *f = ok ? st_read(path) : NULL;
        struct infer_load_opts o = {.cfg = &c, .path = path, .flags = INFER_INVARIANT | INFER_DISCARD, .precision = prec};
        struct infer *in = f ? infer_load(be, NULL, &f, consume, &o, &m2) : NULL;
        int dec = ok && in && decode_all(in, l1, r1) == 0;
        int rows_read = !untied && real_linear_rows; /* the output projection is packed in float32 */
        int same = dec && model_weights_discarded(m2) && (consume ? !f : f != NULL) && !memcmp(l0, l1, sizeof l0) &&
                   (linear_rows_calls > 0) == rows_read;
        for (int b = 0; b < DS; b++) {
            if (dec)
                same &= same_result(&r0[b], &r1[b]), search_result_free(&r1[b]);
            if (ok)
                search_result_free(&r0[b]);
        }
        test_ok(same, "infer_load (%s, output projection %s, checkpoint %s): packed from the file's bytes, the "
                "results of the whole model%s (%s)", infer_precision_name(prec), untied ? "untied" : "tied",
                consume ? "consumed" : "kept", rows_read ? ", the embedding read from the packed copy" : "",
                in ? "" : nmt_errmsg());
        infer_free(in);
        infer_free(ref);
        model_free(m2);
        model_free(m);
        st_free(f);
    }
    be->ops.linear_rows = real_linear_rows;
    unlink(path);
}

/* infer_keep_logits(in, 0): the top-k of 480 rows over 1,100 pieces, whose logits are computed a few
 * rows at a time (472, then 8), are those taken from every row's logits kept, bit for bit, at each of
 * three steps; infer_logits then refuses the step. */
static void run_keep_logits(struct backend *be)
{
    enum { B = 120, K = 4, R = B * K, TOPK = 8, STEPS = 3, V = 1100 };
    struct model_config c = {.vocab = V, .d_model = 32, .heads = 2, .ff = 64, .enc_layers = 1, .dec_layers = 1,
                             .max_len = 40, .ln_eps = 1e-5f};
    struct model *m = model_new(be, &c, 0);
    struct infer *in = m && model_init(m, 7) == 0 ? infer_new(be, m, INFER_INVARIANT, NMT_DTYPE_F32) : NULL;
    const uint32_t *src[B];
    int len[B];
    for (int b = 0; b < B; b++) {
        src[b] = src_store[b % NS];
        len[b] = slen[b % NS];
    }
    static int32_t tok[R], idx[2][STEPS][R * TOPK];
    static float vals[2][STEPS][R * TOPK], logits[(size_t)R * V];
    int ok = in != NULL;
    for (int keep = 1; ok && keep >= 0; keep--) {
        infer_keep_logits(in, keep);
        ok = infer_encode(in, B, src, len, K, STEPS) == 0;
        for (int t = 0; ok && t < STEPS; t++) {
            for (int r = 0; r < R; r++)
                tok[r] = t == 0 ? NMT_BOS : 4 + (r * 7 + t) % 50;
            ok = infer_step(in, tok, TOPK, vals[keep][t], idx[keep][t], NULL, NULL) == 0;
        }
    }
    test_ok(ok && !memcmp(vals[0], vals[1], sizeof vals[0]) && !memcmp(idx[0], idx[1], sizeof idx[0]),
            "keep_logits 0: the top-%d of %d rows over %d pieces as with every row's logits kept: %s", TOPK, R, V,
            ok ? "" : nmt_errmsg());
    test_ok(ok && infer_logits(in, logits) < 0 && strstr(nmt_errmsg(), "not kept"),
            "keep_logits 0: infer_logits refuses the step: '%s'", nmt_errmsg());
    nmt_seterr("%s", "");
    infer_free(in);
    model_free(m);
}

/* The self-attention caches read through rows (attention_forward_rows: beam search moves indices,
 * not cache rows) and moved row by row (the host's way without the slot) give the same results:
 * beams 2 and 4 with all their best, over sentences that end at different steps, pre-norm or not. */
static void run_cache_rows(struct backend *be)
{
    const uint32_t *src[NS];
    for (int b = 0; b < NS; b++)
        src[b] = src_store[b];
    for (int pre_norm = 0; pre_norm < 2; pre_norm++) {
        struct model *m = tiny_model(be, pre_norm, 60, 40, 11 + (uint64_t)pre_norm);
        int ok = m && make_eos_likely(be, m) == 0, same = ok;
        int (*rows)(nmt_bctx *, float *, const float *, const float *, const float *, const struct nmt_attn_args *,
                    const int32_t *, int64_t) = be->ops.attention_forward_rows;
        for (int beam = 2; ok && beam <= 4; beam += 2) {
            struct search_opts o = {.beam = beam, .nbest = beam, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
            struct search_result r[2][NS];
            for (int v = 0; v < 2; v++) {
                be->ops.attention_forward_rows = v ? NULL : rows;
                struct infer *in = infer_new(be, m, 1, NMT_DTYPE_F32);
                ok &= in && search_batch(&in, 1, &o, NS, src, slen, r[v]) == 0;
                infer_free(in);
            }
            for (int b = 0; ok && b < NS; b++)
                same &= same_result(&r[0][b], &r[1][b]);
            for (int v = 0; ok && v < 2; v++)
                for (int b = 0; b < NS; b++)
                    search_result_free(&r[v][b]);
        }
        be->ops.attention_forward_rows = rows;
        test_ok(ok && same && rows, "pre_norm %d: beam 2 and 4 (all their best): the caches read through rows give the "
                                    "results of caches moved row by row (%s)", pre_norm, ok ? "" : nmt_errmsg());
        model_free(m);
    }
}

/* The encoder in chunks, each padded to its own longest sentence, and the cross keys and values read
 * through rows (attention_forward_rows) or gathered into the batch's layout (without the slot): 70
 * sentences of 1 to 40 tokens, in increasing and in mixed order, translated together give each
 * sentence's translation alone, bit for bit; greedy and beam 3. */
#define NC 70
typedef int (*attn_rows_fn)(nmt_bctx *, float *, const float *, const float *, const float *,
                            const struct nmt_attn_args *, const int32_t *, int64_t);
static void run_enc_chunks(struct backend *be)
{
    static uint32_t store[NC][40];
    const uint32_t *src[NC], *mixed[NC];
    int len[NC], mlen[NC];
    uint64_t s = 7;
    for (int b = 0; b < NC; b++) {
        len[b] = 1 + b * 39 / (NC - 1);
        for (int j = 0; j < 40; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            store[b][j] = 4 + (uint32_t)((s >> 33) % 56);
        }
        src[b] = store[b];
    }
    for (int b = 0; b < NC; b++) { /* 17 and 70 coprime: a permutation */
        mixed[b] = store[b * 17 % NC];
        mlen[b] = len[b * 17 % NC];
    }
    struct model *m = tiny_model(be, 0, 60, 64, 21);
    int ok = m && make_eos_likely(be, m) == 0, same = ok, ended = 0;
    attn_rows_fn rows = be->ops.attention_forward_rows;
    for (int beam = 1; ok && beam <= 3; beam += 2) {
        struct search_opts o = {.beam = beam, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
        struct search_result alone[NC], r[NC];
        struct infer *in = infer_new(be, m, 1, NMT_DTYPE_F32);
        int na = 0;
        for (; in && na < NC && search_batch(&in, 1, &o, 1, &src[na], &len[na], &alone[na]) == 0; na++)
            ended += alone[na].hyp[0].n < (uint32_t)len[na] + 4;
        infer_free(in);
        ok &= na == NC;
        for (int v = 0; ok && v < 4; v++) { /* v & 1: without the slot; v & 2: mixed order */
            be->ops.attention_forward_rows = v & 1 ? NULL : rows;
            struct infer *iv = infer_new(be, m, 1, NMT_DTYPE_F32);
            ok &= iv && search_batch(&iv, 1, &o, NC, v & 2 ? mixed : src, v & 2 ? mlen : len, r) == 0;
            for (int b = 0; ok && b < NC; b++)
                same &= same_result(&r[b], &alone[v & 2 ? b * 17 % NC : b]);
            for (int b = 0; ok && b < NC; b++)
                search_result_free(&r[b]);
            infer_free(iv);
        }
        be->ops.attention_forward_rows = rows;
        for (int b = 0; b < na; b++)
            search_result_free(&alone[b]);
    }
    test_ok(ok && same && rows && ended > 10, "encoder chunks, cross keys through rows or gathered: %d sentences of 1 "
            "to 40 tokens together, sorted or mixed, give their translations alone (greedy, beam 3; %d ended early) %s",
            NC, ended, ok ? "" : nmt_errmsg());
    model_free(m);
}

/* A feed of N sentences for search_stream, at most GIVE at a time, in the order given; the results
 * land in RES by key. */
struct feed_arg {
    const uint32_t *const *src;
    const int *len;
    int n, next, give, puts;
    struct search_result *res;
};

static int feed_take(void *arg, int n, const uint32_t **src, int *len, size_t *key)
{
    struct feed_arg *f = arg;
    int k = 0;
    for (; k < n && k < f->give && f->next < f->n; k++, f->next++) {
        src[k] = f->src[f->next];
        len[k] = f->len[f->next];
        key[k] = (size_t)f->next;
    }
    return k;
}

static int feed_put(void *arg, size_t key, struct search_result *r)
{
    struct feed_arg *f = arg;
    f->res[key] = *r;
    f->puts++;
    return 0;
}

/* Continuous batching (search_stream): 70 sentences of 1 to 40 tokens in mixed order, streamed
 * through windows of 1 to 70 sentences, a few or all given at a time, give search_batch's results
 * bit for bit: greedy search of one model, pre-norm or not, with rankings by logits, and of an
 * ensemble; beam 3 with all its best, beam 4 ending early and searching on, beam 2 of the ensemble. */
static void run_stream(struct backend *be)
{
    static uint32_t store[NC][40];
    const uint32_t *src[NC];
    int len[NC];
    uint64_t s = 5;
    for (int b = 0; b < NC; b++) { /* 17 and 70 coprime: lengths in mixed order */
        len[b] = 1 + (b * 17 % NC) * 39 / (NC - 1);
        for (int j = 0; j < 40; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            store[b][j] = 4 + (uint32_t)((s >> 33) % 56);
        }
        src[b] = store[b];
    }
    struct model *m[2] = {tiny_model(be, 0, 60, 64, 31), tiny_model(be, 1, 60, 64, 32)};
    int ok = m[0] && m[1] && make_eos_likely(be, m[0]) == 0 && make_eos_likely(be, m[1]) == 0, same = ok, runs = 0;
    int ended = 0;
    struct infer *in[2] = {NULL, NULL};
    for (int i = 0; ok && i < 2; i++)
        ok &= (in[i] = infer_new(be, m[i], 1, NMT_DTYPE_F32)) != NULL;
    /* v: 0, 1 each model alone, 2 with ranks only, 3 the ensemble; 4 beam 3, all its best; 5, 6 beam
     * 4 ending early, searching on; 7 beam 2 of the ensemble */
    static const int beams[] = {1, 1, 1, 1, 3, 4, 4, 2};
    for (int v = 0; ok && v < 8; v++) {
        struct search_opts o = {.beam = beams[v], .nbest = v == 4 ? 3 : 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5,
                                .ranks_only = v == 2, .exhaustive = v == 6};
        struct infer *ms[2] = {in[v == 1 || v == 5], in[1]};
        int nin = v == 3 || v == 7 ? 2 : 1;
        struct search_result want[NC], got[NC];
        ok &= search_batch(ms, nin, &o, NC, src, len, want) == 0;
        for (int b = 0; ok && b < NC && v == 0; b++)
            ended += want[b].hyp[0].n < (uint32_t)len[b] + 4;
        static const int windows[][2] = {{1, 1}, {5, 3}, {16, 100}, {70, 7}, {70, 100}};
        for (int w = 0; ok && w < 5; w++) {
            struct feed_arg fa = {src, len, NC, 0, windows[w][1], 0, got};
            struct search_feed f = {feed_take, feed_put, &fa};
            ok &= search_stream(ms, nin, &o, windows[w][0], 40, &f) == 0 && fa.puts == NC;
            for (int b = 0; ok && b < NC; b++)
                same &= same_result(&want[b], &got[b]);
            for (int b = 0; b < fa.puts; b++)
                search_result_free(&got[b]);
            runs += ok;
        }
        for (int b = 0; ok && b < NC; b++)
            search_result_free(&want[b]);
    }
    test_ok(ok && same && runs == 40 && ended > 10,
            "stream: %d sentences through windows of 1 to %d give the batch's results bit for bit (greedy: one model, "
            "pre-norm or not, ranks only, an ensemble; beam 2 to 4, n-best, early end or not; %d runs; %d ended "
            "early) %s", NC, NC, runs, ended, ok ? "" : nmt_errmsg());
    /* a sentence longer than the stream was opened for, beam search: refused */
    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    struct search_result got[NC];
    struct feed_arg fa = {src, len, NC, 0, 100, 0, got};
    struct search_feed f = {feed_take, feed_put, &fa};
    int rc = ok ? search_stream(in, 1, &o, 8, 20, &f) : 0;
    test_ok(rc < 0 && strstr(nmt_errmsg(), "prepared"), "stream: a source longer than prepared is refused: %s",
            nmt_errmsg());
    for (int b = 0; b < fa.puts; b++)
        search_result_free(&got[b]);
    o.attention = 1;
    test_ok(ok && search_stream(in, 1, &o, 8, 40, &f) < 0 && strstr(nmt_errmsg(), "without attention"),
            "stream: a search keeping the attention refused: %s", nmt_errmsg());
    for (int i = 0; i < 2; i++) {
        infer_free(in[i]);
        model_free(m[i]);
    }
}

int main(void)
{
    struct nmt_backend_opts bo = {sizeof bo, 2, 0};
    struct backend *be = backend_open("cpu", &bo);
    test_ok(be != NULL, "cpu backend: %s", be ? "" : nmt_errmsg());
    if (!be)
        return test_done();
    make_data(60);
    test_ok(be->ops.gemm_rowinv != NULL, "# the cpu backend's row-invariant product (gemm_rowinv)");
    run(be, 0);
    run(be, 1);
    run_ensemble(be);
    run_int8(be);
    run_shared(be);
    run_discard(be);
    run_load_direct(be);
    run_keep_logits(be);
    run_cache_rows(be);
    run_enc_chunks(be);
    run_stream(be);
    /* the host's fallback for a backend without gemm_rowinv: products on blocks of 8 rows */
    be->ops.gemm_rowinv = NULL;
    test_ok(1, "# without gemm_rowinv (fixed row blocks)");
    run(be, 0);
    run(be, 1);
    backend_close(be);
    return test_done();
}
