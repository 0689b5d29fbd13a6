/* test_ranks: run/ranks.h on one rank (the ordered sum adds rounds in order, bit for bit as a
 * sequential sum; collectives copy) and the packing of search results between ranks (round trip,
 * truncation and malformed counts are errors), and the bucketed sum of the overlapped reduction. Several ranks are tested through mpirun in
 * tests/bats/mpi.bats. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "run/ranks.h"
#include "nn/search.h"
#include "test.h"

static void test_one_rank(void)
{
    struct comm *c = (struct comm *)1;
    test_ok(comm_open("none", &c) == 0 && c == NULL, "--comm none: one process");
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    test_ok(comm_open(NULL, &c) == 0 && c == NULL, "a launcher with one rank: no module");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    test_ok(comm_open("carrier-pigeon", &c) == -1 && strstr(nmt_errmsg(), "unknown communication module"),
            "an unknown module is an error: %s", nmt_errmsg());
    test_ok(comm_rank(NULL) == 0 && comm_size(NULL) == 1 && comm_local_threads(NULL) == 0, "rank 0 of 1");
    int64_t v[2] = {3, -4};
    int any = -1;
    test_ok(comm_sum_i64(NULL, v, 2) == 0 && v[0] == 3 && v[1] == -4, "sums over one rank keep the values");
    test_ok(comm_any(NULL, 0, &any) == 0 && any == 0 && comm_any(NULL, 7, &any) == 0 && any == 1, "any");
    char all[4];
    test_ok(comm_allgather(NULL, "abc", all, 4) == 0 && !strcmp(all, "abc"), "allgather copies");
}

static void test_ordered_sum(void)
{
    enum { N = 1001, ROUNDS = 5 };
    struct comm_sum s;
    float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out), *ref = calloc(N, sizeof *ref);
    test_ok(comm_sum_init(&s, NULL, N, NULL, 0) == 0, "init");
    unsigned seed = 12345;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (float)(1 << (round * 3));
            ref[i] = round == 0 ? x[i] : ref[i] + x[i];
        }
        comm_sum_add(&s, NULL, x, 1);
    }
    test_ok(comm_sum_result(&s, NULL, out) == 0 && !memcmp(out, ref, N * sizeof *out),
            "5 rounds: bit for bit the sequential sum");
    comm_sum_reset(&s);
    for (int i = 0; i < N; i++)
        x[i] = -0.0f;
    comm_sum_add(&s, NULL, x, 0); /* a round with no micro-batch adds nothing */
    comm_sum_add(&s, NULL, x, 1);
    test_ok(comm_sum_result(&s, NULL, out) == 0 && !memcmp(out, x, N * sizeof *out),
            "after a reset the first contribution is taken as is (-0 stays -0)");
    comm_sum_reset(&s);
    test_ok(comm_sum_result(&s, NULL, out) == 0 && out[0] == 0 && out[N - 1] == 0, "an empty sum is zero");
    comm_sum_free(&s);
    free(x);
    free(out);
    free(ref);
}

/* Buckets in any order (here the reverse of their offsets, as the backward pass finishes layers)
 * give the bits of one bucket; ranges that do not cover the floats once are refused. */
static void test_bucketed_sum(void)
{
    enum { N = 1000, ROUNDS = 4 };
    const size_t ranges[] = {700, 300, 250, 450, 0, 250};
    struct comm_sum one, bk;
    float *x = malloc(N * sizeof *x), *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    test_ok(comm_sum_init(&one, NULL, N, NULL, 0) == 0 && comm_sum_init(&bk, NULL, N, ranges, 3) == 0 &&
                bk.nb == 3 && bk.acc_len == N,
            "three buckets");
    unsigned seed = 777;
    int posted_ok = 1;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (float)(1 << (round * 5));
        }
        comm_sum_add(&one, NULL, x, 1);
        for (int i = 2; i >= 0; i--) { /* staged and posted one by one, the last bucket first */
            memcpy(comm_sum_stage(&bk, i), x + ranges[2 * i], ranges[2 * i + 1] * sizeof *x);
            int done = -1;
            posted_ok &= comm_sum_post(&bk, NULL, i) == 0 && comm_sum_poll(&bk, NULL, &done) == 0 && done == 3 - i;
        }
        posted_ok &= comm_sum_post(&bk, NULL, 1) == -1 && strstr(nmt_errmsg(), "posted twice") != NULL;
        posted_ok &= comm_sum_round(&bk, NULL, 1) == 0;
    }
    test_ok(posted_ok, "each bucket posts once a round and counts as done on one rank");
    test_ok(comm_sum_result(&one, NULL, a) == 0 && comm_sum_result(&bk, NULL, b) == 0 && !memcmp(a, b, N * sizeof *a),
            "the bucketed sum has the bits of the whole one");
    comm_sum_free(&one);
    comm_sum_free(&bk);
    const size_t gap[] = {0, 500, 600, 400}, overlap[] = {0, 600, 500, 500}, outside[] = {0, 500, 500, 501},
                 shared[] = {0, 600, 400, 400};
    test_ok(comm_sum_init(&bk, NULL, N, gap, 2) == -1 && strstr(nmt_errmsg(), "cover 900 floats, not 1000"),
            "a gap is refused: %s", nmt_errmsg());
    test_ok(comm_sum_init(&bk, NULL, N, overlap, 2) == -1 && strstr(nmt_errmsg(), "cover 1100"),
            "overlapping buckets are refused: %s", nmt_errmsg());
    test_ok(comm_sum_init(&bk, NULL, N, shared, 2) == -1 && strstr(nmt_errmsg(), "buckets 0 and 1 overlap"),
            "buckets that share floats are refused though their lengths add up: %s", nmt_errmsg());
    test_ok(comm_sum_init(&bk, NULL, N, outside, 2) == -1 && strstr(nmt_errmsg(), "lies outside"),
            "a bucket past the end is refused: %s", nmt_errmsg());
    test_ok(comm_sum_init(&bk, NULL, N, gap, 0) == -1, "no bucket is refused");
    free(x);
    free(a);
    free(b);
}

static void test_pack(void)
{
    uint32_t ids0[3] = {5, 6, 7}, ids1[1] = {9};
    float lps0[4] = {-1, -0.25f, -1.5f, -0.5f}, lps1[2] = {-3.5f, -0.5f};
    float att1[2 * 3] = {0.5f, 0.25f, 0.25f, 0, 0.125f, 0.875f};
    struct search_hyp h[2] = {{-1.5f, -3.25, 3, ids0, lps0, 0, NULL}, {-2.0f, -4.0, 1, ids1, lps1, 3, att1}};
    struct search_result r = {2, h}, empty = {0, NULL}, back;
    struct nmt_buf b = {0};
    test_ok(search_result_pack(&b, &r) == 0 && search_result_pack(&b, &empty) == 0, "pack two results");
    size_t off = 0;
    int ok = search_result_unpack(b.data, b.len, &off, &back) == 0 && back.nhyp == 2 && back.hyp[0].n == 3 &&
             !memcmp(back.hyp[0].ids, ids0, sizeof ids0) && back.hyp[0].score == -1.5f &&
             back.hyp[0].logprob == -3.25 && back.hyp[1].n == 1 && back.hyp[1].ids[0] == 9 &&
             !memcmp(back.hyp[0].lps, lps0, sizeof lps0) && !memcmp(back.hyp[1].lps, lps1, sizeof lps1) &&
             back.hyp[0].sn == 0 && !back.hyp[0].att && back.hyp[1].sn == 3 &&
             !memcmp(back.hyp[1].att, att1, sizeof att1);
    search_result_free(&back);
    ok &= search_result_unpack(b.data, b.len, &off, &back) == 0 && back.nhyp == 0 && off == b.len;
    search_result_free(&back);
    test_ok(ok, "they unpack to the same hypotheses, and the input is used up");
    int errs = 0;
    for (size_t cut = 0; cut < b.len - 4; cut++) {
        off = 0;
        errs += search_result_unpack(b.data, cut, &off, &back) == -1;
        search_result_free(&back);
    }
    test_ok(errs == (int)(b.len - 4), "every truncation of the first result is an error (%d of %zu)", errs, b.len - 4);
    uint32_t huge = 0x7fffffff;
    memcpy(b.data, &huge, 4);
    off = 0;
    test_ok(search_result_unpack(b.data, b.len, &off, &back) == -1 && strstr(nmt_errmsg(), "hypotheses"),
            "an impossible count is an error: %s", nmt_errmsg());
    search_result_free(&back);
    nmt_buf_free(&b);
}

int main(void)
{
    test_one_rank();
    test_ordered_sum();
    test_bucketed_sum();
    test_pack();
    return test_done();
}
