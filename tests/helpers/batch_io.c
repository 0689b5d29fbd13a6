/* batch_io: builds inputs for and reads outputs of the nmt-batch Bats suite (tests/bats/batch.bats).
 *   batch_io gen [--kind KIND] [--vocab V]   TSV "source<TAB>target" lines on stdin -> ids stream on
 *                                             stdout (a line without a TAB gives a one-sided record;
 *                                             a token #N is the id N, any other token hashes to an
 *                                             id >= 4); with --kind other than ids, each line is
 *                                             written as a raw record of that kind, except
 *                                             --kind batch: each line is a one-row batch record
 *                                             of exactly the ids given (no EOS added), to
 *                                             build malformed batches; --kind hyp: each line
 *                                             "SCORE<TAB>ids" is a hyp record (SCORE may be nan);
 *                                             --kind tok: a tok record of the line's sides, tokens
 *                                             split at single spaces (two spaces: an empty token)
 *   batch_io dump FILE                       batch stream -> one line per row:
 *                                             "batch index src_len tgt_len B S T src tgt"
 *                                             (ids comma-joined without EOS, "-" when empty);
 *                                             checks EOS and PAD placement, exit 1 if wrong
 *   batch_io header FILE                     "kind K", "producer P", then key=value lines */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"


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

/* Encodes LINE (LEN bytes; sides split at a tab, tokens at single spaces) as tok record INDEX. */
static int tok_line(struct nmt_buf *out, uint64_t index, const char *line, size_t len)
{
    const char *tok[2][256];
    uint32_t tl[2][256], nt[2] = {0, 0};
    unsigned nsides = 1;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != ' ' && line[i] != '\t')
            continue;
        unsigned s = nsides - 1;
        if (nt[s] < 256) {
            tok[s][nt[s]] = line + start;
            tl[s][nt[s]++] = (uint32_t)(i - start);
        }
        if (i < len && line[i] == '\t')
            nsides = 2;
        start = i + 1;
    }
    const char *const *tp[2] = {tok[0], tok[1]};
    const uint32_t *lp[2] = {tl[0], tl[1]};
    return tok_record_encode(out, index, nsides, nt, tp, lp);
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
    struct rec_writer *w = rec_writer_open(STDOUT_FILENO, "stdout", kind, "batch_io", kv, vocab ? 1 : 0, NULL);
    if (!w) {
        fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
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
        } else if (strcmp(kind, "tok") == 0) {
            if (tok_line(&buf, index, line, (size_t)len) < 0)
                return 1;
        } else if (strcmp(kind, "hyp") == 0 && tab) {
            float score = strtof(line, NULL);
            if (hyp_record_encode(&buf, index, 1, score, n[1], ids[1]) < 0)
                return 1;
        } else if (strcmp(kind, "batch") == 0) {
            struct batch_record br = {0};
            if (batch_record_resize(&br, 1, n[0], n[1]) < 0)
                return 1;
            br.index[0] = index;
            br.src_len[0] = n[0];
            br.tgt_len[0] = n[1];
            memcpy(br.src, ids[0], n[0] * sizeof *br.src);
            if (n[1])
                memcpy(br.tgt, ids[1], n[1] * sizeof *br.tgt);
            int rc = batch_record_encode(&buf, &br);
            batch_record_free(&br);
            if (rc < 0)
                return 1;
        } else {
            nmt_buf_append(&buf, line, (size_t)len);
        }
        if (rec_write(w, buf.data, buf.len) < 0) {
            fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
            return 1;
        }
        index++;
    }
    free(line);
    free(ids[0]);
    free(ids[1]);
    nmt_buf_free(&buf);
    if (rec_writer_close(w) < 0) {
        fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
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
        fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
        return 1;
    }
    int st;
    struct rec_reader *r = rec_reader_open(fd, nmt_path_name(path, 0), header_only ? NULL : "batch", &st);
    if (!r) {
        fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
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
            fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
            rc = 1;
            break;
        }
        for (uint32_t i = 0; i < b.B; i++) {
            const uint32_t *src = b.src + (size_t)i * b.S, *tgt = b.tgt + (size_t)i * b.T;
            if (check_row(src, b.src_len[i], b.S) < 0 || check_row(tgt, b.tgt_len[i], b.T) < 0) {
                fprintf(stderr, "batch_io: batch %llu row %u: bad EOS/PAD layout\n", (unsigned long long)nb, i);
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
        fprintf(stderr, "batch_io: %s\n", nmt_errmsg());
        rc = 1;
    }
    batch_record_free(&b);
    rec_reader_free(r);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gen") == 0)
        return gen(argc, argv);
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return dump(argv[2], 0);
    if (argc == 3 && strcmp(argv[1], "header") == 0)
        return dump(argv[2], 1);
    fprintf(stderr, "usage: batch_io gen [--kind K] [--vocab V] | dump FILE | header FILE\n");
    return 2;
}
