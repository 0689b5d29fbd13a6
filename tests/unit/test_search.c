/* test_search.c: inference (infer.c) and search (search.c) on the cpu backend with a randomly
 * initialised model: forced-decoding scores against the training forward (model_step) per sentence,
 * batch invariance of translations and scores, greedy equal to beam 1, beam scores not below
 * greedy's, and that the score of a translation matches its forced decoding. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "infer.h"
#include "model.h"
#include "search.h"
#include "util.h"

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
            (x->n && memcmp(x->ids, y->ids, x->n * sizeof *x->ids)))
            return 0;
    }
    return 1;
}

static void run(struct backend *be, int pre_norm)
{
    struct model_config c;
    memset(&c, 0, sizeof c);
    c.vocab = 60;
    c.d_model = 32;
    c.heads = 4;
    c.ff = 48;
    c.enc_layers = 2;
    c.dec_layers = 2;
    c.pre_norm = pre_norm;
    c.max_len = 40;
    c.ln_eps = 1e-5f;
    struct model *m = model_new(be, &c, 0);
    test_ok(m && model_init(m, 3 + (uint64_t)pre_norm) == 0, "model (pre_norm %d): %s", pre_norm, m ? "" : nmt_errmsg());
    if (!m)
        return;
    struct infer *in = infer_new(be, m, getenv("NOINV") ? 0 : 1);
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
    test_ok(search_score(in, NS, src, slen, tgt, tlen, lp) == 0, "search_score: %s", nmt_errmsg());
    double worst = 0;
    int alone_same = 1;
    for (int b = 0; b < NS; b++) {
        double nll = train_nll(m, b), d = fabs(nll + lp[b]) / (fabs(nll) > 1 ? fabs(nll) : 1);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d > worst ? d : worst;
        if (search_score(in, 1, &src[b], &slen[b], &tgt[b], &tlen[b], &lp1) < 0 || lp1 != lp[b])
            alone_same = 0;
    }
    test_ok(worst < 1e-4, "pre_norm %d: forced decoding matches the training NLL (max rel diff %.3g)", pre_norm, worst);
    test_ok(alone_same, "pre_norm %d: forced decoding scores identical alone and in a batch", pre_norm);

    struct search_opts o = {.beam = 1, .nbest = 1, .alpha = 0.6, .len_a = 1.0, .len_b = 5};
    struct search_result g[NS], g1, bm[NS];
    test_ok(search_batch(in, &o, NS, src, slen, g) == 0, "greedy batch: %s", nmt_errmsg());
    int inv = 1, fmatch = 1;
    for (int b = 0; b < NS; b++) {
        if (search_batch(in, &o, 1, &src[b], &slen[b], &g1) < 0 || !same_result(&g[b], &g1))
            inv = 0;
        search_result_free(&g1);
        /* the reported log-probability is the forced decoding of the output (if it ended by itself) */
        int n = (int)g[b].hyp[0].n;
        const uint32_t *hy = g[b].hyp[0].ids;
        if (n + 1 < search_max_len(&o, slen[b], c.max_len)) {
            if (search_score(in, 1, &src[b], &slen[b], &hy, &n, &lp1) < 0 ||
                fabs(lp1 - g[b].hyp[0].logprob) > 1e-4 * (1 + fabs(lp1)))
                fmatch = 0;
        }
    }
    test_ok(inv, "pre_norm %d: greedy translations and scores identical alone and in a batch", pre_norm);
    test_ok(fmatch, "pre_norm %d: greedy log-probabilities equal forced decoding of the output", pre_norm);

    /* beam 4: batch invariant; scores never below greedy's; n-best sorted */
    o.beam = 4;
    o.nbest = 4;
    test_ok(search_batch(in, &o, NS, src, slen, bm) == 0, "beam batch: %s", nmt_errmsg());
    int binv = 1, better = 1, sorted = 1;
    for (int b = 0; b < NS; b++) {
        if (search_batch(in, &o, 1, &src[b], &slen[b], &g1) < 0 || !same_result(&bm[b], &g1))
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

    /* reserving memory for larger batches first (and in between) changes no result */
    int tl4[NS];
    for (int b = 0; b < NS; b++)
        tl4[b] = tlen[b] + 3;
    test_ok(search_reserve(in, &o, NS, slen, NULL) == 0 && search_reserve(in, &o, NS, slen, tl4) == 0 &&
                infer_reserve(in, 3 * NS, c.max_len, 4, c.max_len) == 0,
            "pre_norm %d: reserve: %s", pre_norm, nmt_errmsg());
    struct search_result br[NS];
    int rsame = search_batch(in, &o, NS, src, slen, br) == 0;
    for (int b = 0; rsame && b < NS; b++)
        rsame = same_result(&bm[b], &br[b]);
    test_ok(rsame, "pre_norm %d: beam 4 results identical after infer_reserve", pre_norm);
    if (rsame)
        for (int b = 0; b < NS; b++)
            search_result_free(&br[b]);
    test_ok(search_score(in, NS, src, slen, tgt, tlen, lp) == 0 && search_reserve(in, &o, NS, slen, NULL) == 0 &&
                search_score(in, 1, &src[1], &slen[1], &tgt[1], &tlen[1], &lp1) == 0 && lp1 == lp[1],
            "pre_norm %d: forced decoding identical after search_reserve", pre_norm);
    test_ok(infer_reserve(in, 0, 1, 1, 1) < 0 && strstr(nmt_errmsg(), "empty batch") != NULL,
            "pre_norm %d: infer_reserve refuses an empty shape", pre_norm);
    for (int b = 0; b < NS; b++) {
        search_result_free(&g[b]);
        search_result_free(&bm[b]);
    }
    infer_free(in);
    model_free(m);
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
    /* the host's fallback for a backend without gemm_rowinv: products on blocks of 8 rows */
    be->ops.gemm_rowinv = NULL;
    test_ok(1, "# without gemm_rowinv (fixed row blocks)");
    run(be, 0);
    run(be, 1);
    backend_close(be);
    return test_done();
}
