/* gen_stream: writes the record-stream fixtures of tests/fixtures/stream/ into DIR.
 * Each file is built through the real writer, then damaged on purpose where its name says so. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"

static const char *dir;

static int open_fixture(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    return fd;
}

static unsigned char *load(const char *name, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        exit(1);
    unsigned char *p = malloc(1 << 20);
    *n = fread(p, 1, 1 << 20, f);
    fclose(f);
    return p;
}

static void save(const char *name, const unsigned char *p, size_t n)
{
    int fd = open_fixture(name);
    if (n && write(fd, p, n) != (ssize_t)n)
        exit(1);
    close(fd);
}

static struct rec_writer *open_stream(int fd, const char *kind)
{
    struct rec_kv kv[] = {{"vocab", "5e1f0c2ab3d4e6f7"}, {"seed", "1"}};
    struct rec_writer *w = rec_writer_open(fd, "fixture", kind, "gen_stream 1", kv, 2, NULL);
    if (!w) {
        fprintf(stderr, "%s\n", nmt_errmsg());
        exit(1);
    }
    return w;
}

static void write_ids(const char *name, int chunks)
{
    int fd = open_fixture(name);
    struct rec_writer *w = open_stream(fd, "ids");
    struct nmt_buf b = {0};
    for (uint32_t i = 0; i < 5; i++) {
        uint32_t src[8], tgt[8];
        uint32_t n[2] = {i + 1, 5 - i};
        for (uint32_t k = 0; k < 8; k++) {
            src[k] = 10 + i * 7 + k;
            tgt[k] = 100 + i * 3 + k;
        }
        const uint32_t *ids[2] = {src, tgt};
        b.len = 0;
        ids_record_encode(&b, i, 2, n, ids);
        rec_write(w, b.data, b.len);
        if (chunks)
            rec_flush(w);
    }
    rec_writer_close(w);
    close(fd);
    nmt_buf_free(&b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_stream DIR\n");
        return 2;
    }
    dir = argv[1];
    struct nmt_buf b = {0};
    write_ids("ids.nmt", 1);
    write_ids("ids1.nmt", 0);

    int fd = open_fixture("tok.nmt");
    struct rec_writer *w = open_stream(fd, "tok");
    const char *s0[] = {"\xe2\x96\x81Zwei", "\xe2\x96\x81M\xc3\xa4nner", "\"q\\", "a b\tc"};
    uint32_t l0[] = {7, 10, 3, 5};
    const char *s1[] = {"\xe2\x96\x81Two", "\xe2\x96\x81men"};
    uint32_t l1[] = {6, 6};
    const char *const *toks[] = {s0, s1};
    const uint32_t *lens[] = {l0, l1};
    uint32_t nt[] = {4, 2};
    tok_record_encode(&b, 0, 2, nt, toks, lens);
    rec_write(w, b.data, b.len);
    rec_writer_close(w);
    close(fd);

    fd = open_fixture("batch.nmt");
    w = open_stream(fd, "batch");
    struct batch_record br = {0};
    batch_record_resize(&br, 2, 3, 4);
    uint32_t src[] = {11, 12, 2, 13, 2, 0}, tgt[] = {21, 22, 23, 2, 24, 2, 0, 0};
    memcpy(br.src, src, sizeof src);
    memcpy(br.tgt, tgt, sizeof tgt);
    br.index[0] = 7;
    br.index[1] = 3;
    br.src_len[0] = 3;
    br.src_len[1] = 2;
    br.tgt_len[0] = 4;
    br.tgt_len[1] = 2;
    b.len = 0;
    batch_record_encode(&b, &br);
    rec_write(w, b.data, b.len);
    rec_writer_close(w);
    close(fd);
    batch_record_free(&br);

    fd = open_fixture("hyp.nmt");
    w = open_stream(fd, "hyp");
    uint32_t hy[] = {5, 6, 7};
    b.len = 0;
    hyp_record_encode(&b, 0, 1, -2.25f, 3, hy);
    rec_write(w, b.data, b.len);
    b.len = 0;
    hyp_record_encode(&b, 0, 2, -3.5f, 2, hy);
    rec_write(w, b.data, b.len);
    rec_writer_close(w);
    close(fd);

    fd = open_fixture("blob.nmt");
    w = open_stream(fd, "blob");
    rec_write(w, "\x01\x02\xfe", 3);
    rec_write(w, "", 0);
    rec_writer_close(w);
    close(fd);

    fd = open_fixture("bad-record.nmt"); /* an ids stream whose record is not a valid ids payload */
    w = open_stream(fd, "ids");
    rec_write(w, "\x01\x02\x03", 3);
    rec_writer_close(w);
    close(fd);

    size_t n;
    unsigned char *p = load("ids.nmt", &n);
    save("empty.nmt", p, 0);
    save("truncated.nmt", p, n - 50);
    save("no-end-marker.nmt", p, n - 36);
    unsigned char *q = malloc(2 * n);
    memcpy(q, p, n);
    memcpy(q + n, p, n);
    save("concat.nmt", q, 2 * n);
    size_t tn;
    unsigned char *t = load("tok.nmt", &tn);
    q = realloc(q, n + tn);
    memcpy(q + n, t, tn);
    save("mixed-kinds.nmt", q, n + tn);
    memcpy(q, p, n);
    q[0] = 'X';
    save("bad-magic.nmt", q, n);
    memcpy(q, p, n);
    uint32_t hsize = nmt_le32(p + 4);
    q[8 + hsize + 20] ^= 0x10; /* inside the first chunk's compressed data */
    save("bad-checksum.nmt", q, n);
    memcpy(q, p, n);
    nmt_put16(q + 12, 2); /* major version 2, header checksum fixed so only the version differs */
    nmt_put32(q + 8 + hsize - 4, (uint32_t)nmt_fnv1a(NMT_FNV_INIT, q + 8, hsize - 4));
    save("future-version.nmt", q, n);
    memcpy(q, p, n);
    nmt_put64(q + n - 20, 99); /* trailer record count, checksum fixed */
    nmt_put32(q + n - 4, (uint32_t)nmt_fnv1a(NMT_FNV_INIT, q + n - 28, 24));
    save("bad-count.nmt", q, n);
    save("text.nmt", (const unsigned char *)"Two men are outside.\n", 21);
    free(p);
    free(q);
    free(t);
    nmt_buf_free(&b);
    return 0;
}
