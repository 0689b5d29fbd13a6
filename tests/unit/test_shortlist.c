/* test_shortlist.c: the vocabulary shortlist (libcommon/nn/shortlist.h): Dice ranking with the
 * frequent pieces left out, a sentence's candidates, the checkpoint tensors read back. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include "base/util.h"
#include "io/safetensors.h"
#include "nn/shortlist.h"

enum { V = 12 };

static int row_is(const struct shortlist *s, int src, int a, int b)
{
    const int32_t *r = s->table + (size_t)src * (size_t)s->per_source;
    return r[0] == a && r[1] == b;
}

/* Four pairs over pieces 4..11 (see the counts in the checks). */
static struct shortlist *build(int per_source, int nfreq)
{
    static const uint32_t s1[] = {4, 5}, t1[] = {8, 9}, s2[] = {4, 6}, t2[] = {8, 10}, s3[] = {5}, t3[] = {9, 9, 11},
                          s4[] = {7}, t4[] = {8};
    struct shortlist_counts *c = shortlist_counts_new(V);
    int ok = c && !shortlist_counts_add(c, s1, 2, t1, 2) && !shortlist_counts_add(c, s2, 2, t2, 2) &&
             !shortlist_counts_add(c, s3, 1, t3, 3) && !shortlist_counts_add(c, s4, 1, t4, 1);
    struct shortlist *s = ok ? shortlist_build(c, per_source, nfreq) : NULL;
    shortlist_counts_free(c);
    return s;
}

static void test_build(void)
{
    struct shortlist *s = build(2, 1);
    test_ok(s && s->vocab == V && s->per_source == 2 && s->nfreq == 1, "a shortlist of 2 targets a source, 1 frequent");
    if (!s)
        return;
    /* tokens: 8 and 9 three times each: the tie goes to the lower id */
    test_ok(s->freq[0] == 8, "the most frequent target piece, ties by lower id (got %d)", s->freq[0]);
    /* Dice(4,10) = 2/3 > Dice(4,9) = 1/2; 8 (Dice 0.8) is frequent, left out */
    test_ok(row_is(s, 4, 10, 9), "source 4: targets by Dice, the frequent one left out");
    test_ok(row_is(s, 5, 9, 11), "source 5: Dice(5,9) = 1 before Dice(5,11) = 2/3");
    test_ok(row_is(s, 6, 10, -1) && row_is(s, 7, -1, -1), "rows end with -1: source 6 has one target, 7 none");
    int empty = 1;
    for (int v = 0; v < V; v++)
        empty &= (v >= 4 && v <= 7) || row_is(s, v, -1, -1);
    test_ok(empty, "pieces never seen on the source side list nothing");

    unsigned char mark[V] = {0};
    int32_t out[V];
    uint32_t src[] = {6, 7, 12};
    int n = shortlist_candidates(s, src, 3, 0, out, mark);
    test_ok(n == 3 && out[0] == 2 && out[1] == 8 && out[2] == 10,
            "candidates: EOS, the frequent pieces, the listed ones, increasing; an id outside is skipped");
    n = shortlist_candidates(s, src, 2, 5, out, mark);
    test_ok(n == 5 && out[0] == 0 && out[1] == 1 && out[2] == 2 && out[3] == 8 && out[4] == 10,
            "fewer than asked: the lowest ids not yet in are added");
    int zero = 1;
    for (int v = 0; v < V; v++)
        zero &= !mark[v];
    test_ok(zero, "the scratch marks are left zero");

    char path[] = "/tmp/nmt-shortlist-XXXXXX";
    int fd = mkstemp(path);
    struct st_writer *w = st_writer_new();
    uint64_t one = 1;
    float x = 0;
    int wrote = fd >= 0 && w && !st_writer_add(w, "x", ST_F32, 1, &one, &x) && !shortlist_put(w, s) &&
                !st_writer_write(w, path);
    st_writer_free(w);
    struct st_file *f = wrote ? st_read(path) : NULL;
    struct shortlist *r = f ? shortlist_read(f, path, V) : NULL;
    test_ok(r && shortlist_present(f) && r->per_source == 2 && r->nfreq == 1 && r->freq[0] == 8 &&
                !memcmp(r->table, s->table, (size_t)V * 2 * sizeof *r->table),
            "written as checkpoint tensors and read back the same");
    struct shortlist *bad = f ? shortlist_read(f, path, V + 1) : NULL;
    test_ok(f && !bad && strstr(nmt_errmsg(), "must be I32 of shape (13, 1..13)"),
            "read for another vocabulary: refused (%s)", nmt_errmsg());
    shortlist_free(r);
    st_free(f);
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    shortlist_free(s);
}

static void test_errors(void)
{
    struct shortlist_counts *c = shortlist_counts_new(V);
    uint32_t ok[] = {4}, out[] = {12};
    test_ok(c && shortlist_counts_add(c, out, 1, ok, 1) < 0 && strstr(nmt_errmsg(), "source id 12 outside"),
            "a source id outside the vocabulary is refused (%s)", nmt_errmsg());
    test_ok(c && shortlist_counts_add(c, ok, 1, out, 1) < 0 && strstr(nmt_errmsg(), "target id 12 outside"),
            "a target id outside the vocabulary is refused");
    test_ok(c && !shortlist_build(c, 2, 1) && strstr(nmt_errmsg(), "no pairs"), "no pairs: no shortlist");
    test_ok(c && shortlist_counts_add(c, ok, 1, ok, 1) == 0 && shortlist_counts_pairs(c) == 1, "one pair counted");
    test_ok(c && !shortlist_build(c, 0, 1) && !shortlist_build(c, 2, V + 1) && !shortlist_build(c, V + 1, 0),
            "sizes outside 1..V targets and 0..V frequent pieces are refused");
    struct shortlist *s = c ? shortlist_build(c, 1, 0) : NULL;
    test_ok(s && s->table[4] == 4, "no frequent pieces: the table lists them all");
    shortlist_free(s);
    shortlist_counts_free(c);
}

int main(void)
{
    test_build();
    test_errors();
    return test_done();
}
