/* batch_file.c: training batches in memory or streamed (see batch_file.h). */
#include "data/batch_file.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/util.h"
#include "io/file.h"

uint64_t batch_file_key(uint64_t a, uint64_t b, uint64_t c)
{
    return rng_mix64(rng_mix64(rng_mix64(a ^ 0x7472616E) + b) + c);
}

/* Reads every batch of B's stream into memory. 0, or -1 with the error set. */
static int read_all(struct batch_file *b)
{
    for (;;) {
        const unsigned char *p;
        size_t len;
        int rc = rec_read(b->r, &p, &len);
        if (rc == REC_END)
            break;
        if (rc < 0)
            return -1;
        if (b->n == b->cap) {
            size_t c = b->cap;
            if (NMT_GROW(b->off, c, b->n + 1) < 0 || NMT_GROW(b->len, b->cap, b->n + 1) < 0)
                return nmt_seterr("out of memory reading %s", b->name);
        }
        b->off[b->n] = b->data.len;
        b->len[b->n] = len;
        if (nmt_buf_append(&b->data, p, len) < 0)
            return nmt_seterr("out of memory reading %s", b->name);
        b->n++;
    }
    if (b->n == 0)
        return nmt_seterr("%s: no batches", b->name);
    b->perm = nmt_malloc(b->n * sizeof *b->perm);
    if (!b->perm)
        return -1;
    b->perm_epoch = UINT64_MAX;
    return 0;
}

int batch_file_open(struct batch_file *b, const char *path, int streaming, const char *fp)
{
    memset(b, 0, sizeof *b);
    b->name = nmt_path_name(path, 0);
    b->fd = nmt_open_in(path);
    if (b->fd < 0)
        return -1;
    int st;
    b->r = rec_reader_open(b->fd, b->name, "batch", &st);
    if (!b->r)
        return -1;
    const char *hv = rec_header_get(rec_reader_header(b->r), "vocab");
    b->has_vocab = hv != NULL;
    if (hv && strcmp(hv, fp))
        return nmt_seterr("%s: vocab fingerprint %s differs from the model's (%s)", b->name, hv, fp);
    b->streaming = streaming;
    return streaming ? 0 : read_all(b);
}

void batch_file_close(struct batch_file *b)
{
    rec_reader_free(b->r);
    if (b->fd > 0)
        close(b->fd);
    nmt_buf_free(&b->data);
    free(b->off);
    free(b->len);
    free(b->perm);
    memset(b, 0, sizeof *b);
    b->fd = -1;
}

/* Makes B's order for EPOCH: the file's, or a seeded shuffle of it. */
static void order(struct batch_file *b, uint64_t epoch, int shuffle, uint64_t seed)
{
    for (size_t i = 0; i < b->n; i++)
        b->perm[i] = (uint32_t)i;
    if (shuffle) {
        uint64_t s = batch_file_key(seed, epoch, 0x5348);
        for (size_t i = b->n - 1; i > 0; i--) {
            /* each draw mixes the last one; values past the last multiple of i + 1 are drawn again
             * (unbiased; as likely as (i + 1) / 2^64) */
            uint64_t limit = UINT64_MAX - UINT64_MAX % (i + 1);
            do
                s = rng_mix64(s + 0x9E3779B97F4A7C15ULL);
            while (s >= limit);
            size_t j = (size_t)(s % (i + 1));
            uint32_t t = b->perm[i];
            b->perm[i] = b->perm[j];
            b->perm[j] = t;
        }
    }
    b->perm_epoch = epoch;
}

int batch_file_get(struct batch_file *b, uint64_t epoch, uint64_t pos, int shuffle, uint64_t seed,
                   struct batch_record *br)
{
    if (b->streaming) {
        const unsigned char *p;
        size_t len;
        int rc = rec_read(b->r, &p, &len);
        if (rc != REC_OK)
            return rc;
        return batch_record_decode(br, p, len) < 0 ? nmt_seterr("%s: batch %llu: %s", b->name,
                                                                (unsigned long long)pos, nmt_errmsg()), -1 : REC_OK;
    }
    if (pos >= b->n)
        return REC_END;
    if (b->perm_epoch != epoch)
        order(b, epoch, shuffle, seed);
    size_t k = b->perm[pos];
    if (batch_record_decode(br, b->data.data + b->off[k], b->len[k]) < 0)
        return nmt_seterr("%s: batch %zu: %s", b->name, k, nmt_errmsg()), -1;
    return REC_OK;
}

int batch_file_each(struct batch_file *b, struct batch_record *br, int (*reserve)(void *arg, const struct batch_record *br),
                    void *arg)
{
    for (size_t i = 0; !b->streaming && i < b->n; i++)
        if (batch_record_decode(br, b->data.data + b->off[i], b->len[i]) < 0 || reserve(arg, br) < 0)
            return nmt_seterr("%s: batch %zu: %s", b->name, i, nmt_errmsg());
    return 0;
}
