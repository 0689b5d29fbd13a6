/* test_comm_local: the ranks of a local job (run/comm_local.h through run/ranks.h), forked here:
 * every collective moves the bytes it should, also when they span several chunks of the shared area
 * (which holds 16 MiB); the all-reduce and the ordered sum add in rank order, the bits of a
 * sequential sum on every rank; a rank that ends during a collective makes the others fail with a
 * message naming it, and rank 0 learns its status. Only rank 0 prints checks: the other ranks count
 * their failures and end with that count as their status, which comm_close reports. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "run/ranks.h"
#include "test.h"

/* The byte rank R puts at I of what it sends to rank J. */
static unsigned char pattern(int r, int j, size_t i)
{
    return (unsigned char)(i * 31u + (unsigned)r * 7u + (unsigned)j * 13u + (i >> 16));
}

/* A float of rank R at I whose sums depend on their order. */
static float value(int r, size_t i)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(r + 1) * 40503u;
    return ((float)(h >> 8) / 16777216.0f - 0.5f) * (float)(1 << (3 * r));
}

/* Counts the failures of the checks on rank R's copy of each collective. */
static int check_collectives(struct comm *c)
{
    int r = comm_rank(c), n = comm_size(c), bad = 0;
    /* allgather: 7 MiB each (a cell holds 16 MiB / 3) */
    size_t ag = (size_t)7 << 20;
    unsigned char *mine = malloc(ag), *all = malloc(ag * (size_t)n);
    for (size_t i = 0; i < ag; i++)
        mine[i] = pattern(r, 0, i);
    bad += !mine || !all || comm_allgather(c, mine, all, ag) < 0;
    for (int q = 0; q < n && !bad; q++)
        for (size_t i = 0; i < ag; i++)
            if (all[(size_t)q * ag + i] != pattern(q, 0, i)) {
                bad++;
                break;
            }
    /* broadcast from rank 1: 20 MiB (two chunks) */
    size_t bc = (size_t)20 << 20;
    unsigned char *buf = realloc(all, bc);
    all = NULL;
    for (size_t i = 0; buf && i < bc; i++)
        buf[i] = r == 1 ? pattern(1, 9, i) : 0;
    bad += !buf || comm_bcast(c, buf, bc, 1) < 0;
    for (size_t i = 0; buf && i < bc; i++)
        if (buf[i] != pattern(1, 9, i)) {
            bad++;
            break;
        }
    free(buf);
    free(mine);
    /* the all-reduce: 3 M floats (12 MiB), added in rank order */
    size_t nf = (size_t)3 << 20;
    float *x = malloc(nf * sizeof *x);
    for (size_t i = 0; x && i < nf; i++)
        x[i] = value(r, i);
    bad += !x || comm_allreduce_f32(c, x, nf) < 0;
    for (size_t i = 0; x && i < nf; i++) {
        float s = value(0, i);
        for (int q = 1; q < n; q++)
            s += value(q, i);
        if (memcmp(&s, &x[i], sizeof s)) {
            bad++;
            break;
        }
    }
    free(x);
    int64_t v[2] = {r + 1, (int64_t)r << 40};
    bad += comm_sum_i64(c, v, 2) < 0 || v[0] != 6 || v[1] != (int64_t)3 << 40;
    return bad;
}

/* The ordered sum of rounds of 2.5 M floats (an all-to-all of several chunks), the last round with
 * only the first two ranks' contributions: the bits of the sequential sum. */
static int check_ordered_sum(struct comm *c)
{
    enum { ROUNDS = 3 };
    size_t nf = (size_t)5 << 19;
    int r = comm_rank(c), n = comm_size(c), bad = 0;
    struct comm_sum s;
    float *x = malloc(nf * sizeof *x), *out = malloc(nf * sizeof *out);
    if (!x || !out || comm_sum_init(&s, c, nf, NULL, 0) < 0) {
        free(x), free(out);
        return 1;
    }
    for (int round = 0; round < ROUNDS; round++) {
        int count = round == ROUNDS - 1 ? 2 : n;
        for (size_t i = 0; i < nf; i++)
            x[i] = value(round * n + r, i);
        bad += comm_sum_add(&s, c, x, count) < 0;
    }
    bad += comm_sum_result(&s, c, out) < 0;
    for (size_t i = 0; i < nf && !bad; i++) {
        float ref = 0;
        for (int round = 0, k = 0; round < ROUNDS; round++)
            for (int q = 0; q < (round == ROUNDS - 1 ? 2 : n); q++, k++)
                ref = k == 0 ? value(0, i) : ref + value(round * n + q, i);
        if (memcmp(&ref, &out[i], sizeof ref))
            bad++;
    }
    comm_sum_free(&s);
    free(x);
    free(out);
    return bad;
}

static void test_collectives(void)
{
    struct comm *c = NULL;
    test_ok(comm_open_local(1, &c) == 0 && c == NULL, "one local rank: one process");
    if (comm_open_local(3, &c) < 0 || !c) {
        test_ok(0, "3 local ranks: %s", nmt_errmsg());
        return;
    }
    int bad = check_collectives(c) + check_ordered_sum(c);
    if (comm_rank(c) != 0) {
        comm_close(c);
        _exit(bad > 100 ? 100 : bad);
    }
    test_ok(comm_size(c) == 3 && comm_local_rank(c) == 0, "rank 0 of 3");
    test_ok(bad == 0, "rank 0: allgather, broadcast, all-reduce in rank order, sums, the ordered sum");
    test_ok(comm_close(c) == 0, "ranks 1 and 2 ended with status 0 (their checks passed): %s",
            bad ? "" : nmt_errmsg());
}

static void test_rank_ends(void)
{
    struct comm *c = NULL;
    if (comm_open_local(3, &c) < 0 || !c) {
        test_ok(0, "3 local ranks: %s", nmt_errmsg());
        return;
    }
    int r = comm_rank(c);
    char x[4] = "abc";
    if (r == 2) { /* ends without joining the collective */
        comm_close(c);
        _exit(3);
    }
    int rc = comm_bcast(c, x, sizeof x, 0);
    if (r == 1) { /* rank 0 fails and leaves: rank 1 is told so rather than left waiting */
        int ok = rc == -1 && strstr(nmt_errmsg(), "rank 0 left the job");
        comm_close(c);
        _exit(ok ? 0 : 1);
    }
    test_ok(rc == -1 && strstr(nmt_errmsg(), "rank 2 ended with status 3"),
            "a rank that ends during a collective fails it on rank 0: %s", nmt_errmsg());
    test_ok(comm_close(c) == -1 && strstr(nmt_errmsg(), "rank 2 ended with status 3"),
            "and comm_close reports its status: %s", nmt_errmsg());
}

int main(void)
{
    test_collectives();
    test_rank_ends();
    return test_done();
}
