/* fuzz_batch: libFuzzer target for the batcher. The first 4 bytes choose the options (token budget,
 * window, length limit with or without truncation, ratio), the rest is read as an ids stream. Any
 * input must end in success or an error, never a crash; on success every batch written must keep
 * the budget and the EOS/PAD layout, and hold each kept pair once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/batcher.h"
#include "io/stream.h"
#include "io/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int row_ok(const uint32_t *row, uint32_t len, uint32_t cols)
{
    for (uint32_t c = 0; c < cols; c++) {
        uint32_t v = row[c];
        if (c + 1 < len ? (v == NMT_PAD || v == NMT_EOS) : c + 1 == len ? v != NMT_EOS : v != NMT_PAD)
            return 0;
    }
    return 1;
}

static void check_output(int fd, const struct batcher_opts *o, const struct batcher_stats *s)
{
    lseek(fd, 0, SEEK_SET);
    int st;
    struct rec_reader *r = rec_reader_open(fd, "out", "batch", &st);
    if (!r)
        abort();
    struct batch_record b = {0};
    const unsigned char *d;
    size_t len;
    uint64_t rows = 0, tokens = 0;
    while ((st = rec_read(r, &d, &len)) == REC_OK) {
        if (batch_record_decode(&b, d, len) < 0)
            abort();
        uint64_t wide = b.S > b.T ? b.S : b.T;
        if ((uint64_t)b.B * wide > o->max_tokens || (o->max_sentences && b.B > o->max_sentences))
            abort();
        for (uint32_t i = 0; i < b.B; i++) {
            if (!row_ok(b.src + (size_t)i * b.S, b.src_len[i], b.S) || !row_ok(b.tgt + (size_t)i * b.T, b.tgt_len[i], b.T))
                abort();
            tokens += b.src_len[i] + b.tgt_len[i];
        }
        rows += b.B;
    }
    if (st != REC_END || rows != s->rows || tokens != s->tokens || rows + s->dropped_len + s->dropped_ratio != s->pairs)
        abort();
    batch_record_free(&b);
    rec_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    struct batcher_opts o;
    batcher_opts_init(&o);
    o.max_tokens = 1 + (uint64_t)data[0] * 2;
    o.window = 1 + data[1] % 32;
    o.truncate = data[2] & 1;
    o.max_len = data[2] >> 1;
    o.max_sentences = data[3] & 7;
    o.max_ratio = (data[3] >> 3) ? 1 + (data[3] >> 3) / 4.0 : 0;
    data += 4;
    size -= 4;
    int in = memfd_create("in", 0), out = memfd_create("out", 0);
    if (in < 0 || out < 0)
        abort();
    if (size && write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    int st;
    struct rec_reader *r = rec_reader_open(in, "fuzz", "ids", &st);
    if (r) {
        struct batcher *b = batcher_new(&o);
        struct rec_writer *w = rec_writer_open(out, "out", "batch", "fuzz", NULL, 0, NULL);
        if (!b || !w)
            abort();
        if (batcher_epoch(b, 0, r, "fuzz", w) == 0) {
            if (rec_writer_close(w) < 0)
                abort();
            check_output(out, &o, batcher_stats(b));
        } else {
            rec_writer_abort(w);
        }
        batcher_free(b);
        rec_reader_free(r);
    }
    close(in);
    close(out);
    return 0;
}
