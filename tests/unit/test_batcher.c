/* test_batcher: unit tests of libcommon/data/batcher.c: the generator, options, header provenance,
 * summary formats, and one epoch end to end through temporary streams. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "data/batcher.h"
#include "io/stream.h"
#include "io/records.h"
#include "test.h"
#include "cli/cli.h"

/* ---- unit tests ---- */

static void test_rng(void)
{
    struct rng a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= rng_next(&a) == rng_next(&b);
    test_ok(same, "same seed gives the same sequence");
    rng_seed(&b, 43);
    test_ok(rng_next(&a) != rng_next(&b), "different seeds differ");
    /* splitmix64(0) first output, a published reference value */
    rng_seed(&a, 0);
    test_ok(a.s[0] == 0xe220a8397b1dcdafULL, "splitmix64 seeding matches the reference (%llx)",
            (unsigned long long)a.s[0]);
    int counts[7] = {0}, inrange = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = rng_below(&a, 7);
        if (v >= 7)
            inrange = 0;
        else
            counts[v]++;
    }
    test_ok(inrange, "rng_below stays in range");
    int flat = 1;
    for (int i = 0; i < 7; i++)
        flat &= counts[i] > 9000 && counts[i] < 11000;
    test_ok(flat, "rng_below is roughly uniform");
    test_ok(rng_below(&a, 1) == 0, "rng_below(1) is 0");
}

static void test_opts(void)
{
    struct batcher_opts o;
    batcher_opts_init(&o);
    test_ok(o.max_tokens == 4096 && o.window == 100000 && o.seed == 1 && o.shard_n == 1, "defaults");
    test_ok(batcher_opts_check(&o) == 0, "defaults are valid");
    o.shard_k = 1;
    test_ok(batcher_opts_check(&o) < 0 && strstr(nmt_errmsg(), "--shard"), "shard 1/1 rejected: %s", nmt_errmsg());
    batcher_opts_init(&o);
    o.max_ratio = 0.5;
    test_ok(batcher_opts_check(&o) < 0 && strstr(nmt_errmsg(), "--max-ratio"), "ratio below 1 rejected");
    batcher_opts_init(&o);
    o.max_tokens = 0;
    test_ok(batcher_new(&o) == NULL && strstr(nmt_errmsg(), "--max-tokens"), "batcher_new checks options");
    batcher_free(NULL);
    test_ok(1, "batcher_free(NULL) is a no-op");
}

static void test_kv(void)
{
    struct batcher_opts o;
    batcher_opts_init(&o);
    o.max_ratio = 1.5;
    o.shard_k = 2;
    o.shard_n = 4;
    struct batcher_kv kv;
    batcher_header_kv(&kv, &o, 3, "bpe:abc");
    const char *want[][2] = {{"vocab", "bpe:abc"}, {"max_tokens", "4096"}, {"max_ratio", "1.5"},
                             {"epochs", "3"},      {"shard", "2/4"},       {"seed", "1"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *got = NULL;
        for (size_t j = 0; j < kv.nkv; j++)
            if (strcmp(kv.kv[j].key, want[i][0]) == 0)
                got = kv.kv[j].value;
        test_ok(got && strcmp(got, want[i][1]) == 0, "header %s=%s (got %s)", want[i][0], want[i][1], got ? got : "none");
    }
    batcher_header_kv(&kv, &o, 1, NULL);
    test_ok(strcmp(kv.kv[0].key, "vocab") != 0, "no vocab key without an input vocab");
}

static void test_format(void)
{
    struct batcher_stats s = {.epochs = 1, .pairs = 10, .dropped_len = 2, .dropped_ratio = 1, .batches = 3,
                              .rows = 7, .tokens = 90, .cells = 100};
    char buf[512];
    batcher_stats_format(&s, BATCHER_TEXT, buf, sizeof buf);
    test_ok(strstr(buf, "10 pairs read, 3 dropped (2 too long, 1 over ratio)") && strstr(buf, "padding 10.00%"),
            "text summary: %s", buf);
    batcher_stats_format(&s, BATCHER_JSON, buf, sizeof buf);
    test_ok(strstr(buf, "\"pairs\":10") && strstr(buf, "\"padding\":0.100000}"), "json summary: %s", buf);
    batcher_stats_format(&s, BATCHER_CSV_ROW, buf, sizeof buf);
    test_ok(strcmp(buf, "1,10,2,1,0,3,7,90,100,0.100000") == 0, "csv row: %s", buf);
    size_t n = batcher_stats_format(&s, BATCHER_TEXT, buf, 8);
    test_ok(n == 7 && strlen(buf) == 7, "truncated to the buffer");
    struct batcher_stats z = {0};
    test_ok(batcher_padding(&z) == 0, "padding of nothing is 0");
}

/* Writes NPAIR pairs with pseudo-random lengths into a temporary ids stream; returns its fd. */
static int make_ids(int npair, uint64_t seed)
{
    char path[] = "/tmp/test_batcher.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    struct rec_writer *w = rec_writer_open(fd, "tmp", "ids", "test", NULL, 0, NULL);
    struct rng g;
    rng_seed(&g, seed);
    struct nmt_buf buf = {0};
    uint32_t a[80], c[80];
    for (int i = 0; i < 80; i++)
        a[i] = c[i] = 4 + (uint32_t)i;
    for (int i = 0; i < npair; i++) {
        uint32_t n[2] = {(uint32_t)rng_below(&g, 40), (uint32_t)rng_below(&g, 60)};
        const uint32_t *ids[2] = {a, c};
        buf.len = 0;
        ids_record_encode(&buf, (uint64_t)i, 2, n, ids);
        rec_write(w, buf.data, buf.len);
    }
    nmt_buf_free(&buf);
    if (rec_writer_close(w) < 0)
        return -1;
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static void test_epoch(void)
{
    int in = make_ids(1000, 7);
    test_ok(in >= 0, "temporary ids stream");
    if (in < 0)
        return;
    char path[] = "/tmp/test_batcher_out.XXXXXX";
    int out = mkstemp(path);
    unlink(path);
    struct batcher_opts o;
    batcher_opts_init(&o);
    o.max_tokens = 300;
    o.window = 256;
    o.max_len = 50;
    struct batcher *b = batcher_new(&o);
    int st;
    struct rec_reader *r = rec_reader_open(in, "tmp", "ids", &st);
    struct rec_writer *w = rec_writer_open(out, "out", "batch", "test", NULL, 0, NULL);
    test_ok(batcher_epoch(b, 0, r, "tmp", w) == 0, "epoch runs: %s", nmt_errmsg());
    rec_reader_free(r);
    rec_writer_close(w);
    const struct batcher_stats *s = batcher_stats(b);
    test_ok(s->pairs == 1000 && s->rows + s->dropped_len == 1000 && s->dropped_len > 0,
            "pairs %llu, rows %llu, dropped %llu", (unsigned long long)s->pairs, (unsigned long long)s->rows,
            (unsigned long long)s->dropped_len);

    lseek(out, 0, SEEK_SET);
    r = rec_reader_open(out, "out", "batch", &st);
    struct batch_record br = {0};
    const unsigned char *data;
    size_t len;
    unsigned char seen[1000] = {0};
    int budget = 1, dup = 0, lens = 1;
    uint64_t nb = 0;
    while (rec_read(r, &data, &len) == REC_OK && batch_record_decode(&br, data, len) == 0) {
        nb++;
        uint32_t wide = br.S > br.T ? br.S : br.T;
        budget &= (uint64_t)br.B * wide <= 300;
        for (uint32_t i = 0; i < br.B; i++) {
            dup |= seen[br.index[i]]++;
            lens &= br.src_len[i] <= 50 && br.tgt_len[i] <= 50 && br.tgt_len[i] >= 1;
        }
    }
    test_ok(nb == s->batches, "read back %llu batches", (unsigned long long)nb);
    test_ok(budget, "every batch within the token budget");
    test_ok(!dup, "no pair twice");
    test_ok(lens, "row lengths within --max-len");
    batch_record_free(&br);
    rec_reader_free(r);
    batcher_free(b);
    close(in);
    close(out);
}

int main(void)
{
    test_rng();
    test_opts();
    test_kv();
    test_format();
    test_epoch();
    return test_done();
}
