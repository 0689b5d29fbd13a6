/* test_rec.c: record stream writer/reader: round trips, pipes, truncation, corruption, versions. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "io/stream.h"
#include "io/records.h"
#include "test.h"
#include "cli/cli.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A temporary file holding a stream; returns its fd positioned at 0. */
static int tmpfd(void)
{
    char path[] = "/tmp/nmt-test-rec-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    return fd;
}

static unsigned char *slurp(int fd, size_t *n)
{
    off_t end = lseek(fd, 0, SEEK_END);
    unsigned char *p = malloc((size_t)end + 1);
    if (pread(fd, p, (size_t)end, 0) != end)
        abort();
    *n = (size_t)end;
    return p;
}

static int fd_from_bytes(const unsigned char *p, size_t n)
{
    int fd = tmpfd();
    if (n && write(fd, p, n) != (ssize_t)n)
        abort();
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Writes NREC records of the given sizes with a small chunk bound into a memory image. */
static unsigned char *make_stream(const char *kind, unsigned major_patch, size_t nrec, size_t recsize, size_t bound,
                                  size_t *n)
{
    int fd = tmpfd();
    struct rec_kv kv[] = {{"vocab", "0123456789abcdef"}, {"seed", "7"}};
    struct rec_writer_opts o = {.chunk_bound = bound};
    struct rec_writer *w = rec_writer_open(fd, "tmp", kind, "test 1", kv, 2, &o);
    unsigned char buf[4096];
    for (size_t i = 0; i < nrec; i++) {
        for (size_t j = 0; j < recsize && j < sizeof buf; j++)
            buf[j] = (unsigned char)(i * 31 + j);
        rec_write(w, buf, recsize < sizeof buf ? recsize : sizeof buf);
    }
    rec_writer_close(w);
    unsigned char *p = slurp(fd, n);
    close(fd);
    if (major_patch) { /* rewrite the header's major version and fix its checksum */
        uint32_t size = nmt_le32(p + 4);
        nmt_put16(p + 8 + 4, (uint16_t)major_patch);
        nmt_put32(p + 8 + size - 4, (uint32_t)nmt_fnv1a(NMT_FNV_INIT, p + 8, size - 4));
    }
    return p;
}

/* Reads a whole stream; returns the final status and fills *count and a hash of the records. */
static int read_all(int fd, const char *kind, uint64_t *count, uint64_t *hash)
{
    int st;
    struct rec_reader *r = rec_reader_open(fd, "t", kind, &st);
    *count = 0;
    *hash = NMT_FNV_INIT;
    if (!r)
        return st;
    const unsigned char *d;
    size_t len;
    while ((st = rec_read(r, &d, &len)) == REC_OK) {
        (*count)++;
        *hash = nmt_fnv1a(*hash, &len, sizeof len);
        *hash = nmt_fnv1a(*hash, d, len);
    }
    rec_reader_free(r);
    return st;
}

static void test_round_trip(void)
{
    int fd = tmpfd();
    struct rec_writer_opts o = {.chunk_bound = 64 * 1024};
    struct rec_writer *w = rec_writer_open(fd, "tmp", "blob", "test 1", NULL, 0, &o);
    test_ok(w != NULL, "writer opens");
    size_t sizes[64];
    size_t nrec = 0, maxsz = 16u << 20;
    unsigned char *buf = malloc(maxsz);
    for (size_t i = 0; i < maxsz; i++)
        buf[i] = (unsigned char)rnd();
    sizes[nrec++] = 0;
    sizes[nrec++] = maxsz;
    sizes[nrec++] = 1;
    while (nrec < 60)
        sizes[nrec++] = (size_t)(rnd() % 5 == 0 ? rnd() % (3u << 20) : rnd() % 300);
    uint64_t h = NMT_FNV_INIT;
    int ok = 1;
    for (size_t i = 0; i < nrec; i++) {
        size_t off = (size_t)(rnd() % (maxsz - sizes[i] + 1));
        ok &= rec_write(w, buf + off, sizes[i]) == 0;
        h = nmt_fnv1a(h, &sizes[i], sizeof sizes[i]);
        h = nmt_fnv1a(h, buf + off, sizes[i]);
    }
    for (int i = 0; i < 20000; i++) { /* many small records, many chunks */
        size_t len = (size_t)(rnd() % 60);
        ok &= rec_write(w, buf + i, len) == 0;
        h = nmt_fnv1a(h, &len, sizeof len);
        h = nmt_fnv1a(h, buf + i, len);
        nrec++;
    }
    test_ok(ok && rec_writer_close(w) == 0, "writes %zu records of 0 bytes to 16 MiB", nrec);
    lseek(fd, 0, SEEK_SET);
    uint64_t count, hash;
    int st = read_all(fd, "blob", &count, &hash);
    test_ok(st == REC_END && count == nrec && hash == h, "reads back the same %zu records (status %s, %llu)", nrec,
            rec_status_name(st), (unsigned long long)count);
    free(buf);
    close(fd);
}

static void test_pipe(void)
{
    int data[2], hold[2];
    if (pipe(data) < 0 || pipe(hold) < 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        close(data[0]);
        close(hold[1]);
        struct rec_writer *w = rec_writer_open(data[1], "pipe", "blob", "test 1", NULL, 0, NULL);
        rec_write(w, "hello", 5);
        rec_flush(w);
        char c;
        if (read(hold[0], &c, 1) < 0) /* blocks until the parent has read the record */
            _exit(3);
        rec_write(w, "bye", 3);
        _exit(rec_writer_close(w) == 0 ? 0 : 1);
    }
    close(data[1]);
    close(hold[0]);
    alarm(10); /* a reader that waits for the writer to exit would hang here */
    int st;
    struct rec_reader *r = rec_reader_open(data[0], "pipe", "blob", &st);
    const unsigned char *d;
    size_t len;
    st = r ? rec_read(r, &d, &len) : st;
    test_ok(st == REC_OK && len == 5 && memcmp(d, "hello", 5) == 0, "a flushed record arrives while the writer blocks");
    if (write(hold[1], "x", 1) != 1)
        abort();
    st = rec_read(r, &d, &len);
    test_ok(st == REC_OK && len == 3, "the next record follows");
    test_ok(rec_read(r, &d, &len) == REC_END, "then a clean end");
    alarm(0);
    rec_reader_free(r);
    int ws;
    waitpid(pid, &ws, 0);
    test_ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "writer exits cleanly");
    close(data[0]);
    close(hold[1]);
}

static void test_truncation(void)
{
    size_t n;
    unsigned char *img = make_stream("blob", 0, 40, 100, 1000, &n);
    uint64_t c0, h0;
    int fd = fd_from_bytes(img, n);
    int st = read_all(fd, "blob", &c0, &h0);
    close(fd);
    test_ok(st == REC_END && c0 == 40, "small multi-chunk stream reads (%zu bytes)", n);
    int bad = 0;
    for (size_t cut = 0; cut < n; cut++) {
        uint64_t c, h;
        fd = fd_from_bytes(img, cut);
        st = read_all(fd, "blob", &c, &h);
        close(fd);
        if (st != REC_ETRUNC) {
            bad++;
            if (bad < 5)
                printf("# cut at %zu: %s (%s)\n", cut, rec_status_name(st), nmt_errmsg());
        }
    }
    test_ok(bad == 0, "truncation at each of %zu byte offsets reports truncated", n);
    free(img);
}

static void test_bit_flips(void)
{
    size_t n;
    unsigned char *img = make_stream("blob", 0, 30, 50, 600, &n);
    uint64_t c0, h0;
    int fd = fd_from_bytes(img, n);
    read_all(fd, "blob", &c0, &h0);
    close(fd);
    int silent = 0, errors = 0, same = 0;
    for (size_t i = 0; i < n * 8; i++) {
        img[i / 8] ^= (unsigned char)(1u << (i % 8));
        uint64_t c, h;
        fd = fd_from_bytes(img, n);
        int st = read_all(fd, "blob", &c, &h);
        close(fd);
        img[i / 8] ^= (unsigned char)(1u << (i % 8));
        if (st < 0)
            errors++;
        else if (c == c0 && h == h0)
            same++; /* a bit zstd ignores (e.g. an unused frame header bit): data unchanged */
        else {
            silent++;
            if (silent < 5)
                printf("# flip of bit %zu gave different records without an error\n", i);
        }
    }
    test_ok(silent == 0, "%zu single-bit flips: %d errors, %d harmless, %d silent changes", n * 8, errors, same, silent);
    free(img);
}

static void test_errors(void)
{
    size_t n;
    uint64_t c, h;
    unsigned char *img = make_stream("ids", 0, 3, 10, 0, &n);
    int fd = fd_from_bytes(img, n);
    int st = read_all(fd, "batch", &c, &h);
    close(fd);
    test_ok(st == REC_EKIND && strstr(nmt_errmsg(), "expected a batch stream, got ids 1.2"), "wrong kind: %s",
            nmt_errmsg());
    img[0] ^= 0xff;
    fd = fd_from_bytes(img, n);
    st = read_all(fd, NULL, &c, &h);
    close(fd);
    test_ok(st == REC_EMAGIC && strstr(nmt_errmsg(), "bad magic"), "wrong magic: %s", nmt_errmsg());
    free(img);
    img = make_stream("ids", 2, 3, 10, 0, &n);
    fd = fd_from_bytes(img, n);
    st = read_all(fd, NULL, &c, &h);
    close(fd);
    test_ok(st == REC_EVERSION && strstr(nmt_errmsg(), "version 2.2 is not supported"), "future major: %s",
            nmt_errmsg());
    free(img);
    /* header flags: bit 0 (alignments in hyp records) is read back; an unknown bit is refused */
    for (uint32_t flags = 1; flags <= 2; flags++) {
        fd = tmpfd();
        struct rec_writer_opts o = {.flags = flags};
        rec_writer_close(rec_writer_open(fd, "tmp", "hyp", "test 1", NULL, 0, &o));
        lseek(fd, 0, SEEK_SET);
        struct rec_reader *r = rec_reader_open(fd, "t", "hyp", &st);
        if (flags == REC_FLAG_ALIGN)
            test_ok(r && rec_reader_header(r)->flags == REC_FLAG_ALIGN, "flag bit 0 read back");
        else
            test_ok(!r && st == REC_ECORRUPT && strstr(nmt_errmsg(), "reserved header flags are set"),
                    "unknown flag refused: %s", nmt_errmsg());
        rec_reader_free(r);
        close(fd);
    }
    fd = fd_from_bytes((const unsigned char *)"", 0);
    st = read_all(fd, NULL, &c, &h);
    close(fd);
    test_ok(st == REC_ETRUNC && strstr(nmt_errmsg(), "empty input"), "empty input: %s", nmt_errmsg());
    fd = fd_from_bytes((const unsigned char *)"hello world\n", 12);
    st = read_all(fd, NULL, &c, &h);
    close(fd);
    test_ok(st == REC_EMAGIC, "text input: %s", nmt_errmsg());
}

/* A chunk whose record claims LEN bytes: must fail cleanly without allocating LEN. */
static void test_length_claims(void)
{
    uint32_t claims[] = {0xFFFFFFFFu, REC_MAX_RECORD + 1u, REC_MAX_RECORD - 16u};
    for (size_t k = 0; k < 3; k++) {
        size_t n;
        unsigned char *img = make_stream("blob", 0, 0, 0, 0, &n);
        /* header frame, then our chunk, then the original trailer (36 bytes) */
        size_t hdr = 8 + nmt_le32(img + 4);
        unsigned char payload[12];
        nmt_put32(payload, claims[k]);
        memcpy(payload + 4, "abcdefgh", 8);
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
        unsigned char frame[256];
        size_t fl = ZSTD_compress2(cc, frame, sizeof frame, payload, sizeof payload);
        ZSTD_freeCCtx(cc);
        unsigned char *out = malloc(n + fl);
        memcpy(out, img, hdr);
        memcpy(out + hdr, frame, fl);
        memcpy(out + hdr + fl, img + hdr, n - hdr);
        int fd = fd_from_bytes(out, n + fl);
        uint64_t c, h;
        int st = read_all(fd, NULL, &c, &h);
        close(fd);
        test_ok(st == REC_ECORRUPT, "record length claim %u: %s", claims[k], nmt_errmsg());
        free(out);
        free(img);
    }
}

static void test_concat(void)
{
    size_t n1, n2, n3;
    unsigned char *a = make_stream("ids", 0, 5, 10, 0, &n1);
    unsigned char *b = make_stream("ids", 0, 7, 10, 0, &n2);
    unsigned char *c = make_stream("tok", 0, 2, 10, 0, &n3);
    unsigned char *ab = malloc(n1 + n2 + n3);
    memcpy(ab, a, n1);
    memcpy(ab + n1, b, n2);
    int fd = fd_from_bytes(ab, n1 + n2);
    uint64_t cnt, h;
    int st = read_all(fd, "ids", &cnt, &h);
    close(fd);
    test_ok(st == REC_END && cnt == 12, "cat of two ids streams reads as one (%llu records)", (unsigned long long)cnt);
    memcpy(ab + n1, c, n3);
    fd = fd_from_bytes(ab, n1 + n3);
    st = read_all(fd, NULL, &cnt, &h);
    close(fd);
    test_ok(st == REC_EKIND && strstr(nmt_errmsg(), "follows one of kind"), "cat of ids and tok streams: %s", nmt_errmsg());
    free(a);
    free(b);
    free(c);
    free(ab);
}

static void test_codecs(void)
{
    struct nmt_buf b = {0};
    uint32_t s0[] = {5, 6, 7}, s1[] = {9};
    const uint32_t *ids[] = {s0, s1};
    uint32_t n[] = {3, 1};
    ids_record_encode(&b, 42, 2, n, ids);
    struct ids_record r = {0};
    int ok = ids_record_decode(&r, b.data, b.len) == 0 && r.index == 42 && r.nsides == 2 && r.n[0] == 3 &&
             r.n[1] == 1 && r.ids[0][2] == 7 && r.ids[1][0] == 9;
    test_ok(ok, "ids record round trip");
    test_ok(ids_record_decode(&r, b.data, b.len - 1) < 0, "short ids record rejected: %s", nmt_errmsg());
    ids_record_free(&r);
    b.len = 0;
    const char *t0[] = {"a", "bc"};
    uint32_t l0[] = {1, 2};
    const char *const *toks[] = {t0};
    const uint32_t *lens[] = {l0};
    uint32_t nt[] = {2};
    tok_record_encode(&b, 3, 1, nt, toks, lens);
    struct tok_record t = {0};
    ok = tok_record_decode(&t, b.data, b.len) == 0 && t.side[0].ntok == 2 && t.side[0].len[1] == 2 &&
         memcmp(t.side[0].tok[1], "bc", 2) == 0;
    test_ok(ok, "tok record round trip");
    const char *t1[] = {"a", "b\xc3("};
    uint32_t l1[] = {1, 3};
    const char *const *toks1[] = {t1};
    const uint32_t *lens1[] = {l1};
    b.len = 0;
    tok_record_encode(&b, 4, 1, nt, toks1, lens1);
    ok = tok_record_decode(&t, b.data, b.len) < 0 && strstr(nmt_errmsg(), "token 2 of side 1 is not valid UTF-8");
    test_ok(ok, "tok record with invalid UTF-8 refused: %s", nmt_errmsg());
    tok_record_free(&t);
    b.len = 0;
    struct batch_record br = {0}, bd = {0};
    batch_record_resize(&br, 2, 3, 2);
    for (int i = 0; i < 2; i++) {
        br.index[i] = (uint64_t)i;
        br.src_len[i] = 3 - (uint32_t)i;
        br.tgt_len[i] = 2;
    }
    const uint32_t src[6] = {7, 8, NMT_EOS, 9, NMT_EOS, NMT_PAD}, tgt[4] = {10, NMT_EOS, 11, NMT_EOS};
    memcpy(br.src, src, sizeof src);
    memcpy(br.tgt, tgt, sizeof tgt);
    batch_record_encode(&b, &br);
    ok = batch_record_decode(&bd, b.data, b.len) == 0 && bd.B == 2 && bd.S == 3 && bd.T == 2 && bd.src[3] == 9 &&
         bd.src[5] == NMT_PAD && bd.tgt[2] == 11 && bd.src_len[1] == 2;
    test_ok(ok, "batch record round trip");
    /* malformed rows: each is refused by name */
    static const struct { int side, cell; uint32_t id; const char *what; } bad[] = {
        {0, 2, 5, "does not end with </s>"},        /* row 0 source ends with 5 */
        {0, 5, 4, "is not <pad>"},                  /* row 1 source padding holds 4 */
        {0, 0, NMT_EOS, "special token inside"},    /* row 0 source has </s> before its end */
        {1, 3, 6, "does not end with </s>"},        /* row 1 target ends with 6 */
        {1, 0, NMT_PAD, "special token inside"},    /* row 0 target has <pad> inside */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        memcpy(br.src, src, sizeof src);
        memcpy(br.tgt, tgt, sizeof tgt);
        (bad[k].side ? br.tgt : br.src)[bad[k].cell] = bad[k].id;
        b.len = 0;
        batch_record_encode(&b, &br);
        ok = batch_record_decode(&bd, b.data, b.len) < 0 && strstr(nmt_errmsg(), bad[k].what);
        test_ok(ok, "batch row %zu refused: %s", k, nmt_errmsg());
    }
    memcpy(br.src, src, sizeof src);
    memcpy(br.tgt, tgt, sizeof tgt);
    b.len = 0;
    batch_record_encode(&b, &br);
    nmt_put32(b.data, 1000000);
    test_ok(batch_record_decode(&bd, b.data, b.len) < 0, "batch with a false row count rejected: %s", nmt_errmsg());
    batch_record_free(&br);
    batch_record_free(&bd);
    b.len = 0;
    hyp_record_encode(&b, 9, 1, -1.5f, 3, s0);
    struct hyp_record hr = {0};
    ok = hyp_record_decode(&hr, b.data, b.len) == 0 && hr.index == 9 && hr.score == -1.5f && hr.n == 3;
    test_ok(ok && !hr.aligned, "hyp record round trip");
    /* with an alignment (format 1.2): round trip, then a section cut short, and an output index
     * beyond the ids */
    const uint32_t pairs[] = {0, 0, 2, 1, 1, 2};
    test_ok(hyp_record_append_alignment(&b, 3, pairs) == 0, "alignment appended");
    ok = hyp_record_decode(&hr, b.data, b.len) == 0 && hr.n == 3 && hr.aligned && hr.npairs == 3 &&
         !memcmp(hr.pairs, pairs, sizeof pairs);
    test_ok(ok, "hyp record with an alignment round trip");
    test_ok(hyp_record_decode(&hr, b.data, b.len - 4) < 0, "alignment cut short rejected: %s", nmt_errmsg());
    test_ok(hyp_record_decode(&hr, b.data, 20 + 12 + 2) < 0, "2 bytes after the ids rejected: %s", nmt_errmsg());
    nmt_put32(b.data + b.len - 4, 3);
    test_ok(hyp_record_decode(&hr, b.data, b.len) < 0, "output index 3 of 3 ids rejected: %s", nmt_errmsg());
    b.len = 0;
    hyp_record_encode(&b, 9, 1, -1.5f, 3, s0);
    hyp_record_append_alignment(&b, 0, NULL);
    ok = hyp_record_decode(&hr, b.data, b.len) == 0 && hr.aligned && hr.npairs == 0;
    test_ok(ok, "hyp record with an empty alignment round trip");
    b.len = 0;
    hyp_record_encode(&b, 9, 1, -1.5f, 3, s0);
    ok = hyp_record_decode(&hr, b.data, b.len) == 0 && !hr.aligned && hr.npairs == 0;
    test_ok(ok, "a record without an alignment after one with");
    hyp_record_free(&hr);
    nmt_buf_free(&b);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_round_trip();
    test_pipe();
    test_truncation();
    test_bit_flips();
    test_errors();
    test_length_claims();
    test_concat();
    test_codecs();
    return test_done();
}
