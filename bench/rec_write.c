/* rec_write: writes N ids records of about 40 bytes each (a short tokenized pair with
 * Zipf-like ids) to stdout as a record stream, for the record-layer throughput benchmark. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/stream.h"
#include "io/records.h"
#include "cli/cli.h"

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    struct rec_writer *w = rec_writer_open(1, "stdout", "ids", "rec_write bench", NULL, 0, NULL);
    if (!w) {
        fprintf(stderr, "%s\n", nmt_errmsg());
        return 1;
    }
    struct nmt_buf b = {0};
    uint64_t s = 88172645463325252ULL, bytes = 0;
    uint32_t src[8], tgt[8];
    for (uint64_t i = 0; i < n; i++) {
        uint32_t len[2] = {3, 4};
        for (int k = 0; k < 8; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            uint32_t r = (uint32_t)(s % 8000);
            src[k] = 4 + r * r / 8000; /* frequent small ids, like a real vocabulary */
            tgt[k] = 4 + (uint32_t)((s >> 20) % 8000) * ((s >> 40) % 8000) / 8000;
        }
        const uint32_t *ids[2] = {src, tgt};
        b.len = 0;
        ids_record_encode(&b, i, 2, len, ids);
        bytes += b.len;
        if (rec_write(w, b.data, b.len) < 0) {
            fprintf(stderr, "%s\n", nmt_errmsg());
            return 1;
        }
    }
    if (rec_writer_close(w) < 0) {
        fprintf(stderr, "%s\n", nmt_errmsg());
        return 1;
    }
    fprintf(stderr, "rec_write: %llu records, %llu payload bytes (%.1f bytes/record)\n", (unsigned long long)n,
            (unsigned long long)bytes, (double)bytes / (double)n);
    nmt_buf_free(&b);
    return 0;
}
