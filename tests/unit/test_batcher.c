/* test_batcher: unit tests of libcommon/batcher.c (no arguments), and the helper the nmt-batch Bats
 * suite uses to build inputs and read outputs:
 *   test_batcher gen [--kind KIND] [--vocab V]   TSV "source<TAB>target" lines on stdin -> ids stream
 *                                                 on stdout (a line without a TAB gives a one-sided
 *                                                 record; a token #N is the id N, any other
 *                                                 token hashes to an id >= 4)
 *   test_batcher dump FILE                       batch stream -> one line per row:
 *                                                 "batch index src_len tgt_len B S T src tgt"
 *                                                 (ids comma-joined without EOS, "-" when empty);
 *                                                 checks EOS and PAD placement, exit 1 if wrong
 *   test_batcher header FILE                     "kind K", "producer P", then key=value lines */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batcher.h"
#include "rec.h"
#include "records.h"
#include "test.h"
#include "util.h"

/* ---- helper modes ---- */

static uint32_t word_id(const char *w, size_t n)
{
    int digits = n > 1 && n < 11 && w[0] == '#';
    for (size_t i = 1; i < n; i++)
        if (w[i] < '0' || w[i] > '9')
            digits = 0;
    if (digits)
        return (uint32_t)strtoul(w + 1, NULL, 10);
    return 4 + (uint32_t)(nmt_fnv1a(NMT_FNV_INIT, w, n) % 30000);
}

/* Splits S (length N) on spaces into ids appended to *IDS; returns the count. */
static uint32_t split_ids(const char *s, size_t n, uint32_t **ids, size_t *cap)
{
    uint32_t k = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ')
            i++;
        size_t j = i;
        while (j < n && s[j] != ' ')
            j++;
        if (j > i) {
            if (k == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *ids = realloc(*ids, *cap * sizeof **ids);
                if (!*ids)
                    exit(1);
            }
            (*ids)[k++] = word_id(s + i, j - i);
        }
        i = j;
    }
    return k;
}

static int gen(int argc, char **argv)
{
    const char *kind = "ids", *vocab = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--kind") == 0)
            kind = argv[i + 1];
        else if (strcmp(argv[i], "--vocab") == 0)
            vocab = argv[i + 1];
    }
    struct rec_kv kv[1] = {{(char *)"vocab", (char *)vocab}};
    struct rec_writer *w = rec_writer_open(STDOUT_FILENO, "stdout", kind, "test_batcher", kv, vocab ? 1 : 0, NULL);
    if (!w) {
        fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
        return 1;
    }
    char *line = NULL;
    size_t lcap = 0, cap[2] = {0, 0};
    uint32_t *ids[2] = {NULL, NULL};
    ssize_t len;
    uint64_t index = 0;
    struct nmt_buf buf = {0};
    while ((len = getline(&line, &lcap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *tab = strchr(line, '\t');
        uint32_t n[2];
        unsigned nsides = tab ? 2 : 1;
        n[0] = split_ids(line, tab ? (size_t)(tab - line) : (size_t)len, &ids[0], &cap[0]);
        n[1] = tab ? split_ids(tab + 1, strlen(tab + 1), &ids[1], &cap[1]) : 0;
        buf.len = 0;
        const uint32_t *cids[2] = {ids[0], ids[1]};
        if (strcmp(kind, "ids") == 0) {
            if (ids_record_encode(&buf, index, nsides, n, cids) < 0)
                return 1;
        } else {
            nmt_buf_append(&buf, line, (size_t)len);
        }
        if (rec_write(w, buf.data, buf.len) < 0) {
            fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
            return 1;
        }
        index++;
    }
    free(line);
    free(ids[0]);
    free(ids[1]);
    nmt_buf_free(&buf);
    if (rec_writer_close(w) < 0) {
        fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
        return 1;
    }
    return 0;
}

static void print_ids(const uint32_t *ids, uint32_t n)
{
    if (n == 0)
        fputs("-", stdout);
    for (uint32_t i = 0; i < n; i++)
        printf(i ? ",%u" : "%u", ids[i]);
}

/* Checks one padded row: LEN ids ending with EOS (none special before it), then PAD to COLS. */
static int check_row(const uint32_t *row, uint32_t len, uint32_t cols)
{
    for (uint32_t c = 0; c < cols; c++) {
        uint32_t v = row[c];
        if (c + 1 < len ? (v == NMT_PAD || v == NMT_EOS) : c + 1 == len ? v != NMT_EOS : v != NMT_PAD)
            return -1;
    }
    return 0;
}

static int dump(const char *path, int header_only)
{
    int fd = nmt_open_in(path);
    if (fd < 0) {
        fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
        return 1;
    }
    int st;
    struct rec_reader *r = rec_reader_open(fd, nmt_path_name(path, 0), header_only ? NULL : "batch", &st);
    if (!r) {
        fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
        return 1;
    }
    if (header_only) {
        const struct rec_header *h = rec_reader_header(r);
        printf("kind %s\nproducer %s\n", h->kind, h->producer);
        for (size_t i = 0; i < h->nkv; i++)
            printf("%s=%s\n", h->kv[i].key, h->kv[i].value);
        rec_reader_free(r);
        return 0;
    }
    struct batch_record b = {0};
    const unsigned char *data;
    size_t len;
    uint64_t nb = 0;
    int rc = 0;
    while ((st = rec_read(r, &data, &len)) == REC_OK) {
        if (batch_record_decode(&b, data, len) < 0) {
            fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
            rc = 1;
            break;
        }
        for (uint32_t i = 0; i < b.B; i++) {
            const uint32_t *src = b.src + (size_t)i * b.S, *tgt = b.tgt + (size_t)i * b.T;
            if (check_row(src, b.src_len[i], b.S) < 0 || check_row(tgt, b.tgt_len[i], b.T) < 0) {
                fprintf(stderr, "test_batcher: batch %llu row %u: bad EOS/PAD layout\n", (unsigned long long)nb, i);
                rc = 1;
            }
            printf("%llu %llu %u %u %u %u %u ", (unsigned long long)nb, (unsigned long long)b.index[i],
                   b.src_len[i], b.tgt_len[i], b.B, b.S, b.T);
            print_ids(src, b.src_len[i] - 1);
            putchar(' ');
            print_ids(tgt, b.tgt_len[i] ? b.tgt_len[i] - 1 : 0);
            putchar('\n');
        }
        nb++;
    }
    if (st < 0) {
        fprintf(stderr, "test_batcher: %s\n", nmt_errmsg());
        rc = 1;
    }
    batch_record_free(&b);
    rec_reader_free(r);
    return rc;
}

/* ---- unit tests ---- */

static void test_rng(void)
{
    struct batcher_rng a, b;
    batcher_rng_seed(&a, 42);
    batcher_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 100; i++)
        same &= batcher_rng_next(&a) == batcher_rng_next(&b);
    test_ok(same, "same seed gives the same sequence");
    batcher_rng_seed(&b, 43);
    test_ok(batcher_rng_next(&a) != batcher_rng_next(&b), "different seeds differ");
    /* splitmix64(0) first output, a published reference value */
    batcher_rng_seed(&a, 0);
    test_ok(a.s[0] == 0xe220a8397b1dcdafULL, "splitmix64 seeding matches the reference (%llx)",
            (unsigned long long)a.s[0]);
    int counts[7] = {0}, inrange = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = batcher_rng_below(&a, 7);
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
    test_ok(batcher_rng_below(&a, 1) == 0, "rng_below(1) is 0");
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
    struct batcher_rng g;
    batcher_rng_seed(&g, seed);
    struct nmt_buf buf = {0};
    uint32_t a[80], c[80];
    for (int i = 0; i < 80; i++)
        a[i] = c[i] = 4 + (uint32_t)i;
    for (int i = 0; i < npair; i++) {
        uint32_t n[2] = {(uint32_t)batcher_rng_below(&g, 40), (uint32_t)batcher_rng_below(&g, 60)};
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

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gen") == 0)
        return gen(argc, argv);
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return dump(argv[2], 0);
    if (argc == 3 && strcmp(argv[1], "header") == 0)
        return dump(argv[2], 1);
    if (argc != 1) {
        fprintf(stderr, "usage: test_batcher [gen [--kind K] [--vocab V] | dump FILE | header FILE]\n");
        return 2;
    }
    test_rng();
    test_opts();
    test_kv();
    test_format();
    test_epoch();
    return test_done();
}
